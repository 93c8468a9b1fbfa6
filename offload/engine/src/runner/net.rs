//! The engine's network side: the fabric the state machine's frames travel on, driven next to
//! the host rings in the same polling loop.
//!
//! The state machine ([`Engine`]) knows nothing of the fabric: each pass hands it the fabric's
//! waiting datagrams ([`Net::receive`]), and the loop carries out the frames, joins and leaves it
//! asks for through [`Net::send`], [`Net::multicast`], [`Net::join`] and [`Net::leave`]. The
//! fabric is built here from its own configuration section and wrapped in the fault injector
//! (`fault.*`) when one is asked for.
use crate::config::{Config, FabricKind};
use crate::fabric::faulty::Faulty;
use crate::fabric::shm::ShmFabric;
use crate::fabric::udp::{Interface, UdpFabric, UdpOptions};
use crate::fabric::Fabric;
use ringcast_proto::comm::ident::IpFamily;
use ringcast_proto::comm::{GroupId, PeerId};
pub use ringcast_proto::engine::CommStats;
use ringcast_proto::engine::Engine;
use ringcast_proto::fault::FaultInjector;
use ringcast_proto::Nanos;
use sha2::{Digest, Sha256};

/// Datagrams taken from the fabric per pass (the host rings get their turn in between).
const FRAMES_PER_PASS: usize = 64;

/// The broadcast side's counters (`NET_STATS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Synchronization epochs completed.
    pub syncs: u64,
    /// Datagrams the fabric lost before the engine read them.
    pub overrun: u64,
    /// Frames dropped for a bad CRC.
    pub crc_drops: u64,
    /// Frames dropped for any other reason (foreign job, out of window, malformed…).
    pub other_drops: u64,
    /// Repair datagrams sent.
    pub repair_frames: u64,
}

/// The fabric of an engine.
pub struct Net {
    fabric: Box<dyn Fabric + Send>,
    /// Frames of this pass, copied out of the fabric so the engine can send while handling
    /// them (sized once: `FRAMES_PER_PASS` MTUs).
    arena: Vec<u8>,
    frames: Vec<(PeerId, usize, usize)>,
}

impl Net {
    /// The fabric `config` asks for, if any (`fabric = none`: `None`), with the world
    /// communicator's group `world` joined.
    pub fn new(config: &Config, world: Option<GroupId>) -> std::io::Result<Option<Net>> {
        let mtu = config.protocol.mtu as usize;
        let mut fabric: Box<dyn Fabric + Send> = match config.topology.fabric {
            FabricKind::None => return Ok(None),
            FabricKind::Shm => with_faults(
                ShmFabric::new(
                    &config.topology.job,
                    PeerId(config.topology.node),
                    config.topology.nodes,
                    mtu,
                )?,
                config,
            ),
            // The UDP fabric runs the fault injector itself (it releases held datagrams).
            FabricKind::Udp => Box::new(udp_fabric(config)?),
            #[cfg(feature = "dpdk")]
            FabricKind::Dpdk => with_faults(crate::fabric::dpdk::from_config(config)?, config),
            #[cfg(not(feature = "dpdk"))]
            FabricKind::Dpdk => {
                return Err(std::io::Error::other(
                    "fabric dpdk: this engine was built without the `dpdk` feature",
                ))
            }
            #[cfg(feature = "verbs")]
            FabricKind::Verbs => with_faults(crate::fabric::verbs::from_config(config)?, config),
            #[cfg(not(feature = "verbs"))]
            FabricKind::Verbs => {
                return Err(std::io::Error::other(
                    "fabric verbs: this engine was built without the `verbs` feature",
                ))
            }
        };
        if let Some(group) = world {
            fabric.join(&group)?;
        }
        if config.topology.job_secret.0.is_none() && config.topology.nodes > 1 && config.runner.log_level > 0
        {
            eprintln!(
                "ringcast-engine: RINGCAST_JOB_SECRET is unset: the world communicator's frames are keyed by the \
                 job name {:?} alone, so anyone who knows it can forge them (ringcast run and the MPI interposer set one)",
                config.topology.job
            );
        }
        Ok(Some(Net {
            fabric,
            arena: vec![0; FRAMES_PER_PASS * mtu],
            frames: Vec::with_capacity(FRAMES_PER_PASS),
        }))
    }

    /// Hands the fabric's waiting datagrams (at most `FRAMES_PER_PASS`) to `engine`; true if
    /// there were any.
    pub fn receive(&mut self, engine: &mut Engine, now: Nanos) -> bool {
        let mtu = self.fabric.mtu();
        let Net { fabric, arena, frames } = self;
        frames.clear();
        let mut used = 0;
        fabric.poll(FRAMES_PER_PASS, &mut |from, d| {
            if d.len() <= mtu && used + d.len() <= arena.len() {
                arena[used..used + d.len()].copy_from_slice(d);
                frames.push((from, used, d.len()));
                used += d.len();
            }
        });
        for &(from, at, len) in frames.iter() {
            engine.handle_frame(from, &arena[at..at + len], now);
        }
        !frames.is_empty()
    }

