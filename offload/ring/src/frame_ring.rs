//! Point-to-point frame rings of the `shm` fabric: the crate's SPSC [`Producer`]/[`Consumer`]
//! ring, unchanged, carrying fixed-size [`FrameSlot`] entries, in a named shared-memory segment
//! (`ShmSegment::create_or_open_named`), one ring per directed pair of members.
//!
//! Why the existing ring and not a byte-frame ring: it is already validated, Miri- and
//! loom-checked, hardened against a hostile peer and lock-free; a fixed slot wastes memory
//! for short frames (4 KiB per slot, touched lazily in tmpfs) but needs no second
//! variable-length protocol to get right. Frames larger than [`FRAME_PAYLOAD`] are refused by
//! whoever builds them.
//!
//! Contract:
//! * the receiver creates (or, after a restart, re-opens) its inbound ring with
//!   [`frame_ring_consumer`]; the sender opens it with [`frame_ring_producer`] and never
//!   creates it (a missing ring means "the receiver is not there yet");
//! * one producer and one consumer per ring: across processes that is the naming convention
//!   (only member `from` opens the `from → to` ring for writing, only `to` for reading);
//!   within a process it is enforced — opening the same side of the same name twice while the
//!   first is alive fails with `AddrInUse` — so two threads of ours can never race on a slot;
//! * a [`FrameSlot`] popped from a ring is untrusted: [`FrameSlot::payload`] checks its length;
//!   [`take_frame`] reads a slot's length once and checks it against the slot before it lends
//!   the frame's bytes, where they lie, to its caller's handler.
//!
//! Receive in place ([`take_frame`], what the `shm` fabric's receive uses): the consumer hands
//! its handler a shared slice over the head slot's bytes and releases the slot only when the
//! handler returns — a NIC handing its firmware a descriptor of the receive buffer it wrote,
//! not a copy. [`pop_frame`] copies the frame out instead. A frame not yet taken stays in its
//! slot: [`Consumer::is_empty`] says one is there without consuming it (the `shm` fabric holds a
//! ring datagram back that way while it reads the multicast logs up to its fence).
use crate::{Consumer, Entry, Producer, ShmSegment};
use ringcast_abi::RingRole;
use std::collections::BTreeSet;
use std::io;
use std::sync::{Arc, Mutex};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Payload bytes of one frame slot: covers the engine's default MTU (1472) and anything up to
/// a 4 KiB slot; a fabric with a larger MTU cannot use these rings.
pub const FRAME_PAYLOAD: usize = 4088;

/// The ring role written in frame-ring headers ("FRM1"), so that a frame ring is never
/// attached as a host ring or vice versa.
pub const FRAME_ROLE: RingRole = RingRole(u32::from_le_bytes(*b"FRM1"));

/// One frame in a ring slot.
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct FrameSlot {
    /// Bytes of `data` in use (untrusted when popped: see [`FrameSlot::payload`]).
    pub len: u32,
    /// The sender's member id.
    pub from: u32,
    /// The frame, `len` bytes of it meaningful.
    pub data: [u8; FRAME_PAYLOAD],
}

static_assertions::const_assert_eq!(core::mem::size_of::<FrameSlot>(), 4096);
static_assertions::const_assert_eq!(core::mem::offset_of!(FrameSlot, data), 8);

impl core::fmt::Debug for FrameSlot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Not the 4 KiB of data: length and sender say what a test needs.
        f.debug_struct("FrameSlot").field("len", &self.len).field("from", &self.from).finish_non_exhaustive()
    }
}

impl FrameSlot {
    /// A slot holding `frame` from `from`, or `None` if it is longer than [`FRAME_PAYLOAD`].
    pub fn new(from: u32, frame: &[u8]) -> Option<FrameSlot> {
        let mut slot = FrameSlot { len: 0, from, data: [0; FRAME_PAYLOAD] };
        slot.data.get_mut(..frame.len())?.copy_from_slice(frame);
        slot.len = frame.len() as u32;
        Some(slot)
    }

    /// The frame's bytes, or `None` if `len` is impossible.
    pub fn payload(&self) -> Option<&[u8]> {
        self.data.get(..usize::try_from(self.len).ok()?)
    }
}

