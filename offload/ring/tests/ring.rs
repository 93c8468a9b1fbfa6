//! Single-threaded tests of the ring through its public API: push/pop, full/empty, batches,
//! wrap-around, capacity and attach validation, and corrupt peer indices written as raw bytes.
//! Heap memory only, so all of it runs under Miri.
#![cfg(not(loom))]

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use ringcast_abi::{ring::RING_MAGIC, RingControl, RingRole, SubmissionDescriptor, ABI_VERSION};
use ringcast_ring::{channel, footprint, init, Consumer, Producer, RingError};
use std::sync::Arc;

/// A 128-aligned, zeroed heap buffer standing in for shared memory.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Line([u8; 128]);

struct Buf {
    lines: Box<[UnsafeCell<Line>]>,
}

// SAFETY: the buffer is only accessed through raw pointers, by the ring (atomically for the
// indices, per protocol for the slots) or by single-threaded test code.
unsafe impl Sync for Buf {}

impl Buf {
    fn new(bytes: usize) -> Arc<Buf> {
        let lines = (0..bytes.div_ceil(128)).map(|_| UnsafeCell::new(Line([0; 128]))).collect();
        Arc::new(Buf { lines })
    }
    fn len(&self) -> usize {
        self.lines.len() * 128
    }
    fn ptr(&self) -> NonNull<u8> {
        // Derived from `&[UnsafeCell<_>]`, so writes through it are allowed.
        NonNull::new(UnsafeCell::raw_get(self.lines.as_ptr()).cast::<u8>()).unwrap()
    }
    /// Writes raw bytes at `offset` (a peer scribbling on the ring).
    fn poke(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len());
        // SAFETY: in bounds (asserted); single-threaded test, so no concurrent access.
        unsafe { self.ptr().as_ptr().add(offset).copy_from_nonoverlapping(bytes.as_ptr(), bytes.len()) }
    }
}

fn owner(b: &Arc<Buf>) -> Arc<dyn Send + Sync> {
    b.clone()
}

const TAIL: usize = 128;
const HEAD: usize = 256;

fn ring_u64(cap: u32) -> (Arc<Buf>, Producer<u64>, Consumer<u64>) {
    let b = Buf::new(footprint::<u64>(cap));
    // SAFETY: fresh buffer of sufficient length, not shared.
    unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, cap) }.unwrap();
    // SAFETY: the buffer lives as long as the owner Arc; one producer, one consumer.
    let p = unsafe { Producer::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) }.unwrap();
    // SAFETY: as above.
    let c = unsafe { Consumer::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) }.unwrap();
    (b, p, c)
}

#[test]
fn push_pop_full_empty() {
    let (mut p, mut c) = channel::<u64>(4, RingRole::SUBMISSION);
    assert_eq!(p.capacity(), 4);
    assert_eq!(c.capacity(), 4);
    assert_eq!(c.try_pop(), Ok(None));
    assert_eq!(c.is_empty(), Ok(true));
    for i in 0..4 {
        assert_eq!(p.try_push(i), Ok(()));
    }
    assert_eq!(p.try_push(99), Err(99), "full ring must refuse");
    assert_eq!(p.free_slots(), 0);
    assert_eq!(p.in_flight(), 4);
    assert_eq!(c.len(), Ok(4));
    assert_eq!(c.is_empty(), Ok(false));
    assert_eq!(c.try_pop(), Ok(Some(0)));
    assert_eq!(p.in_flight(), 3);
    assert_eq!(p.free_slots(), 1);
    assert_eq!(p.try_push(4), Ok(()));
    assert_eq!(p.try_push(5), Err(5));
    for i in 1..=4 {
        assert_eq!(c.try_pop(), Ok(Some(i)));
    }
    assert_eq!(c.try_pop(), Ok(None));
    assert_eq!(c.len(), Ok(0));
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.free_slots(), 4);
}

