//! The wire codec against golden frames (`fixtures/frames.hex`) and hostile input: every frame
//! kind round-trips byte-exactly; any single-bit flip, any truncation and any random byte string
//! is rejected with a reason and never panics; the tag covers exactly its span. `RINGCAST_BLESS=1`
//! rewrites the golden file after an intended wire change (which must also bump `WIRE_VERSION`).
use proptest::prelude::*;
use ringcast_abi::frame::{
    emit, emit_around, CallShapeBody, DropReason, Frame, RetransmitBody, SyncBody, DIGEST_LEN, MIN_FRAME_LEN,
    SYNC_MISMATCH,
};
use ringcast_abi::wire::{FrameKind, WireHeader, WIRE_AUTH_TAG, WIRE_HEADER_LEN, WIRE_VERSION};
use std::hash::Hasher;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

const GOLDEN: &str = include_str!("../../fixtures/frames.hex");

/// The golden frames' tag: SipHash-2-4 under a fixed key (the engine keys it per communicator).
fn tag(bytes: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher24::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
    h.write(bytes);
    h.finish()
}

fn header(kind: FrameKind, seq: u32, count: u32, total: u32) -> WireHeader {
    WireHeader {
        version: WIRE_VERSION,
        kind,
        flags: U16::new(0),
        src_rank: U32::new(3),
        cookie: U64::new(0x0123_4567_89ab_cdef),
        bid: U32::new(42),
        frag_seq: U32::new(seq),
        frag_count: U32::new(count),
        total_len: U32::new(total),
    }
}

/// One frame of every kind, from fixed values.
fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let mut put = |name, h: WireHeader, body: &[&[u8]]| {
        let mut buf = vec![0u8; 256];
        let n = emit(&mut buf, &h, body, tag, crc32c::crc32c).unwrap();
        buf.truncate(n);
        out.push((name, buf));
    };
    put("data_multicast", header(FrameKind::DATA_MULTICAST, 1, 3, 20), &[b"fragment-1"]);
    put("data_repair", header(FrameKind::DATA_REPAIR, 1, 3, 20), &[b"frag2"]);
    put("data_last_fragment", header(FrameKind::DATA_REPAIR, 2, 3, 20), &[b"last!", &[0xa5; DIGEST_LEN]]);
    put("data_empty_message", header(FrameKind::DATA_MULTICAST, 0, 1, 0), &[&[0; DIGEST_LEN]]);
    // `protocol.auth = tag`: the same format under the version byte with `WIRE_AUTH_TAG`, the
    // trailer a MAC of the call alone.
    let tagged =
        WireHeader { version: WIRE_VERSION | WIRE_AUTH_TAG, ..header(FrameKind::DATA_REPAIR, 2, 3, 20) };
    put("data_last_fragment_auth_tag", tagged, &[b"last!", &[0x5a; DIGEST_LEN]]);
    put("ready", header(FrameKind::READY, 0, 0, 0), &[]);
    let sync = SyncBody {
        epoch: U32::new(7),
        base_bid: U32::new(40),
        acked: U64::new(0b1011),
        nacked: U64::new(0b0100),
        mcast_frags: U32::new(30),
        total_frags: U32::new(33),
        barrier: U64::new(0x0000_0002_0000_0a0b),
        cut: U32::new(3),
        flags: U32::new(SYNC_MISMATCH),
    };
    put("sync_up", header(FrameKind::SYNC_UP, 0, 0, 0), &[sync.as_bytes()]);
    put("sync_down", header(FrameKind::SYNC_DOWN, 0, 0, 0), &[sync.as_bytes()]);
    let rt = RetransmitBody { first_frag: U32::new(8), nfrags: U32::new(12) };
    put(
        "retransmit_request",
        header(FrameKind::RETRANSMIT_REQUEST, 0, 0, 0),
        &[rt.as_bytes(), &[0b1000_0001, 0b0000_0100]],
    );
    let shape =
        CallShapeBody { opcode: 9, flags: 1, spec: U16::new(0x0305), root: U32::new(2), len: U64::new(4096) };
    let mut known = header(FrameKind::CALL_SHAPE, 0, 0, 0);
    known.flags = U16::new(ringcast_abi::wire::SHAPE_KNOWN);
    put("call_shape", known, &[shape.as_bytes()]);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn golden() -> Vec<(String, Vec<u8>)> {
    GOLDEN
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, h) = l.split_once(' ').unwrap();
            (name.to_string(), unhex(h.trim()))
        })
        .collect()
}

