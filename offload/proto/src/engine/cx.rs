//! What a collective is to the engine, and what it may do: the [`Collective`] trait every
//! collective's folder implements, and the context ([`Cx`]) it acts through.
//!
//! A collective call is started by its folder's `start` (the planner's arm for its opcode) with
//! the call as the intake planned it; from then on the dispatcher (`dispatch.rs`) hands it
//! the ends of its parts — a part it posted to its communicator's sequencer delivered at this
//! process, or a DMA job it queued itself answered — and the call says whether it runs on,
//! is done with an outcome, or has handed its completion to a continuation (a reduction). What
//! it may do, through [`Cx`]: post a part ([`Node::post`]), note an exchange between the
//! engines it runs on the links ([`Exchanges::note`]), queue a DMA job ([`Hands::dma`]), reduce
//! ([`Hands::reduce`]), hand a node part to the assembly ([`Cx::assemble`]). It never sees the
//! engine, the other calls or the host operations.
use crate::engine::assembly::{Assemblies, Piece};
use crate::engine::exchange::Exchanges;
use crate::engine::hands::Hands;
use crate::engine::ids::{OpId, Seq};
use crate::engine::node::Node;
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::{DataType, ReduceOp, RegionKey, StatusKind};

/// A collective call at this engine, from its start to its outcome.
pub(crate) trait Collective {
    /// The host operation it completes.
    fn op(&self) -> OpId;
    /// Whether it counts among its process's composed calls in flight — how far ahead of a
    /// receiver the roots of its parts may run ([`crate::transfer::protocol::Post::window`]).
    fn in_window(&self) -> bool {
        false
    }
    /// One of its parts ended with `outcome`: a part it posted was delivered here, or a DMA job
    /// it queued was answered (`Ok`, or why it failed).
    fn part_done(&mut self, outcome: Outcome, cx: &mut Cx<'_>) -> Progress;
}

/// Where a call is after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Parts (or its continuation's copies) still run.
    Running,
    /// Over: its operation completes with this outcome.
    Done(Outcome),
    /// Its last step (a reduction) completes its operation: the call itself is over.
    Handed,
}

/// A call's parts: how many are not over yet, the first failure, the bytes reported on
/// success, and their counters summed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    remaining: u32,
    status: StatusKind,
    bytes: u64,
    counters: OpCounters,
}

impl Parts {
    /// `parts` parts, `bytes` reported if every one succeeds.
    pub(crate) fn new(parts: u32, bytes: u64) -> Parts {
        Parts { remaining: parts, status: StatusKind::Ok, bytes, counters: OpCounters::default() }
    }

    /// [`Parts::new`], the counters of the parts before carried on (a continuation's copies).
    pub(crate) fn then(parts: u32, bytes: u64, counters: OpCounters) -> Parts {
        Parts { counters, ..Parts::new(parts, bytes) }
    }

    /// One part ended with `outcome`: true once it was the last.
    pub(crate) fn absorb(&mut self, outcome: Outcome) -> bool {
        self.remaining = self.remaining.saturating_sub(1);
        if outcome.status != StatusKind::Ok && self.status == StatusKind::Ok {
            self.status = outcome.status;
        }
        self.counters.absorb(outcome.counters);
        self.remaining == 0
    }

    /// The first failure, or `Ok`.
    pub(crate) fn status(&self) -> StatusKind {
        self.status
    }

    /// The parts' counters, summed.
    pub(crate) fn counters(&self) -> OpCounters {
        self.counters
    }

    /// The call's outcome once every part is over: its bytes on success, else the first
    /// failure's status.
    pub(crate) fn outcome(&self) -> Outcome {
        let bytes = if self.status == StatusKind::Ok { self.bytes } else { 0 };
        Outcome { status: self.status, bytes, counters: self.counters }
    }
}

/// What a collective acts through.
pub(crate) struct Cx<'a> {
    /// The node, the jobs and outbox, the reductions.
    pub(crate) h: Hands<'a>,
    pub(crate) assemblies: &'a mut Assemblies,
    pub(crate) exchanges: &'a mut Exchanges,
}

impl Cx<'_> {
    /// The node (`None` without a fabric: no collective runs).
    pub(crate) fn node(&mut self) -> Option<&mut Node> {
        self.h.node.as_mut()
    }

    /// Local process `piece.host` posted slot `seq` of communicator `comm`, a node part of
    /// `expected` pieces (`node/assembly.rs`).
    pub(crate) fn assemble(
        &mut self,
        comm: u64,
        seq: Seq,
        piece: Piece,
        leader: Option<(Option<Resolved>, RegionKey)>,
        expected: u32,
        reduce: Option<(DataType, ReduceOp)>,
    ) {
        self.assemblies.add(comm, seq, piece, leader, expected, reduce, &mut self.h);
    }

    /// Engine-local rank `local`'s call on `comm` posted nothing (refused at once): its later
    /// posts there carry the count ([`crate::engine::node::sequencer::Sequencer::posted_nothing`]).
    pub(crate) fn posted_nothing(&mut self, local: u32, comm: u64) {
        if let Some(node) = self.node() {
            node.posted_nothing(local, comm);
        }
    }

    /// Engine-local rank `local` made a leader-based call on `comm` whose exchange between the
    /// engines is multicast ([`crate::engine::node::sequencer::Sequencer::multicast_exchange`]).
    pub(crate) fn multicast_exchange(&mut self, local: u32, comm: u64) {
        if let Some(node) = self.node() {
            node.multicast_exchange(local, comm);
        }
    }
}

/// The context a composed collective's parts carry ([`crate::transfer::protocol::Post::context`]):
/// its opcode, and a reduction's element type and operation — so ranks that posted different
/// calls (an allgather against an allreduce, another type or operation) fail with
/// `DigestMismatch` instead of reducing each other's bytes their own way.
pub(crate) fn call_context(opcode: ringcast_abi::Opcode, reduce: Option<(DataType, ReduceOp)>) -> u64 {
    let (t, o) = reduce.map_or((0, 0), |(t, o)| (t.0, o.0));
    u64::from(opcode.0) | u64::from(t) << 8 | u64::from(o) << 16
}

/// The context call `a`'s parts carry: [`call_context`] of its opcode and reduction, and —
/// a call in step for its operation — the mark of the in-step operation its `SUM` is
/// (`intake::plan`, [`crate::transfer::env::IN_STEP_OP`]).
pub(crate) fn context_of(a: &GatherCall) -> u64 {
    let in_step_op = if a.in_step_op { crate::transfer::env::IN_STEP_OP } else { 0 };
    call_context(a.opcode, a.reduce) | in_step_op
}

/// `base` moved `by` bytes on (`None`, no memory, stays none): the collectives' one way to
/// address a part of a buffer.
pub(crate) use crate::intake::regions::at;
