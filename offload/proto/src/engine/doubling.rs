//! Mamidala's allreduce with the leaders' step on the engines: recursive doubling between the
//! node leaders (`protocol.allreduce_between = doubling`, the default).
//!
//! Algorithm, for `E` engines (nodes) of a communicator, `len`-byte contributions, `P` the largest
//! power of two not above `E`, at every engine `i`:
//! 1. **intra-node**: every local process posts one slot of the communicator's gather, rooted at the
//!    node's leader (its first rank) and carried out by the engine, not broadcast
//!    ([`super::gather::Kind::local`]); the engine reduces the node's contributions in local rank
//!    order into the leader's work buffer (`assembly.rs`, as the leader-based multicast
//!    allreduce does) — the node result `n_i` at the leader's `work + 0`;
//! 2. **fold**: an engine `i ≥ P` sends its result to `i − P` and waits for the final result
//!    from it; an engine `i < E − P` receives `i + P`'s and reduces `n_i ⊕ n_{i+P}`;
//! 3. **butterfly**, for `k = 0, 1, …` while `2^k < P`: engines `i` and `j = i ^ 2^k` exchange
//!    their results — two transfers on their pair communicator (`pairs.rs`), the lower engine's
//!    rooted first at both — and each reduces *lower ⊕ upper* (the lower engine's operand
//!    first), so both hold the same bytes;
//! 4. **unfold**: an engine `i < E − P` sends the result to `i + P`;
//! 5. the slot is done: the gather copies the leader's result into every local process's
//!    `work + 0` and completes them.
//!
//! So every rank's result is the same bits: the operands of every step are equal at the two
//! engines that take it, in the same order. The order is fixed and documented: node results in
//! local rank order, then `(n_i ⊕ n_{i+P})` for `i < E − P`, then a balanced tree over engine
//! numbers (`((m₀ ⊕ m₁) ⊕ (m₂ ⊕ m₃))` for four) — not the multicast allreduce's left-to-right
//! node order, so the two settings may differ in a float's last bits (every rank of one job uses
//! the same setting). Each engine receives `⌈log₂ E⌉ · len` bytes (plus `len` for a fold) where
//! the multicast allreduce gives every rank `E · len`; every transfer is a reliable broadcast on
//! a two-engine communicator: CRC, tag and MAC, repair, back-off, `PeerUnreachable` within the
//! peer timeout. A failed transfer or reduction fails the slot — every local process's
//! operation ends with that status — and breaks the communicator at that engine, whose partners of the
//! later steps then fail theirs within the peer timeout instead of waiting for transfers it
//! will never post: an engine dead at the start of an allreduce fails it everywhere within
//! `(⌈log₂ E⌉ + 1)` peer timeouts.
//!
//! Buffers: the partial result lives at the leader's `work + 0`; a partner's arrives in a
//! scratch block of the same work buffer no local contribution occupies any more — the
//! leader's own block (read by the node step already), or, on the engine holding rank 0, the
//! next engine's first block. A step's send has completed (its bytes are in the protocol's
//! channel) before the reduction overwrites the partial.
use super::gather::Start;
use super::pairs::power_below;
use super::reduction::Then;
use super::{failed, Engine};
use crate::intake::regions::Resolved;
use crate::transfer::protocol::{OpCounters, Outcome};
use crate::Nanos;
use ringcast_abi::{DataType, ReduceOp, StatusKind};

/// One step of engine `me`'s schedule (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the partial result to the partner.
    Send(u32),
    /// Receive the partner's result into the scratch block.
    Receive(u32),
    /// Receive the final result from the partner into the partial (a folded engine).
    ReceiveResult(u32),
    /// Send the partial to the partner and receive its into the scratch, lower root first.
    Swap(u32),
    /// Reduce the partial with the scratch, the lower engine's operand first, into the partial.
    Reduce(u32),
}

