//! The engine as one sans-IO state machine: descriptor intake, the node's communicators and
//! their slot sequencers, the reliable-transfer layer and the collectives, behind one set of
//! events and one queue of actions (quinn-proto's shape) — and, inside, a dispatcher over
//! collectives (smoltcp's sockets behind one enum): each collective a folder implementing one
//! trait (`cx.rs`), held in one enum (`call.rs`), started by one arm of the planner
//! (`planner.rs`); every answer routed by id to its owner (`dispatch.rs`).
//!
//! Files, from the top: `mod.rs` (this: the events, the host operations and their ordered
//! completions), `dispatch.rs`, `planner.rs`, `participation/` (the in-step policy: how a
//! rank takes part in a call it cannot carry out); `call.rs`; the collectives' folders `bcast/`, `barrier/`, `allgather/`,
//! `allreduce/`, `alltoall/`, `scan/`; `cx.rs`; the machinery they share — `exchange.rs` (the
//! leaders' exchange), `assembly.rs` (a node part's local blocks), `hands.rs`, `reduction.rs`,
//! `links.rs` (pair communicators between engines) — and `node/` (the protocol and the
//! communicators, each with its slot sequencer); `jobs.rs`, `action.rs` (the
//! outbox), `ids.rs`; `drain.rs` (how long the engine lingers once its driver stops, and
//! [`Engine::drained`]). Each imports only files below it.
//!
//! Events, each with `now`: a host attached, registered, posted a descriptor
//! ([`Engine::handle_descriptor`]) or left; a frame arrived ([`Engine::handle_frame`]); a timer
//! fell due ([`Engine::handle_timeout`], when [`Engine::poll_timeout`] says: one timer table,
//! `crate::timer`, keyed by what each deadline times); a DMA job or a
//! group join the driver carried out finished ([`Engine::handle_dma_done`],
//! [`Engine::handle_join_done`]). After each, the driver drains [`Engine::poll_action`] and does
//! what it says, in order: send and multicast frames, join and leave groups, move host memory
//! ([`Action::Dma`]: the only way the engine reaches it — on a DPU, a DMA engine's job), and
//! publish completions, each as its operation ends (a host's later call may end before an
//! earlier one: MPI's non-blocking collectives complete in any order). A driver takes a host's
//! descriptors in whatever else of it is in flight, as many as [`Engine::admits`] says its
//! completion ring has room for.
//!
//! One id per kind of thing named (`ids.rs`): the driver sees [`JobId`]s (and the hosts' own
//! cookies in completions); inside, host operations, composed calls, reductions, exchanges and
//! the posts handed to the reliable-transfer layer are keys of generational tables, and a
//! sequencer's slots are [`Seq`]s — none of them a number with fields packed into its bits.
//!
//! The counters are the engine's own: a completion is counted when it is queued, and moved
//! when a DMA fails under it or its host leaves before it is published.
mod action;
mod allgather;
mod allreduce;
mod alltoall;
mod assembly;
mod barrier;
mod bcast;
mod call;
mod cx;
mod dispatch;
mod drain;
mod exchange;
mod hands;
mod ids;
mod jobs;
mod links;
mod node;
mod participation;
mod planner;
mod reduction;
mod scan;

pub use crate::transfer::env::HostPort;
pub use crate::transfer::summed::SummedLoad;
pub use action::{Action, Dma, Frames, Gather, JobId};
pub use ids::Seq;
pub use node::comms::{parse_record, Record, MAX_COMM_SIZE};
pub use node::world::world_identity_of;
pub use node::world_identity;
pub use node::{CommInfo, CommStats};

use crate::comm::{GroupId, PeerId};
use crate::config::{EngineConfig, LocalRank};
use crate::intake::regions::SegmentHandle;
use crate::intake::{Core, Counters, Departure, HostId};
use crate::transfer::protocol::{OpCounters, Outcome, ProtoCounters};
use crate::Nanos;
use action::Outbox;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use assembly::Assemblies;
use call::Call;
use exchange::Exchanges;
use ids::{CallId, OpId};
use jobs::Job;
use participation::{InStep, Participation};
use reduction::{Over, Reductions};
use ringcast_abi::ctl::CtlStatus;
use ringcast_abi::frame::Crc32c;
use ringcast_abi::{Access, Completion, RegionKey, Status, StatusKind, SubmissionDescriptor};
use slotmap::SlotMap;

