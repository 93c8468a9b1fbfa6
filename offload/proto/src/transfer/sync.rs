//! The delayed synchronization of Yu et al.: broadcast ids in epochs of `channels`; a rank done
//! with an epoch, whose sync-tree children reported, sends the combined ACK/NACK (`SYNC_UP`) to
//! its parent; the manager answers with `SYNC_DOWN`, which frees the epoch's channels.
use crate::comm::{sync_children, sync_parent, Rank};
use crate::config::ProtocolConfig;
use crate::transfer::barrier;
use crate::transfer::env::{CommHandle, Env};
use crate::transfer::protocol::Protocol;
use crate::transfer::seal::{header, send};
use crate::transfer::state::{give_back, State};
use crate::transfer::when::When;
use crate::Nanos;
use ringcast_abi::frame::{DropReason, Frame, SyncBody, SYNC_MISMATCH};
use ringcast_abi::wire::FrameKind;
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::IntoBytes;

/// A rank waiting for its `SYNC_DOWN` repeats its `SYNC_UP` at least every this many repair
/// timeouts, however long it waits — a barrier waits for its slowest process, and an
/// exponential back-off would leave the repeats seconds apart. The parent that sent the `DOWN`
/// keeps answering only [`TIME_WAIT_REPAIRS`] repair timeouts once it owes nothing: a child
/// whose `DOWN` was lost must ask again well inside that (found by the DST: a leaf waiting
/// 5 ms between repeats missed a parent that stayed 0.5 ms).
pub(crate) const UP_REPEAT_REPAIRS: Nanos = 2;

/// Repair timeouts a rank waiting for its `SYNC_DOWN` repeats its `SYNC_UP` every
/// [`UP_REPEAT_REPAIRS`] before its repeats back off (doubling, up to the protocol's repair
/// back-off cap: at most `peer_timeout / 64`, the probes' cadence). A fixed cadence for the whole
/// wait made every rank waiting in a barrier for a slow process send an UP every 54 µs (a repair
/// timeout of 27 µs) for as long as it waited: 715 and 998 engines waiting half a second for a
/// late application spent the DST's 20 M-event budget before it arrived (DST seeds 999000069974
/// and 999000049135, reported as hangs). A parent that heard a child's UP more than
/// [`TIME_WAIT_REPAIRS`] repair timeouts before its DOWN knows the child may have backed off, and
/// stays [`Protocol::time_wait_of`]'s longer TIME-WAIT if it settles after that DOWN.
pub(crate) const UP_FAST_REPAIRS: Nanos = 2 * TIME_WAIT_REPAIRS;

/// The gap to the next repeat of an unanswered `SYNC_UP` first sent at `since`, the last gap
/// being `backoff`.
pub(crate) fn up_repeat_gap(
    since: Nanos,
    now: Nanos,
    backoff: Nanos,
    backoff_max: Nanos,
    repair: Nanos,
) -> Nanos {
    let fast = UP_REPEAT_REPAIRS * repair;
    if now.saturating_sub(since) < UP_FAST_REPAIRS * repair {
        fast
    } else {
        (backoff * 2).clamp(fast, backoff_max.max(fast))
    }
}

/// Repair timeouts an engine that synchronized others keeps answering once it owes nothing
/// (TCP's TIME-WAIT): 64 of a child's `SYNC_UP` repeats — the 64 chances per wait every liveness
/// probe of the protocol gets — so a lost `DOWN` is asked for again through a lossy link. Sixteen
/// were too few for the loss the DST calls benign (seeds 777000005945 and 888000006368: a
/// child's `DOWN` and the answers to its repeats lost to bursts and the fault injector for
/// sixteen round trips, its parent gone, its barrier `PeerUnreachable`): a round trip lost with
/// probability `q` leaves the child without its `DOWN` with probability `q^64` instead of
/// `q^16` (at `q` = 0.6, 6·10⁻¹⁵ instead of 3·10⁻⁴).
pub const TIME_WAIT_REPAIRS: Nanos = 64 * UP_REPEAT_REPAIRS;

/// [`TIME_WAIT_REPAIRS`] repair timeouts of `config`, in ns: how long an engine that
/// synchronized others keeps answering once it owes nothing.
pub fn time_wait(config: &ProtocolConfig) -> Nanos {
    config.repair_timeout_us as Nanos * 1_000 * TIME_WAIT_REPAIRS
}

