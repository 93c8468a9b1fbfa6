//! Checked frames: parse untrusted datagrams into typed views, and emit them.
//!
//! ```text
//! | WireHeader (32 B) | body (kind-specific, may be empty) | tag (8 B, LE) | CRC32C (4 B, LE) |
//! ```
//! [`Frame::parse`] promises (the smoltcp contract): if it returns `Ok`, no accessor of the
//! returned view panics and every length inside is consistent. Every reject has a reason
//! ([`DropReason`]) so bring-up on hardware can count *why* frames die. The CRC function is a
//! parameter, so this crate stays `no_std` and a DPU build can hand in its CRC engine; the
//! engine passes `crc-fast`'s (offload/engine/src/crc.rs), the simulator and tests the `crc32c` crate.
//!
//! **Integrity and authenticity.** The CRC32C covers header, body and tag: it detects noise,
//! and [`Frame::parse`] checks it. The tag is keyed — SipHash-2-4 under the communicator's
//! secret, which members receive at creation and which never travels on the wire — over
//! [`Frame::tagged`]: the header and, except for data frames, the body. Only the protocol,
//! which finds the key from the cookie, can check it (an unkeyed CRC stops nobody who can see
//! the traffic: they recompute it). A data frame's payload is covered instead by the message
//! MAC the last fragment carries, checked after reassembly, so a fragment costs one keyed
//! hash of 32 bytes per hop and the bulk of the bytes one keyed hash per message.
//!
//! Bodies by kind:
//! * `DATA_MULTICAST`, `DATA_REPAIR`: fragment bytes (`frag_seq < frag_count`, non-empty unless
//!   the message is empty, never longer than `total_len`); the **last** fragment carries
//!   [`DIGEST_LEN`] more bytes after its payload: the message MAC (keyed BLAKE3 of the
//!   broadcast id, the length and the whole message under the communicator's key, truncated
//!   to 128 bits), checked end to end after reassembly: neither a corruption that slips past the
//!   per-datagram CRC nor a payload forged by someone without the key can be delivered —
//!   under `protocol.auth = tag` (version byte with [`crate::wire::WIRE_AUTH_TAG`]) the same
//!   16 bytes are a keyed MAC of the call alone, no payload byte (docs/protocol.md);
//! * `READY`: empty;
//! * `SYNC_UP`, `SYNC_DOWN`: one [`SyncBody`];
//! * `CALL_SHAPE`: one [`CallShapeBody`];
//! * `RETRANSMIT_REQUEST`: one [`RetransmitBody`] then `ceil(nfrags / 8)` bitmap bytes (bit `i`
//!   set = fragment `first_frag + i` is missing).
//!
//! Cookie and broadcast-id checks need the communicator table and live in the protocol.
use crate::crc_combine::{crc32c_append, Combiner};
use crate::wire::{
    FrameKind, WireHeader, WIRE_CRC_LEN, WIRE_HEADER_LEN, WIRE_TAG_LEN, WIRE_TRAILER_LEN, WIRE_VERSION,
};
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// CRC-32C of a byte string (injected; see the module docs).
pub type Crc32c = fn(&[u8]) -> u32;

/// Bytes of the end-to-end message MAC after the last fragment's payload.
pub const DIGEST_LEN: usize = 16;

/// Smallest possible frame: a header and a trailer.
pub const MIN_FRAME_LEN: usize = WIRE_HEADER_LEN + WIRE_TRAILER_LEN;

/// Why a frame was dropped. `Copy`, one byte, cheap to count per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than a header plus trailer.
    TooShort = 0,
    /// CRC32C mismatch: corrupted in flight.
    BadCrc = 1,
    /// Another wire version.
    BadVersion = 2,
    /// A kind this version does not define.
    UnknownKind = 3,
    /// Body length wrong for the kind.
    BadLength = 4,
    /// Fragment fields inconsistent (`frag_seq >= frag_count`, payload past `total_len`, …).
    BadFragment = 5,
    /// Cookie of no communicator here (another job's frame).
    ForeignCookie = 6,
    /// Broadcast id outside the acceptance window (stale or too far ahead).
    BidOutOfWindow = 7,
    /// Sender rank is not a member of the communicator.
    BadRank = 8,
    /// No room to keep an early fragment (all pre-posted slots in use).
    NoSlot = 9,
    /// The keyed tag does not match: forged (or tampered with) by someone without the
    /// communicator's key.
    BadTag = 10,
}

