//! What a receiver on the `shm` fabric spends per datagram of a 1 MiB message (issue 40, item
//! 1): the fabric's `poll` over 261 point-to-point datagrams of 4,088 bytes (one ring slot
//! each), handed to a handler that does what a placing receiver's engine does with each — the
//! CRC32C over the frame, then its payload copied into its place in a 1 MiB host buffer. Only
//! the receive is timed (the sender's writes into the ring happen between the timed polls). The
//! fabric hands each datagram over where it lies in its ring slot; before the receive in place
//! it copied it into a buffer of its own first — docs/performance.md ("A ring datagram handled
//! in its slot") has both figures. `cargo bench -p ringcast-offload --bench shm_receive`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ringcast_offload::crc::crc32c;
use ringcast_offload::fabric::shm::ShmFabric;
use ringcast_offload::fabric::Fabric;
use ringcast_proto::comm::PeerId;
use std::time::{Duration, Instant};

const MTU: usize = 4088;
const HEADER: usize = 32;
const TRAILER: usize = 24;
const PAYLOAD: usize = MTU - HEADER - TRAILER;
const MESSAGE: usize = 1 << 20;
const FRAGMENTS: usize = MESSAGE.div_ceil(PAYLOAD);

fn receive(c: &mut Criterion) {
    let job = format!("bench-shmrx-{}", std::process::id());
    let mut root = ShmFabric::new(&job, PeerId(0), 2, MTU).expect("fabric");
    let mut leaf = ShmFabric::new(&job, PeerId(1), 2, MTU).expect("fabric");
    assert!(root.connect(PeerId(1)));
    let frames: Vec<Vec<u8>> =
        (0..FRAGMENTS).map(|k| (0..MTU).map(|i| ((i * 31 + k * 7) >> 3) as u8).collect()).collect();
    let mut host = vec![0u8; MESSAGE + PAYLOAD];
    let mut g = c.benchmark_group("shm_receive");
    g.throughput(Throughput::Bytes((FRAGMENTS * PAYLOAD) as u64));
    g.bench_function("poll_crc_place_1MiB", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for f in &frames {
                    root.send(PeerId(1), f);
                }
                let (mut got, mut sum) = (0usize, 0u32);
                let t0 = Instant::now();
                while got < FRAGMENTS {
                    got += leaf.poll(64, &mut |_, frame| {
                        sum ^= crc32c(frame);
                        let k = usize::from(frame[0]) | usize::from(frame[1]) << 8;
                        let at = (k % FRAGMENTS) * PAYLOAD;
                        host[at..at + PAYLOAD].copy_from_slice(&frame[HEADER..HEADER + PAYLOAD]);
                    });
                }
                spent += t0.elapsed();
                black_box(sum);
            }
            spent
        })
    });
    g.finish();
    drop((root, leaf));
    let _ = ringcast_offload::fabric::shm::cleanup(&job);
}

criterion_group!(benches, receive);
criterion_main!(benches);
