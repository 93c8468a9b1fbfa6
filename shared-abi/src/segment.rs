//! Layout of a host's attach segment: the shared memory holding its submission and completion
//! rings.
//!
//! Mapped attach (DMA backend `mapped`): the engine creates the segment (so a host cannot choose
//! a layout that hurts the engine), initialises both rings, and passes the segment to the host.
//! The host validates this header before using the rings; the engine never re-reads it.
//!
//! Host-owned attach (DMA backend `cma`, the BlueField contract): the host builds the same
//! layout in its own memory and names its address at `ATTACH`; the engine reads this header once
//! by DMA, checks every field against the layout it would have built and the proof nonce, and
//! from then on reaches the rings only by DMA.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"RCSEG001"` little-endian.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"RCSEG001");

/// First 128 bytes of an attach segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct SegmentHeader {
    /// [`SEGMENT_MAGIC`].
    pub magic: u64,
    /// [`crate::ABI_VERSION`] of whoever built the segment (the engine, or the host for
    /// host-owned rings; the other side refuses another version).
    pub abi_version: u32,
    /// Engine-assigned host id (index in the engine's host table); 0 in host-owned segments
    /// (the id comes in `ATTACH_OK`).
    pub host_id: u32,
    /// Offset of the submission ring's [`crate::RingControl`].
    pub sq_offset: u64,
    /// Offset of the completion ring's [`crate::RingControl`].
    pub cq_offset: u64,
    /// Submission ring capacity (entries).
    pub sq_capacity: u32,
    /// Completion ring capacity (entries).
    pub cq_capacity: u32,
    /// Total segment length in bytes.
    pub total_len: u64,
    /// Host-owned rings only (the `cma` DMA backend, where the host builds this segment in its
    /// own memory and the engine reads it by DMA): the nonce the engine sent in `HELLO_OK`,
    /// written here before `ATTACH`. Finding it at the address the host named, in the process
    /// the host named, proves the claim (a host cannot point the engine at another process's
    /// memory). 0 in engine-built segments.
    pub attach_proof: u64,
    /// Explicit padding to the cache-line unit.
    pub _pad: [u8; 72],
}