/// A host operation whose completion is not published yet.
#[derive(Debug)]
struct HostOp {
    host: HostId,
    cqe: Completion,
    started: Nanos,
    /// Its outcome is still owed (by a DMA job, the protocol, a join); its host's later
    /// completions wait behind it.
    pending: bool,
    /// A broadcast or a communicator's creation or release (not a COPY).
    collective: bool,
    /// How this rank takes part in the call (`participation/`).
    participation: Participation,
    /// The call it is on its communicator, (communicator, index), while it is open there
    /// (`node/call_checks.rs`).
    call: Option<(u64, u64)>,
    /// Its call disagrees with another rank's (`node/call_checks.rs`): it ends
    /// `DigestMismatch`, whatever its parts did.
    disagreed: bool,
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    core: Core,
    /// The protocol and the communicators; `None` without a fabric (`topology.fabric = none`):
    /// such an engine serves NOP and COPY, and fails every collective.
    node: Option<node::Node>,
    out: Outbox,
    /// The jobs the driver carries out and answers, by whose each is (`jobs.rs`).
    jobs: SlotMap<JobId, Job>,
    ops: SlotMap<OpId, HostOp>,
    /// The collective calls in progress, one variant per collective (`call.rs`): the
    /// dispatcher hands each its events (`dispatch.rs`).
    calls: SlotMap<CallId, Call>,
    /// Each host's operations not published yet, in the order their descriptors were taken
    /// (published as each ends: `Engine::publish`; the count is what [`Engine::admits`] reserves).
    queues: Vec<VecDeque<OpId>>,
    /// Primaries of finished sequencer slots waiting for the copies reading their buffers:
    /// (part, copies left, outcome).
    primaries: Vec<(CallId, u32, Outcome)>,
    /// Reductions in progress (`reduction.rs`).
    reductions: Reductions,
    /// Node parts being assembled (`node/assembly.rs`).
    assemblies: Assemblies,
    /// The exchanges between the engines the engine runs itself (`exchange.rs`).
    exchanges: Exchanges,
    /// Reductions that ended as they started, carried on once the step that started them
    /// returned.
    over: Vec<Over>,
    /// The in-step policy's state (`participation/`).
    in_step: InStep,
    /// The call a collective being taken in was just counted as, for the next `new_op`.
    calling: Option<(u64, u64)>,
    /// How long the engine lingers once its driver stops (`drain.rs`).
    drain: drain::Drain,
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}

impl Engine {
    /// An engine sized from `config`; `networked`: it has a fabric (the world communicator is
    /// created, and its group must be joined by the driver before it serves: see
    /// [`Engine::world_group`]). `crc` computes CRC32C (the driver passes the hardware
    /// accelerated one).
    pub fn new(config: &EngineConfig, crc: Crc32c, networked: bool) -> Result<Engine, StatusKind> {
        let node = if networked { Some(node::Node::new(config, crc)?) } else { None };
        Ok(Engine {
            core: Core::new(config.clone()),
            node,
            out: Outbox::default(),
            jobs: SlotMap::with_key(),
            ops: SlotMap::with_key(),
            calls: SlotMap::with_key(),
            primaries: Vec::new(),
            reductions: Reductions::new(config.limits.reduce_staging_bytes),
            assemblies: Assemblies::default(),
            exchanges: Exchanges::default(),
            over: Vec::new(),
            in_step: InStep::default(),
            calling: None,
            drain: drain::Drain::new(config),
            queues: (0..config.limits.max_hosts).map(|_| VecDeque::new()).collect(),
        })
    }

    /// The world communicator's multicast group (`None` without a fabric).
    pub fn world_group(&self) -> Option<GroupId> {
        self.node.as_ref().map(node::Node::world_group)
    }

    /// The intake (hosts, regions, counters).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }

    /// Frames the engine dropped unsent because their payload's broadcast left its channel
    /// (ended or failed) before the driver took them from the outbox.
    pub fn frames_unsent(&self) -> u64 {
        self.out.unsent()
    }

    /// The protocol's counters (zero without a fabric).
    pub fn proto_counters(&self) -> ProtoCounters {
        self.node.as_ref().map(node::Node::proto_counters).unwrap_or_default()
    }

    /// Bytes of protocol state held now (channel buffers, their summed loads' CRCs and
    /// pre-posted slots; zero without a fabric): what a memory bound is checked against (the
    /// simulator's DST does).
    pub fn memory_bytes(&self) -> usize {
        self.node.as_ref().map_or(0, node::Node::memory_bytes)
    }

