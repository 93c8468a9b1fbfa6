//! Sleeping on shared-memory words: the futex calls behind the rings' doorbell (and the `shm`
//! fabric's per-member bell), for pollers that share cores with the work they wait for.
//!
//! The words live in `MAP_SHARED` memory mapped by several processes, so the futexes are
//! *shared* (no `FUTEX_PRIVATE_FLAG`): the kernel keys them by the page, not by the address.
//! Every call is bounded by a timeout, and every error (interrupted, value already changed,
//! unsupported) simply returns: a caller re-checks its rings after any return, so a spurious
//! wake-up costs one pass and a missed one at most the timeout.
//!
//! Under loom and Miri the system calls are left out (`wake` does nothing, the waits return at
//! once): loom checks the flag protocol around them (`tests/loom.rs`), not the kernel.
use crate::primitive::AtomicU32;
use core::time::Duration;

/// Most words [`wait_any`] sleeps on at once (the kernel's `futex_waitv` limit).
pub const MAX_WAIT_ANY: usize = 128;

#[cfg(not(any(loom, miri)))]
fn timespec(d: Duration) -> rustix::thread::futex::Timespec {
    rustix::thread::futex::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// Wakes every sleeper on `word`.
pub fn wake(word: &AtomicU32) {
    #[cfg(not(any(loom, miri)))]
    {
        let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), u32::MAX);
    }
    #[cfg(any(loom, miri))]
    let _ = word;
}

/// Sleeps while `word == expected`, at most `timeout`.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    #[cfg(not(any(loom, miri)))]
    {
        let ts = timespec(timeout);
        let _ = rustix::thread::futex::wait(word, rustix::thread::futex::Flags::empty(), expected, Some(&ts));
    }
    #[cfg(any(loom, miri))]
    let _ = (word, expected, timeout);
}

/// Sleeps until any `(word, expected)` pair differs or is woken, at most `timeout`. More than
/// [`MAX_WAIT_ANY`] words, or a kernel without `futex_waitv` (before Linux 5.16): a plain
/// sleep of `timeout` capped at 50 µs, so nothing waits long unnoticed.
#[cfg(not(loom))]
pub fn wait_any(words: &[(&core::sync::atomic::AtomicU32, u32)], timeout: Duration) {
    let mut addrs = [(core::ptr::null::<core::sync::atomic::AtomicU32>(), 0u32); MAX_WAIT_ANY];
    // More than one wait can cover: none, and so the plain sleep.
    let n = if words.len() <= MAX_WAIT_ANY { words.len() } else { 0 };
    for (a, &(word, expected)) in addrs.iter_mut().zip(&words[..n]) {
        *a = (word, expected);
    }
    wait_any_addrs(&addrs[..n], timeout);
}

/// [`wait_any`] on words given by address, which the caller need not keep borrowed: a
/// polling thread arms its doorbells under its loop's lock and sleeps without it, while
/// another thread may drive the loop and free what a word lives in. Nothing here reads
/// through the addresses — only the kernel does, which fails the wait (`EFAULT`) on an
/// address no longer mapped, or sleeps until a wake, another word's change or `timeout` on
/// one unmapped meanwhile (or mapped again by something else): a stale word costs at most
/// one `timeout`, never memory safety. No words: the plain sleep.
#[cfg(not(loom))]
pub fn wait_any_addrs(words: &[(*const core::sync::atomic::AtomicU32, u32)], timeout: Duration) {
    #[cfg(not(miri))]
    {
        use rustix::thread::futex::{waitv, Wait, WaitFlags, WaitPtr, WaitvFlags};
        if !words.is_empty() && words.len() <= MAX_WAIT_ANY {
            let mut waits = [Wait::new(); MAX_WAIT_ANY];
            for (w, (word, expected)) in waits.iter_mut().zip(words) {
                w.val = u64::from(*expected);
                // The kernel reads the word through this address (see the function's doc).
                w.uaddr = WaitPtr::new(word.cast_mut().cast());
                w.flags = WaitFlags::SIZE_U32;
            }
            let ts = rustix::time::Timespec {
                tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            // futex_waitv takes an absolute deadline on the given clock.
            let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let mut deadline =
                rustix::time::Timespec { tv_sec: now.tv_sec + ts.tv_sec, tv_nsec: now.tv_nsec + ts.tv_nsec };
            if deadline.tv_nsec >= 1_000_000_000 {
                deadline.tv_sec += 1;
                deadline.tv_nsec -= 1_000_000_000;
            }
            match waitv(
                &waits[..words.len()],
                WaitvFlags::empty(),
                Some(&deadline),
                rustix::time::ClockId::Monotonic,
            ) {
                Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::INVAL) => {}
                _ => return,
            }
        }
        std::thread::sleep(timeout.min(Duration::from_micros(50)));
    }
    #[cfg(miri)]
    let _ = (words, timeout);
}
