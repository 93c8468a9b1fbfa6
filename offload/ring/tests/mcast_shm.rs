//! Named shared-memory segments, named frame rings and the multicast log across real
//! processes: name validation, create/open/unlink, the create-or-open race, the per-process
//! single-producer claim, and a writer process killed mid-stream (after leaving a claimed,
//! never-published sequence behind) from which a reader in this process recovers.
//! Not under Miri (files and mmap are FFI) nor loom. Every test removes its segments.
#![cfg(all(not(miri), not(loom)))]

use ringcast_ring::{
    check_segment_name, frame_ring_consumer, frame_ring_producer, FrameSlot, McastLog, ShmSegment, SHM_DIR,
};
use std::time::{Duration, Instant};

const CHILD_LOG_ENV: &str = "RINGCAST_RING_TEST_CHILD_LOG";
/// Datagrams the child writes before leaving a dead claim behind.
const BEFORE_CLAIM: u64 = 500;

fn unique(tag: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("ringcast-ringtest-{tag}-{}-{n}", std::process::id())
}

/// Removes every segment starting with `prefix` when dropped (also on a failed assertion).
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for name in ShmSegment::list_named(&self.0).unwrap_or_default() {
            let _ = ShmSegment::unlink_named(&name);
        }
    }
}

fn payload(i: u64) -> Vec<u8> {
    let len = 8 + (i % 100) as usize;
    let mut v = i.to_le_bytes().to_vec();
    v.extend((8..len).map(|k| (i as u8) ^ (k as u8).wrapping_mul(3)));
    v
}

#[test]
fn segment_names_are_restricted() {
    for good in ["a", "ringcast-job-0-1", "x.y_z-9"] {
        assert!(check_segment_name(good).is_ok(), "{good}");
    }
    let long = "a".repeat(201);
    for bad in ["", ".", "..", ".hidden", "a/b", "/abs", "a..b", "a b", "nul\0", "é", long.as_str()] {
        assert!(check_segment_name(bad).is_err(), "{bad:?}");
        assert!(ShmSegment::create_named(bad, 64).is_err());
        assert!(ShmSegment::open_named(bad).is_err());
        assert!(ShmSegment::unlink_named(bad).is_err());
    }
}

/// A named segment (a ring, a multicast log) is allocated when it is mapped, not page by page
/// at its first writes: a fresh ring's page faults made a job's first ~1,000 small broadcasts
/// cost twice the later ones. Seen failing without `MAP_POPULATE` (0 blocks allocated).
#[test]
fn a_named_segment_is_allocated_when_mapped() {
    use std::os::unix::fs::MetadataExt;
    let name = unique("populated");
    let _c = Cleanup(name.clone());
    let len = 1 << 20;
    let _seg = ShmSegment::create_named(&name, len).unwrap();
    let blocks = std::fs::metadata(std::path::Path::new(SHM_DIR).join(&name)).unwrap().blocks();
    assert!(blocks * 512 >= len as u64, "{} of {len} bytes allocated at the mapping", blocks * 512);
}

#[test]
fn named_segment_create_open_unlink() {
    let name = unique("seg");
    let _c = Cleanup(name.clone());
    assert!(ShmSegment::create_named(&name, 0).is_err());
    let a = ShmSegment::create_named(&name, 8192).unwrap();
    assert!(std::path::Path::new(SHM_DIR).join(&name).exists());
    assert_eq!(
        ShmSegment::create_named(&name, 8192).err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AlreadyExists)
    );
    a.write_at(100, b"shared").unwrap();
    let b = ShmSegment::open_named(&name).unwrap();
    assert_eq!(b.len(), 8192);
    let mut got = [0u8; 6];
    b.read_at(100, &mut got).unwrap();
    assert_eq!(&got, b"shared");
    assert_eq!(ShmSegment::list_named(&name).unwrap(), std::slice::from_ref(&name));
    ShmSegment::unlink_named(&name).unwrap();
    assert_eq!(ShmSegment::open_named(&name).err().map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    // Mappings outlive the name.
    b.read_at(100, &mut got).unwrap();
    assert_eq!(&got, b"shared");
}

