//! One host's registration table: fixed capacity, generation-checked keys, bounds-checked
//! resolution of (key, offset, len).
//!
//! A key is `generation << slot_bits | (slot + 1)`: the slot (plus one, so key 0 never exists)
//! in the few low bits a table of this capacity needs, a per-slot generation in all the others
//! (23 bits for the default 256 slots). The generation changes at every deregistration, so a
//! stale key cannot reach a region registered later in the same slot; a slot whose generations
//! are used up is retired rather than wrapped, so no key is ever issued twice.
//!
//! Entries are the ABI's [`RegistrationRecord`]s: the same 32-byte record a DPU engine could keep
//! in device memory or expose to a host for inspection.
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::{Access, RegionKey, RegistrationRecord, StatusKind};

/// Runner-assigned handle of the mapped memory behind a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentHandle(pub u64);

/// A resolved, bounds-checked reference into a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Segment holding the bytes.
    pub segment: SegmentHandle,
    /// Offset inside the segment.
    pub offset: u64,
}

/// `base` moved `by` bytes on (`None`, no memory, stays none).
pub fn at(base: Option<Resolved>, by: u64) -> Option<Resolved> {
    base.map(|b| Resolved { segment: b.segment, offset: b.offset + by })
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u32,
    region: Option<RegistrationRecord>,
}

/// Registration failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegError {
    /// Every slot is in use.
    Full,
    /// The key names no live region.
    Unknown,
}

/// A host's regions.
#[derive(Debug)]
pub struct RegionTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    slot_bits: u32,
    max_generation: u32,
}

impl RegionTable {
    /// A table of `capacity` slots (1..=65535, checked by `Config::validate`).
    pub fn new(capacity: u32) -> Self {
        let capacity = capacity.clamp(1, u16::MAX as u32);
        let slot_bits = 32 - capacity.leading_zeros();
        Self::with_generations(capacity, (1u32 << (32 - slot_bits)) - 1)
    }

    /// A table whose slots retire after `max_generation` registrations each (tests use a small
    /// limit to reach retirement).
    pub(crate) fn with_generations(capacity: u32, max_generation: u32) -> Self {
        let capacity = capacity.clamp(1, u16::MAX as u32);
        RegionTable {
            slots: vec![Slot { generation: 1, region: None }; capacity as usize],
            // Pop from the end: lowest slots first.
            free: (0..capacity).rev().collect(),
            slot_bits: 32 - capacity.leading_zeros(),
            max_generation,
        }
    }

    /// Registers `record` (its `key` field is ignored and filled in), returning the key.
    pub fn insert(&mut self, mut record: RegistrationRecord) -> Result<RegionKey, RegError> {
        let slot = self.free.pop().ok_or(RegError::Full)?;
        let s = &mut self.slots[slot as usize];
        record.key = RegionKey(s.generation << self.slot_bits | (slot + 1));
        s.region = Some(record);
        Ok(record.key)
    }

    /// Removes the region `key` names.
    pub fn remove(&mut self, key: RegionKey) -> Result<RegistrationRecord, RegError> {
        let slot = self.slot_of(key).ok_or(RegError::Unknown)?;
        let region = self.slots[slot].region.take().ok_or(RegError::Unknown)?;
        self.retire_generation(slot);
        Ok(region)
    }

    /// Moves `slot` to its next generation and frees it, or retires it for good when its
    /// generations are used up.
    fn retire_generation(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if s.generation < self.max_generation {
            s.generation += 1;
            self.free.push(slot as u32);
        }
    }

