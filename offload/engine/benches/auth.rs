//! What authenticating frames costs (issue 13): per byte, the message MAC (keyed BLAKE3) beside
//! the CRC32C every datagram already carries and a plain copy; per frame, the SipHash-2-4 tag
//! over a 32-byte header, and under `protocol.auth = tag` a data frame's tag bound to its call
//! (the header's half and the call's, one pass: what a sender seals and a receiver checks).
//! `make bench` runs it; docs/performance.md has the figures.
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringcast_proto::comm::auth::{call_binding, CommKeys, Secret};
use ringcast_proto::config::Auth;

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
            b.iter(|| keys.message_mac(1, 0, black_box(d)))
        });
    }
    g.finish();
}

fn per_frame(c: &mut Criterion) {
    let keys = CommKeys::new(&Secret([7; 32]));
    let header = [0x5au8; 32];
    c.bench_function("per_frame/siphash_tag_32B_header", |b| b.iter(|| keys.tag(black_box(&header))));
    c.bench_function("per_frame/crc32c_32B_header", |b| b.iter(|| crc32c::crc32c(black_box(&header))));
    let tag_keys = CommKeys::with_auth(&Secret([7; 32]), Auth::Tag);
    let binding = call_binding(0x0203_0001, 5, 9);
    let bound = tag_keys.data_tag(&header, Some(&binding));
    c.bench_function("per_frame/bound_tag_seal_32B_header", |b| {
        b.iter(|| tag_keys.data_tag(black_box(&header), Some(black_box(&binding))))
    });
    c.bench_function("per_frame/bound_tag_check_32B_header", |b| {
        b.iter(|| tag_keys.data_tag_verified(black_box(&header), Some(black_box(&binding)), black_box(bound)))
    });
}

criterion_group!(benches, per_byte, per_frame);
criterion_main!(benches);
