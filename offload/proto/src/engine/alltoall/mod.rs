//! Alltoall as the engine composes it from its reliable broadcast — the *multicast alltoall*:
//! every rank's whole send buffer is multicast once, and every rank keeps the blocks meant for
//! it. Messages of `P · len` bytes instead of the `P · (P − 1)` point-to-point messages of a
//! pairwise exchange: the right trade for short blocks on a fabric with multicast, where the
//! per-message cost dominates, and the wrong one for long blocks, where every receiver takes in
//! `P` times the bytes it needs. Each part must fit the protocol's message limit
//! (`max_message_bytes`, 4 MiB by default: a larger alltoall fails `BadLength` — the pairwise
//! exchange below needs only each block to fit); the MPI
//! interposer offloads only what fits and leaves the rest to the library.
//!
//! Two compositions, the allgather's (`protocol.allgather_parts`, `allgather/`):
//!
//! **Node-level aggregation** (`nodes`, the default, where every engine's ranks are
//! consecutive): one part per engine, in engine order, rooted at the engine's first rank and
//! carrying its ranks' send buffers side by side (`count · size · len` bytes). The engine first
//! copies each local process's send buffer into the leader's work buffer (`node/assembly.rs`), then
//! the node's buffers leave as one message — Mamidala's node-aggregated alltoall, with one
//! multicast per node as the exchange between leaders. `E` messages instead of `P`: the same
//! bytes on the fabric in `ppn` times fewer messages, for one intra-node copy of each send
//! buffer and a node-wide rendezvous before the node's part leaves — so only while the node
//! parts go eagerly ([`aggregates`]).
//!
//! **Per rank** (`ranks`, or longer blocks): one part per rank, rooted at it, from its own send
//! buffer.
//!
//! Algorithm, for a communicator of `size` ranks and `len`-byte blocks (`whole = size · len`),
//! at every rank `me`, with a work buffer of `(size + 1) · whole` bytes:
//! 1. post the parts in order (every rank posts the same sequence, so the communicator's
//!    numbering lines up). Either way rank `r`'s send buffer lands at `work + (1 + r) · whole`:
//!    per rank, part `r` has root `r` and that buffer (this rank's own part leaves from its send
//!    buffer); per node, part `k` has root `first_k` and lands at `work + (1 + first_k) · whole`,
//!    `count_k · whole` bytes;
//! 2. once every part is over, copy block `me` of each rank into its place (the call's last
//!    step, [`Alltoall::part_done`]): from `work + (1 + r) · whole + me · len` (or, for `r = me`, from the
//!    send buffer) to `work + r · len` — `size` DMA copies on this node;
//! 3. complete with `size · len` bytes once the copies are over; a failed part fails the
//!    operation with its status (a dead rank's part with `PeerUnreachable` within the protocol's
//!    bound), before any copy.
//!
//! Each part carries every property of the broadcast (CRC and MAC per datagram, bitmaps,
//! repair, retransmission, typed errors, channels, and the call's context in its MAC: a rank
//! posting an alltoall against another's allgather of the same bytes fails typed).
//!
//! **Pairwise** (`protocol.alltoall_between = pairwise`, or the cost model's choice, where the communicator
//! has at most `pairwise_engines` engines, whichever ranks each holds — in either composition —
//! with one rank per engine, aggregated per node, or blocks from `alltoall_pairwise_bytes`):
//! every block sent once over the pair communicators in Mamidala's bidirectional order,
//! straight from its sender's send buffer into its place ([`pairwise`], run by `exchange.rs`).
pub(crate) mod pairwise;

use crate::engine::action::{Dma, NO_MEMORY};
use crate::engine::allgather::{post_node_parts, Blocks};
use crate::engine::cx::{at, call_context, Collective, Cx, Parts, Progress};
use crate::engine::ids::{CallId, OpId};
use crate::engine::jobs::Job;
use crate::engine::node::sequencer::Kind;
use crate::intake::regions::Resolved;
use crate::intake::{GatherCall, HostId};
use crate::model::compose::{self, Exchange};
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::{RegionKey, StatusKind};

/// An alltoall at this process: its parts, then its copies into place.
#[derive(Debug)]
pub(crate) struct Alltoall {
    op: OpId,
    /// The call itself (the owner of its copies).
    id: CallId,
    parts: Parts,
    /// Which blocks are copied into place once every part is over (the multicast
    /// compositions); taken when the copies start.
    scatter: Option<Scatter>,
}

