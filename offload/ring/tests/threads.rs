//! Two-thread transfer through a heap-backed ring: every item arrives, in order, using single
//! and batch operations on both sides. Runs under Miri with a shrunken count.
#![cfg(not(loom))]

use ringcast_abi::{RingRole, SubmissionDescriptor};
use ringcast_ring::channel;
use std::thread;

fn count() -> u64 {
    if cfg!(miri) {
        200
    } else {
        1_000_000
    }
}

#[test]
fn two_threads_single_ops() {
    let n = count();
    let (mut p, mut c) = channel::<u64>(64, RingRole::SUBMISSION);
    let producer = thread::spawn(move || {
        for i in 0..n {
            let mut v = i;
            while let Err(back) = p.try_push(v) {
                v = back;
                thread::yield_now();
            }
        }
    });
    let mut expect = 0u64;
    while expect < n {
        match c.try_pop().unwrap() {
            Some(v) => {
                assert_eq!(v, expect, "out of order or lost");
                expect += 1;
            }
            None => thread::yield_now(),
        }
    }
    producer.join().unwrap();
    assert_eq!(c.try_pop(), Ok(None), "nothing extra");
}

#[test]
fn two_threads_batches() {
    let n = count();
    let (mut p, mut c) = channel::<SubmissionDescriptor>(32, RingRole::SUBMISSION);
    let producer = thread::spawn(move || {
        let mut sent = 0u64;
        let mut batch = Vec::with_capacity(13);
        while sent < n {
            let k = (n - sent).min(1 + sent % 13);
            batch.clear();
            batch.extend((sent..sent + k).map(|i| SubmissionDescriptor {
                cookie: i,
                len: !i,
                ..Default::default()
            }));
            let mut off = 0;
            while off < batch.len() {
                let pushed = p.push_batch(&batch[off..]);
                if pushed == 0 {
                    thread::yield_now();
                }
                off += pushed;
            }
            sent += k;
        }
    });
    let mut expect = 0u64;
    let mut out = [SubmissionDescriptor::default(); 7];
    while expect < n {
        let k = c.pop_batch(&mut out).unwrap();
        if k == 0 {
            thread::yield_now();
        }
        for d in &out[..k] {
            assert_eq!(d.cookie, expect, "out of order or lost");
            assert_eq!(d.len, !expect, "torn entry");
            expect += 1;
        }
    }
    producer.join().unwrap();
    assert_eq!(c.len(), Ok(0));
}

/// A consumer sleeping on the doorbell is woken by the producer's push, not by its timeout;
/// a consumer that is not armed costs the producer no ring.
#[test]
fn doorbell_wakes_a_sleeping_consumer() {
    use std::time::{Duration, Instant};
    let (mut p, mut c) = channel::<u64>(8, RingRole::COMPLETION);
    p.try_push(1).unwrap();
    assert!(!p.wake_consumer(), "nobody armed");
    assert_eq!(c.try_pop(), Ok(Some(1)));
    let seen = c.arm();
    assert!(c.is_empty().unwrap());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        p.try_push(2).unwrap();
        p.wake_consumer()
    });
    let start = Instant::now();
    ringcast_ring::doorbell::wait(c.bell(), seen, Duration::from_secs(10));
    let slept = start.elapsed();
    // Joined before disarming: under Miri (no futex) the wait returns at once.
    assert!(t.join().unwrap(), "the producer saw the consumer waiting");
    c.disarm();
    assert!(slept < Duration::from_secs(5), "woken by the push, not the timeout ({slept:?})");
    assert_eq!(c.try_pop(), Ok(Some(2)));
}
