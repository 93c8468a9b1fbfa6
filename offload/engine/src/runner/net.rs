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
use super::comms::{derive, parse_record, LocalComm};
use super::gather::{Delivery, Gather};
use super::memory::SegmentTable;
use crate::config::{Config, FabricKind, JobSecret};
use crate::fabric::faulty::Faulty;
use crate::fabric::shm::ShmFabric;
use crate::fabric::udp::{Interface, UdpFabric, UdpOptions};
use crate::fabric::Fabric;
use ringcast_abi::StatusKind;
use ringcast_proto::comm::ident::IpFamily;
use ringcast_proto::comm::ident::{derived_identity, CommIdentity};
use ringcast_proto::comm::{CommSpec, GroupId, PeerId};
use ringcast_proto::fault::FaultInjector;
use ringcast_proto::intake::regions::Resolved;
use ringcast_proto::transfer::protocol::{Env, Outcome, Post, PostError, Protocol};
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

/// The communicators' life (`COMMS`): what a host reads to see that nothing accumulates as
/// communicators come and go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Communicators alive now, the world included (those waiting to settle after their last
    /// local member freed them too).
    pub alive: u32,
    /// Multicast groups the fabric has joined now.
    pub groups: u32,
    /// Communicators created since start, the world included.
    pub created: u64,
    /// Communicators dropped since start (freed and settled, or overdue).
    pub dropped: u64,
    /// Of those alive, how many every local member freed (waiting for the protocol to settle).
    pub freeing: u64,
}

/// The protocol on its fabric.
pub struct Net {
    proto: Protocol,
    fabric: Box<dyn Fabric + Send>,
    /// This engine's communicators, by slot (slot 0: the world). A slot's index is in the
    /// protocol tokens of its broadcasts.
    comms: Vec<Option<LocalComm>>,
    node: u32,
    nodes: u32,
    ppn: u32,
    /// Slots of each communicator's gather, reserved once.
    window: usize,
    /// After the last local member freed a communicator, how long it may wait for the
    /// protocol to settle it with the other engines.
    free_linger: Nanos,
    /// Frames of this pass, copied out of the fabric so the protocol can send while handling
    /// them (sized once: `FRAMES_PER_PASS` MTUs).
    arena: Vec<u8>,
    frames: Vec<(PeerId, usize, usize)>,
    /// Broadcasts the protocol finished, by token (communicator slot, gather slot).
    finished: Vec<(u64, Outcome)>,
    deliveries: Vec<Delivery>,
    /// Local operations that ended, by the runner's token.
    done: Vec<(u64, Outcome)>,
    /// Communicators created and dropped since start (see [`CommStats`]).
    created: u64,
    dropped: u64,
}

/// A protocol token: the communicator's slot above this bit, the gather slot below.
const TOKEN_COMM_SHIFT: u32 = 40;

/// The world communicator's identity, the same at every engine of `job`; its frames are keyed
/// by `secret` (the job's, `RINGCAST_JOB_SECRET`).
pub fn world_identity(job: &str, secret: &JobSecret) -> CommIdentity {
    derived_identity(&format!("ringcast world communicator of job {job}"), secret.0.as_ref())
}