impl DropReason {
    /// Number of reasons (for counter arrays).
    pub const COUNT: usize = 11;
    /// Every reason, in code order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::TooShort,
        DropReason::BadCrc,
        DropReason::BadVersion,
        DropReason::UnknownKind,
        DropReason::BadLength,
        DropReason::BadFragment,
        DropReason::ForeignCookie,
        DropReason::BidOutOfWindow,
        DropReason::BadRank,
        DropReason::NoSlot,
        DropReason::BadTag,
    ];
}

/// Body of `SYNC_UP` / `SYNC_DOWN`: the delayed synchronization of Yu et al. A window of up to
/// 64 broadcast ids starting at `base_bid`; bit `i` stands for `base_bid + i`. The fragment
/// counts let the manager measure the multicast hit rate for the adaptive root delay.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned,
)]
#[repr(C)]
pub struct SyncBody {
    /// Synchronization round.
    pub epoch: U32,
    /// First broadcast id of the window.
    pub base_bid: U32,
    /// UP: broadcasts every rank of the sender's subtree completed. DOWN: completed everywhere.
    pub acked: U64,
    /// UP: broadcasts some rank of the subtree failed (NACK). DOWN: failed somewhere.
    pub nacked: U64,
    /// Fragments the subtree received by multicast in this window (adaptive root delay).
    pub mcast_frags: U32,
    /// Fragments the subtree received in all (multicast + repair).
    pub total_frags: U32,
    /// The call context of the barrier that cut this epoch short at the sender (its opcode and
    /// the posting process's skipped calls, as a broadcast's MAC covers them); 0: no barrier.
    /// UP: the sender's own; DOWN: the manager's.
    pub barrier: U64,
    /// Where that barrier cut the epoch: the broadcasts posted in it before the barrier (so
    /// ranks that made the same calls in another order disagree too).
    pub cut: U32,
    /// [`SYNC_MISMATCH`]: some rank of the subtree (UP) or of the communicator (DOWN) ended
    /// this epoch with another call than its sync-tree parent.
    pub flags: U32,
}

/// [`SyncBody::flags`]: the ranks did not all end the epoch with the same call — a barrier at
/// one, something else (another barrier context, or broadcasts) at another. Every barrier
/// that cut the epoch fails `DigestMismatch`.
pub const SYNC_MISMATCH: u32 = 1;

/// A `CALL_SHAPE` body: the fields of a collective's descriptor that shape its schedule at
/// every rank (zero in a query).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned,
)]
#[repr(C)]
pub struct CallShapeBody {
    /// The descriptor's opcode.
    pub opcode: u8,
    /// Its flags.
    pub flags: u8,
    /// Its element type and operation.
    pub spec: U16,
    /// Its root.
    pub root: U32,
    /// Its length.
    pub len: U64,
}

/// Fixed part of a `RETRANSMIT_REQUEST` body; the missing-fragment bitmap follows.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned,
)]
#[repr(C)]
pub struct RetransmitBody {
    /// First fragment the bitmap describes.
    pub first_frag: U32,
    /// Fragments it describes.
    pub nfrags: U32,
}

/// Largest fragment range one retransmission request can describe.
pub const MAX_RETRANSMIT_FRAGS: u32 = 8192;

/// Most fragments one message (one broadcast) may have: `max_message_bytes / fragment payload`
/// must fit, and a receiver tracks at most this many in its bitmap.
pub const MAX_FRAGS: u32 = 8192;

/// A parsed, checked frame borrowing the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    header: &'a WireHeader,
    body: &'a [u8],
    /// Header and body (what the tag's span is cut from).
    covered: &'a [u8],
    tag: u64,
}

/// The bytes the keyed tag covers in `header_and_body` (a frame's header followed by its
/// body): the header alone for data frames (their payload is covered by the message MAC), the
/// whole of it for every other kind. `header_and_body` must hold at least a header.
pub fn tag_span(kind: FrameKind, header_and_body: &[u8]) -> &[u8] {
    match kind {
        FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR => {
            &header_and_body[..WIRE_HEADER_LEN.min(header_and_body.len())]
        }
        _ => header_and_body,
    }
}

