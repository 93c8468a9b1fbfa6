//! Operation codes of submission descriptors: a `u8` newtype on the ABI, a Rust enum inside.
//!
//! A host (or a corrupted ring) can put any byte in the opcode field, so the ABI type is a plain
//! newtype and conversion to [`Op`] is fallible: the engine answers an unknown value with
//! [`crate::StatusKind::UnknownOpcode`] instead of trusting it.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Raw opcode byte as stored in a [`crate::SubmissionDescriptor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct Opcode(pub u8);

impl Opcode {
    /// Does nothing; completes with `Ok` and 0 bytes. Proves the ring round trip.
    pub const NOP: Opcode = Opcode(0);
    /// Engine-side copy between two registered regions (as a NIC's DMA engine would):
    /// `aux` is the source, `region` the destination, `region.len` bytes.
    pub const COPY: Opcode = Opcode(1);
    /// Broadcast on the engine's communicator `comm` from rank `root`: `len` bytes at
    /// (`region`, `offset`), read at the root and written at every other rank. Completes when
    /// this rank's part is over (the root: once the message is in the engine's channel).
    pub const BCAST: Opcode = Opcode(2);
    /// Creates communicator `comm` (a non-zero handle every member uses: the cookie drawn at
    /// creation) from the record at (`region`, `offset`, `len`) (see [`crate::comm`]). Every
    /// member process posts it; it completes once this engine knows the communicator.
    pub const COMM_CREATE: Opcode = Opcode(3);
    /// This process leaves communicator `comm`; the engine drops it once its last local member
    /// left and the broadcasts it took part in are settled with the other engines.
    pub const COMM_FREE: Opcode = Opcode(4);
    /// Allgather on communicator `comm`: every rank contributes `len` bytes and receives every
    /// rank's, in rank order, into (`region`, `offset`): `size × len` bytes, rank `r`'s block at
    /// `r × len`. The contribution is read from (`aux`, `aux_offset`), or — `aux` 0 — is
    /// already in place at this rank's block of the receive buffer (`MPI_IN_PLACE`).
    /// Completes when every block is in this rank's receive buffer.
    pub const ALLGATHER: Opcode = Opcode(5);
    /// Allreduce on communicator `comm` of `len` bytes of elements (type and operation in
    /// `spec`: [`crate::reduce::reduce_spec`]). (`region`, `offset`) is a work buffer of
    /// `size × len` bytes: this rank's contribution is read from (`aux`, `aux_offset`), or is
    /// already in place at `rank × len`; the engine gathers the contributions there (one block
    /// per rank, or — composed leader-based, the default — one block per node at its first
    /// rank's place, each node's contributions reduced by its engine), reduces them in a fixed
    /// order (rank order, or node by node — then, by default, the node results by
    /// recursive doubling between the nodes, a balanced tree: docs/protocol.md — the same at
    /// every rank, so results are bit-identical, floats included) and writes the result at the
    /// start of the work buffer; the rest of the
    /// work buffer is unspecified afterwards. Completes with `len` bytes once the result is
    /// there.
    pub const ALLREDUCE: Opcode = Opcode(6);
    /// Barrier on communicator `comm`: completes at a rank only once every rank of the
    /// communicator has posted it. (`region`, `offset`, `len`) is scratch the engine may read
    /// and write — at least one byte per rank of the communicator (`len ≥ size`); what it
    /// holds afterwards is unspecified. Completes with 0 bytes.
    pub const BARRIER: Opcode = Opcode(7);
    /// Reduce to rank `root` of communicator `comm`: an [`Opcode::ALLREDUCE`] (same buffers,
    /// same `spec`) whose result only the root receives, at the start of its work buffer
    /// (completing with `len` bytes); every other rank's work buffer ends with unspecified
    /// contents and its operation completes with 0 bytes, without reducing.
    pub const REDUCE: Opcode = Opcode(8);
    /// Alltoall on communicator `comm`: every rank sends block `q` of its send buffer
    /// (`aux`, `aux_offset`: `size × len` bytes) to rank `q`. (`region`, `offset`) is a work
    /// buffer of `(size + 1) × size × len` bytes: the result — block `r` from rank `r`, at
    /// `r × len` — at its start; the rest is scratch the engine writes (every rank's whole send
    /// buffer arrives there: the multicast alltoall, one message per rank, for short blocks).
    /// Completes with `size × len` bytes.
    pub const ALLTOALL: Opcode = Opcode(9);
    /// Inclusive prefix reduction (`MPI_Scan`) on communicator `comm`: the buffers, `len` and
    /// `spec` of an [`Opcode::ALLREDUCE`]; at rank `i` the result is `c₀ ⊕ c₁ ⊕ … ⊕ cᵢ` of the
    /// ranks' contributions, reduced left to right in rank order (the same bits whatever the
    /// placement), at the start of the work buffer; the rest of it is unspecified afterwards.
    /// Completes with `len` bytes.
    pub const SCAN: Opcode = Opcode(10);
    /// Exclusive prefix reduction (`MPI_Exscan`): an [`Opcode::SCAN`] whose result at rank
    /// `i > 0` is `c₀ ⊕ … ⊕ cᵢ₋₁`; at rank 0, as MPI leaves it undefined, the work buffer's
    /// contents are unspecified and the operation completes with 0 bytes.
    pub const EXSCAN: Opcode = Opcode(11);
}