    /// The most [`Engine::memory_bytes`] may reach for messages up to `largest` bytes with the
    /// communicators alive now (one channel per broadcast slot per communicator, with a CRC per
    /// fragment of a summed load, plus the pre-posted slots).
    pub fn memory_bound(&self, largest: usize) -> usize {
        self.node.as_ref().map_or(0, |n| n.memory_bound(largest))
    }

    /// Whether some communicator alive in the protocol is broken (a peer declared
    /// unreachable): never, in a run without faults that justify it.
    pub fn any_broken(&self) -> bool {
        self.node.as_ref().is_some_and(node::Node::any_broken)
    }

    /// The communicators' life (`COMMS`; `groups` is the fabric's to fill in).
    pub fn comm_stats(&self) -> CommStats {
        self.node.as_ref().map(node::Node::comm_stats).unwrap_or_default()
    }

    /// Every communicator alive here, the world first (empty without a fabric).
    pub fn comm_list(&self) -> Vec<CommInfo> {
        self.node.as_ref().map(node::Node::comm_list).unwrap_or_default()
    }

    /// Whether this engine synchronized others on some communicator that carried broadcasts
    /// (their `SYNC_UP`s came here: a lost `SYNC_DOWN` may be asked for again).
    pub fn answers_sync_children(&self) -> bool {
        self.node.as_ref().is_some_and(node::Node::answers_sync_children)
    }

    /// How long this engine, owing nothing, keeps answering synchronization children that may
    /// have missed their last `SYNC_DOWN`: `default` (the TIME-WAIT), or longer while a
    /// communicator's last `DOWN` came after a long wait ([`crate::transfer::protocol::Protocol::time_wait_of`]).
    pub fn time_wait(&self, default: Nanos) -> Nanos {
        self.node.as_ref().map_or(default, |n| n.time_wait_now(default))
    }

    /// Nothing owed to peers or local processes.
    pub fn quiescent(&self) -> bool {
        self.node.as_ref().is_none_or(node::Node::quiescent)
    }

    /// Host operations not published yet, of `host`.
    pub fn in_flight(&self, host: HostId) -> usize {
        self.queues.get(host.0 as usize).map_or(0, VecDeque::len)
    }

    /// How many more descriptors a driver may take in from `host` now, `cq_free` being the
    /// room left in its completion ring (free slots, less the completions the driver holds and
    /// has not published yet): each descriptor yields exactly one completion, so every one in
    /// flight keeps a slot reserved, and a host never has more in flight than its completion
    /// ring holds (the engine's back-pressure: the rest wait in its submission ring). Whatever
    /// else of the host is in flight: MPI lets a process post collectives on different
    /// communicators in different orders at different ranks, and a descriptor taken only once
    /// the host's earlier ones ended could wait for a call the other ranks post after theirs.
    pub fn admits(&self, host: HostId, cq_free: usize) -> usize {
        cq_free.saturating_sub(self.in_flight(host))
    }

    /// One line of the protocol's state (logs).
    pub fn describe(&self) -> alloc::string::String {
        self.node.as_ref().map(node::Node::describe).unwrap_or_default()
    }

    // ---- hosts -------------------------------------------------------------------------

    /// A new host claiming local rank `claim`; see [`Core::attach_host_as`]. It takes part in
    /// collectives once the driver confirmed it ([`Engine::host_arrived`]).
    pub fn attach_host(&mut self, claim: LocalRank, now: Nanos) -> Result<HostId, CtlStatus> {
        self.core.attach_host_as(now, claim)
    }

    /// The host attached with [`Engine::attach_host`] was told so: with its local rank it
    /// continues the sequence of broadcasts of the process that held the rank before.
    pub fn host_arrived(&mut self, host: HostId) {
        if let (Some(l), Some(node)) = (self.core.local_rank(host), self.node.as_mut()) {
            node.local_arrived(l, &mut self.out);
        }
    }

    /// The host attached with [`Engine::attach_host`] could not be told so: its slot is free
    /// again (it never took part in anything).
    pub fn refuse_host(&mut self, host: HostId, how: Departure, now: Nanos) {
        self.core.detach_host(host, how, 0, now);
    }

    /// A completion the driver took from [`Action::Complete`] could not be published: its host
    /// left. It moves from the completed counters to the dropped ones.
    pub fn abandon(&mut self, cqe: &Completion) {
        self.core.abandoned(cqe);
    }

