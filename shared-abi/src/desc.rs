//! The submission descriptor: one 64-byte entry of a host's submission ring.
//!
//! Memory is always named by (region key, offset, length) from the engine's registration table,
//! never by address: the engine resolves and bounds-checks every reference (docs/design.md §5).
use crate::opcode::Opcode;
use crate::reg::RegionKey;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Flag bits defined for [`SubmissionDescriptor::flags`]. None are defined in ABI version 1;
/// every bit is reserved and must be zero (the engine answers `BadFlags` otherwise), so that a
/// later version can give them meaning without old engines misreading them.
pub const DESC_FLAGS_DEFINED: u8 = 0;

/// One submission-ring entry (64 bytes, one descriptor per cache line half).
///
/// | op     | `key`/`offset`          | `aux_key`/`aux_offset` | `len`        | `comm`/`root` |
/// |--------|-------------------------|------------------------|--------------|---------------|
/// | NOP    | 0                       | 0                      | 0            | 0             |
/// | COPY   | destination             | source                 | bytes to copy| 0             |
/// | BCAST  | the message buffer      | 0                      | message bytes| comm / root   |
/// | COMM_CREATE | the record ([`crate::comm`]) | 0             | record bytes | new comm / 0  |
/// | COMM_FREE | 0                    | 0                      | 0            | comm / 0      |
/// | ALLGATHER | the receive buffer (`size × len`) | this rank's block (0: in place) | block bytes | comm / 0 |
/// | ALLREDUCE | the work buffer (`size × len`; the result at its start) | this rank's contribution (0: in place) | bytes | comm / 0; `spec`: type and operation |
/// | REDUCE | the work buffer (`size × len`; the result at its start, at the root) | this rank's contribution (0: in place) | bytes | comm / root; `spec`: type and operation |
/// | BARRIER | scratch (≥ 1 byte per rank) | 0                   | scratch bytes | comm / 0     |
/// | ALLTOALL | the work buffer (`(size + 1) × size × len`; the result at its start) | the send buffer (`size × len`) | block bytes | comm / 0 |
/// | SCAN, EXSCAN | the work buffer (`size × len`; the prefix at its start) | this rank's contribution (0: in place) | bytes | comm / 0; `spec`: type and operation |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SubmissionDescriptor {
    /// What to do; see [`Opcode`].
    pub opcode: Opcode,
    /// Reserved flag bits; see [`DESC_FLAGS_DEFINED`].
    pub flags: u8,
    /// A reduction's element type and operation ([`crate::reduce::reduce_spec`]): `ALLREDUCE`,
    /// `REDUCE`, `SCAN` and `EXSCAN`; 0 for every other opcode.
    pub spec: u16,
    /// Root rank of a collective (0 for non-collective operations).
    pub root: u32,
    /// Communicator handle returned by the engine at creation (0 for non-collective operations).
    pub comm: u64,
    /// Opaque to the engine; echoed in the completion entry.
    pub cookie: u64,
    /// Number of bytes the operation covers.
    pub len: u64,
    /// Primary region (the destination of a COPY, the buffer of a collective).
    pub key: RegionKey,
    /// Secondary region (the source of a COPY); 0 when unused.
    pub aux_key: RegionKey,
    /// Byte offset into the primary region.
    pub offset: u64,
    /// Byte offset into the secondary region.
    pub aux_offset: u64,
    /// Must be zero.
    pub _reserved1: u64,
}

/// A (key, offset) pair naming a place in registered memory; a convenience for builders, not
/// itself part of the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RegionRef {
    /// Registered region.
    pub key: RegionKey,
    /// Byte offset inside it.
    pub offset: u64,
}

impl SubmissionDescriptor {
    /// A NOP carrying `cookie`.
    pub const fn nop(cookie: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::NOP;
        d.cookie = cookie;
        d
    }

    /// A COPY of `len` bytes from `src` to `dst`, carrying `cookie`.
    pub const fn copy(cookie: u64, dst: RegionRef, src: RegionRef, len: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::COPY;
        d.cookie = cookie;
        d.len = len;
        d.key = dst.key;
        d.offset = dst.offset;
        d.aux_key = src.key;
        d.aux_offset = src.offset;
        d
    }

    /// A BCAST of `len` bytes at `buf` on communicator `comm` from rank `root`, carrying `cookie`.
    pub const fn bcast(cookie: u64, comm: u64, root: u32, buf: RegionRef, len: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::BCAST;
        d.cookie = cookie;
        d.comm = comm;
        d.root = root;
        d.len = len;
        d.key = buf.key;
        d.offset = buf.offset;
        d
    }