impl Protocol {
    /// Sends SYNC_UP for the current epoch if this rank and its sync children are done with it
    /// (the manager sends SYNC_DOWN instead).
    pub(crate) fn maybe_sync_up(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        let channels = self.cfg.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        if c.sync.r().up_retry.is_some() || c.sync.r().up_since.is_some() || c.broken {
            return; // already sent (the timer repeats it), or given up
        }
        let epoch = c.sync.done;
        let end = epoch.saturating_add(1).saturating_mul(channels);
        // A closed communicator's last epoch ends at its last broadcast.
        let last = c.closing && c.next_bid > epoch * channels;
        if c.next_bid < end && !last {
            return; // not every broadcast of the epoch posted here yet
        }
        if c.ops.iter().flatten().any(|op| op.bid < end && !op.over()) {
            return;
        }
        let me = c.spec.my_rank;
        let want = sync_children(c.spec.size(), me).enumerate().fold(0u8, |m, (i, _)| m | 1 << i);
        if c.sync.r().heard & want != want {
            // Our part is done; a child's is not: wait for it, probing it (see on_timeout).
            if c.sync.r().ready_since.is_none() {
                c.sync.w().ready_since = When::at(now);
                c.sync_heard = now;
                c.probe_at.get_or_insert(now + self.cfg.probe_every);
            }
            return;
        }
        c.sync.w().up_backoff = self.cfg.repair_timeout;
        self.send_up(comm, now, env);
    }

    pub(crate) fn send_up(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        let channels = self.cfg.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let epoch = c.sync.done;
        let base = epoch * channels;
        let (mut acked, mut nacked) = (c.sync.r().acked, c.sync.r().nacked);
        for op in c.ops.iter().flatten().filter(|op| op.bid >= base && op.bid < base + channels) {
            match op.state {
                State::Done | State::Aborted => acked |= 1 << (op.bid - base),
                _ => nacked |= 1 << (op.bid - base),
            }
        }
        let mine: u64 = if channels == 64 { u64::MAX } else { (1u64 << channels) - 1 };
        // A leaf's own view: everything it completed; combined with the children's ANDs.
        let acked = if c.sync.r().heard == 0 { acked } else { acked & (c.sync.r().acked | !mine) & mine };
        // The call that ended the epoch here against the children's: differing anywhere in the
        // subtree, every barrier that cut the epoch fails (`barrier::end_epoch`).
        let own = barrier::cut_of(c, epoch);
        let mismatch = c.sync.r().mismatch || c.sync.r().child_barrier.is_some_and(|b| b != own);
        let body = SyncBody {
            epoch: U32::new(epoch),
            base_bid: U32::new(base),
            acked: U64::new(acked & mine),
            nacked: U64::new(nacked),
            mcast_frags: U32::new(c.sync.r().mcast.saturating_add(c.epoch_mcast)),
            total_frags: U32::new(c.sync.r().total.saturating_add(c.epoch_total)),
            barrier: U64::new(own.0),
            cut: U32::new(own.1),
            flags: U32::new(if mismatch { SYNC_MISMATCH } else { 0 }),
        };
        match sync_parent(c.spec.my_rank) {
            Some(p) => {
                let h = header(c, FrameKind::SYNC_UP, base, 0);
                let to = c.spec.members[p as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[body.as_bytes()]);
                c.sync.w().up_retry = When::at(now + c.sync.r().up_backoff.max(self.cfg.repair_timeout));
                if c.sync.r().up_since.is_none() {
                    c.sync.w().up_since = When::at(now);
                    c.sync_heard = now;
                    c.probe_at.get_or_insert(now + self.cfg.probe_every);
                }
            }
            None => {
                // The manager: the combined result goes down the tree.
                self.apply_down(comm, body, now, env);
            }
        }
    }

    pub(crate) fn on_sync_up(
        &mut self,
        comm: CommHandle,
        src: Rank,
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(body) = frame.sync() else { return };
        let me = c.spec.my_rank;
        let Some(idx) = sync_children(c.spec.size(), me).position(|k| k == src) else {
            return self.drop_frame(DropReason::BadRank);
        };
        let epoch = body.epoch.get();
        if epoch.checked_add(1) == Some(c.sync.done) {
            // The child missed our DOWN: repeat it.
            if let Some(down) = c.sync.r().last_down {
                let h = header(c, FrameKind::SYNC_DOWN, down.base_bid.get(), 0);
                let to = c.spec.members[src as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[down.as_bytes()]);
            }
            return;
        }
        if epoch != c.sync.done || c.sync.r().heard & (1 << idx) != 0 {
            return;
        }
        let r = c.sync.w();
        let first = r.heard == 0;
        r.heard |= 1 << idx;
        r.first_up_at.get_or_insert(now);
        r.acked = if first { body.acked.get() } else { r.acked & body.acked.get() };
        r.nacked |= body.nacked.get();
        r.mcast = r.mcast.saturating_add(body.mcast_frags.get());
        r.total = r.total.saturating_add(body.total_frags.get());
        let theirs = (body.barrier.get(), body.cut.get());
        r.mismatch |= body.flags.get() & SYNC_MISMATCH != 0 || r.child_barrier.is_some_and(|b| b != theirs);
        r.child_barrier = Some(theirs);
        self.maybe_sync_up(comm, now, env);
    }

