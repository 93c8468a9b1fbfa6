//! The engine's network side: the fabric the state machine's frames travel on, driven next to
//! the host rings in the same polling loop.
//!
//! The state machine ([`Engine`]) knows nothing of the fabric: each pass hands it the fabric's
//! waiting datagrams ([`Net::receive`]), and the loop carries out the frames, joins and leaves it
//! asks for through [`Net::send_frames`] (each run of frames it queued, whole), [`Net::join`]
//! and [`Net::leave`].
//!
//! This is where the configuration meets the fabrics: the runner holds the whole [`Config`],
//! and hands the fabric it picks only that fabric's section and the job-wide
//! [`crate::fabric::FabricSetup`] ([`Config::fabric_setup`]). Whatever the fabric, the result
//! is wrapped in the one fault injector ([`faulty::wrap`], `fault.*`) when faults are asked for,
//! seeded from `fault.seed` or, when that is 0, from this process ([`crate::entropy::fault_seed`]).
use crate::config::{Config, FabricKind};
use crate::fabric::shm::ShmFabric;
use crate::fabric::{faulty, udp, Datagram, Dest, Fabric, Take};
use ringcast_proto::comm::GroupId;
pub use ringcast_proto::engine::CommStats;
use ringcast_proto::engine::{Action, Engine, Frames, HostPort};
use ringcast_proto::Nanos;

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
    /// The engine's [`Engine::keep_epoch`] when it last declined a datagram the fabric keeps
    /// (`None`: nothing declined): once it moves, the fabric offers it again.
    declined: Option<u64>,
}

impl Net {
    /// The fabric `config` asks for, if any (`fabric = none`: `None`), with the world
    /// communicator's group `world` joined.
    pub fn new(config: &Config, world: Option<GroupId>) -> std::io::Result<Option<Net>> {
        let setup = config.fabric_setup();
        // Each arm builds its fabric from its own section and the setup, nothing else.
        let fabric: Box<dyn Fabric + Send> = match config.topology.fabric {
            FabricKind::None => return Ok(None),
            FabricKind::Shm => Box::new(ShmFabric::open(&setup)?),
            // The message as the engine printed it when it built the fabric here (`udp fabric:
            // ...`), not `UdpError`'s `io::Error` conversion (which drops the prefix).
            FabricKind::Udp => {
                Box::new(udp::open(&setup, &config.udp).map_err(|e| std::io::Error::other(e.to_string()))?)
            }
            #[cfg(feature = "dpdk")]
            FabricKind::Dpdk => Box::new(crate::fabric::dpdk::open(&setup, &config.dpdk)?),
            #[cfg(not(feature = "dpdk"))]
            FabricKind::Dpdk => {
                return Err(std::io::Error::other(
                    "fabric dpdk: this engine was built without the `dpdk` feature",
                ))
            }
            #[cfg(feature = "verbs")]
            FabricKind::Verbs => Box::new(crate::fabric::verbs::open(&setup, &config.verbs)?),
            #[cfg(not(feature = "verbs"))]
            FabricKind::Verbs => {
                return Err(std::io::Error::other(
                    "fabric verbs: this engine was built without the `verbs` feature",
                ))
            }
        };
        let mut fabric = faulty::wrap(fabric, &config.fault, crate::entropy::fault_seed());
        if let Some(group) = world {
            fabric.join(&group)?;
        }
        if config.topology.job_secret.0.is_none() && config.topology.nodes > 1 && config.runner.log_level > 0
        {
            super::log::line(
                &config.runner.engine_name,
                1,
                format_args!(
                    "RINGCAST_JOB_SECRET is unset: the world communicator's frames are keyed by the job name {:?} \
                     alone, so anyone who knows it can forge them (ringcast run and the MPI interposer set one)",
                    config.topology.job
                ),
            );
        }
        Ok(Some(Net { fabric, declined: None }))
    }

    /// Hands the fabric's waiting datagrams (at most `FRAMES_PER_PASS`) to `engine`; true if
    /// there were any. Each is handled where the fabric holds it (its ring slot, its receive
    /// buffer): the engine only queues what it sends in reply (sans-IO), so nothing needs the
    /// fabric while a datagram is borrowed from it, and nothing is copied out first.
    ///
    /// `port` is the driver's direct reach into host memory (the `mapped` backend): a receiver
    /// that serves no repairs has each frame's payload written through it from where the
    /// fabric holds the frame straight into the host buffer (`Engine::handle_frame_placing`).
    ///
    /// Back-pressure ([`Fabric::poll_keeping`]): a datagram the fabric can keep where it lies
    /// is only offered to the engine (`Engine::offer_frame_placing`), which declines a fragment
    /// of a broadcast not posted here when no pre-posted slot is free; the fabric keeps it
    /// until a post here moves the engine's `keep_epoch`, and it is offered again.
    pub fn receive(&mut self, engine: &mut Engine, now: Nanos, port: &mut dyn HostPort) -> bool {
        if self.declined.is_some_and(|at| at != engine.keep_epoch()) {
            self.declined = None;
            self.fabric.resume();
        }
        let mtu = self.fabric.mtu();
        let mut handled = 0usize;
        let declined = &mut self.declined;
        self.fabric.poll_keeping(FRAMES_PER_PASS, &mut |from, d, keepable| {
            if d.len() > mtu {
                return Take::Taken;
            }
            if !keepable {
                engine.handle_frame_placing(from, d, now, &mut *port);
            } else if !engine.offer_frame_placing(from, d, now, &mut *port) {
                *declined = Some(engine.keep_epoch());
                return Take::Declined;
            }
            handled += 1;
            // This datagram made a post (a blocked one its SYNC_DOWN released): what was declined
            // is taken before the next datagram.
            if declined.is_some_and(|at| at != engine.keep_epoch()) {
                *declined = None;
                return Take::Resume;
            }
            Take::Taken
        });
        handled > 0
    }

