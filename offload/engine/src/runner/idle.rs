//! What a polling loop does when a pass found no work: spin, then yield, then sleep.
//!
//! A dedicated core (DPU ARM core, isolated host core) wants pure spinning. A machine with fewer
//! cores than pollers (this 2-core CI box runs an engine and its hosts) must give the CPU away,
//! or the host the engine waits for never runs: `spin-yield` spins `idle_spins` passes, yields
//! for `idle_yields` more, then sleeps — on its doorbells where the caller can
//! ([`Idle::sleeping`]), else `idle_sleep_us` per pass — until work appears.
//!
//! **A yield is cheap only among our own pollers.** `sched_yield` hands the CPU to whatever
//! else is runnable on it: another poller of the job, which runs a pass and yields back within
//! microseconds — or an unrelated busy process, which the kernel (EEVDF) then lets run its
//! whole slice, milliseconds, before the yielder runs again (measured here with a busy loop on
//! the CPU: a yield took 3.2 ms at the median). Inside a timed call that is the 5 → 950 µs swing
//! of a 2-node 2 B broadcast with one core held by a busy process. So every yield is timed: one
//! that kept the thread off its CPU longer than [`COSTLY_YIELD`] marks yielding as costly *for
//! this thread* for a back-off — [`YIELD_BACKOFF_MIN`], doubled by each costly yield that ends
//! one, up to [`YIELD_BACKOFF`] — during which its waits skip the yielding stage and go from
//! spinning straight to sleeping on their doorbell — a sleeper the work's producer wakes is
//! scheduled ahead of the busy process (wake-up preemption), a yielder is not. Among our own
//! pollers yields stay as cheap as before and nothing changes.
use crate::config::{Config, PollMode};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// A `sched_yield` that kept the thread off its CPU longer than this ran behind a task other
/// than a poller taking its turn (which yields back within a few microseconds).
pub const COSTLY_YIELD: Duration = Duration::from_micros(200);

/// The longest a thread does not yield again after a costly yield (it spins, then sleeps):
/// long against a wait, short enough that a busy process that went away is noticed soon.
pub const YIELD_BACKOFF: Duration = Duration::from_millis(50);

/// The first back-off after a cheap yield: each costly yield that ends a back-off doubles the
/// next, up to [`YIELD_BACKOFF`]; a cheap one starts again from here. A one-off costly yield —
/// a job's processes starting, page faults, another process's burst — then costs a few
/// milliseconds of sleeping waits, not 50: with 50 at once, the first 50–100 calls of an
/// `allreduce` of 64 KiB on 2 nodes × 2 ranks (daemon mode, 2 cores) took 310 µs each where
/// the later ones took 65 µs (docs/performance.md, "A busy neighbour's back-off, doubled").
/// A busy process that stays is met by 2, 4, … 32 ms back-offs before the 50 ms ones.
pub const YIELD_BACKOFF_MIN: Duration = Duration::from_millis(2);

thread_local! {
    /// Until when this thread's yields are costly (see the module doc).
    static COSTLY_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The back-off the next costly yield starts ([`YIELD_BACKOFF_MIN`] to [`YIELD_BACKOFF`]).
    static NEXT_BACKOFF: Cell<Duration> = const { Cell::new(YIELD_BACKOFF_MIN) };
}

/// Records a timed yield's verdict at `now`: a costly one starts a back-off of the current
/// length and doubles the next; a cheap one resets it to [`YIELD_BACKOFF_MIN`].
fn note_yield(cheap: bool, now: Instant) {
    NEXT_BACKOFF.with(|b| {
        if cheap {
            b.set(YIELD_BACKOFF_MIN);
        } else {
            let w = b.get();
            COSTLY_UNTIL.with(|c| c.set(Some(now + w)));
            b.set((w * 2).min(YIELD_BACKOFF));
        }
    });
}

/// Whether yielding is cheap on this thread now (no costly yield in the last
/// [`YIELD_BACKOFF`]).
pub fn yields_cheap() -> bool {
    COSTLY_UNTIL.with(|c| c.get().is_none_or(|until| Instant::now() >= until))
}

/// Marks yielding costly on this thread for [`YIELD_BACKOFF`], as a costly [`timed_yield`] does:
/// for a caller that learnt it otherwise (and tests of callers' sleeping stage).
pub fn mark_yields_costly() {
    COSTLY_UNTIL.with(|c| c.set(Some(Instant::now() + YIELD_BACKOFF)));
}

