//! The real protocol core broadcasting byte-exact over three `verbs` fabrics on a lossy fake
//! wire (`fake.rs`), its DMA jobs answered by a one-buffer host after each handler
//! ([`HostDriver`]). Touches no device.
use super::fake::{FakeNic, Wire};
use super::tests::{discover, member_with, HELLO_NS, MTU};
use super::wire::Kind;
use super::*;
use crate::fabric::Fabric;
use ringcast_proto::comm::CommSpec;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{DmaJob, Env, HostDriver, Outcome, Post, Protocol};
use std::collections::VecDeque;

/// The real protocol core over three fabrics on a lossy fake wire: broadcasts of 2 B to 256 KiB
/// from every root, forced multicast (stage 1 over the group, ring repair over unicast),
/// byte-exact at every rank.
#[test]
fn the_protocol_broadcasts_byte_exact_over_lossy_fake_links() {
    struct TestEnv<'a> {
        fabric: &'a mut VerbsFabric<FakeNic>,
        buf: &'a mut Vec<u8>,
        done: &'a mut Vec<(u64, Outcome)>,
        jobs: VecDeque<DmaJob>,
    }
    impl Env for TestEnv<'_> {
        fn send(&mut self, to: PeerId, frame: &[u8]) {
            self.fabric.send(to, frame);
        }
        fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
            self.fabric.multicast(group, frame);
        }
        fn dma(&mut self, job: DmaJob) {
            self.jobs.push_back(job);
        }
        fn complete(&mut self, token: u64, outcome: Outcome) {
            self.done.push((token, outcome));
        }
    }
    impl HostDriver for TestEnv<'_> {
        fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
            &mut self.jobs
        }
        fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
            job.carry_out(self.buf, stage)
        }
    }

    const N: u32 = 3;
    let wire = Wire::new();
    // 2 % loss of DATA, decided by a seeded generator.
    let mut x = 0x1234_5678_9abc_def1u64;
    wire.set_drop(Some(Box::new(move |_, _, m: &[u8]| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m.get(3) == Some(&Kind::Data.to_wire()) && x.is_multiple_of(50)
    })));
    // The state machine's sections only: a fabric's tests, like the fabric, never see the
    // whole configuration.
    let config = ringcast_proto::config::EngineConfig::default().with(|cfg| {
        cfg.protocol.mtu = MTU as u32;
        cfg.protocol.max_message_bytes = 1 << 18;
    });
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..N).map(|i| Some(member_with(&wire, i, N, 1 + u64::from(i), 256, 64))).collect();
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    let mut fabrics: Vec<VerbsFabric<FakeNic>> = fabrics.into_iter().flatten().collect();
    let group: GroupId = [0x42; 14];
    let members: std::sync::Arc<[PeerId]> = (0..N).map(PeerId).collect();
    let mut protos: Vec<Protocol> = Vec::new();
    let mut comms = Vec::new();
    for (i, f) in fabrics.iter_mut().enumerate() {
        f.join(&group).expect("join");
        let mut p = Protocol::new(&config, crc32c::crc32c);
        p.force_algorithm(Some(Algorithm::Multicast));
        let spec = CommSpec {
            cookie: 0xc0ffee,
            group,
            members: members.clone(),
            my_rank: i as u32,
            seed: 7,
            key: ringcast_proto::comm::auth::Secret([7; 32]),
            layout: Default::default(),
        };
        comms.push(p.create_comm(spec).expect("communicator"));
        protos.push(p);
    }
    let mut bufs: Vec<Vec<u8>> = vec![vec![0; 1 << 18]; N as usize];
    let mut done: Vec<Vec<(u64, Outcome)>> = vec![Vec::new(); N as usize];
    let sizes = [2usize, 100, 955, 956, 957, 4096, 65_536, 1 << 18];
    for (k, &len) in sizes.iter().enumerate() {
        let token = k as u64 + 1;
        let root = (k as u32) % N;
        for (i, b) in bufs.iter_mut().enumerate() {
            for (j, byte) in b[..len].iter_mut().enumerate() {
                *byte = if i as u32 == root { (j * 7 + k) as u8 } else { 0xEE };
            }
        }
        for i in 0..N as usize {
            let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
            let post = Post::plain(comms[i], root, buf, len as u32, token);
            let now = wire_now(&fabrics[i]);
            let mut env = TestEnv {
                fabric: &mut fabrics[i],
                buf: &mut bufs[i],
                done: &mut done[i],
                jobs: VecDeque::new(),
            };
            protos[i].post_bcast(post, now, &mut env).expect("posted");
            protos[i].answer_jobs(now, &mut env);
        }
        let mut steps = 0;
        while done.iter().any(|d| !d.iter().any(|(t, _)| *t == token)) {
            steps += 1;
            assert!(steps < 200_000, "broadcast {k} ({len} B) did not finish");
            for i in 0..N as usize {
                let now = wire_now(&fabrics[i]);
                let mut frames = Vec::new();
                fabrics[i].poll(64, &mut |from, d| frames.push((from, d.to_vec())));
                let mut env = TestEnv {
                    fabric: &mut fabrics[i],
                    buf: &mut bufs[i],
                    done: &mut done[i],
                    jobs: VecDeque::new(),
                };
                for (from, d) in frames {
                    protos[i].on_frame(from, &d, now, &mut env);
                    protos[i].answer_jobs(now, &mut env);
                }
                if protos[i].next_timeout().is_some_and(|t| t <= now) {
                    protos[i].on_timeout(now, &mut env);
                    protos[i].answer_jobs(now, &mut env);
                }
            }
            wire.advance(20_000);
        }
        for i in 0..N as usize {
            let (_, o) = done[i].iter().find(|(t, _)| *t == token).copied().expect("outcome");
            assert_eq!(o.status, ringcast_abi::StatusKind::Ok, "rank {i}, broadcast {k}");
            assert!(
                bufs[i][..len].iter().enumerate().all(|(j, &b)| b == (j * 7 + k) as u8),
                "rank {i}, {len} B: bytes differ"
            );
        }
    }
    assert!(wire.counts().1 > 0, "the wire lost frames, and repair made up for them");
    for f in &fabrics {
        assert_eq!(f.counters().refused, 0);
    }
}

fn wire_now(f: &VerbsFabric<FakeNic>) -> u64 {
    f.nic().now()
}
