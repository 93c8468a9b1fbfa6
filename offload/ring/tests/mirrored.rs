//! Host-owned rings (the `cma` DMA backend): the engine's index stores arrive as DMA copies that
//! may be seen half done, so a mirrored ring trusts an index only when it equals its mirror.
//! Here the test plays the engine by writing the segment's bytes directly, as a DMA would.
#![cfg(not(loom))]
use ringcast_abi::{Completion, Opcode, RingRole, Status, SubmissionDescriptor};
use ringcast_ring::attach;
use zerocopy::IntoBytes;

const TAIL: u64 = 128;
const TAIL_MIRROR: u64 = 144;
const HEAD: u64 = 256;
const HEAD_MIRROR: u64 = 272;
const SLOTS: u64 = 384;

/// Both ends mirrored (heap memory, so Miri runs it): entries pass in order through many wraps,
/// and the mirrors hold what the indices hold.
#[test]
fn mirrored_ends_pass_every_entry_in_order() {
    let (mut p, mut c) = ringcast_ring::channel::<SubmissionDescriptor>(8, RingRole::SUBMISSION);
    p.set_mirrored();
    c.set_mirrored();
    let rounds = if cfg!(miri) { 20 } else { 2_000 };
    let mut next = 0u64;
    let mut got = [SubmissionDescriptor::default(); 8];
    for round in 0..rounds {
        let batch: Vec<_> =
            (0..(round % 8) + 1).map(|i| SubmissionDescriptor::nop(next + i as u64)).collect();
        let pushed = p.push_batch(&batch);
        assert_eq!(pushed, batch.len(), "the consumer drained everything");
        let n = c.pop_batch(&mut got).unwrap();
        assert_eq!(n, pushed);
        for d in &got[..n] {
            assert_eq!(d.cookie, next);
            next += 1;
        }
        assert_eq!(p.free_slots(), 8);
        assert_eq!(c.len().unwrap(), 0);
    }
}

// The byte-level cases write a memfd segment (no Miri: it has no memfd_create).
#[cfg(not(miri))]
#[test]
fn a_mirrored_consumer_takes_a_tail_only_once_its_mirror_agrees() {
    let mut rings = attach::create_host_owned(8, 0xfeed).unwrap();
    assert_eq!(rings.header.attach_proof, 0xfeed);
    assert!(attach::check_host_owned(&rings.header, rings.header.total_len, 0xfeed, 256).is_ok());
    assert!(attach::check_host_owned(&rings.header, rings.header.total_len, 0xbeef, 256).is_err());
    rings.cq.set_mirrored();
    let seg = rings.segment.clone();
    let cq = rings.header.cq_offset;
    let c = Completion::new(42, Opcode::NOP, Status::OK, 0);
    seg.write_at(cq + SLOTS, c.as_bytes()).unwrap();
    // The tail landed, its mirror not yet (a store in progress, as the consumer must assume).
    seg.write_at(cq + TAIL, &1u64.to_le_bytes()).unwrap();
    assert_eq!(rings.cq.try_pop().unwrap(), None);
    // A torn tail (a byte of a far larger value) with the old mirror: not trusted either.
    seg.write_at(cq + TAIL, &0x0100_0000_0000_0001u64.to_le_bytes()).unwrap();
    assert_eq!(rings.cq.try_pop().unwrap(), None, "a disagreeing tail is never an error, only not yet");
    seg.write_at(cq + TAIL, &1u64.to_le_bytes()).unwrap();
    seg.write_at(cq + TAIL_MIRROR, &1u64.to_le_bytes()).unwrap();
    assert_eq!(rings.cq.try_pop().unwrap().map(|c| c.cookie), Some(42));
    // The consumer stored its head and then the mirror.
    let mut b = [0u8; 8];
    seg.read_at(cq + HEAD, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 1);
    seg.read_at(cq + HEAD_MIRROR, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 1);
}

#[cfg(not(miri))]
#[test]
fn a_mirrored_producer_frees_slots_only_for_an_agreeing_head() {
    let mut rings = attach::create_host_owned(4, 1).unwrap();
    rings.sq.set_mirrored();
    let sq = rings.header.sq_offset;
    let seg = rings.segment.clone();
    let d = ringcast_abi::SubmissionDescriptor::nop(1);
    assert_eq!(rings.sq.push_batch(&[d; 4]), 4);
    let mut b = [0u8; 8];
    seg.read_at(sq + TAIL_MIRROR, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 4, "the producer mirrors its tail");
    assert_eq!(rings.sq.free_slots(), 0);
    seg.write_at(sq + HEAD, &4u64.to_le_bytes()).unwrap();
    assert_eq!(rings.sq.free_slots(), 0, "head without its mirror frees nothing");
    seg.write_at(sq + HEAD_MIRROR, &4u64.to_le_bytes()).unwrap();
    assert_eq!(rings.sq.free_slots(), 4);
}
