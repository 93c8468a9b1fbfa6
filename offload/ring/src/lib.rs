//! `ringcast-ring`: the single-producer single-consumer rings between a host process and the
//! offload engine, and the shared-memory segments they live in.
//!
//! Contract:
//! * The byte layout is `ringcast_abi::RingControl` (header, producer line with `tail`, consumer
//!   line with `head`, 128 bytes each) followed by `capacity` slots of `size_of::<T>()` bytes.
//!   [`init`] writes it; [`Producer::attach`] / [`Consumer::attach`] validate it (magic, ABI
//!   version, role, entry size, power-of-two capacity, length, 128-byte alignment).
//! * Exactly one [`Producer`] and one [`Consumer`] per ring, in one process or two. Each is
//!   `Send`, neither is `Sync` or `Clone`.
//! * `head`/`tail` are free-running `u64`s accessed only atomically: the producer writes slots
//!   then stores `tail` with `Release`; the consumer loads `tail` with `Acquire`, reads slots,
//!   then stores `head` with `Release`; the producer loads `head` with `Acquire` before reusing a
//!   slot. Each side caches the other's index and re-reads it only when the cache says full or
//!   empty. Batch operations publish with one store.
//! * The peer may be buggy, dead or hostile: nothing it writes makes this crate panic or access
//!   memory outside the ring. The consumer reports `tail - head > capacity` (or `tail < head`)
//!   as [`RingError::Corrupt`]; the producer treats a bogus `head` as "full".
//! * Entries are plain bytes ([`Entry`]: `zerocopy` `FromBytes + IntoBytes`), copied in and out
//!   of slots with raw pointer reads/writes; no reference to shared memory is created, but for
//!   one: [`take_frame`] lends a handler a shared slice over a frame ring's head slot, bounded by
//!   the length it read once and checked, until it releases the slot (its SAFETY comment argues
//!   why the SPSC discipline makes that sound).
//! * [`ShmSegment`] (not under `cfg(loom)`) is a memfd mapped `MAP_SHARED`, which a second
//!   process maps from the same fd; [`channel`] is a heap-backed ring with the same layout.
//! * [`ShmSegment::create_named`] and friends map named files under `/dev/shm` (names checked
//!   by [`check_segment_name`]), for peers that share a name rather than an fd.
//! * [`McastLog`] (`mcast_log`) is the `shm` fabric's multi-writer multicast log, a seqlock per
//!   slot with every word accessed atomically; [`frame_ring_consumer`]/[`frame_ring_producer`]
//!   (`frame_ring`) put this crate's SPSC ring of [`FrameSlot`]s in a named segment for the
//!   fabric's point-to-point traffic.
//! * [`Reaper`] (`reaper`) is a process that outlives its caller and, once the caller is gone
//!   however it died, removes the named segments of its job that nobody maps any more.
//!
//! * The doorbell ([`doorbell`], [`Consumer::arm`], [`Producer::wake_consumer`]): a consumer
//!   may sleep on a futex word in the producer's line instead of spinning; a producer wakes it
//!   only when it announced the sleep, so spinning consumers cost the producer no system call.
//!
//! Under `cfg(loom)` the atomics and slot cells come from loom (see `primitive`), [`channel`]
//! is the only constructor, and the shared-memory parts are left out.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
pub mod attach;
#[cfg(not(loom))]
mod bells;
pub mod doorbell;
#[cfg(not(loom))]
mod frame_ring;
mod mcast_log;
mod primitive;
#[cfg(not(loom))]
mod reaper;
mod ring;
#[cfg(not(loom))]
mod shm;
mod slot_check;

#[cfg(not(loom))]
pub use bells::BellBoard;
#[cfg(not(loom))]
pub use frame_ring::{
    frame_ring_consumer, frame_ring_producer, pop_frame, push_frame, push_frame_parts, take_frame, FrameSlot,
    PushFrameError, FRAME_PAYLOAD, FRAME_ROLE,
};
pub use mcast_log::{
    log_footprint, Datagram, LogError, McastLog, McastReader, WriteError, DEFAULT_STALL_POLLS, LOG_MAGIC,
    LOG_VERSION, MAX_LOG_PAYLOAD, MAX_LOG_SLOTS, TAKEOVER_LAPS,
};
#[cfg(not(loom))]
pub use reaper::{Reaper, REAPER_NAME, SCAN_FOR as REAPER_SCAN_FOR};
#[cfg(not(loom))]
pub use ring::init;
pub use ring::{channel, footprint, Consumer, Producer, RING_ALIGN};
#[cfg(not(loom))]
pub use shm::{check_segment_name, copy_between, OutOfBounds, ShmSegment, MAX_SEGMENT_NAME, SHM_DIR};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A type that can travel through a ring: plain bytes, any bit pattern valid, no padding.
pub trait Entry: Copy + FromBytes + IntoBytes + Immutable + KnownLayout + Send + 'static {}
impl<T: Copy + FromBytes + IntoBytes + Immutable + KnownLayout + Send + 'static> Entry for T {}

/// Why a ring could not be initialised, attached or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The header's magic is not `RING_MAGIC`: not an initialised ring.
    BadMagic,
    /// The ring was created by a different ABI version.
    AbiMismatch {
        /// The creator's `abi_version`.
        found: u32,
    },
    /// The ring's role is not the one the caller expected.
    WrongRole,
    /// The ring's slots are not `size_of::<T>()` bytes.
    EntrySize {
        /// `entry_size` in the header.
        found: u32,
        /// `size_of::<T>()`.
        expected: u32,
    },
    /// Capacity is not a power of two `>= 2`.
    BadCapacity(u32),
    /// The memory is shorter than the ring needs.
    TooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The memory is not 128-byte aligned (or `T` needs more than 128).
    Misaligned,
    /// The peer's index is impossible: `tail - head > capacity` or `tail < head`.
    Corrupt {
        /// The consumer's `head`.
        head: u64,
        /// The producer's `tail` as read.
        tail: u64,
    },
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RingError::BadMagic => write!(f, "ring header has a bad magic (not initialised)"),
            RingError::AbiMismatch { found } => write!(
                f,
                "ring created by ABI version {found}, this side speaks {}",
                ringcast_abi::ABI_VERSION
            ),
            RingError::WrongRole => write!(f, "ring has a different role than expected"),
            RingError::EntrySize { found, expected } => {
                write!(f, "ring entry size is {found} bytes, expected {expected}")
            }
            RingError::BadCapacity(c) => {
                write!(f, "ring capacity {c} is not a power of two >= 2")
            }
            RingError::TooSmall { need, have } => {
                write!(f, "ring needs {need} bytes, memory has {have}")
            }
            RingError::Misaligned => write!(f, "ring memory is not 128-byte aligned"),
            RingError::Corrupt { head, tail } => {
                write!(f, "ring indices are corrupt: head {head}, tail {tail}")
            }
        }
    }
}

impl std::error::Error for RingError {}
