//! Allgather, allreduce and reduce as the engine composes them from its reliable broadcast —
//! the multicast allgather of issue 17: every block is multicast once, and a receiver that
//! misses fragments gets them by ring repair, like any broadcast. Two compositions
//! (`protocol.allgather_parts`: `nodes`, the default, leader-based where the placement allows
//! it; `ranks`, one part per rank always):
//!
//! **Leader-based** (Mamidala et al.; where every engine's ranks are consecutive in the
//! communicator, as the world's are). For a communicator spanning engines
//! `0..E`, engine `k` holding ranks `first_k .. first_k + count_k`, at every rank `me` on
//! engine `mine`:
//! 1. post `E` broadcasts, in engine order: broadcast `k` has root `first_k` (the engine's
//!    *leader*) and lands at `recv + first_k·len` — an allgather's carries `count_k · len` bytes,
//!    the engine's blocks side by side; a reduction's `len` bytes, the node's partial result.
//!    Every rank posts the same sequence, so the numbering lines up;
//! 2. this engine's own part waits in the sequencer until every local process posted it and the
//!    engine built it in the leader's buffer (`node/assembly.rs`): an allgather's local blocks
//!    copied there, a reduction's reduced there in local rank order (`reduction.rs`: loaded,
//!    reduced, stored — Mamidala's intra-node step, by the engine's core); then it leaves as
//!    one message;
//! 3. the sequencer delivers every part into every local buffer; complete once every part is
//!    over (a reduction: after its last step, below).
//!
//! No part lands on a local rank's own contribution before the engine read it: part `k ≠ mine`
//! lands at `first_k`, another node's rank, and this node's part lands only after its assembly.
//! With `ppn` processes per node this sends one message per node where the other composition
//! sends `ppn`, at the price of a node-wide rendezvous before the node's part leaves — which
//! every one of these collectives needs anyway (every result depends on every contribution);
//! measured faster than per rank for allgathers and reductions alike (docs/performance.md). With
//! `protocol.allgather_between = multicast` (or node parts from `allgather_multicast_bytes` on
//! four or eight engines, `allgather_fold_multicast_bytes` on three or more that are not a
//! power of two) the leaders exchange by multicast — one multicast per node is the exchange; by
//! default they run recursive doubling between them instead, or with `ring` go round a ring of
//! the engines (`exchange.rs`).
//!
//! **Per rank** (`ranks`, or a placement whose engines' ranks are not consecutive). At every rank `me`:
//! 1. post `size` broadcasts on the communicator, in rank order: broadcast `r` has root `r`
//!    and buffer `recv + r·len` — except this rank's own, whose buffer is the send block (or,
//!    in place, `recv + me·len`);
//! 2. when not in place, copy the send block into `recv + me·len` (a DMA copy on this node);
//! 3. complete once every part is over.
//!
//! Either way the operation ends `Ok` with `size·len` bytes when every part is over, else with
//! the first failure's status (a dead rank's part fails with `PeerUnreachable` within the
//! protocol's bound, like a broadcast from it), and each part carries every property of the
//! broadcast: CRC and MAC per datagram, fragment bitmaps, ring repair, retransmission, typed
//! errors, channels and delayed synchronization for buffer reuse, and the call's context in its
//! MAC ([`call_context`]). The cost model picks each part's algorithm as for any broadcast of
//! its length. An allreduce's and an alltoall's last steps are in their folders.
//!
//! **Allreduce and reduce** (`allreduce/`) are composed the same way, with a last step of
//! their own; [`compose`] posts the parts of all three.
//!
//! Where the cost model picks it (`protocol.allgather_between = auto`, the default;
//! `model/compose.rs`) or a setting forces it (`doubling`, `ring`), a leader-based allgather
//! exchanges the node parts by recursive doubling, or round the ring of the engines, between
//! the leaders instead of multicasting them ([`schedule`], run by `exchange.rs`): one part per
//! node, carried out by the engine.

pub(crate) mod schedule;

use crate::engine::action::{Dma, NO_MEMORY};
use crate::engine::assembly::Piece;
use crate::engine::cx::{at, context_of, Collective, Cx, Parts, Progress};
use crate::engine::exchange::{Schedule, What};
use crate::engine::ids::{CallId, OpId};
use crate::engine::jobs::Job;
use crate::engine::node::sequencer::Kind;
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::model::compose::{self, Exchange};
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::StatusKind;

/// An allgather at this process while its parts run.
#[derive(Debug)]
pub(crate) struct Allgather {
    op: OpId,
    parts: Parts,
}

