//! One host's registration table: fixed capacity, generation-checked keys, bounds-checked
//! resolution of (key, offset, len).
//!
//! A key is `generation << 16 | (slot + 1)`: slot 0..=65534 in the low half (so key 0 never
//! exists), a per-slot generation in the high half that changes at every deregistration, so a
//! stale key cannot reach a region registered later in the same slot.
use ringcast_abi::{Access, RegionKey, StatusKind};

/// Runner-assigned handle of the mapped memory behind a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentHandle(pub u64);

/// A registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Where its bytes live.
    pub segment: SegmentHandle,
    /// Offset of its first byte in the segment.
    pub seg_offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Rights.
    pub access: Access,
}

/// A resolved, bounds-checked reference into a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Segment holding the bytes.
    pub segment: SegmentHandle,
    /// Offset inside the segment.
    pub offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u16,
    region: Option<Region>,
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
    free: Vec<u16>,
}

impl RegionTable {
    /// A table of `capacity` slots (capacity <= 65535, checked by `Config::validate`).
    pub fn new(capacity: u32) -> Self {
        let capacity = capacity.min(u16::MAX as u32) as u16;
        RegionTable {
            slots: vec![
                Slot {
                    generation: 1,
                    region: None
                };
                capacity as usize
            ],
            // Pop from the end: lowest slots first.
            free: (0..capacity).rev().collect(),
        }
    }

    /// Registers `region`, returning its key.
    pub fn insert(&mut self, region: Region) -> Result<RegionKey, RegError> {
        let slot = self.free.pop().ok_or(RegError::Full)?;
        let s = &mut self.slots[slot as usize];
        s.region = Some(region);
        Ok(RegionKey((s.generation as u32) << 16 | (slot as u32 + 1)))
    }

    /// Removes the region `key` names.
    pub fn remove(&mut self, key: RegionKey) -> Result<Region, RegError> {
        let slot = self.slot_of(key).ok_or(RegError::Unknown)?;
        let s = &mut self.slots[slot];
        let region = s.region.take().ok_or(RegError::Unknown)?;
        // Generation 0 is skipped so that a key is never `generation 0, slot 0` = 0... and so a
        // wrapped generation still differs from the one just retired.
        s.generation = s.generation.wrapping_add(1).max(1);
        self.free.push(slot as u16);
        Ok(region)
    }

    /// Live regions, for tear-down.
    pub fn drain(&mut self) -> impl Iterator<Item = Region> + '_ {
        let free = &mut self.free;
        self.slots.iter_mut().enumerate().filter_map(move |(i, s)| {
            let r = s.region.take()?;
            s.generation = s.generation.wrapping_add(1).max(1);
            free.push(i as u16);
            Some(r)
        })
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
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
        Ok(Resolved {
            segment: region.segment,
            offset: region.seg_offset + offset,
        })
    }

    fn slot_of(&self, key: RegionKey) -> Option<usize> {
        let slot = (key.0 & 0xffff).checked_sub(1)? as usize;
        let generation = (key.0 >> 16) as u16;
        let s = self.slots.get(slot)?;
        (s.generation == generation && s.region.is_some()).then_some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: u64) -> Region {
        Region {
            segment: SegmentHandle(7),
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
            Ok(Resolved {
                segment: SegmentHandle(7),
                offset: 100
            })
        );
        assert_eq!(t.resolve(k, 60, 4, Access::WRITE).unwrap().offset, 160);
        assert_eq!(
            t.resolve(k, 60, 5, Access::READ),
            Err(StatusKind::OutOfBounds)
        );
        assert_eq!(
            t.resolve(k, u64::MAX, 2, Access::READ),
            Err(StatusKind::OutOfBounds)
        );
        assert_eq!(
            t.resolve(k, 65, 0, Access::READ),
            Err(StatusKind::OutOfBounds)
        );
        assert_eq!(
            t.resolve(RegionKey(0), 0, 1, Access::READ),
            Err(StatusKind::UnknownRegion)
        );
        assert_eq!(
            t.resolve(RegionKey(k.0 + 1), 0, 1, Access::READ),
            Err(StatusKind::UnknownRegion)
        );
        let ro = t
            .insert(Region {
                access: Access::READ,
                ..region(8)
            })
            .unwrap();
        assert_eq!(
            t.resolve(ro, 0, 8, Access::WRITE),
            Err(StatusKind::AccessDenied)
        );
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
        assert_eq!(
            t.resolve(k1, 0, 1, Access::READ),
            Err(StatusKind::UnknownRegion)
        );
        assert!(t.resolve(k2, 0, 1, Access::READ).is_ok());
        assert_eq!(t.drain().count(), 1);
        assert!(t.is_empty());
        assert_eq!(
            t.resolve(k2, 0, 1, Access::READ),
            Err(StatusKind::UnknownRegion)
        );
    }
}
