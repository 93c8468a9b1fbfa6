//! Property test: arbitrary sequences of writes (from several senders) and reads (by two
//! readers, one filtering its own sender id) on one thread, checked step by step against a
//! model of the log: each reader gets exactly the datagrams still in the log, in order, none
//! twice, bytes intact, and its lost count is exactly what it was lapped by.
#![cfg(not(loom))]

use proptest::prelude::*;
use ringcast_ring::McastLog;

#[derive(Debug, Clone)]
enum Op {
    /// Sender `from` writes `len` bytes.
    Write { from: u32, len: usize },
    /// Reader `r` calls `recv` `n` times.
    Read { r: usize, n: usize },
}

fn op(payload: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..3, 0..=payload).prop_map(|(from, len)| Op::Write { from, len }),
        1 => (0usize..2, 1usize..12).prop_map(|(r, n)| Op::Read { r, n }),
    ]
}

fn bytes(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (seq as u8).wrapping_mul(13).wrapping_add(k as u8)).collect()
}

/// The model of one reader: its cursor and lost count.
struct ModelReader {
    cursor: u64,
    lost: u64,
    skip: Option<u32>,
}

impl ModelReader {
    /// What `recv` must return given the log `written` (every datagram: `(from, len)`).
    fn next(&mut self, written: &[(u32, usize)], slots: u64) -> Option<(u64, u32, usize)> {
        let ws = written.len() as u64;
        loop {
            if ws - self.cursor > slots {
                self.lost += ws - slots - self.cursor;
                self.cursor = ws - slots;
            }
            if self.cursor == ws {
                return None;
            }
            let (from, len) = written[self.cursor as usize];
            let seq = self.cursor;
            self.cursor += 1;
            if self.skip != Some(from) {
                return Some((seq, from, len));
            }
        }
    }
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
    fn log_matches_model(
        slots_log in 1u32..5,
        payload in 1usize..40,
        ops in proptest::collection::vec(op(40), 0..150),
    ) {
        let slots = 1u32 << slots_log;
        let log = McastLog::new_heap(payload, slots).unwrap();
        let cap = log.max_payload();
        prop_assert!(cap >= payload && cap < payload + 8);
        let mut readers = [log.reader(None), log.reader(Some(1))];
        let mut models = [
            ModelReader { cursor: 0, lost: 0, skip: None },
            ModelReader { cursor: 0, lost: 0, skip: Some(1) },
        ];
        let mut written: Vec<(u32, usize)> = Vec::new();
        for op in ops {
            match op {
                Op::Write { from, len } => {
                    let seq = written.len() as u64;
                    if len > cap {
                        prop_assert!(log.write(from, &bytes(seq, len)).is_err());
                    } else {
                        prop_assert_eq!(log.write(from, &bytes(seq, len)), Ok(seq));
                        written.push((from, len));
                    }
                }
                Op::Read { r, n } => {
                    for _ in 0..n {
                        let want = models[r].next(&written, u64::from(slots));
                        let got = readers[r].recv().map(|d| {
                            prop_assert_eq!(d.payload, &bytes(d.seq, d.payload.len())[..]);
                            Ok((d.seq, d.from, d.payload.len()))
                        });
                        let got = got.transpose()?;
                        prop_assert_eq!(got, want);
                        prop_assert_eq!(readers[r].lost(), models[r].lost);
                        prop_assert_eq!(readers[r].cursor(), models[r].cursor);
                    }
                }
            }
        }
    }
}
