//! The engine's network side: the broadcast protocol ([`Protocol`], sans-IO) driven on a real
//! fabric, next to the host rings in the same polling loop.
//!
//! Each pass ([`Net::pass`]): hand the fabric's waiting datagrams to the protocol, run its
//! timers when due, retry posts that waited for a channel, and collect the broadcasts that
//! ended. The protocol reads and writes host memory through the runner's [`SegmentTable`] (the
//! mappings the host registered, bounds-checked again there), sends through the fabric, and
//! reports completions by token; the loop turns a token back into its host's descriptor.
//!
//! The world communicator: every engine of a job (`RINGCAST_JOB`, `RINGCAST_NODES`,
//! `RINGCAST_NODE`) derives the same identity — cookie, multicast group, seed — from the job name,
//! so no bootstrap traffic is needed. Its process ranks are `node * ppn + local rank`; the
//! protocol's members are the engines (one per node), and the [`Gather`] turns the posts of a
//! node's `ppn` processes into one broadcast and delivers it into every local buffer.
use super::gather::{Delivery, Gather};
use super::memory::SegmentTable;
use crate::config::{Config, FabricKind};
use crate::core::regions::Resolved;
use crate::core::Nanos;
use crate::fabric::faulty::Faulty;
use crate::fabric::shm::ShmFabric;
use crate::fabric::udp::{Interface, IpFamily, UdpFabric, UdpOptions};
use crate::fabric::Fabric;
use crate::fault::FaultInjector;
use crate::proto::comm::{CommSpec, GroupId, PeerId};
use crate::proto::protocol::{CommHandle, Env, Outcome, Post, PostError, Protocol};
use ringcast_abi::StatusKind;
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

/// The protocol on its fabric.
pub struct Net {
    proto: Protocol,
    fabric: Box<dyn Fabric + Send>,
    /// The world communicator; `None` once a local process left it broken (dropped from the
    /// protocol so the remote engines find out).
    world: Option<CommHandle>,
    nodes: u32,
    ppn: u32,
    gather: Gather,
    /// Frames of this pass, copied out of the fabric so the protocol can send while handling
    /// them (sized once: `FRAMES_PER_PASS` MTUs).
    arena: Vec<u8>,
    frames: Vec<(PeerId, usize, usize)>,
    /// Broadcasts the protocol finished, by slot.
    finished: Vec<(u64, Outcome)>,
    deliveries: Vec<Delivery>,
    /// Local operations that ended, by the runner's token.
    done: Vec<(u64, Outcome)>,
}

/// The world communicator's identity, the same at every engine of `job`.
pub fn world_identity(job: &str) -> (u64, GroupId, u64) {
    let h = Sha256::digest(format!("ringcast world communicator of job {job}").as_bytes());
    let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    let mut group: GroupId = [0; 14];
    group.copy_from_slice(&h[16..30]);
    (word(0) | 1, group, word(8))
}

impl Net {
    /// The network side `config` asks for, if any (`fabric = none`: `None`).
    pub fn new(config: &Config) -> std::io::Result<Option<Net>> {
        let mtu = config.mtu as usize;
        let mut fabric: Box<dyn Fabric + Send> = match config.fabric {
            FabricKind::None => return Ok(None),
            FabricKind::Shm => {
                let shm = ShmFabric::new(&config.job, PeerId(config.node), config.nodes, mtu)?;
                match FaultInjector::from_config(config) {
                    Some(inj) => Box::new(Faulty::new(shm, inj)),
                    None => Box::new(shm),
                }
            }
            // The UDP fabric runs the fault injector itself (it releases held datagrams).
            FabricKind::Udp => Box::new(udp_fabric(config)?),
        };
        let (cookie, group, seed) = world_identity(&config.job);
        fabric.join(&group)?;
        let mut proto = Protocol::new(config, crc32c::crc32c);
        let members: std::sync::Arc<[PeerId]> = (0..config.nodes).map(PeerId).collect();
        let spec =
            CommSpec { cookie, group, members, my_rank: config.node, seed, layout: Default::default() };
        let world = proto
            .create_comm(spec)
            .map_err(|s| std::io::Error::other(format!("world communicator refused: {s:?}")))?;
        let window = config.channels as usize * 2;
        Ok(Some(Net {
            proto,
            fabric,
            world: Some(world),
            nodes: config.nodes,
            ppn: config.ppn,
            gather: Gather::new(config.node, config.ppn, window),
            arena: vec![0; FRAMES_PER_PASS * mtu],
            frames: Vec::with_capacity(FRAMES_PER_PASS),
            finished: Vec::with_capacity(window),
            deliveries: Vec::with_capacity(window * config.ppn as usize),
            done: Vec::with_capacity(window * config.ppn as usize),
        }))
    }

