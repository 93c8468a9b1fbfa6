//! The engine as one sans-IO state machine: descriptor intake, the node's communicators and
//! gather, the reliable-transfer layer and the collectives, behind one set of events and one
//! queue of actions (quinn-proto's shape).
//!
//! Events, each with `now`: a host attached, registered, posted a descriptor
//! ([`Engine::handle_descriptor`]) or left; a frame arrived ([`Engine::handle_frame`]); a timer
//! fell due ([`Engine::handle_timeout`], when [`Engine::poll_timeout`] says); a DMA job or a
//! group join the driver carried out finished ([`Engine::handle_dma_done`],
//! [`Engine::handle_join_done`]). After each, the driver drains [`Engine::poll_action`] and does
//! what it says, in order: send and multicast frames, join and leave groups, move host memory
//! ([`Action::Dma`]: the only way the engine reaches it — on a DPU, a DMA engine's job), and
//! publish completions, each host's in the order its descriptors were taken.
//!
//! One token space: the driver sees [`JobId`]s (and the hosts' own cookies in completions).
//! Inside, a host operation is a key of the operation table; the protocol's broadcasts are
//! named by communicator slot and gather slot, which never leave this module.
//!
//! The counters are the engine's own: a completion is counted when it is queued, and moved
//! when a DMA fails under it or its host leaves before it is published.
mod action;
mod allgather;
mod alltoall;
mod assembly;
mod barrier;
mod call_checks;
mod call_shapes;
mod comms;
mod composite;
mod descriptors;
mod doubling;
mod gather;
mod leader_schedule;
mod lifecycle;
mod members;
mod node;
mod pairs;
mod pairwise;
mod reduction;
mod slab;
mod void_calls;

pub use action::{Action, Dma, JobId};
pub use comms::{parse_record, Record, MAX_COMM_SIZE};
pub use gather::{Delivery, Gather, Placement, Start};
pub use members::Members;
pub use node::{CommInfo, CommStats};
pub use pairs::{doubling_partners, power_below, PairSet};

use crate::comm::ident::{derived_identity, CommIdentity};
use crate::comm::{GroupId, PeerId};
use crate::config::{EngineConfig, JobSecret, LocalRank};
use crate::intake::regions::{Resolved, SegmentHandle};
use crate::intake::{Core, Counters, Departure, HostId};
use crate::transfer::protocol::{DmaDir, DmaToken, OpCounters, Outcome, ProtoCounters};
use crate::Nanos;
use action::Outbox;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::vec::Vec;
use ringcast_abi::ctl::CtlStatus;
use ringcast_abi::frame::Crc32c;
use ringcast_abi::{Access, Completion, RegionKey, Status, StatusKind, SubmissionDescriptor};
use slab::Slab;

/// The world communicator's identity, the same at every engine of `job`; its frames are keyed
/// by `secret` (the job's, `RINGCAST_JOB_SECRET`).
pub fn world_identity(job: &str, secret: &JobSecret) -> CommIdentity {
    derived_identity(&format!("ringcast world communicator of job {job}"), secret.0.as_ref())
}

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
    /// A collective refused at this rank for its buffers or a field its schedule does not read
    /// ([`intake::GatherCall::refused`]): it runs in step on no memory and completes with this
    /// status, whatever its parts did.
    refused: Option<StatusKind>,
    /// The call it is on its communicator, (communicator, index), while it is open there
    /// (`call_checks.rs`).
    call: Option<(u64, u64)>,
    /// Its call disagrees with another rank's (`call_checks.rs`): it ends `DigestMismatch`,
    /// whatever its parts did.
    disagreed: bool,
}