#[test]
fn create_or_open_race_has_one_winner() {
    let name = unique("race");
    let _c = Cleanup(name.clone());
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let name = name.clone();
            std::thread::spawn(move || {
                let (seg, created) = ShmSegment::create_or_open_named(&name, 4096, |s| {
                    s.write_at(0, &[t + 1; 8]).map_err(std::io::Error::other)
                })
                .unwrap();
                let mut b = [0u8; 8];
                seg.read_at(0, &mut b).unwrap();
                assert_ne!(b[0], 0, "an opener saw an uninitialised segment");
                (created, b[0])
            })
        })
        .collect();
    let results: Vec<(bool, u8)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.0).count(), 1, "{results:?}");
    assert!(results.windows(2).all(|w| w[0].1 == w[1].1), "all see the winner's init: {results:?}");
    // No temporaries left behind.
    assert_eq!(ShmSegment::list_named(&name).unwrap(), std::slice::from_ref(&name));
}

#[test]
fn named_frame_ring_roundtrip_and_claims() {
    let name = unique("ring");
    let _c = Cleanup(name.clone());
    assert!(frame_ring_producer(&name).is_err(), "the receiver creates the ring");
    let mut c = frame_ring_consumer(&name, 4).unwrap();
    assert!(frame_ring_consumer(&name, 4).is_err(), "one consumer per process");
    let mut p = frame_ring_producer(&name).unwrap();
    assert!(frame_ring_producer(&name).is_err(), "one producer per process");
    for i in 0..4u64 {
        assert!(p.try_push(FrameSlot::new(3, &payload(i)).unwrap()).is_ok());
    }
    assert!(p.try_push(FrameSlot::new(3, b"full").unwrap()).is_err());
    assert!(FrameSlot::new(3, &vec![0; ringcast_ring::FRAME_PAYLOAD + 1]).is_none());
    for i in 0..4u64 {
        let s = c.try_pop().unwrap().unwrap();
        assert_eq!((s.from, s.payload()), (3, Some(&payload(i)[..])));
    }
    // A bogus length is rejected by `payload`, not trusted.
    let mut bad = FrameSlot::new(3, b"x").unwrap();
    bad.len = u32::MAX;
    assert_eq!(bad.payload(), None);
    drop(p);
    // The claim is released with the producer, and a re-opened ring keeps its position.
    let mut p = frame_ring_producer(&name).unwrap();
    p.try_push(FrameSlot::new(3, b"again").unwrap()).unwrap();
    drop(c);
    let mut c = frame_ring_consumer(&name, 4).unwrap();
    assert_eq!(c.try_pop().unwrap().unwrap().payload(), Some(&b"again"[..]));
}

/// Child role of `log_writer_killed_mid_stream`: writes `BEFORE_CLAIM` datagrams, claims a
/// sequence and dies-without-publishing in effect (bumps `write_seq`, marks the slot busy),
/// then writes forever until killed.
#[test]
fn child_log_writer() {
    let Ok(name) = std::env::var(CHILD_LOG_ENV) else {
        return;
    };
    let log = McastLog::open_named(&name).unwrap();
    for i in 0..BEFORE_CLAIM {
        log.write(1, &payload(i)).unwrap();
    }
    // A writer that claimed a sequence and died mid-write: raw bytes, as a crash leaves them.
    let seg = ShmSegment::open_named(&name).unwrap();
    let mut ws = [0u8; 8];
    seg.read_at(128, &mut ws).unwrap();
    let claimed = u64::from_ne_bytes(ws);
    seg.write_at(128, &(claimed + 1).to_ne_bytes()).unwrap();
    let slot_words = 3 + log.max_payload() as u64 / 8;
    let slot = 256 + (claimed % log.slots()) * slot_words * 8;
    seg.write_at(slot, &(2 * claimed + 1).to_ne_bytes()).unwrap();
    // Keep streaming until the parent kills us (SIGKILL lands anywhere, maybe mid-write).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = BEFORE_CLAIM;
    while Instant::now() < deadline {
        let _ = log.write(1, &payload(i));
        i += 1;
        if i & 15 == 0 {
            std::thread::yield_now();
        }
    }
}