    /// Files local process `local`'s next broadcast on `comm` (root: a process rank); its
    /// outcome comes back from [`Net::take_done`] under `token`. `Err` when refused at once.
    #[allow(clippy::too_many_arguments)]
    pub fn post(
        &mut self,
        local: u32,
        comm: u64,
        root: u32,
        buf: Resolved,
        len: u64,
        token: u64,
        now: Nanos,
        segments: &SegmentTable,
    ) -> Result<(), StatusKind> {
        if comm != 0 {
            return Err(StatusKind::UnknownCommunicator);
        }
        if root >= self.nodes * self.ppn {
            return Err(StatusKind::BadRoot);
        }
        let len = u32::try_from(len).map_err(|_| StatusKind::BadLength)?;
        self.gather.post(local, root, buf, len, token)?;
        self.start_ready(now, segments);
        self.settle(segments);
        Ok(())
    }

    /// Hands the protocol every slot that can start, in order, until one waits (for its root
    /// process, a local process, or a channel).
    fn start_ready(&mut self, now: Nanos, segments: &SegmentTable) -> bool {
        let mut work = false;
        while let Some(s) = self.gather.next_start() {
            let Some(world) = self.world else {
                self.gather.refused(StatusKind::CommunicatorBroken);
                continue;
            };
            let Net { proto, fabric, finished, ppn, .. } = self;
            let post = Post { comm: world, root: s.root / *ppn, buf: s.buf, len: s.len, token: s.seq };
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
            match proto.post_bcast(post, now, &mut env) {
                Ok(()) => self.gather.started(),
                Err(PostError::WouldBlock) => break, // its channel is still held
                Err(PostError::Refused(status)) => self.gather.refused(status),
            }
            work = true;
        }
        work
    }

    /// Turns what the protocol finished into local deliveries: the intra-node copies, then the
    /// outcomes by token.
    fn settle(&mut self, segments: &SegmentTable) {
        for (seq, outcome) in self.finished.drain(..) {
            self.gather.done(seq, outcome);
        }
        self.gather.take_finished(&mut self.deliveries);
        for d in self.deliveries.drain(..) {
            let mut outcome = d.outcome;
            if let Some((src, dst, len)) = d.copy {
                if !segments.dma(src, dst, len) {
                    outcome = Outcome { status: StatusKind::OutOfBounds, bytes: 0, ..outcome };
                }
            }
            self.done.push((d.token, outcome));
        }
    }

    /// One pass: datagrams in, timers, slots waiting to start. True if anything happened.
    pub fn pass(&mut self, now: Nanos, segments: &SegmentTable) -> bool {
        let mtu = self.fabric.mtu();
        let Net { proto, fabric, arena, frames, finished, .. } = self;
        frames.clear();
        let mut used = 0;
        fabric.poll(FRAMES_PER_PASS, &mut |from, d| {
            if d.len() <= mtu && used + d.len() <= arena.len() {
                arena[used..used + d.len()].copy_from_slice(d);
                frames.push((from, used, d.len()));
                used += d.len();
            }
        });
        let mut work = !frames.is_empty();
        for &(from, at, len) in frames.iter() {
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
            proto.on_frame(from, &arena[at..at + len], now, &mut env);
        }
        if proto.next_timeout().is_some_and(|t| t <= now) {
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
            proto.on_timeout(now, &mut env);
            work = true;
        }
        work |= self.start_ready(now, segments);
        work |= !self.finished.is_empty();
        self.settle(segments);
        work
    }

