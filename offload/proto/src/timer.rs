//! The engine's one timer table: every deadline the state machine keeps, keyed by what it
//! times ([`TimerKey`]) — a protocol communicator's (`transfer/timers.rs`), the shape
//! queries (`engine/node/call_shapes.rs`), the call checks
//! (`engine/node/call_checks.rs`), a freed communicator waiting to be dropped
//! (`engine/node/lifecycle.rs`) and the engine's
//! drain once its driver stops (`engine/drain.rs`) — in one indexed binary min-heap, so the
//! engine's loop learns the next deadline of all of them in O(1), without a scan or a merge
//! (`Engine::poll_timeout`).
//!
//! The table lives in the protocol (a bare protocol, as the simulator's million ranks run it,
//! arms only its communicators' keys and keeps one entry inline); an engine's node arms its own
//! keys in the same table and takes the due ones itself (`Node::on_timeout`).
use crate::transfer::env::CommHandle;
use crate::Nanos;
use smallvec::SmallVec;

/// What a deadline times. The derived order is the order due timers fire in within one
/// `handle_timeout`: the protocol's communicators (in slot order, as a sweep of the table
/// would visit them), then the shape queries, the call checks, the freed communicators and the
/// drain — the order in which the separate sources fired before there was one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    /// A protocol communicator's earliest deadline: its broadcasts' root delays, next batches,
    /// repair requests and peer silences, its synchronization's retry, probe and silence.
    Comm(CommHandle),
    /// The earliest shape query's next repetition or give-up (`call_shapes.rs`).
    ShapeQueries,
    /// The earliest waiting call's next check against the manager's (`call_checks.rs`).
    CallChecks,
    /// Node communicator slot `.0`, freed by every local member, until it may be dropped: its
    /// TIME-WAIT after it settled, or the peer timeout (`lifecycle.rs`).
    Freeing(u32),
    /// The engine's drain, once its driver stopped: its next linger deadline (`drain.rs`).
    Linger,
}

impl TimerKey {
    /// The key's entry in the table. Even entries are the protocol's communicators (a bare
    /// protocol's one communicator is entry 0, kept inline); odd ones the node's — its three
    /// single keys, then one per communicator slot.
    fn index(self) -> usize {
        match self {
            TimerKey::Comm(c) => 2 * c.0 as usize,
            TimerKey::ShapeQueries => 1,
            TimerKey::CallChecks => 3,
            TimerKey::Linger => 5,
            TimerKey::Freeing(s) => 7 + 2 * s as usize,
        }
    }

    fn of_index(i: u32) -> TimerKey {
        match i {
            _ if i.is_multiple_of(2) => TimerKey::Comm(CommHandle(i / 2)),
            1 => TimerKey::ShapeQueries,
            3 => TimerKey::CallChecks,
            5 => TimerKey::Linger,
            _ => TimerKey::Freeing((i - 7) / 2),
        }
    }
}

/// Every armed deadline as an indexed binary min-heap: the next deadline in O(1), setting or
/// clearing a key's in O(log n), no scan on the engine's loop. One entry per key, so it is
/// bounded by the communicator tables' capacities (`limits.max_comms` and the protocol's); it
/// grows only when a communicator slot is first used (creation, never a hot-path event, never
/// reserving more) and allocates nothing after that — nothing at all for one communicator (a
/// simulated rank's), which it keeps inline.
#[derive(Debug, Default)]
pub(crate) struct TimerTable {
    /// Entries with a deadline, heap-ordered by it.
    heap: SmallVec<[u32; 2]>,
    /// Per entry ([`TimerKey::index`]): its index in `heap`, or [`NOT_ARMED`], and its
    /// deadline (meaningful while armed).
    slots: SmallVec<[(u32, Nanos); 1]>,
}

const NOT_ARMED: u32 = u32::MAX;

impl TimerTable {
    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Nanos> {
        self.heap.first().map(|&s| self.slots[s as usize].1)
    }

    /// `key`'s deadline, if armed.
    pub(crate) fn get(&self, key: TimerKey) -> Option<Nanos> {
        self.slots.get(key.index()).filter(|e| e.0 != NOT_ARMED).map(|e| e.1)
    }

    /// Whether `key` is armed and due at `now`.
    pub(crate) fn due(&self, key: TimerKey, now: Nanos) -> bool {
        self.get(key).is_some_and(|t| t <= now)
    }