    /// Sends `frame` to engine `to`.
    pub fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.fabric.send(to, frame);
    }

    /// Multicasts `frame` to `group`.
    pub fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.fabric.multicast(group, frame);
    }

    /// Joins `group`; false if the fabric refused.
    pub fn join(&mut self, group: &GroupId) -> bool {
        self.fabric.join(group).is_ok()
    }

    /// Leaves `group`.
    pub fn leave(&mut self, group: &GroupId) {
        self.fabric.leave(group);
    }

    /// Hands what the fabric batched to the device.
    pub fn flush(&mut self) {
        self.fabric.flush();
    }

    /// The engine is about to sleep: the fabric's doorbell value, or `None` when the fabric
    /// cannot wake a sleeper (see [`Fabric::arm`]).
    pub fn arm(&self) -> Option<u32> {
        self.fabric.arm()
    }

    /// The word [`Net::arm`]'s value refers to.
    pub fn bell(&self) -> Option<&std::sync::atomic::AtomicU32> {
        self.fabric.bell()
    }

    /// Awake again.
    pub fn disarm(&self) {
        self.fabric.disarm();
    }

    /// The communicators' life (`COMMS`), with the groups the fabric holds.
    pub fn comm_stats(&self, engine: &Engine) -> CommStats {
        CommStats { groups: u32::try_from(self.fabric.groups()).unwrap_or(u32::MAX), ..engine.comm_stats() }
    }

    /// The counters a host reads with `NET_STATS`.
    pub fn stats(&self, engine: &Engine) -> NetStats {
        let p = engine.proto_counters();
        let crc = p.drops[ringcast_abi::frame::DropReason::BadCrc as usize];
        NetStats {
            syncs: p.syncs,
            overrun: self.fabric.counters().overrun,
            crc_drops: crc,
            other_drops: p.drops.iter().sum::<u64>() - crc,
            repair_frames: p.repair_frames,
        }
    }

    /// The fabric's counters (datagrams, overruns) and the protocol's (drops, repairs).
    pub fn describe(&self, engine: &Engine) -> String {
        let f = self.fabric.counters();
        let p = engine.proto_counters();
        format!(
            "fabric sent {} multicast {} received {} overrun {} refused {}; protocol repair frames {} syncs {} drops {}",
            f.sent,
            f.multicast,
            f.received,
            f.overrun,
            f.refused,
            p.repair_frames,
            p.syncs,
            p.drops.iter().sum::<u64>()
        )
    }
}

/// `fabric` behind the `RINGCAST_FAULT_*` injector when `config` asks for faults (every fabric
/// but `udp`, which injects them itself to release held datagrams in order).
fn with_faults<F: Fabric + Send + 'static>(fabric: F, config: &Config) -> Box<dyn Fabric + Send> {
    match FaultInjector::from_config(&config.fault, crate::entropy::fault_seed()) {
        Some(inj) => Box::new(Faulty::new(fabric, inj)),
        None => Box::new(fabric),
    }
}

/// The UDP fabric `config` describes: member `node` of `udp_members`, groups of the list's
/// family, the multicast port (`udp_port`, or one derived from the job name so every engine of
/// a job agrees without being told), and the interface (`udp_interface`, or the one holding this
/// node's address).
fn udp_fabric(config: &Config) -> std::io::Result<UdpFabric> {
    let members = config.udp.member_addrs().map_err(|e| std::io::Error::other(e.to_string()))?;
    let own = members
        .get(config.topology.node as usize)
        .ok_or_else(|| std::io::Error::other("udp_members has no address for this node"))?;
    let port = match config.udp.port {
        0 => {
            let h = Sha256::digest(format!("ringcast udp port of job {}", config.topology.job).as_bytes());
            20_000 + u16::from_le_bytes([h[0], h[1]]) % 20_000
        }
        p => p,
    };
    let mut opts = UdpOptions::new(port, config.protocol.mtu, config.limits.max_comms);
    opts.family = IpFamily::of(own.ip());
    opts.interface = match config.udp.interface.as_str() {
        "" => Interface::Addr(own.ip()),
        i => i.parse().map(Interface::Index).unwrap_or_else(|_| Interface::Name(i.to_string())),
    };
    UdpFabric::new(PeerId(config.topology.node), members, &opts, &config.fault)
        .map_err(|e| std::io::Error::other(e.to_string()))
}
