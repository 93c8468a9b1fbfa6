//! Every kind of bad or foreign datagram is dropped and counted under its own reason, and none
//! disturbs the protocol: a broadcast posted afterwards still completes with the right bytes. A
//! frame forged with the cookie but without the communicator's key is dropped for its tag; a
//! payload replaced in flight under a genuine tag ends in `DigestMismatch`, never wrong bytes.
use ringcast_abi::frame::{emit, DropReason, RetransmitBody};
use ringcast_abi::wire::{FrameKind, WireHeader, WIRE_VERSION};
use ringcast_proto::comm::auth::{CommKeys, Secret};
use ringcast_proto::comm::{CommSpec, GroupId, PeerId};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::transfer::protocol::{DmaJob, Env, HostDriver, Outcome, Post, Protocol};
use std::collections::VecDeque;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

#[derive(Default)]
struct TestEnv {
    buf: Vec<u8>,
    done: Vec<(u64, Outcome)>,
    jobs: VecDeque<DmaJob>,
}

impl Env for TestEnv {
    fn send(&mut self, _: PeerId, _: &[u8]) {}
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
    fn dma(&mut self, job: DmaJob) {
        self.jobs.push_back(job);
    }
    fn complete(&mut self, token: u64, o: Outcome) {
        self.done.push((token, o));
    }
}

impl HostDriver for TestEnv {
    fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
        &mut self.jobs
    }
    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
        job.carry_out(&mut self.buf, stage)
    }
}

const COOKIE: u64 = 0xfeed_f00d;
const KEY: Secret = Secret([0x3c; 32]);

fn header(kind: FrameKind, src: u32, bid: u32, seq: u32, count: u32, total: u32) -> WireHeader {
    WireHeader {
        version: WIRE_VERSION,
        kind,
        flags: U16::new(0),
        src_rank: U32::new(src),
        cookie: U64::new(COOKIE),
        bid: U32::new(bid),
        frag_seq: U32::new(seq),
        frag_count: U32::new(count),
        total_len: U32::new(total),
    }
}

/// A frame sealed under `key` (tag and CRC).
fn frame_keyed(key: &Secret, h: &WireHeader, body: &[&[u8]]) -> Vec<u8> {
    let keys = CommKeys::new(key);
    let mut b = vec![0u8; 2048];
    let n = emit(&mut b, h, body, |span| keys.tag(span), crc32c::crc32c).unwrap();
    b.truncate(n);
    b
}

/// A frame sealed under the communicator's key.
fn frame(h: &WireHeader, body: &[&[u8]]) -> Vec<u8> {
    frame_keyed(&KEY, h, body)
}

