//! A table of entries named by generation-tagged keys: a key outlives its entry harmlessly (a
//! late answer for a job the engine has let go of finds nothing), and slots are reused without
//! growing past the most entries ever held at once. Keys never have bit 63 set ([`TAGGED`]).
use alloc::vec::Vec;

/// The bit no key of a [`Slab`] has: free for a caller to tell keys of two tables apart.
pub(crate) const TAGGED: u64 = 1 << 63;

#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        // 31-bit generations: bit 63 of a key is never set, so a caller may tag keys of
        // another table with it (the engine's collective parts, `TAGGED`).
        slot.0 = slot.0.wrapping_add(1) & 0x7fff_ffff;
        slot.1 = Some(value);
        u64::from(slot.0) << 32 | u64::from(index)
    }

    fn slot(&self, key: u64) -> Option<&(u32, Option<T>)> {
        self.slots.get((key & 0xffff_ffff) as usize).filter(|s| u64::from(s.0) == key >> 32)
    }

    pub(crate) fn get(&self, key: u64) -> Option<&T> {
        self.slot(key)?.1.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        let slot = self.slots.get_mut((key & 0xffff_ffff) as usize)?;
        if u64::from(slot.0) != key >> 32 {
            return None;
        }
        slot.1.as_mut()
    }

    pub(crate) fn remove(&mut self, key: u64) -> Option<T> {
        let index = key & 0xffff_ffff;
        let slot = self.slots.get_mut(index as usize)?;
        if u64::from(slot.0) != key >> 32 {
            return None;
        }
        let value = slot.1.take()?;
        self.free.push(index as u32);
        Some(value)
    }

    /// The values held, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// The values held, in slot order, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|(_, v)| v.as_mut())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_key_finds_nothing_and_slots_are_reused() {
        let mut s = Slab::default();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_ne!(a, b, "same slot, new generation");
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
        assert_eq!(s.slots.len(), 1);
    }
}
