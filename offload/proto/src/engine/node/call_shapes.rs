//! The calls a communicator's local members made, and how an engine learns what a call was
//! when its own processes' descriptors cannot say (docs/protocol.md, "A call in step at one
//! rank").
//!
//! Every rank of a communicator makes the same collectives in the same order, so the `k`-th
//! call of each of them is the same call. A call wrong at its rank in a field its schedule
//! does not read, or in its memory, runs *in step* there on no memory, and the other
//! ranks fail typed. A descriptor whose *shape* — a length, element type, root or flag the
//! schedule is made of — this rank cannot read leaves nothing to run; before, it posted
//! nothing, and the other ranks waited for its parts (forever, if it made no further call) and
//! then paired its later calls with theirs one behind. Now the engine counts it as call `k`
//! all the same (a call *awaiting its shape*), holds its process's later descriptors on the communicator
//! (`engine/participation/shape.rs`), and finds out what call `k` was:
//! * from a node-mate that made call `k` (its shape is kept here for the last [`HISTORY`]
//!   calls);
//! * else from the other engines, in `CALL_SHAPE` frames ([`crate::transfer::call_shape`]).
//!   The communicator's rank-0 engine, its *manager*, asks every engine; the others ask the
//!   manager only, so a call every rank awaits costs `O(E)` frames, not `O(E²)`. An engine
//!   answers with the shape of call `k` as one of its processes made it (`SHAPE_KNOWN`);
//!   `SHAPE_AWAITING` — from an engine, when all its processes await it, from the manager,
//!   when every engine said so; or `SHAPE_PENDING` (alive, not there yet — the query is kept
//!   and answered once it is). Queries are repeated from `repair_timeout_us`, doubling up to
//!   `peer_timeout_ms / 64` (as the synchronization probes a neighbour), while the call waits.
//!
//! With the shape known, the engine runs the call awaiting its shape in step (its own status,
//! no memory anywhere: `engine/participation/`), so the others end typed and in step. When every
//! rank awaits call `k`'s shape, nothing runs anywhere and each ends with its own status. When no
//! engine answers for `peer_timeout_ms` — an engine silent that long is unreachable, by the
//! protocol's own rule — the call ends with its status and the communicator breaks here
//! (`engine/participation/shape.rs`): its node-mates' call `k` and every later call on it fail
//! `CommunicatorBroken` at once, and the other engines learn within the peer timeout. The
//! manager says so when it gives up (`SHAPE_SILENT`), so the engines that asked it break alike;
//! an engine that hears nothing from the manager gives up alone. (Before, the call counted as
//! posting nothing, `Sequencer::posted_nothing`: every later call of its rank failed `DigestMismatch` — and a
//! node-mate that made call `k` with a readable shape posted its parts into sequencer slots the
//! process posting nothing never filled, so the node's calls waited for each other forever: DST seeds
//! 888000001933, 888000017220 and 777000017823, unicast loss 100 %.)
use crate::engine::action::Outbox;
use crate::engine::node::calls::{Entry, Resolution, Resolved, Shape, Waiting, MAX_ASKED};
use crate::engine::node::{Node, NodeEnv};
use crate::timer::TimerKey;
use crate::transfer::call_shape::ShapeIn;
use crate::transfer::env::CommHandle;
use crate::Nanos;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::frame::CallShapeBody;
use ringcast_abi::wire::{SHAPE_AWAITING, SHAPE_KNOWN, SHAPE_PENDING, SHAPE_QUERY, SHAPE_SILENT};
use ringcast_abi::Opcode;

impl Node {
    /// Engine-local rank `local` made a call on communicator `comm` whose shape it could read
    /// (`shape`), or that posted nothing and counts as posting nothing (`None`); returns its index.
    /// Queries waiting for it, and node-mates' calls awaiting their shape, get their answer.
    pub(crate) fn call_made(
        &mut self,
        local: u32,
        comm: u64,
        shape: Option<Shape>,
        out: &mut Outbox,
    ) -> Option<u64> {
        let slot = self.slot(comm)?;
        let c = self.comms[slot].as_mut()?;
        let index = c.index_of_local(local)?;
        let call = c.calls.count(index)?;
        if let Some(s) = shape {
            // A node-mate made call `k` another way: the node's part of it cannot be built, and
            // the others' calls would wait for it (`call_checks.rs`).
            let clash = c.calls.known(call).is_some_and(|mine| !super::call_checks::agree(&mine, &s));
            c.calls.record(call, Entry::Known(s));
            if c.calls.waits() {
                let handle = c.handle;
                c.calls.end(handle, call, Resolution::Known(s), &mut self.resolved);
                self.refresh_awaiting();
            }
            self.answer_asked(slot, call, out);
            if clash {
                self.disagree(slot, call, true, out);
            }
        }
        Some(call)
    }

