//! The barrier on the delayed synchronization's own tree (Yu et al.): a barrier is an epoch
//! cut short.
//!
//! The synchronization already is a barrier over what an epoch holds: a rank sends `SYNC_UP`
//! only once its part of the epoch is over and its sync-tree children reported, so the
//! manager's `SYNC_DOWN` says that every rank got that far. A barrier therefore ends the epoch
//! it falls in at the point where it is posted — the broadcast ids left in the epoch are
//! skipped (`next_bid` rounded up to the epoch's end; posted at an epoch's first id, it skips
//! the whole epoch) — and completes when that epoch's `SYNC_DOWN` arrives:
//!
//! * every engine of the communicator posts the same calls in the same order, so every engine
//!   cuts the same epoch at the same id and skips the same ids — `SYNC_UP` carries the call's
//!   context and where it cut, and ranks that differ fail `DigestMismatch` everywhere
//!   ([`end_epoch`]), as do ranks that posted a broadcast at an id a barrier skipped here
//!   ([`Protocol::against_barrier`]);
//! * an engine posts the barrier only once every local process arrived (the local gather's
//!   `all` slot, `engine/barrier.rs`), so its `SYNC_UP` for the cut epoch means that all of its
//!   processes arrived and that all of its subtree's did;
//! * the `SYNC_DOWN` travels the tree back down; it arrives only after the manager heard every
//!   subtree, so when it completes the barrier here, every process of the communicator arrived.
//!
//! Cost: `2 ⌊log₂ E⌋` one-frame hops for `E` engines (up the balanced binary tree and down),
//! `2 (E − 1)` frames in all — against `E` one-byte broadcasts, `E (E − 1)` frames received,
//! for the barrier composed of broadcasts. Every property of the synchronization comes with
//! it, unchanged: `SYNC_UP` repeated with back-off until its `DOWN` comes, a lost `DOWN` asked
//! for again by the repeated `UP`, probes to the neighbours waited on (a slow application is
//! never a dead engine), and a neighbour silent for `peer_timeout_ms` breaking the
//! communicator — which fails the barrier `PeerUnreachable`. A broadcast is never posted past
//! the epoch synchronizing (`collective/bcast.rs`), so the free channels a barrier leaves do
//! not let one run out of a slower rank's window.
//!
//! A barrier needs no channel, but it may cut an epoch at most one ahead of the one
//! synchronizing (`done + 1`): a third waits (`PostError::WouldBlock`), as a broadcast waits
//! for a channel, so a communicator holds at most [`MAX_BARRIERS`] unfinished barriers.
use crate::comm::Rank;
use crate::transfer::env::{CommHandle, Env, OpCounters, Outcome, PostError};
use crate::transfer::protocol::Protocol;
use crate::transfer::seal::{header, send};
use crate::transfer::state::{fail, postable, Comm};
use crate::Nanos;
use ringcast_abi::wire::{FrameKind, READY_FLAG_MISMATCH};
use ringcast_abi::StatusKind;

/// Unfinished barriers one communicator holds at most: one cutting the epoch synchronizing,
/// one the epoch after.
pub(crate) const MAX_BARRIERS: usize = 2;

/// A barrier waiting for its epoch's `SYNC_DOWN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Barrier {
    /// The epoch it cut: it completes once the synchronization is past it.
    pub(crate) epoch: u32,
    pub(crate) token: u64,
    /// The call's context ([`crate::transfer::protocol::Post::context`]): `SYNC_UP` carries it,
    /// and a rank whose sync-tree child cut the epoch with another marks the epoch mismatched.
    pub(crate) context: u64,
    /// Broadcasts posted in the epoch before the barrier cut it ([`ringcast_abi::frame::SyncBody::cut`]).
    pub(crate) cut: u32,
}