    pub(crate) fn on_sync_down(
        &mut self,
        comm: CommHandle,
        src: Rank,
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(body) = frame.sync() else { return };
        if sync_parent(c.spec.my_rank) != Some(src) {
            return self.drop_frame(DropReason::BadRank);
        }
        if body.epoch.get() != c.sync.done {
            return; // an old DOWN repeated
        }
        if body.base_bid.get() != c.sync.done.wrapping_mul(self.cfg.channels) {
            return self.drop_frame(DropReason::BidOutOfWindow);
        }
        self.apply_down(comm, *body, now, env);
    }

    /// Epoch over everywhere: free its channels, learn the hit rate, pass the result down.
    pub(crate) fn apply_down(&mut self, comm: CommHandle, body: SyncBody, now: Nanos, env: &mut impl Env) {
        let channels = self.cfg.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let base = body.base_bid.get();
        for slot in c.ops.iter_mut() {
            if slot.as_ref().is_some_and(|op| op.bid >= base && op.bid < base + channels) {
                if let Some(op) = slot.take() {
                    give_back(c.spare_bits.vec(), (op.bits, op.relayed));
                    // A MAC never finished (the broadcast failed half-way).
                    if let Some(m) = op.mac {
                        give_back(c.spare_macs.vec(), m);
                    }
                }
            }
        }
        if body.nacked.get() != 0 {
            c.broken = true;
        }
        let (m, t) = (body.mcast_frags.get() as u64, body.total_frags.get() as u64);
        // Fail-over (Yu et al.): two synchronized epochs in which nobody received a single
        // fragment by multicast — the multicast path is broken. Every rank applies the same
        // DOWN, and posting any broadcast id from `base + channels` on reuses a channel only
        // this DOWN frees, so every rank switches to the binomial point-to-point broadcast at
        // the same broadcast.
        if t > 0 && m == 0 {
            c.sync.mcast_dead_epochs += 1;
            if c.sync.mcast_dead_epochs >= 2 && c.failover_from.is_none() {
                c.failover_from = core::num::NonZeroU32::new(base + channels);
            }
        } else if m > 0 {
            c.sync.mcast_dead_epochs = 0;
        }
        // Adaptive root delay: the root waits the picked ranks' typical arrival lag (EWMA, per
        // broadcast) times a factor the multicast hit rate the synchronization measured tunes —
        // additive increase below 50 % hits (wait for more of the late ones), halving from 90 %
        // (a miss costs one penalty round, a delay costs every broadcast).
        if t > 0 {
            if m * 2 < t {
                c.lag_factor = (c.lag_factor + 1).min(8);
            } else if m * 10 >= t * 9 {
                c.lag_factor /= 2;
            }
        }
        // The barrier that cut this epoch is over: every rank got past it — with the same call
        // everywhere, or not (the manager's own context against ours catches a parent that
        // differs from us; the flag, a difference anywhere else).
        let epoch = c.sync.done;
        // A child that waited this long for the DOWN may have backed its repeats off: should
        // this DOWN be the communicator's last, stay long enough for 64 of them.
        let fast_window = TIME_WAIT_REPAIRS * self.cfg.repair_timeout;
        c.down_after_wait = c.sync.r().first_up_at.is_some_and(|t| now.saturating_sub(t) > fast_window);
        let theirs = (body.barrier.get(), body.cut.get());
        let mismatched = body.flags.get() & SYNC_MISMATCH != 0 || theirs != barrier::cut_of(c, epoch);
        barrier::end_epoch(c, epoch, mismatched, env);
        // A DOWN that broke the communicator (a NACK) fails the barrier of the next epoch too:
        // no frame or timer of a broken communicator would settle it later.
        barrier::settle(c, env);
        // The DOWN kept for a child that missed it, in the round's box (made once and reused).
        c.sync.next_epoch(body);
        c.epoch_mcast = 0;
        c.epoch_total = 0;
        self.counters.syncs += 1;
        let me = c.spec.my_rank;
        let h = header(c, FrameKind::SYNC_DOWN, base, 0);
        for k in sync_children(c.spec.size(), me) {
            let to = c.spec.members[k as usize];
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[body.as_bytes()]);
        }
        self.maybe_sync_up(comm, now, env);
    }
}