    /// Engine-local rank `local` made a call on communicator `comm` whose shape it cannot read:
    /// returns its index, and finds out what the call was (see the module docs; the answer
    /// comes from [`Node::take_resolved_calls`]). `None`: not a member, or a communicator whose
    /// protocol side is gone — nothing to run it with.
    pub(crate) fn call_awaiting_shape(
        &mut self,
        local: u32,
        comm: u64,
        now: Nanos,
        out: &mut Outbox,
    ) -> Option<u64> {
        let slot = self.slot(comm)?;
        let c = self.comms[slot].as_mut()?;
        let proto = c.proto?;
        let index = c.index_of_local(local)?;
        let (engines, me) = self.proto.engines(proto)?;
        let c = self.comms[slot].as_mut()?;
        let call = c.calls.count(index)?;
        let handle = c.handle;
        let entry = c.calls.entry(call).copied();
        match entry {
            Some(Entry::Known(s)) => {
                self.resolved.push((handle, local, call, Resolution::Known(s)));
                return Some(call);
            }
            Some(Entry::Everywhere) => {
                self.resolved.push((handle, local, call, Resolution::Everywhere));
                return Some(call);
            }
            Some(Entry::Silent) => {
                self.resolved.push((handle, local, call, Resolution::Silent));
                return Some(call);
            }
            _ => {}
        }
        let manager = me == 0;
        c.calls.record(call, Entry::Awaiting);
        if let Some(w) = c.calls.waiting.iter_mut().find(|w| w.call == call) {
            // Asked already, for a node-mate.
            w.locals.push((index, local));
            self.answer_asked(slot, call, out);
            self.settle_awaiting(slot, now, out);
            self.refresh_awaiting();
            return Some(call);
        }
        let mut awaiting = vec![false; engines as usize];
        if let Some(v) = awaiting.get_mut(me as usize) {
            *v = true;
        }
        let c = self.comms[slot].as_mut()?;
        c.calls.waiting.push(Waiting {
            locals: vec![(index, local)],
            call,
            manager,
            awaiting,
            heard: now,
            next: now + self.shape_retry,
            backoff: self.shape_retry,
        });
        self.answer_asked(slot, call, out);
        self.settle_awaiting(slot, now, out);
        self.ask(slot, call, out);
        self.refresh_awaiting();
        Some(call)
    }

    /// Local member `index` of communicator `slot` left: the calls of its node-mates awaiting
    /// their shape no longer wait for it — this engine may now answer `SHAPE_AWAITING` for them, or, the manager,
    /// end them.
    pub(crate) fn member_left(&mut self, slot: usize, index: u32, now: Nanos, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_mut() else { return };
        c.calls.forget(index);
        let open: Vec<u64> =
            c.calls.history.iter().filter(|(_, e)| matches!(e, Entry::Awaiting)).map(|(k, _)| *k).collect();
        for call in open {
            self.answer_asked(slot, call, out);
        }
        self.settle_awaiting(slot, now, out);
        self.refresh_awaiting();
    }

    /// Communicator `slot`'s protocol side is gone (broken, or dropped): nothing will answer
    /// its calls awaiting their shape, which end as given up (`Resolution::Silent`).
    pub(crate) fn calls_dropped(&mut self, slot: usize) {
        let Some(c) = self.comms[slot].as_mut() else { return };
        let handle = c.handle;
        let calls: Vec<u64> = c.calls.waiting.iter().map(|w| w.call).collect();
        for call in calls {
            c.calls.end(handle, call, Resolution::Silent, &mut self.resolved);
        }
        self.refresh_awaiting();
    }

    /// Calls awaiting their shape that ended since the last call, moved into `out`.
    pub(crate) fn take_resolved_calls(&mut self, out: &mut Vec<Resolved>) {
        out.append(&mut self.resolved);
    }

    /// Sends call `call`'s query: the manager to every engine of communicator `slot` that has
    /// not answered `SHAPE_AWAITING`, another engine to the manager.
    fn ask(&mut self, slot: usize, call: u64, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_ref() else { return };
        let (Some(proto), Some(w)) = (c.proto, c.calls.waiting.iter().find(|w| w.call == call)) else {
            return;
        };
        let to: Vec<u32> = match w.manager {
            true => (0..w.awaiting.len() as u32).filter(|&r| !w.awaiting[r as usize]).collect(),
            false => vec![0],
        };
        for r in to {
            self.send_shape(proto, r, SHAPE_QUERY, call as u32, &CallShapeBody::default(), out);
        }
    }

