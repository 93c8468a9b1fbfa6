//! The broadcast's data path on the reliable-transfer layer: a post, the root's load from host
//! memory and its multicast (after the root delay), fragments arriving and forwarded along the
//! algorithm's routes, and the message stored into host memory in parts as the MAC covers it.
//! A receiver completes once the whole message is authentic and stored.
use crate::comm::{children, parent, PeerId, Rank, Topology};
use crate::config::RootDelay;
use crate::intake::regions::Resolved;
use crate::ledger::Side;
use crate::schedule::bcast::{self as algo, Algorithm, Hop, Phase, Shape};
use crate::transfer::bitmap::{FragBitmap, Geometry, MAX_FRAGS};
use crate::transfer::env::{
    is_in_step_op, CommHandle, Dest, DmaDir, DmaJob, DmaToken, Env, OpCounters, Outcome, Post, PostError,
};
use crate::transfer::mac::{advance_mac, advance_mac_placed, root_mac_through};
use crate::transfer::protocol::{Protocol, MAX_CHILDREN};
use crate::transfer::seal::{header, send, send_fragment, send_repair, HOPS_MASK, PHASE_SHIFT};
use crate::transfer::state::{
    fail, give_back, locate, open_slot, postable, rendezvous, window_of, Early, Located, Op, State,
};
use crate::transfer::when::When;
use crate::Nanos;
use ringcast_abi::frame::{DropReason, Frame};
use ringcast_abi::wire::{FrameKind, READY_FLAG_HAVE_ALL, READY_FLAG_READY};
use ringcast_abi::StatusKind;

/// How long a root waits for the picked rank's "ready" before it multicasts anyway.
pub(crate) const READY_WAIT_MAX: Nanos = 10_000_000;

/// Steps of its send order a root takes per pass of its driver ([`Protocol::send_batch`]): a
/// step is one frame for multicast, binomial and linear (a fragment to the group or to one
/// child), one fragment to every lane for the pipelined trees. A broadcast of up to 32 steps
/// (a 2-rank broadcast of up to 128 KiB on `shm`) goes in one step of the engine, as before
/// batches; a longer one starts leaving after its first 32. (16 measured the same at 1 MiB on
/// 2 nodes, and split a 64 KiB message — 17 fragments on `shm` — over two passes of its
/// driver, which 8 engines on 2 cores can separate by a scheduling quantum.)
pub(crate) const ROOT_BATCH: u32 = 32;

/// Actions ([`Env::backlog`]: frames, mostly) a driver may hold queued before a root seals
/// its next batch: two batches' worth.
pub(crate) const ROOT_BACKLOG: usize = 2 * ROOT_BATCH as usize;

impl Protocol {
    /// Posts this rank's part of the next broadcast on `post.comm`: `post.len` bytes at
    /// `post.buf` (read at the root, written elsewhere), completed through
    /// `env.complete(post.token, ..)`.
    pub fn post_bcast(&mut self, post: Post, now: Nanos, env: &mut impl Env) -> Result<(), PostError> {
        let r = self.post(post, now, env);
        // Whichever way it went (started, waiting for a channel, refused), the communicator's
        // timers may have changed.
        self.rearm(post.comm);
        r
    }

