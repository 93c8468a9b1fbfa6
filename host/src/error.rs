//! The host library's error type: one variant per thing that can go wrong, each saying what.
use ringcast_abi::ctl::CtlStatus;
use ringcast_abi::{Status, StatusKind};
use std::time::Duration;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a host-library call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No engine listens under that name (or connecting failed).
    #[error("cannot reach engine {name:?}: {source}")]
    Connect {
        /// Engine name.
        name: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The engine was built for another ABI version.
    #[error("engine speaks ABI version {engine}, this library ABI version {library}")]
    AbiMismatch {
        /// The engine's version.
        engine: u32,
        /// Ours.
        library: u32,
    },
    /// The engine refused a control request.
    #[error("engine refused {request}: {}", status.message())]
    Refused {
        /// What was asked.
        request: &'static str,
        /// Why it was refused.
        status: CtlStatus,
    },
    /// No room: the submission ring is full or as many operations are in flight as completions
    /// fit. Reap completions, then post again.
    #[error("would block: submission ring full or {in_flight} operations in flight")]
    WouldBlock {
        /// Operations in flight.
        in_flight: usize,
    },
    /// The engine completed the operation with an error status.
    #[error("operation {cookie:#x} failed: {}", describe(*status))]
    Op {
        /// The operation's cookie.
        cookie: u64,
        /// Its status.
        status: Status,
    },
    /// `comm_create` refused: the engine serves its maximum number of communicators already
    /// (`max_comms`, `RINGCAST_MAX_COMMS`, the world included; completion status
    /// [`StatusKind::TooManyCommunicators`]). Free one and create again: a freed communicator's
    /// slot comes back as soon as its broadcasts are settled with the other engines.
    #[error("cannot create communicator {handle:#x}: the engine serves its maximum number of communicators (RINGCAST_MAX_COMMS)")]
    TooManyCommunicators {
        /// The communicator that could not be created.
        handle: u64,
    },
    /// The engine's control socket hung up: it stopped or died.
    #[error("the engine went away")]
    EngineGone,
    /// A control request got no reply in time (`ctl_timeout_ms`).
    #[error("the engine did not answer {request} within {timeout:?}")]
    Timeout {
        /// What was asked.
        request: &'static str,
        /// How long we waited.
        timeout: Duration,
    },
    /// A wait for a completion when nothing is in flight (or the cookie is not outstanding):
    /// it could never return.
    #[error("nothing to wait for: no operation in flight{}", cookie.map(|c| format!(" with cookie {c:#x}")).unwrap_or_default())]
    NothingInFlight {
        /// The cookie waited for, if any.
        cookie: Option<u64>,
    },
    /// The engine broke the ring protocol (e.g. completed more descriptors than were posted).
    #[error("engine protocol violation: {0}")]
    Protocol(&'static str),
    /// An offset/length outside a buffer or region.
    #[error("offset {offset} + length {len} is outside the {size}-byte buffer")]
    OutOfBounds {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Buffer size.
        size: u64,
    },
    /// The engine's attach segment is not valid.
    #[error("invalid attach segment: {0}")]
    Attach(#[from] ringcast_ring::attach::AttachError),
    /// The engine wrote an impossible completion-ring index.
    #[error("completion ring corrupt: {0}")]
    Ring(#[from] ringcast_ring::RingError),
    /// Configuration from the environment did not parse.
    #[error(transparent)]
    Config(#[from] ringcast_offload::config::ConfigError),
    /// The engine detached this host and said why (an unasked `ERROR`, `seq` 0, before it
    /// closed the connection): `BACKEND` when its memory could no longer be reached (an RDMA
    /// connection failed), `BAD_REQUEST` when its rings broke the protocol.
    #[error("the engine detached this host: {}", status.message())]
    Detached {
        /// Why.
        status: CtlStatus,
    },
    /// Over TCP: the engine did not prove the job's secret over this connection (`AUTH_OK`
    /// without the right proof: not the job's engine), or a control message failed its MAC —
    /// changed, replayed, reordered or injected on the way, as a relay without the secret
    /// would. The connection is not believed again.
    #[error("control connection not authentic: {0}")]
    Unauthentic(&'static str),
    /// The `rdma` backend could not be set up on this side (no device, no support in this
    /// build, a verb failed).
    #[error("rdma: {0}")]
    Rdma(String),
    /// An operating-system error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn describe(status: Status) -> String {
    match StatusKind::try_from(status) {
        Ok(k) => format!("{k:?} ({})", k.message()),
        Err(raw) => format!("unknown status {}", raw.0),
    }
}

impl Error {
    /// The status, when this is an operation failure.
    pub fn status(&self) -> Option<StatusKind> {
        match self {
            Error::Op { status, .. } => StatusKind::try_from(*status).ok(),
            Error::TooManyCommunicators { .. } => Some(StatusKind::TooManyCommunicators),
            _ => None,
        }
    }
}
