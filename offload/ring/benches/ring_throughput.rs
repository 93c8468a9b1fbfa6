//! Throughput of moving N = 1,000,000 64-byte `SubmissionDescriptor`s from one thread to
//! another: this ring with batch push/pop (batch 32), this ring with single push/pop, and
//! `crossbeam_queue::ArrayQueue` of the same capacity (the docs/design.md §5 yardstick). One iteration
//! = one full transfer including spawning the consumer thread; every side spins (with
//! `spin_loop`) when full/empty. The consumer checks order so the work cannot be optimised away.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use ringcast_abi::{RingRole, SubmissionDescriptor};
use ringcast_ring::channel;
use std::hint::spin_loop;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const N: u64 = 1_000_000;
const CAPACITY: u32 = 1024;
const BATCH: usize = 32;

fn desc(i: u64) -> SubmissionDescriptor {
    SubmissionDescriptor { cookie: i, len: 64, ..Default::default() }
}

fn ring_batch() -> Duration {
    let (mut p, mut c) = channel::<SubmissionDescriptor>(CAPACITY, RingRole::SUBMISSION);
    let start = Instant::now();
    let consumer = thread::spawn(move || {
        let mut out = [SubmissionDescriptor::default(); BATCH];
        let mut expect = 0u64;
        while expect < N {
            let k = c.pop_batch(&mut out).unwrap();
            if k == 0 {
                spin_loop();
            }
            for d in &out[..k] {
                assert_eq!(d.cookie, expect);
                expect += 1;
            }
        }
    });
    let mut batch = [SubmissionDescriptor::default(); BATCH];
    let mut sent = 0u64;
    while sent < N {
        let k = (N - sent).min(BATCH as u64) as usize;
        for (j, d) in batch[..k].iter_mut().enumerate() {
            *d = desc(sent + j as u64);
        }
        let mut off = 0;
        while off < k {
            let pushed = p.push_batch(&batch[off..k]);
            if pushed == 0 {
                spin_loop();
            }
            off += pushed;
        }
        sent += k as u64;
    }
    consumer.join().unwrap();
    start.elapsed()
}

fn ring_single() -> Duration {
    let (mut p, mut c) = channel::<SubmissionDescriptor>(CAPACITY, RingRole::SUBMISSION);
    let start = Instant::now();
    let consumer = thread::spawn(move || {
        let mut expect = 0u64;
        while expect < N {
            match c.try_pop().unwrap() {
                Some(d) => {
                    assert_eq!(d.cookie, expect);
                    expect += 1;
                }
                None => spin_loop(),
            }
        }
    });
    for i in 0..N {
        let mut d = desc(i);
        while let Err(back) = p.try_push(d) {
            d = back;
            spin_loop();
        }
    }
    consumer.join().unwrap();
    start.elapsed()
}

fn array_queue() -> Duration {
    let q = Arc::new(ArrayQueue::<SubmissionDescriptor>::new(CAPACITY as usize));
    let qc = q.clone();
    let start = Instant::now();
    let consumer = thread::spawn(move || {
        let mut expect = 0u64;
        while expect < N {
            match qc.pop() {
                Some(d) => {
                    assert_eq!(d.cookie, expect);
                    expect += 1;
                }
                None => spin_loop(),
            }
        }
    });
    for i in 0..N {
        let mut d = desc(i);
        while let Err(back) = q.push(d) {
            d = back;
            spin_loop();
        }
    }
    consumer.join().unwrap();
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("spsc_1M_x_64B");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("ring_batch32", |b| b.iter_custom(|iters| (0..iters).map(|_| ring_batch()).sum()));
    g.bench_function("ring_single", |b| b.iter_custom(|iters| (0..iters).map(|_| ring_single()).sum()));
    g.bench_function("crossbeam_array_queue", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| array_queue()).sum())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