#[test]
fn batches_publish_and_consume() {
    let (mut p, mut c) = channel::<u32>(8, RingRole::COMPLETION);
    let items: Vec<u32> = (0..11).collect();
    assert_eq!(p.push_batch(&items), 8, "only capacity fits");
    assert_eq!(p.push_batch(&items[8..]), 0);
    assert_eq!(p.push_batch(&[]), 0);
    let mut out = [0u32; 5];
    assert_eq!(c.pop_batch(&mut out), Ok(5));
    assert_eq!(out, [0, 1, 2, 3, 4]);
    // Wraps: slots 5,6,7 then 0,1,2,3,4.
    assert_eq!(p.push_batch(&items[8..]), 3);
    let mut out = [0u32; 16];
    assert_eq!(c.pop_batch(&mut out), Ok(6));
    assert_eq!(&out[..6], &[5, 6, 7, 8, 9, 10]);
    assert_eq!(c.pop_batch(&mut out), Ok(0));
    assert_eq!(c.pop_batch(&mut []), Ok(0));
}

/// In-place push and pop (`try_push_raw`, `try_pop_raw`, and the frame rings' `push_frame` /
/// `pop_frame` on them): the same order and values as the copying calls, a full ring refuses
/// without calling `fill`, a filler sees the slot's stale contents, frames travel with only
/// their own bytes and an impossible length is refused. Runs under Miri (raw pointers into the
/// slot array).
#[test]
fn in_place_push_and_pop() {
    use ringcast_ring::{pop_frame, push_frame, FrameSlot, PushFrameError, FRAME_PAYLOAD};
    let (mut p, mut c) = channel::<u64>(4, RingRole::SUBMISSION);
    let rounds = if cfg!(miri) { 10 } else { 1_000 };
    for r in 0..rounds as u64 {
        for k in 0..4 {
            // SAFETY: the pointer is the free slot `try_push_raw` hands over.
            let fill = |v: *mut u64| unsafe { v.write(r * 4 + k) };
            assert!(p.try_push_raw(fill), "room for 4");
        }
        let mut called = false;
        assert!(!p.try_push_raw(|_| called = true), "full");
        assert!(!called, "a full ring does not call fill");
        // SAFETY: the pointer is the published slot `try_pop_raw` hands over.
        let read = |v: *const u64| unsafe { v.read() };
        for k in 0..4 {
            assert_eq!(c.try_pop_raw(read), Ok(Some(r * 4 + k)));
        }
        assert_eq!(c.try_pop_raw(read), Ok(None));
    }
    // The filler sees what the slot held a lap ago (and leaves it: it is pushed unchanged).
    // SAFETY: the pointer is the free slot `try_push_raw` hands over.
    let stale = |v: *mut u64| unsafe { v.read() };
    assert!(p.try_push_raw(|v| assert_eq!(stale(v), (rounds as u64 - 1) * 4, "stale contents")));
    assert_eq!(c.try_pop(), Ok(Some((rounds as u64 - 1) * 4)));

    let (mut p, mut c) = channel::<FrameSlot>(2, RingRole::SUBMISSION);
    let mut out = vec![0u8; FRAME_PAYLOAD];
    assert_eq!(push_frame(&mut p, 3, &[7; 1500]), Ok(()));
    assert_eq!(push_frame(&mut p, 4, b"short"), Ok(()));
    assert_eq!(push_frame(&mut p, 5, b"x"), Err(PushFrameError::Full));
    assert_eq!(pop_frame(&mut c, &mut out), Ok(Some((3, Some(1500)))));
    assert_eq!(&out[..1500], &[7; 1500][..]);
    assert_eq!(pop_frame(&mut c, &mut out), Ok(Some((4, Some(5)))));
    assert_eq!(&out[..5], b"short");
    assert_eq!(pop_frame(&mut c, &mut out), Ok(None));
    assert_eq!(push_frame(&mut p, 5, &vec![0; FRAME_PAYLOAD + 1]), Err(PushFrameError::TooLong));
    // A slot whose length does not fit the reader's buffer is consumed, nothing copied.
    assert_eq!(push_frame(&mut p, 6, &[1; 100]), Ok(()));
    assert_eq!(pop_frame(&mut c, &mut out[..50]), Ok(Some((6, None))));
    assert_eq!(pop_frame(&mut c, &mut out), Ok(None));
}

