//! Synchronisation primitives the ring algorithm is written against, swapped for loom's under
//! `cfg(loom)` (the crossbeam habit).
//!
//! Contract: the ring code in `ring.rs` touches shared state only through [`AtomicU64`],
//! [`AtomicU32`] (the doorbell words), [`fence`], [`Ordering`] and [`Slots`]. In a normal build `AtomicU64` is `core`'s, overlaid on the `u64`
//! `head`/`tail` fields of the shared-memory control block, and `Slots` is a raw pointer to slot 0;
//! under loom, both point into a heap block of loom atomics and loom `UnsafeCell`s (loom types
//! cannot overlay raw memory), so loom checks both the orderings and the slot accesses. The
//! algorithm code is the same in both builds.
//!
//! The peer is another process. The SAFETY arguments below assume it follows the protocol; one
//! that does not (writes a slot it has handed over) races with our copy, which Rust's memory
//! model cannot describe across address spaces. What it can do to us is bounded all the same:
//! slots are only ever copied with raw-pointer copies into locals (no reference to shared
//! memory exists, so no aliasing assumption can break), entries are `FromBytes` (every bit
//! pattern is a valid value), and the engine validates every descriptor it copies out. A torn
//! entry is bad input, answered like any other. The one exception is the `shm` fabric's frame
//! rings, whose consumer lends its handler a shared slice over a frame in its slot
//! (`frame_ring::take_frame`): there the peer is a process of the job's own user, whose rights
//! over our memory that fabric's threat model already concedes (see the SAFETY comment there).

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use core::ptr::NonNull;

/// The slot array of one ring: `capacity` entries of `T`, addressed by index `< capacity`.
///
/// It does not own the memory; the `Producer`/`Consumer` holding it keeps the owner alive.
#[cfg(not(loom))]
pub(crate) struct Slots<T> {
    base: NonNull<T>,
}

#[cfg(not(loom))]
impl<T: Copy> Slots<T> {
    /// # Safety
    /// `base` points to `capacity` slots of `T`, aligned for `T`, valid for reads and writes as
    /// long as this value is used.
    pub(crate) unsafe fn new(base: NonNull<T>) -> Self {
        Slots { base }
    }

    /// Writes `items` into slots `start..start + items.len()`.
    ///
    /// # Safety
    /// `start + items.len() <= capacity`, and the protocol gives the caller (the producer) sole
    /// access to those slots: the consumer has released them.
    pub(crate) unsafe fn write_run(&self, start: usize, items: &[T]) {
        // SAFETY: the caller guarantees the destination range is inside the slot array and not
        // being read by the consumer; `items` is caller memory, never part of the slot array, so
        // the ranges do not overlap. `T: Copy` so no destructor is skipped.
        unsafe { core::ptr::copy_nonoverlapping(items.as_ptr(), self.base.as_ptr().add(start), items.len()) }
    }

    /// Reads slots `start..start + out.len()` into `out`.
    ///
    /// # Safety
    /// `start + out.len() <= capacity`, and the protocol gives the caller (the consumer) sole
    /// access to those slots: the producer has published them. `T` must accept every bit pattern
    /// (the ring requires `T: FromBytes`).
    pub(crate) unsafe fn read_run(&self, start: usize, out: &mut [T]) {
        // SAFETY: the source range is inside the slot array and published to us (caller);
        // `out` is caller memory, distinct from the slot array. Any bit pattern is a valid `T`.
        unsafe { core::ptr::copy_nonoverlapping(self.base.as_ptr().add(start), out.as_mut_ptr(), out.len()) }
    }

    /// Writes one slot. Same contract as [`Slots::write_run`] with one item.
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        // SAFETY: forwarded from the caller: `i < capacity` and the slot is ours to write.
        unsafe { self.base.as_ptr().add(i).write(v) }
    }

    /// Reads one slot. Same contract as [`Slots::read_run`] with one item.
    pub(crate) unsafe fn read(&self, i: usize) -> T {
        // SAFETY: forwarded from the caller: `i < capacity` and the slot is published to us.
        unsafe { self.base.as_ptr().add(i).read() }
    }

    /// Runs `f` with a pointer to slot `i`, to write it in place. Same contract as
    /// [`Slots::write`]. The slot is handed over as a raw pointer, never a reference: a peer
    /// process that breaks the protocol may write the same memory at any time.
    pub(crate) unsafe fn with_mut<R>(&self, i: usize, f: impl FnOnce(*mut T) -> R) -> R {
        // SAFETY: forwarded from the caller: `i < capacity`, so the pointer is in the slot array.
        f(unsafe { self.base.as_ptr().add(i) })
    }

    /// Runs `f` with a pointer to slot `i`, to read it in place. Same contract as
    /// [`Slots::read`]; a raw pointer for the same reason as [`Slots::with_mut`].
    pub(crate) unsafe fn with<R>(&self, i: usize, f: impl FnOnce(*const T) -> R) -> R {
        // SAFETY: forwarded from the caller: `i < capacity`, so the pointer is in the slot array.
        f(unsafe { self.base.as_ptr().add(i) })
    }
}

/// Loom build: the slots are loom `UnsafeCell`s so that loom reports a producer write racing
/// with a consumer read of the same slot.
#[cfg(loom)]
pub(crate) struct Slots<T> {
    base: NonNull<loom::cell::UnsafeCell<T>>,
}

#[cfg(loom)]
impl<T: Copy> Slots<T> {
    /// # Safety
    /// `base` points to `capacity` cells, valid as long as this value is used.
    pub(crate) unsafe fn new(base: NonNull<loom::cell::UnsafeCell<T>>) -> Self {
        Slots { base }
    }

    /// See the non-loom version.
    pub(crate) unsafe fn write_run(&self, start: usize, items: &[T]) {
        for (k, v) in items.iter().enumerate() {
            // SAFETY: forwarded from the caller.
            unsafe { self.write(start + k, *v) }
        }
    }

    /// See the non-loom version.
    pub(crate) unsafe fn read_run(&self, start: usize, out: &mut [T]) {
        for (k, o) in out.iter_mut().enumerate() {
            // SAFETY: forwarded from the caller.
            *o = unsafe { self.read(start + k) };
        }
    }

    /// See the non-loom version.
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        // SAFETY: `i < capacity` (caller), so the cell exists; loom checks exclusivity.
        let cell = unsafe { &*self.base.as_ptr().add(i) };
        // SAFETY: the protocol gives the producer sole access to this slot (loom verifies).
        cell.with_mut(|p| unsafe { p.write(v) })
    }

    /// See the non-loom version.
    pub(crate) unsafe fn read(&self, i: usize) -> T {
        // SAFETY: `i < capacity` (caller), so the cell exists; loom checks exclusivity.
        let cell = unsafe { &*self.base.as_ptr().add(i) };
        // SAFETY: the slot was published to the consumer (loom verifies); initialised at creation.
        cell.with(|p| unsafe { p.read() })
    }

    /// See the non-loom version.
    pub(crate) unsafe fn with_mut<R>(&self, i: usize, f: impl FnOnce(*mut T) -> R) -> R {
        // SAFETY: `i < capacity` (caller), so the cell exists; loom checks exclusivity.
        let cell = unsafe { &*self.base.as_ptr().add(i) };
        cell.with_mut(f)
    }

    /// See the non-loom version.
    pub(crate) unsafe fn with<R>(&self, i: usize, f: impl FnOnce(*const T) -> R) -> R {
        // SAFETY: `i < capacity` (caller), so the cell exists; loom checks exclusivity.
        let cell = unsafe { &*self.base.as_ptr().add(i) };
        cell.with(f)
    }
}
