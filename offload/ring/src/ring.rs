//! The single-producer single-consumer ring over a `ringcast_abi::RingControl` block.
//!
//! Contract:
//! * one [`Producer`] and one [`Consumer`] per ring, possibly in different processes; the types
//!   are `Send` but neither `Sync` nor `Clone`, so within a process the type system enforces it;
//! * `tail` (producer line) and `head` (consumer line) are free-running `u64` counters; slot of
//!   position `i` is `i & (capacity - 1)`;
//! * each side keeps its own index locally (it is the only writer) and a cached copy of the other
//!   side's index, re-read only when the cache says full (producer) or empty (consumer);
//! * batch operations publish with one `Release` store (two on a mirrored ring: the index, then
//!   its mirror — `set_mirrored`, for rings whose other end is played by DMA);
//! * nothing the peer writes can make this code panic or access memory outside the ring: a
//!   consumer that sees `tail - head > capacity` (or `tail < head`) returns
//!   [`RingError::Corrupt`]; a producer that sees a bogus `head` treats the ring as full.
//!   Slot indices are always masked, so a slot access never leaves the slot array.
mod channel;
pub use channel::channel;

use crate::primitive::{Ordering, Slots};
use crate::{Entry, RingError};
use core::marker::PhantomData;
use core::ptr::NonNull;
use std::sync::Arc;

use crate::primitive::{fence, AtomicU32, AtomicU64};
#[cfg(loom)]
use ringcast_abi::RingRole;
#[cfg(not(loom))]
use ringcast_abi::{
    ring::RING_MAGIC, ConsumerIndex, ProducerIndex, RingControl, RingHeader, RingRole, ABI_VERSION,
};

#[cfg(not(loom))]
mod layout_checks {
    use core::mem::{align_of, offset_of, size_of};
    use core::sync::atomic::AtomicU64;
    use ringcast_abi::{ConsumerIndex, ProducerIndex, RingControl};
    use static_assertions::const_assert_eq;

    // The atomic view of `head`/`tail` overlays the `u64` fields of the ABI block.
    const_assert_eq!(size_of::<AtomicU64>(), size_of::<u64>());
    const_assert_eq!(align_of::<AtomicU64>(), align_of::<u64>());
    const_assert_eq!(align_of::<AtomicU64>(), 8);
    const_assert_eq!(offset_of!(RingControl, producer) + offset_of!(ProducerIndex, tail), super::TAIL_OFFSET);
    const_assert_eq!(offset_of!(RingControl, consumer) + offset_of!(ConsumerIndex, head), super::HEAD_OFFSET);
    // The doorbell words overlay the `u32` fields beside them.
    const_assert_eq!(size_of::<core::sync::atomic::AtomicU32>(), 4);
    const_assert_eq!(align_of::<core::sync::atomic::AtomicU32>(), 4);
    const_assert_eq!(offset_of!(RingControl, producer) + offset_of!(ProducerIndex, bell), super::BELL_OFFSET);
    const_assert_eq!(
        offset_of!(RingControl, consumer) + offset_of!(ConsumerIndex, waiting),
        super::WAITING_OFFSET
    );
    const_assert_eq!(
        offset_of!(RingControl, producer) + offset_of!(ProducerIndex, tail_mirror),
        super::TAIL_MIRROR_OFFSET
    );
    const_assert_eq!(
        offset_of!(RingControl, consumer) + offset_of!(ConsumerIndex, head_mirror),
        super::HEAD_MIRROR_OFFSET
    );
    const_assert_eq!(RingControl::SLOTS_OFFSET, 384);
    const_assert_eq!(align_of::<RingControl>(), super::RING_ALIGN);
    // `head` and `tail` are on different cache-line units.
    const_assert_eq!(super::HEAD_OFFSET - super::TAIL_OFFSET, ringcast_abi::CACHE_LINE);
}

