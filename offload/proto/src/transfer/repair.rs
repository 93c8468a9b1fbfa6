//! Ring repair, the reliable second stage: answering a repair request with the fragments the
//! asker misses (at most `MAX_REPAIR_PER_REQUEST` per request), the `READY` family of control
//! frames (ready, have-all, alive, broken, aborted), and asking a repair source.
use crate::comm::Rank;
use crate::config::RootDelay;
use crate::ledger::Side;
use crate::schedule::bcast::{Algorithm, Hop, Phase, LANE_ANY};
use crate::transfer::env::{CommHandle, Env};
use crate::transfer::mac::root_mac_through;
use crate::transfer::protocol::Protocol;
use crate::transfer::seal::{header, send, send_repair};
use crate::transfer::state::{fail, locate, note_ready, rendezvous, waits_on, Located, State};
use crate::Nanos;
use ringcast_abi::frame::{Frame, RetransmitBody, MAX_RETRANSMIT_FRAGS};
use ringcast_abi::wire::{
    FrameKind, READY_FLAG_ABORTED, READY_FLAG_ALIVE, READY_FLAG_BROKEN, READY_FLAG_HAVE_ALL,
    READY_FLAG_MISMATCH, READY_FLAG_PROBE, READY_FLAG_READY, SYNC_PROBE_BID, WIRE_HEADER_LEN,
    WIRE_TRAILER_LEN,
};
use ringcast_abi::StatusKind;
use zerocopy::byteorder::little_endian::U32;
use zerocopy::IntoBytes;

/// Fragments one repair request can draw: a ~50-byte request must not trigger thousands of
/// datagrams at once (the asker asks again for the rest).
pub(crate) const MAX_REPAIR_PER_REQUEST: u32 = 256;

