//! The bell board: one doorbell per member of a `shm` fabric job, in a named shared segment, so
//! an engine that has nothing to do can sleep until a peer sends it a frame or multicasts to
//! its group (the emulation NIC's interrupt line).
//!
//! Layout: `members` lines of 128 bytes (the cache-line unit), line `i` holding member `i`'s
//! `bell: u32` at offset 0 and `waiting: u32` at offset 4. The protocol is the rings' (see
//! `ringcast_abi::ring`): the sleeper sets `waiting`, fences, reads `bell`, re-checks its
//! inputs and sleeps on `bell` only if nothing arrived; a sender, after publishing a frame,
//! fences, and if the receiver is waiting bumps its `bell` and wakes it.
//!
//! A peer can only scribble on bell words: the worst it can do is wake a member early or not at
//! all (every sleep is bounded by a timeout), never make this module read outside the segment.
use crate::primitive::{fence, Ordering};
use crate::ShmSegment;
use core::sync::atomic::AtomicU32;
use std::io;
use std::ptr::NonNull;

/// Bytes per member line.
const LINE: usize = ringcast_abi::CACHE_LINE;

/// The bells of a job, mapped.
pub struct BellBoard {
    seg: ShmSegment,
    members: usize,
}

impl BellBoard {
    /// Opens the board `name` of `members` bells, creating it (zeroed) if it does not exist; an
    /// existing board smaller than `members` lines is refused.
    pub fn create_or_open_named(name: &str, members: u32) -> io::Result<BellBoard> {
        let members = members as usize;
        let len =
            members.checked_mul(LINE).filter(|&l| l > 0).ok_or_else(|| io::Error::other("no members"))?;
        // A fresh segment is zero-filled by the kernel: every bell 0, nobody waiting.
        let (seg, _) = ShmSegment::create_or_open_named(name, len, |_| Ok(()))?;
        if seg.len() < len || !(seg.as_non_null().as_ptr() as usize).is_multiple_of(LINE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bell board {name}: {} bytes for {members} members", seg.len()),
            ));
        }
        Ok(BellBoard { seg, members })
    }

    /// Member `i`'s word at `offset` in its line; `None` outside the board.
    fn word(&self, i: u32, offset: usize) -> Option<&AtomicU32> {
        let i = i as usize;
        if i >= self.members {
            return None;
        }
        let at = i * LINE + offset;
        // SAFETY: `at + 4 <= members * LINE <= seg.len()` (checked at open), so the pointer is
        // inside the mapping, which lives as long as `self`; it is 4-aligned (the mapping is
        // page-aligned, `LINE` and `offset` multiples of 4). Every process accesses these words
        // only atomically (this module), so a shared `&AtomicU32` is sound; any bit pattern is a
        // valid `u32`.
        Some(unsafe {
            &*NonNull::new_unchecked(self.seg.as_non_null().as_ptr().add(at)).cast::<AtomicU32>().as_ptr()
        })
    }

    /// Member `me` is about to sleep: returns the value to sleep on with [`BellBoard::bell`].
    /// The caller re-checks its inputs after this and before sleeping.
    pub fn arm(&self, me: u32) -> Option<u32> {
        let (bell, waiting) = (self.word(me, 0)?, self.word(me, 4)?);
        waiting.store(1, Ordering::Relaxed);
        // SeqCst fence: pairs with the sender's in `ring` (the rings' lost-wakeup argument).
        fence(Ordering::SeqCst);
        // Acquire: a bump we read brings the frames published before it (see the rings' `arm`).
        Some(bell.load(Ordering::Acquire))
    }

    /// Member `me` is awake again.
    pub fn disarm(&self, me: u32) {
        if let Some(w) = self.word(me, 4) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Member `me`'s bell word (what it sleeps on).
    pub fn bell(&self, me: u32) -> Option<&AtomicU32> {
        self.word(me, 0)
    }

    /// After publishing a frame for member `to`: wakes it if it sleeps. True if it rang.
    pub fn ring(&self, to: u32) -> bool {
        let (Some(bell), Some(waiting)) = (self.word(to, 0), self.word(to, 4)) else { return false };
        fence(Ordering::SeqCst);
        if waiting.load(Ordering::Relaxed) == 0 {
            return false;
        }
        bell.fetch_add(1, Ordering::SeqCst);
        crate::doorbell::wake(bell);
        true
    }

    /// After a multicast: wakes every sleeping member but `me`.
    pub fn ring_all_but(&self, me: u32) {
        for m in (0..self.members as u32).filter(|&m| m != me) {
            self.ring(m);
        }
    }
}

// Named segments under /dev/shm are files: Miri's isolation has no `open`. The bell protocol's
// orderings are the rings' (loom-checked in tests/loom.rs); these tests run natively.
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    fn name(tag: &str) -> String {
        format!("ringcast-test-bells-{}-{tag}", std::process::id())
    }

    #[test]
    fn a_sender_rings_only_a_member_that_is_waiting() {
        let n = name("ring");
        let a = BellBoard::create_or_open_named(&n, 3).unwrap();
        let b = BellBoard::create_or_open_named(&n, 3).unwrap();
        assert!(!b.ring(1), "nobody waits: no ring");
        let seen = a.arm(1).unwrap();
        assert!(b.ring(1));
        assert_ne!(
            a.bell(1).unwrap().load(Ordering::SeqCst),
            seen,
            "the bell moved: a sleep returns at once"
        );
        a.disarm(1);
        assert!(!b.ring(1));
        assert!(!b.ring(7), "outside the board");
        assert_eq!(a.arm(3), None);
        let _ = ShmSegment::unlink_named(&n);
    }

    #[test]
    fn a_sleeper_is_woken_by_a_ring_from_another_thread() {
        let n = name("wake");
        let a = BellBoard::create_or_open_named(&n, 2).unwrap();
        let b = BellBoard::create_or_open_named(&n, 2).unwrap();
        let seen = a.arm(0).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            b.ring(0)
        });
        let start = std::time::Instant::now();
        crate::doorbell::wait(a.bell(0).unwrap(), seen, std::time::Duration::from_secs(10));
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "woken, not timed out");
        assert!(t.join().unwrap());
        a.disarm(0);
        let _ = ShmSegment::unlink_named(&n);
    }

    #[test]
    fn a_smaller_existing_board_is_refused() {
        let n = name("small");
        let _a = BellBoard::create_or_open_named(&n, 1).unwrap();
        assert!(BellBoard::create_or_open_named(&n, 4).is_err());
        let _ = ShmSegment::unlink_named(&n);
    }
}