    fn send_shape(
        &mut self,
        proto: CommHandle,
        to: u32,
        flags: u16,
        call: u32,
        shape: &CallShapeBody,
        out: &mut Outbox,
    ) {
        let Node { proto: p, finished, jobs, .. } = self;
        p.send_call_shape(
            proto,
            to,
            flags,
            call,
            shape,
            &mut NodeEnv { out, jobs, done: finished, port: None, keep: None },
        );
    }

    /// Answers the queries communicator `slot` kept for call `call`, if it is known now.
    fn answer_asked(&mut self, slot: usize, call: u64, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_mut() else { return };
        let Some(proto) = c.proto else { return };
        if c.calls.asked.is_empty() {
            return;
        }
        let manager = self.proto.engines(proto).is_some_and(|(_, me)| me == 0);
        let Some((flags, shape)) = c.calls.answer(call as u32, manager) else { return };
        let mut to = Vec::new();
        c.calls.asked.retain(|&(r, k)| {
            let hit = k == call as u32;
            if hit {
                to.push(r);
            }
            !hit
        });
        for r in to {
            self.send_shape(proto, r, flags, call as u32, &shape.body(), out);
        }
    }

    /// The manager ends communicator `slot`'s calls awaiting their shape at every local member and
    /// every engine — nothing runs for them anywhere — and tells the engines that asked.
    fn settle_awaiting(&mut self, slot: usize, now: Nanos, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_mut() else { return };
        let handle = c.handle;
        let calls = &c.calls;
        let ended: Vec<u64> = calls
            .waiting
            .iter()
            .filter(|w| w.manager && w.awaiting.iter().all(|&v| v) && calls.awaiting_here(w.call))
            .map(|w| w.call)
            .collect();
        for &call in &ended {
            c.calls.end(handle, call, Resolution::Everywhere, &mut self.resolved);
            c.calls.record(call, Entry::Everywhere);
            c.calls.announced = Some(now);
        }
        for call in ended {
            self.answer_asked(slot, call, out);
        }
    }

    /// The `CALL_SHAPE` frames the protocol took in: queries answered (or kept), answers
    /// matched with the calls awaiting them.
    pub(crate) fn on_call_shapes(&mut self, now: Nanos, out: &mut Outbox) {
        let mut frames = core::mem::take(&mut self.shapes_in);
        self.proto.take_call_shapes(&mut frames);
        if frames.is_empty() {
            self.shapes_in = frames;
            return;
        }
        for f in frames.drain(..) {
            self.on_call_shape(f, now, out);
            // What the frame says of a call that may disagree (`call_checks.rs`).
            let slot = self.comms.iter().position(|c| c.as_ref().is_some_and(|c| c.proto == Some(f.comm)));
            if let Some(slot) = slot {
                self.on_check_frame(slot, &f, now, out);
            }
        }
        self.refresh_awaiting();
        self.shapes_in = frames;
    }