/// Byte offset of `tail` in the control block.
#[cfg(not(loom))]
const TAIL_OFFSET: usize = 128;
/// Byte offset of `head` in the control block.
#[cfg(not(loom))]
const HEAD_OFFSET: usize = 256;
/// Byte offset of the producer's `bell` in the control block.
#[cfg(not(loom))]
const BELL_OFFSET: usize = 136;
/// Byte offset of the consumer's `waiting` in the control block.
#[cfg(not(loom))]
const WAITING_OFFSET: usize = 264;
#[cfg(not(loom))]
const TAIL_MIRROR_OFFSET: usize = 144;
#[cfg(not(loom))]
const HEAD_MIRROR_OFFSET: usize = 272;
/// Required alignment of a ring's start.
pub const RING_ALIGN: usize = 128;

/// Bytes needed for a ring of `capacity` entries of `T` (control block + slots). Saturates at
/// `usize::MAX` instead of overflowing (such a ring can never be attached).
pub const fn footprint<T>(capacity: u32) -> usize {
    let slots = (capacity as usize).saturating_mul(core::mem::size_of::<T>());
    ringcast_abi::RingControl::SLOTS_OFFSET.saturating_add(slots)
}

/// Checks `capacity` is a power of two `>= 2`.
fn check_capacity(capacity: u32) -> Result<(), RingError> {
    if capacity >= 2 && capacity.is_power_of_two() {
        Ok(())
    } else {
        Err(RingError::BadCapacity(capacity))
    }
}

/// Size of `T` as the header's `u32`, and a check that slots of `T` are aligned at 384 + k·size.
fn entry_size<T>() -> Result<u32, RingError> {
    if core::mem::align_of::<T>() > RING_ALIGN {
        return Err(RingError::Misaligned);
    }
    u32::try_from(core::mem::size_of::<T>())
        .map_err(|_| RingError::EntrySize { found: u32::MAX, expected: u32::MAX })
}

/// Initialise a ring control block at `mem` (creator side): writes the header (magic,
/// [`ABI_VERSION`], `role`, entry size = `size_of::<T>()`, `capacity`) and zeroes head and tail.
/// Slots are left as they are. `capacity` must be a power of two `>= 2`; `mem` must be
/// 128-aligned and `len >= footprint::<T>(capacity)`.
///
/// # Safety
/// `mem` is valid for writes of `len` bytes, and nobody else reads or writes the control block
/// while this runs (the ring is not yet shared, or every attached side is gone).
#[cfg(not(loom))]
pub unsafe fn init<T: Entry>(
    mem: NonNull<u8>,
    len: usize,
    role: RingRole,
    capacity: u32,
) -> Result<(), RingError> {
    if mem.as_ptr() as usize & (RING_ALIGN - 1) != 0 {
        return Err(RingError::Misaligned);
    }
    check_capacity(capacity)?;
    let entry_size = entry_size::<T>()?;
    let need = footprint::<T>(capacity);
    if len < need {
        return Err(RingError::TooSmall { need, have: len });
    }
    let control = RingControl {
        header: RingHeader {
            magic: RING_MAGIC,
            abi_version: ABI_VERSION,
            role,
            entry_size,
            capacity,
            _pad: [0; 104],
        },
        producer: ProducerIndex { tail: 0, bell: 0, _pad0: 0, tail_mirror: 0, _pad: [0; 104] },
        consumer: ConsumerIndex { head: 0, waiting: 0, _pad0: 0, head_mirror: 0, _pad: [0; 104] },
    };
    // SAFETY: `mem` is 128-aligned (checked; `RingControl` has alignment 128) and valid for
    // writes of `len >= SLOTS_OFFSET` bytes (checked; caller guarantees validity), and nobody
    // else accesses it now (caller).
    unsafe { mem.cast::<RingControl>().as_ptr().write(control) };
    Ok(())
}

/// The validated geometry of an attached ring.
#[cfg(not(loom))]
struct Geometry {
    capacity: u32,
}