/// Names with a live producer (`true`) or consumer (`false`) in this process.
static CLAIMS: Mutex<BTreeSet<(String, bool)>> = Mutex::new(BTreeSet::new());

/// One side of one named ring claimed by this process; released on drop.
struct Claim {
    key: (String, bool),
}

impl Claim {
    fn take(name: &str, producer: bool) -> io::Result<Claim> {
        let key = (name.to_string(), producer);
        // A poisoned lock only means another thread panicked holding it; the set is intact.
        let mut claims = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
        if !claims.insert(key.clone()) {
            let side = if producer { "producer" } else { "consumer" };
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("ring {name} already has a {side} in this process"),
            ));
        }
        Ok(Claim { key })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        CLAIMS.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
    }
}

/// What keeps a named ring's mapping (and this process's claim on it) alive.
struct NamedRing {
    seg: ShmSegment,
    _claim: Claim,
}

fn ring_err(e: crate::RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Creates (or re-opens, keeping its contents) the named frame ring `name` of `capacity`
/// slots (a power of two `>= 2`) and attaches as its consumer.
pub fn frame_ring_consumer(name: &str, capacity: u32) -> io::Result<Consumer<FrameSlot>> {
    let claim = Claim::take(name, false)?;
    let len = crate::footprint::<FrameSlot>(capacity);
    let (seg, _created) = ShmSegment::create_or_open_named(name, len, |seg| {
        // SAFETY: the fresh segment is mapped for `seg.len()` bytes (page-aligned) and not yet
        // visible to anyone else.
        unsafe { crate::init::<FrameSlot>(seg.as_non_null(), seg.len(), FRAME_ROLE, capacity) }
            .map_err(ring_err)
    })?;
    let owner = Arc::new(NamedRing { seg, _claim: claim });
    // SAFETY: the mapping lives as long as `owner`; this process holds the only consumer claim
    // on `name`, and other processes follow the naming convention (module doc); the header is
    // written once before publication and the indices are only accessed atomically.
    unsafe { Consumer::attach(owner.seg.as_non_null(), owner.seg.len(), FRAME_ROLE, owner.clone()) }
        .map_err(ring_err)
}

/// Opens the existing named frame ring `name` and attaches as its producer (`NotFound` if the
/// receiver has not created it yet).
pub fn frame_ring_producer(name: &str) -> io::Result<Producer<FrameSlot>> {
    let claim = Claim::take(name, true)?;
    let seg = ShmSegment::open_named(name)?;
    let owner = Arc::new(NamedRing { seg, _claim: claim });
    // SAFETY: as in `frame_ring_consumer`, with the producer claim.
    unsafe { Producer::attach(owner.seg.as_non_null(), owner.seg.len(), FRAME_ROLE, owner.clone()) }
        .map_err(ring_err)
}

// A frame slot travels through the generic ring.
static_assertions::assert_impl_all!(FrameSlot: Entry);

/// Why [`push_frame`] did not push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushFrameError {
    /// No free slot (the receiver is behind).
    Full,
    /// Longer than [`FRAME_PAYLOAD`].
    TooLong,
}

/// Pushes `frame` from member `from`, written into the ring slot in place: the datagram's bytes
/// once — not a 4 KiB [`FrameSlot`] built, zeroed and copied whole (which was most of the shm
/// fabric's memory traffic for 1.5 KiB datagrams).
pub fn push_frame(p: &mut Producer<FrameSlot>, from: u32, frame: &[u8]) -> Result<(), PushFrameError> {
    push_frame_parts(p, from, &[frame])
}

/// [`push_frame`] of the frame made of `parts`, in order, each written straight into the slot
/// (a send gather: header, a payload where it lies, trailer — never made contiguous first).
pub fn push_frame_parts(
    p: &mut Producer<FrameSlot>,
    from: u32,
    parts: &[&[u8]],
) -> Result<(), PushFrameError> {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    if len > FRAME_PAYLOAD {
        return Err(PushFrameError::TooLong);
    }
    let pushed = p.try_push_raw(|slot| {
        // SAFETY: `slot` points to a free slot of the ring, ours alone until published
        // (`try_push_raw`); the fields are written through raw pointers (no reference into
        // shared memory), the parts one after the other into `data`, `len <= FRAME_PAYLOAD`
        // bytes in all, from caller memory that cannot overlap the ring.
        unsafe {
            core::ptr::addr_of_mut!((*slot).from).write(from);
            core::ptr::addr_of_mut!((*slot).len).write(len as u32);
            let mut data = core::ptr::addr_of_mut!((*slot).data).cast::<u8>();
            for part in parts {
                core::ptr::copy_nonoverlapping(part.as_ptr(), data, part.len());
                data = data.add(part.len());
            }
        }
    });
    if pushed {
        Ok(())
    } else {
        Err(PushFrameError::Full)
    }
}