#[test]
fn wrap_around_many_times() {
    let (mut p, mut c) = channel::<u64>(4, RingRole::SUBMISSION);
    let mut next_in = 0u64;
    let mut next_out = 0u64;
    let rounds = if cfg!(miri) { 50 } else { 5_000 };
    for r in 0..rounds {
        // Alternate batch sizes that straddle the wrap point at different offsets.
        let n = 1 + (r % 4) as u64;
        let batch: Vec<u64> = (next_in..next_in + n).collect();
        let pushed = p.push_batch(&batch) as u64;
        assert_eq!(pushed, n, "ring was drained, all must fit");
        next_in += pushed;
        let mut out = [0u64; 3];
        while next_out < next_in {
            let k = c.pop_batch(&mut out).unwrap();
            assert!(k > 0);
            for v in &out[..k] {
                assert_eq!(*v, next_out);
                next_out += 1;
            }
        }
    }
    assert_eq!(next_out, next_in);
    assert!(next_in / 4 >= rounds as u64 / 2, "the indices wrapped around the ring many times");
}

#[test]
fn descriptors_roundtrip() {
    let (mut p, mut c) = channel::<SubmissionDescriptor>(16, RingRole::SUBMISSION);
    let d = SubmissionDescriptor { cookie: 0xdead_beef, len: 4096, offset: 7, ..Default::default() };
    p.try_push(d).unwrap();
    assert_eq!(c.try_pop(), Ok(Some(d)));
}

#[test]
fn capacity_validation() {
    let b = Buf::new(footprint::<u64>(1024));
    for bad in [0u32, 1, 3, 6, 1000] {
        // SAFETY: buffer valid and unshared.
        let r = unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, bad) };
        assert_eq!(r, Err(RingError::BadCapacity(bad)));
    }
    for good in [2u32, 4, 1024] {
        // SAFETY: as above.
        assert_eq!(unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, good) }, Ok(()));
    }
    // SAFETY: as above.
    let r = unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, 2048) };
    assert_eq!(r, Err(RingError::TooSmall { need: footprint::<u64>(2048), have: b.len() }));
    assert_eq!(footprint::<u64>(2048), RingControl::SLOTS_OFFSET + 2048 * 8);
    // A header naming a bad capacity is refused at attach.
    b.poke(20, &3u32.to_le_bytes());
    // SAFETY: buffer outlives the owner.
    let r = unsafe { Consumer::<u64>::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) };
    assert_eq!(r.err(), Some(RingError::BadCapacity(3)));
}

#[test]
#[should_panic(expected = "power of two")]
fn channel_rejects_bad_capacity() {
    let _ = channel::<u64>(3, RingRole::SUBMISSION);
}

#[test]
fn init_writes_header() {
    let b = Buf::new(footprint::<u64>(8));
    b.poke(TAIL, &77u64.to_le_bytes());
    // SAFETY: buffer valid and unshared.
    unsafe { init::<u64>(b.ptr(), b.len(), RingRole::COMPLETION, 8) }.unwrap();
    let mut raw = [0u8; 384];
    // SAFETY: 384 bytes in bounds; single-threaded.
    unsafe { b.ptr().as_ptr().copy_to_nonoverlapping(raw.as_mut_ptr(), 384) };
    assert_eq!(u64::from_le_bytes(raw[0..8].try_into().unwrap()), RING_MAGIC);
    assert_eq!(u32::from_le_bytes(raw[8..12].try_into().unwrap()), ABI_VERSION);
    assert_eq!(u32::from_le_bytes(raw[12..16].try_into().unwrap()), RingRole::COMPLETION.0);
    assert_eq!(u32::from_le_bytes(raw[16..20].try_into().unwrap()), 8);
    assert_eq!(u32::from_le_bytes(raw[20..24].try_into().unwrap()), 8);
    assert_eq!(&raw[TAIL..TAIL + 8], &[0; 8], "tail zeroed");
    assert_eq!(&raw[HEAD..HEAD + 8], &[0; 8], "head zeroed");
}