/// An alltoall's last step: the blocks to copy into place once every part is over.
#[derive(Clone, Copy, Debug)]
struct Scatter {
    host: HostId,
    /// `None`: no memory.
    send: Option<Resolved>,
    work: Option<Resolved>,
    len: u64,
    size: u32,
    me: u32,
    /// The send and work buffers' regions.
    keys: [RegionKey; 2],
}

/// Starts alltoall `a` as call `id` of host operation `op` (see the module doc).
pub(crate) fn start(
    a: &GatherCall,
    op: OpId,
    local: u32,
    window_calls: u32,
    id: CallId,
    cx: &mut Cx<'_>,
) -> (Alltoall, Progress) {
    let whole = a.len * u64::from(a.size);
    // (The intake made sure there is a send buffer.)
    let send = a.send.unwrap_or(a.recv);
    let scatter =
        Scatter { host: a.host, send, work: a.recv, len: a.len, size: a.size, me: a.me, keys: a.keys };
    let protocol = &cx.h.config.protocol;
    let (leader_based, slots) = (protocol.allgather_parts.leader_based(), protocol.preposted_slots);
    let payload = u64::from(crate::model::select::fragment_payload(protocol.mtu)).max(1);
    let nodes = match (leader_based, cx.h.node.as_ref()) {
        (true, Some(n)) => n
            .ranges(a.comm)
            .filter(|(r, _)| aggregates(r, whole, payload, slots))
            .map(|(r, mine)| (r.len() as u32, mine)),
        _ => None,
    };
    let context = call_context(a.opcode, None);
    let failed = |status| Outcome { status, bytes: 0, counters: OpCounters::default() };
    // Pairwise between the engines (`pairwise.rs`): one part, this node's slot.
    // Any placement: the engines' ranks need not be consecutive.
    let members =
        cx.h.node.as_ref().and_then(|n| n.members(a.comm)).map(|(m, mine)| (m.engines(), m.largest(), mine));
    if let Some((engines, largest, mine)) = members {
        if compose::alltoall(cx.h.config, engines, a.size, largest, a.len) == Exchange::Pairwise {
            let mut call = Alltoall { op, id, parts: Parts::new(1, whole), scatter: None };
            let progress = match pairwise::post(a, local, id, context, mine, cx) {
                Err(kind) if call.parts.absorb(failed(kind)) => Progress::Done(call.parts.outcome()),
                _ => Progress::Running,
            };
            return (call, progress);
        }
        if engines >= 2 {
            // Counted in this process's later contexts, as `allgather/` counts it.
            cx.multicast_exchange(local, a.comm);
        }
    }
    let parts = nodes.map_or(a.size, |(engines, _)| engines);
    let mut call = Alltoall { op, id, parts: Parts::new(parts, whole), scatter: Some(scatter) };
    let refused = match nodes {
        // Rank `r`'s send buffer lands at `work + (1 + r) · whole` either way.
        Some(engines) => {
            let blocks = Blocks { base: at(a.recv, whole), stride: whole };
            post_node_parts(a, local, id, context, engines, blocks, window_calls, cx)
        }
        None => post_rank_parts(a, local, id, context, send, window_calls, cx),
    };
    let mut progress = Progress::Running;
    if let Err((n, kind)) = refused {
        for _ in 0..n {
            if call.parts.absorb(failed(kind)) {
                progress = Progress::Done(call.parts.outcome());
            }
        }
    }
    (call, progress)
}

/// One part per rank, rooted at it, from its own send buffer into `work + (1 + r) · whole`.
/// `Err((parts, status))`: that many parts refused at once.
fn post_rank_parts(
    a: &GatherCall,
    local: u32,
    id: CallId,
    context: u64,
    send: Option<Resolved>,
    window_calls: u32,
    cx: &mut Cx<'_>,
) -> Result<(), (u32, StatusKind)> {
    let whole = a.len * u64::from(a.size);
    let window = a.size.saturating_mul(window_calls);
    let kind = Kind { context, window, ..Kind::default() };
    for r in 0..a.size {
        let buf = if r == a.me { send } else { at(a.recv, (1 + u64::from(r)) * whole) };
        let posted = match cx.node() {
            Some(node) => node.post(local, a.comm, r, buf, whole, id, kind),
            None => Err(StatusKind::UnknownCommunicator),
        };
        if let Err(kind) = posted {
            // Refused at once: this and every later part fail here; parts already filed
            // end through the protocol.
            if r == 0 {
                cx.posted_nothing(local, a.comm);
            }
            return Err((a.size - r, kind));
        }
    }
    Ok(())
}