/// Pops the next frame into `out`: `Some((from, Some(len)))` with the frame in `out[..len]`,
/// `Some((from, None))` for a slot whose length is impossible (over [`FRAME_PAYLOAD`] or
/// `out.len()`: the slot is consumed, nothing copied), `None` when empty. [`take_frame`] with
/// a copy: for a reader that keeps the frame past the slot's release (the `shm` fabric reads
/// its frames in place instead).
pub fn pop_frame(
    c: &mut Consumer<FrameSlot>,
    out: &mut [u8],
) -> Result<Option<(u32, Option<usize>)>, crate::RingError> {
    let max = out.len();
    take_frame(c, max, |_, bytes| {
        out[..bytes.len()].copy_from_slice(bytes);
        bytes.len()
    })
}

/// Takes the frame at the head of the ring, in place: reads the slot's sender and length once,
/// and if the length fits the slot and `max`, calls `f(from, bytes)` with a shared slice over
/// the frame's bytes *where they lie in the slot*, then releases the slot. Returns `Some((from,
/// Some(f's result)))`; `Some((from, None))` for a slot whose length is impossible (over
/// [`FRAME_PAYLOAD`] or `max`: the slot is consumed, `f` not called); `None` when empty.
///
/// Nothing is copied: the bytes `f` reads are the producer's writes. The slice lives only as
/// long as the call to `f` (it cannot escape: `f` is generic over the slice's lifetime), and
/// the slot is released after `f` returns, so the producer can reuse it only then.
pub fn take_frame<R>(
    c: &mut Consumer<FrameSlot>,
    max: usize,
    f: impl FnOnce(u32, &[u8]) -> R,
) -> Result<Option<(u32, Option<R>)>, crate::RingError> {
    c.try_pop_raw(|slot| {
        // SAFETY: `slot` points to the head slot, published to us (the producer's Release store
        // of `tail`, our Acquire load of it) and not released before this closure returns
        // (`try_pop_raw` stores `head` past it only afterwards). The header words are read
        // once, by raw reads of plain integers (any bit pattern is valid), and never again: the
        // length that bounds the slice is that one read, checked against the slot's `data`
        // array (`FRAME_PAYLOAD`) and `max`, so the slice `data[..len]` is inside the slot
        // whatever the header held. The shared slice is sound because nobody writes those
        // bytes while it lives: the SPSC discipline (crate doc) has the producer write a slot
        // only when it is free — `tail - head < capacity` with our `head`, which still counts
        // this slot as ours until the release after `f` — and `c` is the ring's only consumer
        // (a `Consumer` is neither `Clone` nor `Sync`; a named ring's consumer side is claimed
        // once per process by `frame_ring_consumer`, once per job by its naming), so nobody
        // else releases it either. A peer that broke the discipline and wrote the slot anyway
        // would be a process of the job's own user writing into our mapping, which the `shm`
        // fabric's threat model (docs/protocol.md: segments only that user can open) already
        // grants every right over this process's memory; short of that, the bytes are stable
        // while `f` reads them. The slice cannot outlive the slot's release: it is used only
        // for the call to `f` below, inside this closure, which `try_pop_raw` runs before it
        // releases the slot.
        let (from, frame) = unsafe {
            let from = core::ptr::addr_of!((*slot).from).read();
            let len = core::ptr::addr_of!((*slot).len).read() as usize;
            if len > FRAME_PAYLOAD || len > max {
                (from, None)
            } else {
                let data = core::ptr::addr_of!((*slot).data).cast::<u8>();
                (from, Some(core::slice::from_raw_parts(data, len)))
            }
        };
        (from, frame.map(|bytes| f(from, bytes)))
    })
}
