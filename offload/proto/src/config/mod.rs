//! Configuration by concern: one typed struct per section, each declared once with
//! [`tunables!`](crate::tunables) and validating itself.
//!
//! The state machine sees only the sections it runs on — [`Limits`], [`ProtocolConfig`],
//! [`ModelConfig`], [`Topology`] and the fault injector's `FaultConfig` — never the whole
//! configuration: the composition root (`ringcast_offload::Config`) holds every section (its own:
//! the polling loop and each fabric) and is the only code that reads the environment. Each
//! declaration derives the struct, its `Default`, the parser over a variable source and the rows
//! `ringcast info` prints, so the documentation a user reads is the code that runs.
mod limits;
mod model;
mod protocol;
mod topology;

pub use limits::Limits;
pub use model::ModelConfig;
pub use protocol::{
    AlgorithmChoice, AllgatherBetween, AllgatherParts, AlltoallBetween, Between, ProtocolConfig, RootDelay,
    MAX_MTU,
};
pub use topology::{FabricKind, JobSecret, LocalRank, NodeRanks, Topology, ETHERNET_MTU, SHM_MTU};

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// The sections the state machine runs on, and nothing else: what [`crate::intake`],
/// [`crate::transfer`] and [`crate::model`] are built from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineConfig {
    /// Capacities.
    pub limits: Limits,
    /// The protocol's knobs.
    pub protocol: ProtocolConfig,
    /// The cost model.
    pub model: ModelConfig,
    /// The job and this engine's place in it.
    pub topology: Topology,
}

impl EngineConfig {
    /// Every section from `get` (a `RINGCAST_*` name → value source), then validated.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let c = EngineConfig {
            limits: Limits::parse(get)?,
            protocol: ProtocolConfig::parse(get)?,
            model: ModelConfig::parse(get)?,
            topology: Topology::parse(get)?,
        };
        c.validate()?;
        Ok(c)
    }

    /// `self` changed by `f` (tests and experiments: `EngineConfig::default().with(|c| c.protocol.mtu = 9000)`).
    pub fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }

    /// Each section's own checks, then those between sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate()?;
        self.protocol.validate()?;
        self.model.validate()?;
        self.topology.validate()?;
        if self.topology.ppn > self.limits.max_hosts {
            return invalid(format!(
                "topology.ppn {} above limits.max_hosts ({})",
                self.topology.ppn, self.limits.max_hosts
            ));
        }
        Ok(())
    }

    /// Every section's rows, in order.
    pub fn rows(&self) -> Vec<TunableRow> {
        let mut rows = self.limits.rows();
        rows.extend(self.protocol.rows());
        rows.extend(self.model.rows());
        rows.extend(self.topology.rows());
        rows
    }
}

/// One row of `ringcast info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunableRow {
    /// `section.field`.
    pub name: &'static str,
    /// Environment variable that overrides it.
    pub env: &'static str,
    /// Default, rendered.
    pub default: String,
    /// Value in this configuration, rendered.
    pub current: String,
    /// What it means.
    pub meaning: &'static str,
}

