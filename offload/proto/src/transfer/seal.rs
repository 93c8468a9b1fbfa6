//! Frames out: headers, fragments built into the scratch buffer, and the seal (CRC32C and the
//! communicator's tag — a data frame's bound to its call under `protocol.auth = tag`,
//! [`crate::transfer::state::Op::binding`]) every frame leaves with.
use crate::comm::auth::CallBinding;
use crate::comm::PeerId;
use crate::ledger::Side;
use crate::schedule::bcast::Hop;
use crate::transfer::counts::Counts;
use crate::transfer::env::{ChannelRange, CommHandle, Dest, Env};
use crate::transfer::state::{Comm, Seal};
use alloc::vec::Vec;
use ringcast_abi::frame::{emit, emit_around, emit_around_summed, DIGEST_LEN};
use ringcast_abi::wire::{FrameKind, WireHeader, WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use zerocopy::byteorder::little_endian::{U16, U32, U64};

/// Hop counts a repair datagram carries in its flags (bits 0..=11); bits 12..=13 carry the
/// [`Phase`] of the scatter–allgather algorithms.
pub(crate) const HOPS_MASK: u16 = 0x0fff;
pub(crate) const PHASE_SHIFT: u16 = 12;

pub(crate) fn header(c: &Comm, kind: FrameKind, bid: u32, flags: u16) -> WireHeader {
    WireHeader {
        version: c.seal.keys.wire_version(),
        kind,
        flags: U16::new(flags),
        src_rank: U32::new(c.spec.my_rank),
        cookie: U64::new(c.spec.cookie),
        bid: U32::new(bid),
        frag_seq: U32::new(0),
        frag_count: U32::new(0),
        total_len: U32::new(0),
    }
}

/// The length of fragment `seq` of the broadcast in `slot` as a frame (0: no such fragment).
pub(crate) fn fragment_len(c: &Comm, slot: usize, seq: u32) -> usize {
    let Some(op) = c.ops.get(slot).and_then(Option::as_ref) else { return 0 };
    let Some((_, len)) = op.geo.range(seq) else { return 0 };
    let tail = if seq + 1 == op.geo.count() { DIGEST_LEN } else { 0 };
    WIRE_HEADER_LEN + len as usize + tail + WIRE_TRAILER_LEN
}

/// What a fragment is sealed from: its header, its payload in the channel, the digest the last
/// fragment carries, its tag's binding (`Op::binding`), and its payload's CRC32C where the
/// root's driver computed it as it loaded the message (`Op::summed`, `transfer::summed`).
struct Fragment<'a> {
    header: WireHeader,
    data: &'a [u8],
    digest: Option<[u8; DIGEST_LEN]>,
    binding: Option<CallBinding>,
    sum: Option<u32>,
}

impl Fragment<'_> {
    /// Fragment `seq` of the broadcast in `slot`; `None`: no such fragment.
    fn of(c: &Comm, slot: usize, seq: u32, kind: FrameKind, hops: u16) -> Option<Fragment<'_>> {
        let op = c.ops.get(slot).and_then(Option::as_ref)?;
        let (off, len) = op.geo.range(seq)?;
        let mut header = header(c, kind, op.bid, hops);
        header.frag_seq = U32::new(seq);
        header.frag_count = U32::new(op.geo.count());
        header.total_len = U32::new(op.geo.total);
        let data = &c.channels[slot][off as usize..(off + len) as usize];
        let digest = (seq + 1 == op.geo.count()).then(|| op.digest.unwrap_or([0; DIGEST_LEN]));
        let sum = op.summed.then(|| c.sums.get(slot).and_then(|s| s.get(seq as usize)).copied()).flatten();
        Some(Fragment { header, data, digest, binding: op.binding(), sum })
    }

    /// The bytes after the payload: the digest, on the last fragment.
    fn tail(&self) -> &[u8] {
        self.digest.as_ref().map_or(&[][..], |d| &d[..])
    }
}

/// Builds fragment `seq` of the broadcast in `slot` into `out` (at least
/// [`fragment_len`] bytes); returns the frame length (0 if it does not fit).
pub(crate) fn build_fragment(
    out: &mut [u8],
    c: &Comm,
    slot: usize,
    seq: u32,
    kind: FrameKind,
    hops: u16,
) -> usize {
    let Some(f) = Fragment::of(c, slot, seq, kind, hops) else { return 0 };
    let tag = |span: &[u8]| c.seal.keys.data_tag(span, f.binding.as_ref());
    emit(out, &f.header, &[f.data, f.tail()], tag, c.seal.crc).unwrap_or(0)
}

