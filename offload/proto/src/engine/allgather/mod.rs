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
//! 2. this engine's own part waits in the gather until every local process posted it and the
//!    engine built it in the leader's buffer (`assembly.rs`): an allgather's local blocks
//!    copied there, a reduction's reduced there in local rank order (`reduction.rs`: loaded,
//!    reduced, stored — Mamidala's intra-node step, by the engine's core); then it leaves as
//!    one message;
//! 3. the gather delivers every part into every local buffer; complete once every part is
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
//! the engines (`doubling.rs`).
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
//! its length. What runs once every part is over is `composite.rs`'s.
//!
//! **Allreduce** is the same gathering into a work buffer of `size × len` bytes, then one more
//! step: once every part is over, the engine loads the parts (one block per rank, or per node),
//! reduces them in rank (node) order (`collective::reduce`: the same operations in the same
//! order at every rank, so every rank's result is bit-identical, floats included) and stores the
//! result at the start of the work buffer (`reduction.rs`). Leader-based, a node's result is
//! reduced once, by its engine, and every rank then reduces `E` blocks instead of `size`: `ppn`
//! times fewer bytes on the fabric and in the last step. Every node still moves its block to
//! every node — the multicast allreduce; recursive doubling and Rabenseifner's reduce-scatter +
//! allgather between the leaders (`doubling.rs`, where the cost model picks them) move less.
//!
//! **Reduce** is the same allreduce whose last step only the root takes: every rank gathers
//! every part (the multicast composition delivers each part everywhere), the root alone
//! loads, reduces and stores, and the others complete with 0 bytes once their parts are over.
//!
//! Where the cost model picks it (`protocol.allreduce_between`, `allgather_between` = `auto`,
//! the default; `model/compose.rs`) or a setting forces it (`doubling`), a leader-based
//! allreduce or reduce combines the node results, and an allgather exchanges the node parts, by
//! recursive doubling (a reduction also by Rabenseifner's) between the leaders instead of
//! multicasting them (`doubling.rs`): one part per node, carried out by the engine.

pub(crate) mod schedule;
use crate::engine::call::{call_context, Call, Reduce};
use crate::engine::exchange::What;
use crate::engine::ids::{CallId, PartOf};
use crate::engine::node::assembly::Piece;
use crate::engine::node::sequencer::Kind;
use crate::engine::{failed, Engine, Job};
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::model::compose::{self, Exchange};
use ringcast_abi::{Completion, Status, StatusKind};

/// Where a leader-based composition's blocks are: rank `r`'s at `base + r · stride`, `stride`
/// bytes each (the part of a node holding ranks `first..first + count` is the run from
/// `first`'s block on).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocks {
    pub(crate) base: Resolved,
    pub(crate) stride: u64,
}

impl Engine {
    /// Starts an allgather or allreduce (see the module doc): leader-based when every engine's
    /// ranks are consecutive (one part per engine), else one part per rank.
    pub(crate) fn start_allgather(&mut self, a: GatherCall) {
        let cqe = Completion::new(a.cookie, a.opcode, Status::OK, 0);
        let op = self.new_op(a.host, cqe, a.started, true, true);
        self.refuse_op(op, a.refused);
        let local = self.core.local_rank(a.host).unwrap_or(u32::MAX);
        let leader_based = self.core.config().protocol.allgather_parts.leader_based();
        let nodes = match (leader_based, self.node.as_ref()) {
            (true, Some(n)) => n.ranges(a.comm).map(|(r, mine)| (r.len() as u32, mine)),
            _ => None,
        };
        let parts = match nodes {
            Some((engines, _)) => engines,
            None => a.size + u32::from(a.send.is_some()),
        };
        // A reduce's other ranks gather like everyone but do not reduce (their buffer's contents
        // are left unspecified), and report no bytes.
        let receives = a.root.is_none_or(|r| r == a.me);
        let by_node = nodes.is_some().then_some(a.comm);
        let reduce = a.reduce.filter(|_| receives).map(|spec| Reduce {
            spec,
            work: a.recv,
            len: a.len,
            size: a.size,
            by_node,
        });
        // What the completion reports: every block, an allreduce's (or the root's) result, or nothing.
        let bytes = match (reduce.is_some(), receives) {
            (true, _) => a.len,
            (false, true) => a.len * u64::from(a.size),
            (false, false) => 0,
        };
        // (A call refused for its operation says its `SUM` is a stand-in: `intake::plan`.)
        let stand_in = if a.stand_in { crate::transfer::env::STAND_IN } else { 0 };
        let context = call_context(a.opcode, a.reduce) | stand_in;
        // An allreduce or a reduce may combine the node results by recursive doubling between
        // the leaders, and an allgather the node parts (`doubling.rs`): one part, the node's,
        // carried out by the engine. (A reduce's other ranks get the result too, in a buffer
        // whose contents are theirs not to rely on, and report no bytes.)
        let exchange = self.exchange(&a);
        if let (Some((engines, _)), true) = (nodes, exchange == Exchange::Multicast) {
            if engines >= 2 {
                // Counted in this process's later contexts: engines that disagree on the
                // exchange must not pair one call's transfers with another's (`gather.rs`).
                self.multicast_exchange(a.host, a.comm);
            }
        }
        if let (Some((engines, mine)), false) = (nodes, exchange == Exchange::Multicast) {
            if engines >= 2 {
                let call = self.calls.insert(Call::new(op, 1, bytes));
                let ring = exchange == Exchange::Ring;
                return self.post_doubling(&a, local, call, context, mine, ring);
            }
        }
        let mut composite = Call::new(op, parts, bytes);
        composite.reduce = reduce;
        let call = self.calls.insert(composite);
        match nodes {
            Some((engines, mine)) => {
                let blocks = Blocks { base: a.recv, stride: a.len };
                self.post_node_parts(&a, local, call, context, (engines, mine), blocks)
            }
            None => self.post_rank_parts(&a, local, call, context),
        }
    }

