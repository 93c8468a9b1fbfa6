//! Tests of the multicast log through its public API on heap memory: delivery, the own-sender
//! filter, exact loss counts when a reader is lapped, writers that died after claiming (with
//! and without a busy mark), writer takeover, header validation, hostile words (impossible
//! lengths, sequences, garbage everywhere), and writer/reader threads. Heap only, so all of it
//! runs under Miri (thread counts shrunk).
#![cfg(not(loom))]

use core::ptr::NonNull;
use ringcast_ring::{log_footprint, Datagram, LogError, McastLog, WriteError, LOG_MAGIC};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Word index of `write_seq`.
const WRITE_SEQ: usize = 16;

/// Word index of the start of slot `k` for a log of `payload` bytes per slot.
fn slot(payload: usize, k: usize) -> usize {
    32 + k * (3 + payload.div_ceil(8))
}

/// Test datagram `i` of sender `from`: 9..=72 bytes, `i` in the first 8, then a pattern.
fn payload(from: u32, i: u64) -> Vec<u8> {
    let len = 9 + ((i * 37 + u64::from(from) * 11) % 64) as usize;
    let mut v = i.to_le_bytes().to_vec();
    v.extend((8..len).map(|k| (i as u8).wrapping_mul(31) ^ (k as u8) ^ (from as u8).wrapping_mul(7)));
    v
}

/// Checks a delivered datagram is exactly some `payload(from, i)`; returns `i`.
fn check(d: &Datagram<'_>) -> u64 {
    assert!(d.payload.len() >= 9, "short datagram {:?}", d.payload);
    let i = u64::from_le_bytes(d.payload[..8].try_into().unwrap());
    assert_eq!(d.payload, &payload(d.from, i)[..], "wrong bytes in seq {}", d.seq);
    i
}

/// A log on raw heap words the test can scribble on, like a hostile peer would.
struct Raw {
    words: Arc<[AtomicU64]>,
}

impl Raw {
    fn new(payload: usize, slots: u32) -> (Raw, McastLog) {
        let raw = Raw::blank(log_footprint(payload, slots) / 8);
        // SAFETY: the words are valid for the whole length, not shared yet.
        unsafe { McastLog::init(raw.ptr(), raw.len(), payload, slots) }.unwrap();
        let log = raw.attach().unwrap();
        (raw, log)
    }
    fn blank(words: usize) -> Raw {
        Raw { words: (0..words).map(|_| AtomicU64::new(0)).collect() }
    }
    fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.words.as_ptr() as *mut u8).unwrap()
    }
    fn len(&self) -> usize {
        self.words.len() * 8
    }
    fn attach(&self) -> Result<McastLog, LogError> {
        // SAFETY: the words live as long as the owner Arc and are only accessed atomically.
        unsafe { McastLog::attach(self.ptr(), self.len(), Arc::new(self.words.clone())) }
    }
    fn word(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }
}

#[test]
fn roundtrip_and_limits() {
    let log = McastLog::new_heap(64, 8).unwrap();
    assert_eq!((log.max_payload(), log.slots(), log.write_seq()), (64, 8, 0));
    let mut r = log.reader(None);
    assert_eq!(r.recv(), None);
    assert_eq!(log.write(1, b"hello"), Ok(0));
    assert_eq!(log.write(2, b""), Ok(1));
    assert_eq!(log.write(3, &[7; 64]), Ok(2));
    assert_eq!(r.recv(), Some(Datagram { seq: 0, from: 1, payload: b"hello" }));
    assert_eq!(r.recv(), Some(Datagram { seq: 1, from: 2, payload: b"" }));
    assert_eq!(r.recv(), Some(Datagram { seq: 2, from: 3, payload: &[7; 64] }));
    assert_eq!(r.recv(), None);
    assert_eq!(log.write(1, &[0; 65]), Err(WriteError::TooLarge));
    assert_eq!(log.write_seq(), 3, "a refused write claims nothing");
    assert_eq!((r.cursor(), r.lost()), (3, 0));
    // A reader created now starts at the write position.
    let mut late = log.reader(None);
    assert_eq!(late.recv(), None);
    assert!(McastLog::new_heap(0, 8).is_err());
    assert!(McastLog::new_heap(64, 6).is_err());
    assert!(McastLog::new_heap(64, 1).is_err());
}

#[test]
fn own_datagrams_are_skipped_not_lost() {
    let log = McastLog::new_heap(16, 8).unwrap();
    let mut r = log.reader(Some(1));
    for from in [1, 2, 1, 1, 3, 1] {
        log.write(from, &[from as u8]).unwrap();
    }
    assert_eq!(r.recv().map(|d| (d.seq, d.from)), Some((1, 2)));
    assert_eq!(r.recv().map(|d| (d.seq, d.from)), Some((4, 3)));
    assert_eq!(r.recv(), None);
    assert_eq!((r.cursor(), r.lost()), (6, 0));
}

