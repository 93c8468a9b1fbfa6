//! The broadcast protocol fed arbitrary datagrams (re-sealed — tag under the communicator's key
//! and CRC — with a real communicator's cookie spliced in so they reach the protocol logic; half
//! of them with the tag left as the fuzzer wrote it) from arbitrary peers, with posts and timer
//! ticks in between: never a panic, never a completion twice, memory within its bound.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ringcast_abi::frame::tag_span;
use ringcast_abi::wire::{FrameKind, WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::comm::auth::{CommKeys, Secret};
use ringcast_proto::comm::{CommSpec, GroupId, PeerId};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::transfer::protocol::{DmaJob, Env, HostDriver, Outcome, Post, Protocol};
use std::collections::{HashSet, VecDeque};

struct NullEnv {
    buf: Vec<u8>,
    done: HashSet<u64>,
    jobs: VecDeque<DmaJob>,
}

impl Env for NullEnv {
    fn send(&mut self, _: PeerId, _: &[u8]) {}
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
    fn dma(&mut self, job: DmaJob) {
        self.jobs.push_back(job);
    }
    fn complete(&mut self, token: u64, _: Outcome) {
        assert!(self.done.insert(token), "completion {token} delivered twice");
    }
}

/// Jobs are answered after each event, at its time.
impl HostDriver for NullEnv {
    fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
        &mut self.jobs
    }
    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
        assert_eq!(job.len, stage.len() as u64, "a job's length is its staging's");
        job.carry_out(&mut self.buf, stage)
    }
}

const COOKIE: u64 = 0x1234_5678_9abc_def1;
const KEY: Secret = Secret([0x11; 32]);

fuzz_target!(|data: &[u8]| {
    let config = EngineConfig::default().with(|cfg| { cfg.protocol.mtu = 256; cfg.protocol.channels = 4; cfg.protocol.max_message_bytes = 4096; });
    let mut p = Protocol::new(&config, crc32c::crc32c);
    let members: std::sync::Arc<[PeerId]> = (0..6).map(PeerId).collect();
    let comm = p
        .create_comm(CommSpec { cookie: COOKIE, group: [1; 14], members, my_rank: 2, seed: 5, key: KEY, layout: Default::default() })
        .unwrap();
    let keys = CommKeys::new(&KEY);
    let mut env = NullEnv { buf: vec![0; 8192], done: HashSet::new(), jobs: VecDeque::new() };
    let mut now = 0u64;
    let mut token = 0;
    let mut chunks = data.chunks(64);
    while let Some(c) = chunks.next() {
        now += 1_000 * (c[0] as u64 % 50);
        match c[0] % 8 {
            0 => {
                token += 1;
                let len = u16::from_le_bytes([c.get(1).copied().unwrap_or(0), c.get(2).copied().unwrap_or(0)]) as u32 % 5000;
                let root = c.get(3).copied().unwrap_or(0) as u32 % 7;
                let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
                let _ = p.post_bcast(Post::plain(comm, root, buf, len, token), now, &mut env);
            }
            1 => p.on_timeout(now, &mut env),
            _ => {
                let mut f = c[1..].to_vec();
                if f.len() >= WIRE_HEADER_LEN + WIRE_TRAILER_LEN {
                    f[8..16].copy_from_slice(&COOKIE.to_le_bytes());
                    let t = f.len() - WIRE_TRAILER_LEN;
                    if c[0] & 0x80 == 0 {
                        let tag = keys.tag(tag_span(FrameKind(f[1]), &f[..t]));
                        f[t..t + 8].copy_from_slice(&tag.to_le_bytes());
                    }
                    let n = f.len() - 4;
                    let sum = crc32c::crc32c(&f[..n]).to_le_bytes();
                    f[n..].copy_from_slice(&sum);
                }
                let from = PeerId(c[0] as u32 % 7);
                p.on_frame(from, &f, now, &mut env);
            }
        }
        p.answer_jobs(now, &mut env);
        assert!(p.memory_bytes() <= p.memory_bound(4096));
    }
});
