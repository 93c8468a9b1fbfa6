//! The calls a communicator's local members made, as this engine keeps them to answer for
//! (`call_shapes.rs` asks and answers the other engines with them): each member's count, the
//! shapes of the last [`HISTORY`] calls, the queries kept for calls not made here yet, and the
//! calls awaiting their shape.
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::frame::CallShapeBody;
use ringcast_abi::wire::{SHAPE_AWAITING, SHAPE_KNOWN, SHAPE_SILENT};
use ringcast_abi::Opcode;
use ringcast_abi::SubmissionDescriptor;
use zerocopy::byteorder::little_endian::{U16, U32, U64};

/// Calls per communicator whose shape an engine keeps to answer for. A peer asks about a call
/// at most as far behind this engine as the ranks of a communicator drift apart — the calls a
/// rank has in flight (the runner's burst), fewer than this; a call further behind is not
/// answered, and its asker gives up after a peer timeout (the communicator breaks there).
pub(crate) const HISTORY: usize = 64;

/// Queries an engine keeps for calls its processes have not made yet, per communicator; past
/// it, the asker's repetition finds the answer.
pub(crate) const MAX_ASKED: usize = 32;

/// What a descriptor says of its call that the other ranks' schedules are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) opcode: u8,
    pub(crate) flags: u8,
    pub(crate) spec: u16,
    pub(crate) root: u32,
    pub(crate) len: u64,
}

impl Shape {
    pub(crate) fn of(d: &SubmissionDescriptor) -> Shape {
        Shape { opcode: d.opcode.0, flags: d.flags, spec: d.spec, root: d.root, len: d.len }
    }

    /// `d` with this shape: the fields the descriptor of a call awaiting its shape lacked, its buffers and cookie
    /// kept (the run refuses them all).
    pub(crate) fn onto(&self, d: &SubmissionDescriptor) -> SubmissionDescriptor {
        SubmissionDescriptor {
            opcode: Opcode(self.opcode),
            flags: self.flags,
            spec: self.spec,
            root: self.root,
            len: self.len,
            ..*d
        }
    }

    pub(crate) fn body(&self) -> CallShapeBody {
        CallShapeBody {
            opcode: self.opcode,
            flags: self.flags,
            spec: U16::new(self.spec),
            root: U32::new(self.root),
            len: U64::new(self.len),
        }
    }

    pub(crate) fn from_body(b: &CallShapeBody) -> Shape {
        Shape { opcode: b.opcode, flags: b.flags, spec: b.spec.get(), root: b.root.get(), len: b.len.get() }
    }
}

/// How a call awaiting its shape ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Call `k` was this: run it in step.
    Known(Shape),
    /// Every rank awaits call `k`'s shape: nothing runs anywhere.
    Everywhere,
    /// No engine answered for `peer_timeout_ms`: the call ends, and the communicator breaks
    /// at this engine.
    Silent,
}

/// A call awaiting its shape resolved: (communicator handle, engine-local rank, call, how).
pub(crate) type Resolved = (u64, u32, u64, Resolution);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Known(Shape),
    /// Local members await the call's shape, and none made it readable yet (whether all of them
    /// did is [`Calls::awaiting_here`]: their counts say it).
    Awaiting,
    /// Every rank awaits its shape (the manager found out).
    Everywhere,
    /// The manager gave up asking: it ends as given up everywhere (each engine breaks the
    /// communicator).
    Silent,
}

/// A call some local members made without a readable shape, awaiting it.
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    /// Those members: (gather index, engine-local rank).
    pub(crate) locals: Vec<(u32, u32)>,
    pub(crate) call: u64,
    /// This engine is the communicator's manager (its rank 0), which asks every engine; the
    /// others ask it.
    pub(crate) manager: bool,
    /// The manager: engines (protocol ranks) that answered `SHAPE_AWAITING`.
    pub(crate) awaiting: Vec<bool>,
    /// When an engine was last heard about it, and when it asks next, after `backoff`.
    pub(crate) heard: Nanos,
    pub(crate) next: Nanos,
    pub(crate) backoff: Nanos,
}

impl Waiting {
    /// Whether it still asks: another engine always (it waits for the manager's word), the
    /// manager while an engine has yet to say `SHAPE_AWAITING`; else the call waits for node-mates
    /// only, which are alive or leave (`Node::member_left`) — no query, no give-up.
    pub(crate) fn asks(&self) -> bool {
        !self.manager || !self.awaiting.iter().all(|&v| v)
    }
}

/// One communicator's calls, as its local members made them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Calls {
    /// Calls made, by gather index.
    pub(crate) made: Vec<u64>,
    /// Members that left, by gather index: they make no more calls.
    pub(crate) gone: Vec<bool>,
    /// The last [`HISTORY`] calls' shapes known here (call, entry).
    pub(crate) history: VecDeque<(u64, Entry)>,
    /// Queries for calls not known here yet: (engine, call's low 32 bits).
    pub(crate) asked: Vec<(u32, u32)>,
    pub(crate) waiting: Vec<Waiting>,
    /// When the manager last ended a call as awaited everywhere or gave up on one: engines that did
    /// not hear it yet ask again within `peer_timeout_ms / 64`, so a freed communicator stays a
    /// whole peer timeout for them ([`Calls::lingers`]) — such a call posts nothing the
    /// synchronization would hold it for.
    pub(crate) announced: Option<Nanos>,
    /// The highest call kept in [`Calls::history`]: a call past it is pushed without a scan.
    pub(crate) high: Option<u64>,
}

