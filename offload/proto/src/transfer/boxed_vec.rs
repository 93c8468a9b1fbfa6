//! A vector a protocol rarely grows, one word until it does: the pre-posted slots, a root's
//! payload sums and `READY`s, spare bitmaps and MAC states, barriers, a root's first hops. Inline
//! `Vec`s of these cost a communicator and its protocol 24 bytes each whether used or not — 216
//! bytes a simulated rank of a million, which uses none of them. The vector is made (boxed) the
//! first time it grows and kept for the protocol's life: like the `Vec` it replaces, it grows
//! only where the `Vec` did (a communicator's first use of a table, never per fragment), and
//! reading it costs one pointer more per call, not per byte.
use alloc::boxed::Box;
use alloc::vec::Vec;

/// A `Vec<T>` behind a box made at its first growth (see the module doc). Reads as a slice.
/// The box is the point: one word while unused, where a `Vec` is three.
#[allow(clippy::box_collection)]
#[derive(Debug)]
pub(crate) struct BoxedVec<T>(Option<Box<Vec<T>>>);

impl<T> Default for BoxedVec<T> {
    fn default() -> Self {
        BoxedVec(None)
    }
}

impl<T> BoxedVec<T> {
    /// The vector, made empty now if it was not yet: for growing it.
    pub(crate) fn vec(&mut self) -> &mut Vec<T> {
        self.0.get_or_insert_with(|| Box::new(Vec::new()))
    }

    /// The vector, if it was ever made.
    pub(crate) fn made(&mut self) -> Option<&mut Vec<T>> {
        self.0.as_deref_mut()
    }

    /// Its last element, removed (`None` if empty or never made).
    pub(crate) fn pop(&mut self) -> Option<T> {
        self.0.as_mut()?.pop()
    }

    /// Its elements moved out, leaving it empty (its memory kept).
    pub(crate) fn take(&mut self) -> Vec<T> {
        self.0.as_mut().map(|v| core::mem::take(&mut **v)).unwrap_or_default()
    }

    /// `v` put back as its elements (after [`BoxedVec::take`]): nothing is made for an empty,
    /// unallocated `v`.
    pub(crate) fn restore(&mut self, v: Vec<T>) {
        match &mut self.0 {
            Some(b) => **b = v,
            None if v.capacity() == 0 => {}
            None => self.0 = Some(Box::new(v)),
        }
    }
}

impl<T> core::ops::Deref for BoxedVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl<T> core::ops::DerefMut for BoxedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.0 {
            Some(v) => v.as_mut_slice(),
            None => &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BoxedVec;

    /// Empty and one word until grown; then a vector like any other, its memory kept across
    /// `take`/`restore`.
    #[test]
    fn grows_on_first_use_and_keeps_its_memory() {
        assert_eq!(core::mem::size_of::<BoxedVec<u64>>(), 8);
        let mut v: BoxedVec<u32> = BoxedVec::default();
        assert!(v.is_empty() && v.pop().is_none() && v.take().is_empty());
        v.restore(alloc::vec::Vec::new());
        assert!(v.0.is_none(), "restoring nothing makes nothing");
        v.vec().extend([1, 2, 3]);
        assert_eq!(&*v, &[1, 2, 3]);
        v[0] = 7;
        assert_eq!(v.pop(), Some(3));
        let taken = v.take();
        assert_eq!(taken, [7, 2]);
        assert!(v.is_empty());
        v.restore(taken);
        assert_eq!(&*v, &[7, 2]);
    }
}
