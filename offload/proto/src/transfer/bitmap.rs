//! Which fragments of one broadcast a rank holds: a bitmap whose capacity is fixed when it is
//! made (from `max_message_bytes`; reused for every broadcast of its channel, so no allocation
//! on the data path) and the fragment geometry that maps a fragment number to its byte range.
//!
//! Every fragment header carries the fragment count, so a rank knows exactly what it misses
//! without a timer; the bitmap answers "complete?", "which are missing?" and "newly held?" (a
//! duplicate is recognised and ignored, as the ring repair of Hoefler et al. requires).
use alloc::boxed::Box;
use alloc::vec;
pub use ringcast_abi::frame::MAX_FRAGS;
use ringcast_abi::frame::MAX_RETRANSMIT_FRAGS;

static_assertions::const_assert!(MAX_RETRANSMIT_FRAGS <= MAX_FRAGS);

/// The message would need more than [`MAX_FRAGS`] fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyFragments;

/// Held fragments of one broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FragBitmap {
    /// Fragments 0 to 63, inline: a bitmap of up to 64 fragments (a simulated rank's of a
    /// small broadcast, an engine's of messages up to 90 KB on Ethernet) allocates nothing.
    first: u64,
    /// Fragments from 64 on, capacity fixed at creation: an engine configured for 4 MiB
    /// messages holds 45 words here.
    rest: Box<[u64]>,
    count: u32,
    held: u32,
}

impl FragBitmap {
    /// An empty bitmap for a message of `count` fragments (`1..=MAX_FRAGS`).
    pub fn new(count: u32) -> Result<Self, TooManyFragments> {
        let mut b = Self::with_capacity(count)?;
        b.reset(count)?;
        Ok(b)
    }

    /// An empty bitmap that can track messages of up to `max` fragments (`1..=MAX_FRAGS`).
    pub fn with_capacity(max: u32) -> Result<Self, TooManyFragments> {
        if max == 0 || max > MAX_FRAGS {
            return Err(TooManyFragments);
        }
        let rest = vec![0; max.div_ceil(64) as usize - 1].into_boxed_slice();
        Ok(FragBitmap { first: 0, rest, count: 0, held: 0 })
    }

    /// Clears the bitmap for a new message of `count` fragments (within the capacity).
    pub fn reset(&mut self, count: u32) -> Result<(), TooManyFragments> {
        if count == 0 || count.div_ceil(64) as usize > self.rest.len() + 1 {
            return Err(TooManyFragments);
        }
        self.first = 0;
        self.rest.iter_mut().for_each(|w| *w = 0);
        self.count = count;
        self.held = 0;
        Ok(())
    }

    /// Word `w` of the bitmap (`w` below the capacity's words).
    fn word(&self, w: usize) -> u64 {
        match w {
            0 => self.first,
            _ => self.rest[w - 1],
        }
    }

    /// Fragments in the message.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Fragments held.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// All fragments held.
    pub fn is_complete(&self) -> bool {
        self.held == self.count
    }

    /// Whether fragment `i` is held (false outside the message).
    pub fn get(&self, i: u32) -> bool {
        i < self.count && self.word((i / 64) as usize) & (1 << (i % 64)) != 0
    }

    /// Marks fragment `i` held; true if it was new, false for a duplicate or out-of-range `i`.
    pub fn set(&mut self, i: u32) -> bool {
        if i >= self.count {
            return false;
        }
        let (w, b) = ((i / 64) as usize, 1u64 << (i % 64));
        let word = match w {
            0 => &mut self.first,
            _ => &mut self.rest[w - 1],
        };
        if *word & b != 0 {
            return false;
        }
        *word |= b;
        self.held += 1;
        true
    }

    /// Whether any fragment after `i` is held: a missing `i` is then a gap (lost, on a fabric
    /// that keeps order), not the tail of a message still on its way.
    pub fn holds_after(&self, i: u32) -> bool {
        let w = (i / 64) as usize;
        let words = self.count.div_ceil(64) as usize;
        if w >= words {
            return false;
        }
        // Bits above `i` in its word (none when `i` is a word's last bit), then whole words.
        let above = (!0u64).checked_shl(i % 64 + 1).unwrap_or(0);
        self.word(w) & above != 0 || (w + 1..words).any(|k| self.word(k) != 0)
    }

    /// Marks every fragment held (the root owns the whole message).
    pub fn fill(&mut self) {
        for i in 0..self.count {
            self.set(i);
        }
    }