/// What a [`JobId`] stands for.
#[derive(Debug)]
enum Job {
    /// A COPY descriptor's bytes.
    Copy { op: u64, len: u64 },
    /// The protocol's load or store of a broadcast's channel.
    Proto(DmaToken),
    /// A broadcast's intra-node delivery into one more local buffer, then its outcome; then
    /// the primary's completion, if this was the last copy reading its buffer.
    Deliver { op: u64, outcome: Outcome, primary: Option<u64> },
    /// A communicator's creation record, loaded into `bytes`.
    Record { op: u64, local: u32, comm: u64, bytes: Vec<u8> },
    /// The multicast group of the communicator in slot `slot`, created by `op`.
    Join { op: u64, slot: usize },
    /// A composed collective's local copy (`allgather.rs`), part of `token`.
    Part { token: u64 },
    /// Blocks `first..first + blocks` of reduction `r`'s staging, being loaded (`reduction.rs`).
    ReduceLoad { r: u64, first: u32, blocks: u32 },
    /// Reduction `r`'s result, being stored.
    ReduceStore { r: u64 },
    /// One copy of a node part's assembly (`assembly.rs`): gather slot `seq` of `comm`.
    Assemble { comm: u64, seq: u64 },
    /// A local copy of pairwise alltoall `key` (`pairwise.rs`).
    Pairwise { key: u64 },
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    core: Core,
    /// The protocol and the communicators; `None` without a fabric (`topology.fabric = none`):
    /// such an engine serves NOP and COPY, and fails every collective.
    node: Option<node::Node>,
    out: Outbox,
    jobs: Slab<Job>,
    ops: Slab<HostOp>,
    /// Composed collectives in progress (`allgather.rs`); their parts carry keys of this
    /// table tagged with `slab::TAGGED`.
    parts: Slab<composite::Composite>,
    /// Each host's operations, in the order their descriptors were taken.
    queues: Vec<VecDeque<u64>>,
    /// Primaries of finished gather slots waiting for the copies reading their buffers:
    /// (token, copies left, outcome).
    primaries: Vec<(u64, u32, Outcome)>,
    /// Reductions in progress (`reduction.rs`).
    reductions: Slab<reduction::Reduction>,
    /// Recursive-doubling allreduces and allgathers and pairwise alltoalls in progress
    /// (`doubling.rs`, `pairwise.rs`), and the calls whose gather slot has not started yet.
    doublings: Slab<doubling::Doubling>,
    doubling_calls: Vec<doubling::DoublingCall>,
    /// Pairwise alltoalls' lists of local processes between uses (`pairwise.rs`).
    spare_locals: Vec<Vec<pairwise::Local>>,
    /// Started slots waiting for the doubling before them on their communicator: one runs at a
    /// time per communicator, in slot order, so both ends of a pair post in the same order.
    doubling_queue: VecDeque<(u64, gather::Start)>,
    /// Their steps that ended (reductions, transfers): (doubling, outcome), taken in `after`.
    doubling_done: Vec<(u64, Outcome)>,
    /// A job on a refused call's buffers is failing now ([`Engine::dma_fault`]).
    refusing: bool,
    /// Reduction buffers between uses (one per reduction ever in flight at once).
    reduce_spare: Vec<Vec<u8>>,
    /// The source lists of reductions between uses (as `reduce_spare`).
    reduce_runs: Vec<Vec<(Resolved, u32)>>,
    /// Where a reduction's blocks are, while it is started (kept: no allocation per call).
    reduce_sources: Vec<(Resolved, u32)>,
    /// Node parts of leader-based allgathers being assembled (`assembly.rs`).
    assemblies: Vec<assembly::Assembly>,
    /// Void calls, each with the descriptors its host posted behind it on its communicator
    /// (`void_calls.rs`).
    stalled: Vec<void_calls::Stalled>,
    /// The operation a held descriptor or void call reserved, for the next `new_op` to fill.
    reserved: Option<u64>,
    /// While a void call is taken in under the shape the other ranks gave it: its own opcode,
    /// which its completion echoes.
    resubmitting: Option<ringcast_abi::Opcode>,
    /// Void calls are being resolved (the descriptors held behind one may make another).
    resolving: bool,
    /// The call a collective being taken in was just counted as, for the next `new_op`.
    calling: Option<(u64, u64)>,
    /// Piece lists of finished assemblies, for the next ones.
    spare_pieces: Vec<Vec<assembly::Piece>>,
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
            jobs: Slab::default(),
            ops: Slab::default(),
            parts: Slab::default(),
            primaries: Vec::new(),
            reductions: Slab::default(),
            doublings: Slab::default(),
            doubling_calls: Vec::new(),
            spare_locals: Vec::new(),
            doubling_queue: VecDeque::new(),
            doubling_done: Vec::new(),
            refusing: false,
            reduce_spare: Vec::new(),
            reduce_runs: Vec::new(),
            reduce_sources: Vec::new(),
            assemblies: Vec::new(),
            spare_pieces: Vec::new(),
            stalled: Vec::new(),
            reserved: None,
            resubmitting: None,
            resolving: false,
            calling: None,
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

    /// The protocol's counters (zero without a fabric).
    pub fn proto_counters(&self) -> ProtoCounters {
        self.node.as_ref().map(node::Node::proto_counters).unwrap_or_default()
    }