#[test]
fn attach_validation_errors() {
    let b = Buf::new(footprint::<u64>(8) + 128);
    let attach_c = |ptr: NonNull<u8>, len: usize, role: RingRole| {
        // SAFETY: every pointer used below lies inside `b` with `len` bytes available.
        unsafe { Consumer::<u64>::attach(ptr, len, role, owner(&b)) }.err()
    };
    // Not initialised: zeroes.
    assert_eq!(attach_c(b.ptr(), b.len(), RingRole::SUBMISSION), Some(RingError::BadMagic));
    // SAFETY: buffer valid and unshared.
    unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, 8) }.unwrap();
    assert_eq!(attach_c(b.ptr(), b.len(), RingRole::SUBMISSION), None);
    // Wrong role.
    assert_eq!(attach_c(b.ptr(), b.len(), RingRole::COMPLETION), Some(RingError::WrongRole));
    // SAFETY: as above.
    let r = unsafe { Producer::<u64>::attach(b.ptr(), b.len(), RingRole(9), owner(&b)) };
    assert_eq!(r.err(), Some(RingError::WrongRole));
    // Wrong entry size.
    // SAFETY: as above.
    let r = unsafe { Consumer::<u32>::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) };
    assert_eq!(r.err(), Some(RingError::EntrySize { found: 8, expected: 4 }));
    // SAFETY: as above.
    let r = unsafe {
        Producer::<SubmissionDescriptor>::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b))
    };
    assert_eq!(r.err(), Some(RingError::EntrySize { found: 8, expected: 64 }));
    // Too small: less than the control block, and less than the slots.
    assert_eq!(
        attach_c(b.ptr(), 100, RingRole::SUBMISSION),
        Some(RingError::TooSmall { need: 384, have: 100 })
    );
    assert_eq!(
        attach_c(b.ptr(), 384 + 63, RingRole::SUBMISSION),
        Some(RingError::TooSmall { need: 384 + 64, have: 384 + 63 })
    );
    // Misaligned.
    // SAFETY: 8 bytes into the buffer, still in bounds.
    let off = unsafe { b.ptr().add(8) };
    assert_eq!(attach_c(off, b.len() - 8, RingRole::SUBMISSION), Some(RingError::Misaligned));
    // ABI mismatch.
    b.poke(8, &(ABI_VERSION + 1).to_le_bytes());
    assert_eq!(
        attach_c(b.ptr(), b.len(), RingRole::SUBMISSION),
        Some(RingError::AbiMismatch { found: ABI_VERSION + 1 })
    );
    // Bad magic.
    b.poke(8, &ABI_VERSION.to_le_bytes());
    b.poke(0, b"XCRING01");
    assert_eq!(attach_c(b.ptr(), b.len(), RingRole::SUBMISSION), Some(RingError::BadMagic));
    // Misaligned init too.
    // SAFETY: in bounds, unshared.
    let r = unsafe { init::<u64>(off, b.len() - 8, RingRole::SUBMISSION, 8) };
    assert_eq!(r, Err(RingError::Misaligned));
}

#[test]
fn attach_refuses_corrupt_indices() {
    let b = Buf::new(footprint::<u64>(8));
    // SAFETY: buffer valid and unshared.
    unsafe { init::<u64>(b.ptr(), b.len(), RingRole::SUBMISSION, 8) }.unwrap();
    b.poke(TAIL, &9u64.to_le_bytes());
    // SAFETY: buffer outlives the owner.
    let r = unsafe { Consumer::<u64>::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) };
    assert_eq!(r.err(), Some(RingError::Corrupt { head: 0, tail: 9 }));
    // SAFETY: as above.
    let r = unsafe { Producer::<u64>::attach(b.ptr(), b.len(), RingRole::SUBMISSION, owner(&b)) };
    assert_eq!(r.err(), Some(RingError::Corrupt { head: 0, tail: 9 }));
}

#[test]
fn consumer_detects_bogus_tail() {
    let (b, mut p, mut c) = ring_u64(8);
    p.try_push(1).unwrap();
    assert_eq!(c.try_pop(), Ok(Some(1)));
    // A peer writes tail = head + capacity + 1.
    b.poke(TAIL, &(1u64 + 9).to_le_bytes());
    assert_eq!(c.try_pop(), Err(RingError::Corrupt { head: 1, tail: 10 }));
    assert_eq!(c.len(), Err(RingError::Corrupt { head: 1, tail: 10 }));
    let mut out = [0u64; 4];
    assert_eq!(c.pop_batch(&mut out), Err(RingError::Corrupt { head: 1, tail: 10 }));
    assert_eq!(c.is_empty(), Err(RingError::Corrupt { head: 1, tail: 10 }));
    // tail behind head.
    b.poke(TAIL, &0u64.to_le_bytes());
    assert_eq!(c.try_pop(), Err(RingError::Corrupt { head: 1, tail: 0 }));
    // Huge tail.
    b.poke(TAIL, &u64::MAX.to_le_bytes());
    assert_eq!(c.len(), Err(RingError::Corrupt { head: 1, tail: u64::MAX }));
    // Exactly full is fine, and recovery after the peer fixes it works.
    b.poke(TAIL, &9u64.to_le_bytes());
    assert_eq!(c.len(), Ok(8));
    let mut out = [7u64; 9];
    assert_eq!(c.pop_batch(&mut out), Ok(8));
    assert_eq!(c.try_pop(), Ok(None));
}

