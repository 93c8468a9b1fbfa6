//! Runner (a): the engine as a pinned polling thread inside the host process (emulation mode).
//!
//! The thread runs the same [`EngineLoop`] as the daemon, listening on a private name
//! (`thread-<pid>-<n>`), so the host library attaches to it exactly as it attaches to a daemon —
//! same rings, same control messages, same code path. Other processes could attach too, which is
//! how one engine serves a whole emulated node.
//!
//! **One poller per process.** A host thread blocked in a wait would otherwise spin beside the
//! engine thread: two pollers of one process, four on two cores with two processes, each
//! broadcast paying for the scheduler's time slices. So a waiting host of this process takes the
//! [`Driver`] role and runs the engine's loop itself, one pass per poll, while the engine thread
//! parks; when the host leaves its wait (or goes to sleep on its completion doorbell) it hands
//! the loop back. The loop sits behind a mutex the two take turns on — uncontended but for the
//! hand-over; the engine thread arms its doorbells under it and sleeps on them without it.
//!
//! **The hand-back is lazy.** A program broadcasting in a loop leaves its blocking call and
//! enters the next a microsecond later; waking the engine thread in between (a futex wake-up,
//! then a second runnable thread in the process) cost ~75 µs per 2-byte broadcast on this 2-core
//! machine — ten times the broadcast. So the engine thread resumes only once no host has driven
//! for `runner.handback_us`, and it is not woken when the last driver leaves: it looks again
//! at most every `DRIVEN_PARK` (1 ms), which bounds how long work nobody drives waits (a
//! host's `post`, `post_batch`, `poll` and `test` run a pass themselves, see
//! [`ThreadEngine::progress`]). A host going to sleep on its doorbell hands back at once
//! ([`Driver::release_now`]). And the engine thread never yields or sleeps with the loop
//! locked: a driver arriving meanwhile must not wait for it.
//!
//! **A host bound to the engine thread's CPU** (`runner.host_pin`, [`ThreadEngine::host_bound`])
//! takes turns with it there, so the engine thread then has no spinning stage: it yields from
//! its first empty pass, then sleeps on its doorbells.
use super::engine_loop::EngineLoop;
use super::idle::Idle;
use super::pin::pin_current_thread;
use crate::config::Config;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The engine loop and who runs it.
struct Shared {
    engine: Mutex<EngineLoop>,
    /// Host threads of this process in a wait, driving the loop themselves.
    drivers: AtomicU32,
    /// The engine thread, to wake when the last driver leaves.
    thread: std::sync::OnceLock<Thread>,
    /// When the last driver left (ns since `epoch`): the engine thread resumes `handback` after.
    released: AtomicU64,
    epoch: Instant,
    handback: Duration,
    /// The engine thread sleeps on its doorbells now, without the loop (tests: the loop is free
    /// meanwhile).
    asleep: AtomicBool,
    /// A host of this process is bound to the engine thread's CPU ([`ThreadEngine::host_bound`]).
    host_bound: AtomicBool,
}