    /// A COMM_CREATE of communicator `comm` from the record of `len` bytes at `record`.
    pub const fn comm_create(cookie: u64, comm: u64, record: RegionRef, len: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::COMM_CREATE;
        d.cookie = cookie;
        d.comm = comm;
        d.len = len;
        d.key = record.key;
        d.offset = record.offset;
        d
    }

    /// An ALLGATHER of `block` bytes per rank on communicator `comm` into `recv`
    /// (`size × block` bytes), this rank's block read from `send`, or in place (`None`: already
    /// at its place in `recv`), carrying `cookie`.
    pub const fn allgather(
        cookie: u64,
        comm: u64,
        recv: RegionRef,
        send: Option<RegionRef>,
        block: u64,
    ) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::ALLGATHER;
        d.cookie = cookie;
        d.comm = comm;
        d.len = block;
        d.key = recv.key;
        d.offset = recv.offset;
        if let Some(s) = send {
            d.aux_key = s.key;
            d.aux_offset = s.offset;
        }
        d
    }

    /// An ALLREDUCE of `len` bytes of `dtype` elements with `op` on communicator `comm`, in the
    /// work buffer `work` (`size × len` bytes; the result at its start), this rank's
    /// contribution read from `send` or in place (`None`: at `work + rank × len`).
    pub const fn allreduce(
        cookie: u64,
        comm: u64,
        work: RegionRef,
        send: Option<RegionRef>,
        len: u64,
        dtype: crate::reduce::DataType,
        op: crate::reduce::ReduceOp,
    ) -> Self {
        let mut d = Self::allgather(cookie, comm, work, send, len);
        d.opcode = Opcode::ALLREDUCE;
        d.spec = crate::reduce::reduce_spec(dtype, op);
        d
    }

    /// A REDUCE to rank `root`: the [`SubmissionDescriptor::allreduce`] whose result only the
    /// root receives.
    #[allow(clippy::too_many_arguments)]
    pub const fn reduce(
        cookie: u64,
        comm: u64,
        root: u32,
        work: RegionRef,
        send: Option<RegionRef>,
        len: u64,
        dtype: crate::reduce::DataType,
        op: crate::reduce::ReduceOp,
    ) -> Self {
        let mut d = Self::allreduce(cookie, comm, work, send, len, dtype, op);
        d.opcode = Opcode::REDUCE;
        d.root = root;
        d
    }

    /// A SCAN (`exclusive`: an EXSCAN) of `len` bytes of `dtype` elements with `op`: the
    /// buffers of an [`SubmissionDescriptor::allreduce`], this rank's prefix at the start of
    /// `work`.
    #[allow(clippy::too_many_arguments)]
    pub const fn scan(
        cookie: u64,
        comm: u64,
        work: RegionRef,
        send: Option<RegionRef>,
        len: u64,
        dtype: crate::reduce::DataType,
        op: crate::reduce::ReduceOp,
        exclusive: bool,
    ) -> Self {
        let mut d = Self::allreduce(cookie, comm, work, send, len, dtype, op);
        d.opcode = if exclusive { Opcode::EXSCAN } else { Opcode::SCAN };
        d
    }

    /// A BARRIER on communicator `comm` with `len` bytes of `scratch` (at least the
    /// communicator's size).
    pub const fn barrier(cookie: u64, comm: u64, scratch: RegionRef, len: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::BARRIER;
        d.cookie = cookie;
        d.comm = comm;
        d.len = len;
        d.key = scratch.key;
        d.offset = scratch.offset;
        d
    }

    /// An ALLTOALL of `block` bytes per pair on communicator `comm`: block `q` of `send`
    /// (`size × block` bytes) goes to rank `q`; the result is at the start of `work`
    /// (`(size + 1) × size × block` bytes).
    pub const fn alltoall(cookie: u64, comm: u64, work: RegionRef, send: RegionRef, block: u64) -> Self {
        let mut d = Self::allgather(cookie, comm, work, Some(send), block);
        d.opcode = Opcode::ALLTOALL;
        d
    }

    /// A COMM_FREE of communicator `comm`.
    pub const fn comm_free(cookie: u64, comm: u64) -> Self {
        let mut d = Self::zeroed_const();
        d.opcode = Opcode::COMM_FREE;
        d.cookie = cookie;
        d.comm = comm;
        d
    }

    const fn zeroed_const() -> Self {
        SubmissionDescriptor {
            opcode: Opcode(0),
            flags: 0,
            spec: 0,
            root: 0,
            comm: 0,
            cookie: 0,
            len: 0,
            key: RegionKey(0),
            aux_key: RegionKey(0),
            offset: 0,
            aux_offset: 0,
            _reserved1: 0,
        }
    }
}