impl Net {
    /// The network side `config` asks for, if any (`fabric = none`: `None`).
    pub fn new(config: &Config) -> std::io::Result<Option<Net>> {
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
        let CommIdentity { cookie, group, seed, key } =
            world_identity(&config.topology.job, &config.topology.job_secret);
        if config.topology.job_secret.0.is_none() && config.topology.nodes > 1 && config.runner.log_level > 0
        {
            eprintln!(
                "ringcast-engine: RINGCAST_JOB_SECRET is unset: the world communicator's frames are keyed by the \
                 job name {:?} alone, so anyone who knows it can forge them (ringcast run and the MPI interposer set one)",
                config.topology.job
            );
        }
        fabric.join(&group)?;
        let mut proto = Protocol::new(&config.engine(), crc32c::crc32c);
        let members: std::sync::Arc<[PeerId]> = (0..config.topology.nodes).map(PeerId).collect();
        let spec = CommSpec {
            cookie,
            group,
            members,
            my_rank: config.topology.node,
            seed,
            key,
            layout: Default::default(),
        };
        let world = proto
            .create_comm(spec)
            .map_err(|s| std::io::Error::other(format!("world communicator refused: {s:?}")))?;
        let window = config.protocol.channels as usize * 2;
        let mut comms: Vec<Option<LocalComm>> = Vec::with_capacity(config.limits.max_comms as usize);
        comms.push(Some(LocalComm::world(config.topology.node, config.topology.ppn, world, group, window)));
        Ok(Some(Net {
            proto,
            fabric,
            comms,
            node: config.topology.node,
            nodes: config.topology.nodes,
            ppn: config.topology.ppn,
            window,
            free_linger: config.protocol.peer_timeout_ms as Nanos * 1_000_000,
            arena: vec![0; FRAMES_PER_PASS * mtu],
            frames: Vec::with_capacity(FRAMES_PER_PASS),
            finished: Vec::with_capacity(window),
            deliveries: Vec::with_capacity(window * config.topology.ppn as usize),
            done: Vec::with_capacity(window * config.topology.ppn as usize),
            created: 1,
            dropped: 0,
        }))
    }

    /// The slot of communicator `handle`.
    fn slot(&self, handle: u64) -> Option<usize> {
        self.comms.iter().position(|c| c.as_ref().is_some_and(|c| c.handle == handle))
    }

    /// The rank in communicator `comm` of the host holding engine-local rank `local`.
    pub fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32> {
        let c = self.comms[self.slot(comm)?].as_ref()?;
        *c.rank_of_local.get(local? as usize)?
    }