    /// Hands the run of frames the engine lends (`frames`) to the fabric in one batch; true
    /// if there was any.
    pub fn send_frames(&mut self, frames: Frames<'_>) -> bool {
        let mut batch = frames
            .filter_map(|a| match a {
                // Lent in parts (a fragment's header, its payload where it lies in the channel,
                // its trailer): the fabric gathers them into the wire.
                Action::Send { to, frame, .. } => Some(Datagram { dest: Dest::Peer(to), parts: frame.parts }),
                Action::Multicast { group, frame } => {
                    Some(Datagram { dest: Dest::Group(group), parts: frame.parts })
                }
                _ => None,
            })
            .peekable();
        if batch.peek().is_none() {
            return false;
        }
        self.fabric.send_batch(&mut batch);
        true
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
    /// Waits for the fabric's next datagram in this thread, at most `limit`
    /// ([`crate::fabric::Fabric::wait`]); `None` if the fabric cannot.
    pub fn wait(&self, limit: std::time::Duration) -> Option<bool> {
        self.fabric.wait(limit)
    }

    /// The fabric's datagram counters.
    pub fn fabric_counters(&self) -> crate::fabric::FabricCounters {
        self.fabric.counters()
    }

    /// The fabric's own payload copies ([`crate::fabric::Fabric::ledger`]).
    pub fn fabric_ledger(&self) -> ringcast_proto::ledger::Ledger {
        self.fabric.ledger()
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
            "fabric sent {} multicast {} received {} overrun {} refused {} (device calls: send {} receive {}); protocol repair frames {} syncs {} drops {}",
            f.sent,
            f.multicast,
            f.received,
            f.overrun,
            f.refused,
            f.tx_calls,
            f.rx_calls,
            p.repair_frames,
            p.syncs,
            p.drops.iter().sum::<u64>()
        ) + &ringcast_abi::frame::DropReason::ALL
            .iter()
            .zip(p.drops.iter())
            .filter(|(_, &n)| n > 0)
            .map(|(r, n)| format!(" {r:?} {n}"))
            .collect::<String>()
    }
}

// The one test here needs the verbs fabric's device code.
#[cfg(all(test, feature = "verbs"))]
mod tests {
    use super::*;
    use crate::fabric::verbs::{self, wire::HEADER_LEN, VerbsError, NO_DEVICE};

    /// On a machine without an RDMA device (this one, and CI), building the verbs fabric from
    /// its section and the setup the root derives is the typed `NoDevice` error — through the
    /// engine's `Net` too — never a panic. Where a device exists, the fabric opens instead (set `RINGCAST_VERBS_*` for the
    /// device, port, GID index and address), with a QP number and a GID, and joins nothing but
    /// what a single member needs. Either branch can fail.
    #[test]
    fn the_verbs_fabric_opens_the_device_or_reports_that_there_is_none() {
        let config =
            Config::from_env().expect("RINGCAST_* variables of this test run are valid").with(|cfg| {
                cfg.topology.fabric = FabricKind::Verbs;
                cfg.topology.nodes = 1;
                cfg.topology.node = 0;
            });
        match verbs::devices() {
            Err(VerbsError::NoDevice) => {
                match verbs::open(&config.fabric_setup(), &config.verbs) {
                    Err(VerbsError::NoDevice) => {}
                    Err(e) => panic!("expected NoDevice, got {e}"),
                    Ok(f) => panic!("no device, yet the fabric opened: {f:?}"),
                }
                let err = Net::new(&config, None).err().expect("the engine refuses the verbs fabric");
                assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
                assert_eq!(err.to_string(), NO_DEVICE);
            }
            Ok(names) => {
                let f = verbs::open(&config.fabric_setup(), &config.verbs)
                    .unwrap_or_else(|e| panic!("devices {names:?}, but the fabric did not open: {e}"));
                let a = f.address();
                assert!(a.qpn != 0 && a.qpn < 1 << 24, "{a:?}");
                assert_ne!(a.gid, [0; 16]);
                assert!(f.port().max_message >= config.protocol.mtu as usize + HEADER_LEN);
                assert_eq!(
                    f.nic().device(),
                    if config.verbs.device.is_empty() {
                        names[0].as_str()
                    } else {
                        config.verbs.device.as_str()
                    }
                );
            }
            Err(e) => panic!("ibv_get_device_list failed: {e}"),
        }
    }
}
