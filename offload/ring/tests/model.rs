//! Property test: arbitrary interleavings of producer and consumer operations on one thread,
//! checked step by step against a `VecDeque` model of a bounded FIFO.
#![cfg(not(loom))]

use proptest::prelude::*;
use ringcast_abi::RingRole;
use ringcast_ring::channel;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    Push,
    PushBatch(usize),
    Pop,
    PopBatch(usize),
    Len,
    FreeSlots,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Push),
        (0usize..20).prop_map(Op::PushBatch),
        Just(Op::Pop),
        (0usize..20).prop_map(Op::PopBatch),
        Just(Op::Len),
        Just(Op::FreeSlots),
    ]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 512 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ring_matches_vecdeque(cap_log in 1u32..6, ops in proptest::collection::vec(op(), 0..200)) {
        let cap = 1usize << cap_log;
        let (mut p, mut c) = channel::<u64>(cap as u32, RingRole::SUBMISSION);
        let mut model: VecDeque<u64> = VecDeque::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Push => {
                    let r = p.try_push(next);
                    if model.len() < cap {
                        prop_assert_eq!(r, Ok(()));
                        model.push_back(next);
                    } else {
                        prop_assert_eq!(r, Err(next));
                    }
                    next += 1;
                }
                Op::PushBatch(n) => {
                    let items: Vec<u64> = (next..next + n as u64).collect();
                    let pushed = p.push_batch(&items);
                    prop_assert_eq!(pushed, n.min(cap - model.len()));
                    model.extend(&items[..pushed]);
                    next += n as u64;
                }
                Op::Pop => {
                    prop_assert_eq!(c.try_pop(), Ok(model.pop_front()));
                }
                Op::PopBatch(n) => {
                    let mut out = vec![u64::MAX; n];
                    let got = c.pop_batch(&mut out).unwrap();
                    prop_assert_eq!(got, n.min(model.len()));
                    let expect: Vec<u64> = model.drain(..got).collect();
                    prop_assert_eq!(&out[..got], &expect[..]);
                    prop_assert!(out[got..].iter().all(|&v| v == u64::MAX), "wrote past n");
                }
                Op::Len => {
                    prop_assert_eq!(c.len(), Ok(model.len()));
                    prop_assert_eq!(c.is_empty(), Ok(model.is_empty()));
                    prop_assert_eq!(p.in_flight(), model.len());
                }
                Op::FreeSlots => {
                    prop_assert_eq!(p.free_slots(), cap - model.len());
                }
            }
        }
    }
}
