//! The completion entry: one 64-byte entry of a host's completion ring.
//!
//! Besides the status it returns the engine counters a user wants per operation (how much of a
//! broadcast came by multicast vs repair, penalty rounds, retransmissions, CRC drops) so that
//! "why was this one slow" can be answered without a debugger.
use crate::opcode::Opcode;
use crate::status::Status;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// One completion-ring entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Completion {
    /// The descriptor's `cookie`, echoed.
    pub cookie: u64,
    /// Bytes the operation moved (0 on error).
    pub bytes: u64,
    /// Result; see [`crate::StatusKind`].
    pub status: Status,
    /// The descriptor's opcode, echoed (raw: an unknown opcode is echoed as received).
    pub opcode: Opcode,
    /// Algorithm the engine chose for a collective (0 = none).
    pub algorithm: u8,
    /// Must be zero.
    pub _reserved0: u32,
    /// Engine time from intake of the descriptor to its completion, in nanoseconds.
    pub engine_ns: u64,
    /// Fragments this rank received by multicast (stage 1).
    pub frags_multicast: u32,
    /// Fragments this rank received by repair (stage 2).
    pub frags_repair: u32,
    /// Penalty rounds waited for the ring predecessor.
    pub penalty_rounds: u32,
    /// Retransmissions this operation needed.
    pub retransmits: u32,
    /// Datagrams dropped for a bad CRC while this operation ran.
    pub crc_drops: u32,
    /// Must be zero.
    pub _reserved1: u32,
    /// Must be zero.
    pub _reserved2: u64,
}

impl Completion {
    /// A completion for `cookie`/`opcode` with `status` and all counters zero.
    pub const fn new(cookie: u64, opcode: Opcode, status: Status, bytes: u64) -> Self {
        Completion {
            cookie,
            bytes,
            status,
            opcode,
            algorithm: 0,
            _reserved0: 0,
            engine_ns: 0,
            frags_multicast: 0,
            frags_repair: 0,
            penalty_rounds: 0,
            retransmits: 0,
            crc_drops: 0,
            _reserved1: 0,
            _reserved2: 0,
        }
    }
}