    /// Every armed key with its deadline, in no particular order (the debug builds'
    /// cross-checks).
    pub(crate) fn armed(&self) -> impl Iterator<Item = (TimerKey, Nanos)> + '_ {
        self.heap.iter().map(|&i| (TimerKey::of_index(i), self.slots[i as usize].1))
    }

    /// Sets (`Some`) or clears (`None`) `key`'s deadline.
    pub(crate) fn set(&mut self, key: TimerKey, at: Option<Nanos>) {
        let s = key.index();
        if at.is_none() && self.slots.len() <= s {
            return; // never armed
        }
        let slot = s as u32;
        while self.slots.len() <= s {
            // One entry more, as a communicator table grows (see `Protocol::create_comm`).
            self.slots.reserve_exact(1);
            self.slots.push((NOT_ARMED, 0));
            self.heap.reserve_exact(1);
        }
        match (self.slots[s].0, at) {
            (NOT_ARMED, None) => {}
            (NOT_ARMED, Some(t)) => {
                self.slots[s] = (self.heap.len() as u32, t);
                self.heap.push(slot);
                self.up(self.heap.len() - 1);
            }
            (i, Some(t)) => {
                let earlier = t < self.slots[s].1;
                self.slots[s].1 = t;
                if earlier {
                    self.up(i as usize)
                } else {
                    self.down(i as usize)
                }
            }
            (i, None) => self.remove_at(i as usize),
        }
    }

    /// Takes the earliest key whose deadline is at or before `now`, with its deadline.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(TimerKey, Nanos)> {
        let &s = self.heap.first()?;
        let at = self.slots[s as usize].1;
        if at > now {
            return None;
        }
        self.remove_at(0);
        Some((TimerKey::of_index(s), at))
    }

    fn remove_at(&mut self, i: usize) {
        let gone = self.heap[i];
        self.slots[gone as usize].0 = NOT_ARMED;
        let last = self.heap.len() - 1;
        self.heap.swap(i, last);
        self.heap.pop();
        if i < self.heap.len() {
            self.slots[self.heap[i] as usize].0 = i as u32;
            self.down(i);
            self.up(i);
        }
    }

    fn key(&self, i: usize) -> Nanos {
        self.slots[self.heap[i] as usize].1
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.slots[self.heap[a] as usize].0 = a as u32;
        self.slots[self.heap[b] as usize].0 = b as u32;
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.key(i) >= self.key(parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.key(l) < self.key(least) {
                least = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(least) {
                least = r;
            }
            if least == i {
                break;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The table against the obvious model (a map scanned for its minimum), under random
    //! arm / re-arm / clear / pop sequences over keys of every kind.
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Set(TimerKey, Option<Nanos>),
        Pop(Nanos),
    }

    fn key() -> impl Strategy<Value = TimerKey> {
        prop_oneof![
            (0u32..12).prop_map(|c| TimerKey::Comm(CommHandle(c))),
            Just(TimerKey::ShapeQueries),
            Just(TimerKey::CallChecks),
            (0u32..12).prop_map(TimerKey::Freeing),
            Just(TimerKey::Linger),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (key(), proptest::option::of(0u64..1_000)).prop_map(|(k, t)| Op::Set(k, t)),
            1 => (0u64..1_000).prop_map(Op::Pop),
        ]
    }

    #[test]
    fn every_key_has_an_entry_of_its_own() {
        let mut seen = std::collections::BTreeSet::new();
        let keys = (0..40).map(|c| TimerKey::Comm(CommHandle(c))).chain((0..40).map(TimerKey::Freeing));
        for k in keys.chain([TimerKey::ShapeQueries, TimerKey::CallChecks, TimerKey::Linger]) {
            assert_eq!(TimerKey::of_index(k.index() as u32), k);
            assert!(seen.insert(k.index()), "{k:?} shares its entry");
        }
        // A bare protocol's one communicator is kept inline.
        assert_eq!(TimerKey::Comm(CommHandle(0)).index(), 0);
    }

    proptest! {
        #[test]
        fn the_table_keeps_the_earliest_deadline_of_every_key(ops in proptest::collection::vec(op(), 0..300)) {
            let mut table = TimerTable::default();
            let mut model: BTreeMap<TimerKey, Nanos> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(k, t) => {
                        table.set(k, t);
                        match t {
                            Some(t) => model.insert(k, t),
                            None => model.remove(&k),
                        };
                    }
                    Op::Pop(now) => {
                        let mut popped = Vec::new();
                        while let Some(e) = table.pop_due(now) {
                            popped.push(e);
                        }
                        let due: Vec<(TimerKey, Nanos)> =
                            model.iter().filter(|(_, &t)| t <= now).map(|(&k, &t)| (k, t)).collect();
                        model.retain(|_, t| *t > now);
                        // Popped in deadline order (ties in any order).
                        prop_assert!(popped.windows(2).all(|w| w[0].1 <= w[1].1));
                        popped.sort_unstable();
                        prop_assert_eq!(popped, due);
                    }
                }
                for (&k, &t) in &model {
                    prop_assert_eq!(table.get(k), Some(t));
                }
                prop_assert_eq!(table.armed().count(), model.len());
                prop_assert_eq!(table.next(), model.values().min().copied());
                prop_assert_eq!(table.heap.len(), model.len());
            }
        }
    }
}
