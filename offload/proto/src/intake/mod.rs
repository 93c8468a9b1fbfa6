//! The engine's intake: hosts, their registered regions, and each descriptor taken in — a
//! typed refusal, or what it asks for, as actions.
//!
//! It owns the engine state that is not I/O and not a collective's: the host table, each
//! host's registered regions, descriptor validation and execution planning (`plan.rs`, a pure
//! function), counters. It never touches a socket, a clock, a thread or host memory. The engine
//! feeds it events — [`Core::attach_host`], [`Core::register`], [`Core::submit`], … — each with
//! `now`; a descriptor's actions come back from [`Core::submit`] ([`Taken`], nothing is queued
//! here) and are carried out **in order**: an [`Action::Dma`] always comes before the
//! [`Action::Complete`] that reports it, so a host never sees a completion for bytes that have
//! not moved.
//!
//! Every descriptor yields exactly one completion, so a runner that keeps one free completion
//! slot per descriptor it takes never has to drop one (engine-side back-pressure).
use alloc::vec::Vec;
mod plan;
pub mod regions;
use plan::{plan, Plan};
pub use plan::{Ranks, WorldRanks};

use crate::comm::World;
use crate::config::{EngineConfig, LocalRank};
use regions::{RegError, RegionTable, Resolved, SegmentHandle};
use ringcast_abi::ctl::CtlStatus;
use ringcast_abi::{
    Access, Completion, Op, RegionKey, RegistrationRecord, Status, StatusKind, SubmissionDescriptor,
};

/// Monotonic time in nanoseconds, supplied by the runner.
pub type Nanos = u64;

/// Index of a host in the engine's host table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(pub u32);

/// Most actions one descriptor can produce (a COPY: one DMA and one completion).
pub const MAX_ACTIONS_PER_EVENT: usize = 2;

/// What the core made of one descriptor: its actions, to carry out in order — at most
/// [`MAX_ACTIONS_PER_EVENT`], a COPY's DMA before the completion that reports it. Returned,
/// not queued: the core holds no action between two descriptors.
#[derive(Debug, Default)]
pub struct Taken(heapless::Vec<Action, MAX_ACTIONS_PER_EVENT>);

impl Taken {
    fn one(a: Action) -> Taken {
        let mut t = Taken::default();
        t.push(a);
        t
    }

    fn push(&mut self, a: Action) {
        // NOTE(unwrap-free): `take_in` pushes at most MAX_ACTIONS_PER_EVENT (a DMA, then a
        // completion); a debug assertion guards it and release builds keep the first ones.
        let pushed = self.0.push(a);
        debug_assert!(pushed.is_ok(), "more actions than MAX_ACTIONS_PER_EVENT");
    }

    /// The actions, in order.
    pub fn into_vec(self) -> alloc::vec::Vec<Action> {
        self.0.into_iter().collect()
    }
}

impl IntoIterator for Taken {
    type Item = Action;
    type IntoIter = <heapless::Vec<Action, MAX_ACTIONS_PER_EVENT> as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// An allgather, allreduce or reduce (or a barrier) as the intake checked it: this rank's block (`send`, or in place
/// at `recv + me × len`) goes to every rank, every rank's block into `recv` at `rank × len`;
/// an allreduce then reduces them (in rank order, or node by node when leader-based) into the
/// start of `recv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherCall {
    /// Host that posted it.
    pub host: HostId,
    /// Its descriptor's cookie.
    pub cookie: u64,
    /// `ALLGATHER`, `ALLREDUCE`, `REDUCE`, `SCAN`, `EXSCAN`, `ALLTOALL` or `BARRIER` (what the
    /// completion says).
    pub opcode: ringcast_abi::Opcode,
    /// Communicator (0: the engine's world communicator).
    pub comm: u64,
    /// This host's rank in it.
    pub me: u32,
    /// Ranks in it.
    pub size: u32,
    /// Where this rank's block is read from when it is not in place (`None`: in place, or a
    /// call without one; `Some(None)`: a send buffer, on no memory — see `in_step`).
    pub send: Option<Option<Resolved>>,
    /// The receive (work) buffer (`size × len` bytes); `None`: no memory (see `in_step`).
    pub recv: Option<Resolved>,
    /// Block bytes.
    pub len: u64,
    /// An allreduce or reduce: the type and operation the gathered blocks are reduced with.
    pub reduce: Option<(ringcast_abi::DataType, ringcast_abi::ReduceOp)>,
    /// A reduce: the rank that receives the result (the others do not reduce).
    pub root: Option<u32>,
    /// The send and receive regions' keys (a deregistration fails the local copy).
    pub keys: [RegionKey; 2],
    /// When the descriptor was taken in.
    pub started: Nanos,
    /// In step at this rank — refused for its buffers, or for a descriptor field its schedule
    /// does not read, with this status: the call runs in step with the other ranks on no memory (every
    /// buffer `None`) and completes with this status ([`plan`]).
    pub in_step: Option<StatusKind>,
    /// In step for its operation: `reduce` carries an in-step operation (`SUM`, never applied),
    /// and the call's context says so ([`crate::transfer::env::IN_STEP_OP`]).
    pub in_step_op: bool,
}