    fn post(&mut self, post: Post, now: Nanos, env: &mut impl Env) -> Result<(), PostError> {
        let Post { comm, root, rank_root, slot: call_slot, buf, len, token, context, window } = post;
        let window = window_of(window, self.cfg.channels);
        let refuse = |s| Err(PostError::Refused(s));
        let (payload, max_message, channels) = (self.cfg.payload, self.cfg.max_message, self.cfg.channels);
        let c = postable(&mut self.comms, comm.0)?;
        if root >= c.spec.size() {
            return refuse(StatusKind::BadRoot);
        }
        if len > max_message {
            return refuse(StatusKind::BadLength);
        }
        let Ok(geo) = Geometry::new(len, payload) else { return refuse(StatusKind::BadLength) };
        let bid = c.next_bid;
        // Broadcast ids run out (2³² per communicator) at the last whole epoch: every rank
        // refuses the same post, as a barrier there does (`transfer/barrier.rs`), so no id —
        // the message MAC's identity — ever names two messages, and the window arithmetic
        // (`epoch · channels`) never wraps.
        if (bid / channels).checked_add(1).and_then(|e| e.checked_mul(channels)).is_none() {
            return refuse(StatusKind::BadDescriptor);
        }
        let slot = (bid % channels) as usize;
        // Its channel held — or its epoch not the synchronizing one: a barrier that cut an
        // epoch at its first id leaves every channel free, and a rank behind (its next id still
        // in that epoch) would drop the frames of a later one as out of its window. An id of
        // epoch `done` is within the window of every rank: each posted up to `done · channels`
        // before the `DOWN` that made it `done`.
        let ahead = bid / channels > c.sync.done;
        if c.ops.get(slot).is_some_and(Option::is_some) || ahead {
            if c.blocked_since.is_none() {
                c.blocked_since = When::at(now);
                c.sync_heard = now;
                c.probe_at.get_or_insert(now + self.cfg.repair_timeout);
            }
            return Err(PostError::WouldBlock);
        }
        c.blocked_since = When::NONE;
        // A channel's first broadcast makes its bitmaps, sized for `max_message_bytes`; the
        // synchronization gives them back for the next.
        let (mut bits, mut relayed) = match c.spare_bits.pop() {
            Some(pair) => pair,
            None => {
                let max = Geometry::new(self.cfg.max_message, payload).map_or(MAX_FRAGS, |g| g.count());
                let Ok(b) = FragBitmap::with_capacity(max) else { return refuse(StatusKind::BadLength) };
                (b, None)
            }
        };
        // NOTE(unwrap-free): Geometry::new bounded the count by MAX_FRAGS, as FragBitmap needs.
        if bits.reset(geo.count()).is_err() || relayed.as_mut().is_some_and(|r| r.reset(geo.count()).is_err())
        {
            give_back(c.spare_bits.vec(), (bits, relayed));
            return refuse(StatusKind::BadLength);
        }
        let size = c.spec.size();
        let failed_over = c.failover_from.is_some_and(|b| bid >= b.get());
        let layout = c.spec.layout;
        let alg = self.choose(size, len, &layout, !failed_over);
        let shape = Shape { size, root, layout, count: geo.count() };
        // No repair request before the broadcast is overdue: twice what the cost model predicts
        // for it (a large scatter-allgather may leave a rank without a fragment for milliseconds
        // with nothing lost), and never sooner than the repair timeout.
        let predicted = self.cfg.selector.predict(alg, size, len as u64, &layout);
        let patience =
            self.cfg.repair_timeout.max((2.0 * predicted).min(self.cfg.peer_timeout as f64 / 4.0) as Nanos);
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else {
            return refuse(StatusKind::UnknownCommunicator);
        };
        open_slot(c, slot);
        let chan = &mut c.channels[slot];
        if chan.len() < len as usize {
            // Grows once to the largest message seen; never shrinks (no allocation later).
            chan.resize(len as usize, 0);
        }
        c.next_bid += 1;
        // Readies of earlier broadcasts are of no use any more; this one's the root's delay
        // reads (when its message is loaded).
        if !c.ready_seen.is_empty() {
            c.ready_seen.vec().retain(|&b| b >= bid);
        }
        let me = c.spec.my_rank;
        let mut op = Op {
            bid,
            root,
            rank_root,
            call_slot,
            token,
            buf,
            geo,
            bits,
            relayed,
            alg,
            window,
            shape,
            selective: alg.uses_multicast() && len >= self.cfg.selective_bytes,
            state: State::Receiving,
            digest: None,
            mac: None,
            payload_mac: self.cfg.auth.payload_mac(),
            context,
            own_ok: None,
            unverified: me != root && buf.is_none() && is_in_step_op(context),
            hashed: 0,
            prefix: 0,
            stored: 0,
            stores_out: 0,
            store_failed: false,
            direct: None,
            summed: false,
            counters: OpCounters::default(),
            hops: 0,
            posted: now,
            heard: now,
            nack_at: now + patience,
            patience,
            backoff: self.cfg.repair_timeout,
            fruitless: 0,
        };
        if me == root {
            // Fragments others forwarded for this broadcast are of no use to its root.
            for e in c.early.iter_mut().filter(|e| e.used && e.bid == bid) {
                e.used = false;
            }
            op.state = State::Loading;
            c.ops[slot] = Some(op);
            let token = DmaToken { comm, generation: c.generation, slot: slot as u32, bid, off: 0, len };
            // No memory: the load fails where it is made, as if its job had failed.
            let Some(buf) = buf else {
                self.loaded(token, false, now, env);
                return Ok(());
            };
            // Answered later (`Protocol::dma_done`): the root stays `Loading` until then.
            env.dma(DmaJob { token, dir: DmaDir::Load, buf, len: u64::from(len) });
            return Ok(());
        } else {
            // The picked rank answers wherever a root could be waiting: it does not know how
            // many calls the root has in flight (its `window`), so it assumes the most, the
            // channels — a `READY` the root does not wait for is harmless.
            let picks = matches!(self.cfg.root_delay, RootDelay::Random | RootDelay::Adaptive)
                || rendezvous(alg, size, geo.count(), self.cfg.slots, channels);
            if picks && picked_rank(c.spec.seed, bid, root, size) == me {
                let h = header(c, FrameKind::READY, bid, READY_FLAG_READY);
                let to = c.spec.members[root as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            }
            c.ops[slot] = Some(op);
            // Fragments that arrived before this post, out of the pre-posted slots.
            let mut buf = self.early_buf.take();
            while let Some(e) = self
                .comms
                .get_mut(comm.0 as usize)
                .and_then(Option::as_mut)
                .and_then(|c| c.early.iter_mut().find(|e| e.used && e.bid == bid))
            {
                e.used = false;
                let (from, len) = (e.from, e.len);
                if buf.len() < len {
                    buf.resize(len, 0); // grows once, up to the MTU
                }
                buf[..len].copy_from_slice(&e.frame[..len]);
                self.counters.ledger.copied(Side::Receive, len as u64);
                self.on_frame(from, &buf[..len], now, env);
            }
            self.early_buf.restore(buf);
        }
        self.maybe_sync_up(comm, now, env);
        Ok(())
    }

    /// The root's message is in its channel (`ok`), or could not be read.
    pub(crate) fn loaded(&mut self, t: DmaToken, ok: bool, now: Nanos, env: &mut impl Env) {
        let (comm, slot, bid) = (t.comm, t.slot as usize, t.bid);
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let len = op.geo.total;
        if !ok {
            // The id is taken (every rank counts posts): abort the broadcast so the others
            // learn it on their first repair request instead of waiting for data.
            op.state = State::Aborted;
            env.complete(op.token, fail(StatusKind::OutOfBounds, op.counters));
            self.maybe_sync_up(comm, now, env);
            return;
        }
        // The MAC is computed as the fragments first leave (`root_mac_through`), so the first
        // ones leave before the last byte is hashed.
        op.bits.fill();
        // The driver's DMA moved the message into the channel: one copy, the root's load.
        self.counters.ledger.copied(Side::Send, u64::from(len));
        self.counters.ledger.delivered(Side::Send, u64::from(len));
        // Yu et al.: the root's request is complete once the message is in its channel.
        env.complete(op.token, Outcome { status: StatusKind::Ok, bytes: len as u64, counters: op.counters });
        let ready =
            c.ready_seen.iter().position(|&b| b == bid).map(|i| c.ready_seen.vec().swap_remove(i)).is_some();
        let size = c.spec.size();
        // Waiting for the picked rank's ready: at once if it came first.
        let until_ready = |wait: Nanos| State::RootDelay { at: if ready { now } else { now + wait }, ready };
        op.state = match self.cfg.root_delay {
            // Larger than the pre-posted slots: a rendezvous, whatever the mode (see
            // `rendezvous`), waited for as long as a peer may stay silent: a root running
            // `channels` broadcasts ahead of a busy receiver waits that long for its ready. Any
            // shorter cap sends into unposted slots on a loop of broadcasts as soon as `channels`
            // of them take longer than it (measured, 2 nodes: capped at 500 µs, 64 KiB took
            // 126 µs instead of 86 µs; capped at 10 ms, 1 MiB dropped a quarter of its
            // fragments). Receivers that posted never wait on it: their repair requests, from
            // `patience` on, are answered whatever the root's delay.
            _ if size > 1 && rendezvous(op.alg, size, op.geo.count(), self.cfg.slots, op.window) => {
                until_ready(self.cfg.peer_timeout)
            }
            RootDelay::None => State::RootDelay { at: now, ready: true },
            RootDelay::Fixed(us) => State::RootDelay { at: now + us as Nanos * 1000, ready: true },
            RootDelay::Adaptive => {
                let d = (c.lag_ewma * c.lag_factor as Nanos / 4).min(self.cfg.root_delay_max);
                State::RootDelay { at: now + d, ready: true }
            }
            RootDelay::Random if size > 1 => until_ready(READY_WAIT_MAX),
            RootDelay::Random => State::RootDelay { at: now, ready: true },
        };
        self.advance_root(comm, slot, now, env);
        self.maybe_sync_up(comm, now, env);
    }

    /// A part of a receiver's message is in its host buffer (`ok`), or could not be written.
    pub(crate) fn stored(&mut self, t: DmaToken, ok: bool, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(t.comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(t.slot as usize).and_then(Option::as_mut) else { return };
        op.stores_out = op.stores_out.saturating_sub(1);
        op.store_failed |= !ok;
        if ok {
            self.counters.ledger.copied(Side::Receive, u64::from(t.len));
        }
        self.delivered(t.comm, t.slot as usize, env);
    }

    /// Completes a receiver's broadcast once it is authentic (`Storing`) and every part of it
    /// has been stored: the completion follows the bytes it reports.
    fn delivered(&mut self, comm: CommHandle, slot: usize, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        if op.state != State::Storing || op.stores_out > 0 {
            return;
        }
        // Stored or not (its host memory failed, or its call runs in step at this rank: the host
        // is told), the message is here whole — and authentic, but for an in-step call's
        // receive under its in-step operation, which relays it unchecked (`Op::unverified`) — so this rank serves
        // it and acks it in the synchronization: a local memory fault is no NACK, and the
        // communicator stays usable, as for a root's aborted load.
        op.state = State::Done;
        let len = op.geo.total;
        // (A message relayed unchecked never completes `Ok`, whatever the driver did with its
        // stores: `Op::unverified`.)
        let outcome = match op.store_failed || op.unverified {
            true => fail(StatusKind::OutOfBounds, op.counters),
            false => Outcome { status: StatusKind::Ok, bytes: len as u64, counters: op.counters },
        };
        if outcome.status == StatusKind::Ok {
            self.counters.ledger.delivered(Side::Receive, u64::from(len));
        }
        env.complete(op.token, outcome);
        if op.selective {
            let (bid, root) = (op.bid, op.root);
            let mut kids = [0; MAX_CHILDREN];
            let n = children(Topology::Ring, c.spec.size(), root, c.spec.my_rank, &mut kids);
            let h = header(c, FrameKind::READY, bid, READY_FLAG_HAVE_ALL);
            for &k in &kids[..n] {
                let to = c.spec.members[k as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            }
        }
    }

    /// Starts the root's transmission once its delay is over.
    pub(crate) fn advance_root(&mut self, comm: CommHandle, slot: usize, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let State::RootDelay { at, .. } = op.state else { return };
        if now < at {
            return;
        }
        op.state = State::Sending { next: 0, at: now };
        self.send_batch(comm, slot, now, env);
    }

    /// Sends the root's next batch: at most [`ROOT_BATCH`] steps of the algorithm's order
    /// (multicast: the fragments to the group, then — without selective repair — each one
    /// forwarded; binomial and linear: child by child, every fragment to each; the pipelined
    /// trees: fragment by fragment to every lane). The timer table brings it back for the next
    /// batch on the driver's next pass, and not while more than [`ROOT_BACKLOG`] actions wait
    /// in the driver's queue: the first fragments are on their way — and the receivers at work
    /// on them — while the root still seals the rest, where a 1 MiB message's 257 frames were
    /// all sealed (MAC, CRC, copy) before the first one left.
    pub(crate) fn send_batch(&mut self, comm: CommHandle, slot: usize, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let State::Sending { next, .. } = op.state else { return };
        if env.backlog() > ROOT_BACKLOG {
            op.state = State::Sending { next, at: now };
            return;
        }
        let (bid, count, alg, shape, selective) = (op.bid, op.geo.count(), op.alg, op.shape, op.selective);
        let me = c.spec.my_rank;
        let (scratch, counters, hops) = (&mut self.scratch, &mut self.counters, self.hops.vec());
        hops.clear();
        if matches!(alg, Algorithm::Binomial | Algorithm::Linear) {
            // Child by child, largest subtree first: the textbook order, which starts the
            // deepest subtree earliest (its routing does not depend on the fragment).
            algo::forward(alg, &shape, me, 0, Phase::Scatter, true, &mut |hop: Hop| hops.push(hop));
        }
        let multicast = if alg == Algorithm::Multicast { count } else { 0 };
        let total = match alg {
            Algorithm::Binomial | Algorithm::Linear => count.saturating_mul(hops.len() as u32),
            Algorithm::Multicast if selective => count,
            Algorithm::Multicast => count.saturating_mul(2),
            _ => count,
        };
        let end = next.saturating_add(ROOT_BATCH).min(total);
        for i in next..end {
            let seq = if i < multicast { i } else { (i - multicast) % count.max(1) };
            if let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) {
                let fed = root_mac_through(op, &c.channels[slot], seq, &c.seal.keys, &mut c.spare_macs);
                counters.ledger.hashed(Side::Send, fed);
            }
            if i < multicast {
                let group = Dest::Group(&c.spec.group);
                send_fragment(scratch, counters, env, c, slot, seq, FrameKind::DATA_MULTICAST, 0, group);
                counters.multicast += 1;
            } else if let Some(&hop) = hops.get((i / count.max(1)) as usize) {
                send_repair(scratch, counters, env, c, slot, seq, hop, 1);
            } else {
                // Fragment by fragment: the pipeline starts at once on every lane and tree.
                algo::forward(alg, &shape, me, seq, Phase::Scatter, true, &mut |hop: Hop| {
                    send_repair(scratch, counters, env, c, slot, seq, hop, 1)
                });
            }
        }
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        if end < total {
            op.state = State::Sending { next: end, at: now };
            return;
        }
        op.state = State::Done;
        if alg == Algorithm::Multicast && selective {
            // Selective ring repair: the successor asks for what the multicast missed.
            let mut kids = [0; MAX_CHILDREN];
            let n = children(Topology::Ring, c.spec.size(), me, me, &mut kids);
            for &k in &kids[..n] {
                let to = c.spec.members[k as usize];
                let h = header(c, FrameKind::READY, bid, READY_FLAG_HAVE_ALL);
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            }
        }
        self.maybe_sync_up(comm, now, env);
    }

    pub(crate) fn on_data(
        &mut self,
        comm: CommHandle,
        from: PeerId,
        bytes: &[u8],
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let h = frame.header();
        let bid = h.bid.get();
        let slot = match locate(c, bid, self.cfg.channels) {
            Located::Slot(s) => s,
            Located::Future => {
                // A broadcast not posted here yet: keep the fragment if a pre-posted slot is free.
                if c.early.is_empty() {
                    // The slots, all at once the first time one is needed (never more).
                    let early = c.early.vec();
                    early.reserve_exact(self.cfg.slots);
                    early.resize_with(self.cfg.slots, Early::free);
                }
                match c.early.iter_mut().find(|e| !e.used) {
                    Some(e) if bytes.len() <= self.cfg.mtu => {
                        if e.frame.len() < bytes.len() {
                            e.frame.resize(bytes.len(), 0); // once per slot, up to the MTU
                        }
                        e.frame[..bytes.len()].copy_from_slice(bytes);
                        self.counters.ledger.copied(Side::Receive, bytes.len() as u64);
                        *e = Early {
                            used: true,
                            bid,
                            from,
                            len: bytes.len(),
                            frame: core::mem::take(&mut e.frame),
                        };
                    }
                    // Left where its fabric holds it, offered again after the next post here.
                    None if bytes.len() <= self.cfg.mtu && env.keep_back() => {}
                    _ => self.counters.dropped(DropReason::NoSlot),
                }
                return;
            }
            Located::Stale => return self.drop_frame(DropReason::BidOutOfWindow),
        };
        let flags = h.flags.get();
        let (hops, phase) = if h.kind == FrameKind::DATA_MULTICAST {
            (0, Phase::Tree)
        } else {
            (flags & HOPS_MASK, Phase::from_bits(flags >> PHASE_SHIFT))
        };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let seq = h.frag_seq.get();
        if op.state != State::Receiving || op.bits.get(seq) {
            op.counters.duplicates += 1;
            if phase == Phase::Allgather && op.bits.get(seq) && op.state != State::Failed && op.relay(seq) {
                // Scatter–allgather: this rank held the fragment (it passed here in the scatter,
                // came by repair, or this is the root) but the allgather still runs through it —
                // once: a second allgather copy (a duplicated datagram) is not relayed again.
                let (alg, shape, me) = (op.alg, op.shape, c.spec.my_rank);
                let (scratch, counters) = (&mut self.scratch, &mut self.counters);
                algo::forward(alg, &shape, me, seq, phase, false, &mut |hop: Hop| {
                    send_repair(scratch, counters, env, c, slot, seq, hop, hops.saturating_add(1))
                });
            }
            return;
        }
        if h.total_len.get() != op.geo.total {
            op.state = State::Failed;
            env.complete(op.token, fail(StatusKind::LengthMismatch, op.counters));
            return;
        }
        let last = op.geo.count() - 1;
        let Some((off, len)) = op.geo.range(seq) else { return self.drop_frame(DropReason::BadFragment) };
        if h.frag_count.get() != op.geo.count() || frame.payload().len() != len as usize {
            return self.drop_frame(DropReason::BadFragment);
        }
        op.heard = now;
        if !op.bits.set(seq) {
            op.counters.duplicates += 1;
            return;
        }
        if seq == last {
            op.digest = frame.digest();
        }
        let me = c.spec.my_rank;
        if op.direct.is_none() {
            op.direct = Some(places_directly(op, me, env));
        }
        if op.direct == Some(true) {
            // The payload from where the fabric holds it straight into the host buffer: the
            // one copy of a receiver's bytes (a NIC's receive scatter).
            let at = op.buf.map(|b| Resolved { offset: b.offset + u64::from(off), ..b });
            let placed = at.is_some_and(|at| env.place(at, frame.payload()));
            op.store_failed |= !placed;
            if placed {
                self.counters.ledger.copied(Side::Receive, u64::from(len));
            }
            // The MAC hashes the delivered bytes where they now lie, in the same aligned
            // batches as from a channel.
            let fed = advance_mac_placed(op, env, false, &c.seal.keys, &mut c.spare_macs);
            self.counters.ledger.hashed(Side::Receive, fed);
        } else {
            c.channels[slot][off as usize..(off + len) as usize].copy_from_slice(frame.payload());
            self.counters.ledger.copied(Side::Receive, u64::from(len));
            let fed = advance_mac(op, &c.channels[slot], false, &c.seal.keys, &mut c.spare_macs);
            self.counters.ledger.hashed(Side::Receive, fed);
            if op.hashed >= op.stored + STORE_PART && !op.bits.is_complete() {
                // (Complete: `finish` stores the rest in one part.)
                store_part((comm, c.generation), slot, op, &c.channels[slot], env);
            }
        }
        if hops == 0 {
            op.counters.frags_multicast += 1;
            c.epoch_mcast += 1;
        } else {
            op.counters.frags_repair += 1;
            op.counters.penalty_rounds = op.counters.penalty_rounds.max(hops as u32);
        }
        c.epoch_total += 1;
        op.hops = op.hops.max(hops);
        // Progress: the repair clock restarts.
        op.fruitless = 0;
        op.backoff = self.cfg.repair_timeout;
        op.nack_at = (now + self.cfg.repair_timeout).max(op.posted + op.patience);
        if phase == Phase::Allgather {
            // Relayed below: a duplicate of this copy must not be.
            op.relay(seq);
        }
        let (alg, shape, selective) = (op.alg, op.shape, op.selective);
        if !selective {
            let fwd_hops = hops.saturating_add(1);
            let me = c.spec.my_rank;
            let (scratch, counters) = (&mut self.scratch, &mut self.counters);
            algo::forward(alg, &shape, me, seq, phase, true, &mut |hop: Hop| {
                send_repair(scratch, counters, env, c, slot, seq, hop, fwd_hops)
            });
        }
        let Some(op) = c.ops.get(slot).and_then(Option::as_ref) else { return };
        if op.bits.is_complete() {
            self.finish(comm, slot, now, env);
        } else if selective && hops == 0 && seq == last {
            // The multicast is over and fragments are missing: every header carries the count, so
            // this rank knows exactly what it lacks — ask the repair source now, no timer (its
            // have-all, once it completes, is the backstop).
            if let Some(src) = parent(Topology::Ring, shape.size, shape.root, c.spec.my_rank) {
                self.request(comm, slot, src, now, env);
            }
        }
    }

    /// All fragments are here: check the digest, deliver, tell the children (selective mode).
    pub(crate) fn finish(&mut self, comm: CommHandle, slot: usize, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { return };
        let fed = if op.direct == Some(true) {
            advance_mac_placed(op, env, true, &c.seal.keys, &mut c.spare_macs)
        } else {
            advance_mac(op, &c.channels[slot], true, &c.seal.keys, &mut c.spare_macs)
        };
        self.counters.ledger.hashed(Side::Receive, fed);
        // A receiver placing into host memory that went away (deregistered, its process gone)
        // has nothing to check the MAC over: like a failed store, it completes `OutOfBounds`
        // (`delivered`) and acks — it serves nobody, so no rank gets bytes it did not verify.
        let vanished = op.direct == Some(true) && op.store_failed;
        // A receive of a call in step for its operation (`Op::unverified`) runs under an
        // in-step context the root's MAC does not have: it delivers nothing — it has no
        // memory, every store fails — so it only relays, and whoever stores the
        // message checks the MAC itself. Checked, it would fail `DigestMismatch` and NACK its
        // epoch, breaking the communicator for the others.
        let authentic = op.unverified || op.own_ok == Some(true);
        if !vanished && (op.hashed != op.geo.total || !authentic) {
            op.state = State::Failed;
            env.complete(op.token, fail(StatusKind::DigestMismatch, op.counters));
            return;
        }
        // The rest of the message after the parts stored while it arrived: the bytes past the
        // MAC's last batch (more only where a gap held the MAC back until the end).
        op.state = State::Storing;
        store_part((comm, c.generation), slot, op, &c.channels[slot], env);
        self.delivered(comm, slot, env);
        // Stores still out: the last answer syncs up (`Protocol::dma_done`).
        if self.comm(comm).and_then(|c| c.ops.get(slot).and_then(Option::as_ref)).is_some_and(Op::over) {
            self.maybe_sync_up(comm, now, env);
        }
    }
}

/// A receiver stores its message into the host buffer in parts of at least this many bytes,
/// each as soon as the MAC covers it, instead of in one job after the last fragment: for a
/// 1 MiB message that job was a 1 MiB copy out of a cache-warm channel after the last byte had
/// arrived (2-node 1 MiB broadcasts 2–3 % faster without it, docs/performance.md), now it is
/// the tail past the MAC's last batch. One [`crate::transfer::mac`] batch: parts follow the
/// MAC's progress.
const STORE_PART: u32 = 64 << 10;

/// Whether receiver `me` of `op` writes its payload straight into its host buffer
/// ([`Op::direct`]): the driver reaches the buffer at once ([`Env::reaches`]), the buffer is
/// the call's own (not a call's in-step operation, whose bytes are relayed unchecked), and no
/// rank will ever ask this one for a fragment — it forwards nothing and is nobody's repair
/// source: a leaf of the binomial or linear tree, the multicast ring's last rank (the root's
/// predecessor). A rank that serves others keeps the channel copy, which outlives the host's
/// buffer (repairs asked after this rank completed, forwarding in the trees). Decided once per
/// broadcast, at its first fragment; fragments replayed from the pre-posted slots at the post
/// are handled the same way.
pub(crate) fn places_directly(op: &Op, me: Rank, env: &impl Env) -> bool {
    let leaf =
        matches!(op.alg, Algorithm::Multicast | Algorithm::Chain | Algorithm::Binomial | Algorithm::Linear)
            && algo::forward(op.alg, &op.shape, me, 0, Phase::Tree, true, &mut |_| {}) == 0;
    leaf && me != op.root && !op.unverified && op.buf.is_some_and(|b| env.reaches(b))
}

/// Hands the host-memory driver `op`'s bytes from `op.stored` up to `op.hashed` (everything
/// the MAC has covered and no job carries yet; the whole rest once the message is
/// authentic), as one store job it answers later (`Protocol::stored`, which counts the bytes
/// in the ledger). Bytes may reach the host buffer before the message is verified — as a
/// NIC's receive DMA does; the broadcast completes (`Protocol::delivered`) only once it is
/// verified and every part is stored, and a message that fails verification completes with
/// an error, never `Ok`.
fn store_part(
    (comm, generation): (CommHandle, u32),
    slot: usize,
    op: &mut Op,
    channel: &[u8],
    env: &mut impl Env,
) {
    if op.direct == Some(true) {
        return; // every fragment was placed as it arrived
    }
    let upto = if op.state == State::Storing { op.geo.total } else { op.hashed };
    let (off, len) = (op.stored, upto.saturating_sub(op.stored));
    if len == 0 || channel.len() < upto as usize {
        return;
    }
    let token = DmaToken { comm, generation, slot: slot as u32, bid: op.bid, off, len };
    op.stored = upto;
    // No memory: the store fails where it is made, as if its job had failed.
    let Some(b) = op.buf else {
        op.store_failed = true;
        return;
    };
    let buf = Resolved { offset: b.offset + u64::from(off), ..b };
    op.stores_out += 1;
    env.dma(DmaJob { token, dir: DmaDir::Store, buf, len: u64::from(len) });
}

/// The rank whose "ready" the root waits for in broadcast `bid` (randomized single-process
/// synchronization): drawn from the communicator's seed, never the root.
pub(crate) fn picked_rank(seed: u64, bid: u32, root: Rank, size: u32) -> Rank {
    // SplitMix64's output for the state `seed ^ bid · φ`: every member computes the same pick
    // without communication. (The generator adds φ before it mixes: started one step back, its
    // first draw mixes that state itself, the pick every engine has made since the protocol
    // began.)
    use rand_core::{RngCore, SeedableRng};
    const PHI: u64 = 0x9e37_79b9_7f4a_7c15;
    let state = seed ^ u64::from(bid).wrapping_mul(PHI);
    let z = rand_xoshiro::SplitMix64::seed_from_u64(state.wrapping_sub(PHI)).next_u64();
    let k = (z % (size.max(2) as u64 - 1)) as u32 + 1;
    (root + k) % size.max(1)
}

#[cfg(test)]
mod tests {
    use super::picked_rank;
    use crate::comm::auth::Secret;
    use crate::comm::{CommSpec, GroupId, Layout, PeerId};
    use crate::config::EngineConfig;
    use crate::intake::regions::{Resolved, SegmentHandle};
    use crate::transfer::env::{DmaJob, Env, Outcome, Post, PostError};
    use crate::transfer::protocol::Protocol;
    use ringcast_abi::StatusKind;

    struct Quiet;
    impl Env for Quiet {
        fn send(&mut self, _: PeerId, _: &[u8]) {}
        fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
        fn dma(&mut self, _: DmaJob) {}
        fn complete(&mut self, _: u64, _: Outcome) {}
    }

    /// The last ids of a communicator: a broadcast whose epoch would end past 2³² is refused
    /// (the id would repeat — the MAC's identity — and the window's `epoch · channels` wrap);
    /// the ids before it post, the last one included.
    #[test]
    fn a_post_past_the_last_whole_epoch_of_ids_is_refused() {
        let config = EngineConfig::default();
        let mut p = Protocol::new(&config, crc32c::crc32c);
        let channels = p.cfg.channels;
        let spec = CommSpec {
            cookie: 0x77,
            group: [0x77; 14],
            members: (0..2).map(PeerId).collect(),
            my_rank: 0,
            seed: 1,
            layout: Layout::FLAT,
            key: Secret([0x77; 32]),
        };
        let comm = p.create_comm(spec).unwrap();
        let last_epoch = u32::MAX / channels - 1; // the last epoch whose end fits in a u32
        let c = p.comms[0].as_mut().unwrap();
        c.next_bid = last_epoch * channels + channels - 1;
        c.sync.done = last_epoch;
        let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
        p.post_bcast(Post::plain(comm, 0, buf, 8, 1), 0, &mut Quiet).expect("the epoch's last id posts");
        assert_eq!(p.comms[0].as_ref().unwrap().next_bid, (last_epoch + 1) * channels);
        let c = p.comms[0].as_mut().unwrap();
        c.sync.done = last_epoch + 1;
        c.ops.iter_mut().for_each(|o| *o = None);
        assert_eq!(
            p.post_bcast(Post::plain(comm, 0, buf, 8, 2), 0, &mut Quiet),
            Err(PostError::Refused(StatusKind::BadDescriptor)),
            "past the last whole epoch"
        );
    }

    /// The pick is the one every engine made before it came from `rand_xoshiro`: the mix of
    /// `seed ^ bid · φ` (engines of two versions pick alike), never the root.
    #[test]
    fn the_picked_rank_is_splitmix64s_mix_of_seed_and_broadcast() {
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for (seed, bid, root, size) in [(0u64, 0u32, 0u32, 2u32), (7, 3, 1, 5), (u64::MAX, 99, 4, 9)] {
            let z = mix(seed ^ u64::from(bid).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let want = (root + (z % (u64::from(size) - 1)) as u32 + 1) % size;
            assert_eq!(picked_rank(seed, bid, root, size), want);
            assert_ne!(picked_rank(seed, bid, root, size), root);
        }
    }
}
