//! Scan and exscan (`MPI_Scan`, `MPI_Exscan`): prefix reductions, composed from the reliable
//! broadcast as an allgather is, with a last step of their own.
//!
//! **What they compute** (MPI-4.0 §6.11). With `cᵣ` rank `r`'s contribution of `len` bytes
//! (whole elements of the call's type), at rank `i`:
//! * scan: `c₀ ⊕ c₁ ⊕ … ⊕ cᵢ` — the inclusive prefix;
//! * exscan: `c₀ ⊕ … ⊕ cᵢ₋₁` — the exclusive prefix; at rank 0, which MPI leaves undefined,
//!   the work buffer's contents are unspecified and the call completes with 0 bytes (at rank 1
//!   the result is `c₀` itself).
//!
//! Reduced left to right in rank order, `((c₀ ⊕ c₁) ⊕ c₂) ⊕ …` — the order MPI prescribes for
//! an operation that does not commute — so a rank's result is the same bits whatever the
//! placement, the engines' exchange or the number of ranks per engine, floats included: the
//! reduction order is the ranks', never the engines' (a checker computing the prefix itself
//! gets the same bytes).
//!
//! **How** (the buffers of an allreduce: a work buffer of `size × len` bytes, this rank's
//! contribution from a send buffer or in place at `work + rank · len`):
//! 1. gather every contribution into every rank's work buffer — block `r` at `work + r · len` —
//!    exactly as an allgather does ([`crate::engine::allgather::compose`]: one part per rank,
//!    or leader-based one per engine, multicast or exchanged between the leaders by recursive
//!    doubling or round their ring: the cost model's choice for an allgather of that length).
//!    The parts carry the call's context — `SCAN` or `EXSCAN`, the type and the operation — in
//!    their MAC, so ranks that disagree on any of them fail `DigestMismatch`;
//! 2. once every part is over, reduce blocks `0..=i` (exscan: `0..i`) of the work buffer in
//!    rank order into its start (`reduction.rs`: loaded a slice at a time, reduced, stored —
//!    the result written over block 0 only where it was read), and complete with `len` bytes.
//!
//! Every rank moves every block, as the multicast allreduce does; a scan by recursive doubling
//! (log₂ P steps, each rank receiving partial prefixes) would move fewer bytes at scale, and can
//! replace this composition alone in this folder. A rank on no memory (`engine/participation/`)
//! takes part all the same, as in every composed call; the ranks whose prefix needs its block
//! end `RootFailed`.
use crate::engine::allgather::{compose, schedule};
use crate::engine::cx::{context_of, Collective, Cx, Parts, Progress};
use crate::engine::ids::{CallId, OpId};
use crate::engine::reduction::Then;
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::transfer::protocol::Outcome;
use ringcast_abi::{DataType, Opcode, ReduceOp, StatusKind};

/// A scan or an exscan at this process while its parts run.
#[derive(Debug)]
pub(crate) struct Scan {
    op: OpId,
    parts: Parts,
    prefix: Prefix,
}

/// The last step: blocks `0..blocks` of `work` (`len` bytes each), reduced with `spec` in rank
/// order into its start.
#[derive(Clone, Copy, Debug)]
struct Prefix {
    spec: (DataType, ReduceOp),
    /// `None`: no memory.
    work: Option<Resolved>,
    len: u64,
    blocks: u32,
}

/// Starts scan or exscan `a` as call `id` of host operation `op` (see the module doc).
pub(crate) fn start(
    a: &GatherCall,
    op: OpId,
    local: u32,
    window_calls: u32,
    id: CallId,
    cx: &mut Cx<'_>,
) -> (Scan, Progress) {
    // (The intake made sure there is a type and an operation.)
    let spec = a.reduce.unwrap_or((DataType::I8, ReduceOp::SUM));
    let blocks = if a.opcode == Opcode::EXSCAN { a.me } else { a.me + 1 };
    // The blocks are gathered as an allgather's, under the scan's own context.
    let gather = GatherCall { reduce: None, ..*a };
    let c = compose(&gather, local, id, window_calls, 0, context_of(a), &schedule::LEADERS, cx);
    let prefix = Prefix { spec, work: a.recv, len: a.len, blocks };
    let call = Scan { op, parts: c.parts, prefix };
    let progress = match c.over {
        true => Progress::Done(call.parts.outcome()),
        false => Progress::Running,
    };
    (call, progress)
}

impl Collective for Scan {
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
        let p = self.prefix;
        if self.parts.status() != StatusKind::Ok || p.blocks == 0 {
            // A failure; or an exscan at rank 0, whose result MPI leaves undefined: 0 bytes.
            return Progress::Done(self.parts.outcome());
        }
        let then = Then::Complete { op: self.op, counters: self.parts.counters() };
        cx.h.reduce(p.spec, p.len, [(p.work, p.blocks)], p.work, then);
        Progress::Handed
    }
}