impl<'a> Frame<'a> {
    /// Checks `bytes` completely (length, CRC, version, kind, per-kind body rules).
    pub fn parse(bytes: &'a [u8], crc: Crc32c) -> Result<Frame<'a>, DropReason> {
        Self::parse_as(bytes, crc, WIRE_VERSION)
    }

    /// [`Frame::parse`] expecting the version byte `version` ([`WIRE_VERSION`], with
    /// [`crate::wire::WIRE_AUTH_TAG`] where the job authenticates by tag alone).
    pub fn parse_as(bytes: &'a [u8], crc: Crc32c, version: u8) -> Result<Frame<'a>, DropReason> {
        if bytes.len() < MIN_FRAME_LEN {
            return Err(DropReason::TooShort);
        }
        let (sealed, sum) = bytes.split_at(bytes.len() - WIRE_CRC_LEN);
        let want = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
        if crc(sealed) != want {
            return Err(DropReason::BadCrc);
        }
        let (covered, tag) = sealed.split_at(sealed.len() - WIRE_TAG_LEN);
        let mut t = [0u8; WIRE_TAG_LEN];
        t.copy_from_slice(tag);
        let (header, body) = WireHeader::ref_from_prefix(covered).map_err(|_| DropReason::TooShort)?;
        if header.version != version {
            return Err(DropReason::BadVersion);
        }
        let frame = Frame { header, body, covered, tag: u64::from_le_bytes(t) };
        match header.kind {
            FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR => {
                let (seq, count, total) =
                    (header.frag_seq.get(), header.frag_count.get(), header.total_len.get());
                let digest = if seq.wrapping_add(1) == count { DIGEST_LEN } else { 0 };
                if count == 0 || seq >= count || body.len() < digest {
                    return Err(DropReason::BadFragment);
                }
                let payload = (body.len() - digest) as u64;
                if payload > total as u64 || (payload == 0 && total != 0) {
                    return Err(DropReason::BadFragment);
                }
            }
            FrameKind::READY => {
                if !body.is_empty() {
                    return Err(DropReason::BadLength);
                }
            }
            FrameKind::SYNC_UP | FrameKind::SYNC_DOWN => {
                if body.len() != core::mem::size_of::<SyncBody>() {
                    return Err(DropReason::BadLength);
                }
            }
            FrameKind::CALL_SHAPE => {
                if body.len() != core::mem::size_of::<CallShapeBody>() {
                    return Err(DropReason::BadLength);
                }
            }
            FrameKind::RETRANSMIT_REQUEST => {
                let (fixed, bitmap) =
                    RetransmitBody::ref_from_prefix(body).map_err(|_| DropReason::BadLength)?;
                let n = fixed.nfrags.get();
                if n == 0 || n > MAX_RETRANSMIT_FRAGS || bitmap.len() != n.div_ceil(8) as usize {
                    return Err(DropReason::BadLength);
                }
            }
            _ => return Err(DropReason::UnknownKind),
        }
        Ok(frame)
    }

    /// The header.
    pub fn header(&self) -> &'a WireHeader {
        self.header
    }

    /// Kind.
    pub fn kind(&self) -> FrameKind {
        self.header.kind
    }

    /// The body (for data frames: payload, then the digest on the last fragment).
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The keyed tag the frame carries.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The bytes the tag covers ([`tag_span`]): check `tag() == keyed_hash(tagged())`.
    pub fn tagged(&self) -> &'a [u8] {
        tag_span(self.header.kind, self.covered)
    }

    /// True for the last fragment of a message (it carries the digest).
    pub fn is_last_fragment(&self) -> bool {
        matches!(self.kind(), FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR)
            && self.header.frag_seq.get().wrapping_add(1) == self.header.frag_count.get()
    }

    /// A data frame's payload (the body without the digest).
    pub fn payload(&self) -> &'a [u8] {
        let cut = if self.is_last_fragment() { DIGEST_LEN } else { 0 };
        &self.body[..self.body.len() - cut]
    }

    /// The message MAC, carried by the last fragment.
    pub fn digest(&self) -> Option<[u8; DIGEST_LEN]> {
        if !self.is_last_fragment() {
            return None;
        }
        let mut d = [0u8; DIGEST_LEN];
        d.copy_from_slice(&self.body[self.body.len() - DIGEST_LEN..]);
        Some(d)
    }

    /// The sync body, for `SYNC_UP`/`SYNC_DOWN` frames.
    pub fn sync(&self) -> Option<&'a SyncBody> {
        match self.kind() {
            FrameKind::SYNC_UP | FrameKind::SYNC_DOWN => SyncBody::ref_from_bytes(self.body).ok(),
            _ => None,
        }
    }

    /// A `CALL_SHAPE` frame's body.
    pub fn call_shape(&self) -> Option<&'a CallShapeBody> {
        match self.kind() {
            FrameKind::CALL_SHAPE => CallShapeBody::ref_from_bytes(self.body).ok(),
            _ => None,
        }
    }

    /// The retransmission request and its missing-fragment bitmap.
    pub fn retransmit(&self) -> Option<(&'a RetransmitBody, &'a [u8])> {
        match self.kind() {
            FrameKind::RETRANSMIT_REQUEST => RetransmitBody::ref_from_prefix(self.body).ok(),
            _ => None,
        }
    }
}