#[test]
fn every_kind_matches_its_golden_frame() {
    let now = samples();
    if std::env::var_os("RINGCAST_BLESS").is_some() {
        let mut text = format!("# ringcast golden wire frames (WIRE_VERSION {WIRE_VERSION}): name hex. Regenerate with\n# RINGCAST_BLESS=1 cargo test -p ringcast-abi --test frames (and bump WIRE_VERSION).\n");
        for (name, bytes) in &now {
            text += &format!("{name} {}\n", hex(bytes));
        }
        std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/frames.hex"), text).unwrap();
        return;
    }
    let gold = golden();
    assert_eq!(gold.len(), now.len(), "golden file lists another set of frames");
    for ((gname, gbytes), (name, bytes)) in gold.iter().zip(&now) {
        assert_eq!(gname, name);
        assert_eq!(hex(gbytes), hex(bytes), "{name}: emitted bytes drifted from the golden frame");
        let (version, other) = match name.ends_with("_auth_tag") {
            true => (WIRE_VERSION | WIRE_AUTH_TAG, WIRE_VERSION),
            false => (WIRE_VERSION, WIRE_VERSION | WIRE_AUTH_TAG),
        };
        let f = Frame::parse_as(gbytes, crc32c::crc32c, version)
            .unwrap_or_else(|r| panic!("{name}: golden frame rejected: {r:?}"));
        assert_eq!(
            Frame::parse_as(gbytes, crc32c::crc32c, other).err(),
            Some(ringcast_abi::frame::DropReason::BadVersion),
            "{name}: an engine of the other protocol.auth refuses it"
        );
        assert_eq!(f.header().cookie.get(), 0x0123_4567_89ab_cdef);
        assert_eq!(f.header().bid.get(), 42);
        assert_eq!(f.tag(), tag(f.tagged()), "{name}: the tag covers its span");
        let span = if name.starts_with("data") { WIRE_HEADER_LEN } else { gbytes.len() - 12 };
        assert_eq!(f.tagged(), &gbytes[..span], "{name}: tag span");
    }
}

#[test]
fn typed_accessors_read_golden_bodies() {
    let gold = golden();
    let find = |n: &str| gold.iter().find(|(name, _)| name == n).unwrap().1.clone();
    let up = find("sync_up");
    let f = Frame::parse(&up, crc32c::crc32c).unwrap();
    let s = f.sync().unwrap();
    assert_eq!((s.epoch.get(), s.base_bid.get(), s.acked.get(), s.nacked.get()), (7, 40, 0b1011, 0b0100));
    let rt = find("retransmit_request");
    let f = Frame::parse(&rt, crc32c::crc32c).unwrap();
    let (body, bitmap) = f.retransmit().unwrap();
    assert_eq!(
        (body.first_frag.get(), body.nfrags.get(), bitmap),
        (8, 12, &[0b1000_0001u8, 0b0000_0100][..])
    );
    let shape = find("call_shape");
    let f = Frame::parse(&shape, crc32c::crc32c).unwrap();
    let s = f.call_shape().unwrap();
    assert_eq!((s.opcode, s.flags, s.spec.get(), s.root.get(), s.len.get()), (9, 1, 0x0305, 2, 4096));
    assert!(Frame::parse(&up, crc32c::crc32c).unwrap().call_shape().is_none());
    let data = find("data_multicast");
    let f = Frame::parse(&data, crc32c::crc32c).unwrap();
    assert_eq!((f.body(), f.payload(), f.digest()), (&b"fragment-1"[..], &b"fragment-1"[..], None));
    assert!(f.sync().is_none());
    let last = find("data_last_fragment");
    let f = Frame::parse(&last, crc32c::crc32c).unwrap();
    assert_eq!((f.payload(), f.digest()), (&b"last!"[..], Some([0xa5; DIGEST_LEN])));
    let empty = find("data_empty_message");
    let f = Frame::parse(&empty, crc32c::crc32c).unwrap();
    assert_eq!((f.payload(), f.digest()), (&b""[..], Some([0; DIGEST_LEN])));
}

#[test]
fn every_single_bit_flip_and_truncation_is_rejected() {
    for (name, bytes) in golden() {
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Frame::parse(&b, crc32c::crc32c).is_err(), "{name}: bit {bit} flipped and accepted");
        }
        for len in 0..bytes.len() {
            assert!(
                Frame::parse(&bytes[..len], crc32c::crc32c).is_err(),
                "{name}: truncated to {len} accepted"
            );
        }
    }
}