impl Protocol {
    /// A rank asks for fragments it misses: send what we hold, or say we are alive.
    pub(crate) fn on_request(
        &mut self,
        comm: CommHandle,
        src: Rank,
        bid: u32,
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        // A root asked while it still waits for a ready (it was lost, or is late): a rank that
        // asks has posted — the request is as good as its ready, so the root sends now, to
        // everyone, and that answers it. (Waiting on, it held the epoch for `peer_timeout`:
        // 200 8 KiB broadcasts on 2 ranks took 6 s at 1 % unicast loss instead of 11 ms.)
        if let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) {
            if let Located::Slot(slot) = locate(c, bid, self.cfg.channels) {
                let me = c.spec.my_rank;
                if let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut).filter(|op| op.root == me) {
                    if let State::RootDelay { .. } = op.state {
                        op.state = State::RootDelay { at: now, ready: true };
                        self.advance_root(comm, slot, now, env);
                        return;
                    }
                    // Sending or sent, its MAC not finished (a root still `Sending` has not yet
                    // sealed its last fragment, which finishes it): finish it — not before the
                    // message is loaded (its bits are filled then): the channel holds nothing of it
                    // yet.
                    if op.bits.is_complete() {
                        let seq = op.geo.count().saturating_sub(1);
                        let fed =
                            root_mac_through(op, &c.channels[slot], seq, &c.seal.keys, &mut c.spare_macs);
                        self.counters.ledger.hashed(Side::Send, fed);
                    }
                }
            }
        }
        // Answering changes nothing else in the communicator: a shared borrow, no copy of the
        // bitmap.
        let Some(c) = self.comms.get(comm.0 as usize).and_then(Option::as_ref) else { return };
        let to = c.spec.members[src as usize];
        let mut sent = 0;
        if let (Located::Slot(slot), Some((body, bitmap))) =
            (locate(c, bid, self.cfg.channels), frame.retransmit())
        {
            let (first, n) = (body.first_frag.get(), body.nfrags.get());
            // NOTE(unwrap-free): locate returned an occupied slot.
            let Some(op) = c.ops.get(slot).and_then(Option::as_ref) else { return };
            if op.direct == Some(true) {
                // Its bytes went straight to the host buffer: it holds no copy to serve, and no
                // rank that follows the schedule asks it (`collective::bcast::places_directly`).
                return;
            }
            let (held, hops, aborted) = (&op.bits, op.hops, op.state == State::Aborted);
            // A multicast root still sending holds its whole message, but the fragments past
            // the last one the asker holds may simply not have reached it yet — they are on their
            // way to every member. Answered here as well, each came twice: an asker whose timer
            // ran out while the root was descheduled got up to 256 of them, and its ring
            // successor then asked it for what it now held (8 nodes on 2 cores, 1 MiB:
            // 300-400 repair frames per broadcast with nothing lost). So while sending, the root
            // repairs only gaps: missing fragments below one the request shows held (lost, on
            // a fabric that keeps order; below `next`, so multicast). A tail lost for real is
            // asked for again once the root is done, or repaired down the ring by have-all.
            let unsent = match op.state {
                State::Sending { next, .. }
                    if op.alg == Algorithm::Multicast && op.root == c.spec.my_rank =>
                {
                    let shown = (0..n.min(8 * bitmap.len() as u32))
                        .rev()
                        .find(|&k| bitmap.get((k / 8) as usize).is_some_and(|b| b & (1 << (k % 8)) == 0));
                    next.min(shown.map_or(0, |k| first.saturating_add(k)))
                }
                _ => u32::MAX,
            };
            if aborted {
                let h = header(c, FrameKind::READY, bid, READY_FLAG_ABORTED);
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                return;
            }
            for k in 0..n {
                let seq = first.saturating_add(k);
                let missing = bitmap.get((k / 8) as usize).is_some_and(|b| b & (1 << (k % 8)) != 0);
                if missing && held.get(seq) && seq < unsent && sent < MAX_REPAIR_PER_REQUEST {
                    // Phase::Tree: an answer is never forwarded as an allgather copy.
                    let hop = Hop { to: src, lane: LANE_ANY, phase: Phase::Tree };
                    let hops = hops.saturating_add(1);
                    send_repair(&mut self.scratch, &mut self.counters, env, c, slot, seq, hop, hops);
                    sent += 1;
                }
            }
        }
        if sent == 0 {
            // Nothing to give: say whether this rank is still part of the communicator.
            let flag = if c.broken { READY_FLAG_BROKEN } else { READY_FLAG_ALIVE };
            let h = header(c, FrameKind::READY, bid, flag);
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
        }
    }

    pub(crate) fn on_ready(
        &mut self,
        comm: CommHandle,
        src: Rank,
        bid: u32,
        flags: u16,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let channels = self.cfg.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        if flags == READY_FLAG_PROBE {
            // Any live engine answers, however slow its application.
            let flag = if c.broken { READY_FLAG_BROKEN } else { READY_FLAG_ALIVE };
            let h = header(c, FrameKind::READY, SYNC_PROBE_BID, flag);
            let to = c.spec.members[src as usize];
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            return;
        }
        if bid == SYNC_PROBE_BID {
            // An answer to our synchronization probe.
            match flags {
                READY_FLAG_ALIVE if waits_on(c, src) => c.sync_heard = now,
                READY_FLAG_BROKEN => c.broken = true,
                _ => {}
            }
            return;
        }
        match (flags, locate(c, bid, self.cfg.channels)) {
            (READY_FLAG_READY, Located::Slot(slot)) => {
                let adaptive = self.cfg.root_delay == RootDelay::Adaptive;
                let (slots, size) = (self.cfg.slots, c.spec.size());
                if let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) {
                    if adaptive {
                        // A lag sample: how far the picked rank arrived behind the root.
                        let lag = now.saturating_sub(op.posted);
                        c.lag_ewma = (c.lag_ewma * 3 + lag) / 4;
                    }
                    // A rendezvous waits for this ready in every mode; randomized
                    // synchronization too. (The adaptive delay alone does not.)
                    let waits = !adaptive || rendezvous(op.alg, size, op.geo.count(), slots, op.window);
                    if let State::RootDelay { .. } = op.state {
                        if waits {
                            // The picked rank is there: go now.
                            op.state = State::RootDelay { at: now, ready: true };
                        }
                    } else if op.state == State::Loading {
                        // Here before the message is: the root's delay will find it.
                        note_ready(c, bid, channels);
                    }
                }
                self.advance_root(comm, slot, now, env);
            }
            (READY_FLAG_READY, Located::Future) => {
                if self.cfg.root_delay == RootDelay::Adaptive {
                    c.lag_ewma = c.lag_ewma * 3 / 4; // arrived before the root: lag 0
                }
                // Kept in every mode: a rendezvous finds it once its message is loaded.
                note_ready(c, bid, channels);
            }
            (READY_FLAG_HAVE_ALL, Located::Slot(slot))
                if c.ops
                    .get(slot)
                    .and_then(Option::as_ref)
                    .is_some_and(|op| op.state == State::Receiving) =>
            {
                self.request(comm, slot, src, now, env);
            }
            (READY_FLAG_ALIVE, Located::Slot(slot)) => {
                if let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) {
                    op.heard = now;
                }
            }
            (READY_FLAG_BROKEN, Located::Slot(slot)) => {
                // The rank we wait on left the communicator: so do we (only if we still needed it).
                if let Some(op) =
                    c.ops.get_mut(slot).and_then(Option::as_mut).filter(|op| op.state == State::Receiving)
                {
                    c.broken = true;
                    op.state = State::Failed;
                    env.complete(op.token, fail(StatusKind::CommunicatorBroken, op.counters));
                }
            }
            (READY_FLAG_MISMATCH, Located::Slot(slot)) => {
                if let Some(op) =
                    c.ops.get_mut(slot).and_then(Option::as_mut).filter(|op| op.state == State::Receiving)
                {
                    op.state = State::Failed;
                    env.complete(op.token, fail(StatusKind::DigestMismatch, op.counters));
                }
            }
            (READY_FLAG_ABORTED, Located::Slot(slot)) => {
                if let Some(op) =
                    c.ops.get_mut(slot).and_then(Option::as_mut).filter(|op| op.state == State::Receiving)
                {
                    op.state = State::Aborted;
                    env.complete(op.token, fail(StatusKind::RootFailed, op.counters));
                }
            }
            _ => {}
        }
    }

    /// Sends a repair request for `slot`'s missing fragments to rank `to`.
    pub(crate) fn request(
        &mut self,
        comm: CommHandle,
        slot: usize,
        to: Rank,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let Some(first) = op.bits.missing().next() else { return };
        // As many fragments as one datagram's bitmap can name; the next request continues.
        let fit = ((self.cfg.mtu - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - 8) * 8) as u32;
        let n = (op.geo.count() - first).min(MAX_RETRANSMIT_FRAGS).min(fit);
        let mut bitmap = [0u8; (MAX_RETRANSMIT_FRAGS / 8) as usize];
        let nbytes = n.div_ceil(8) as usize;
        op.bits.write_missing(first, n, &mut bitmap[..nbytes]);
        op.counters.retransmits += 1;
        // Whatever triggered it (timer, have-all), the next request waits a full back-off: the
        // answer to this one is on its way.
        op.nack_at = now + op.backoff;
        let bid = op.bid;
        let body = RetransmitBody { first_frag: U32::new(first), nfrags: U32::new(n) };
        let h = header(c, FrameKind::RETRANSMIT_REQUEST, bid, 0);
        let peer = c.spec.members[to as usize];
        send(
            &mut self.scratch,
            &c.seal,
            &mut self.counters,
            env,
            peer,
            &h,
            &[body.as_bytes(), &bitmap[..nbytes]],
        );
    }
}
