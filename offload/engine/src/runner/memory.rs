//! The runner's table of mapped host memory: segment handles (what the core knows) to mappings
//! (what the DMA touches). The core has already bounds-checked every range against the
//! registration; the copy re-checks against the mapping, so even a core bug cannot reach
//! outside host memory.
use crate::core::regions::{Resolved, SegmentHandle};
use ringcast_ring::{copy_between, ShmSegment};
use std::collections::HashMap;
use std::sync::Arc;

/// Mapped segments by handle.
#[derive(Default)]
pub struct SegmentTable {
    map: HashMap<u64, Arc<ShmSegment>>,
    next: u64,
}

impl SegmentTable {
    /// A table with room for `capacity` segments before it reallocates (sized at engine start).
    pub fn with_capacity(capacity: usize) -> Self {
        SegmentTable {
            map: HashMap::with_capacity(capacity),
            next: 1,
        }
    }

    /// Adds a mapping, returning its handle.
    pub fn insert(&mut self, seg: ShmSegment) -> SegmentHandle {
        let h = self.next;
        self.next += 1;
        self.map.insert(h, Arc::new(seg));
        SegmentHandle(h)
    }

    /// Drops (unmaps) a segment.
    pub fn remove(&mut self, h: SegmentHandle) {
        self.map.remove(&h.0);
    }

    /// Executes one DMA; false when a handle is unknown or a range falls outside its mapping.
    pub fn dma(&self, src: Resolved, dst: Resolved, len: u64) -> bool {
        match (self.map.get(&src.segment.0), self.map.get(&dst.segment.0)) {
            (Some(s), Some(d)) => copy_between(s, src.offset, d, dst.offset, len).is_ok(),
            _ => false,
        }
    }
}