/// Re-seals `h` + body with a correct CRC, so the check under test is the one after the CRC.
fn sealed(h: WireHeader, body: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 64 + body.len()];
    let n = emit(&mut buf, &h, &[body], tag, crc32c::crc32c).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn semantic_rejects_have_their_reasons() {
    let parse = |b: &[u8]| Frame::parse(b, crc32c::crc32c).err();
    let mut h = header(FrameKind::DATA_MULTICAST, 0, 1, 4);
    h.version = 9;
    assert_eq!(parse(&sealed(h, b"abcd")), Some(DropReason::BadVersion));
    assert_eq!(parse(&sealed(header(FrameKind(0x33), 0, 1, 4), b"abcd")), Some(DropReason::UnknownKind));
    assert_eq!(
        parse(&sealed(header(FrameKind::DATA_MULTICAST, 3, 3, 4), b"ab")),
        Some(DropReason::BadFragment),
        "seq >= count"
    );
    assert_eq!(
        parse(&sealed(header(FrameKind::DATA_MULTICAST, 0, 0, 4), b"ab")),
        Some(DropReason::BadFragment),
        "count 0"
    );
    assert_eq!(
        parse(&sealed(header(FrameKind::DATA_REPAIR, 0, 2, 3), b"abcd")),
        Some(DropReason::BadFragment),
        "payload > total"
    );
    assert_eq!(
        parse(&sealed(header(FrameKind::DATA_REPAIR, 0, 2, 3), b"")),
        Some(DropReason::BadFragment),
        "empty fragment"
    );
    let last = |body: &[u8]| parse(&sealed(header(FrameKind::DATA_REPAIR, 1, 2, 3), body));
    let with_mac = |payload: &[u8]| [payload, &[7; DIGEST_LEN]].concat();
    assert_eq!(
        last(&[1; DIGEST_LEN - 1]),
        Some(DropReason::BadFragment),
        "last fragment without room for the MAC"
    );
    assert_eq!(last(&with_mac(b"abcd")), Some(DropReason::BadFragment), "last fragment: payload > total");
    assert_eq!(last(&with_mac(b"abc")), None, "last fragment: 3 payload bytes + MAC");
    assert_eq!(parse(&sealed(header(FrameKind::READY, 0, 0, 0), b"x")), Some(DropReason::BadLength));
    assert_eq!(parse(&sealed(header(FrameKind::SYNC_UP, 0, 0, 0), &[0; 31])), Some(DropReason::BadLength));
    let rt = RetransmitBody { first_frag: U32::new(0), nfrags: U32::new(9) };
    let mut body = rt.as_bytes().to_vec();
    body.push(0xff); // 9 fragments need 2 bitmap bytes
    assert_eq!(
        parse(&sealed(header(FrameKind::RETRANSMIT_REQUEST, 0, 0, 0), &body)),
        Some(DropReason::BadLength)
    );
    assert_eq!(parse(&[0u8; MIN_FRAME_LEN - 1]), Some(DropReason::TooShort));
    let mut buf = [0u8; 8];
    assert_eq!(
        emit(&mut buf, &header(FrameKind::READY, 0, 0, 0), &[], tag, crc32c::crc32c).unwrap_err().need,
        MIN_FRAME_LEN
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Frame::parse(&bytes, crc32c::crc32c);
    }

    #[test]
    fn valid_data_frames_round_trip(seq in 0u32..100, extra in 1u32..100, payload in proptest::collection::vec(any::<u8>(), 1..200)) {
        let count = seq + 1 + extra; // never the last fragment: no digest
        let total = payload.len() as u32 + extra;
        let bytes = sealed(header(FrameKind::DATA_REPAIR, seq, count, total), &payload);
        let f = Frame::parse(&bytes, crc32c::crc32c).unwrap();
        prop_assert_eq!(f.body(), &payload[..]);
        prop_assert_eq!(f.header().frag_seq.get(), seq);
    }
}

/// A data frame sealed around its payload (`emit_around`: header and trailer written, the
/// payload left where it lies) is, gathered, the frame `emit` writes whole — CRC included —
/// at every payload length up to a jumbo datagram, with and without the digest; and no other
/// kind is sealed that way (their tag covers the body).
#[test]
fn a_frame_sealed_around_its_payload_gathers_to_the_whole_frame() {
    let payload: Vec<u8> = (0..9000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let kept = ringcast_abi::crc_combine::Combiner::default();
    for kind in [FrameKind::DATA_MULTICAST, FrameKind::DATA_REPAIR] {
        for len in [0usize, 1, 5, 1400, 4000, 9000] {
            for tail in [&[][..], &[0xa5; DIGEST_LEN][..]] {
                let h = header(kind, 1, 3, 20);
                let data = &payload[..len];
                let mut whole = vec![0u8; len + 128];
                let n = emit(&mut whole, &h, &[data, tail], tag, crc32c::crc32c).unwrap();
                let mut around = [0u8; 128];
                let m = emit_around(&mut around, &h, data, tail, tag, crc32c::crc32c, &kept).unwrap();
                let gathered = [&around[..WIRE_HEADER_LEN], data, &around[WIRE_HEADER_LEN..m]].concat();
                assert_eq!(gathered, whole[..n], "{kind:?}, {len} bytes, tail {}", tail.len());
            }
        }
    }
    let mut out = [0u8; 128];
    let ready = header(FrameKind::READY, 0, 0, 0);
    assert_eq!(emit_around(&mut out, &ready, &[], &[], tag, crc32c::crc32c, &kept), None);
    let short = &mut out[..WIRE_HEADER_LEN];
    assert_eq!(
        emit_around(short, &header(FrameKind::DATA_REPAIR, 1, 3, 20), b"x", &[], tag, crc32c::crc32c, &kept),
        None
    );
}
