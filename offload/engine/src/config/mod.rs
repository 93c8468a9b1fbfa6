//! The composition root of the configuration: every section, read from the environment in one
//! place.
//!
//! Each concern declares its own section with [`ringcast_proto::tunables!`] — its struct, its
//! documented defaults, its `RINGCAST_*` variables and its own checks: the state machine's
//! [`Limits`], [`ProtocolConfig`], [`ModelConfig`] and [`Topology`] (in `ringcast-proto`), the
//! fault injector's [`FaultConfig`], the runners' [`RunnerConfig`] and each fabric's
//! ([`UdpConfig`], [`DpdkConfig`], [`VerbsConfig`]). [`Config`] holds them all; it alone reads
//! the environment ([`Config::from_env`]) and checks what spans sections. The state machine is
//! handed [`Config::engine`], and a fabric its own section plus [`Config::fabric_setup`] (the
//! job, this node, the datagram size): neither sees the whole, so what each depends on is
//! visible in what it is handed.
//! Capacities are fixed at engine start: tables are sized from these values once and never grow.
mod fabrics;
mod runner;

pub use fabrics::{DpdkConfig, UdpConfig, VerbsConfig};
pub use ringcast_proto::config::{
    AlgorithmChoice, AllgatherParts, AlltoallBetween, Between, ConfigError, EngineConfig, FabricKind,
    JobSecret, Limits, LocalRank, ModelConfig, NodeRanks, ProtocolConfig, RootDelay, Topology, TunableRow,
    MAX_MTU,
};
pub use ringcast_proto::fault::FaultConfig;
pub use runner::{DmaMode, PinCpu, PollMode, RunnerConfig};

use crate::fabric::FabricSetup;
use ringcast_proto::comm::PeerId;

/// Every engine limit and knob, by section. See `ringcast info` or `docs/tunables.md`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// Capacities (`limits.*`).
    pub limits: Limits,
    /// The protocol (`protocol.*`).
    pub protocol: ProtocolConfig,
    /// The cost model (`model.*`).
    pub model: ModelConfig,
    /// The job and this engine's place in it (`topology.*`).
    pub topology: Topology,
    /// Fault injection on the fabric (`fault.*`).
    pub fault: FaultConfig,
    /// The polling loop and control sockets (`runner.*`).
    pub runner: RunnerConfig,
    /// The `udp` fabric (`udp.*`).
    pub udp: UdpConfig,
    /// The `dpdk` fabric (`dpdk.*`).
    pub dpdk: DpdkConfig,
    /// The `verbs` fabric (`verbs.*`).
    pub verbs: VerbsConfig,
}

impl Config {
    /// Defaults overridden by every `RINGCAST_*` variable that is set, then validated.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`Config::from_env`] with an explicit variable source (tests, the CLI).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let topology = Topology::parse(&get)?;
        let mut protocol = ProtocolConfig::parse(&get)?;
        if get("RINGCAST_MTU").is_none() {
            // The one default that depends on another section: a fabric's own datagram size.
            protocol.mtu = topology.fabric.default_mtu();
        }
        let udp = UdpConfig::parse(&get)?;
        if get("RINGCAST_MTU").is_none() && topology.fabric == FabricKind::Udp {
            // The path's datagram (the interface's MTU less the IP and UDP headers: 1472 on
            // 1500-byte Ethernet, 65000 on loopback); the Ethernet default when no route is
            // known yet or the member list does not name this node (validation says so).
            if let Some(size) = crate::fabric::udp::section_datagram(&udp, topology.node, MAX_MTU as usize) {
                protocol.mtu = size as u32;
            }
        }
        let c = Config {
            limits: Limits::parse(&get)?,
            protocol,
            model: ModelConfig::parse(&get)?,
            topology,
            fault: FaultConfig::parse(&get)?,
            runner: RunnerConfig::parse(&get)?,
            udp,
            dpdk: DpdkConfig::parse(&get)?,
            verbs: VerbsConfig::parse(&get)?,
        };
        c.validate()?;
        Ok(c)
    }

    /// `self` changed by `f` (tests: `Config::default().with(|c| c.protocol.mtu = 9000)`).
    pub fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }

    /// The sections the state machine runs on.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            limits: self.limits.clone(),
            protocol: self.protocol.clone(),
            model: self.model.clone(),
            topology: self.topology.clone(),
        }
    }

    /// What every fabric is told beyond its own section ([`FabricSetup`]), from the sections
    /// that own it. A fabric is handed this and its section, never `self`.
    pub fn fabric_setup(&self) -> FabricSetup {
        FabricSetup {
            job: self.topology.job.clone(),
            node: PeerId(self.topology.node),
            nodes: self.topology.nodes,
            mtu: self.protocol.mtu as usize,
            window: self.protocol.max_message_bytes as usize,
            max_groups: self.limits.max_comms as usize,
            log_level: self.runner.log_level,
        }
    }

    /// Each section's own checks, then those that span sections: the member list of the
    /// fabric in use (a fabric section) against the number of nodes (`topology`). A fabric not
    /// in use is not asked: a launcher may set every fabric's list and pick one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.engine().validate()?;
        self.fault.validate()?;
        self.runner.validate()?;
        self.udp.validate()?;
        self.dpdk.validate()?;
        self.verbs.validate()?;
        // A TCP control channel crosses a network: hosts must prove the job's secret there.
        if !self.runner.listen_tcp.is_empty() && self.topology.job_secret.0.is_none() {
            return ringcast_proto::config::invalid(
                "runner.listen_tcp needs topology.job_secret (RINGCAST_JOB_SECRET): TCP hosts prove it"
                    .into(),
            );
        }
        match self.topology.fabric {
            FabricKind::Udp => self.udp.check_members(self.topology.nodes),
            FabricKind::Dpdk => self.dpdk.check_members(self.topology.nodes),
            FabricKind::None | FabricKind::Shm | FabricKind::Verbs => Ok(()),
        }
    }

    /// Every tunable with its default, current value and meaning, section by section.
    pub fn describe(&self) -> Vec<TunableRow> {
        let mut rows = self.engine().rows();
        rows.extend(self.fault.rows());
        rows.extend(self.runner.rows());
        rows.extend(self.udp.rows());
        rows.extend(self.dpdk.rows());
        rows.extend(self.verbs.rows());
        rows
    }
}

#[cfg(test)]
mod tests;