impl Collective for Allgather {
    fn op(&self) -> OpId {
        self.op
    }

    fn in_window(&self) -> bool {
        true
    }

    fn part_done(&mut self, outcome: Outcome, _cx: &mut Cx<'_>) -> Progress {
        match self.parts.absorb(outcome) {
            true => Progress::Done(self.parts.outcome()),
            false => Progress::Running,
        }
    }
}

/// Starts allgather `a` as call `id` of host operation `op` (see the module doc); `local` is its
/// process's engine-local rank, `window_calls` the composed calls its process has in flight, this
/// one included.
pub(crate) fn start(
    a: &GatherCall,
    op: OpId,
    local: u32,
    window_calls: u32,
    id: CallId,
    cx: &mut Cx<'_>,
) -> (Allgather, Progress) {
    // A reduce's other ranks' allgather-like parts report no bytes; an allgather every block.
    let bytes = a.len * u64::from(a.size);
    let c = compose(a, local, id, window_calls, bytes, context_of(a), &schedule::LEADERS, cx);
    let call = Allgather { op, parts: c.parts };
    let progress = match c.over {
        true => Progress::Done(call.parts.outcome()),
        false => Progress::Running,
    };
    (call, progress)
}

/// Where a leader-based composition's blocks are: rank `r`'s at `base + r · stride`, `stride`
/// bytes each (the part of a node holding ranks `first..first + count` is the run from
/// `first`'s block on).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocks {
    /// `None`: no memory.
    pub(crate) base: Option<Resolved>,
    pub(crate) stride: u64,
}

/// What [`compose`] posted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Composed {
    /// The call's parts (those refused at once already over).
    pub(crate) parts: Parts,
    /// Every part refused at once: the call is over.
    pub(crate) over: bool,
    /// The parts gather every block (or node result) into the receive buffer — the multicast
    /// compositions, after which a reduction takes its last step — by node (`Some(by_node)`:
    /// the communicator whose leaders' places hold the node results) or by rank (`Some(None)`);
    /// `None` when the leaders exchange point to point, reducing on the way.
    pub(crate) gathered: Option<Option<u64>>,
}

/// Posts the parts of an allgather, allreduce or reduce `a`, call `id` (see the module doc):
/// leader-based where every engine's ranks are consecutive (one part per engine, or — the
/// leaders exchanging point to point by `leaders` — one part, the node's slot), else one part
/// per rank. `bytes`: what the call reports once every part succeeded; `context`: what its
/// parts carry ([`context_of`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn compose(
    a: &GatherCall,
    local: u32,
    id: CallId,
    window_calls: u32,
    bytes: u64,
    context: u64,
    leaders: &'static dyn Schedule,
    cx: &mut Cx<'_>,
) -> Composed {
    let leader_based = cx.h.config.protocol.allgather_parts.leader_based();
    let nodes = match (leader_based, cx.h.node.as_ref()) {
        (true, Some(n)) => n.ranges(a.comm).map(|(r, mine)| (r.len() as u32, mine)),
        _ => None,
    };
    let parts = match nodes {
        Some((engines, _)) => engines,
        None => a.size + u32::from(a.send.is_some()),
    };
    // An allreduce or a reduce may combine the node results by recursive doubling between
    // the leaders, and an allgather the node parts (`exchange.rs`): one part, the node's,
    // carried out by the engine. (A reduce's other ranks get the result too, in a buffer
    // whose contents are theirs not to rely on, and report no bytes.)
    let exchange = exchange(a, cx);
    if let (Some((engines, _)), true) = (nodes, exchange == Exchange::Multicast) {
        if engines >= 2 {
            // Counted in this process's later contexts: engines that disagree on the
            // exchange must not pair one call's transfers with another's (`node/sequencer.rs`).
            cx.multicast_exchange(local, a.comm);
        }
    }
    if let (Some((engines, mine)), false) = (nodes, exchange == Exchange::Multicast) {
        if engines >= 2 {
            let mut parts = Parts::new(1, bytes);
            let ring = exchange == Exchange::Ring;
            let refused = post_leaders(a, local, id, context, mine, ring, leaders, cx);
            let over = refused.is_err_and(|kind| parts.absorb(failed(kind)));
            return Composed { parts, over, gathered: None };
        }
    }
    let mut c = Composed {
        parts: Parts::new(parts, bytes),
        over: false,
        gathered: Some(nodes.is_some().then_some(a.comm)),
    };
    let refused = match nodes {
        Some((engines, mine)) => {
            let blocks = Blocks { base: a.recv, stride: a.len };
            post_node_parts(a, local, id, context, (engines, mine), blocks, window_calls, cx).map(|()| None)
        }
        None => post_rank_parts(a, local, id, context, window_calls, cx),
    };
    match refused {
        Err((n, kind)) => {
            for _ in 0..n {
                c.over = c.parts.absorb(failed(kind));
            }
        }
        // A copy that could not be made fails where it is made, as a part.
        Ok(Some(fault)) => c.over = c.parts.absorb(failed(fault)),
        Ok(None) => {}
    }
    c
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}

