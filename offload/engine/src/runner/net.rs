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
//! so no bootstrap traffic is needed; ranks are node numbers. One host process per engine posts
//! on it (several local processes per engine are the next step of issue 5).
use super::memory::SegmentTable;
use crate::config::{Config, FabricKind};
use crate::core::regions::Resolved;
use crate::core::Nanos;
use crate::fabric::faulty::Faulty;
use crate::fabric::shm::ShmFabric;
use crate::fabric::Fabric;
use crate::fault::FaultInjector;
use crate::proto::comm::{CommSpec, GroupId, PeerId};
use crate::proto::protocol::{CommHandle, Env, Outcome, Post, PostError, Protocol};
use ringcast_abi::StatusKind;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;

/// Datagrams taken from the fabric per pass (the host rings get their turn in between).
const FRAMES_PER_PASS: usize = 64;

/// The protocol on its fabric.
pub struct Net {
    proto: Protocol,
    fabric: Box<dyn Fabric + Send>,
    world: CommHandle,
    nodes: u32,
    /// Frames of this pass, copied out of the fabric so the protocol can send while handling
    /// them (sized once: `FRAMES_PER_PASS` MTUs).
    arena: Vec<u8>,
    frames: Vec<(PeerId, usize, usize)>,
    /// Posts waiting for their channel (the delayed synchronization has not freed it yet), in
    /// posting order.
    blocked: VecDeque<Post>,
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
        Ok(Some(Net {
            proto,
            fabric,
            world,
            nodes: config.nodes,
            arena: vec![0; FRAMES_PER_PASS * mtu],
            frames: Vec::with_capacity(FRAMES_PER_PASS),
            blocked: VecDeque::with_capacity(config.channels as usize),
            done: Vec::with_capacity(config.channels as usize * 2),
        }))
    }

    /// Posts this rank's part of a broadcast; its outcome comes back from [`Net::take_done`]
    /// under `token`. `Err` when refused at once.
    #[allow(clippy::too_many_arguments)]
    pub fn post(
        &mut self,
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
        if root >= self.nodes {
            return Err(StatusKind::BadRoot);
        }
        let len = u32::try_from(len).map_err(|_| StatusKind::BadLength)?;
        let post = Post { comm: self.world, root, buf, len, token };
        // Broadcasts start in posting order: behind one that waits for a channel.
        if self.blocked.is_empty() && self.start(post, now, segments)? {
            return Ok(());
        }
        self.blocked.push_back(post);
        Ok(())
    }

    /// Hands `post` to the protocol: `Ok(false)` when its channel is still held.
    fn start(&mut self, post: Post, now: Nanos, segments: &SegmentTable) -> Result<bool, StatusKind> {
        let Net { proto, fabric, done, .. } = self;
        let mut env = NetEnv { fabric: fabric.as_mut(), segments, done };
        match proto.post_bcast(post, now, &mut env) {
            Ok(()) => Ok(true),
            Err(PostError::WouldBlock) => Ok(false),
            Err(PostError::Refused(s)) => Err(s),
        }
    }

    /// One pass: datagrams in, timers, blocked posts. True if anything happened.
    pub fn pass(&mut self, now: Nanos, segments: &SegmentTable) -> bool {
        let mtu = self.fabric.mtu();
        let Net { proto, fabric, arena, frames, done, .. } = self;
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
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done };
            proto.on_frame(from, &arena[at..at + len], now, &mut env);
        }
        if proto.next_timeout().is_some_and(|t| t <= now) {
            let mut env = NetEnv { fabric: fabric.as_mut(), segments, done };
            proto.on_timeout(now, &mut env);
            work = true;
        }
        while let Some(&post) = self.blocked.front() {
            match self.start(post, now, segments) {
                Ok(false) => break, // still no channel; the rest waits behind it
                Ok(true) => {}
                Err(s) => self
                    .done
                    .push((post.token, Outcome { status: s, bytes: 0, counters: Default::default() })),
            }
            self.blocked.pop_front();
            work = true;
        }
        work
    }

    /// Nothing owed to peers: no broadcast in progress here, and every broadcast this engine
    /// took part in synchronized (or the communicator is broken).
    pub fn quiescent(&self) -> bool {
        self.blocked.is_empty() && self.proto.quiescent()
    }

    /// Broadcasts that ended since the last call.
    pub fn take_done(&mut self) -> std::vec::Drain<'_, (u64, Outcome)> {
        self.done.drain(..)
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