/// What the runner must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Move `len` bytes from `src` to `dst` (a DMA engine's job; the ranges are bounds-checked
    /// against the registrations and may be in the same segment).
    Dma {
        /// Host whose memory this is.
        host: HostId,
        /// Region the bytes come from (a deregistration fails a DMA still moving).
        src_key: RegionKey,
        /// Region the bytes go to.
        dst_key: RegionKey,
        /// Source.
        src: Resolved,
        /// Destination.
        dst: Resolved,
        /// Bytes.
        len: u64,
    },
    /// Run this rank's part of a broadcast on the fabric (the runner's protocol); the
    /// descriptor completes when the protocol says so, with `cookie`.
    Bcast {
        /// Host that posted it.
        host: HostId,
        /// Its descriptor's cookie.
        cookie: u64,
        /// Communicator (0: the engine's world communicator).
        comm: u64,
        /// Root rank.
        root: u32,
        /// The message buffer: read at the root, written elsewhere; `None`: no memory (see
        /// `in_step`).
        buf: Option<Resolved>,
        /// Its region (a deregistration fails the broadcast at this rank).
        key: RegionKey,
        /// Bytes.
        len: u64,
        /// When the descriptor was taken in.
        started: Nanos,
        /// In step at this rank for its buffer or a field ([`GatherCall::in_step`]).
        in_step: Option<StatusKind>,
    },
    /// Run this rank's part of an allgather (or allreduce), as [`GatherCall`] says; the
    /// descriptor completes when the runner says so, with its cookie.
    Allgather(GatherCall),
    /// Run this rank's part of an alltoall ([`GatherCall`] with `recv` the work buffer, `send`
    /// the send buffer, `len` the block).
    Alltoall(GatherCall),
    /// Run this rank's part of a barrier ([`GatherCall`] with `recv` the scratch of `len`
    /// bytes, no send block, no reduction).
    Barrier(GatherCall),
    /// Create or leave a communicator (`op` is `CommCreate` with the record at `buf`, or
    /// `CommFree`); the runner's communicator tables complete it.
    Comm {
        /// Host that posted it.
        host: HostId,
        /// Its descriptor's cookie.
        cookie: u64,
        /// The communicator's handle.
        comm: u64,
        /// `CommCreate` or `CommFree`.
        op: Op,
        /// The record (`CommCreate`).
        buf: Option<Resolved>,
        /// Its bytes.
        len: u64,
        /// When the descriptor was taken in.
        started: Nanos,
    },
    /// Write `cqe` to `host`'s completion ring (after filling `engine_ns = now - started`).
    Complete {
        /// Recipient.
        host: HostId,
        /// The entry.
        cqe: Completion,
        /// When the descriptor was taken in.
        started: Nanos,
    },
}

/// Engine-wide counters (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Hosts that attached.
    pub hosts_attached: u64,
    /// Hosts that went away without detaching (control socket hang-up, protocol violation).
    pub hosts_lost: u64,
    /// Descriptors completed with `Ok`.
    pub completed_ok: u64,
    /// Descriptors completed with an error status.
    pub completed_err: u64,
    /// Descriptors a dead host left in its submission ring.
    pub dropped_in_flight: u64,
    /// Bytes moved by DMA.
    pub dma_bytes: u64,
    /// Collective operations that ended (ok or not), and what they report summed: fragments
    /// received by multicast and by repair, penalty rounds.
    pub collectives: u64,
    /// See `collectives`.
    pub frags_multicast: u64,
    /// See `collectives`.
    pub frags_repair: u64,
    /// See `collectives`.
    pub penalty_rounds: u64,
}