/// Validates the header at `mem` for a ring of `T` in `role`.
///
/// # Safety
/// `mem` is valid for reads of `len` bytes and the header is not written concurrently.
#[cfg(not(loom))]
unsafe fn validate<T: Entry>(mem: NonNull<u8>, len: usize, role: RingRole) -> Result<Geometry, RingError> {
    if mem.as_ptr() as usize & (RING_ALIGN - 1) != 0 {
        return Err(RingError::Misaligned);
    }
    if len < RingControl::SLOTS_OFFSET {
        return Err(RingError::TooSmall { need: RingControl::SLOTS_OFFSET, have: len });
    }
    let expected = entry_size::<T>()?;
    // SAFETY: aligned and in bounds (checked above), readable (caller), not written concurrently
    // (caller: the header is written once, before the ring is shared). Every bit pattern is a
    // valid `RingHeader` (it is `FromBytes`).
    let header = unsafe { mem.cast::<RingHeader>().as_ptr().read() };
    if header.magic != RING_MAGIC {
        return Err(RingError::BadMagic);
    }
    if header.abi_version != ABI_VERSION {
        return Err(RingError::AbiMismatch { found: header.abi_version });
    }
    if header.role != role {
        return Err(RingError::WrongRole);
    }
    if header.entry_size != expected {
        return Err(RingError::EntrySize { found: header.entry_size, expected });
    }
    check_capacity(header.capacity)?;
    let need = footprint::<T>(header.capacity);
    if len < need {
        return Err(RingError::TooSmall { need, have: len });
    }
    Ok(Geometry { capacity: header.capacity })
}

/// Pointers to the shared parts of one ring: the two indices and the slots.
struct RawRing<T> {
    tail: NonNull<AtomicU64>,
    head: NonNull<AtomicU64>,
    tail_mirror: NonNull<AtomicU64>,
    head_mirror: NonNull<AtomicU64>,
    bell: NonNull<AtomicU32>,
    waiting: NonNull<AtomicU32>,
    slots: Slots<T>,
    /// `capacity - 1`.
    mask: u64,
    capacity: u64,
    /// The other end is played by DMA: indices are stored twice and read checked (see the
    /// ABI's "Mirrored indices").
    mirrored: bool,
}

impl<T: Entry> RawRing<T> {
    /// Views the ring at `mem`, whose header was validated with capacity `capacity`.
    ///
    /// # Safety
    /// `mem` is 128-aligned and valid for reads and writes of `footprint::<T>(capacity)` bytes
    /// while the returned value is used; `head`/`tail` are only ever accessed atomically.
    #[cfg(not(loom))]
    unsafe fn from_memory(mem: NonNull<u8>, capacity: u32) -> Self {
        // SAFETY: all seven offsets are inside the validated footprint, so `add` stays in the
        // allocation; the results are non-null because `mem` is, and aligned for their types
        // (8 for the indices, 4 for the doorbell words; `mem` is 128-aligned).
        let (tail, head, tail_mirror, head_mirror, bell, waiting, slots) = unsafe {
            (
                mem.add(TAIL_OFFSET).cast::<AtomicU64>(),
                mem.add(HEAD_OFFSET).cast::<AtomicU64>(),
                mem.add(TAIL_MIRROR_OFFSET).cast::<AtomicU64>(),
                mem.add(HEAD_MIRROR_OFFSET).cast::<AtomicU64>(),
                mem.add(BELL_OFFSET).cast::<AtomicU32>(),
                mem.add(WAITING_OFFSET).cast::<AtomicU32>(),
                mem.add(RingControl::SLOTS_OFFSET).cast::<T>(),
            )
        };
        RawRing {
            tail,
            head,
            tail_mirror,
            head_mirror,
            bell,
            waiting,
            // SAFETY: slot 0 is at 384 = 3·128 from a 128-aligned base and `align_of::<T>() <=
            // 128` (validated), so every slot is aligned; the caller guarantees validity.
            slots: unsafe { Slots::new(slots) },
            mask: u64::from(capacity) - 1,
            capacity: u64::from(capacity),
            mirrored: false,
        }
    }