#[test]
fn producer_treats_bogus_head_as_full() {
    let (b, mut p, _c) = ring_u64(4);
    p.try_push(1).unwrap();
    // head ahead of tail.
    b.poke(HEAD, &5u64.to_le_bytes());
    assert_eq!(p.free_slots(), 0);
    assert_eq!(p.try_push(2), Err(2));
    assert_eq!(p.push_batch(&[1, 2, 3]), 0);
    assert_eq!(p.in_flight(), 4);
    // More than capacity behind tail (modulo 2^64): also "full", never an out-of-bounds write.
    b.poke(HEAD, &1u64.wrapping_sub(5).to_le_bytes());
    assert_eq!(p.free_slots(), 0);
    assert_eq!(p.try_push(2), Err(2));
    // Sane again.
    b.poke(HEAD, &1u64.to_le_bytes());
    assert_eq!(p.free_slots(), 4);
    assert_eq!(p.try_push(2), Ok(()));
}

#[test]
fn shared_memory_bytes_reflect_indices() {
    let (b, mut p, mut c) = ring_u64(4);
    p.push_batch(&[10, 11, 12]);
    let mut word = [0u8; 8];
    // SAFETY: in bounds; single-threaded.
    unsafe { b.ptr().as_ptr().add(TAIL).copy_to_nonoverlapping(word.as_mut_ptr(), 8) };
    assert_eq!(u64::from_le_bytes(word), 3);
    // Slot 1 holds 11.
    // SAFETY: as above.
    unsafe { b.ptr().as_ptr().add(384 + 8).copy_to_nonoverlapping(word.as_mut_ptr(), 8) };
    assert_eq!(u64::from_le_bytes(word), 11);
    assert_eq!(c.try_pop(), Ok(Some(10)));
    // SAFETY: as above.
    unsafe { b.ptr().as_ptr().add(HEAD).copy_to_nonoverlapping(word.as_mut_ptr(), 8) };
    assert_eq!(u64::from_le_bytes(word), 1);
}

#[test]
fn error_display() {
    let e = RingError::Corrupt { head: 1, tail: 99 };
    assert!(e.to_string().contains("99"));
    let boxed: Box<dyn std::error::Error> = Box::new(RingError::BadCapacity(3));
    assert!(boxed.to_string().contains('3'));
}

#[test]
fn types_are_send_not_sync() {
    fn send<T: Send>() {}
    send::<Producer<u64>>();
    send::<Consumer<u64>>();
    static_assertions::assert_not_impl_any!(Producer<u64>: Sync, Clone);
    static_assertions::assert_not_impl_any!(Consumer<u64>: Sync, Clone);
}

/// A frame pushed in parts (a send gather: header, payload where it lies, trailer) arrives as
/// their concatenation, whatever the parts' lengths, empty ones included; parts longer than a
/// slot together are refused whole.
#[test]
fn a_frame_pushed_in_parts_arrives_whole() {
    use ringcast_ring::{pop_frame, push_frame_parts, FrameSlot, PushFrameError, FRAME_PAYLOAD};
    let (mut p, mut c) = channel::<FrameSlot>(4, RingRole::SUBMISSION);
    let mut out = vec![0u8; FRAME_PAYLOAD];
    let bytes: Vec<u8> = (0..FRAME_PAYLOAD as u32).map(|i| (i * 7 + 3) as u8).collect();
    for (a, b) in [(40, 4000), (0, 1), (40, 0), (1, FRAME_PAYLOAD - 2)] {
        let (head, rest) = bytes.split_at(a);
        let (mid, tail) = rest.split_at(b);
        let tail = &tail[..tail.len().min(16)];
        let want = [head, mid, tail].concat();
        if want.len() > FRAME_PAYLOAD {
            continue;
        }
        assert_eq!(push_frame_parts(&mut p, 9, &[head, mid, tail]), Ok(()));
        assert_eq!(pop_frame(&mut c, &mut out), Ok(Some((9, Some(want.len())))));
        assert_eq!(&out[..want.len()], &want[..], "parts of {a}, {b}, {}", tail.len());
    }
    let half = &bytes[..FRAME_PAYLOAD / 2 + 1];
    assert_eq!(push_frame_parts(&mut p, 9, &[half, half]), Err(PushFrameError::TooLong));
    assert_eq!(pop_frame(&mut c, &mut out), Ok(None));
}