    /// Missing fragments in increasing order.
    pub fn missing(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).filter(move |&i| !self.get(i))
    }

    /// Writes the missing-fragment bitmap of `first..first + n` (bit set = missing) into `out`
    /// (`ceil(n / 8)` bytes), as a retransmission request carries it.
    pub fn write_missing(&self, first: u32, n: u32, out: &mut [u8]) {
        for b in out.iter_mut() {
            *b = 0;
        }
        for k in 0..n {
            let i = first.saturating_add(k);
            if i < self.count && !self.get(i) {
                if let Some(byte) = out.get_mut((k / 8) as usize) {
                    *byte |= 1 << (k % 8);
                }
            }
        }
    }
}

/// How a message of `total` bytes is cut into fragments of at most `payload` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Message length.
    pub total: u32,
    /// Payload bytes per fragment (all but the last are full).
    pub payload: u32,
    /// Fragments, divided out once: the data path asks for it several times per fragment on
    /// each side (its header, its range, the last fragment's test), and a division was a few
    /// per cent of a receiver's bookkeeping (`engine_stream`'s profile, docs/performance.md).
    count: u32,
}

impl Geometry {
    /// Geometry of a `total`-byte message in `payload`-byte fragments (`payload > 0`).
    pub fn new(total: u32, payload: u32) -> Result<Self, TooManyFragments> {
        let payload = payload.max(1);
        let count = total.div_ceil(payload).max(1);
        if count > MAX_FRAGS {
            return Err(TooManyFragments);
        }
        Ok(Geometry { total, payload, count })
    }

    /// Fragments (an empty message still travels as one empty fragment).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Byte range `(offset, len)` of fragment `i`, or `None` outside the message.
    pub fn range(&self, i: u32) -> Option<(u32, u32)> {
        if i >= self.count() {
            return None;
        }
        let off = i * self.payload;
        Some((off, self.payload.min(self.total - off)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn limits_and_duplicates() {
        assert_eq!(FragBitmap::new(0), Err(TooManyFragments));
        assert_eq!(FragBitmap::new(MAX_FRAGS + 1), Err(TooManyFragments));
        let mut b = FragBitmap::new(MAX_FRAGS).unwrap();
        assert!(b.set(MAX_FRAGS - 1));
        assert!(!b.set(MAX_FRAGS - 1), "duplicate");
        assert!(!b.set(MAX_FRAGS), "out of range");
        assert!(!b.get(MAX_FRAGS));
        b.fill();
        assert!(b.is_complete());
        assert_eq!(b.missing().count(), 0);
    }

    #[test]
    fn geometry_covers_the_message_exactly() {
        let g = Geometry::new(10, 4).unwrap();
        assert_eq!((g.count(), g.range(0), g.range(2), g.range(3)), (3, Some((0, 4)), Some((8, 2)), None));
        let empty = Geometry::new(0, 1400).unwrap();
        assert_eq!((empty.count(), empty.range(0)), (1, Some((0, 0))));
        assert_eq!(Geometry::new(4 << 20, 256), Err(TooManyFragments));
        assert_eq!(Geometry::new(4 << 20, 1024).unwrap().count(), 4096);
    }

    proptest! {
        /// The bitmap behaves like a set of fragment numbers, whatever order and duplicates.
        #[test]
        fn bitmap_matches_a_set(count in 1u32..600, ops in proptest::collection::vec(0u32..700, 0..2000)) {
            let mut b = FragBitmap::new(count).unwrap();
            let mut model = BTreeSet::new();
            for i in ops {
                let new = i < count && model.insert(i);
                prop_assert_eq!(b.set(i), new);
                prop_assert_eq!(b.held() as usize, model.len());
            }
            prop_assert_eq!(b.is_complete(), model.len() == count as usize);
            let missing: Vec<u32> = b.missing().collect();
            let want: Vec<u32> = (0..count).filter(|i| !model.contains(i)).collect();
            prop_assert_eq!(&missing, &want);
            let n = count.min(100);
            let mut bits = vec![0u8; n.div_ceil(8) as usize];
            b.write_missing(0, n, &mut bits);
            for k in 0..n {
                prop_assert_eq!(bits[(k / 8) as usize] & (1 << (k % 8)) != 0, !model.contains(&k));
            }
            for i in 0..count + 70 {
                prop_assert_eq!(b.holds_after(i), model.range(i.saturating_add(1)..).next().is_some(), "after {}", i);
            }
        }

        /// Fragment ranges tile the message: contiguous, no gap, no overlap, none empty unless
        /// the message is.
        #[test]
        fn fragments_tile_the_message(total in 0u32..100_000, payload in 1u32..5000) {
            prop_assume!(total.div_ceil(payload) <= MAX_FRAGS);
            let g = Geometry::new(total, payload).unwrap();
            let mut next = 0;
            for i in 0..g.count() {
                let (off, len) = g.range(i).unwrap();
                prop_assert_eq!(off, next);
                prop_assert!(len > 0 || total == 0);
                prop_assert!(len <= payload);
                next = off + len;
            }
            prop_assert_eq!(next, total);
        }
    }
}