    /// Removes every live region (host tear-down), returning them.
    pub fn drain(&mut self) -> Vec<RegistrationRecord> {
        let mut out = Vec::with_capacity(self.len());
        for slot in 0..self.slots.len() {
            if let Some(r) = self.slots[slot].region.take() {
                self.retire_generation(slot);
                out.push(r);
            }
        }
        out
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.region.is_some()).count()
    }

    /// True when no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves `len` bytes at `offset` of region `key`, requiring `need` access.
    pub fn resolve(
        &self,
        key: RegionKey,
        offset: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, StatusKind> {
        let slot = self.slot_of(key).ok_or(StatusKind::UnknownRegion)?;
        let region = self.slots[slot].region.ok_or(StatusKind::UnknownRegion)?;
        let end = offset.checked_add(len).ok_or(StatusKind::OutOfBounds)?;
        if end > region.len {
            return Err(StatusKind::OutOfBounds);
        }
        if !region.access.allows(need) {
            return Err(StatusKind::AccessDenied);
        }
        Ok(Resolved { segment: SegmentHandle(region.segment), offset: region.seg_offset + offset })
    }

    fn slot_of(&self, key: RegionKey) -> Option<usize> {
        let slot = (key.0 & ((1 << self.slot_bits) - 1)).checked_sub(1)? as usize;
        let generation = key.0 >> self.slot_bits;
        let s = self.slots.get(slot)?;
        (s.generation == generation && s.region.is_some()).then_some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: u64) -> RegistrationRecord {
        RegistrationRecord {
            key: RegionKey::NONE,
            segment: 7,
            seg_offset: 100,
            len,
            access: Access::READ_WRITE,
        }
    }

    #[test]
    fn resolve_checks_bounds_overflow_and_access() {
        let mut t = RegionTable::new(4);
        let k = t.insert(region(64)).unwrap();
        assert_ne!(k, RegionKey::NONE);
        assert_eq!(
            t.resolve(k, 0, 64, Access::READ),
            Ok(Resolved { segment: SegmentHandle(7), offset: 100 })
        );
        assert_eq!(t.resolve(k, 60, 4, Access::WRITE).unwrap().offset, 160);
        assert_eq!(t.resolve(k, 60, 5, Access::READ), Err(StatusKind::OutOfBounds));
        assert_eq!(t.resolve(k, u64::MAX, 2, Access::READ), Err(StatusKind::OutOfBounds));
        assert_eq!(t.resolve(k, 65, 0, Access::READ), Err(StatusKind::OutOfBounds));
        assert_eq!(t.resolve(RegionKey(0), 0, 1, Access::READ), Err(StatusKind::UnknownRegion));
        assert_eq!(t.resolve(RegionKey(k.0 + 1), 0, 1, Access::READ), Err(StatusKind::UnknownRegion));
        let ro = t.insert(RegistrationRecord { access: Access::READ, ..region(8) }).unwrap();
        assert_eq!(t.resolve(ro, 0, 8, Access::WRITE), Err(StatusKind::AccessDenied));
    }

    #[test]
    fn stale_keys_are_refused_after_slot_reuse() {
        let mut t = RegionTable::new(1);
        let k1 = t.insert(region(8)).unwrap();
        assert_eq!(t.insert(region(8)), Err(RegError::Full));
        t.remove(k1).unwrap();
        assert_eq!(t.remove(k1), Err(RegError::Unknown));
        let k2 = t.insert(region(8)).unwrap();
        assert_ne!(k1, k2, "same slot, new generation");
        assert_eq!(t.resolve(k1, 0, 1, Access::READ), Err(StatusKind::UnknownRegion));
        assert!(t.resolve(k2, 0, 1, Access::READ).is_ok());
        assert_eq!(t.drain().len(), 1);
        assert!(t.is_empty());
        assert_eq!(t.resolve(k2, 0, 1, Access::READ), Err(StatusKind::UnknownRegion));
    }

    #[test]
    fn keys_are_never_reissued_and_exhausted_slots_retire() {
        let mut t = RegionTable::with_generations(2, 3);
        let mut seen = std::collections::HashSet::new();
        // Two slots × three generations = six keys, all distinct, then the table is spent.
        for _ in 0..6 {
            let k = t.insert(region(8)).unwrap();
            assert!(seen.insert(k), "key {k:?} issued twice");
            t.remove(k).unwrap();
        }
        assert_eq!(t.insert(region(8)), Err(RegError::Full));
        for k in &seen {
            assert_eq!(t.resolve(*k, 0, 1, Access::READ), Err(StatusKind::UnknownRegion));
        }
        // Default split: 256 slots leave 23 bits of generation.
        let big = RegionTable::new(256);
        assert_eq!((big.slot_bits, big.max_generation), (9, (1 << 23) - 1));
    }
}