    /// Fails every collective not finished yet with `status` (the engine is shutting down);
    /// their completions go out now.
    pub fn abort_collectives(&mut self, status: StatusKind) {
        let pending: Vec<OpId> = self
            .queues
            .iter()
            .flatten()
            .copied()
            .filter(|&k| self.ops.get(k).is_some_and(|o| o.pending && o.collective))
            .collect();
        for op in pending {
            self.finish_collective(op, failed(status));
        }
        self.abort_shape_waits();
    }

    /// `host` finalized (`FINALIZE`): it posts nothing more on the world; once every local
    /// process of the world did, the world closes and its last, partial epoch settles with the
    /// other engines. A host without a local rank changes nothing.
    pub fn finalize_host(&mut self, host: HostId, now: Nanos) {
        if let (Some(l), Some(node)) = (self.core.local_rank(host), self.node.as_mut()) {
            node.local_finalized(l, now, &mut self.out);
        }
        self.after(now);
    }

    /// `host` left; `unread`: descriptors still in its submission ring. Its operations not
    /// published yet are dropped (their memory is about to go), the collectives it leaves
    /// unfinished fail at the other local members; returns the segments to unmap.
    pub fn detach_host(
        &mut self,
        host: HostId,
        how: Departure,
        unread: u64,
        now: Nanos,
    ) -> Vec<SegmentHandle> {
        self.drop_shape_waits(host);
        if let Some(queue) = self.queues.get_mut(host.0 as usize) {
            for key in queue.drain(..) {
                if let Some(op) = self.ops.remove(key) {
                    self.core.abandoned(&op.cqe);
                    if let (Some((comm, call)), Some(node)) = (op.call, self.node.as_mut()) {
                        node.call_closed(comm, call);
                    }
                }
            }
        }
        if let (Some(l), Some(node)) = (self.core.local_rank(host), self.node.as_mut()) {
            node.local_gone(l, how == Departure::Lost, now, &mut self.out);
        }
        let segments = self.core.detach_host(host, how, unread, now);
        self.after(now);
        segments
    }

    /// Registers memory; see [`Core::register`].
    pub fn register(
        &mut self,
        host: HostId,
        segment: SegmentHandle,
        seg_len: u64,
        seg_offset: u64,
        len: u64,
        access: Access,
    ) -> Result<RegionKey, CtlStatus> {
        self.core.register(host, segment, seg_len, seg_offset, len, access)
    }

    /// Deregisters `key`; returns the segment to unmap.
    pub fn deregister(&mut self, host: HostId, key: RegionKey) -> Result<SegmentHandle, CtlStatus> {
        self.core.deregister(host, key)
    }

    // ---- events ------------------------------------------------------------------------

    /// Takes in one descriptor from `host`'s submission ring. It yields exactly one completion,
    /// now or later, published as soon as it ends (see [`Engine::admits`] for how many a
    /// driver may take in).
    pub fn handle_descriptor(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) {
        // Behind a call of its host waiting for its shape, in order (`participation/`).
        if !self.hold(host, desc, now) {
            self.take_descriptor(host, desc, now);
        }
        self.after(now);
    }

    /// A frame from engine `from`.
    pub fn handle_frame(&mut self, from: PeerId, bytes: &[u8], now: Nanos) {
        if let Some(node) = self.node.as_mut() {
            node.on_frame(from, bytes, now, &mut self.out, None);
        }
        self.after(now);
    }

    /// [`Engine::handle_frame`], with the driver's direct reach into host memory lent for the
    /// frame: a receiver that serves no repairs writes the frame's payload through `port`
    /// straight into its host buffer, where the driver reaches it at once (the `mapped`
    /// backend) — one copy, instead of into the channel and out by a [`Dma::Store`].
    pub fn handle_frame_placing(&mut self, from: PeerId, bytes: &[u8], now: Nanos, port: &mut dyn HostPort) {
        if let Some(node) = self.node.as_mut() {
            node.on_frame(from, bytes, now, &mut self.out, Some(port));
        }
        self.after(now);
    }