/// Why a host left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Departure {
    /// It sent DETACH.
    Clean,
    /// Its control socket hung up, or it broke the ring protocol.
    Lost,
}

#[derive(Debug)]
struct HostState {
    regions: RegionTable,
    /// Its rank among the engine's local processes (`0..ppn`); `None`: it can COPY, not
    /// broadcast.
    local: Option<u32>,
}

/// The sans-IO engine core.
#[derive(Debug)]
pub struct Core {
    config: EngineConfig,
    /// The world's shape, from `config.topology` (built once: the intake asks it per
    /// descriptor).
    world: World,
    hosts: Vec<Option<HostState>>,
    counters: Counters,
}

impl Core {
    /// A core with tables sized from `config` (allocated here, never grown afterwards).
    pub fn new(config: EngineConfig) -> Self {
        let hosts = (0..config.limits.max_hosts).map(|_| None).collect();
        let world = config.topology.world();
        Core { config, world, hosts, counters: Counters::default() }
    }

    /// The configuration the core was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Hosts currently attached.
    pub fn hosts_attached_now(&self) -> usize {
        self.hosts.iter().filter(|h| h.is_some()).count()
    }

    /// Hosts attached now that hold a local rank (observers such as `ringcast stats` and
    /// COPY-only clients not counted).
    pub fn ranked_hosts_now(&self) -> usize {
        self.hosts.iter().flatten().filter(|h| h.local.is_some()).count()
    }

    /// A new host: takes the lowest free slot of the host table, and the lowest free local rank
    /// if there is one.
    pub fn attach_host(&mut self, now: Nanos) -> Result<HostId, CtlStatus> {
        self.attach_host_as(now, LocalRank::Auto)
    }

    /// A new host claiming local rank `claim` (`Auto`: the lowest free one, or none when all
    /// `ppn` are held). A fixed claim that is held or outside `0..ppn` is refused with
    /// `RANK_TAKEN`.
    pub fn attach_host_as(&mut self, _now: Nanos, claim: LocalRank) -> Result<HostId, CtlStatus> {
        let slot = self.hosts.iter().position(Option::is_none).ok_or(CtlStatus::TOO_MANY_HOSTS)?;
        let held = |l: u32| self.hosts.iter().flatten().any(|h| h.local == Some(l));
        let local = match claim {
            LocalRank::Fixed(l) if l >= self.config.topology.local_capacity() || held(l) => {
                return Err(CtlStatus::RANK_TAKEN)
            }
            LocalRank::Fixed(l) => Some(l),
            LocalRank::Auto => (0..self.config.topology.local_capacity()).find(|&l| !held(l)),
            LocalRank::None => None,
        };
        self.hosts[slot] =
            Some(HostState { regions: RegionTable::new(self.config.limits.max_regions), local });
        self.counters.hosts_attached += 1;
        Ok(HostId(slot as u32))
    }

    /// `host`'s local rank, if it holds one.
    pub fn local_rank(&self, host: HostId) -> Option<u32> {
        self.hosts.get(host.0 as usize)?.as_ref()?.local
    }

    /// A host left. Returns the segments of its regions so the runner can unmap them; the
    /// `in_flight` descriptors the runner found still queued are counted as dropped.
    pub fn detach_host(
        &mut self,
        host: HostId,
        how: Departure,
        in_flight: u64,
        _now: Nanos,
    ) -> Vec<SegmentHandle> {
        let Some(mut state) = self.hosts.get_mut(host.0 as usize).and_then(Option::take) else {
            return Vec::new();
        };
        if how == Departure::Lost {
            self.counters.hosts_lost += 1;
        }
        self.counters.dropped_in_flight += in_flight;
        state.regions.drain().into_iter().map(|r| SegmentHandle(r.segment)).collect()
    }

    /// Registers `len` bytes at `seg_offset` of a segment of `seg_len` bytes the runner mapped.
    pub fn register(
        &mut self,
        host: HostId,
        segment: SegmentHandle,
        seg_len: u64,
        seg_offset: u64,
        len: u64,
        access: Access,
    ) -> Result<RegionKey, CtlStatus> {
        let max = self.config.limits.max_region_bytes;
        let state = self.host_mut(host).ok_or(CtlStatus::BAD_REQUEST)?;
        if access.0 & !Access::DEFINED != 0 || access.0 == 0 || len == 0 {
            return Err(CtlStatus::BAD_REQUEST);
        }
        match seg_offset.checked_add(len) {
            Some(end) if end <= seg_len => {}
            _ => return Err(CtlStatus::BAD_REQUEST),
        }
        if len > max {
            return Err(CtlStatus::LIMIT);
        }
        state
            .regions
            .insert(RegistrationRecord { key: RegionKey::NONE, access, segment: segment.0, seg_offset, len })
            .map_err(|_| CtlStatus::TOO_MANY_REGIONS)
    }