// A panic in a pass poisons the mutex; the loop's state is still the engine's to run (its
// invariants are kept per action), as the daemon would after logging it.
impl Shared {
    fn lock(&self) -> MutexGuard<'_, EngineLoop> {
        self.engine.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The loop, unless the other side is in the middle of a pass.
    fn try_lock(&self) -> Option<MutexGuard<'_, EngineLoop>> {
        match self.engine.try_lock() {
            Ok(e) => Some(e),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Nanoseconds since the engine started, never 0 (0 in `released` means "not held").
    fn since_epoch(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    /// How much longer the engine thread leaves the loop to the hosts: while one drives, or
    /// for `handback` after the last one left.
    fn hosts_hold(&self) -> Option<Duration> {
        if self.drivers.load(Ordering::Acquire) > 0 {
            return Some(DRIVEN_PARK);
        }
        // 0: no host ever drove, or the last one handed back at once (`release_now`).
        let released = self.released.load(Ordering::Acquire);
        if released == 0 {
            return None;
        }
        let idle_for = Duration::from_nanos(self.since_epoch().saturating_sub(released));
        self.handback.checked_sub(idle_for).filter(|d| !d.is_zero())
    }
}

/// How long the engine thread parks while a host drives, before it looks again. The last
/// driver to leave lazily does not wake it (that is the point), so this bounds how long work
/// nobody drives waits after a host returned to its program: a non-blocking post without a
/// pass of its own, another process's broadcast, a peer's repair request. (At 10 ms, a
/// `try_post` after a run of blocking calls waited up to 13 ms to be taken.)
const DRIVEN_PARK: Duration = Duration::from_millis(1);

/// A running engine thread; stops and joins when dropped.
pub struct ThreadEngine {
    name: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pinned: Option<usize>,
    shared: Arc<Shared>,
}

/// A host thread's turn at running the engine loop while it waits (see the module doc); the
/// engine thread resumes when the last one is dropped.
pub struct Driver {
    shared: Arc<Shared>,
    /// Hand the loop back at once when dropped (the host goes to sleep), not after
    /// `handback_us` (the host returns to its program, and likely calls again soon).
    now: bool,
}

impl Driver {
    /// One pass of the engine loop, unless the engine thread is in the middle of one (it
    /// parks at its next turn). True if it did work.
    pub fn poll(&self) -> bool {
        self.shared.try_lock().is_some_and(|mut e| e.poll_once())
    }
}

impl Driver {
    /// Gives the loop back to the engine thread at once: the caller is about to sleep on its
    /// completion doorbell and runs nothing meanwhile. (Held back for `handback_us` instead,
    /// every hop of a multi-node protocol exchange waited that long for a sleeping host's
    /// engine: 8 nodes in thread mode, 2 B broadcasts took 2.7 ms.)
    pub fn release_now(mut self) {
        self.now = true;
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Stamped before the count drops: the engine thread that sees no driver also sees when
        // the last one left (or that it should not wait at all).
        if self.now {
            self.shared.released.store(0, Ordering::Release);
        } else {
            self.shared.released.fetch_max(self.shared.since_epoch(), Ordering::AcqRel);
        }
        if self.shared.drivers.fetch_sub(1, Ordering::AcqRel) == 1
            && (self.now || self.shared.handback.is_zero())
        {
            if let Some(t) = self.shared.thread.get() {
                t.unpark();
            }
        }
    }
}

impl ThreadEngine {
    /// The name hosts attach with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The CPU the thread is pinned to, if any.
    pub fn pinned_cpu(&self) -> Option<usize> {
        self.pinned
    }

    /// One pass of the engine loop from a host's non-blocking call (post, poll, test), unless
    /// a pass is under way elsewhere: while the engine thread holds back (see the module doc)
    /// a program that posts and then computes still gets its descriptor taken at once.
    pub fn progress(&self) -> bool {
        // A driver for one pass: the engine thread stays held back during it (a pass that sends
        // a whole 1 MiB broadcast outlasts the hand-back delay: woken meanwhile, the engine
        // thread queued on the loop's lock and then polled beside the host) and for the
        // hand-back delay after it.
        self.driver().poll()
    }

    /// Takes the driver role for a wait: the engine thread parks at its next turn and the
    /// caller runs the loop through [`Driver::poll`] until it drops the role.
    pub fn driver(&self) -> Driver {
        self.shared.drivers.fetch_add(1, Ordering::AcqRel);
        Driver { shared: self.shared.clone(), now: false }
    }

    /// A host of this process bound its thread to this engine thread's CPU (`runner.host_pin`):
    /// from now on the engine thread skips its spinning stage — it yields from its first empty
    /// pass and then sleeps on its doorbells. Both take turns on one CPU, and a spinning engine
    /// thread there held a host that had just yielded to it (its barrier, a program between
    /// calls) off the CPU for `idle_spins` passes, hundreds of microseconds, however soon the
    /// host's work arrived; the host drives the loop itself whenever it waits (issue 40).
    pub fn host_bound(&self) {
        self.shared.host_bound.store(true, Ordering::Relaxed);
    }

    /// Stops the loop and waits for the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // Relaxed: see EngineLoop::run.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ThreadEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts an engine thread with `config` (its `engine_name` is replaced by a private name unless
/// `keep_name`). Returns once the engine listens, so a host can attach immediately.
pub fn spawn_thread(mut config: Config, keep_name: bool) -> std::io::Result<ThreadEngine> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    if !keep_name {
        config.runner.engine_name =
            format!("thread-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    }
    let name = config.runner.engine_name.clone();
    let pin = config.runner.pin_cpu;
    // Bind before spawning so that attach cannot race the listener.
    let engine = EngineLoop::bind(config, 1)?;
    let mut idle = Idle::new(engine.config());
    // Beside a host bound to this thread's CPU: no spinning stage (see `ThreadEngine::host_bound`).
    let mut bound_idle = Idle::new(&engine.config().clone().with(|c| c.runner.idle_spins = 0));
    let handback = Duration::from_micros(engine.config().runner.handback_us.into());
    let shared = Arc::new(Shared {
        engine: Mutex::new(engine),
        drivers: AtomicU32::new(0),
        thread: Default::default(),
        released: AtomicU64::new(0),
        epoch: Instant::now(),
        handback,
        asleep: AtomicBool::new(false),
        host_bound: AtomicBool::new(false),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let (stop2, shared2) = (stop.clone(), shared.clone());
    let handle = std::thread::Builder::new().name(format!("ringcast-{name}")).spawn(move || {
        let _ = shared2.thread.set(std::thread::current());
        // Held while the engine runs: its claim on the CPU (see `pin`).
        let pinned = pin_current_thread(pin).ok();
        shared2.lock().set_cpu(pinned.as_ref().and_then(|p| p.cpu()));
        let _ = tx.send(pinned.as_ref().and_then(|p| p.cpu()));
        // Relaxed: see EngineLoop::run.
        while !stop2.load(Ordering::Relaxed) {
            if let Some(hold) = shared2.hosts_hold() {
                // A host of this process is waiting and runs the loop itself, or just did.
                std::thread::park_timeout(hold);
                continue;
            }
            // The loop is locked for a pass and to arm or disarm a doorbell sleep, never while
            // this thread sleeps, yields or naps: a host that starts a wait drives at once. (Held
            // across the sleep, the host span on a lock whose holder, woken by the host's post,
            // first had to be scheduled — behind whatever held its CPU.)
            let idle = if shared2.host_bound.load(Ordering::Relaxed) { &mut bound_idle } else { &mut idle };
            if shared2.lock().poll_once() {
                idle.busy();
                continue;
            }
            if idle.sleeping() {
                let armed = shared2.lock().arm_park();
                if let Some((work, armed)) = armed {
                    if !work {
                        shared2.asleep.store(true, Ordering::SeqCst);
                        armed.sleep();
                        shared2.asleep.store(false, Ordering::SeqCst);
                    }
                    shared2.lock().disarm_park();
                    if work {
                        idle.busy();
                    }
                    continue;
                }
            }
            idle.idle();
        }
        shared2.lock().finish(&mut idle);
        drop(pinned);
    })?;
    let pinned = rx.recv().ok().flatten();
    Ok(ThreadEngine { name, stop, handle: Some(handle), pinned, shared })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While the engine thread sleeps on its doorbells the loop is free: a host starting a
    /// wait drives at once instead of spinning on a lock whose holder must first be woken and
    /// scheduled. Seen failing with the sleep under the lock.
    #[test]
    fn the_loop_is_free_while_the_engine_thread_sleeps_on_its_doorbells() {
        let config = Config::default().with(|c| {
            c.runner.poll_mode = crate::config::PollMode::SpinYield;
            c.runner.idle_spins = 0;
            c.runner.idle_yields = 0;
        });
        let t = spawn_thread(config, false).expect("engine thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut free_while_asleep = 0;
        while free_while_asleep < 3 {
            assert!(Instant::now() < deadline, "the engine thread never slept with the loop free");
            if t.shared.asleep.load(Ordering::SeqCst) {
                let free = t.shared.try_lock().is_some();
                // Counted only if it was asleep throughout (it wakes at least every 2 ms).
                if free && t.shared.asleep.load(Ordering::SeqCst) {
                    free_while_asleep += 1;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Beside a bound host the engine thread spins no empty pass: with a spinning stage that
    /// never ends and no yields, it reaches its doorbell sleep only once told its host is bound.
    /// Seen failing without the bound back-off (the thread never slept).
    #[test]
    fn beside_a_bound_host_the_engine_thread_skips_its_spins() {
        let config = Config::default().with(|c| {
            c.runner.poll_mode = crate::config::PollMode::SpinYield;
            c.runner.idle_spins = u32::MAX;
            c.runner.idle_yields = 0;
        });
        let t = spawn_thread(config, false).expect("engine thread");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.shared.asleep.load(Ordering::SeqCst), "unbound, it spins");
        t.host_bound();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !t.shared.asleep.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "bound, the engine thread never reached its doorbell sleep");
            std::thread::yield_now();
        }
    }

    /// The hand-back rule, on a real engine thread: held while a host drives, held for
    /// `handback_us` after a host returns to its program (lazily), released at once when the
    /// host goes to sleep (`release_now`), held again by a host's progress pass. A long
    /// hand-back delay makes "held" unambiguous however slow the machine.
    #[test]
    fn the_engine_thread_is_held_while_hosts_drive_and_just_after() {
        let config = Config::default().with(|c| c.runner.handback_us = 10_000_000);
        let t = spawn_thread(config, false).expect("engine thread");
        let hold = || t.shared.hosts_hold();
        let d = t.driver();
        assert_eq!(hold(), Some(DRIVEN_PARK), "a host drives");
        drop(d);
        let lazy = hold().expect("held after a host returns from a blocking call");
        assert!(
            lazy > Duration::from_secs(5) && lazy <= Duration::from_secs(10),
            "for the hand-back delay: {lazy:?}"
        );
        let d = t.driver();
        d.release_now();
        assert_eq!(hold(), None, "a host gone to sleep hands back at once");
        t.progress();
        assert!(hold().is_some(), "a progress pass holds it again");
        let (d1, d2) = (t.driver(), t.driver());
        d1.release_now();
        assert_eq!(hold(), Some(DRIVEN_PARK), "another host still drives");
        drop(d2);
        assert!(hold().is_some(), "the last one returned lazily");
    }
}
