//! Layout of a host's attach segment: the shared memory holding its submission and completion
//! rings.
//!
//! The engine creates the segment (so a host cannot choose a layout that hurts the engine),
//! initialises both rings, and passes the segment to the host. The host validates this header
//! before using the rings; the engine never re-reads it.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"RCSEG001"` little-endian.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"RCSEG001");

/// First 128 bytes of an attach segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C, align(128))]
pub struct SegmentHeader {
    /// [`SEGMENT_MAGIC`].
    pub magic: u64,
    /// [`crate::ABI_VERSION`] of the engine that built the segment.
    pub abi_version: u32,
    /// Engine-assigned host id (index in the engine's host table).
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
    /// Explicit padding to the cache-line unit.
    pub _pad: [u8; 80],
}