    /// Deregisters `key`; returns the segment to unmap.
    pub fn deregister(&mut self, host: HostId, key: RegionKey) -> Result<SegmentHandle, CtlStatus> {
        let state = self.host_mut(host).ok_or(CtlStatus::BAD_REQUEST)?;
        match state.regions.remove(key) {
            Ok(r) => Ok(SegmentHandle(r.segment)),
            Err(RegError::Unknown | RegError::Full) => Err(CtlStatus::UNKNOWN_REGION),
        }
    }

    /// Takes in one descriptor from `host`'s submission ring. Always queues exactly one
    /// completion (preceded by the DMA for a valid COPY), or hands a collective to the runner.
    /// A host's rank is its world rank on communicator 0 and unknown elsewhere: see
    /// [`Core::submit_with`].
    pub fn submit(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) -> Taken {
        // (A uniform world is two numbers; an uneven one an `Arc`: cloning is a count bump.)
        let world = self.world.clone();
        let world = WorldRanks { node: self.config.topology.node, world: &world };
        self.submit_with(host, desc, now, &world)
    }

    /// [`Core::submit`], with the runner's communicator tables answering who the host is in the
    /// descriptor's communicator (the root reads its buffer, the others write theirs).
    pub fn submit_with(
        &mut self,
        host: HostId,
        desc: &SubmissionDescriptor,
        now: Nanos,
        ranks: &dyn Ranks,
    ) -> Taken {
        self.take_in(host, desc, now, ranks, None)
    }

    /// [`Core::submit_with`] for a call already in step at this rank with `status`: it runs
    /// in step on no memory (every buffer `None`) and ends with `status` — a
    /// call that awaited its shape and learnt it from the other ranks (`engine/node/call_shapes.rs`),
    /// `desc` carrying their shape. Should that shape not run here either, the call is
    /// refused at once, with `status`.
    pub fn submit_in_step(
        &mut self,
        host: HostId,
        desc: &SubmissionDescriptor,
        status: StatusKind,
        now: Nanos,
        ranks: &dyn Ranks,
    ) -> Taken {
        self.take_in(host, desc, now, ranks, Some(status))
    }