impl Calls {
    /// For a communicator with `locals` local members.
    pub(crate) fn new(locals: usize) -> Calls {
        Calls { made: vec![0; locals], gone: vec![false; locals], ..Calls::default() }
    }

    /// A process took local member `index`'s rank and continues its calls: it is waited for
    /// again.
    pub(crate) fn arrive(&mut self, index: u32) {
        if let Some(g) = self.gone.get_mut(index as usize) {
            *g = false;
        }
    }

    /// Local member `index` left: it waits for nothing more, and the calls of its node-mates
    /// awaiting their shape no longer wait for it to make them ([`Node::member_left`]).
    pub(crate) fn forget(&mut self, index: u32) {
        if let Some(g) = self.gone.get_mut(index as usize) {
            *g = true;
        }
        for w in &mut self.waiting {
            w.locals.retain(|&(i, _)| i != index);
        }
        self.waiting.retain(|w| !w.locals.is_empty());
    }

    /// Ends the waiting call `call` (any such) with `how`, into `out`.
    pub(crate) fn end(&mut self, handle: u64, call: u64, how: Resolution, out: &mut Vec<Resolved>) {
        self.waiting.retain(|w| {
            if w.call != call {
                return true;
            }
            out.extend(w.locals.iter().map(|&(_, local)| (handle, local, call, how)));
            false
        });
    }

    /// Until when a freed communicator must stay to answer for a call it ended
    /// ([`Calls::announced`]), given the peer timeout `peer`.
    pub(crate) fn lingers(&self, peer: Nanos) -> Option<Nanos> {
        self.announced.map(|t| t + peer)
    }

    /// Whether any call awaiting its shape waits here.
    pub(crate) fn waits(&self) -> bool {
        !self.waiting.is_empty()
    }

    pub(crate) fn count(&mut self, index: u32) -> Option<u64> {
        let made = self.made.get_mut(index as usize)?;
        *made += 1;
        Some(*made - 1)
    }

    /// Call `call`'s shape as a local process made it, if known here (`call_checks.rs`).
    pub(crate) fn known(&self, call: u64) -> Option<Shape> {
        match self.history.iter().rev().find(|(k, _)| *k == call)?.1 {
            Entry::Known(s) => Some(s),
            _ => None,
        }
    }

    /// The full index of the call a frame names by its low 32 bits: one kept here, else the
    /// one nearest the calls the local members made.
    pub(crate) fn index_of(&self, low: u32) -> u64 {
        if let Some(&(k, _)) = self.history.iter().rev().find(|(k, _)| *k as u32 == low) {
            return k;
        }
        let made = self.made.iter().copied().max().unwrap_or(0);
        let at = |base: u64| (base & !0xffff_ffff) | u64::from(low);
        let around = [at(made), at(made.wrapping_add(1 << 32)), at(made.wrapping_sub(1 << 32))];
        around.into_iter().min_by_key(|&k| k.abs_diff(made)).unwrap_or(u64::from(low))
    }

    pub(crate) fn entry(&mut self, call: u64) -> Option<&mut Entry> {
        // The newest calls are at the back, and most lookups are for them.
        self.history.iter_mut().rev().find(|(k, _)| *k == call).map(|(_, e)| e)
    }

    /// Whether every local member still here made call `call` and none could read its shape
    /// (a member that left counts as having made it: it makes no more).
    pub(crate) fn awaiting_here(&self, call: u64) -> bool {
        let awaiting = self.history.iter().rev().any(|(k, e)| *k == call && matches!(e, Entry::Awaiting));
        awaiting && self.made.iter().zip(&self.gone).all(|(&m, &gone)| gone || m > call)
    }

    /// Whether `call` (low 32 bits) is older than every call the members still here made,
    /// counting modulo 2³² as the frame does.
    pub(crate) fn behind_all(&self, call: u32) -> bool {
        self.made
            .iter()
            .zip(&self.gone)
            .filter(|(_, &gone)| !gone)
            .all(|(&m, _)| m > 0 && (m as u32).wrapping_sub(call) as i32 > 0)
    }