/// Step `n` of engine `me` of `engines` (module doc), or `None` past the last.
pub(crate) fn step_of(me: u32, engines: u32, n: u32) -> Option<Step> {
    let p = power_below(engines);
    if me >= p {
        return [Step::Send(me - p), Step::ReceiveResult(me - p)].get(n as usize).copied();
    }
    let fold = me + p < engines;
    let mut n = n;
    if fold {
        match n {
            0 => return Some(Step::Receive(me + p)),
            1 => return Some(Step::Reduce(me + p)),
            _ => n -= 2,
        }
    }
    let levels = p.trailing_zeros();
    if n < 2 * levels {
        let partner = me ^ (1 << (n / 2));
        return Some(if n.is_multiple_of(2) { Step::Swap(partner) } else { Step::Reduce(partner) });
    }
    (fold && n == 2 * levels).then_some(Step::Send(me + p))
}

/// An allreduce's doubling in progress (key of `Engine::doublings`).
#[derive(Debug)]
pub(super) struct Doubling {
    /// The gather slot it carries out.
    comm: u64,
    seq: u64,
    spec: (DataType, ReduceOp),
    len: u64,
    /// The call's context (every transfer's MAC carries it).
    context: u64,
    me: u32,
    engines: u32,
    /// The partial result (the leader's `work + 0`) and the scratch block.
    partial: Resolved,
    scratch: Resolved,
    step: u32,
    /// Transfers or the reduction of this step not over yet.
    pending: u32,
    status: StatusKind,
    counters: OpCounters,
}

/// An allreduce call waiting for its gather slot to start: (communicator, slot, operation).
pub(super) type DoublingCall = (u64, u64, (DataType, ReduceOp));

impl Engine {
    /// Gather slot `start` of communicator `comm`, a doubling allreduce's, started: every local
    /// contribution is reduced into the leader's `work + 0`.
    pub(super) fn start_doubling(&mut self, comm: u64, start: Start, now: Nanos) {
        let Some(i) = self.doubling_calls.iter().position(|&(c, s, ..)| c == comm && s == start.seq) else {
            // (Registered when the first local process posted it.)
            return self.finish_doubling_slot(comm, start.seq, failed(StatusKind::CommunicatorBroken));
        };
        let (_, _, spec) = self.doubling_calls.swap_remove(i);
        let Some(node) = self.node.as_ref() else { return };
        let Some((ranges, me)) = node.ranges(comm) else {
            return self.finish_doubling_slot(comm, start.seq, failed(StatusKind::UnknownCommunicator));
        };
        let engines = ranges.len() as u32;
        let len = u64::from(start.len);
        let mine = ranges.get(me as usize).map_or(0, |r| r.0);
        let other = ranges.iter().map(|r| r.0).find(|&f| f != 0).unwrap_or(0);
        let scratch_rank = if mine != 0 { mine } else { other };
        let at =
            |r: u32| Resolved { segment: start.buf.segment, offset: start.buf.offset + u64::from(r) * len };
        let d = Doubling {
            comm,
            seq: start.seq,
            spec,
            len,
            context: start.context,
            me,
            engines,
            partial: at(0),
            scratch: at(scratch_rank),
            step: 0,
            pending: 0,
            status: StatusKind::Ok,
            counters: OpCounters::default(),
        };
        let key = self.doublings.insert(d);
        self.doubling_step(key, now);
    }

    /// Carries out step `step` of doubling `key`, or finishes it.
    fn doubling_step(&mut self, key: u64, now: Nanos) {
        let Some(d) = self.doublings.get(key) else { return };
        let Some(step) = step_of(d.me, d.engines, d.step) else {
            let d = self.doublings.remove(key).expect("present");
            let outcome = Outcome { status: StatusKind::Ok, bytes: d.len, counters: d.counters };
            return self.finish_doubling_slot(d.comm, d.seq, outcome);
        };
        let comm = d.comm;
        let (me, partial, scratch, len, context, spec) =
            (d.me, d.partial, d.scratch, d.len, d.context, d.spec);
        let n = len as u32; // (the gather checked the length fits)
                            // (send?, receive into, partner), in the pair's posting order.
        let mut transfers: [(u32, bool, Resolved); 2] = [(0, false, partial); 2];
        let count = match step {
            Step::Send(p) => {
                transfers[0] = (p, true, partial);
                1
            }
            Step::Receive(p) => {
                transfers[0] = (p, false, scratch);
                1
            }
            Step::ReceiveResult(p) => {
                transfers[0] = (p, false, partial);
                1
            }
            Step::Swap(p) => {
                let (send, receive) = ((p, true, partial), (p, false, scratch));
                transfers = if me < p { [send, receive] } else { [receive, send] };
                2
            }
            Step::Reduce(p) => {
                if let Some(d) = self.doublings.get_mut(key) {
                    d.pending = 1;
                }
                let order = if me < p { [(partial, 1), (scratch, 1)] } else { [(scratch, 1), (partial, 1)] };
                return self.reduce_into(spec, len, &order, partial, Then::Doubled { key });
            }
        };
        if let Some(d) = self.doublings.get_mut(key) {
            d.pending = count;
        }
        for &(partner, send, buf) in &transfers[..count as usize] {
            let Some(node) = self.node.as_mut() else { return };
            node.pair_post(comm, partner, send, buf, n, key, context, now, &mut self.out);
        }
    }

