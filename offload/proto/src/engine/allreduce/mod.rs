//! Allreduce and reduce, composed from the reliable broadcast as the allgather is
//! (`allgather/`: [`crate::engine::allgather::compose`] posts the parts of all three), with a
//! last step of their own.
//!
//! **Allreduce** is the same gathering into a work buffer of `size × len` bytes, then one more
//! step: once every part is over, the engine loads the parts (one block per rank, or per node),
//! reduces them in rank (node) order (`collective::reduce`: the same operations in the same
//! order at every rank, so every rank's result is bit-identical, floats included) and stores the
//! result at the start of the work buffer (`reduction.rs`; [`LastStep`]). Leader-based, a node's result is
//! reduced once, by its engine, and every rank then reduces `E` blocks instead of `size`: `ppn`
//! times fewer bytes on the fabric and in the last step. Every node still moves its block to
//! every node — the multicast allreduce; recursive doubling and Rabenseifner's reduce-scatter +
//! allgather between the leaders (`exchange.rs` runs [`schedule`], where the cost model picks them) move less.
//!
//! **Reduce** is the same allreduce whose last step only the root takes: every rank gathers
//! every part (the multicast composition delivers each part everywhere), the root alone
//! loads, reduces and stores, and the others complete with 0 bytes once their parts are over.
//!
//! Where the cost model picks it (`protocol.allreduce_between`, `allgather_between` = `auto`,
//! the default; `model/compose.rs`) or a setting forces it (`doubling`), a leader-based
//! allreduce or reduce combines the node results, and an allgather exchanges the node parts, by
//! recursive doubling (a reduction also by Rabenseifner's) between the leaders instead of
//! multicasting them ([`schedule`], run by `exchange.rs`): one part per node, carried out by the engine.
pub(crate) mod schedule;

use crate::engine::allgather::compose;
use crate::engine::cx::{at, context_of, Collective, Cx, Parts, Progress};
use crate::engine::ids::{CallId, OpId};
use crate::engine::reduction::Then;
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::{DataType, ReduceOp, StatusKind};

/// An allreduce or a reduce at this process while its parts run.
#[derive(Debug)]
pub(crate) struct Allreduce {
    op: OpId,
    parts: Parts,
    /// What is reduced once every part is over (the multicast compositions, at every rank of an
    /// allreduce and at a reduce's root).
    last: Option<LastStep>,
}

/// The last step: the parts gathered in `work` — `size` blocks of `len` bytes side by side (one
/// per rank), or one block per node at its leader's place (`by_node`, the leader-based
/// composition: `len` bytes at `first · len` for each node's first rank `first`) — reduced with
/// `spec` in rank (node) order into its first block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LastStep {
    spec: (DataType, ReduceOp),
    /// `None`: no memory.
    work: Option<Resolved>,
    len: u64,
    size: u32,
    /// The communicator whose nodes' leaders hold the parts, when they are per node.
    by_node: Option<u64>,
}

/// Starts allreduce or reduce `a` as call `id` of host operation `op` (see the module doc).
pub(crate) fn start(
    a: &GatherCall,
    op: OpId,
    local: u32,
    window_calls: u32,
    id: CallId,
    cx: &mut Cx<'_>,
) -> (Allreduce, Progress) {
    // A reduce's other ranks gather like everyone but do not reduce (their buffer's contents
    // are left unspecified), and report no bytes.
    let receives = a.root.is_none_or(|r| r == a.me);
    let bytes = if receives { a.len } else { 0 };
    let c = compose(a, local, id, window_calls, bytes, context_of(a), &schedule::LEADERS, cx);
    let last = match (a.reduce, c.gathered) {
        (Some(spec), Some(by_node)) if receives => {
            Some(LastStep { spec, work: a.recv, len: a.len, size: a.size, by_node })
        }
        _ => None,
    };
    let call = Allreduce { op, parts: c.parts, last };
    let progress = match c.over {
        true => Progress::Done(call.parts.outcome()),
        false => Progress::Running,
    };
    (call, progress)
}

impl Collective for Allreduce {
    fn op(&self) -> OpId {
        self.op
    }

    fn in_window(&self) -> bool {
        true
    }

    fn part_done(&mut self, outcome: Outcome, cx: &mut Cx<'_>) -> Progress {
        if !self.parts.absorb(outcome) {
            return Progress::Running;
        }
        let (StatusKind::Ok, Some(r)) = (self.parts.status(), self.last) else {
            return Progress::Done(self.parts.outcome());
        };
        // Every part is in the work buffer: read them back and reduce them.
        let then = Then::Complete { op: self.op, counters: self.parts.counters() };
        let h = &mut cx.h;
        let sources: &[(u32, u32)] = match (r.by_node, h.node.as_ref()) {
            (None, _) => &[(0, 0)],
            // One block per node, at its first rank's place (`allgather/`).
            (Some(comm), Some(node)) => node.ranges(comm).map_or(&[][..], |(n, _)| n),
            (Some(_), None) => &[],
        };
        if sources.is_empty() {
            // The communicator went away meanwhile.
            return Progress::Done(failed(StatusKind::UnknownCommunicator));
        }
        let blocks = sources.iter().map(|&(first, _)| match r.by_node {
            None => (r.work, r.size),
            Some(_) => (at(r.work, u64::from(first) * r.len), 1),
        });
        if let Some(over) = h.reductions.start(r.spec, r.len, blocks, r.work, then, h.jobs, h.out) {
            h.over.push(over);
        }
        Progress::Handed
    }
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}