    fn on_call_shape(&mut self, f: ShapeIn, now: Nanos, out: &mut Outbox) {
        let Some(slot) = self.comms.iter().position(|c| c.as_ref().is_some_and(|c| c.proto == Some(f.comm)))
        else {
            return;
        };
        let Some(c) = self.comms[slot].as_mut() else { return };
        let handle = c.handle;
        match f.flags {
            // A world every local process finalized belongs to a job that is over here: its
            // calls are not the next job's (a freed communicator's are its own, kept until it
            // is dropped). It still answers for a call it ended for everyone while engines
            // may not have heard.
            SHAPE_QUERY
                if slot == 0
                    && c.freed.iter().all(|&f| f)
                    && c.calls.lingers(self.free_linger).is_none_or(|t| now >= t) => {}
            SHAPE_QUERY => match c
                .calls
                .answer(f.call, self.proto.engines(f.comm).is_some_and(|(_, me)| me == 0))
            {
                Some((flags, shape)) => self.send_shape(f.comm, f.from, flags, f.call, &shape.body(), out),
                None => {
                    // Past and forgotten: no answer (the asker gives up after a peer timeout).
                    // Not yet made, or not yet known (the manager still asking): alive, and
                    // kept for when it is.
                    let kept = c.calls.history.iter().any(|(k, _)| *k as u32 == f.call);
                    let forgotten = !kept && c.calls.behind_all(f.call);
                    if forgotten {
                        return;
                    }
                    if c.calls.asked.len() < MAX_ASKED && !c.calls.asked.contains(&(f.from, f.call)) {
                        c.calls.asked.push((f.from, f.call));
                    }
                    let none = CallShapeBody::default();
                    self.send_shape(f.comm, f.from, SHAPE_PENDING, f.call, &none, out);
                }
            },
            // Only a collective is a call's shape (an honest engine records nothing else).
            SHAPE_KNOWN if !posts_parts(Opcode(f.shape.opcode)) => {}
            SHAPE_KNOWN => {
                let shape = Shape::from_body(&f.shape);
                let hit = c.calls.waiting.iter().find(|w| w.call as u32 == f.call).map(|w| w.call);
                if let Some(call) = hit {
                    // Kept, for node-mates still to make it and engines that ask.
                    c.calls.record(call, Entry::Known(shape));
                    c.calls.end(handle, call, Resolution::Known(shape), &mut self.resolved);
                    self.answer_asked(slot, call, out);
                }
            }
            SHAPE_AWAITING | SHAPE_PENDING => {
                let mut everywhere = None;
                for w in c.calls.waiting.iter_mut().filter(|w| w.call as u32 == f.call) {
                    w.heard = now;
                    match (f.flags == SHAPE_AWAITING, w.manager) {
                        // An engine whose processes all await its shape.
                        (true, true) => {
                            if let Some(v) = w.awaiting.get_mut(f.from as usize) {
                                *v = true;
                            }
                        }
                        // The manager: every rank awaits its shape.
                        (true, false) if f.from == 0 => everywhere = Some(w.call),
                        _ => {}
                    }
                }
                if let Some(call) = everywhere {
                    c.calls.record(call, Entry::Everywhere);
                    c.calls.end(handle, call, Resolution::Everywhere, &mut self.resolved);
                }
                self.settle_awaiting(slot, now, out);
            }
            SHAPE_SILENT if f.from == 0 => {
                let hit = c.calls.waiting.iter().find(|w| w.call as u32 == f.call).map(|w| w.call);
                if let Some(call) = hit {
                    c.calls.record(call, Entry::Silent);
                    c.calls.end(handle, call, Resolution::Silent, &mut self.resolved);
                }
            }
            _ => {}
        }
    }

    /// Re-arms [`TimerKey::ShapeQueries`], the earliest next query of a call awaiting its shape or give-up,
    /// after calls awaiting their shape changed.
    fn refresh_awaiting(&mut self) {
        let peer = self.free_linger;
        let at = self
            .comms
            .iter()
            .flatten()
            .flat_map(|c| c.calls.waiting.iter())
            .filter(|w| w.asks())
            .map(|w| w.next.min(w.heard + peer))
            .min();
        self.proto.timers.set(TimerKey::ShapeQueries, at);
    }

    /// Calls awaiting their shape due at `now`: asked again, or given up when no engine answered for
    /// `peer_timeout_ms`.
    pub(crate) fn on_shape_timers(&mut self, now: Nanos, out: &mut Outbox) {
        let peer = self.free_linger;
        for slot in 0..self.comms.len() {
            let Some(c) = self.comms[slot].as_mut() else { continue };
            if !c.calls.waits() {
                continue;
            }
            let handle = c.handle;
            let mut again = Vec::new();
            let mut resolved = Vec::new();
            let mut silent = Vec::new();
            // As the synchronization probes a neighbour it waits on: 64 chances per peer
            // timeout for an answer to get through a lossy link.
            let cap = peer / 64;
            c.calls.waiting.retain_mut(|w| {
                if !w.asks() {
                    return true; // every engine awaits it too: it waits for its node-mates only
                }
                if now >= w.heard + peer {
                    resolved.extend(
                        w.locals.iter().map(|&(_, local)| (handle, local, w.call, Resolution::Silent)),
                    );
                    // Kept by every engine, so a node-mate that makes the call later ends
                    // it alike; only the manager's word is announced to the others.
                    silent.push((w.call, w.manager));
                    return false;
                }
                if now >= w.next {
                    w.backoff = (w.backoff * 2).min(cap.max(1));
                    w.next = now + w.backoff;
                    again.push(w.call);
                }
                true
            });
            self.resolved.append(&mut resolved);
            for &(call, manager) in &silent {
                c.calls.record(call, Entry::Silent);
                if manager {
                    c.calls.announced = Some(now);
                }
            }
            for call in again {
                self.ask(slot, call, out);
            }
            // The engines that asked the manager end the call as it did.
            for (call, manager) in silent {
                if manager {
                    self.answer_asked(slot, call, out);
                }
            }
        }
        self.refresh_awaiting();
    }
}

/// Whether a call of `opcode` is one the other ranks of its communicator make too and that posts
/// broadcasts there: a broadcast or a composed collective.
pub(crate) fn posts_parts(opcode: ringcast_abi::Opcode) -> bool {
    ringcast_abi::Op::try_from(opcode).is_ok_and(ringcast_abi::Op::is_collective)
}
