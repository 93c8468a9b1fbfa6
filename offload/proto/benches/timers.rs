//! What asking the protocol for its next deadline costs, on every turn of an engine's loop
//! (issue 14): the timer table ([`Protocol::next_timeout`]) against the scan of every
//! communicator × channel it replaced (`next_timeout_by_scan`), measured in the same run, with
//! 1 to 64 communicators whose every channel holds a broadcast waiting for data. `make bench`
//! runs it; docs/performance.md has the figures.
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::{CommSpec, GroupId, Layout, PeerId};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::transfer::protocol::{DmaJob, Env, Outcome, Post, Protocol};
use std::sync::Arc;

/// Frames and completions go nowhere; no DMA job is handed over (every post here is a
/// receiver's, whose first store waits for data that never arrives).
struct Nowhere;

impl Env for Nowhere {
    fn send(&mut self, _: PeerId, _: &[u8]) {}
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
    fn dma(&mut self, _: DmaJob) {
        unreachable!("a receiver's post hands over no DMA job before its data");
    }
    fn complete(&mut self, _: u64, _: Outcome) {}
}

/// Rank 1 of `comms` 16-rank communicators, every channel holding a broadcast from rank 0
/// that has not arrived: each has a repair request and a peer-silence deadline armed.
fn busy(comms: u32) -> Protocol {
    let config = EngineConfig::default().with(|c| c.limits.max_comms = comms.max(1));
    let channels = config.protocol.channels;
    let mut p = Protocol::new(&config, crc32c::crc32c);
    let members: Arc<[PeerId]> = (0..16).map(PeerId).collect();
    for i in 0..comms {
        let spec = CommSpec {
            cookie: 0x100 + i as u64,
            group: [i as u8; 14],
            members: members.clone(),
            my_rank: 1,
            seed: i as u64,
            key: Secret([i as u8; 32]),
            layout: Layout::FLAT,
        };
        let comm = p.create_comm(spec).expect("within max_comms");
        for b in 0..channels {
            let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
            let post = Post::plain(comm, 0, buf, 4096, (i * channels + b) as u64);
            p.post_bcast(post, 0, &mut Nowhere).expect("a free channel");
        }
    }
    assert!(p.next_timeout().is_some(), "every broadcast has its repair timer armed");
    assert_eq!(p.next_timeout(), p.next_timeout_by_scan());
    p
}

fn next_deadline(c: &mut Criterion) {
    let mut g = c.benchmark_group("next_timeout");
    for &comms in &[1u32, 8, 64] {
        let p = busy(comms);
        g.bench_with_input(BenchmarkId::new("scan", comms), &p, |b, p| {
            b.iter(|| black_box(p).next_timeout_by_scan())
        });
        g.bench_with_input(BenchmarkId::new("table", comms), &p, |b, p| {
            b.iter(|| black_box(p).next_timeout())
        });
    }
    g.finish();
}

criterion_group!(benches, next_deadline);
criterion_main!(benches);