/// `sched_yield`, timed: a costly one marks yielding costly on this thread (see the module
/// doc). Returns whether it was cheap.
pub fn timed_yield() -> bool {
    let start = Instant::now();
    std::thread::yield_now();
    let now = Instant::now();
    let cheap = now.duration_since(start) < COSTLY_YIELD;
    note_yield(cheap, now);
    cheap
}

/// Idle back-off state of one loop.
#[derive(Debug)]
pub struct Idle {
    mode: PollMode,
    spins: u32,
    yields: u32,
    sleep: Duration,
    empty: u32,
}

impl Idle {
    /// Back-off per `config` (`Auto` resolved for this machine).
    pub fn new(config: &Config) -> Self {
        Idle {
            mode: config.runner.poll_mode.resolve(),
            spins: config.runner.idle_spins,
            yields: config.runner.idle_yields,
            sleep: Duration::from_micros(config.runner.idle_sleep_us as u64),
            empty: 0,
        }
    }

    /// The mode in force.
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// True once the back-off has reached its sleeping stage: after the yields, or right after
    /// the spins while yielding is costly on this thread.
    pub fn sleeping(&self) -> bool {
        self.mode == PollMode::SpinYield
            && (self.empty >= self.spins.saturating_add(self.yields)
                || (self.empty >= self.spins && !yields_cheap()))
    }

    /// A pass found work.
    pub fn busy(&mut self) {
        self.empty = 0;
    }

    /// A pass found nothing: back off one step. Returns the step taken.
    ///
    /// The stage is the one the caller saw before this call: a caller that parks on its
    /// doorbells checked [`Idle::sleeping`] and parked if it could, so a call in the sleeping
    /// stage comes from one that could not, and naps. The call that crosses into the sleeping
    /// stage never naps — the caller parks at its next check, and the producer's doorbell ends
    /// that sleep at once, where a nap held the loop's next work for `idle_sleep_us` plus the
    /// kernel's timer slack (issue 40: a nap after every busy pass of a daemon whose yields had
    /// turned costly). While yielding is costly, the yielding stage spins instead (see the
    /// module doc).
    pub fn idle(&mut self) -> Step {
        let step = match self.mode {
            PollMode::SpinYield if self.sleeping() => Step::Nap,
            PollMode::SpinYield if self.empty >= self.spins && yields_cheap() => Step::Yield,
            _ => Step::Spin,
        };
        self.empty = self.empty.saturating_add(1);
        match step {
            Step::Nap => std::thread::sleep(self.sleep),
            Step::Yield => {
                timed_yield();
            }
            Step::Spin => std::hint::spin_loop(),
        }
        step
    }
}