    /// Validates the ring header at `mem` (see [`validate`]) and views the ring.
    ///
    /// # Safety
    /// As for [`validate`] and [`RawRing::from_memory`].
    #[cfg(not(loom))]
    unsafe fn open(mem: NonNull<u8>, len: usize, role: RingRole) -> Result<Self, RingError> {
        // SAFETY: forwarded from our caller.
        let geometry = unsafe { validate::<T>(mem, len, role)? };
        // SAFETY: validated alignment and footprint; validity from our caller.
        Ok(unsafe { RawRing::from_memory(mem, geometry.capacity) })
    }

    /// Both indices, read with Acquire (once, at attach), checked to describe a possible state.
    fn indices(&self) -> Result<(u64, u64), RingError> {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        if tail.wrapping_sub(head) > self.capacity {
            return Err(RingError::Corrupt { head, tail });
        }
        Ok((head, tail))
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: `tail` points to an aligned 8-byte word of the control block (or a loom
        // atomic), alive while `self` is (the owner `Arc` lives in the same Producer/Consumer),
        // and only accessed atomically by everyone (the ring protocol).
        unsafe { self.tail.as_ref() }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`.
        unsafe { self.head.as_ref() }
    }

    fn tail_mirror(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`.
        unsafe { self.tail_mirror.as_ref() }
    }

    fn head_mirror(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`.
        unsafe { self.head_mirror.as_ref() }
    }

    fn bell(&self) -> &AtomicU32 {
        // SAFETY: as for `tail`: an aligned 4-byte word of the control block (or a loom atomic)
        // that every party accesses only atomically.
        unsafe { self.bell.as_ref() }
    }

    fn waiting(&self) -> &AtomicU32 {
        // SAFETY: as for `bell`.
        unsafe { self.waiting.as_ref() }
    }

    /// The producer's `tail` (Acquire); on a mirrored ring `None` while the far side's store of
    /// it may be incomplete (mirror read first, then the index; trusted when equal).
    fn load_tail(&self) -> Option<u64> {
        if !self.mirrored {
            return Some(self.tail().load(Ordering::Acquire));
        }
        let mirror = self.tail_mirror().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        (mirror == tail).then_some(tail)
    }

    /// The consumer's `head`, as [`RawRing::load_tail`].
    fn load_head(&self) -> Option<u64> {
        if !self.mirrored {
            return Some(self.head().load(Ordering::Acquire));
        }
        let mirror = self.head_mirror().load(Ordering::Acquire);
        let head = self.head().load(Ordering::Acquire);
        (mirror == head).then_some(head)
    }

    /// Stores `tail` (Release), then its mirror on a mirrored ring.
    fn store_tail(&self, tail: u64) {
        self.tail().store(tail, Ordering::Release);
        if self.mirrored {
            self.tail_mirror().store(tail, Ordering::Release);
        }
    }

    /// Stores `head` (Release), then its mirror on a mirrored ring.
    fn store_head(&self, head: u64) {
        self.head().store(head, Ordering::Release);
        if self.mirrored {
            self.head_mirror().store(head, Ordering::Release);
        }
    }

    /// Slot index of position `pos`.
    fn index(&self, pos: u64) -> usize {
        // Masked, so always `< capacity`: no peer value can index outside the slot array.
        (pos & self.mask) as usize
    }
}

/// The writing side of a ring.
///
/// `Send` (it may move to the thread that produces) but not `Sync` and not `Clone`: there is
/// exactly one producer. Aligned to the cache-line unit so that the producer's hot fields never
/// share a line with the consumer's, wherever both are placed.
#[repr(align(128))]
pub struct Producer<T: Entry> {
    ring: RawRing<T>,
    /// Our own index: positions `< tail` are published. We are its only writer.
    tail: u64,
    /// Last value of the consumer's `head` we read.
    cached_head: u64,
    /// Keeps the memory behind `ring` alive.
    _owner: Arc<dyn Send + Sync>,
    /// `*const ()`-like marker: not `Sync`.
    _not_sync: PhantomData<*const ()>,
}

// SAFETY: a `Producer` only holds pointers into memory kept alive by `_owner` (which is
// `Send + Sync`) and values; moving it to another thread moves the whole producer role with it.
// It is not `Sync`: `&Producer` offers `in_flight`, which is harmless, but all mutation needs
// `&mut`, and we keep it `!Sync` anyway to mirror the single-producer role.
unsafe impl<T: Entry> Send for Producer<T> {}

impl<T: Entry> Producer<T> {
    /// Attach as the single producer of the ring at `mem`: validates magic, ABI version, role,
    /// entry size, capacity, `len` and alignment (128). `owner` keeps the memory alive as long
    /// as the `Producer` lives.
    ///
    /// # Safety
    /// * `mem` is valid for reads and writes of `len` bytes for as long as `owner` is alive;
    /// * no other producer is attached to this ring (in any process);
    /// * the header is not modified while attached, and `head`/`tail` are accessed only
    ///   atomically by every party.
    #[cfg(not(loom))]
    pub unsafe fn attach(
        mem: NonNull<u8>,
        len: usize,
        role: RingRole,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<Self, RingError> {
        // SAFETY: forwarded from our caller.
        let ring = unsafe { RawRing::open(mem, len, role)? };
        Self::from_raw(ring, owner)
    }

    fn from_raw(ring: RawRing<T>, owner: Arc<dyn Send + Sync>) -> Result<Self, RingError> {
        // `head` Acquire pairs with the consumer's Release store, so slots it released are free
        // for us; our own `tail` may have been written by a previous producer.
        let (head, tail) = ring.indices()?;
        Ok(Producer { ring, tail, cached_head: head, _owner: owner, _not_sync: PhantomData })
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.ring.capacity as usize
    }

    /// Free slots according to the cached head. A bogus head (`head > tail` or more than
    /// `capacity` behind) reads as "no free slot".
    fn cached_free(&self) -> u64 {
        let used = self.tail.wrapping_sub(self.cached_head);
        self.ring.capacity.saturating_sub(used)
    }

    /// Re-reads the consumer's `head`.
    fn refresh_head(&mut self) {
        // Acquire: pairs with the consumer's Release store of `head` after it read the slots;
        // so its reads of the slots we are about to overwrite happen before our writes.
        if let Some(head) = self.ring.load_head() {
            self.cached_head = head;
        }
    }

    /// The consumer is played by DMA (host-owned rings): from now on every `tail` store is
    /// mirrored and `head` is trusted only when it equals its mirror (see the ABI's "Mirrored
    /// indices"). Called once, before the ring is shared.
    pub fn set_mirrored(&mut self) {
        self.ring.mirrored = true;
        self.ring.store_tail(self.tail);
    }

    /// Publishes positions up to `self.tail`.
    fn publish(&self) {
        // Release: pairs with the consumer's Acquire load of `tail`; our slot writes before this
        // store are visible to the consumer once it sees the new tail.
        self.ring.store_tail(self.tail);
    }

    /// Pushes one entry, or gives it back when the ring is full.
    pub fn try_push(&mut self, v: T) -> Result<(), T> {
        if self.cached_free() == 0 {
            self.refresh_head();
            if self.cached_free() == 0 {
                return Err(v);
            }
        }
        let i = self.ring.index(self.tail);
        // SAFETY: `i < capacity` (masked); the slot is free: `tail - head < capacity`, so the
        // consumer has released position `tail - capacity` (Acquire on head above or earlier).
        unsafe { self.ring.slots.write(i, v) };
        self.tail = self.tail.wrapping_add(1);
        self.publish();
        Ok(())
    }

    /// Pushes one entry written in place through the pointer `fill` gets, or returns false
    /// (without calling it) when the ring is full. The slot holds stale contents; `fill` must
    /// write every field the consumer reads. For large slots only partly used (a 4 KiB frame
    /// slot holding a 1.5 KiB datagram: [`crate::frame_ring::push_frame`]) this saves building
    /// a `T` and copying all of it in. A raw pointer, not a reference: the slot is in memory a
    /// peer process could write against the protocol.
    pub fn try_push_raw(&mut self, fill: impl FnOnce(*mut T)) -> bool {
        if self.cached_free() == 0 {
            self.refresh_head();
            if self.cached_free() == 0 {
                return false;
            }
        }
        let i = self.ring.index(self.tail);
        // SAFETY: as in `try_push`: `i < capacity` and the slot is free, ours until published.
        unsafe { self.ring.slots.with_mut(i, fill) };
        self.tail = self.tail.wrapping_add(1);
        self.publish();
        true
    }

    /// Pushes as many of `items` as fit, in order, with one `Release` store of `tail`; returns
    /// how many were pushed.
    pub fn push_batch(&mut self, items: &[T]) -> usize {
        if (self.cached_free() as usize) < items.len() {
            self.refresh_head();
        }
        let n = items.len().min(self.cached_free() as usize);
        if n == 0 {
            return 0;
        }
        let start = self.ring.index(self.tail);
        let first = n.min(self.capacity() - start);
        // SAFETY: `start + first <= capacity` and `first + (n - first) = n <= free` slots, all
        // released by the consumer (see `try_push`); the second run starts at slot 0 and has
        // `n - first < capacity` entries.
        unsafe {
            self.ring.slots.write_run(start, &items[..first]);
            self.ring.slots.write_run(0, &items[first..n]);
        }
        self.tail = self.tail.wrapping_add(n as u64);
        self.publish();
        n
    }

    /// Whether the consumer said it sleeps waiting for entries ([`Consumer::arm`]): a hint
    /// for a producer choosing how to wait itself (a consumer asleep posts nothing of its
    /// own), never a reason to skip [`Producer::wake_consumer`].
    pub fn consumer_asleep(&self) -> bool {
        self.ring.waiting().load(Ordering::Acquire) != 0
    }

    /// Rings the doorbell after a publish: when the consumer said it is about to sleep
    /// ([`Consumer::arm`]), bumps the bell and wakes it (a futex wake: one system call, only
    /// then). Returns whether it rang. A consumer that never sleeps costs one fence and one
    /// load here.
    pub fn wake_consumer(&self) -> bool {
        // SeqCst fence: orders our `tail` store before the `waiting` load against the consumer's
        // `waiting` store and `tail` load (its fence in `arm`): either it sees our entries, or
        // we see it waiting — never neither (the lost-wakeup case).
        fence(Ordering::SeqCst);
        if self.ring.waiting().load(Ordering::Relaxed) == 0 {
            return false;
        }
        // The bump makes a sleep that has not started yet return at once (its expected value
        // is stale); the wake ends one that has.
        self.ring.bell().fetch_add(1, Ordering::SeqCst);
        crate::doorbell::wake(self.ring.bell());
        true
    }

    /// Free slots, after re-reading the consumer's index.
    pub fn free_slots(&mut self) -> usize {
        self.refresh_head();
        self.cached_free() as usize
    }

    /// Entries published but not yet consumed (reads the consumer's index). A bogus consumer
    /// index reads as `capacity`.
    pub fn in_flight(&self) -> usize {
        // Acquire: as in `refresh_head` (an observer's read; nothing is written after it). A
        // mirrored head mid-store counts as the last one we trusted.
        let head = self.ring.load_head().unwrap_or(self.cached_head);
        let used = self.tail.wrapping_sub(head);
        used.min(self.ring.capacity) as usize
    }
}

/// The reading side of a ring.
///
/// `Send` but not `Sync` and not `Clone`: there is exactly one consumer. Cache-line aligned like
/// [`Producer`].
#[repr(align(128))]
pub struct Consumer<T: Entry> {
    ring: RawRing<T>,
    /// Our own index: positions `< head` are consumed. We are its only writer.
    head: u64,
    /// Last value of the producer's `tail` we read; always validated (`cached_tail - head <=
    /// capacity`) or equal to `head`.
    cached_tail: u64,
    _owner: Arc<dyn Send + Sync>,
    _not_sync: PhantomData<*const ()>,
}

// SAFETY: as for `Producer`: pointers into memory kept alive by the `Send + Sync` owner, plus
// plain values; the consumer role moves with the value.
unsafe impl<T: Entry> Send for Consumer<T> {}

impl<T: Entry> Consumer<T> {
    /// Attach as the single consumer of the ring at `mem`; validation as for
    /// [`Producer::attach`].
    ///
    /// # Safety
    /// As for [`Producer::attach`], with "no other consumer attached".
    #[cfg(not(loom))]
    pub unsafe fn attach(
        mem: NonNull<u8>,
        len: usize,
        role: RingRole,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<Self, RingError> {
        // SAFETY: forwarded from our caller.
        let ring = unsafe { RawRing::open(mem, len, role)? };
        Self::from_raw(ring, owner)
    }

    fn from_raw(ring: RawRing<T>, owner: Arc<dyn Send + Sync>) -> Result<Self, RingError> {
        // `tail` Acquire: see `refresh_tail`; `head` may have been written by a previous consumer.
        let (head, tail) = ring.indices()?;
        Ok(Consumer { ring, head, cached_tail: tail, _owner: owner, _not_sync: PhantomData })
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.ring.capacity as usize
    }

    /// Re-reads the producer's `tail` and returns the validated number of filled slots.
    fn refresh_tail(&mut self) -> Result<u64, RingError> {
        // Acquire: pairs with the producer's Release store of `tail`; its slot writes before
        // that store are visible to our reads of positions `< tail`.
        let Some(tail) = self.ring.load_tail() else {
            // A store from the far side still in progress: what we had is still true.
            return Ok(self.cached_filled());
        };
        let filled = tail.wrapping_sub(self.head);
        if filled > self.ring.capacity {
            // Keep the cache valid (empty) so the next call re-reads and re-checks.
            self.cached_tail = self.head;
            return Err(RingError::Corrupt { head: self.head, tail });
        }
        self.cached_tail = tail;
        Ok(filled)
    }

    /// Filled slots according to the cache (validated when it was loaded).
    fn cached_filled(&self) -> u64 {
        self.cached_tail.wrapping_sub(self.head)
    }

    /// Releases positions up to `self.head` to the producer.
    fn release(&self) {
        // Release: pairs with the producer's Acquire load of `head`; our slot reads before this
        // store happen before the producer overwrites those slots.
        self.ring.store_head(self.head);
    }

    /// The producer is played by DMA (host-owned rings): every `head` store is mirrored and
    /// `tail` trusted only when it equals its mirror. Called once, before the ring is shared.
    pub fn set_mirrored(&mut self) {
        self.ring.mirrored = true;
        self.ring.store_head(self.head);
    }

    /// Pops one entry; `Ok(None)` when empty, `Err(Corrupt)` when the producer's `tail` is more
    /// than `capacity` ahead of `head` or behind it.
    pub fn try_pop(&mut self) -> Result<Option<T>, RingError> {
        if self.cached_filled() == 0 && self.refresh_tail()? == 0 {
            return Ok(None);
        }
        let i = self.ring.index(self.head);
        // SAFETY: `i < capacity` (masked); position `head < cached_tail` was published by the
        // producer (Acquire on tail), and it will not overwrite it before we store a head past it.
        let v = unsafe { self.ring.slots.read(i) };
        self.head = self.head.wrapping_add(1);
        self.release();
        Ok(Some(v))
    }

    /// Pops one entry, handing `f` a pointer to it in place and releasing its slot when `f`
    /// returns; `Ok(None)` when empty, `Err(Corrupt)` as [`Consumer::try_pop`]. The slot's
    /// contents are the producer's: `f` copies out what it needs (by raw copies: the producer
    /// may break the protocol and write it meanwhile) and checks it as a popped copy — or, where
    /// the peer's rights make that sound, reads it in place for the call (`take_frame`).
    pub fn try_pop_raw<R>(&mut self, f: impl FnOnce(*const T) -> R) -> Result<Option<R>, RingError> {
        if self.cached_filled() == 0 && self.refresh_tail()? == 0 {
            return Ok(None);
        }
        let i = self.ring.index(self.head);
        // SAFETY: as in `try_pop`: `i < capacity` and position `head` is published to us; the
        // producer does not overwrite it before the release below, after `f`.
        let r = unsafe { self.ring.slots.with(i, f) };
        self.head = self.head.wrapping_add(1);
        self.release();
        Ok(Some(r))
    }

    /// Pops up to `out.len()` entries into `out[..n]` with one `Release` store of `head`;
    /// returns `n`.
    pub fn pop_batch(&mut self, out: &mut [T]) -> Result<usize, RingError> {
        if (self.cached_filled() as usize) < out.len() {
            self.refresh_tail()?;
        }
        let n = out.len().min(self.cached_filled() as usize);
        if n == 0 {
            return Ok(0);
        }
        let start = self.ring.index(self.head);
        let first = n.min(self.capacity() - start);
        // SAFETY: `start + first <= capacity`; the `n <= filled` positions were published
        // (Acquire on tail) and are not overwritten before our Release of head; the second run
        // starts at slot 0 with `n - first < capacity` entries.
        unsafe {
            self.ring.slots.read_run(start, &mut out[..first]);
            self.ring.slots.read_run(0, &mut out[first..n]);
        }
        self.head = self.head.wrapping_add(n as u64);
        self.release();
        Ok(n)
    }

    /// Filled slots, after re-reading the producer's index.
    pub fn len(&mut self) -> Result<usize, RingError> {
        self.refresh_tail().map(|n| n as usize)
    }

    /// Announces that this consumer is about to sleep on the doorbell and returns the bell's
    /// value to sleep on. The caller must then re-check the ring (any entry published before
    /// the producer saw the announcement is visible to that check) and sleep only if it is
    /// still empty, with [`crate::doorbell::wait`] on [`Consumer::bell`] and the returned value;
    /// then [`Consumer::disarm`].
    pub fn arm(&self) -> u32 {
        self.ring.waiting().store(1, Ordering::Relaxed);
        // SeqCst fence: pairs with the producer's in `wake_consumer` (see there).
        fence(Ordering::SeqCst);
        // Acquire: if this reads a producer's bump, its entries (published before the bump) are
        // visible to our re-check; otherwise the re-check could miss them and we would sleep on
        // a value that no longer changes (found by the loom model).
        self.ring.bell().load(Ordering::Acquire)
    }

    /// No longer about to sleep: producers stop ringing.
    pub fn disarm(&self) {
        self.ring.waiting().store(0, Ordering::Relaxed);
    }

    /// The word [`Consumer::arm`]'s value refers to (to sleep on several rings at once).
    #[cfg(not(loom))]
    pub fn bell(&self) -> &core::sync::atomic::AtomicU32 {
        self.ring.bell()
    }

    /// Current bell value (tests: whether a producer rang since [`Consumer::arm`]).
    pub fn bell_value(&self) -> u32 {
        self.ring.bell().load(Ordering::SeqCst)
    }

    /// Whether the ring is empty (re-reads the producer's index only if the cache says empty).
    pub fn is_empty(&mut self) -> Result<bool, RingError> {
        if self.cached_filled() != 0 {
            return Ok(false);
        }
        Ok(self.refresh_tail()? == 0)
    }
}
