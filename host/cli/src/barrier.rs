//! A barrier across the processes of one `ringcast bench` run, for the benchmark harness only
//! (`ringcast bench --barrier`, osu_bcast's method: an untimed barrier before each timed
//! broadcast). Not the engine's `BARRIER`, which would put the engines' own round trips
//! between the timed calls: this one lives in shared memory on the machine, so it only works
//! for the local emulated cluster.
//!
//! The launcher creates a named segment in `/dev/shm` ([`BarrierSegment::create`]), passes its
//! name to the ranks in [`BARRIER_ENV`], and removes it when the run is over (drop). The name is
//! `ringcast-run-<launcher pid>-barrier`, so if the launcher is killed before removing it, the
//! next run reclaims it like the job's other segments of a dead launcher.
//!
//! The two words are the `bell` words of a two-member [`BellBoard`] (one per 128-byte line, so
//! the arrival counter and the generation never share a cache line): the workspace's safe
//! accessor of atomic words in a named segment, so this module needs no `unsafe`. Centralised
//! counter barrier: a rank reads the generation, then counts itself in; the last of `n` resets
//! the counter, bumps the generation and wakes sleepers on it; the others spin on the
//! generation, yielding the CPU after a few polls (a 2-core machine runs more pollers than
//! cores) — while a yield is cheap (`runner::idle`): behind an unrelated busy process a yield
//! costs its whole slice, and a rank late out of the barrier makes the others wait for it in
//! their timed call, so there the rank sleeps on the generation word instead (the last arriver
//! wakes it; woken, it is scheduled ahead of the busy process).
use ringcast_offload::runner::idle::{timed_yield, yields_cheap};
use ringcast_ring::{BellBoard, ShmSegment};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The environment variable naming the barrier segment for `ringcast bench-rank --barrier`.
pub const BARRIER_ENV: &str = "RINGCAST_BENCH_BARRIER";

/// Longest sleep on the generation word before polling (and progressing the engine) again.
const SLEEP_MAX: Duration = Duration::from_micros(200);

/// Word 0: ranks arrived in the current generation; word 1: the generation.
const COUNT: u32 = 0;
const GENERATION: u32 = 1;

/// A barrier for `n` participants, mapped.
pub struct Barrier {
    board: BellBoard,
    n: u32,
}

impl Barrier {
    /// Opens (or creates, zeroed) the barrier segment `name` for `n` participants.
    pub fn open(name: &str, n: u32) -> Result<Barrier, String> {
        if n == 0 {
            return Err("barrier of 0 participants".into());
        }
        let board = BellBoard::create_or_open_named(name, 2).map_err(|e| format!("barrier {name}: {e}"))?;
        Ok(Barrier { board, n })
    }

    /// Waits until all `n` participants have called `wait` for this generation; fails after
    /// `limit` (a participant died: nobody must hang).
    ///
    /// `progress` is called on every poll: as an MPI library's barrier runs its progress engine,
    /// so that a broadcast this rank completed early (a root) still moves while it waits here —
    /// in thread mode nobody else runs its engine then.
    pub fn wait(&self, limit: Duration, mut progress: impl FnMut()) -> Result<(), String> {
        let (Some(count), Some(generation)) = (self.board.bell(COUNT), self.board.bell(GENERATION)) else {
            return Err("barrier segment too small".into());
        };
        // Read before arriving: the generation cannot move again until this rank arrives.
        let gen = generation.load(Ordering::Acquire);
        if count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // Last one in: reset for the next round, then release everyone (Release publishes
            // the reset before anyone can see the new generation and arrive again).
            count.store(0, Ordering::Relaxed);
            generation.fetch_add(1, Ordering::Release);
            ringcast_ring::doorbell::wake(generation);
            return Ok(());
        }
        let start = Instant::now();
        let mut polls = 0u32;
        while generation.load(Ordering::Acquire) == gen {
            progress();
            polls = polls.wrapping_add(1);
            if polls < 64 {
                std::hint::spin_loop();
            } else {
                if !(yields_cheap() && timed_yield()) {
                    // Bounded: `progress` runs again, and the limit is checked, at least this often.
                    ringcast_ring::doorbell::wait(generation, gen, SLEEP_MAX);
                }
                if polls.is_multiple_of(1024) && start.elapsed() > limit {
                    return Err(format!("barrier: not every rank arrived within {limit:?}"));
                }
            }
        }
        Ok(())
    }
}

/// The launcher's barrier segment: created fresh, removed on drop.
pub struct BarrierSegment {
    /// The segment's name (what [`BARRIER_ENV`] carries).
    pub name: String,
    _barrier: Barrier,
}

impl BarrierSegment {
    /// Creates this launcher's barrier segment for `n` participants (a leftover of the same
    /// name, from an earlier run of this process, is replaced).
    pub fn create(n: u32) -> Result<BarrierSegment, String> {
        let name = format!("ringcast-run-{}-barrier", std::process::id());
        let _ = ShmSegment::unlink_named(&name);
        Ok(BarrierSegment { _barrier: Barrier::open(&name, n)?, name })
    }
}

impl Drop for BarrierSegment {
    fn drop(&mut self) {
        let _ = ShmSegment::unlink_named(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[test]
    fn no_thread_passes_the_barrier_before_all_arrived() {
        const THREADS: u32 = 4;
        const ROUNDS: u32 = 2000;
        let name = format!("ringcast-test-barrier-{}", std::process::id());
        let seg = BarrierSegment { _barrier: Barrier::open(&name, THREADS).unwrap(), name: name.clone() };
        // Per round, how many threads reached it: counted before the barrier, checked after.
        let arrived: Arc<Vec<AtomicU32>> = Arc::new((0..ROUNDS).map(|_| AtomicU32::new(0)).collect());
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (name, arrived) = (name.clone(), arrived.clone());
                std::thread::spawn(move || {
                    // Each thread maps the segment itself, as the ranks' processes do.
                    let b = Barrier::open(&name, THREADS).unwrap();
                    for r in 0..ROUNDS {
                        arrived[r as usize].fetch_add(1, Ordering::SeqCst);
                        b.wait(Duration::from_secs(10), || {}).unwrap();
                        let seen = arrived[r as usize].load(Ordering::SeqCst);
                        assert_eq!(seen, THREADS, "thread {t} passed round {r} before every thread arrived");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(seg);
        assert!(!std::path::Path::new("/dev/shm").join(&name).exists(), "segment removed on drop");
    }

    #[test]
    fn a_missing_participant_makes_the_wait_fail_not_hang() {
        let name = format!("ringcast-test-barrier-timeout-{}", std::process::id());
        let seg = BarrierSegment { _barrier: Barrier::open(&name, 2).unwrap(), name: name.clone() };
        let b = Barrier::open(&name, 2).unwrap();
        assert!(b.wait(Duration::from_millis(50), || {}).is_err());
        drop(seg);
    }
}