    /// Files local process `local`'s next broadcast on communicator `comm` (root: a rank of
    /// it); its outcome comes back from [`Net::take_done`] under `token`. `Err` when refused at
    /// once.
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
        let slot = self.slot(comm).ok_or(StatusKind::UnknownCommunicator)?;
        let (nodes, ppn) = (self.nodes, self.ppn);
        let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
        let index = c.index_of_local(local).ok_or(StatusKind::UnknownCommunicator)?;
        if c.gather.placement().node(root) == u32::MAX || (comm == 0 && root >= nodes * ppn) {
            return Err(StatusKind::BadRoot);
        }
        let len = u32::try_from(len).map_err(|_| StatusKind::BadLength)?;
        c.gather.post(index, root, buf, len, token)?;
        self.start_ready(slot, now, segments);
        self.settle(segments);
        self.fabric.flush();
        Ok(())
    }

    /// Creates (or joins, for a second local member) the communicator `handle` from the record
    /// `bytes` posted by engine-local rank `local`.
    pub fn comm_create(&mut self, local: u32, handle: u64, bytes: &[u8]) -> Result<(), StatusKind> {
        let me = self.node * self.ppn + local;
        let rec = parse_record(bytes, me, self.nodes * self.ppn)?;
        if let Some(slot) = self.slot(handle) {
            let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
            if c.digest != rec.digest || c.freeing_since.is_some() || c.proto.is_none() {
                return Err(StatusKind::BadDescriptor);
            }
            match c.rank_of_local.get_mut(local as usize) {
                Some(r @ None) => *r = Some(rec.my_rank),
                _ => return Err(StatusKind::BadDescriptor), // created twice by one process
            }
            return Ok(());
        }
        let (spec, placement, locals) = derive(handle, &rec, self.node, self.ppn)?;
        let free = match self.comms.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.comms.len() < self.comms.capacity() => {
                self.comms.push(None);
                self.comms.len() - 1
            }
            None => return Err(StatusKind::TooManyCommunicators), // max_comms alive
        };
        let group = spec.group;
        self.fabric.join(&group).map_err(|_| StatusKind::UnknownCommunicator)?;
        let proto = match self.proto.create_comm(spec) {
            Ok(p) => p,
            Err(e) => {
                // Joined for nothing: a refused communicator must not keep its group.
                self.leave_unless_shared(&group);
                return Err(e);
            }
        };
        self.created += 1;
        let mut rank_of_local = vec![None; self.ppn as usize];
        rank_of_local[local as usize] = Some(rec.my_rank);
        self.comms[free] = Some(LocalComm {
            handle,
            proto: Some(proto),
            group,
            gather: Gather::with_placement(locals, placement, self.window),
            rank_of_local,
            digest: rec.digest,
            freed: vec![false; locals as usize],
            freeing_since: None,
        });
        Ok(())
    }

    /// Engine-local rank `local` leaves communicator `handle`. Once every local member left, the
    /// communicator is dropped when the protocol has settled it with the other engines (or
    /// after a peer timeout).
    pub fn comm_free(
        &mut self,
        local: u32,
        handle: u64,
        now: Nanos,
        segments: &SegmentTable,
    ) -> Result<(), StatusKind> {
        let slot = self.slot(handle).filter(|_| handle != 0).ok_or(StatusKind::UnknownCommunicator)?;
        let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
        let index = c.index_of_local(local).ok_or(StatusKind::UnknownCommunicator)?;
        c.rank_of_local[local as usize] = None;
        c.freed[index as usize] = true;
        // A broadcast of this process still open on it can never finish now.
        let broke = c.gather.depart(index);
        let last = c.freed.iter().all(|&f| f);
        if last {
            c.freeing_since = Some(now);
        }
        if broke {
            self.drop_proto(slot, segments);
        } else if last {
            self.close_proto(slot, now, segments);
        }
        self.settle(segments);
        // Settled already (nothing was broadcast on it, or this engine was the last to free
        // it): its slot is free for the next creation at once.
        self.reap_freed(now, segments);
        Ok(())
    }

    /// Every local member freed communicator `slot`: the protocol settles its last broadcasts
    /// with the other engines (they close it when their own members free it), after which
    /// [`Net::reap_freed`] drops it.
    fn close_proto(&mut self, slot: usize, now: Nanos, segments: &SegmentTable) {
        let Some(proto) = self.comms[slot].as_ref().and_then(|c| c.proto) else { return };
        let Net { proto: p, fabric, finished, .. } = self;
        let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
        p.close_comm(proto, now, &mut env);
        self.fabric.flush();
    }

    /// Leaves `group` unless a communicator still uses it (ids are drawn at random: only a
    /// deliberate reuse shares one).
    fn leave_unless_shared(&mut self, group: &GroupId) {
        if !self.comms.iter().flatten().any(|c| c.group == *group) {
            self.fabric.leave(group);
        }
    }

    /// Drops communicator `slot` from the protocol: its operations still running fail.
    fn drop_proto(&mut self, slot: usize, segments: &SegmentTable) {
        let Some(proto) = self.comms[slot].as_mut().and_then(|c| c.proto.take()) else { return };
        let Net { proto: p, fabric, finished, .. } = self;
        let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
        p.destroy_comm(proto, &mut env);
        self.fabric.flush();
    }

    /// Hands the protocol every slot of communicator `slot` that can start, in order, until one
    /// waits (for its root process, a local process, or a channel).
    fn start_ready(&mut self, slot: usize, now: Nanos, segments: &SegmentTable) -> bool {
        let mut work = false;
        loop {
            let Some(c) = self.comms[slot].as_mut() else { return work };
            let Some(s) = c.gather.next_start() else { return work };
            let Some(comm) = c.proto else {
                c.gather.refused(StatusKind::CommunicatorBroken);
                continue;
            };
            let root = c.gather.placement().node(s.root);
            let token = (slot as u64) << TOKEN_COMM_SHIFT | s.seq;
            let Net { proto, fabric, finished, .. } = self;
            let post = Post { comm, root, buf: s.buf, len: s.len, token };
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done: finished };
            let result = proto.post_bcast(post, now, &mut env);
            let Some(c) = self.comms[slot].as_mut() else { return work };
            match result {
                Ok(()) => c.gather.started(),
                Err(PostError::WouldBlock) => return work, // its channel is still held
                Err(PostError::Refused(status)) => c.gather.refused(status),
            }
            work = true;
        }
    }

    /// Turns what the protocol finished into local deliveries: the intra-node copies, then the
    /// outcomes by token.
    fn settle(&mut self, segments: &SegmentTable) {
        for (token, outcome) in self.finished.drain(..) {
            let slot = (token >> TOKEN_COMM_SHIFT) as usize;
            if let Some(c) = self.comms.get_mut(slot).and_then(Option::as_mut) {
                c.gather.done(token & ((1 << TOKEN_COMM_SHIFT) - 1), outcome);
            }
        }
        for c in self.comms.iter_mut().flatten() {
            c.gather.take_finished(&mut self.deliveries);
        }
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

    /// One pass: datagrams in, timers, slots waiting to start, freed communicators that are
    /// settled. True if anything happened.
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
        for slot in 0..self.comms.len() {
            work |= self.start_ready(slot, now, segments);
        }
        work |= !self.finished.is_empty();
        self.settle(segments);
        work |= self.reap_freed(now, segments);
        self.fabric.flush();
        work
    }

    /// Drops the communicators every local member freed, once the protocol settled them with
    /// the other engines (or, when a peer never answers, `peer_timeout_ms` later).
    fn reap_freed(&mut self, now: Nanos, segments: &SegmentTable) -> bool {
        let mut work = false;
        for slot in 1..self.comms.len() {
            let Some(c) = self.comms[slot].as_ref() else { continue };
            let Some(since) = c.freeing_since else { continue };
            let settled = c.proto.is_none_or(|h| self.proto.is_quiescent(h));
            if settled || now.saturating_sub(since) > self.free_linger {
                let group = c.group;
                self.drop_proto(slot, segments);
                self.settle(segments);
                self.comms[slot] = None;
                // Left even when a departing process broke the communicator (its protocol side
                // is gone already).
                self.leave_unless_shared(&group);
                self.dropped += 1;
                work = true;
            }
        }
        work
    }

    /// Local process `local` left. Every communicator it leaves with a broadcast unfinished is
    /// dropped from the protocol: its local operations fail with `CommunicatorBroken`, and
    /// remote engines, no longer answered, fail theirs with `PeerUnreachable` within
    /// `peer_timeout_ms` rather than wait forever. Communicators it created and did not free
    /// count as freed by it (a process that crashed or exited without `MPI_Comm_free`): once
    /// every local member freed or left one, it is dropped and its group left like any other.
    pub fn local_gone(&mut self, local: u32, now: Nanos, segments: &SegmentTable) {
        for slot in 0..self.comms.len() {
            let Some(c) = self.comms[slot].as_mut() else { continue };
            let Some(index) = c.index_of_local(local) else { continue };
            let mut last = false;
            if slot != 0 {
                // Membership of a created communicator does not pass to a newcomer.
                c.rank_of_local[local as usize] = None;
                c.freed[index as usize] = true;
                if c.freeing_since.is_none() && c.freed.iter().all(|&f| f) {
                    c.freeing_since = Some(now);
                    last = true;
                }
            }
            if c.gather.depart(index) {
                self.drop_proto(slot, segments);
            } else if last {
                self.close_proto(slot, now, segments);
            }
        }
        self.settle(segments);
    }

    /// A host process took local rank `local`.
    pub fn local_arrived(&mut self, local: u32) {
        if let Some(Some(world)) = self.comms.first_mut() {
            if let Some(index) = world.index_of_local(local) {
                world.gather.arrive(index);
            }
        }
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

    /// Nothing owed to peers or local processes: no broadcast in progress here, and every
    /// broadcast this engine took part in synchronized (or the communicator is broken).
    pub fn quiescent(&self) -> bool {
        self.comms.iter().flatten().all(|c| c.gather.idle()) && self.proto.quiescent()
    }

    /// Local operations that ended since the last call, by token.
    pub fn take_done(&mut self) -> std::vec::Drain<'_, (u64, Outcome)> {
        self.done.drain(..)
    }

    /// The communicators' life (`COMMS`).
    pub fn comm_stats(&self) -> CommStats {
        let alive = self.comms.iter().flatten();
        CommStats {
            alive: alive.clone().count() as u32,
            groups: u32::try_from(self.fabric.groups()).unwrap_or(u32::MAX),
            created: self.created,
            dropped: self.dropped,
            freeing: alive.filter(|c| c.freeing_since.is_some()).count() as u64,
        }
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

impl ringcast_proto::intake::Ranks for Net {
    fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32> {
        Net::rank(self, local, comm)
    }
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