    /// Bytes of protocol state held now (channel buffers and pre-posted slots; zero without a
    /// fabric): what a memory bound is checked against (the simulator's DST does).
    pub fn memory_bytes(&self) -> usize {
        self.node.as_ref().map_or(0, node::Node::memory_bytes)
    }

    /// The most [`Engine::memory_bytes`] may reach for messages up to `largest` bytes with the
    /// communicators alive now (one channel per broadcast slot per communicator, plus the
    /// pre-posted slots).
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

    /// Nothing owed to peers or local processes.
    pub fn quiescent(&self) -> bool {
        self.node.as_ref().is_none_or(node::Node::quiescent)
    }

    /// Host operations not published yet, of `host`.
    pub fn in_flight(&self, host: HostId) -> usize {
        self.queues.get(host.0 as usize).map_or(0, VecDeque::len)
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
            node.local_arrived(l);
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
    /// their completions go out in order.
    pub fn abort_collectives(&mut self, status: StatusKind) {
        let pending: Vec<u64> = self
            .queues
            .iter()
            .flatten()
            .copied()
            .filter(|&k| self.ops.get(k).is_some_and(|o| o.pending && o.collective))
            .collect();
        for op in pending {
            self.finish_collective(op, failed(status));
        }
        self.abort_void_calls();
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
        self.drop_void_calls(host);
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
    /// now or later, in order behind the host's earlier ones.
    pub fn handle_descriptor(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) {
        // Behind a void call of its host, in order (`void_calls.rs`).
        if !self.hold(host, desc, now) {
            self.take_descriptor(host, desc, now);
        }
        self.after(now);
    }

    /// A frame from engine `from`.
    pub fn handle_frame(&mut self, from: PeerId, bytes: &[u8], now: Nanos) {
        if let Some(node) = self.node.as_mut() {
            node.on_frame(from, bytes, now, &mut self.out);
        }
        self.after(now);
    }

    /// Timers due at `now` fire.
    pub fn handle_timeout(&mut self, now: Nanos) {
        if let Some(node) = self.node.as_mut() {
            node.on_timeout(now, &mut self.out);
        }
        self.after(now);
    }

    /// When [`Engine::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.node.as_ref().and_then(node::Node::next_timeout)
    }

    /// Job `job` ([`Action::Dma`]) is over: `ok` if every byte moved. A job the engine has let
    /// go of meanwhile is ignored.
    pub fn handle_dma_done(&mut self, job: JobId, ok: bool, now: Nanos) {
        self.dma_over(job, ok, now);
        self.after(now);
    }

    /// Marks host operation `op` as refused at this rank with `status` (see
    /// [`intake::GatherCall::refused`]).
    pub(super) fn refuse_op(&mut self, op: u64, status: Option<StatusKind>) {
        if let (Some(status), Some(o)) = (status, self.ops.get_mut(op)) {
            o.refused = Some(status);
        }
    }

    /// What a failed host-memory job means for the operations it served: `OutOfBounds` (the
    /// memory went away under it), or — a job on a call refused at its rank — `RootFailed`
    /// for the other processes whose collective needed that call's bytes: their buffers are
    /// fine, a rank's part could not be read (the refused call itself ends with its own status).
    pub(super) fn dma_fault(&self) -> StatusKind {
        if self.refusing {
            StatusKind::RootFailed
        } else {
            StatusKind::OutOfBounds
        }
    }

    /// [`Engine::handle_dma_done`] without the round of [`Engine::after`].
    fn dma_over(&mut self, job: JobId, ok: bool, now: Nanos) {
        let Some(j) = self.jobs.remove(job.0) else { return };
        match j {
            Job::Copy { op, len } => {
                if let Some(o) = self.ops.get_mut(op) {
                    if !ok {
                        o.cqe.status = Status::from(StatusKind::OutOfBounds);
                        o.cqe.bytes = 0;
                        self.core.dma_failed(len);
                    }
                    o.pending = false;
                    let host = o.host;
                    self.flush(host);
                }
            }
            Job::Proto(token) => {
                if let Some(node) = self.node.as_mut() {
                    node.dma_done(token, ok, now, &mut self.out);
                }
            }
            Job::Deliver { op, outcome, primary } => {
                let outcome =
                    if ok { outcome } else { Outcome { status: self.dma_fault(), bytes: 0, ..outcome } };
                self.finish_collective(op, outcome);
                self.copied(primary);
            }
            Job::Record { op, local, comm, bytes } => {
                let node = self.node.as_mut();
                match (ok, node) {
                    (false, _) => self.finish_collective(op, failed(StatusKind::OutOfBounds)),
                    (true, None) => self.finish_collective(op, failed(StatusKind::UnknownCommunicator)),
                    (true, Some(node)) => match node.comm_create(local, comm, &bytes) {
                        Ok(None) => self.finish_collective(op, failed(StatusKind::Ok)),
                        Ok(Some((slot, group))) => {
                            let job = JobId(self.jobs.insert(Job::Join { op, slot }));
                            self.out.join(job, group);
                        }
                        Err(kind) => self.finish_collective(op, failed(kind)),
                    },
                }
            }
            Job::Assemble { comm, seq } => self.assembly_copied(comm, seq, ok),
            Job::Pairwise { key } => self.pairwise_copied(key, ok),
            Job::Part { token } => {
                let outcome = if ok { failed(StatusKind::Ok) } else { failed(self.dma_fault()) };
                self.finish_part(token, outcome);
            }
            Job::ReduceLoad { r, .. } => self.reduce_loaded(r, ok),
            Job::ReduceStore { r } => self.reduce_stored(r, ok),
            Job::Join { .. } => {} // answered by handle_join_done
        }
    }

    /// Job `job` ([`Action::Join`]) is over: `ok` if the group is joined.
    pub fn handle_join_done(&mut self, job: JobId, ok: bool, now: Nanos) {
        let Some(Job::Join { op, slot }) = self.jobs.remove(job.0) else { return };
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
        match *self.jobs.get(job.0)? {
            Job::ReduceLoad { r, first, blocks } => return self.reduction_staging(r, first, blocks),
            Job::ReduceStore { r } => return self.reduction_staging(r, 0, 0),
            _ => {}
        }
        match self.jobs.get_mut(job.0)? {
            Job::Proto(token) => {
                let token = *token;
                self.node.as_mut()?.staging(token)
            }
            Job::Record { bytes, .. } => Some(&mut bytes[..]),
            _ => None,
        }
    }

    /// The next action, in order; `None` when there is nothing to do.
    pub fn poll_action(&mut self) -> Option<Action<'_>> {
        self.out.poll()
    }

