//! In-process rings: [`channel`] allocates a ring on the heap laid out exactly like a
//! shared-memory one (the engine's thread-mode tests, benches and property tests use it), or,
//! under `--cfg loom`, builds it from loom-tracked atomics and cells so the loom models run the
//! same producer and consumer code. Both reach the ring's private parts (`RawRing`, the ends'
//! constructors) as a child of `ring.rs`.
use super::*;

/// A heap allocation laid out exactly like a shared-memory ring.
#[cfg(not(loom))]
struct HeapRing {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: `HeapRing` only owns the allocation (freed in `Drop`); it never reads or writes it, so
// sharing or sending it across threads cannot race. Accesses go through Producer/Consumer.
#[cfg(not(loom))]
unsafe impl Send for HeapRing {}
// SAFETY: see `Send`.
#[cfg(not(loom))]
unsafe impl Sync for HeapRing {}

#[cfg(not(loom))]
impl Drop for HeapRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `channel` with exactly this layout, freed once (here).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Heap-backed ring (128-aligned allocation laid out exactly like shared memory) for
/// in-process use and tests.
///
/// # Panics
/// If `capacity` is not a power of two `>= 2`, or `T` is aligned to more than 128 bytes (local
/// programming errors, not peer input).
#[cfg(not(loom))]
pub fn channel<T: Entry>(capacity: u32, role: RingRole) -> (Producer<T>, Consumer<T>) {
    if let Err(e) = check_capacity(capacity).and_then(|()| entry_size::<T>().map(drop)) {
        panic!("ringcast_ring::channel: {e}");
    }
    let len = footprint::<T>(capacity);
    let layout = match std::alloc::Layout::from_size_align(len, RING_ALIGN) {
        Ok(l) => l,
        Err(_) => panic!("ringcast_ring::channel: ring of {capacity} entries too large"),
    };
    // SAFETY: `layout` has non-zero size (at least the 384-byte control block).
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    let Some(ptr) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
    let owner: Arc<HeapRing> = Arc::new(HeapRing { ptr, layout });
    let fail = |e: RingError| -> ! { panic!("ringcast_ring::channel: {e}") };
    // SAFETY: fresh, zeroed, 128-aligned allocation of `len` bytes, not shared yet.
    unsafe { init::<T>(ptr, len, role, capacity) }.unwrap_or_else(|e| fail(e));
    // SAFETY: the allocation is valid while `owner` lives (each side holds a clone); exactly
    // one producer and one consumer are attached; indices are only accessed atomically.
    let p = unsafe { Producer::attach(ptr, len, role, owner.clone()) }.unwrap_or_else(|e| fail(e));
    // SAFETY: as above.
    let c = unsafe { Consumer::attach(ptr, len, role, owner) }.unwrap_or_else(|e| fail(e));
    (p, c)
}

/// Loom build: the ring state lives in loom atomics and cells on the heap.
#[cfg(loom)]
struct LoomRing<T> {
    tail: AtomicU64,
    head: AtomicU64,
    tail_mirror: AtomicU64,
    head_mirror: AtomicU64,
    bell: AtomicU32,
    waiting: AtomicU32,
    slots: Box<[loom::cell::UnsafeCell<T>]>,
}

// SAFETY: the cells are only accessed through the ring protocol, which loom checks.
#[cfg(loom)]
unsafe impl<T: Send> Sync for LoomRing<T> {}
// SAFETY: as above.
#[cfg(loom)]
unsafe impl<T: Send> Send for LoomRing<T> {}

/// Loom build of [`channel`]: same algorithm, loom-tracked state. `role` is unused.
#[cfg(loom)]
pub fn channel<T: Entry>(capacity: u32, _role: RingRole) -> (Producer<T>, Consumer<T>) {
    if let Err(e) = check_capacity(capacity).and_then(|()| entry_size::<T>().map(drop)) {
        panic!("ringcast_ring::channel: {e}");
    }
    let slots: Box<[loom::cell::UnsafeCell<T>]> = (0..capacity)
        .map(|_| loom::cell::UnsafeCell::new(<T as zerocopy::FromZeros>::new_zeroed()))
        .collect();
    let ring = Arc::new(LoomRing {
        tail: AtomicU64::new(0),
        head: AtomicU64::new(0),
        tail_mirror: AtomicU64::new(0),
        head_mirror: AtomicU64::new(0),
        bell: AtomicU32::new(0),
        waiting: AtomicU32::new(0),
        slots,
    });
    let raw = || RawRing {
        tail: NonNull::from(&ring.tail),
        head: NonNull::from(&ring.head),
        tail_mirror: NonNull::from(&ring.tail_mirror),
        head_mirror: NonNull::from(&ring.head_mirror),
        bell: NonNull::from(&ring.bell),
        waiting: NonNull::from(&ring.waiting),
        // SAFETY: the boxed cells live as long as `ring`, which both sides keep alive.
        slots: unsafe {
            Slots::new(NonNull::new(ring.slots.as_ptr() as *mut loom::cell::UnsafeCell<T>).unwrap())
        },
        mask: u64::from(capacity) - 1,
        capacity: u64::from(capacity),
        mirrored: false,
    };
    let (rp, rc) = (raw(), raw());
    let owner: Arc<dyn Send + Sync> = ring.clone();
    let fail = |e: RingError| -> ! { panic!("ringcast_ring::channel: {e}") };
    let p = Producer::from_raw(rp, owner.clone()).unwrap_or_else(|e| fail(e));
    let c = Consumer::from_raw(rc, owner).unwrap_or_else(|e| fail(e));
    (p, c)
}