impl Protocol {
    /// Posts a barrier on `comm` (see the module doc); `token` completes, with 0 bytes, once
    /// every rank of the communicator posted its barrier — or fails when the communicator
    /// breaks first.
    pub fn post_barrier(
        &mut self,
        comm: CommHandle,
        token: u64,
        context: u64,
        now: Nanos,
        env: &mut impl Env,
    ) -> Result<(), PostError> {
        let channels = self.cfg.channels;
        let c = postable(&mut self.comms, comm.0)?;
        let epoch = c.next_bid / channels;
        if epoch > c.sync.done + 1 {
            return Err(PostError::WouldBlock);
        }
        let Some(end) = epoch.checked_add(1).and_then(|e| e.checked_mul(channels)) else {
            // Broadcast ids ran out (2³² per communicator): as a broadcast would be.
            return Err(PostError::Refused(StatusKind::BadDescriptor));
        };
        let cut = c.next_bid % channels;
        if c.barriers.is_empty() {
            // The table, made at the communicator's first barrier (a communicator that never
            // cuts an epoch holds none).
            let barriers = c.barriers.vec();
            barriers.reserve_exact(MAX_BARRIERS);
            barriers.resize(MAX_BARRIERS, None);
        }
        let Some(free) = c.barriers.iter_mut().find(|b| b.is_none()) else {
            // Not reachable: one barrier per epoch, at most `done` and `done + 1`.
            return Err(PostError::WouldBlock);
        };
        *free = Some(Barrier { epoch, token, context, cut });
        c.next_bid = end;
        self.maybe_sync_up(comm, now, env);
        self.rearm(comm);
        Ok(())
    }

    /// Fails every barrier of `comm` if the communicator broke.
    pub(crate) fn settle_barriers(&mut self, comm: CommHandle, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        settle(c, env);
    }

    /// A frame about broadcast `bid` from `src`, if a barrier here skipped `bid`: the other
    /// rank posted a broadcast where this one posted the barrier (a call wrong at one rank
    /// only, or a program that calls differently). The barrier fails `DigestMismatch` at once
    /// — its epoch's `SYNC_DOWN` may never come while the other rank waits in its broadcast —
    /// and a rank waiting for the broadcast (a request, a ready) is told `READY_FLAG_MISMATCH`,
    /// so its call fails the same way. Returns whether `bid` was skipped (the frame is spent).
    pub(crate) fn against_barrier(
        &mut self,
        comm: CommHandle,
        src: Rank,
        bid: u32,
        answer: bool,
        env: &mut impl Env,
    ) -> bool {
        let channels = self.cfg.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return false };
        let epoch = bid / channels;
        // Most frames find no barrier waiting: that test first.
        let cut_here = c.barriers.iter().flatten().any(|b| b.epoch == epoch);
        let skipped = cut_here
            && bid >= c.sync.done.saturating_mul(channels)
            && bid < c.next_bid
            && c.ops.get((bid % channels) as usize).and_then(Option::as_ref).is_none_or(|op| op.bid != bid);
        if !skipped {
            return false;
        }
        end_epoch(c, epoch, true, env);
        if answer {
            let h = header(c, FrameKind::READY, bid, READY_FLAG_MISMATCH);
            let to = c.spec.members[src as usize];
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
        }
        true
    }
}

/// How `epoch` ended here: the context of the barrier that cut it and where; `(0, 0)` if none
/// did (broadcasts filled it, or the communicator closed).
pub(crate) fn cut_of(c: &Comm, epoch: u32) -> (u64, u32) {
    c.barriers.iter().flatten().find(|b| b.epoch == epoch).map_or((0, 0), |b| (b.context, b.cut))
}

/// The `SYNC_DOWN` of `epoch` arrived: the barrier that cut it is over — `Ok` if every rank
/// cut it with the same call, `DigestMismatch` if not (`mismatched`: some rank ended the epoch
/// with another barrier context or with broadcasts, e.g. after a call wrong at one rank only;
/// the same answer at every rank, as a broadcast whose MAC differs).
pub(crate) fn end_epoch(c: &mut Comm, epoch: u32, mismatched: bool, env: &mut impl Env) {
    for slot in c.barriers.iter_mut().filter(|b| b.is_some_and(|b| b.epoch == epoch)) {
        let Some(b) = slot.take() else { continue };
        let outcome = if mismatched {
            fail(StatusKind::DigestMismatch, OpCounters::default())
        } else {
            Outcome { status: StatusKind::Ok, bytes: 0, counters: OpCounters::default() }
        };
        env.complete(b.token, outcome);
    }
}

/// [`Protocol::settle_barriers`] on a communicator at hand: a broken communicator fails its
/// barriers.
pub(crate) fn settle(c: &mut Comm, env: &mut impl Env) {
    if !c.broken {
        return;
    }
    // A neighbour went silent (or said it is broken): this rank cannot learn whether the
    // others arrived.
    for b in c.barriers.iter_mut().filter_map(Option::take) {
        env.complete(b.token, fail(StatusKind::PeerUnreachable, OpCounters::default()));
    }
}

/// Fails every barrier of a communicator being removed.
pub(crate) fn abandon(c: &mut Comm, env: &mut impl Env) {
    for b in c.barriers.iter_mut().filter_map(Option::take) {
        env.complete(b.token, fail(StatusKind::CommunicatorBroken, OpCounters::default()));
    }
}