    fn take_in(
        &mut self,
        host: HostId,
        desc: &SubmissionDescriptor,
        now: Nanos,
        ranks: &dyn Ranks,
        preset: Option<StatusKind>,
    ) -> Taken {
        let max_op_bytes = self.config.limits.max_op_bytes;
        let mut in_step = preset;
        let outcome = match self.host_mut(host) {
            Some(state) => {
                let who = (ranks.rank(state.local, desc.comm), ranks.size(desc.comm));
                plan(&state.regions, desc, max_op_bytes, who, &mut in_step)
            }
            None => Err(StatusKind::BadDescriptor),
        };
        // A call taken in again in step runs as a collective or not at all: nothing else it
        // could be (an engine's answer naming a COPY) may touch memory or succeed.
        let outcome = match (preset, outcome) {
            (Some(s), Ok(Plan::Nothing | Plan::Comm { .. } | Plan::Dma { .. })) => Err(s),
            (_, o) => o,
        };
        // A collective in step at this rank (its buffers, a field its schedule does not read)
        // touches none of its buffers: every one is `None` (`in_step` names why).
        let mem = |r: Option<Resolved>| r.filter(|_| in_step.is_none());
        let mut taken = Taken::default();
        let cqe = match outcome {
            Ok(Plan::Nothing) => Completion::new(desc.cookie, desc.opcode, Status::OK, 0),
            Ok(Plan::Bcast { buf, len }) => {
                // Completed later, by the runner, when the protocol is done with it.
                let (cookie, comm, root, key) = (desc.cookie, desc.comm, desc.root, desc.key);
                let buf = mem(buf);
                return Taken::one(Action::Bcast {
                    host,
                    cookie,
                    comm,
                    root,
                    buf,
                    key,
                    len,
                    started: now,
                    in_step,
                });
            }
            Ok(Plan::Comm { op, buf, len }) => {
                let (cookie, comm) = (desc.cookie, desc.comm);
                return Taken::one(Action::Comm { host, cookie, comm, op, buf, len, started: now });
            }
            Ok(Plan::Allgather { me, size, send, recv, len, reduce, root, in_step_op }) => {
                let (cookie, comm, opcode, keys) =
                    (desc.cookie, desc.comm, desc.opcode, [desc.aux_key, desc.key]);
                let call = GatherCall {
                    host,
                    cookie,
                    opcode,
                    comm,
                    me,
                    size,
                    send: send.map(mem),
                    recv: mem(recv),
                    len,
                    reduce,
                    root,
                    keys,
                    started: now,
                    in_step,
                    in_step_op,
                };
                return Taken::one(Action::Allgather(call));
            }
            Ok(Plan::Alltoall { me, size, send, work, len }) => {
                let call = GatherCall {
                    host,
                    cookie: desc.cookie,
                    opcode: desc.opcode,
                    comm: desc.comm,
                    me,
                    size,
                    send: Some(mem(send)),
                    recv: mem(work),
                    len,
                    reduce: None,
                    root: None,
                    keys: [desc.aux_key, desc.key],
                    started: now,
                    in_step,
                    in_step_op: false,
                };
                return Taken::one(Action::Alltoall(call));
            }
            Ok(Plan::Barrier { me, size, scratch, len }) => {
                let call = GatherCall {
                    host,
                    cookie: desc.cookie,
                    opcode: desc.opcode,
                    comm: desc.comm,
                    me,
                    size,
                    send: None,
                    recv: mem(scratch),
                    len,
                    reduce: None,
                    root: None,
                    keys: [desc.key, desc.key],
                    started: now,
                    in_step,
                    in_step_op: false,
                };
                return Taken::one(Action::Barrier(call));
            }
            Ok(Plan::Dma { src, dst, len }) => {
                taken.push(Action::Dma { host, src_key: desc.aux_key, dst_key: desc.key, src, dst, len });
                self.counters.dma_bytes += len;
                Completion::new(desc.cookie, desc.opcode, Status::OK, len)
            }
            Err(kind) => Completion::new(desc.cookie, desc.opcode, preset.unwrap_or(kind).into(), 0),
        };
        if cqe.status.is_ok() {
            self.counters.completed_ok += 1;
        } else {
            self.counters.completed_err += 1;
        }
        taken.push(Action::Complete { host, cqe, started: now });
        taken
    }

    /// A collective the core refused at once (counted as an error) runs after all, in
    /// step (`Core::submit_in_step`), and is counted when it ends: uncount it here.
    pub fn runs_in_step(&mut self) {
        self.counters.completed_err = self.counters.completed_err.saturating_sub(1);
    }

    /// The runner could not carry out a DMA the core planned (its memory was deregistered while
    /// the operation was in flight): the completion goes out as an error; fix the counters.
    pub fn dma_failed(&mut self, bytes: u64) {
        self.counters.completed_ok = self.counters.completed_ok.saturating_sub(1);
        self.counters.completed_err += 1;
        self.counters.dma_bytes = self.counters.dma_bytes.saturating_sub(bytes);
    }

    /// A host left before the completion of an operation the core already counted could be
    /// published: move it from the completed counters to the dropped ones.
    pub fn abandoned(&mut self, cqe: &Completion) {
        if cqe.status.is_ok() {
            self.counters.completed_ok = self.counters.completed_ok.saturating_sub(1);
            self.counters.dma_bytes = self.counters.dma_bytes.saturating_sub(cqe.bytes);
        } else {
            self.counters.completed_err = self.counters.completed_err.saturating_sub(1);
        }
        self.counters.dropped_in_flight += 1;
    }

    /// A broadcast the core handed out ([`Action::Bcast`]) ended at this rank: count it.
    pub fn bcast_done(&mut self, ok: bool, ops: &crate::transfer::env::OpCounters) {
        let c = &mut self.counters;
        c.collectives += 1;
        c.frags_multicast += u64::from(ops.frags_multicast);
        c.frags_repair += u64::from(ops.frags_repair);
        c.penalty_rounds += u64::from(ops.penalty_rounds);
        if ok {
            self.counters.completed_ok += 1;
        } else {
            self.counters.completed_err += 1;
        }
    }

    fn host_mut(&mut self, host: HostId) -> Option<&mut HostState> {
        self.hosts.get_mut(host.0 as usize)?.as_mut()
    }
}

#[cfg(test)]
mod tests;