/// A datagram put back (`unread`) is delivered again, whole, and what follows it stays in the
/// log behind it; lapped while put back, it is counted lost like any overwritten datagram.
#[test]
fn an_unread_datagram_is_read_again_or_lost_when_lapped() {
    let log = McastLog::new_heap(72, 8).unwrap();
    let mut r = log.reader(Some(1));
    for (from, i) in [(1, 0), (2, 1), (3, 2)] {
        log.write(from, &payload(from, i)).unwrap();
    }
    let seq = r.recv().map(|d| (d.seq, check(&d))).unwrap();
    assert_eq!(seq, (1, 1), "own datagram 0 skipped");
    assert!(!r.unread(0), "only the datagram just read can be put back");
    assert!(r.unread(1));
    assert!(!r.unread(1), "once");
    assert_eq!(r.recv().map(|d| (d.seq, check(&d))), Some((1, 1)), "read again, whole");
    assert_eq!(r.recv().map(|d| (d.seq, check(&d))), Some((2, 2)));
    assert_eq!((r.cursor(), r.lost()), (3, 0));
    // Put back, then lapped: 3 is overwritten by 11 before it is read again.
    log.write(2, &payload(2, 3)).unwrap();
    assert_eq!(r.recv().map(|d| d.seq), Some(3));
    assert!(r.unread(3));
    for i in 4..12 {
        log.write(2, &payload(2, i)).unwrap();
    }
    let mut got = Vec::new();
    while let Some(d) = r.recv() {
        got.push(check(&d));
    }
    assert_eq!(got, (4..12).collect::<Vec<_>>());
    assert_eq!(r.lost(), 1, "the datagram put back and lapped");
}

#[test]
fn lapped_reader_counts_exact_losses() {
    let log = McastLog::new_heap(72, 8).unwrap();
    let mut r = log.reader(None);
    for i in 0..20 {
        log.write(5, &payload(5, i)).unwrap();
    }
    let mut got = Vec::new();
    while let Some(d) = r.recv() {
        got.push((d.seq, check(&d)));
    }
    assert_eq!(got, (12..20).map(|i| (i, i)).collect::<Vec<_>>());
    assert_eq!(r.lost(), 12);
}

#[test]
fn dead_writer_claim_is_skipped_after_stall_limit() {
    for busy_mark in [false, true] {
        let (raw, log) = Raw::new(16, 8);
        let mut r = log.reader(None);
        r.set_stall_limit(3);
        // A writer claimed sequence 0 and died (before or after marking the slot busy).
        raw.word(WRITE_SEQ).store(1, Relaxed);
        if busy_mark {
            raw.word(slot(16, 0)).store(1, Relaxed);
        }
        assert_eq!(log.write(2, b"after"), Ok(1));
        assert_eq!(r.recv(), None, "stalled, poll 1");
        assert_eq!(r.recv(), None, "stalled, poll 2");
        assert_eq!(r.recv(), Some(Datagram { seq: 1, from: 2, payload: b"after" }));
        assert_eq!(r.lost(), 1);
    }
}

#[test]
fn dead_writer_claim_is_skipped_once_lapped() {
    let (raw, log) = Raw::new(16, 4);
    let mut r = log.reader(None);
    r.set_stall_limit(1);
    raw.word(WRITE_SEQ).store(1, Relaxed);
    raw.word(slot(16, 0)).store(1, Relaxed); // busy(0), forever
                                             // Seq 4 lands on the dead writer's busy slot less than TAKEOVER_LAPS laps later: lost.
    for s in 1..=5u64 {
        let r = log.write(1, &s.to_le_bytes());
        assert_eq!(r, if s == 4 { Err(WriteError::Lost { seq: 4 }) } else { Ok(s) });
    }
    // write_seq 6 is more than a lap past the dead claim: skipped at once, no stall polls.
    // Seqs 0 (dead) and 1 (overwritten by 5) are lost; 2, 3 delivered; 4 never published
    // (skipped after the one-poll stall limit).
    let got: Vec<u64> = std::iter::from_fn(|| r.recv().map(|d| d.seq)).collect();
    assert_eq!(got, [2, 3, 5]);
    assert_eq!(r.lost(), 3);
    // Two laps after the dead claim, a writer takes the slot over.
    for s in 6..8u64 {
        assert_eq!(log.write(1, b"x"), Ok(s));
    }
    assert_eq!(log.write(1, b"taken"), Ok(8));
    assert_eq!(r.recv(), Some(Datagram { seq: 6, from: 1, payload: b"x" }));
}

