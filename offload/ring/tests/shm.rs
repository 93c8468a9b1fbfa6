//! Shared-memory tests: segments, bounds-checked copies, a ring over two mappings of one memfd,
//! and a ring between this test process and a child process that inherits the memfd.
//! Not under Miri (memfd/mmap are FFI) nor loom.
#![cfg(all(not(miri), not(loom)))]

use ringcast_abi::{RingRole, SubmissionDescriptor};
use ringcast_ring::{copy_between, footprint, init, Consumer, OutOfBounds, Producer, ShmSegment};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_FD_ENV: &str = "RINGCAST_RING_TEST_CHILD_FD";
const CHILD_COUNT: u64 = 100_000;
const RING_CAP: u32 = 256;

fn second_mapping(seg: &ShmSegment) -> Arc<ShmSegment> {
    let fd = seg.fd().try_clone_to_owned().unwrap();
    Arc::new(ShmSegment::from_fd(fd).unwrap())
}

#[test]
fn segment_is_zeroed_and_bounds_checked() {
    let seg = ShmSegment::create("ring-test", 4096).unwrap();
    assert_eq!(seg.len(), 4096);
    assert_eq!(seg.as_non_null().as_ptr() as usize % 128, 0);
    let mut buf = [0xffu8; 64];
    seg.read_at(4032, &mut buf).unwrap();
    assert_eq!(buf, [0; 64]);
    assert_eq!(seg.read_at(4033, &mut buf), Err(OutOfBounds));
    assert_eq!(seg.read_at(u64::MAX, &mut buf), Err(OutOfBounds));
    assert_eq!(seg.write_at(4090, &[1; 7]), Err(OutOfBounds));
    assert_eq!(seg.fill(0, 4097, 1), Err(OutOfBounds));
    assert_eq!(seg.fill(u64::MAX, 2, 1), Err(OutOfBounds));
    seg.write_at(10, b"hello").unwrap();
    seg.fill(100, 3, 0xab).unwrap();
    // A second mapping sees the same bytes.
    let other = second_mapping(&seg);
    let mut got = [0u8; 5];
    other.read_at(10, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    let mut got = [0u8; 4];
    other.read_at(99, &mut got).unwrap();
    assert_eq!(got, [0, 0xab, 0xab, 0xab]);
    assert!(ShmSegment::create("empty", 0).is_err());
    assert!(ShmSegment::create("nul\0name", 64).is_err());
}

/// `with_bytes` lends the bytes where they lie (what a receiver's MAC reads a placed message
/// through), only inside the mapping: what another mapping of the memfd wrote is what it sees.
#[test]
fn bytes_are_lent_in_place_and_bounds_checked() {
    let seg = ShmSegment::create("lend", 4096).unwrap();
    let other = ShmSegment::from_fd(seg.fd().try_clone_to_owned().unwrap()).unwrap();
    other.write_at(4000, &[7; 96]).unwrap();
    let sum = seg.with_bytes(3990, 106, |b| {
        assert_eq!(b.len(), 106);
        assert_eq!(&b[..10], &[0; 10]);
        b.iter().map(|&x| u32::from(x)).sum::<u32>()
    });
    assert_eq!(sum, Ok(7 * 96));
    assert_eq!(seg.with_bytes(0, 0, |b| b.len()), Ok(0));
    assert_eq!(seg.with_bytes(4000, 97, |_| ()), Err(OutOfBounds));
    assert_eq!(seg.with_bytes(u64::MAX, 2, |_| ()), Err(OutOfBounds));
}

#[test]
fn from_fd_refuses_empty_file() {
    let fd = nix::sys::memfd::memfd_create(c"empty", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    assert!(ShmSegment::from_fd(fd).is_err());
}

#[test]
fn sealed_against_truncation() {
    let seg = ShmSegment::create("sealed", 8192).unwrap();
    assert!(nix::unistd::ftruncate(seg.fd(), 0).is_err(), "a peer must not be able to shrink it");
}

#[test]
fn copy_between_segments() {
    let a = ShmSegment::create("a", 4096).unwrap();
    let b = ShmSegment::create("b", 1024).unwrap();
    a.write_at(0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    copy_between(&a, 0, &b, 1000, 8).unwrap();
    let mut got = [0u8; 8];
    b.read_at(1000, &mut got).unwrap();
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(copy_between(&a, 0, &b, 1020, 8), Err(OutOfBounds));
    assert_eq!(copy_between(&a, 4090, &b, 0, 8), Err(OutOfBounds));
    assert_eq!(copy_between(&a, 0, &b, u64::MAX - 2, 8), Err(OutOfBounds));
    // Overlapping copy within one segment behaves like memmove.
    copy_between(&a, 0, &a, 2, 8).unwrap();
    let mut got = [0u8; 10];
    a.read_at(0, &mut got).unwrap();
    assert_eq!(got, [1, 2, 1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn ring_across_two_mappings() {
    let len = footprint::<SubmissionDescriptor>(64);
    let seg = Arc::new(ShmSegment::create("ring", len).unwrap());
    // SAFETY: fresh segment, not shared yet.
    unsafe { init::<SubmissionDescriptor>(seg.as_non_null(), seg.len(), RingRole::SUBMISSION, 64) }.unwrap();
    let peer = second_mapping(&seg);
    assert_ne!(peer.as_non_null(), seg.as_non_null(), "distinct mappings");
    // SAFETY: the mapping lives as long as the owner Arc; one producer, one consumer.
    let mut p = unsafe {
        Producer::<SubmissionDescriptor>::attach(
            seg.as_non_null(),
            seg.len(),
            RingRole::SUBMISSION,
            seg.clone(),
        )
    }
    .unwrap();
    // SAFETY: as above, on the second mapping.
    let mut c = unsafe {
        Consumer::<SubmissionDescriptor>::attach(
            peer.as_non_null(),
            peer.len(),
            RingRole::SUBMISSION,
            peer.clone(),
        )
    }
    .unwrap();
    let n = 10_000u64;
    let t = std::thread::spawn(move || {
        for i in 0..n {
            let mut d = SubmissionDescriptor { cookie: i, ..Default::default() };
            while let Err(back) = p.try_push(d) {
                d = back;
                std::thread::yield_now();
            }
        }
    });
    let mut expect = 0;
    let mut out = [SubmissionDescriptor::default(); 16];
    while expect < n {
        let k = c.pop_batch(&mut out).unwrap();
        for d in &out[..k] {
            assert_eq!(d.cookie, expect);
            expect += 1;
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
    t.join().unwrap();
    assert_eq!(c.len(), Ok(0));
}

/// Runs as the producer in a child process when `CHILD_FD_ENV` is set (spawned by
/// `ring_across_processes`); otherwise there is nothing to do.
#[test]
fn child_producer() {
    let Ok(fd) = std::env::var(CHILD_FD_ENV) else {
        return;
    };
    let raw: i32 = fd.parse().expect("fd number");
    // SAFETY: the parent passed us this inherited descriptor and nothing else in this process
    // owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let seg = Arc::new(ShmSegment::from_fd(fd).unwrap());
    // SAFETY: the mapping lives as long as the owner Arc; the parent is the only consumer.
    let mut p =
        unsafe { Producer::<u64>::attach(seg.as_non_null(), seg.len(), RingRole::COMPLETION, seg.clone()) }
            .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = 0u64;
    let mut batch = [0u64; 8];
    while next < CHILD_COUNT {
        let k = (CHILD_COUNT - next).min(8) as usize;
        for (j, b) in batch[..k].iter_mut().enumerate() {
            *b = next + j as u64;
        }
        let pushed = p.push_batch(&batch[..k]);
        next += pushed as u64;
        if pushed == 0 {
            assert!(Instant::now() < deadline, "parent stopped consuming");
            std::thread::yield_now();
        }
    }
}

#[test]
fn ring_across_processes() {
    let len = footprint::<u64>(RING_CAP);
    let seg = Arc::new(ShmSegment::create("xproc", len).unwrap());
    // SAFETY: fresh segment, not shared yet.
    unsafe { init::<u64>(seg.as_non_null(), seg.len(), RingRole::COMPLETION, RING_CAP) }.unwrap();
    // SAFETY: the mapping lives as long as the owner Arc; the child is the only producer.
    let mut c =
        unsafe { Consumer::<u64>::attach(seg.as_non_null(), seg.len(), RingRole::COMPLETION, seg.clone()) }
            .unwrap();
    // An inheritable duplicate of the memfd for the child.
    let inherit = seg.fd().try_clone_to_owned().unwrap();
    nix::fcntl::fcntl(inherit.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_producer", "--nocapture", "--test-threads=1"])
        .env(CHILD_FD_ENV, inherit.as_raw_fd().to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(inherit);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut expect = 0u64;
    let mut out = [0u64; 32];
    while expect < CHILD_COUNT {
        let k = c.pop_batch(&mut out).unwrap();
        for v in &out[..k] {
            assert_eq!(*v, expect, "out of order or lost across processes");
            expect += 1;
        }
        if k == 0 {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(c.len().unwrap() > 0, "child exited ({status}) after {expect} items");
            }
            assert!(Instant::now() < deadline, "timed out at {expect}");
            std::thread::yield_now();
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    assert_eq!(c.len(), Ok(0));
}