/// A tunable's value did not parse, or the values break a relationship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// `RINGCAST_X=...` could not be parsed.
    Parse {
        /// Variable name.
        env: &'static str,
        /// Its value — or, for a tunable declared `secret` (key material: the job's secret),
        /// [`HIDDEN_VALUE`]: a value that did not parse may still be most of a key, so it is
        /// never kept where a message, a log line, `Debug` or a panic could print it.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// Values parse but do not fit together or exceed a hard limit.
    Invalid(String),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::Parse { env, value, reason } if value == HIDDEN_VALUE => {
                write!(f, "{env} (value not shown: key material is never printed): {reason}")
            }
            ConfigError::Parse { env, value, reason } => write!(f, "{env}={value:?}: {reason}"),
            ConfigError::Invalid(m) => write!(f, "invalid configuration: {m}"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// What a [`ConfigError::Parse`] of a `secret` tunable holds instead of the value.
pub const HIDDEN_VALUE: &str = "(hidden: key material is never printed)";

/// The markers a `tunables!` declaration may end with (`…, "meaning", secret;`): a name other
/// than these fails to compile.
#[doc(hidden)]
#[allow(non_upper_case_globals)]
pub mod markers {
    /// The value is key material: a value that does not parse is not echoed.
    pub const secret: bool = true;
}

/// The value a [`ConfigError::Parse`] keeps: `raw`, or [`HIDDEN_VALUE`] for a secret tunable.
#[doc(hidden)]
pub fn kept_value(raw: &str, secret: bool) -> String {
    String::from(if secret { HIDDEN_VALUE } else { raw })
}

/// `Err(ConfigError::Invalid(..))` with a formatted message.
pub fn invalid<T>(message: String) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(message))
}

/// Declares one configuration section: the struct with a documented field per tunable, its
/// `Default`, `parse` over a variable source (`RINGCAST_*` name → value), `from_lookup` (parse,
/// then the section's own hand-written `validate`) and `rows` for `ringcast info`.
///
/// ```text
/// tunables! {
///     /// The section's doc.
///     pub struct Limits in "limits" {
///         /// Field doc.
///         max_hosts: u32 = 64, "RINGCAST_MAX_HOSTS", "host processes one engine serves at once";
///         /// Key material ends with `secret`: a bad value is never echoed in the error.
///         key: Key = Key(None), "RINGCAST_KEY", "the key", secret;
///     }
/// }
/// ```
#[macro_export]
macro_rules! tunables {
    (
        $(#[$sdoc:meta])*
        pub struct $Section:ident in $section:literal {
            $( $(#[$doc:meta])* $name:ident : $ty:ty = $default:expr, $env:literal, $meaning:literal $(, $marker:ident)?; )*
        }
    ) => {
        $(#[$sdoc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $Section {
            $( $(#[$doc])* #[doc = concat!("\n\nEnvironment: `", $env, "`.")] pub $name: $ty, )*
        }

        impl Default for $Section {
            fn default() -> Self {
                $Section { $( $name: $default, )* }
            }
        }

        impl $Section {
            /// The section's name (the prefix of its rows in `ringcast info`).
            pub const SECTION: &'static str = $section;

            /// Defaults overridden by every variable `get` knows, not yet validated.
            pub fn parse(
                get: &dyn Fn(&str) -> Option<$crate::__alloc::string::String>,
            ) -> Result<Self, $crate::config::ConfigError> {
                #[allow(unused_mut)]
                let mut c = Self::default();
                $(
                    if let Some(v) = get($env) {
                        c.$name = v.trim().parse::<$ty>().map_err(|e| $crate::config::ConfigError::Parse {
                            env: $env,
                            value: $crate::config::kept_value(&v, false $(|| $crate::config::markers::$marker)?),
                            reason: $crate::__alloc::string::ToString::to_string(&e),
                        })?;
                    }
                )*
                Ok(c)
            }

            /// [`Self::parse`], then [`Self::validate`].
            pub fn from_lookup(
                get: &dyn Fn(&str) -> Option<$crate::__alloc::string::String>,
            ) -> Result<Self, $crate::config::ConfigError> {
                let c = Self::parse(get)?;
                c.validate()?;
                Ok(c)
            }

            /// Every tunable of the section with its default, current value and meaning.
            pub fn rows(&self) -> $crate::__alloc::vec::Vec<$crate::config::TunableRow> {
                let d = Self::default();
                $crate::__alloc::vec![ $( $crate::config::TunableRow {
                    name: concat!($section, ".", stringify!($name)),
                    env: $env,
                    default: $crate::__alloc::string::ToString::to_string(&d.$name),
                    current: $crate::__alloc::string::ToString::to_string(&self.$name),
                    meaning: $meaning,
                }, )* ]
            }
        }
    };
}