#[test]
fn attach_validates_the_header() {
    let (raw, _log) = Raw::new(64, 8);
    assert!(raw.attach().is_ok());
    let cases: [(usize, u64, LogError); 6] = [
        (0, 0, LogError::BadMagic),
        (1, 1, LogError::Version(1)),
        (3, 6, LogError::BadSlots(6)),
        (3, 1 << 40, LogError::BadSlots(1 << 40)),
        (2, 3, LogError::BadSlotSize(3)),
        (2, u64::MAX, LogError::BadSlotSize(u64::MAX)),
    ];
    for (word, value, err) in cases {
        let old = raw.word(word).swap(value, Relaxed);
        assert_eq!(raw.attach().err(), Some(err));
        raw.word(word).store(old, Relaxed);
    }
    // More slots than the memory holds.
    raw.word(3).store(16, Relaxed);
    assert!(matches!(raw.attach(), Err(LogError::TooSmall { .. })));
    raw.word(3).store(8, Relaxed);
    // Too short for the header; misaligned.
    let short = Raw::blank(8);
    // SAFETY: valid words of the given length, not shared.
    let r = unsafe { McastLog::init(short.ptr(), short.len(), 64, 8) };
    assert!(matches!(r, Err(LogError::TooSmall { .. })));
    // SAFETY: one byte in, still inside the allocation; rejected before any access.
    let odd = unsafe { raw.ptr().add(1) };
    // SAFETY: as above.
    let r = unsafe { McastLog::attach(odd, raw.len() - 8, Arc::new(raw.words.clone())) };
    assert_eq!(r.err(), Some(LogError::Misaligned));
    assert_eq!(raw.word(0).load(Relaxed), LOG_MAGIC);
}

#[test]
fn hostile_words_never_panic_or_hang() {
    let (raw, log) = Raw::new(16, 4);
    let mut r = log.reader(None);
    // A published slot whose length exceeds the payload capacity: lost, not delivered.
    log.write(1, b"ok").unwrap();
    raw.word(slot(16, 0) + 1).store(u64::from(u32::MAX), Relaxed);
    assert_eq!(r.recv(), None);
    assert_eq!(r.lost(), 1);
    // A bogus huge write_seq: the reader jumps, counting (saturating), and stays bounded.
    raw.word(WRITE_SEQ).store(u64::MAX - 1, Relaxed);
    for _ in 0..10 {
        let _ = r.recv();
    }
    assert!(r.lost() > 1);
    // Writers keep working on top of the garbage (their datagrams may be lost, no panic).
    for _ in 0..10 {
        let _ = log.write(1, b"x");
    }
    // write_seq going backwards reads as empty.
    raw.word(WRITE_SEQ).store(0, Relaxed);
    let _ = r.recv();
    // Garbage in every slot word, from a fixed pseudo-random stream.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..if cfg!(miri) { 3 } else { 200 } {
        for i in WRITE_SEQ..raw.words.len() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mix small values in, so that sequences near the reader's cursor show up too.
            let v = if i % 3 == 0 { x % 16 } else { x };
            raw.word(i).store(v, Relaxed);
        }
        let mut fresh = log.reader_at(x % 8, Some(1));
        fresh.set_stall_limit(1 + round % 3);
        for _ in 0..8 {
            if let Some(d) = fresh.recv() {
                assert!(d.payload.len() <= 16);
            }
        }
        let _ = log.write(2, b"y");
    }
}

#[test]
fn writers_and_reader_threads() {
    let n: u64 = if cfg!(miri) { 30 } else { 20_000 };
    let log = McastLog::new_heap(72, 16).unwrap();
    let mut r = log.reader(Some(9));
    let writers: Vec<_> = (1..=2u32)
        .map(|from| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut lost = 0;
                for i in 0..n {
                    if log.write(from, &payload(from, i)).is_err() {
                        lost += 1;
                    }
                    if i & 63 == 0 {
                        std::thread::yield_now();
                    }
                }
                lost
            })
        })
        .collect();
    let mut next = [0u64; 3];
    let mut delivered = 0u64;
    while r.cursor() < 2 * n {
        match r.recv() {
            Some(d) => {
                let i = check(&d);
                let from = d.from as usize;
                assert!(i >= next[from], "sender {from} went backwards: {i} after {}", next[from]);
                next[from] = i + 1;
                delivered += 1;
            }
            None => std::thread::yield_now(),
        }
    }
    let writer_lost: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(r.cursor(), 2 * n);
    assert_eq!(delivered + r.lost(), 2 * n, "every position delivered or counted lost");
    assert!(r.lost() >= writer_lost, "unpublished writes are counted lost by the reader");
}