#[test]
fn log_writer_killed_mid_stream() {
    let name = unique("log");
    let _c = Cleanup(name.clone());
    let log = McastLog::create_or_open_named(&name, 128, 64).unwrap();
    let mut r = log.reader(Some(0));
    r.set_stall_limit(1000);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_log_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_LOG_ENV, &name)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut delivered = 0u64;
    let mut last: Option<u64> = None;
    let check = |d: ringcast_ring::Datagram<'_>, last: &mut Option<u64>| {
        let i = u64::from_le_bytes(d.payload[..8].try_into().unwrap());
        assert_eq!(d.payload, &payload(i)[..], "wrong bytes at seq {}", d.seq);
        assert!(last.is_none_or(|l| i > l), "out of order");
        *last = Some(i);
    };
    // Past the dead claim and well into the stream, then kill the writer mid-stream.
    while last.is_none_or(|l| l < BEFORE_CLAIM + 2000) {
        assert!(Instant::now() < deadline, "stuck at {:?}, lost {}", last, r.lost());
        match r.recv() {
            Some(d) => {
                if d.from == 1 {
                    check(d, &mut last);
                    delivered += 1;
                }
            }
            None => std::thread::yield_now(),
        }
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert!(r.lost() >= 1, "the dead claim is counted lost");
    // Drain what the dead writer left; whatever slot it died in must not block us.
    let mut drained = 0;
    while r.cursor() < log.write_seq() && drained < 1_000_000 {
        if let Some(d) = r.recv() {
            check(d, &mut last);
        }
        drained += 1;
    }
    // A new writer (this process) is read normally.
    let resume = log.write_seq();
    for k in 0..10u64 {
        let _ = log.write(2, &payload(k));
    }
    let mut fresh = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fresh.len() < 10 && Instant::now() < deadline {
        if let Some(d) = r.recv() {
            if d.from == 2 {
                assert!(d.seq >= resume);
                fresh.push(u64::from_le_bytes(d.payload[..8].try_into().unwrap()));
            }
        }
    }
    // A slot the killed writer left busy may cost one of them; the rest arrive in order.
    assert!(fresh.len() >= 9, "got {fresh:?}, lost {}", r.lost());
    assert!(fresh.windows(2).all(|w| w[0] < w[1]));
    // The reader may be lapped by the fast child (counted lost), but it kept receiving.
    assert!(delivered > 0);
}

/// Issue 13: a named segment is removed by `unlink_if_unused` only once nobody maps it (every
/// mapper holds a shared lock, dropped with the mapping); a name that is gone is not an error.
#[test]
fn unlink_if_unused_spares_a_mapped_segment() {
    let name = unique("unused");
    let _c = Cleanup(name.clone());
    let (a, created) = ShmSegment::create_or_open_named(&name, 4096, |_| Ok(())).unwrap();
    assert!(created);
    let (b, created) = ShmSegment::create_or_open_named(&name, 4096, |_| Ok(())).unwrap();
    assert!(!created);
    assert!(!ShmSegment::unlink_if_unused(&name).unwrap(), "mapped twice: kept");
    drop(a);
    assert!(!ShmSegment::unlink_if_unused(&name).unwrap(), "still mapped once: kept");
    assert_eq!(ShmSegment::list_named(&name).unwrap(), std::slice::from_ref(&name));
    drop(b);
    assert!(ShmSegment::unlink_if_unused(&name).unwrap(), "mapped by nobody: removed");
    assert!(ShmSegment::list_named(&name).unwrap().is_empty());
    assert!(!ShmSegment::unlink_if_unused(&name).unwrap(), "already gone");
    // A segment made again under the name is a new one, mapped, so kept.
    let (c, created) = ShmSegment::create_or_open_named(&name, 4096, |_| Ok(())).unwrap();
    assert!(created);
    assert!(!ShmSegment::unlink_if_unused(&name).unwrap());
    drop(c);
}