/// `out` is too small for the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the frame needs.
    pub need: usize,
}

/// Writes header, `body` parts (concatenated) and the trailer into `out`: `tag` applied to the
/// frame's [`tag_span`], then the CRC32C over all of it; returns the frame length. Bodies are
/// given in parts so a fixed body and a bitmap need no staging copy.
pub fn emit(
    out: &mut [u8],
    header: &WireHeader,
    body: &[&[u8]],
    tag: impl FnOnce(&[u8]) -> u64,
    crc: Crc32c,
) -> Result<usize, BufferTooSmall> {
    let body_len: usize = body.iter().map(|b| b.len()).sum();
    let need = WIRE_HEADER_LEN + body_len + WIRE_TRAILER_LEN;
    if out.len() < need {
        return Err(BufferTooSmall { need });
    }
    out[..WIRE_HEADER_LEN].copy_from_slice(header.as_bytes());
    let mut at = WIRE_HEADER_LEN;
    for part in body {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    let t = tag(tag_span(header.kind, &out[..at]));
    out[at..at + WIRE_TAG_LEN].copy_from_slice(&t.to_le_bytes());
    at += WIRE_TAG_LEN;
    let sum = crc(&out[..at]);
    out[at..need].copy_from_slice(&sum.to_le_bytes());
    Ok(need)
}

/// [`emit`] for a data frame whose payload stays where it lies: writes the header into
/// `out[..WIRE_HEADER_LEN]` and the trailer — `tail` (the last fragment's digest), the tag, the
/// CRC32C — after it, and returns how much of `out` it used. The frame on the wire is
/// `out[..WIRE_HEADER_LEN]`, then `payload`, then the rest of `out`, gathered by whoever
/// writes it out (a NIC's send gather); the CRC is that gathered frame's, the same bytes as
/// [`emit`] of `[payload, tail]` writes (`combiner` keeps the CRC shift for the payload's
/// length between calls). `None` for a kind that is not data (whose tag covers
/// its body: [`tag_span`]) or an `out` too small.
pub fn emit_around(
    out: &mut [u8],
    header: &WireHeader,
    payload: &[u8],
    tail: &[u8],
    tag: impl FnOnce(&[u8]) -> u64,
    crc: Crc32c,
    combiner: &Combiner,
) -> Option<usize> {
    if !matches!(header.kind, FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR) {
        return None;
    }
    emit_around_summed(out, header, payload.len(), crc(payload), tail, tag, crc, combiner)
}

/// [`emit_around`] for a payload whose CRC32C is already known (`payload_crc`, of its
/// `payload_len` bytes): computed as the bytes moved, where the driver's DMA loaded them (a
/// NIC's CRC as the bytes move); the frame is the same.
#[allow(clippy::too_many_arguments)]
pub fn emit_around_summed(
    out: &mut [u8],
    header: &WireHeader,
    payload_len: usize,
    payload_crc: u32,
    tail: &[u8],
    tag: impl FnOnce(&[u8]) -> u64,
    crc: Crc32c,
    combiner: &Combiner,
) -> Option<usize> {
    if !matches!(header.kind, FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR) {
        return None;
    }
    let need = WIRE_HEADER_LEN + tail.len() + WIRE_TRAILER_LEN;
    let out = out.get_mut(..need)?;
    out[..WIRE_HEADER_LEN].copy_from_slice(header.as_bytes());
    let t = tag(&out[..WIRE_HEADER_LEN]);
    let mut at = WIRE_HEADER_LEN;
    out[at..at + tail.len()].copy_from_slice(tail);
    at += tail.len();
    out[at..at + WIRE_TAG_LEN].copy_from_slice(&t.to_le_bytes());
    at += WIRE_TAG_LEN;
    // The header's CRC shifted past the payload and combined with the payload's (computed fast,
    // where it lies), then the few trailer bytes a byte at a time.
    let head = crc(&out[..WIRE_HEADER_LEN]);
    let sum = combiner.combine(head, payload_crc, payload_len);
    let sum = crc32c_append(sum, &out[WIRE_HEADER_LEN..at]);
    out[at..need].copy_from_slice(&sum.to_le_bytes());
    Some(need)
}

static_assertions::const_assert_eq!(core::mem::size_of::<SyncBody>(), 48);
static_assertions::const_assert_eq!(core::mem::size_of::<RetransmitBody>(), 8);