    /// Local process `local` left. If that leaves a broadcast unfinished, the world
    /// communicator is dropped from the protocol: its local operations fail with
    /// `CommunicatorBroken`, and remote engines, no longer answered, fail theirs with
    /// `PeerUnreachable` within `peer_timeout_ms` rather than wait forever.
    pub fn local_gone(&mut self, local: u32, segments: &SegmentTable) {
        if self.gather.depart(local) {
            if let Some(world) = self.world.take() {
                let Net { proto, fabric, finished, .. } = self;
                let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
                proto.destroy_comm(world, &mut env);
            }
        }
        self.settle(segments);
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

    /// When the protocol's next timer is due.
    pub fn next_timeout(&self) -> Option<Nanos> {
        self.proto.next_timeout()
    }

    /// A host process took local rank `local`.
    pub fn local_arrived(&mut self, local: u32) {
        self.gather.arrive(local);
    }

    /// Nothing owed to peers or local processes: no broadcast in progress here, and every
    /// broadcast this engine took part in synchronized (or the communicator is broken).
    pub fn quiescent(&self) -> bool {
        self.gather.idle() && self.proto.quiescent()
    }

    /// Local operations that ended since the last call, by token.
    pub fn take_done(&mut self) -> std::vec::Drain<'_, (u64, Outcome)> {
        self.done.drain(..)
    }

    /// The counters a host reads with `NET_STATS`.
    pub fn stats(&self) -> NetStats {
        let p = self.proto.counters();
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
    pub fn describe(&self) -> String {
        let f = self.fabric.counters();
        let p = self.proto.counters();
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

/// The UDP fabric `config` describes: member `node` of `udp_members`, groups of the list's
/// family, the multicast port (`udp_port`, or one derived from the job name so every engine of
/// a job agrees without being told), and the interface (`udp_interface`, or the one holding this
/// node's address).
fn udp_fabric(config: &Config) -> std::io::Result<UdpFabric> {
    let members = config.udp_member_addrs().map_err(|e| std::io::Error::other(e.to_string()))?;
    let own = members
        .get(config.node as usize)
        .ok_or_else(|| std::io::Error::other("udp_members has no address for this node"))?;
    let port = match config.udp_port {
        0 => {
            let h = Sha256::digest(format!("ringcast udp port of job {}", config.job).as_bytes());
            20_000 + u16::from_le_bytes([h[0], h[1]]) % 20_000
        }
        p => p,
    };
    let mut opts = UdpOptions::new(port, config);
    opts.family = if own.is_ipv6() { IpFamily::V6 } else { IpFamily::V4 };
    opts.interface = match config.udp_interface.as_str() {
        "" => Interface::Addr(own.ip()),
        i => i.parse().map(Interface::Index).unwrap_or_else(|_| Interface::Name(i.to_string())),
    };
    UdpFabric::new(PeerId(config.node), members, &opts, config)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// What the protocol acts through in the engine: the fabric, the mapped host memory, and the
/// list of ended broadcasts.
struct NetEnv<'a> {
    fabric: &'a mut dyn Fabric,
    segments: &'a SegmentTable,
    done: &'a mut Vec<(u64, Outcome)>,
}

impl Env for NetEnv<'_> {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.fabric.send(to, frame);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.fabric.multicast(group, frame);
    }

    fn read(&mut self, buf: Resolved, offset: u64, out: &mut [u8]) -> bool {
        self.segments.read(buf, offset, out)
    }

    fn write(&mut self, buf: Resolved, offset: u64, data: &[u8]) -> bool {
        self.segments.write(buf, offset, data)
    }

    fn complete(&mut self, token: u64, outcome: Outcome) {
        self.done.push((token, outcome));
    }
}