/// How a leader-based call exchanges the node parts between the leaders
/// (`model/compose.rs`): multicast, or point to point — recursive doubling (a reduction's
/// Rabenseifner halving is decided again where the slot starts, `exchange.rs`), or an
/// allgather's ring: the cost model's choice (`auto`) or the one `allreduce_between` or
/// `allgather_between` forces ([`compose::allreduce`], [`compose::allgather`]). Every rank
/// decides alike: from the configuration, the communicator's ranges and the call's length
/// and element type.
fn exchange(a: &GatherCall, cx: &mut Cx<'_>) -> Exchange {
    let config = cx.h.config;
    let Some((ranges, _)) = cx.h.node.as_ref().and_then(|n| n.ranges(a.comm)) else {
        return Exchange::Multicast;
    };
    let engines = ranges.len() as u32;
    if let Some(spec) = a.reduce {
        let elem = spec.0.size().unwrap_or(1) as u64;
        let largest = ranges.iter().map(|r| r.1).max().unwrap_or(1);
        return match compose::allreduce(config, engines, largest, a.len, elem) {
            Exchange::Multicast => Exchange::Multicast,
            _ => Exchange::Doubling,
        };
    }
    let largest = ranges.iter().map(|r| u64::from(r.1) * a.len).max().unwrap_or(0);
    compose::allgather(config, engines, largest)
}

/// A leaders' exchange's one part (`exchange.rs`): this node's slot, rooted at its leader,
/// carried out by the engine once every local contribution is reduced into the leader's
/// `work + 0` (a reduction) or copied into its place in the leader's receive buffer (an
/// allgather); the slot then delivers the leader's result — a reduction's block, an
/// allgather's every block — into every local process's buffer. An allgather's parts go round
/// the ring of the engines instead (`ring`). `Err(status)`: refused at once.
#[allow(clippy::too_many_arguments)]
fn post_leaders(
    a: &GatherCall,
    local: u32,
    id: CallId,
    context: u64,
    mine: u32,
    ring: bool,
    leaders: &'static dyn Schedule,
    cx: &mut Cx<'_>,
) -> Result<(), StatusKind> {
    let at = |r: u32| at(a.recv, u64::from(r) * a.len);
    let node = cx.h.node.as_mut().ok_or(StatusKind::UnknownCommunicator)?;
    let (first, locals) = match (node.ranges(a.comm), node.locals(a.comm)) {
        (Some((r, _)), Some(l)) if (mine as usize) < r.len() => (r[mine as usize].0, l),
        _ => {
            cx.posted_nothing(local, a.comm);
            return Err(StatusKind::UnknownCommunicator);
        }
    };
    let kind =
        Kind { all: true, assemble: true, context, window: 0, local: true, in_place: false, barrier: false };
    let full = node.context_of(local, a.comm, context);
    let slot_len = if a.reduce.is_some() { a.len } else { a.len * u64::from(a.size) };
    match node.post(local, a.comm, first, at(0), slot_len, id, kind) {
        Ok(seq) => {
            let what = match a.reduce {
                Some(spec) => What::Reduce(spec),
                None => What::Gather { ring },
            };
            if cx.exchanges.note(a.comm, seq, what, leaders, &mut cx.h).is_none() {
                return Ok(()); // another kind of call at this slot: the communicator broke
            }
            let (src, key) = match a.send {
                Some(s) => (s, a.keys[0]),
                None => (at(a.me), a.keys[1]),
            };
            let at_in_part = u64::from(a.me.saturating_sub(first)) * a.len;
            let piece = Piece { host: a.host, src, key, at: at_in_part, len: a.len, context: full };
            // A node's result goes to the leader's `work + 0`, where the exchange starts; an
            // allgather's blocks to their places in the leader's receive buffer.
            let base = if a.reduce.is_some() { at(0) } else { at(first) };
            let leader = (a.me == first).then_some((base, a.keys[1]));
            cx.assemble(a.comm, seq, piece, leader, locals, a.reduce);
            Ok(())
        }
        Err(kind) => {
            cx.posted_nothing(local, a.comm);
            Err(kind)
        }
    }
}

