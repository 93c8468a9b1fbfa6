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
//! Two compositions, the allgather's (`protocol.allgather_parts`, `allgather.rs`):
//!
//! **Node-level aggregation** (`nodes`, the default, where every engine's ranks are
//! consecutive): one part per engine, in engine order, rooted at the engine's first rank and
//! carrying its ranks' send buffers side by side (`count · size · len` bytes). The engine first
//! copies each local process's send buffer into the leader's work buffer (`assembly.rs`), then
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
//! 2. once every part is over, copy block `me` of each rank into its place (`composite.rs`'s
//!    `scatter_blocks`): from `work + (1 + r) · whole + me · len` (or, for `r = me`, from the
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
//! straight from its sender's send buffer into its place (`pairwise.rs`).
pub(crate) mod pairwise;
use crate::engine::allgather::Blocks;
use crate::engine::call::{at, call_context, Call, Scatter};
use crate::engine::ids::PartOf;
use crate::engine::node::sequencer::Kind;
use crate::engine::{failed, Engine};
use crate::intake::GatherCall;
use crate::model::compose::{self, Exchange};
use ringcast_abi::{Completion, Status, StatusKind};

impl Engine {
    /// Starts an alltoall (see the module doc).
    pub(crate) fn start_alltoall(&mut self, a: GatherCall) {
        let cqe = Completion::new(a.cookie, a.opcode, Status::OK, 0);
        let op = self.new_op(a.host, cqe, a.started, true, true);
        self.refuse_op(op, a.refused);
        let local = self.core.local_rank(a.host).unwrap_or(u32::MAX);
        let whole = a.len * u64::from(a.size);
        // (The intake made sure there is a send buffer.)
        let send = a.send.unwrap_or(a.recv);
        let scatter =
            Scatter { host: a.host, send, work: a.recv, len: a.len, size: a.size, me: a.me, keys: a.keys };
        let protocol = &self.core.config().protocol;
        let (leader_based, slots) = (protocol.allgather_parts.leader_based(), protocol.preposted_slots);
        let payload = u64::from(crate::model::select::fragment_payload(protocol.mtu)).max(1);
        let nodes = match (leader_based, self.node.as_ref()) {
            (true, Some(n)) => n
                .ranges(a.comm)
                .filter(|(r, _)| aggregates(r, whole, payload, slots))
                .map(|(r, mine)| (r.len() as u32, mine)),
            _ => None,
        };
        let context = call_context(a.opcode, None);
        // Pairwise between the engines (`pairwise.rs`): one part, this node's slot.
        // Any placement: the engines' ranks need not be consecutive.
        let members = self.node.as_ref().and_then(|n| n.members(a.comm));
        if let Some((m, mine)) = members {
            if compose::alltoall(self.core.config(), m.engines(), a.size, m.largest(), a.len)
                == Exchange::Pairwise
            {
                let call = self.calls.insert(Call::new(op, 1, whole));
                return self.post_pairwise(&a, local, call, context, mine);
            }
            if m.engines() >= 2 {
                // Counted in this process's later contexts, as `allgather.rs` counts it.
                self.multicast_exchange(a.host, a.comm);
            }
        }
        let mut composite = Call::new(op, nodes.map_or(a.size, |(engines, _)| engines), whole);
        composite.scatter = Some(scatter);
        let call = self.calls.insert(composite);
        if let Some(engines) = nodes {
            // Rank `r`'s send buffer lands at `work + (1 + r) · whole` either way.
            let blocks = Blocks { base: at(a.recv, whole), stride: whole };
            return self.post_node_parts(&a, local, call, context, engines, blocks);
        }
        let window = a.size.saturating_mul(self.calls_in_flight(a.host));
        let kind = Kind { context, window, ..Kind::default() };
        for r in 0..a.size {
            let buf = if r == a.me { send } else { at(a.recv, (1 + u64::from(r)) * whole) };
            let posted = match self.node.as_mut() {
                Some(node) => node.post(local, a.comm, r, buf, whole, PartOf::Call(call), kind),
                None => Err(StatusKind::UnknownCommunicator),
            };
            if let Err(kind) = posted {
                // Refused at once: this and every later part fail here; parts already filed
                // end through the protocol.
                if r == 0 {
                    self.skipped_call(a.host, a.comm);
                }
                for _ in r..a.size {
                    self.finish_part(call, failed(kind));
                }
                return;
            }
        }
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