    /// [`Engine::handle_frame_placing`] for a datagram its fabric can keep where it lies (a
    /// receive queue the engine need not drain: `shm`'s multicast log): `false` when it is a
    /// fragment of a broadcast not posted here and no pre-posted slot is free — nothing was
    /// done with it and nothing counted, and the fabric keeps it (and what follows it) to offer
    /// it again once [`Engine::keep_epoch`] has moved. A receiver not yet posted when a root's
    /// 257 fragments came dropped all past its 64 slots, each then repaired point-to-point.
    pub fn offer_frame_placing(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: Nanos,
        port: &mut dyn HostPort,
    ) -> bool {
        let mut declined = false;
        if let Some(node) = self.node.as_mut() {
            node.offer_frame(from, bytes, now, &mut self.out, Some(port), Some(&mut declined));
        }
        self.after(now);
        !declined
    }

    /// Moves whenever a broadcast is posted here, on any communicator (the sum of their post
    /// counts, and of their generations: one created or freed moves it too), which is when a
    /// datagram [`Engine::offer_frame_placing`] declined may be taken: its broadcast posted, or
    /// pre-posted slots freed by a post's replay.
    pub fn keep_epoch(&self) -> u64 {
        self.node.as_ref().map_or(0, |n| n.proto.post_epoch())
    }

    /// Timers due at `now` fire. Returns whether any but the drain's was due (work, for a
    /// driver's idle strategy: the drain's own deadline is not, [`Engine::drain_busy`]).
    pub fn handle_timeout(&mut self, now: Nanos) -> bool {
        let fired = self.node.as_mut().is_some_and(|node| node.on_timeout(now, &mut self.out));
        self.after(now);
        fired
    }