/// One part per rank: broadcast `r` rooted at `r` into `recv + r·len`, this rank's from its
/// send block (then copied into its place) or in place. `Err((parts, status))`: that many
/// parts refused at once; `Ok(Some(status))`: the copy could not be made (an end on no
/// memory) and failed with `status`.
fn post_rank_parts(
    a: &GatherCall,
    local: u32,
    id: CallId,
    context: u64,
    window_calls: u32,
    cx: &mut Cx<'_>,
) -> Result<Option<StatusKind>, (u32, StatusKind)> {
    let block = |r: u32| at(a.recv, u64::from(r) * a.len);
    let kind = Kind { context, window: a.size.saturating_mul(window_calls), ..Kind::default() };
    for r in 0..a.size {
        let buf = if r == a.me { a.send.unwrap_or(block(r)) } else { block(r) };
        let posted = match cx.node() {
            Some(node) => node.post(local, a.comm, r, buf, a.len, id, kind),
            None => Err(StatusKind::UnknownCommunicator),
        };
        if let Err(kind) = posted {
            // Refused at once (the communicator, not the part): this and every later part
            // fail here (the local copy too); parts already filed end through the protocol.
            if r == 0 {
                cx.posted_nothing(local, a.comm);
            }
            return Err((a.size + u32::from(a.send.is_some()) - r, kind));
        }
    }
    if let Some(src) = a.send {
        match Dma::copy(a.host, src, block(a.me), a.len, a.keys) {
            Some(dma) => cx.h.dma(Job::Call(id), dma),
            None => return Ok(Some(NO_MEMORY)),
        }
    }
    Ok(None)
}

/// Mamidala's leader-based composition: one part per engine, in engine order, rooted at its
/// first rank and carrying its ranks' blocks side by side (`count · stride` bytes into
/// `base + first · stride`; a reduction's part is the node's one block of `stride` bytes).
/// This engine's part (`mine`) leaves once every local block is assembled into the leader's
/// buffer (`node/assembly.rs`); the sequencer then delivers each part into every local buffer,
/// this rank's own block included. An allgather's and a reduction's blocks are `len` bytes at
/// `recv`; an alltoall's are whole send buffers (`alltoall/`). `Err((parts, status))`: that
/// many parts refused at once.
#[allow(clippy::too_many_arguments)]
pub(crate) fn post_node_parts(
    a: &GatherCall,
    local: u32,
    id: CallId,
    context: u64,
    (engines, mine): (u32, u32),
    blocks: Blocks,
    window_calls: u32,
    cx: &mut Cx<'_>,
) -> Result<(), (u32, StatusKind)> {
    let Blocks { base, stride } = blocks;
    let at = |r: u32| at(base, u64::from(r) * stride);
    let window = engines.saturating_mul(window_calls);
    for k in 0..engines {
        let Some(node) = cx.h.node.as_mut() else { return Ok(()) };
        let ((first, count), locals) = match (node.ranges(a.comm), node.locals(a.comm)) {
            (Some((r, _)), Some(l)) if (k as usize) < r.len() => (r[k as usize], l),
            _ => (
                (0, 0),
                0, // the communicator went away meanwhile: refused below
            ),
        };
        let own = k == mine;
        let kind = Kind { all: own, assemble: own, context, window, ..Kind::default() };
        // What this process's post carries (its calls that posted nothing too): the assembly compares it.
        let full = node.context_of(local, a.comm, context);
        // A reduction's node part is the node's one partial result; an allgather's or an
        // alltoall's, its ranks' blocks side by side.
        let part_len = if a.reduce.is_some() { stride } else { stride * u64::from(count) };
        let posted = match count {
            0 => Err(StatusKind::UnknownCommunicator),
            _ => node.post(local, a.comm, first, at(first), part_len, id, kind),
        };
        match posted {
            Ok(seq) if own => {
                let (src, key) = match a.send {
                    Some(s) => (s, a.keys[0]),
                    None => (at(a.me), a.keys[1]),
                };
                let piece = Piece {
                    host: a.host,
                    src,
                    key,
                    at: u64::from(a.me.saturating_sub(first)) * stride,
                    len: stride,
                    context: full,
                };
                let leader = (a.me == first).then_some((at(first), a.keys[1]));
                cx.assemble(a.comm, seq, piece, leader, locals, a.reduce);
            }
            Ok(_) => {}
            Err(kind) => {
                if k == 0 {
                    cx.posted_nothing(local, a.comm);
                }
                return Err((engines - k, kind));
            }
        }
    }
    Ok(())
}
