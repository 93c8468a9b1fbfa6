//! Layout of a single-producer single-consumer ring's control block in shared memory.
//!
//! ```text
//! offset 0    RingHeader     (128 B, written once by the creator, read-only afterwards)
//! offset 128  ProducerIndex  (128 B, `tail`: written by the producer only)
//! offset 256  ConsumerIndex  (128 B, `head`: written by the consumer only)
//! offset 384  slots[capacity] of `entry_size` bytes
//! ```
//! `head` and `tail` are free-running 64-bit counters (never wrap in practice); the number of
//! filled slots is `tail - head`, which a consumer must check is `<= capacity` because the other
//! side may be buggy or dead. They are accessed as atomics by `ringcast-ring`, which asserts that
//! its atomic view has exactly this layout.
//!
//! The doorbell (an event count, for consumers that sleep instead of spinning): a consumer about
//! to sleep sets `waiting` in its line, re-checks the ring, and sleeps on `bell` (a futex) only
//! if the ring is still empty and `bell` unchanged; a producer, after publishing `tail`, bumps
//! `bell` and wakes the sleeper when it sees `waiting` set. A consumer that never sleeps leaves
//! `waiting` at 0 and costs the producer one load per publish.
//!
//! Mirrored indices: when one end of a ring is played by DMA (the engine of a host with
//! host-owned rings reads and writes them with `process_vm_readv`/`writev` or RDMA), an index
//! store from the far side is a copy that another CPU may see half done (the kernel copies with
//! `rep movsb`; nothing makes 8 bytes single-copy atomic). Both ends then store each index
//! twice — `tail` then `tail_mirror` (`head` then `head_mirror`), the second only after the first
//! is complete and visible — and read them in the other order, mirror first, trusting a value
//! only when both agree. The mirror is stored only once the index is complete, so a reader
//! that sees a torn mirror reads the index after it complete (or torn towards a later value):
//! the two disagree and the reader looks again. They agree on a value never stored only if both
//! reads are torn at once to the same bytes — two half-done copies of consecutive values of a
//! counter landing on the same mix; the reader's bounds check (`tail - head <= capacity`) is the
//! backstop. RDMA writes of 8 aligned bytes are atomic on PCIe, so on a DPU the mirror is
//! belt and braces.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"RCRING01"` little-endian: marks an initialised ring control block.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"RCRING01");

/// Which ring this is (a consumer checks it attached the ring it expected).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct RingRole(pub u32);

impl RingRole {
    /// Host → engine submission ring of [`crate::SubmissionDescriptor`].
    pub const SUBMISSION: RingRole = RingRole(1);
    /// Engine → host completion ring of [`crate::Completion`].
    pub const COMPLETION: RingRole = RingRole(2);
}

/// Static description of the ring, written before the ring is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct RingHeader {
    /// [`RING_MAGIC`].
    pub magic: u64,
    /// [`crate::ABI_VERSION`] of the creator.
    pub abi_version: u32,
    /// [`RingRole`].
    pub role: RingRole,
    /// Size of one slot in bytes.
    pub entry_size: u32,
    /// Number of slots; a power of two.
    pub capacity: u32,
    /// Explicit padding to the cache-line unit.
    pub _pad: [u8; 104],
}

/// The producer's cache line: the index of the next slot it will fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct ProducerIndex {
    /// Free-running count of published entries.
    pub tail: u64,
    /// Doorbell: bumped by the producer after a publish the sleeping consumer must see (the
    /// consumer sleeps on this word).
    pub bell: u32,
    /// Explicit padding.
    pub _pad0: u32,
    /// Mirrored rings only (one end played by DMA): `tail` stored again after `tail`; see the
    /// module's "Mirrored indices".
    pub tail_mirror: u64,
    /// Explicit padding to the cache-line unit.
    pub _pad: [u8; 104],
}

/// The consumer's cache line: the index of the next slot it will read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct ConsumerIndex {
    /// Free-running count of consumed entries.
    pub head: u64,
    /// Non-zero while the consumer is about to sleep or sleeping on the producer's `bell`.
    pub waiting: u32,
    /// Explicit padding.
    pub _pad0: u32,
    /// Mirrored rings only: `head` stored again after `head`.
    pub head_mirror: u64,
    /// Explicit padding to the cache-line unit.
    pub _pad: [u8; 104],
}

/// The whole control block; slots follow it at [`RingControl::SLOTS_OFFSET`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct RingControl {
    /// Static description.
    pub header: RingHeader,
    /// Producer-owned line.
    pub producer: ProducerIndex,
    /// Consumer-owned line.
    pub consumer: ConsumerIndex,
}

impl RingControl {
    /// Byte offset of slot 0 from the start of the control block.
    pub const SLOTS_OFFSET: usize = core::mem::size_of::<RingControl>();

    /// Bytes a ring of `capacity` entries of `entry_size` bytes occupies, control block included.
    pub const fn footprint(capacity: u32, entry_size: u32) -> usize {
        Self::SLOTS_OFFSET + capacity as usize * entry_size as usize
    }
}
