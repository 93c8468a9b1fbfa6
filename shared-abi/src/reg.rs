//! Memory registration: region keys, access rights and the record the engine keeps per region.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Opaque handle of a registered region, issued by the engine. 0 never names a region.
///
/// The engine packs a table slot and a generation into it so that a key that was deregistered
/// and whose slot was reused is still refused (`UnknownRegion`), not silently redirected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct RegionKey(pub u32);

impl RegionKey {
    /// The "no region" key.
    pub const NONE: RegionKey = RegionKey(0);
}

/// Access rights of a region, as bit flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct Access(pub u32);

impl Access {
    /// The engine may read the region (source of COPY, root buffer of a broadcast).
    pub const READ: Access = Access(1);
    /// The engine may write the region (destination of COPY, receive buffer of a broadcast).
    pub const WRITE: Access = Access(2);
    /// Both.
    pub const READ_WRITE: Access = Access(3);
    /// Bits with a meaning; others must be zero.
    pub const DEFINED: u32 = 3;

    /// True when every bit of `need` is set in `self`.
    pub const fn allows(self, need: Access) -> bool {
        self.0 & need.0 == need.0
    }
}

/// What the engine records for one registered region: which host segment it lives in and where.
///
/// `segment` is the engine's handle for the shared-memory segment the host passed at
/// registration; `seg_offset`/`len` bound the region inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct RegistrationRecord {
    /// The key handed to the host.
    pub key: RegionKey,
    /// Access rights.
    pub access: Access,
    /// Engine handle of the backing segment.
    pub segment: u64,
    /// Offset of the region's first byte inside the segment.
    pub seg_offset: u64,
    /// Region length in bytes.
    pub len: u64,
}