#[test]
fn each_bad_frame_is_counted_under_its_reason() {
    let config = EngineConfig::default().with(|cfg| {
        cfg.protocol.channels = 4;
        cfg.protocol.preposted_slots = 1;
    });
    let mut p = Protocol::new(&config, crc32c::crc32c);
    let members: std::sync::Arc<[PeerId]> = (0..4).map(PeerId).collect();
    let comm = p
        .create_comm(CommSpec {
            cookie: COOKIE,
            group: [3; 14],
            members,
            my_rank: 1,
            seed: 1,
            key: KEY,
            layout: Default::default(),
        })
        .unwrap();
    let mut env = TestEnv { buf: vec![0; 64], ..TestEnv::default() };
    let data = b"twelve bytes";
    let keys = CommKeys::new(&KEY);
    let digest = keys.message_mac(0, 0, data);
    let digest1 = keys.message_mac(1, 0, data);
    let good = frame(&header(FrameKind::DATA_MULTICAST, 0, 0, 0, 1, 12), &[data, &digest]);

    let mut cases: Vec<(&str, PeerId, Vec<u8>, Option<DropReason>)> = Vec::new();
    cases.push(("truncated", PeerId(0), good[..20].to_vec(), Some(DropReason::TooShort)));
    let mut flipped = good.clone();
    flipped[40] ^= 1;
    cases.push(("bit flip", PeerId(0), flipped, Some(DropReason::BadCrc)));
    let mut v = header(FrameKind::DATA_MULTICAST, 0, 0, 0, 1, 12);
    v.version = 77;
    cases.push(("other version", PeerId(0), frame(&v, &[data, &digest]), Some(DropReason::BadVersion)));
    cases.push((
        "unknown kind",
        PeerId(0),
        frame(&header(FrameKind(99), 0, 0, 0, 0, 0), &[]),
        Some(DropReason::UnknownKind),
    ));
    cases.push((
        "sync body too short",
        PeerId(0),
        frame(&header(FrameKind::SYNC_UP, 0, 0, 0, 0, 0), &[&[0; 5]]),
        Some(DropReason::BadLength),
    ));
    cases.push((
        "fragment past count",
        PeerId(0),
        frame(&header(FrameKind::DATA_REPAIR, 0, 0, 5, 2, 12), &[data]),
        Some(DropReason::BadFragment),
    ));
    let mut foreign = header(FrameKind::DATA_MULTICAST, 0, 0, 0, 1, 12);
    foreign.cookie = U64::new(0xbad_c00c1e);
    cases.push((
        "another job",
        PeerId(0),
        frame(&foreign, &[data, &digest]),
        Some(DropReason::ForeignCookie),
    ));
    cases.push((
        "rank 2 from rank 3's address",
        PeerId(3),
        frame(&header(FrameKind::DATA_MULTICAST, 2, 0, 0, 1, 12), &[data, &digest]),
        Some(DropReason::BadRank),
    ));
    cases.push((
        "rank outside the communicator",
        PeerId(0),
        frame(&header(FrameKind::READY, 9, 0, 0, 0, 0), &[]),
        Some(DropReason::BadRank),
    ));
    cases.push((
        "broadcast far ahead",
        PeerId(0),
        frame(&header(FrameKind::DATA_MULTICAST, 0, 999, 0, 1, 12), &[data, &digest]),
        Some(DropReason::BidOutOfWindow),
    ));
    // The cookie without the key: every kind is dropped for its tag, before anything in it
    // is believed (a forged "aborted", a forged "all acknowledged", forged data).
    let impostor = Secret([0x3d; 32]);
    for (what, h, body) in [
        ("forged data", header(FrameKind::DATA_MULTICAST, 0, 0, 0, 1, 12), vec![&data[..], &digest[..]]),
        ("forged ready", header(FrameKind::READY, 0, 0, 0, 0, 0), vec![]),
        ("forged sync down", header(FrameKind::SYNC_DOWN, 0, 0, 0, 0, 0), vec![&[0xff; 48][..]]),
    ] {
        cases.push((what, PeerId(0), frame_keyed(&impostor, &h, &body), Some(DropReason::BadTag)));
    }
    // A genuine frame whose header was altered and re-sealed with a valid CRC.
    let mut altered = good.clone();
    altered[16] ^= 1; // the broadcast id
    let n = altered.len() - 4;
    let sum = crc32c::crc32c(&altered[..n]).to_le_bytes();
    altered[n..].copy_from_slice(&sum);
    cases.push(("header altered, CRC re-sealed", PeerId(0), altered, Some(DropReason::BadTag)));
    // Pre-posted slots: one is kept (broadcast 1, not posted yet), the second is dropped.
    cases.push((
        "early fragment, slot free",
        PeerId(0),
        frame(&header(FrameKind::DATA_MULTICAST, 0, 1, 0, 1, 12), &[data, &digest1]),
        None,
    ));
    cases.push((
        "early fragment, no slot",
        PeerId(0),
        frame(&header(FrameKind::DATA_MULTICAST, 0, 2, 0, 1, 12), &[data, &digest]),
        Some(DropReason::NoSlot),
    ));
    let rt = RetransmitBody { first_frag: U32::new(0), nfrags: U32::new(9) };
    cases.push((
        "retransmit bitmap short",
        PeerId(0),
        frame(&header(FrameKind::RETRANSMIT_REQUEST, 0, 0, 0, 0, 0), &[rt.as_bytes(), &[1]]),
        Some(DropReason::BadLength),
    ));

    for (what, from, bytes, reason) in cases {
        let before = p.counters().drops;
        p.on_frame(from, &bytes, 0, &mut env);
        p.answer_jobs(0, &mut env);
        let after = p.counters().drops;
        for r in DropReason::ALL {
            let delta = after[r as usize] - before[r as usize];
            let want = u64::from(Some(r) == reason);
            assert_eq!(delta, want, "{what}: counter {r:?} moved by {delta}");
        }
    }
    assert!(env.done.is_empty(), "no bad frame completed anything");

    // Nothing was disturbed: broadcast 0 from rank 0 still completes with the right bytes.
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    p.post_bcast(Post::plain(comm, 0, buf, 12, 1), 0, &mut env).unwrap();
    p.answer_jobs(0, &mut env);
    p.on_frame(PeerId(0), &good, 1, &mut env);
    p.answer_jobs(1, &mut env);
    assert_eq!(env.done.len(), 1);
    assert_eq!(env.done[0].1.status, ringcast_abi::StatusKind::Ok);
    assert_eq!(&env.buf[..12], data);
    // Broadcast 1 completes from the fragment the pre-posted slot kept.
    p.post_bcast(Post::plain(comm, 0, buf, 12, 2), 2, &mut env).unwrap();
    p.answer_jobs(2, &mut env);
    assert_eq!(env.done.last().map(|d| (d.0, d.1.status)), Some((2, ringcast_abi::StatusKind::Ok)));

    // Broadcast 2: its payload replaced in flight under the genuine tag (the tag covers the
    // header only; the message MAC covers the bytes) — a typed error, the buffer untouched.
    env.buf[..12].copy_from_slice(b"............");
    p.post_bcast(Post::plain(comm, 0, buf, 12, 3), 3, &mut env).unwrap();
    p.answer_jobs(3, &mut env);
    let mut swapped =
        frame(&header(FrameKind::DATA_MULTICAST, 0, 2, 0, 1, 12), &[data, &keys.message_mac(2, 0, data)]);
    swapped[32..44].copy_from_slice(b"FORGED BYTES");
    let n = swapped.len() - 4;
    let sum = crc32c::crc32c(&swapped[..n]).to_le_bytes();
    swapped[n..].copy_from_slice(&sum);
    p.on_frame(PeerId(0), &swapped, 4, &mut env);
    p.answer_jobs(4, &mut env);
    assert_eq!(
        env.done.last().map(|d| (d.0, d.1.status)),
        Some((3, ringcast_abi::StatusKind::DigestMismatch)),
        "a replaced payload fails the message MAC"
    );
    assert_eq!(&env.buf[..12], b"............", "nothing delivered");
}