/// The operations this engine build understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// See [`Opcode::NOP`].
    Nop,
    /// See [`Opcode::COPY`].
    Copy,
    /// See [`Opcode::BCAST`].
    Bcast,
    /// See [`Opcode::COMM_CREATE`].
    CommCreate,
    /// See [`Opcode::COMM_FREE`].
    CommFree,
    /// See [`Opcode::ALLGATHER`].
    Allgather,
    /// See [`Opcode::ALLREDUCE`].
    Allreduce,
    /// See [`Opcode::BARRIER`].
    Barrier,
    /// See [`Opcode::REDUCE`].
    Reduce,
    /// See [`Opcode::ALLTOALL`].
    Alltoall,
    /// See [`Opcode::SCAN`].
    Scan,
    /// See [`Opcode::EXSCAN`].
    Exscan,
}

impl From<Op> for Opcode {
    fn from(op: Op) -> Self {
        match op {
            Op::Nop => Opcode::NOP,
            Op::Copy => Opcode::COPY,
            Op::Bcast => Opcode::BCAST,
            Op::CommCreate => Opcode::COMM_CREATE,
            Op::CommFree => Opcode::COMM_FREE,
            Op::Allgather => Opcode::ALLGATHER,
            Op::Allreduce => Opcode::ALLREDUCE,
            Op::Barrier => Opcode::BARRIER,
            Op::Reduce => Opcode::REDUCE,
            Op::Alltoall => Opcode::ALLTOALL,
            Op::Scan => Opcode::SCAN,
            Op::Exscan => Opcode::EXSCAN,
        }
    }
}

impl TryFrom<Opcode> for Op {
    type Error = Opcode;
    fn try_from(code: Opcode) -> Result<Self, Opcode> {
        match code {
            Opcode::NOP => Ok(Op::Nop),
            Opcode::COPY => Ok(Op::Copy),
            Opcode::BCAST => Ok(Op::Bcast),
            Opcode::COMM_CREATE => Ok(Op::CommCreate),
            Opcode::COMM_FREE => Ok(Op::CommFree),
            Opcode::ALLGATHER => Ok(Op::Allgather),
            Opcode::ALLREDUCE => Ok(Op::Allreduce),
            Opcode::BARRIER => Ok(Op::Barrier),
            Opcode::REDUCE => Ok(Op::Reduce),
            Opcode::ALLTOALL => Ok(Op::Alltoall),
            Opcode::SCAN => Ok(Op::Scan),
            Opcode::EXSCAN => Ok(Op::Exscan),
            other => Err(other),
        }
    }
}

impl Op {
    /// Whether the ranks of a communicator all make this call, in step: a broadcast or a
    /// composed collective (not a copy, a no-op or a communicator's creation or release).
    pub const fn is_collective(self) -> bool {
        matches!(
            self,
            Op::Bcast
                | Op::Allgather
                | Op::Allreduce
                | Op::Reduce
                | Op::Alltoall
                | Op::Barrier
                | Op::Scan
                | Op::Exscan
        )
    }

    /// Short lowercase name, for logs and the CLI.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Nop => "nop",
            Op::Copy => "copy",
            Op::Bcast => "bcast",
            Op::CommCreate => "comm-create",
            Op::CommFree => "comm-free",
            Op::Allgather => "allgather",
            Op::Allreduce => "allreduce",
            Op::Barrier => "barrier",
            Op::Reduce => "reduce",
            Op::Alltoall => "alltoall",
            Op::Scan => "scan",
            Op::Exscan => "exscan",
        }
    }
}