/// What one empty pass of [`Idle::idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A pause instruction.
    Spin,
    /// `sched_yield` (timed).
    Yield,
    /// A sleep of `idle_sleep_us`: the caller was in the sleeping stage and could not park.
    Nap,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread whose yield runs behind a busy task (here: a yield that is made to look long by
    /// the clock, simulated by marking) skips the yields of its later waits and sleeps after the
    /// spins; a fresh thread yields as before.
    #[test]
    fn a_costly_yield_sends_this_threads_waits_to_sleep_after_the_spins() {
        let config = Config::default().with(|c| {
            c.runner.poll_mode = PollMode::SpinYield;
            c.runner.idle_spins = 3;
            c.runner.idle_yields = 1000;
        });
        std::thread::spawn(move || {
            let mut idle = Idle::new(&config);
            for _ in 0..4 {
                idle.idle();
            }
            // The real yields above were costly if the machine was loaded (or the other test
            // of this module held the CPU): the rule is checked with yielding cheap.
            COSTLY_UNTIL.with(|c| c.set(None));
            assert!(!idle.sleeping(), "a fresh thread yields after the spins");
            COSTLY_UNTIL.with(|c| c.set(Some(Instant::now() + YIELD_BACKOFF)));
            assert!(!yields_cheap());
            assert!(idle.sleeping(), "past the spins, yielding costly: sleep");
            idle.busy();
            assert!(!idle.sleeping(), "spinning again after work");
            COSTLY_UNTIL.with(|c| c.set(Some(Instant::now())));
            assert!(yields_cheap(), "the back-off ends");
        })
        .join()
        .expect("thread");
    }

    /// A caller that parks on its doorbells once [`Idle::sleeping`] says so (the engine loop,
    /// a host waiting for a completion) is never put to a timed nap by the pass that crosses
    /// into the sleeping stage: it parks, and the producer's doorbell wakes it at once — a nap
    /// there cost the pass's next work `idle_sleep_us` plus the kernel's timer slack. Both
    /// ways in: the yields running out, and a costly yield after the spins.
    #[test]
    fn crossing_into_the_sleeping_stage_parks_a_parking_caller_without_a_nap() {
        for costly in [false, true] {
            let config = Config::default().with(|c| {
                c.runner.poll_mode = PollMode::SpinYield;
                c.runner.idle_spins = 2;
                c.runner.idle_yields = if costly { 1000 } else { 3 };
                c.runner.idle_sleep_us = 1;
            });
            std::thread::spawn(move || {
                let mut idle = Idle::new(&config);
                let mut steps = Vec::new();
                for _ in 0..100 {
                    // Real yields may be costly on a loaded machine: the state is set per case.
                    COSTLY_UNTIL.with(|c| c.set(costly.then(|| Instant::now() + YIELD_BACKOFF)));
                    if idle.sleeping() {
                        break; // the caller parks here
                    }
                    steps.push(idle.idle());
                }
                assert!(idle.sleeping(), "costly {costly}: the back-off reaches its sleeping stage");
                assert!(!steps.contains(&Step::Nap), "costly {costly}: napped before parking: {steps:?}");
                if costly {
                    assert!(!steps.contains(&Step::Yield), "yielding costly: no yield: {steps:?}");
                } else {
                    assert_eq!(steps.iter().filter(|&&s| s == Step::Yield).count(), 3, "{steps:?}");
                }
                // A caller that cannot park naps in the sleeping stage.
                assert_eq!(idle.idle(), Step::Nap);
            })
            .join()
            .expect("thread");
        }
    }

    /// A yield on a CPU held by a busy thread of this test is costly (the kernel lets the busy
    /// thread run its slice), and marks the yielder; skipped where the yield comes back at once
    /// anyway (the kernel put the busy thread elsewhere).
    #[test]
    fn a_yield_behind_a_busy_thread_on_the_same_cpu_is_found_costly() {
        use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
        let Ok(allowed) = sched_getaffinity(None) else { return };
        let Some(cpu) = (0..CpuSet::MAX_CPU).find(|&c| allowed.is_set(c)) else { return };
        let pin = move || {
            let mut set = CpuSet::new();
            set.set(cpu);
            sched_setaffinity(None, &set).is_ok()
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let busy = std::thread::spawn(move || {
            if pin() {
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        let yielder = std::thread::spawn(move || {
            if !pin() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
            // Some yields: the first may find the busy thread not yet on this CPU's queue.
            let costly = (0..50).any(|_| !timed_yield());
            Some((costly, yields_cheap()))
        });
        let seen = yielder.join().expect("yielder");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().expect("busy");
        match seen {
            Some((true, cheap)) => assert!(!cheap, "a costly yield marks the thread"),
            Some((false, _)) => println!("SKIP: no yield was costly (the scheduler ran them apart)"),
            None => println!("SKIP: cannot pin threads here"),
        }
    }

    /// A one-off costly yield backs off briefly; costly yields that keep coming double the
    /// back-off up to its longest; a cheap yield starts again from the shortest.
    #[test]
    fn the_back_off_doubles_while_yields_stay_costly_and_resets_on_a_cheap_one() {
        std::thread::spawn(|| {
            let t0 = Instant::now();
            let until = || COSTLY_UNTIL.with(Cell::get).expect("backing off");
            note_yield(false, t0);
            assert_eq!(until(), t0 + YIELD_BACKOFF_MIN, "a first costly yield: the shortest");
            let mut expect = YIELD_BACKOFF_MIN;
            for k in 1..8u32 {
                let at = t0 + Duration::from_millis(100 * u64::from(k));
                note_yield(false, at);
                expect = (expect * 2).min(YIELD_BACKOFF);
                assert_eq!(until(), at + expect, "costly yield {k} in a row");
            }
            assert_eq!(expect, YIELD_BACKOFF, "capped at the longest");
            let at = t0 + Duration::from_secs(1);
            note_yield(true, at);
            note_yield(false, at);
            assert_eq!(until(), at + YIELD_BACKOFF_MIN, "a cheap yield resets it");
        })
        .join()
        .expect("thread");
    }
}
