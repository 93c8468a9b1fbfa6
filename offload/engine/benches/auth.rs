//! What authenticating frames costs (issue 13): per byte, the message MAC (keyed BLAKE3) beside
//! the CRC32C every datagram already carries and a plain copy; per frame, the SipHash-2-4 tag
//! over a 32-byte header. `make bench` runs it; docs/performance.md has the figures.
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringcast_proto::comm::auth::{CommKeys, Secret};

fn per_byte(c: &mut Criterion) {
    let keys = CommKeys::new(&Secret([7; 32]));
    let mut g = c.benchmark_group("per_byte");
    for &len in &[64usize, 1472, 8192, 65536, 1 << 20] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("memcpy", len), &data, |b, d| {
            b.iter(|| {
                dst.copy_from_slice(black_box(d));
                black_box(&dst);
            })
        });
        g.bench_with_input(BenchmarkId::new("crc32c", len), &data, |b, d| {
            b.iter(|| crc32c::crc32c(black_box(d)))
        });
        g.bench_with_input(BenchmarkId::new("blake3_mac", len), &data, |b, d| {
            b.iter(|| keys.message_mac(1, black_box(d)))
        });
    }
    g.finish();
}

fn per_frame(c: &mut Criterion) {
    let keys = CommKeys::new(&Secret([7; 32]));
    let header = [0x5au8; 32];
    c.bench_function("per_frame/siphash_tag_32B_header", |b| b.iter(|| keys.tag(black_box(&header))));
    c.bench_function("per_frame/crc32c_32B_header", |b| b.iter(|| crc32c::crc32c(black_box(&header))));
}

criterion_group!(benches, per_byte, per_frame);
criterion_main!(benches);
