//! The communicator record a host hands its engine with `COMM_CREATE`: who the members are and
//! the identity every member agreed on at creation (docs/design.md §3.1).
//!
//! It lives in a registered region (the descriptor's `key`/`offset`/`len`): a
//! [`CommCreateHeader`] followed by `size` little-endian `u32` world ranks, member `i` of the new
//! communicator being world rank `members[i]`. The engine checks everything — magic, `size`
//! against `len`, `my_rank < size`, that `members[my_rank]` is the posting process, ranks inside
//! the world, no rank twice — and answers a bad record with `BadDescriptor`.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"RCCM"` little-endian.
pub const COMM_MAGIC: u32 = u32::from_le_bytes(*b"RCCM");

/// Bytes of a communicator's secret key.
pub const COMM_KEY_LEN: usize = 32;

/// Head of a `COMM_CREATE` record (72 bytes), followed by `size` `u32` world ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct CommCreateHeader {
    /// [`COMM_MAGIC`].
    pub magic: u32,
    /// Members of the new communicator.
    pub size: u32,
    /// The posting process's rank in it.
    pub my_rank: u32,
    /// Must be zero.
    pub _reserved0: u32,
    /// Seed agreed at creation (randomized root delay).
    pub seed: u64,
    /// The 112-bit multicast group id agreed at creation.
    pub group: [u8; 14],
    /// Must be zero.
    pub _reserved1: [u8; 2],
    /// The communicator's secret key (authenticates its frames; never on the wire). Must not be
    /// all zero.
    pub key: [u8; COMM_KEY_LEN],
}

impl CommCreateHeader {
    /// The head of a record of `size` members, the posting process being `my_rank`, with the
    /// identity every member agreed on (`seed`, `group`, `key`).
    pub const fn new(size: u32, my_rank: u32, seed: u64, group: [u8; 14], key: [u8; COMM_KEY_LEN]) -> Self {
        CommCreateHeader {
            magic: COMM_MAGIC,
            size,
            my_rank,
            _reserved0: 0,
            seed,
            group,
            _reserved1: [0; 2],
            key,
        }
    }

    /// Bytes of a record with `size` members.
    pub const fn record_len(size: u32) -> usize {
        core::mem::size_of::<CommCreateHeader>() + size as usize * 4
    }

    /// The whole record's bytes: this head, then `members` (world ranks) little-endian.
    pub fn record<'a>(&'a self, members: &'a [u32]) -> impl Iterator<Item = u8> + 'a {
        self.as_bytes().iter().copied().chain(members.iter().flat_map(|m| m.to_le_bytes()))
    }
}