    pub(crate) fn record(&mut self, call: u64, e: Entry) {
        // Most calls are new, past every call kept (no scan on every collective).
        let newest = self.high.is_none_or(|h| h < call);
        if let Some(old) = if newest { None } else { self.entry(call) } {
            // What the manager ended every rank's call with is final: an engine that missed
            // its word must hear the same, not a shape a node-mate gave later.
            if !matches!(old, Entry::Everywhere | Entry::Silent) {
                *old = e;
            }
            return;
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((call, e));
        self.high = Some(self.high.map_or(call, |h| h.max(call)));
    }

    /// What this engine answers about call `call` (low 32 bits): its shape; awaiting it — for
    /// the manager, once every engine said so, for another engine, once its own local members
    /// all await it; or not yet (`None`).
    pub(crate) fn answer(&self, call: u32, manager: bool) -> Option<(u16, Shape)> {
        let none = Shape { opcode: 0, flags: 0, spec: 0, root: 0, len: 0 };
        let (k, e) = self.history.iter().rev().find(|(k, _)| *k as u32 == call).copied()?;
        match e {
            Entry::Known(s) => Some((SHAPE_KNOWN, s)),
            Entry::Everywhere => Some((SHAPE_AWAITING, none)),
            Entry::Silent => Some((SHAPE_SILENT, none)),
            Entry::Awaiting if !manager && self.awaiting_here(k) => Some((SHAPE_AWAITING, none)),
            Entry::Awaiting => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(len: u64) -> Shape {
        Shape { opcode: 7, flags: 0, spec: 0x0102, root: 1, len }
    }

    #[test]
    fn a_known_call_is_answered_and_one_awaiting_its_shape_only_once_every_member_awaits_it() {
        let mut calls = Calls::new(2);
        assert_eq!((calls.count(0), calls.count(1)), (Some(0), Some(0)));
        calls.record(0, Entry::Known(shape(8)));
        assert_eq!(calls.answer(0, false), Some((SHAPE_KNOWN, shape(8))));
        assert_eq!(calls.answer(0, true), Some((SHAPE_KNOWN, shape(8))));
        calls.count(0);
        calls.record(1, Entry::Awaiting);
        assert_eq!(
            calls.answer(1, false),
            None,
            "one of two members awaits its shape: the other may still say"
        );
        calls.count(1);
        calls.record(1, Entry::Awaiting);
        assert_eq!(calls.answer(1, false).map(|a| a.0), Some(SHAPE_AWAITING));
        // The manager says awaiting only for every rank, once it heard every engine; that word is
        // final — a shape a node-mate gives later does not replace it.
        assert_eq!(calls.answer(1, true), None);
        calls.record(1, Entry::Everywhere);
        calls.record(1, Entry::Known(shape(9)));
        assert_eq!(calls.answer(1, true).map(|a| a.0), Some(SHAPE_AWAITING));
        assert_eq!(calls.answer(2, false), None);
    }

    #[test]
    fn a_member_that_left_is_not_waited_for() {
        let mut calls = Calls::new(2);
        calls.count(0);
        calls.record(0, Entry::Awaiting);
        assert_eq!(calls.answer(0, false), None);
        calls.forget(1);
        assert_eq!(calls.answer(0, false).map(|a| a.0), Some(SHAPE_AWAITING));
        // A process takes the rank and continues its calls: it is waited for again.
        calls.arrive(1);
        assert_eq!(calls.answer(0, false), None);
    }

    #[test]
    fn a_call_recorded_below_the_newest_is_found_not_pushed_twice() {
        let mut calls = Calls::new(1);
        calls.record(5, Entry::Awaiting);
        calls.record(3, Entry::Known(shape(3)));
        calls.record(4, Entry::Silent);
        calls.record(4, Entry::Known(shape(4)));
        assert_eq!(calls.answer(4, false).map(|a| a.0), Some(SHAPE_SILENT), "Silent is final");
        assert_eq!(calls.history.iter().filter(|(k, _)| *k == 4).count(), 1);
        calls.record(6, Entry::Known(shape(6)));
        assert_eq!(calls.history.len(), 4);
    }

    #[test]
    fn a_call_behind_every_member_is_told_apart_across_the_wrap() {
        let mut calls = Calls::new(1);
        calls.made[0] = (1 << 32) + 3;
        assert!(calls.behind_all(1), "call 2^32 + 1");
        assert!(calls.behind_all(u32::MAX), "call 2^32 - 1");
        assert!(!calls.behind_all(3), "call 2^32 + 3 is not made yet");
        assert!(!calls.behind_all(7));
    }

    #[test]
    fn the_history_keeps_the_last_calls_only() {
        let mut calls = Calls::new(1);
        for k in 0..HISTORY as u64 + 5 {
            calls.record(k, Entry::Known(shape(k + 1)));
        }
        assert_eq!(calls.answer(4, false), None);
        assert_eq!(calls.answer(5, false), Some((SHAPE_KNOWN, shape(6))));
        assert_eq!(calls.history.len(), HISTORY);
    }

    #[test]
    fn a_shape_carries_what_the_schedule_is_made_of_and_keeps_the_buffers() {
        let d = SubmissionDescriptor {
            opcode: Opcode::ALLREDUCE,
            flags: 0,
            spec: 0xffff,
            root: 9,
            comm: 3,
            cookie: 77,
            len: 5,
            ..SubmissionDescriptor::nop(0)
        };
        let theirs = Shape { opcode: Opcode::ALLREDUCE.0, flags: 0, spec: 0x0203, root: 0, len: 64 };
        let run = theirs.onto(&d);
        assert_eq!(Shape::of(&run), theirs);
        assert_eq!((run.comm, run.cookie, run.key, run.offset), (3, 77, d.key, d.offset));
        assert_eq!(Shape::from_body(&theirs.body()), theirs);
    }
}
