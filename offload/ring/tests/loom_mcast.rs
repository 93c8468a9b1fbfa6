//! Loom model of the multicast log: one writer publishing three 8-byte datagrams into a
//! two-slot log (so the third laps the first) and one reader polling it, under every
//! interleaving and every reordering the `Acquire`/`Release`/`Relaxed` accesses and fences
//! allow. The reader must never deliver wrong bytes, must deliver in order, and must account
//! for every position (delivered + lost = 3). A second model runs a deliberately broken writer
//! (publishes before writing) and expects loom to catch a reader delivering stale bytes — the
//! check that the model has teeth. The reader's check-word verification is off here: it would
//! mask the planted bug as a loss; it guards the takeover case, which a single writer never
//! reaches.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p ringcast-ring --release --test loom_mcast`.
#![cfg(loom)]

use loom::thread;
use ringcast_ring::McastLog;

const N: u64 = 3;

fn datagram(i: u64) -> [u8; 8] {
    (0x0101_0101_0101_0101u64 * (i + 1)).to_le_bytes()
}

/// Reads until every one of the `N` positions is delivered or counted lost; checks contents.
fn read_all(log: &McastLog) {
    let mut r = log.reader_at(0, None);
    // Never skip a stalled live writer here: the model explores arbitrarily long stalls, and
    // skipping is covered by the unit tests; this keeps the state space small.
    r.set_stall_limit(u32::MAX);
    // The seqlock alone, without the check word (one writer never has its slot taken over, so
    // the seqlock must be exact by itself — and the planted bug must show as wrong bytes).
    r.set_verify(false);
    let mut delivered = Vec::new();
    while r.cursor() < N {
        match r.recv() {
            Some(d) => {
                assert_eq!(d.from, 7);
                assert_eq!(d.payload, datagram(d.seq), "wrong bytes for seq {}", d.seq);
                delivered.push(d.seq);
            }
            None => thread::yield_now(),
        }
    }
    assert!(delivered.windows(2).all(|w| w[0] < w[1]), "out of order: {delivered:?}");
    assert_eq!(delivered.len() as u64 + r.lost(), N);
}

fn model(planted_bug: bool) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let log = McastLog::new_heap(8, 2).unwrap();
        let writer = {
            let log = log.clone();
            thread::spawn(move || {
                for i in 0..N {
                    let r = if planted_bug {
                        log.write_planted_bug(7, &datagram(i))
                    } else {
                        log.write(7, &datagram(i))
                    };
                    assert_eq!(r, Ok(i), "a single writer is never overtaken");
                }
            })
        };
        read_all(&log);
        writer.join().unwrap();
    });
}

#[test]
fn one_writer_one_reader_lapping() {
    model(false);
}

#[test]
#[should_panic(expected = "wrong bytes")]
fn loom_finds_a_writer_that_publishes_first() {
    model(true);
}