    /// How a leader-based call exchanges the node parts between the leaders
    /// (`model/compose.rs`): multicast, or point to point — recursive doubling (a reduction's
    /// Rabenseifner halving is decided again where the slot starts, `doubling.rs`), or an
    /// allgather's ring: the cost model's choice (`auto`) or the one `allreduce_between` or
    /// `allgather_between` forces ([`compose::allreduce`], [`compose::allgather`]). Every rank
    /// decides alike: from the configuration, the communicator's ranges and the call's length
    /// and element type.
    fn exchange(&self, a: &GatherCall) -> Exchange {
        let config = self.core.config();
        let Some((ranges, _)) = self.node.as_ref().and_then(|n| n.ranges(a.comm)) else {
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

    /// A recursive-doubling allreduce's or allgather's one part (`doubling.rs`): this node's
    /// slot, rooted at its leader, carried out by the engine once every local contribution is
    /// reduced into the leader's `work + 0` (a reduction) or copied into its place in the
    /// leader's receive buffer (an allgather); the slot then delivers the leader's result — a
    /// reduction's block, an allgather's every block — into every local process's buffer. An
    /// allgather's parts go round the ring of the engines instead (`ring`).
    fn post_doubling(
        &mut self,
        a: &GatherCall,
        local: u32,
        call: CallId,
        context: u64,
        mine: u32,
        ring: bool,
    ) {
        let at = |r: u32| Resolved { segment: a.recv.segment, offset: a.recv.offset + u64::from(r) * a.len };
        let Some(node) = self.node.as_mut() else {
            return self.finish_part(call, failed(StatusKind::UnknownCommunicator));
        };
        let (first, locals) = match (node.ranges(a.comm), node.locals(a.comm)) {
            (Some((r, _)), Some(l)) if (mine as usize) < r.len() => (r[mine as usize].0, l),
            _ => {
                self.skipped_call(a.host, a.comm);
                return self.finish_part(call, failed(StatusKind::UnknownCommunicator));
            }
        };
        let kind = Kind {
            all: true,
            assemble: true,
            context,
            window: 0,
            local: true,
            in_place: false,
            barrier: false,
        };
        let full = node.context_of(local, a.comm, context);
        let slot_len = if a.reduce.is_some() { a.len } else { a.len * u64::from(a.size) };
        match node.post(local, a.comm, first, at(0), slot_len, PartOf::Call(call), kind) {
            Ok(seq) => {
                let what = match a.reduce {
                    Some(spec) => What::Allreduce(spec),
                    None => What::Allgather { ring },
                };
                if self.note_call(a.comm, seq, what).is_none() {
                    return; // another kind of call at this slot: the communicator broke
                }
                let (src, key) = match a.send {
                    Some(s) => (s, a.keys[0]),
                    None => (at(a.me), a.keys[1]),
                };
                let at_in_part = u64::from(a.me.saturating_sub(first)) * a.len;
                let piece = Piece { host: a.host, src, key, at: at_in_part, len: a.len, context: full };
                // A node's result goes to the leader's `work + 0`, where the doubling starts; an
                // allgather's blocks to their places in the leader's receive buffer.
                let base = if a.reduce.is_some() { at(0) } else { at(first) };
                let leader = (a.me == first).then_some((base, a.keys[1]));
                self.assemble(a.comm, seq, piece, leader, locals, a.reduce);
            }
            Err(kind) => {
                self.skipped_call(a.host, a.comm);
                self.finish_part(call, failed(kind));
            }
        }
    }

    /// One part per rank: broadcast `r` rooted at `r` into `recv + r·len`, this rank's from its
    /// send block (then copied into its place) or in place.
    fn post_rank_parts(&mut self, a: &GatherCall, local: u32, call: CallId, context: u64) {
        let block =
            |r: u32| Resolved { segment: a.recv.segment, offset: a.recv.offset + u64::from(r) * a.len };
        let kind =
            Kind { context, window: a.size.saturating_mul(self.calls_in_flight(a.host)), ..Kind::default() };
        for r in 0..a.size {
            let buf = if r == a.me { a.send.unwrap_or(block(r)) } else { block(r) };
            let posted = match self.node.as_mut() {
                Some(node) => node.post(local, a.comm, r, buf, a.len, PartOf::Call(call), kind),
                None => Err(StatusKind::UnknownCommunicator),
            };
            if let Err(kind) = posted {
                // Refused at once (the communicator, not the part): this and every later part
                // fail here (the local copy too); parts already filed end through the protocol.
                if r == 0 {
                    self.skipped_call(a.host, a.comm);
                }
                for _ in r..a.size + u32::from(a.send.is_some()) {
                    self.finish_part(call, failed(kind));
                }
                return;
            }
        }
        if let Some(src) = a.send {
            let job = self.jobs.insert(Job::Part { call });
            let dma =
                crate::engine::Dma::Copy { host: a.host, src, dst: block(a.me), len: a.len, keys: a.keys };
            self.out.dma(job, dma);
        }
    }

    /// Mamidala's leader-based composition: one part per engine, in engine order, rooted at its
    /// first rank and carrying its ranks' blocks side by side (`count · stride` bytes into
    /// `base + first · stride`; a reduction's part is the node's one block of `stride` bytes).
    /// This engine's part (`mine`) leaves once every local block is assembled into the
    /// leader's buffer (`assembly.rs`); the gather then delivers each part into every local
    /// buffer, this rank's own block included. An allgather's and a reduction's blocks are
    /// `len` bytes at `recv`; an alltoall's are whole send buffers (`alltoall.rs`).
    pub(crate) fn post_node_parts(
        &mut self,
        a: &GatherCall,
        local: u32,
        call: CallId,
        context: u64,
        (engines, mine): (u32, u32),
        blocks: Blocks,
    ) {
        let Blocks { base, stride } = blocks;
        let at = |r: u32| Resolved { segment: base.segment, offset: base.offset + u64::from(r) * stride };
        let window = engines.saturating_mul(self.calls_in_flight(a.host));
        for k in 0..engines {
            let Some(node) = self.node.as_mut() else { return };
            let ((first, count), locals) = match (node.ranges(a.comm), node.locals(a.comm)) {
                (Some((r, _)), Some(l)) if (k as usize) < r.len() => (r[k as usize], l),
                _ => (
                    (0, 0),
                    0, // the communicator went away meanwhile: refused below
                ),
            };
            let own = k == mine;
            let kind = Kind { all: own, assemble: own, context, window, ..Kind::default() };
            // What this process's post carries (its skipped calls too): the assembly compares it.
            let full = node.context_of(local, a.comm, context);
            // A reduction's node part is the node's one partial result; an allgather's or an
            // alltoall's, its ranks' blocks side by side.
            let part_len = if a.reduce.is_some() { stride } else { stride * u64::from(count) };
            let posted = match count {
                0 => Err(StatusKind::UnknownCommunicator),
                _ => node.post(local, a.comm, first, at(first), part_len, PartOf::Call(call), kind),
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
                    self.assemble(a.comm, seq, piece, leader, locals, a.reduce);
                }
                Ok(_) => {}
                Err(kind) => {
                    if k == 0 {
                        self.skipped_call(a.host, a.comm);
                    }
                    for _ in k..engines {
                        self.finish_part(call, failed(kind));
                    }
                    return;
                }
            }
        }
    }
}