    /// A transfer or the reduction of doubling `key`'s step ended with `outcome`.
    pub(super) fn doubling_part_over(&mut self, key: u64, outcome: Outcome, now: Nanos) {
        let Some(d) = self.doublings.get_mut(key) else { return };
        d.pending = d.pending.saturating_sub(1);
        if outcome.status != StatusKind::Ok && d.status == StatusKind::Ok {
            d.status = outcome.status;
        }
        let (sum, add) = (&mut d.counters, outcome.counters);
        sum.frags_repair += add.frags_repair;
        sum.retransmits += add.retransmits;
        sum.duplicates += add.duplicates;
        sum.penalty_rounds = sum.penalty_rounds.max(add.penalty_rounds);
        if d.pending > 0 {
            return;
        }
        if d.status != StatusKind::Ok {
            // The partners of the steps to come would wait for transfers this engine will not
            // post: the communicator breaks here, and they learn within the peer timeout (each level
            // of the schedule adds at most one).
            let d = self.doublings.remove(key).expect("present");
            self.finish_doubling_slot(d.comm, d.seq, failed(d.status));
            if let Some(node) = self.node.as_mut() {
                node.break_comm(d.comm, &mut self.out);
            }
            return;
        }
        d.step += 1;
        self.doubling_step(key, now);
    }

    /// Whether a doubling of communicator `comm` is running here.
    pub(super) fn doubling_runs(&self, comm: u64) -> bool {
        self.doublings.values().any(|d| d.comm == comm)
    }

    fn finish_doubling_slot(&mut self, comm: u64, seq: u64, outcome: Outcome) {
        if let Some(node) = self.node.as_mut() {
            node.finish_local(comm, seq, outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{step_of, Step};
    use alloc::vec::Vec;

    fn schedule(me: u32, engines: u32) -> Vec<Step> {
        (0..).map_while(|n| step_of(me, engines, n)).collect()
    }

    #[test]
    fn schedules_fold_double_and_unfold() {
        use Step::*;
        assert_eq!(schedule(0, 2), [Swap(1), Reduce(1)]);
        assert_eq!(schedule(1, 4), [Swap(0), Reduce(0), Swap(3), Reduce(3)]);
        assert_eq!(schedule(0, 3), [Receive(2), Reduce(2), Swap(1), Reduce(1), Send(2)]);
        assert_eq!(schedule(1, 3), [Swap(0), Reduce(0)]);
        assert_eq!(schedule(2, 3), [Send(0), ReceiveResult(0)]);
        // Every transfer has its counterpart at the partner, in the same order per pair.
        for e in 2..17u32 {
            for a in 0..e {
                for b in (a + 1)..e {
                    let on_pair = |me: u32, other: u32| -> Vec<bool> {
                        // Roots of the pair's transfers, in posting order: true = the lower engine.
                        let lower = me.min(other);
                        schedule(me, e)
                            .into_iter()
                            .flat_map(|s| match s {
                                Send(p) if p == other => alloc::vec![me == lower],
                                Receive(p) | ReceiveResult(p) if p == other => alloc::vec![other == lower],
                                Swap(p) if p == other => alloc::vec![true, false],
                                _ => alloc::vec![],
                            })
                            .collect()
                    };
                    assert_eq!(on_pair(a, b), on_pair(b, a), "engines {a} and {b} of {e}");
                }
            }
        }
    }
}