/// A frame taken in place (`take_frame`): the handler reads the bytes where they lie in the
/// slot — consecutive frames at one slot's stride apart, the same slot's address again a lap
/// later — the slot stays the consumer's while the handler runs (the producer, full, cannot
/// push into it) and is released when it returns (the next push reuses it); a frame not taken
/// stays (`is_empty` is false and nothing is consumed); an impossible length is consumed
/// without calling the handler. Runs under Miri (a shared slice over the slot array, then the
/// producer's raw writes into the same slot once it is released).
#[test]
fn a_frame_is_taken_where_it_lies() {
    use ringcast_ring::{push_frame, take_frame, FrameSlot, PushFrameError, FRAME_PAYLOAD};
    let (mut p, mut c) = channel::<FrameSlot>(2, RingRole::SUBMISSION);
    assert_eq!(take_frame(&mut c, FRAME_PAYLOAD, |_, _| unreachable!("empty")), Ok(None));
    let a: Vec<u8> = (0..1500u32).map(|i| (i * 13 + 1) as u8).collect();
    assert_eq!(push_frame(&mut p, 3, &a), Ok(()));
    assert_eq!(push_frame(&mut p, 4, b"short"), Ok(()));
    // Held: seen, not consumed, however often it is looked at.
    for _ in 0..3 {
        assert_eq!(c.is_empty(), Ok(false));
    }
    let mut at = Vec::new();
    let got = take_frame(&mut c, FRAME_PAYLOAD, |from, bytes| {
        assert_eq!(push_frame(&mut p, 5, b"x"), Err(PushFrameError::Full), "the slot is still ours");
        at.push(bytes.as_ptr() as usize);
        (from, bytes == &a[..])
    });
    assert_eq!(got, Ok(Some((3, Some((3, true))))));
    // Released: the producer writes the same slot now.
    assert_eq!(push_frame(&mut p, 5, b"third"), Ok(()));
    for want in [&b"short"[..], b"third"] {
        let got = take_frame(&mut c, FRAME_PAYLOAD, |_, bytes| {
            at.push(bytes.as_ptr() as usize);
            bytes == want
        });
        assert_eq!(got.map(|g| g.and_then(|(_, ok)| ok)), Ok(Some(true)));
    }
    let stride = core::mem::size_of::<FrameSlot>();
    assert_eq!(at[1], at[0] + stride, "read in the next slot, not in a buffer");
    assert_eq!(at[2], at[0], "a lap later, the first slot again");
    // A length over `max` (or the slot) is consumed; the handler never sees it.
    assert_eq!(push_frame(&mut p, 6, &[1; 100]), Ok(()));
    assert_eq!(take_frame(&mut c, 50, |_, _| unreachable!("too long")), Ok(Some((6, None))));
    // A header no `push_frame` writes (a length past the slot): consumed, never lent.
    for bogus in [FRAME_PAYLOAD as u32 + 1, u32::MAX] {
        // SAFETY: the pointer is the free slot `try_push_raw` hands over; raw field writes.
        let fill = |s: *mut FrameSlot| unsafe {
            core::ptr::addr_of_mut!((*s).from).write(7);
            core::ptr::addr_of_mut!((*s).len).write(bogus);
        };
        assert!(p.try_push_raw(fill));
        assert_eq!(take_frame(&mut c, usize::MAX, |_, _| unreachable!("{bogus}")), Ok(Some((7, None))));
    }
    assert_eq!(c.is_empty(), Ok(true));
}
