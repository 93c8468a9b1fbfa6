//! The datagram header every ringcast frame carries on a fabric (docs/design.md §3.1).
//!
//! ```text
//! 0        1        2                 4                 8
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! |version | kind   | flags           | src rank                          |
//! +--------+--------+--------+--------+--------+--------+--------+--------+
//! | communicator cookie (64)                                              |
//! +-----------------------------------+-----------------------------------+
//! | broadcast id (BID)                | fragment sequence number          |
//! +-----------------------------------+-----------------------------------+
//! | fragment count                    | total message length              |
//! +-----------------------------------+-----------------------------------+
//! | body ...                          | tag (8 bytes)     | CRC32C (4 B)  |
//! ```
//! 32 bytes of header, all fields little-endian (explicit byte-order types: frames cross machines
//! of any endianness), then the body, then a 12-byte trailer: an 8-byte keyed **tag**
//! (SipHash-2-4 under the communicator's secret key) and a CRC32C over everything before it. The
//! CRC catches noise; the tag, which only members holding the key can compute, authenticates the
//! frame (the cookie only names the communicator: anyone who sees the traffic learns it). A
//! frame is never trusted before its length, version, kind, CRC, cookie and tag have been
//! checked. Under `protocol.auth = tag` ([`WIRE_AUTH_TAG`]) a data frame's tag is two halves:
//! the low 32 bits over the header, the high 32 over the header and the call the fragment
//! belongs to (its context, root and place in its communicator's sequence), checked against the
//! call posted at the receiver
//! (`ringcast_proto::comm::auth::CommKeys::data_tag`).
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Version carried in [`WireHeader::version`] (2: keyed tag in the trailer, 16-byte message MAC;
/// 3: the synchronization body carries the barrier that cut its epoch; 4: `CALL_SHAPE`; 5: the
/// message MAC covers the root, a barrier's identity its place in the communicator's sequence,
/// and under `protocol.auth = tag` a data frame's tag binds its call — the same bytes, other
/// values, so engines of version 4 and 5 drop each other's frames as `BadVersion` instead of
/// failing each other's checks).
pub const WIRE_VERSION: u8 = 5;

/// Set in [`WireHeader::version`] by engines that authenticate by the keyed header tag alone
/// (`protocol.auth = tag`, the `shm` fabric's default): the frame format is the same — the last
/// fragment still carries its [`crate::frame::DIGEST_LEN`]-byte trailer, a keyed MAC of the call
/// without the payload — but an engine of the other setting must not accept it, and drops it as
/// `BadVersion` (counted) before anything else.
pub const WIRE_AUTH_TAG: u8 = 0x80;

/// Size of the keyed tag at the start of the trailer.
pub const WIRE_TAG_LEN: usize = 8;

/// Size of the CRC32C at the end of the trailer.
pub const WIRE_CRC_LEN: usize = 4;

/// Size of the trailer that follows the body: the keyed tag, then the CRC32C.
pub const WIRE_TRAILER_LEN: usize = WIRE_TAG_LEN + WIRE_CRC_LEN;

/// `READY` flag: the root-delay "ready" of the rank the root waits for.
pub const READY_FLAG_READY: u16 = 0;
/// `READY` flag: the sender holds the whole message (selective repair: ask me for what you miss).
pub const READY_FLAG_HAVE_ALL: u16 = 1;
/// `READY` flag: answer to a retransmission request when the sender holds none of the missing
/// fragments — a liveness signal, so silence means an unreachable engine, not a slow one.
pub const READY_FLAG_ALIVE: u16 = 2;
/// `READY` flag: answer to a retransmission request from a rank whose communicator is broken
/// (it lost a member and will not take part in further broadcasts): the asker fails its
/// operation with `CommunicatorBroken` instead of waiting for data that will never come.
pub const READY_FLAG_BROKEN: u16 = 3;
/// `READY` flag: "are you there?" — a rank waiting on the synchronization asks the neighbours it
/// waits on; any live engine answers `ALIVE` (or `BROKEN`), however slow its application.
pub const READY_FLAG_PROBE: u16 = 4;
/// `READY` flag: the root could not read its buffer and aborted this broadcast; the asker fails
/// its operation with `RootFailed` (the communicator stays usable).
pub const READY_FLAG_ABORTED: u16 = 5;
/// `READY` flag: the sender made another call where this broadcast id falls — a barrier, which
/// skipped the id — so the broadcast will never come; the asker fails its operation with
/// `DigestMismatch`, as for a broadcast whose call context differs.
pub const READY_FLAG_MISMATCH: u16 = 6;
/// Broadcast id carried by synchronization probes and their answers.
pub const SYNC_PROBE_BID: u32 = u32::MAX;

/// Kind of a frame.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned,
)]
#[repr(transparent)]
pub struct FrameKind(pub u8);

