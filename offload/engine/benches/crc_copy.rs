//! Whether computing a datagram's CRC32C while copying it pays (issue 15, item 2): a receiver
//! checks the CRC over a 4,088-byte `shm` frame and copies its payload into the channel —
//! separately (what the engine does), or fused: the payload copied in chunks, each chunk fed
//! to an incremental CRC while it is still in L1. `make bench` runs it; the figures and the
//! conclusion are in docs/architecture.md ("The copies a broadcast makes").
use crc_fast::{CrcAlgorithm, Digest};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringcast_offload::crc::crc32c;

const FRAME: usize = 4088;
const HEADER: usize = 32;
const PAYLOAD: usize = FRAME - HEADER - 12;

fn crc_and_copy(c: &mut Criterion) {
    let frame: Vec<u8> = (0..FRAME as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    // A 1 MiB channel, written fragment after fragment as a message arrives.
    let mut channel = vec![0u8; 1 << 20];
    let slots = channel.len() / 4096;
    let mut g = c.benchmark_group("crc_copy");
    g.throughput(Throughput::Bytes(FRAME as u64));
    let mut at = 0usize;
    g.bench_function("separate", |b| {
        b.iter(|| {
            at = (at + 1) % slots;
            let sum = crc32c(black_box(&frame));
            channel[at * 4096..at * 4096 + PAYLOAD].copy_from_slice(&frame[HEADER..HEADER + PAYLOAD]);
            black_box(sum)
        })
    });
    for chunk in [512usize, 2048] {
        g.bench_with_input(BenchmarkId::new("fused", chunk), &chunk, |b, &chunk| {
            b.iter(|| {
                at = (at + 1) % slots;
                let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
                d.update(&frame[..HEADER]);
                let dst = &mut channel[at * 4096..at * 4096 + PAYLOAD];
                for (s, o) in frame[HEADER..HEADER + PAYLOAD].chunks(chunk).zip(dst.chunks_mut(chunk)) {
                    o.copy_from_slice(s);
                    d.update(o);
                }
                d.update(&frame[HEADER + PAYLOAD..]);
                black_box(d.finalize())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, crc_and_copy);
criterion_main!(benches);
