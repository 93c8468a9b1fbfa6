//! A simulated host's memory: what the engine reads and writes there (through its `Env` or its
//! DMA jobs) is what the checker of [`super::dst`] reads back, never the engine's own state.
use smallvec::SmallVec;

/// A simulated host's memory: a few buffers by segment handle (a list, not a hash map: a
/// simulated rank usually has one buffer, kept inline, and a million of them must stay small).
/// A buffer of up to [`INLINE`] bytes is kept inline too (a million-rank run's 2-byte buffers
/// allocate nothing: 32 bytes of malloc chunk a rank).
#[derive(Debug, Default)]
pub struct HostMem(SmallVec<[(u64, Bytes); 1]>);

/// Bytes of a buffer kept inline (as many as the pointer and length it replaces).
pub const INLINE: usize = 16;

type Bytes = SmallVec<[u8; INLINE]>;

impl HostMem {
    /// Sets segment `seg`'s bytes.
    pub fn insert(&mut self, seg: u64, bytes: Vec<u8>) {
        let bytes = Bytes::from_vec(bytes);
        match self.0.iter_mut().find(|(s, _)| *s == seg) {
            Some(e) => e.1 = bytes,
            None => {
                self.0.reserve_exact(1);
                self.0.push((seg, bytes));
            }
        }
    }

    /// Segment `seg`'s bytes.
    pub fn get(&self, seg: &u64) -> Option<&[u8]> {
        self.0.iter().find(|(s, _)| s == seg).map(|(_, b)| &b[..])
    }

    /// Segment `seg`'s bytes, writable.
    pub fn get_mut(&mut self, seg: &u64) -> Option<&mut [u8]> {
        self.0.iter_mut().find(|(s, _)| s == seg).map(|(_, b)| &mut b[..])
    }
}

impl HostMem {
    /// `len` bytes at `offset` of segment `seg`, if the segment holds them.
    pub fn range(&mut self, seg: u64, offset: u64, len: u64) -> Option<&mut [u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.get_mut(&seg)?.get_mut(start..end)
    }
}