/// Writes fragment `seq`'s header and trailer into `out` around its payload, which stays in
/// the channel (`emit_around`); returns the bytes written (0 if it does not fit). The payload's
/// CRC is the driver's where it summed the load (`emit_around_summed`: no pass over the
/// payload here), else computed from the channel.
fn build_around(out: &mut [u8], c: &Comm, slot: usize, seq: u32, kind: FrameKind, hops: u16) -> usize {
    let Some(f) = Fragment::of(c, slot, seq, kind, hops) else { return 0 };
    let tag = |span: &[u8]| c.seal.keys.data_tag(span, f.binding.as_ref());
    let (crc, combiner) = (c.seal.crc, &**c.seal.combiner.get_or_init(Default::default));
    match f.sum {
        Some(sum) => emit_around_summed(out, &f.header, f.data.len(), sum, f.tail(), tag, crc, combiner),
        None => emit_around(out, &f.header, f.data, f.tail(), tag, crc, combiner),
    }
    .unwrap_or(0)
}

/// Sends fragment `seq` of the broadcast in `slot` to `to`: queued as its header and trailer
/// around the channel's bytes where the driver gathers frames into the wire (the engine's
/// outbox), else built whole where the driver queues it. The ledger counts the frame CRC'd,
/// and its payload copied only where it was built whole (a gather's one copy, into the wire,
/// is the fabric's).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_fragment(
    scratch: &mut Vec<u8>,
    counters: &mut Counts,
    env: &mut impl Env,
    c: &Comm,
    slot: usize,
    seq: u32,
    kind: FrameKind,
    hops: u16,
    to: Dest<'_>,
) -> usize {
    let Some(op) = c.ops.get(slot).and_then(Option::as_ref) else { return 0 };
    let Some((off, payload)) = op.geo.range(seq) else { return 0 };
    let range = ChannelRange {
        comm: CommHandle(c.handle),
        generation: c.generation,
        slot: slot as u32,
        bid: op.bid,
        off,
        len: payload,
    };
    let whole_len = fragment_len(c, slot, seq);
    let around_len = whole_len - payload as usize;
    let data = &c.channels[slot][off as usize..(off + payload) as usize];
    let (built, copied) = env.send_around(
        to,
        range,
        data,
        scratch,
        whole_len,
        &mut |out| build_fragment(out, c, slot, seq, kind, hops),
        around_len,
        &mut |out| build_around(out, c, slot, seq, kind, hops),
    );
    if built > 0 {
        if copied {
            counters.ledger.copied(Side::Send, u64::from(payload));
        }
        // Sealed around a payload its driver summed as it loaded it: only the header and
        // trailer are CRC'd here (the load counted the payload, `Protocol::summed`).
        let summed = !copied && op.summed;
        counters.ledger.crcd(Side::Send, built as u64 - if summed { u64::from(payload) } else { 0 });
    }
    built
}

/// The send buffer grows to the largest datagram sent (at most the MTU), once: an engine that
/// only ever sends small frames — a simulated rank among a million — never holds an MTU.
pub(crate) fn grow(out: &mut Vec<u8>, need: usize) {
    if out.len() < need {
        out.resize(need, 0);
    }
}

impl Seal {
    /// Writes `h` + `body` + tag + CRC into `out`; returns the frame length.
    fn emit(
        &self,
        out: &mut [u8],
        h: &WireHeader,
        body: &[&[u8]],
    ) -> Result<usize, ringcast_abi::frame::BufferTooSmall> {
        emit(out, h, body, |span| self.keys.tag(span), self.crc)
    }
}

/// Emits `h` + `body` sealed with the communicator's `seal` and sends it to `to`.
pub(crate) fn send(
    scratch: &mut Vec<u8>,
    seal: &Seal,
    counters: &mut Counts,
    env: &mut impl Env,
    to: PeerId,
    h: &WireHeader,
    body: &[&[u8]],
) {
    grow(scratch, WIRE_HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>() + WIRE_TRAILER_LEN);
    if let Ok(n) = seal.emit(scratch, h, body) {
        counters.sent += 1;
        counters.ledger.crcd(Side::Send, n as u64);
        env.send(to, &scratch[..n]);
    }
}

/// Sends fragment `seq` of the broadcast in `slot` along `hop` as a point-to-point datagram,
/// `hops` hops from the multicast (or the root), and counts it as repair traffic.
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_repair(
    scratch: &mut Vec<u8>,
    counters: &mut Counts,
    env: &mut impl Env,
    c: &Comm,
    slot: usize,
    seq: u32,
    hop: Hop,
    hops: u16,
) {
    let flags = hops.min(HOPS_MASK) | (hop.phase as u16) << PHASE_SHIFT;
    let Some(&to) = c.spec.members.get(hop.to as usize) else { return };
    let len = send_fragment(
        scratch,
        counters,
        env,
        c,
        slot,
        seq,
        FrameKind::DATA_REPAIR,
        flags,
        Dest::Peer(to, hop.lane),
    );
    if len > 0 {
        counters.sent += 1;
        counters.repair_frames += 1;
        counters.repair_bytes += len as u64;
    }
}