impl Collective for Alltoall {
    fn op(&self) -> OpId {
        self.op
    }

    fn in_window(&self) -> bool {
        true
    }

    /// Once every part is over, copies block `me` of each rank's send buffer into its place:
    /// from `work + (1 + r) · whole + me · len` (or, for `r = me`, from the send buffer) to
    /// `work + r · len`; the last copy completes the operation (with the parts' counters).
    fn part_done(&mut self, outcome: Outcome, cx: &mut Cx<'_>) -> Progress {
        if !self.parts.absorb(outcome) {
            return Progress::Running;
        }
        let Some(s) = self.scatter.take().filter(|_| self.parts.status() == StatusKind::Ok) else {
            return Progress::Done(self.parts.outcome());
        };
        let whole = s.len * u64::from(s.size);
        self.parts = Parts::then(s.size, whole, self.parts.counters());
        let mine = u64::from(s.me) * s.len;
        for r in 0..s.size {
            let (src, src_key) = match r == s.me {
                true => (at(s.send, mine), s.keys[0]),
                false => (at(s.work, (1 + u64::from(r)) * whole + mine), s.keys[1]),
            };
            let dst = at(s.work, u64::from(r) * s.len);
            match Dma::copy(s.host, src, dst, s.len, [src_key, s.keys[1]]) {
                Some(dma) => cx.h.dma(Job::Call(self.id), dma),
                // An end on no memory: the copy fails where it is made.
                None if self.parts.absorb(Outcome {
                    status: NO_MEMORY,
                    bytes: 0,
                    counters: OpCounters::default(),
                }) =>
                {
                    return Progress::Done(self.parts.outcome())
                }
                None => {}
            }
        }
        Progress::Running
    }
}

/// Whether an alltoall of `whole`-byte send buffers on engines holding `ranges` of ranks is
/// aggregated per node: while its node parts go eagerly — every part's fragments, times the
/// parts, fit the receivers' `slots` pre-posted fragments, as the protocol's rendezvous rule
/// counts them for one call in flight (`transfer/state.rs`). Then aggregation saves messages
/// for nothing but the node's copies; beyond, every part waits for a rendezvous either way and
/// aggregating adds a node-wide wait and a larger message to it: at 16 KiB blocks on 2 × 2
/// ranks, per rank measured 253–273 µs and per node 335–390 (docs/performance.md). Every rank
/// decides alike: the values are the communicator's, the call's and the configuration's.
fn aggregates(ranges: &[(u32, u32)], whole: u64, payload: u64, slots: u32) -> bool {
    let largest = ranges.iter().map(|&(_, count)| u64::from(count)).max().unwrap_or(0);
    let frags = (largest * whole).div_ceil(payload);
    frags.saturating_mul(ranges.len() as u64) <= u64::from(slots)
}

#[cfg(test)]
mod tests {
    use super::aggregates;

    /// Aggregated while every node part's fragments, times the parts, fit the slots — decided by
    /// the largest node of an uneven world.
    #[test]
    fn node_parts_are_aggregated_while_they_go_eagerly() {
        let (payload, slots) = (4000, 64);
        // 2 × 2 ranks, 4 KiB blocks: parts of 2 · 16 KiB, 9 fragments each, 18 in all.
        assert!(aggregates(&[(0, 2), (2, 2)], 4 * 4096, payload, slots));
        // 16 KiB blocks: 33 fragments each, 66 in all.
        assert!(!aggregates(&[(0, 2), (2, 2)], 4 * 16384, payload, slots));
        // Exactly the slots: 2 parts of 32 fragments.
        assert!(aggregates(&[(0, 2), (2, 2)], 64_000, payload, slots));
        // The largest node decides: 3 + 1 ranks, 3 · 30,000 B = 23 fragments, times 2.
        assert!(aggregates(&[(0, 3), (3, 1)], 30_000, payload, slots));
        assert!(!aggregates(&[(0, 3), (3, 1)], 45_000, payload, slots));
    }
}