impl FrameKind {
    /// Stage-1 data fragment sent by multicast.
    pub const DATA_MULTICAST: FrameKind = FrameKind(1);
    /// Stage-2 data fragment forwarded along the repair ring (or by a point-to-point algorithm).
    pub const DATA_REPAIR: FrameKind = FrameKind(2);
    /// "Ready" of the rank the root waits for (randomized root delay).
    pub const READY: FrameKind = FrameKind(3);
    /// Synchronization UP phase: combined ACK/NACK of a subtree.
    pub const SYNC_UP: FrameKind = FrameKind(4);
    /// Synchronization DOWN phase: the combined result.
    pub const SYNC_DOWN: FrameKind = FrameKind(5);
    /// Request to retransmit fragments of a broadcast.
    pub const RETRANSMIT_REQUEST: FrameKind = FrameKind(6);
    /// What a call on the communicator was: asked by an engine one of whose local processes
    /// made that call with a descriptor whose shape it cannot read (a bad length, type, root or
    /// flag) — the communicator's manager (rank 0) asks every engine, the others ask it. The
    /// broadcast id field carries the call's index on the communicator (low 32 bits), the
    /// flags one of `SHAPE_*`, the body a [`crate::frame::CallShapeBody`].
    pub const CALL_SHAPE: FrameKind = FrameKind(7);
}

/// `CALL_SHAPE` flag: "what was this call?" — the body zero (the question of a call awaiting
/// its shape), or the asker's own shape of the call (a call that waited, checked for disagreeing: the answerer
/// compares it with its own).
pub const SHAPE_QUERY: u16 = 0;
/// `CALL_SHAPE` flag: the call as a local process of the sender made it (the body).
pub const SHAPE_KNOWN: u16 = 1;
/// `CALL_SHAPE` flag: every local process of the sender made this call unreadable too, so it
/// *awaits its shape* there as well (the engine's participation `AwaitingShape`; this value
/// was named `SHAPE_VOID` before, and stays 2 on the wire).
pub const SHAPE_AWAITING: u16 = 2;
/// `CALL_SHAPE` flag: the sender's processes have not made this call yet; it answers once one
/// does (a liveness signal meanwhile, as `READY_FLAG_ALIVE` is for a broadcast).
pub const SHAPE_PENDING: u16 = 3;
/// `CALL_SHAPE` flag, from the communicator's manager: it gave up asking (an engine silent for
/// the peer timeout); every engine ends the call as skipped, alike.
pub const SHAPE_SILENT: u16 = 4;
/// `CALL_SHAPE` flag: the call disagrees somewhere — the shapes two engines made it with do not
/// make one schedule. From another engine to the communicator's manager (it found it); from the
/// manager to every engine. Each fails its call `DigestMismatch` and breaks the communicator.
pub const SHAPE_MISMATCH: u16 = 5;

/// The 32-byte frame header.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned,
)]
#[repr(C)]
pub struct WireHeader {
    /// [`WIRE_VERSION`].
    pub version: u8,
    /// [`FrameKind`].
    pub kind: FrameKind,
    /// Kind-specific flags.
    pub flags: U16,
    /// Sender's rank in the communicator.
    pub src_rank: U32,
    /// Communicator cookie (random per communicator).
    pub cookie: U64,
    /// Broadcast id: per-communicator counter of issued broadcasts.
    pub bid: U32,
    /// Index of this fragment in the message.
    pub frag_seq: U32,
    /// Number of fragments of the message.
    pub frag_count: U32,
    /// Total message length in bytes.
    pub total_len: U32,
}

/// Size of [`WireHeader`].
pub const WIRE_HEADER_LEN: usize = core::mem::size_of::<WireHeader>();
