//! The protocol's timer table: each communicator slot's earliest deadline in an indexed binary
//! min-heap, so an engine's loop learns the next deadline without a scan.
use crate::Nanos;
use smallvec::SmallVec;

/// The deadlines of the communicator slots as an indexed binary min-heap: the next deadline in
/// O(1), setting or clearing a slot's in O(log n), no scan of every communicator × channel on
/// the engine's loop. It grows with the protocol's communicator table (one entry per slot,
/// never reserving more) and allocates nothing after that — nothing at all for one slot (a
/// simulated rank's), which it keeps inline.
#[derive(Debug, Default)]
pub(crate) struct TimerTable {
    /// Communicator slots with a deadline, heap-ordered by it.
    heap: SmallVec<[u32; 2]>,
    /// Per slot: its index in `heap`, or [`NOT_ARMED`], and its deadline (meaningful while
    /// armed).
    slots: SmallVec<[(u32, Nanos); 1]>,
}

const NOT_ARMED: u32 = u32::MAX;

impl TimerTable {
    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Nanos> {
        self.heap.first().map(|&s| self.slots[s as usize].1)
    }

    /// Sets (`Some`) or clears (`None`) slot `slot`'s deadline.
    pub(crate) fn set(&mut self, slot: u32, at: Option<Nanos>) {
        let s = slot as usize;
        while self.slots.len() <= s {
            // One slot more, as the communicator table grows (see `Protocol::create_comm`).
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

    /// Takes the earliest slot whose deadline is at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<u32> {
        let &s = self.heap.first()?;
        if self.slots[s as usize].1 > now {
            return None;
        }
        self.remove_at(0);
        Some(s)
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
    //! arm / re-arm / clear / pop sequences.
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Set(u32, Option<Nanos>),
        Pop(Nanos),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u32..24, proptest::option::of(0u64..1_000)).prop_map(|(s, t)| Op::Set(s, t)),
            1 => (0u64..1_000).prop_map(Op::Pop),
        ]
    }

    proptest! {
        #[test]
        fn the_table_keeps_the_earliest_deadline_of_every_slot(ops in proptest::collection::vec(op(), 0..300)) {
            let mut table = TimerTable::default();
            let mut model: BTreeMap<u32, Nanos> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(s, t) => {
                        table.set(s, t);
                        match t {
                            Some(t) => model.insert(s, t),
                            None => model.remove(&s),
                        };
                    }
                    Op::Pop(now) => {
                        let mut popped = Vec::new();
                        while let Some(s) = table.pop_due(now) {
                            popped.push(s);
                        }
                        let mut due: Vec<u32> = model.iter().filter(|(_, &t)| t <= now).map(|(&s, _)| s).collect();
                        model.retain(|_, t| *t > now);
                        // Popped in deadline order (ties in any order).
                        let times: Vec<Nanos> = popped.iter().map(|&s| table.slots[s as usize].1).collect();
                        prop_assert!(times.windows(2).all(|w| w[0] <= w[1]));
                        popped.sort_unstable();
                        // In slot order, as a sweep of the table would visit them: which of several
        // simultaneously due communicators sends first is arbitrary, and this keeps it
        // independent of the heap's history.
        due.sort_unstable();
                        prop_assert_eq!(popped, due);
                    }
                }
                prop_assert_eq!(table.next(), model.values().min().copied());
                prop_assert_eq!(table.heap.len(), model.len());
            }
        }
    }
}