/// The takeover hole: a writer presumed dead wakes up after its successor published the slot
/// and stores its stale words over the payload without touching the slot word. The seqlock
/// cannot see that; the check word must — the datagram is counted lost, never delivered torn.
#[test]
fn a_stale_writer_scribbling_after_takeover_is_never_delivered() {
    let (raw, log) = Raw::new(16, 4);
    // Sequence 0 claimed (busy) by a writer that then stalls: write_seq 1, slot word busy(0).
    raw.word(WRITE_SEQ).store(1, Relaxed);
    raw.word(slot(16, 0)).store(1, Relaxed);
    for i in 1..=8u64 {
        let _ = log.write(2, &i.to_le_bytes());
    }
    // Sequence 8 took slot 0 over (two laps past the stalled writer) and published it.
    let mut r = log.reader_at(8, None);
    let clean = r.recv().map(|d| (d.seq, d.payload.to_vec()));
    assert_eq!(clean, Some((8, 8u64.to_le_bytes().to_vec())), "the successor's datagram as written");
    // The stalled writer wakes and scribbles its own bytes over the payload.
    raw.word(slot(16, 0) + 3).store(u64::from_le_bytes(*b"STALE!!!"), Relaxed);
    let mut r = log.reader_at(8, None);
    assert_eq!(r.recv().map(|d| d.seq), None, "torn content must not be delivered");
    assert_eq!(r.lost(), 1);
}

/// The payload is copied and checked in groups of four words: every length from 0 to past three
/// groups comes back exactly (whole groups, a partial group, a partial last word), and any word
/// changed behind the seqlock's back — in each of the four chains, in whole groups and in a
/// partial last group, at ten lengths — or two words swapped between chains, is caught by the
/// check and counted lost.
#[test]
fn every_length_round_trips_and_every_word_is_checked() {
    let log = McastLog::new_heap(104, 4).unwrap();
    let mut r = log.reader(None);
    for len in 0..=104usize {
        let bytes: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(29) ^ len as u8).collect();
        let seq = log.write(5, &bytes).unwrap();
        assert_eq!(r.recv(), Some(Datagram { seq, from: 5, payload: &bytes[..] }), "length {len}");
    }
    // A bit flipped in each word in turn, at lengths with whole groups only, a partial last
    // group (one to three words) and a partial last word; then, at 104 bytes (three whole
    // groups and one word), words 0 and 1 (chains 0 and 1) swapped.
    let (raw, log) = Raw::new(104, 4);
    for len in [1usize, 8, 12, 32, 40, 52, 60, 88, 100, 104] {
        let bytes: Vec<u8> = (0..len).map(|k| (k as u8).wrapping_mul(7) ^ 0x5a).collect();
        for tamper in 0..len.div_ceil(8) + usize::from(len == 104) {
            let seq = log.write(9, &bytes).unwrap();
            let base = slot(104, (seq % 4) as usize) + 3;
            if tamper < len.div_ceil(8) {
                raw.word(base + tamper).fetch_xor(1 << (tamper % 8), Relaxed);
            } else {
                let (a, b) = (raw.word(base).load(Relaxed), raw.word(base + 1).load(Relaxed));
                raw.word(base).store(b, Relaxed);
                raw.word(base + 1).store(a, Relaxed);
            }
            let mut r = log.reader_at(seq, None);
            assert_eq!(r.recv().map(|d| d.seq), None, "length {len}, word {tamper} changed: delivered");
            assert_eq!(r.lost(), 1);
        }
    }
}

/// A datagram written in parts (a send gather) is read back as their concatenation, its check
/// word valid, at every split of every length around the word groups' boundaries; parts
/// longer than a slot together are refused.
#[test]
fn a_datagram_written_in_parts_reads_back_whole() {
    let log = McastLog::new_heap(512, 8).unwrap();
    let mut r = log.reader(None);
    let bytes: Vec<u8> = (0..512u32).map(|i| (i * 13 + 5) as u8).collect();
    for len in [0usize, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 200, 511, 512] {
        for a in [0, 1, 5, 8, 40, len / 2, len] {
            for b in [0, 1, 3, 64, len] {
                if a > len || a + b > len {
                    continue;
                }
                let (head, rest) = bytes[..len].split_at(a);
                let (mid, tail) = rest.split_at(b);
                let seq = log.write_parts(4, &[head, mid, tail]).unwrap();
                let d = r.recv().unwrap();
                assert_eq!((d.seq, d.from, d.payload), (seq, 4, &bytes[..len]), "{len} split at {a}, {b}");
            }
        }
    }
    let half = &bytes[..257];
    assert_eq!(log.write_parts(4, &[half, half]), Err(WriteError::TooLarge));
}
