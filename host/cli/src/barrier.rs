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
//! generation as long as the rank's host waits for a completion (`runner.idle_spins` polls, at
//! least [`MIN_SPINS`]), then yield the CPU (a 2-core machine may run more pollers than
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

/// Polls before the barrier yields or sleeps, whatever `spins` the caller gives.
pub const MIN_SPINS: u32 = 64;

/// Word 0: ranks arrived in the current generation; word 1: the generation; word 2: ranks
/// asleep on the generation word (the last arriver makes the wake-up system call only for them).
const COUNT: u32 = 0;
const GENERATION: u32 = 1;
const SLEEPERS: u32 = 2;
const WORDS: u32 = 3;

/// A barrier for `n` participants, mapped.
pub struct Barrier {
    board: BellBoard,
    n: u32,
    /// Wake-up system calls this process made as the last arriver (tests).
    wakes: std::cell::Cell<u64>,
}

impl Barrier {
    /// Opens (or creates, zeroed) the barrier segment `name` for `n` participants.
    pub fn open(name: &str, n: u32) -> Result<Barrier, String> {
        if n == 0 {
            return Err("barrier of 0 participants".into());
        }
        let board =
            BellBoard::create_or_open_named(name, WORDS).map_err(|e| format!("barrier {name}: {e}"))?;
        Ok(Barrier { board, n, wakes: std::cell::Cell::new(0) })
    }

    /// Waits until all `n` participants have called `wait` for this generation; fails after
    /// `limit` (a participant died: nobody must hang).
    ///
    /// `progress` is called on every poll: as an MPI library's barrier runs its progress engine,
    /// so that a broadcast this rank completed early (a root) still moves while it waits here —
    /// in thread mode nobody else runs its engine then.
    ///
    /// It polls at least `spins` times (and never fewer than [`MIN_SPINS`]) before it yields or
    /// sleeps: a rank waits here as its host waits for a completion (`runner.idle_spins`), so
    /// that a rank whose partner arrives within a round trip is still on its CPU and leaves
    /// with it. (At 64 polls a rank beside a busy process slept here, and the partner's timed
    /// call then waited for its wake-up: issue 40, item 4.)
    pub fn wait(&self, limit: Duration, spins: u32, mut progress: impl FnMut()) -> Result<(), String> {
        let (Some(count), Some(generation), Some(sleepers)) =
            (self.board.bell(COUNT), self.board.bell(GENERATION), self.board.bell(SLEEPERS))
        else {
            return Err("barrier segment too small".into());
        };
        // Read before arriving: the generation cannot move again until this rank arrives.
        let gen = generation.load(Ordering::Acquire);
        if count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // Last one in: reset for the next round, then release everyone (Release publishes
            // the reset before anyone can see the new generation and arrive again; SeqCst
            // orders the bump before the sleepers' count is read, against a sleeper's count
            // before its re-read of the generation: one of the two sees the other).
            count.store(0, Ordering::Relaxed);
            generation.fetch_add(1, Ordering::SeqCst);
            // The wake-up is a system call (~1 µs here) on the way into the last arriver's timed
            // call: made only when someone sleeps (issue 40, item 4).
            if sleepers.load(Ordering::SeqCst) > 0 {
                ringcast_ring::doorbell::wake(generation);
                self.wakes.set(self.wakes.get() + 1);
            }
            return Ok(());
        }
        let start = Instant::now();
        let mut polls = 0u32;
        while generation.load(Ordering::Acquire) == gen {
            progress();
            polls = polls.wrapping_add(1);
            // The limit is checked in both stages: spins set near `u32::MAX` never reach the
            // sleeping stage's check.
            if polls.is_multiple_of(1024) && start.elapsed() > limit {
                return Err(format!("barrier: not every rank arrived within {limit:?}"));
            }
            if polls < spins.max(MIN_SPINS) {
                std::hint::spin_loop();
            } else {
                if !(yields_cheap() && timed_yield()) {
                    sleepers.fetch_add(1, Ordering::SeqCst);
                    if generation.load(Ordering::SeqCst) == gen {
                        // Bounded: `progress` runs again, and the limit is checked, at least this often.
                        ringcast_ring::doorbell::wait(generation, gen, SLEEP_MAX);
                    }
                    sleepers.fetch_sub(1, Ordering::SeqCst);
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
    use std::sync::atomic::{AtomicU32, AtomicU64};
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
                        b.wait(Duration::from_secs(10), 0, || {}).unwrap();
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

    /// A rank spins `spins` polls before it yields or sleeps, however costly its yields: a
    /// partner arriving meanwhile finds nobody asleep and makes no wake-up system call (with
    /// the 64 polls of before, the waiter slept and the partner's way into its timed call went
    /// through a wake-up); past them the waiter sleeps, and the last arriver wakes it.
    #[test]
    fn a_rank_spins_before_it_sleeps_and_only_sleepers_cost_a_wake_up() {
        let name = format!("ringcast-test-barrier-spins-{}", std::process::id());
        let seg = BarrierSegment { _barrier: Barrier::open(&name, 2).unwrap(), name: name.clone() };
        let wakes_with = |spins: u32, arrive_after: u64, rounds: u64| -> u64 {
            // The waiter's polls in the current round, under the round's number (high half).
            let polls = Arc::new(AtomicU64::new(0));
            let (n, p) = (name.clone(), polls.clone());
            let waiter = std::thread::spawn(move || {
                let b = Barrier::open(&n, 2).unwrap();
                for r in 0..rounds {
                    p.store(r << 32, Ordering::SeqCst);
                    // As behind a busy process: no yield, so past its spins it sleeps.
                    ringcast_offload::runner::idle::mark_yields_costly();
                    b.wait(Duration::from_secs(10), spins, || {
                        p.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
                }
            });
            let b = Barrier::open(&name, 2).unwrap();
            for r in 0..rounds {
                // Arrive last, once the waiter polled `arrive_after` times in this round.
                while polls.load(Ordering::SeqCst) < (r << 32) + arrive_after {
                    std::hint::spin_loop();
                }
                b.wait(Duration::from_secs(10), 0, || {}).unwrap();
            }
            waiter.join().unwrap();
            b.wakes.get()
        };
        // Still spinning when the partner arrives: no sleeper, no wake-up.
        assert_eq!(wakes_with(1_000_000, 2_000, 20), 0, "a spinning waiter was woken by a system call");
        // Past its spins (64 at least), asleep: woken (at least once in 20 rounds: a waiter
        // between its count and its sleep re-reads the generation and needs none).
        assert!(wakes_with(0, u64::from(MIN_SPINS) + 8, 20) > 0, "a sleeping waiter was never woken");
        drop(seg);
    }

    #[test]
    fn a_missing_participant_makes_the_wait_fail_not_hang() {
        let name = format!("ringcast-test-barrier-timeout-{}", std::process::id());
        let seg = BarrierSegment { _barrier: Barrier::open(&name, 2).unwrap(), name: name.clone() };
        let b = Barrier::open(&name, 2).unwrap();
        assert!(b.wait(Duration::from_millis(50), 0, || {}).is_err());
        drop(seg);
    }
}
