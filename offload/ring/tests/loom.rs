//! Loom model of the ring: every interleaving (and every allowed reordering of the `Acquire`/
//! `Release` accesses) of a producer filling a capacity-2 ring past full and a consumer draining
//! it. Loom's `UnsafeCell` slots make it report any producer write racing a consumer read.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p ringcast-ring --release --test loom`.
#![cfg(loom)]

use loom::thread;
use ringcast_abi::RingRole;
use ringcast_ring::channel;

#[test]
fn three_items_through_capacity_two() {
    loom::model(|| {
        let (mut p, mut c) = channel::<u64>(2, RingRole::SUBMISSION);
        let producer = thread::spawn(move || {
            for i in 1..=3u64 {
                let mut v = i;
                while let Err(back) = p.try_push(v) {
                    v = back;
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match c.try_pop().unwrap() {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(c.try_pop(), Ok(None));
    });
}

/// The in-place calls under every interleaving: a filler writing a slot never races the
/// consumer's in-place read of it (loom's cells would report it).
#[test]
fn in_place_through_capacity_two() {
    loom::model(|| {
        let (mut p, mut c) = channel::<u64>(2, RingRole::SUBMISSION);
        let producer = thread::spawn(move || {
            for i in 1..=3u64 {
                // SAFETY (test): the free slot `try_push_raw` hands over.
                while !p.try_push_raw(|v| unsafe { v.write(i) }) {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            // SAFETY (test): the published slot `try_pop_raw` hands over.
            match c.try_pop_raw(|v| unsafe { v.read() }).unwrap() {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn batches_through_capacity_two() {
    loom::model(|| {
        let (mut p, mut c) = channel::<u64>(2, RingRole::SUBMISSION);
        let producer = thread::spawn(move || {
            let items = [1u64, 2, 3];
            let mut off = 0;
            while off < items.len() {
                let n = p.push_batch(&items[off..]);
                if n == 0 {
                    thread::yield_now();
                }
                off += n;
            }
        });
        let mut got = Vec::new();
        let mut out = [0u64; 2];
        while got.len() < 3 {
            let n = c.pop_batch(&mut out).unwrap();
            if n == 0 {
                thread::yield_now();
            }
            got.extend_from_slice(&out[..n]);
        }
        producer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}

/// The doorbell never loses a wake-up: a consumer that arms, re-checks and finds the ring empty
/// (so it would sleep on the bell value `arm` returned) must find that a producer that pushed
/// concurrently saw it waiting and moved the bell — so its futex sleep returns at once.
#[test]
fn doorbell_loses_no_wakeup() {
    loom::model(|| {
        let (mut p, mut c) = channel::<u64>(2, RingRole::COMPLETION);
        let producer = thread::spawn(move || {
            p.try_push(7).unwrap();
            p.wake_consumer()
        });
        let seen = c.arm();
        let empty = c.is_empty().unwrap();
        let rang = producer.join().unwrap();
        if empty {
            assert!(rang, "the consumer would sleep but the producer did not ring");
            assert_ne!(c.bell_value(), seen, "the bell did not move: the sleep would not return");
        }
        c.disarm();
        assert_eq!(c.try_pop(), Ok(Some(7)));
    });
}