    /// When [`Engine::handle_timeout`] is next due: the earliest deadline of the engine's one
    /// timer table (`timer.rs`), keyed by what each times.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.node.as_ref().and_then(node::Node::next_timeout)
    }

    /// Job `job` ([`Action::Dma`]) is over: `ok` if every byte moved. A job the engine has let
    /// go of meanwhile is ignored.
    pub fn handle_dma_done(&mut self, job: JobId, ok: bool, now: Nanos) {
        self.dma_over(job, ok, now);
        self.after(now);
    }

    /// Job `job` ([`Action::Join`]) is over: `ok` if the group is joined.
    pub fn handle_join_done(&mut self, job: JobId, ok: bool, now: Nanos) {
        let Some(Job::Join { op, slot }) = self.jobs.remove(job) else { return };
        if let Some(node) = self.node.as_mut() {
            if ok {
                node.joined(slot);
            } else {
                node.join_failed(slot, &mut self.out);
            }
        }
        let outcome = if ok { StatusKind::Ok } else { StatusKind::UnknownCommunicator };
        self.finish_collective(op, failed(outcome));
        self.after(now);
    }

    /// The engine memory a job moves bytes into ([`Dma::Load`]) or out of ([`Dma::Store`]);
    /// `None` for a copy between host buffers or a job let go of. A driver asks when it carries
    /// the job out, not when it takes it: a job whose broadcast ended meanwhile (failed, or its
    /// communicator gone while a store part was out) then has `None` and moves nothing.
    pub fn staging(&mut self, job: JobId) -> Option<&mut [u8]> {
        // (Reductions first: their memory is not the job's, and the borrow checker cannot see
        // the job table let go of in an arm that returns another table's memory.)
        if let Job::Reduce { r, load } = *self.jobs.get(job)? {
            return self.reductions.staging(r, load);
        }
        match self.jobs.get_mut(job)? {
            Job::Transfer(token) => {
                let token = *token;
                self.node.as_mut()?.staging(token)
            }
            Job::Record { bytes, .. } => Some(&mut bytes[..]),
            _ => None,
        }
    }

    /// [`Engine::staging`] for a root's broadcast load ([`Dma::Load`]), lent with a slot per
    /// fragment for its payload's CRC32C, for a driver that computes them as it moves the bytes
    /// (a NIC's DMA does; a CPU copy can, each fragment's bytes still in the cache:
    /// [`SummedLoad::fill`]) and then answers [`Engine::handle_dma_summed`]. `None` for any
    /// other job: carried out with [`Engine::staging`], as a driver that only copies does
    /// with every job (its root's frames are then sealed with a pass over each payload).
    pub fn staging_summed(&mut self, job: JobId) -> Option<SummedLoad<'_>> {
        match self.jobs.get(job)? {
            Job::Transfer(token) => {
                let token = *token;
                self.node.as_mut()?.proto.staging_summed(token)
            }
            _ => None,
        }
    }

    /// Job `job`, lent with [`Engine::staging_summed`], is over: every byte moved and every
    /// fragment's sum written (else answer [`Engine::handle_dma_done`] with `false`).
    pub fn handle_dma_summed(&mut self, job: JobId, now: Nanos) {
        if let (Some(Job::Transfer(token)), Some(node)) = (self.jobs.get(job), self.node.as_mut()) {
            node.proto.summed(*token);
        }
        self.handle_dma_done(job, true, now);
    }

    /// The next action, in order; `None` when there is nothing to do.
    pub fn poll_action(&mut self) -> Option<Action<'_>> {
        self.out.poll(self.node.as_ref().map(|n| &n.proto))
    }

    /// The frames queued next, lent together up to the first action that is not a frame (see
    /// [`Frames`]): a driver hands the whole run to its fabric at once (`sendmmsg`) and then
    /// goes on with [`Engine::poll_action`]. Empty when the next action is not a frame.
    pub fn poll_frames(&mut self) -> Frames<'_> {
        self.out.poll_frames(self.node.as_ref().map(|n| &n.proto))
    }

    // ---- inside ------------------------------------------------------------------------

    fn new_op(
        &mut self,
        host: HostId,
        cqe: Completion,
        started: Nanos,
        pending: bool,
        collective: bool,
    ) -> OpId {
        let (reserved, cqe) = self.echoed(host, cqe);
        let call = self.calling.take();
        // (A call its node-mates made another way is found as it is counted: `call_checks.rs`.)
        let disagreed =
            call.is_some_and(|(comm, index)| self.node.as_ref().is_some_and(|n| n.disagrees(comm, index)));
        let participation = Participation::Full;
        let op = HostOp { host, cqe, started, pending, collective, participation, call, disagreed };
        if let (Some((comm, index)), true, Some(node)) = (call, pending, self.node.as_mut()) {
            node.call_opened(comm, index, started);
        }
        let key = match reserved.and_then(|k| self.ops.get_mut(k).map(|o| (k, o))) {
            // Its place in the host's queue was taken when it was held (`participation/`).
            Some((k, o)) => {
                *o = HostOp { started: o.started, ..op };
                k
            }
            None => {
                let key = self.ops.insert(op);
                if let Some(q) = self.queues.get_mut(host.0 as usize) {
                    q.push_back(key);
                }
                key
            }
        };
        self.publish(key);
        key
    }

    /// A collective (broadcast, communicator creation or release) ended for host operation
    /// `op`: count it and let its host's completions go out.
    fn finish_collective(&mut self, op: OpId, outcome: Outcome) {
        // (None: its host left meanwhile.)
        let Some(o) = self.ops.get_mut(op) else { return };
        let outcome = match o.participation.ends(outcome) {
            Some(outcome) => outcome,
            // Another rank made another call (`node/call_checks.rs`): whatever its parts did
            // here.
            None if o.disagreed => Outcome { status: StatusKind::DigestMismatch, bytes: 0, ..outcome },
            None => outcome,
        };
        if let (Some((comm, call)), Some(node)) = (o.call.take(), self.node.as_mut()) {
            if matches!(outcome.status, StatusKind::DigestMismatch | StatusKind::LengthMismatch) {
                node.call_failed(comm, call);
            }
            node.call_closed(comm, call);
        }
        o.cqe.status = Status::from(outcome.status);
        o.cqe.bytes = outcome.bytes;
        o.cqe.frags_multicast = outcome.counters.frags_multicast;
        o.cqe.frags_repair = outcome.counters.frags_repair;
        o.cqe.penalty_rounds = outcome.counters.penalty_rounds;
        o.cqe.retransmits = outcome.counters.retransmits;
        o.pending = false;
        self.core.bcast_done(outcome.status == StatusKind::Ok, &outcome.counters);
        self.publish(op);
    }

    /// Publishes host operation `op` if it is over: each completion goes out as its operation
    /// ends, not behind the host's earlier ones — a later call on another communicator (or a
    /// COPY) may end first, and the host may need it to make the call an earlier one waits for
    /// (MPI's non-blocking collectives complete in any order).
    fn publish(&mut self, op: OpId) {
        let Some(host) = self.ops.get(op).filter(|o| !o.pending).map(|o| o.host) else { return };
        if let Some(queue) = self.queues.get_mut(host.0 as usize) {
            if let Some(i) = queue.iter().position(|&k| k == op) {
                queue.remove(i);
            }
        }
        if let Some(o) = self.ops.remove(op) {
            self.out.complete(o.host, o.cqe, o.started);
        }
    }
}
