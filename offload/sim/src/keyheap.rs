//! The event queue's priority queue: a 4-ary min-heap of event keys (time, then the insertion
//! number and slot packed in one word). Keys are unique (the insertion number is), so it pops exactly the order a binary heap
//! pops — the simulation is the same event for event — at half the depth: a million-rank
//! multicast keeps a million keys queued, and `BinaryHeap::pop` was 27 % of that run
//! (docs/performance.md, "Simulator").
use ringcast_proto::Nanos;

/// An event's key: when, then its insertion number (ties at one time run in insertion order) in
/// the high [`SEQ_BITS`] bits of the second word and its slot in the low [`SLOT_BITS`] (16 bytes,
/// not a tuple's 24: a million-rank run keeps two million keys).
pub(crate) type Key = (Nanos, u64);

/// Bits of a key's slot: up to 2^27 (134 M) events queued at once.
pub(crate) const SLOT_BITS: u32 = 27;
/// Bits of a key's insertion number: 2^37 (137 G) events in one run.
pub(crate) const SEQ_BITS: u32 = 64 - SLOT_BITS;

/// The key of the event inserted `seq`-th, waiting in `slot`.
pub(crate) fn key(at: Nanos, seq: u64, slot: u32) -> Key {
    assert!(seq < 1 << SEQ_BITS && slot < 1 << SLOT_BITS, "event queue past its key's bits");
    (at, seq << SLOT_BITS | slot as u64)
}

/// A key's slot.
pub(crate) fn slot(key: Key) -> u32 {
    (key.1 & ((1 << SLOT_BITS) - 1)) as u32
}

/// Children per node.
const D: usize = 4;

/// A min-heap of [`Key`]s, `D` children per node.
#[derive(Debug, Default)]
pub(crate) struct KeyHeap(Vec<Key>);

impl KeyHeap {
    pub(crate) fn push(&mut self, key: Key) {
        let mut i = self.0.len();
        self.0.push(key);
        while i > 0 {
            let parent = (i - 1) / D;
            if self.0[parent] <= key {
                break;
            }
            self.0[i] = self.0[parent];
            i = parent;
        }
        self.0[i] = key;
    }

    /// The least key, removed.
    pub(crate) fn pop(&mut self) -> Option<Key> {
        let last = self.0.pop()?;
        let Some(&top) = self.0.first() else { return Some(last) };
        // `last` sinks from the root, the least child of each level moving up.
        let n = self.0.len();
        let mut i = 0;
        loop {
            let first = D * i + 1;
            if first >= n {
                break;
            }
            let mut least = first;
            for c in first + 1..(first + D).min(n) {
                if self.0[c] < self.0[least] {
                    least = c;
                }
            }
            if self.0[least] >= last {
                break;
            }
            self.0[i] = self.0[least];
            i = least;
        }
        self.0[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest! {
        /// Pops what the standard binary heap pops, in the same order, under any interleaving
        /// of pushes (times colliding often: ties are common in the simulator) and pops.
        #[test]
        fn pops_what_a_binary_heap_pops(ops in proptest::collection::vec(proptest::option::of(0u64..50), 0..400)) {
            let (mut ours, mut std) = (KeyHeap::default(), BinaryHeap::new());
            for (seq, op) in ops.into_iter().enumerate() {
                match op {
                    Some(at) => {
                        let key = key(at, seq as u64, (seq * 7 % 13) as u32);
                        ours.push(key);
                        std.push(Reverse(key));
                    }
                    None => prop_assert_eq!(ours.pop(), std.pop().map(|Reverse(k)| k)),
                }
            }
            while let Some(Reverse(k)) = std.pop() {
                prop_assert_eq!(ours.pop(), Some(k));
            }
            prop_assert_eq!(ours.pop(), None);
        }

        /// A packed key orders as the tuple (time, insertion number, slot) it replaces, and
        /// gives its slot back.
        #[test]
        fn a_packed_key_orders_as_its_fields(a in (0u64..4, 0u64..1 << SEQ_BITS, 0u32..1 << SLOT_BITS),
                                             b in (0u64..4, 0u64..1 << SEQ_BITS, 0u32..1 << SLOT_BITS)) {
            let (ka, kb) = (key(a.0, a.1, a.2), key(b.0, b.1, b.2));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(slot(ka), a.2);
        }
    }
}