    // ---- inside ------------------------------------------------------------------------

    fn new_op(
        &mut self,
        host: HostId,
        cqe: Completion,
        started: Nanos,
        pending: bool,
        collective: bool,
    ) -> u64 {
        let (reserved, cqe) = self.echoed(host, cqe);
        let call = self.calling.take();
        // (A call its node-mates made another way is found as it is counted: `call_checks.rs`.)
        let disagreed =
            call.is_some_and(|(comm, index)| self.node.as_ref().is_some_and(|n| n.disagrees(comm, index)));
        let op = HostOp { host, cqe, started, pending, collective, refused: None, call, disagreed };
        if let (Some((comm, index)), true, Some(node)) = (call, pending, self.node.as_mut()) {
            node.call_opened(comm, index, started);
        }
        let key = match reserved.and_then(|k| self.ops.get_mut(k).map(|o| (k, o))) {
            // Its place in the host's queue was taken when it was held (`void_calls.rs`).
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
        if !pending {
            self.flush(host);
        }
        key
    }

    /// A collective (broadcast, communicator creation or release) ended for host operation
    /// `op`: count it and let its host's completions go out.
    fn finish_collective(&mut self, op: u64, outcome: Outcome) {
        if op & slab::TAGGED != 0 {
            return self.finish_part(op, outcome);
        }
        // (None: its host left meanwhile.)
        let Some(o) = self.ops.get_mut(op) else { return };
        // A call refused at its rank (its buffers, or a field its schedule does not read) ran
        // on no memory, and could never have succeeded: whatever that run met, it ends with why
        // it was refused — unless the engine then refused it for a field that shapes it (a
        // broadcast's root outside the communicator: it never ran, that rank is out of step,
        // `skip`).
        let never_ran = matches!(
            outcome.status,
            StatusKind::BadRoot
                | StatusKind::BadLength
                | StatusKind::BadDescriptor
                | StatusKind::UnknownCommunicator
                | StatusKind::NoRank
                | StatusKind::EngineShutdown
        );
        let outcome = match o.refused {
            Some(status) if !never_ran => Outcome { status, bytes: 0, ..outcome },
            // Another rank made another call (`call_checks.rs`): whatever its parts did here.
            _ if o.disagreed => Outcome { status: StatusKind::DigestMismatch, bytes: 0, ..outcome },
            _ => outcome,
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
        let host = o.host;
        self.core.bcast_done(outcome.status == StatusKind::Ok, &outcome.counters);
        self.flush(host);
    }

    /// One copy reading primary `primary`'s buffer is over: the last one completes it.
    fn copied(&mut self, primary: Option<u64>) {
        let Some(p) = primary else { return };
        let Some(i) = self.primaries.iter().position(|w| w.0 == p) else { return };
        self.primaries[i].1 -= 1;
        if self.primaries[i].1 == 0 {
            let (token, _, outcome) = self.primaries.swap_remove(i);
            self.finish_collective(token, outcome);
        }
    }

    /// Publishes `host`'s finished operations at the front of its queue.
    fn flush(&mut self, host: HostId) {
        let Some(queue) = self.queues.get_mut(host.0 as usize) else { return };
        while let Some(&key) = queue.front() {
            match self.ops.get(key) {
                Some(op) if op.pending => break,
                Some(_) => {
                    queue.pop_front();
                    if let Some(op) = self.ops.remove(key) {
                        self.out.complete(op.host, op.cqe, op.started);
                    }
                }
                None => {
                    queue.pop_front();
                }
            }
        }
    }

    /// After every event: the slots that can start, the protocol's host-memory jobs and the
    /// broadcasts it ended, the deliveries they make, the communicators that settled.
    fn after(&mut self, now: Nanos) {
        loop {
            let resolved = self.resolve_void_calls(now);
            self.step_node(now);
            // Slots and transfers the engine carries out itself (`doubling.rs`): their progress
            // may finish slots, which the next round delivers.
            let Some(node) = self.node.as_mut() else { return };
            let mut started = Vec::new();
            node.take_local_started(&mut started);
            node.take_pair_done(&mut self.doubling_done);
            self.doubling_queue.extend(started);
            let done = core::mem::take(&mut self.doubling_done);
            let disagreed = self.disagreed_calls();
            let mut progress = resolved || !done.is_empty() || disagreed;
            // Jobs on a refused call's buffers fail here, never reaching the driver.
            while let Some(job) = self.out.pop_refused() {
                progress = true;
                self.refusing = true;
                self.dma_over(job, false, now);
                self.refusing = false;
            }
            for (key, outcome) in done {
                self.doubling_part_over(key, outcome, now);
            }
            // The first waiting slot of each communicator without a doubling running starts.
            let next = self.doubling_queue.iter().position(|(c, _)| !self.doubling_runs(*c));
            match next.and_then(|i| self.doubling_queue.remove(i)) {
                Some((comm, start)) => self.start_doubling(comm, start, now),
                None if !progress => return,
                None => {}
            }
        }
    }

    /// One step of the node: slots started, the protocol's jobs issued, deliveries carried out.
    fn step_node(&mut self, now: Nanos) {
        let Some(node) = self.node.as_mut() else { return };
        let mut deliveries = Vec::new();
        let mut jobs = Vec::new();
        node.step(now, &mut self.out, &mut jobs, &mut deliveries);
        for j in jobs {
            let dma = match j.dir {
                DmaDir::Load => Dma::Load { src: j.buf, len: j.len },
                DmaDir::Store => Dma::Store { dst: j.buf, len: j.len },
            };
            let job = JobId(self.jobs.insert(Job::Proto(j.token)));
            self.out.dma(job, dma);
        }
        // Primaries first: a copy ending at once (its host gone) finds its primary waiting.
        for d in deliveries.iter().filter(|d| d.copies > 0) {
            // Completed after the last copy reading its buffer (`copied`).
            self.primaries.push((d.token, d.copies, d.outcome));
        }
        for d in deliveries {
            if d.copies > 0 {
                continue;
            }
            let Some(host) = self.host_of(d.token) else {
                // Its host left: no copy, but the primary no longer waits for it.
                self.copied(d.primary);
                continue;
            };
            match d.copy {
                Some((src, dst, len)) => {
                    let deliver = Job::Deliver { op: d.token, outcome: d.outcome, primary: d.primary };
                    let job = JobId(self.jobs.insert(deliver));
                    self.out.dma(job, Dma::Copy { host, src, dst, len, keys: [RegionKey::NONE; 2] });
                }
                None => self.finish_collective(d.token, d.outcome),
            }
        }
    }
}

/// Whether a call of `opcode` is one the other ranks of its communicator make too and that posts
/// broadcasts there: a broadcast or a composed collective.
fn posts_parts(opcode: ringcast_abi::Opcode) -> bool {
    use ringcast_abi::Opcode;
    [Opcode::BCAST, Opcode::ALLGATHER, Opcode::ALLREDUCE, Opcode::REDUCE, Opcode::ALLTOALL, Opcode::BARRIER]
        .contains(&opcode)
}
