//! The `udp` fabric's doorbell: the kernel cannot ring a futex when a datagram arrives, so a
//! thread of the fabric's sleeps in `epoll_wait` on its sockets while — and only while — the
//! engine sleeps, and rings the engine's bell ([`Waker::bell`]) once when one becomes readable.
//! The engine then sleeps on its hosts' doorbells and this bell at once (`futex_waitv`), as on
//! `shm`, instead of napping `idle_sleep_us` per pass.
//!
//! No wake-up per datagram: the thread waits for the engine to arm ([`Waker::arm`]) on a futex
//! of its own, rings at most once per arming (it disarms as it rings), and while the engine is
//! awake it does not watch the sockets at all (a level-triggered `epoll_wait` would return at
//! once for every datagram the engine has not read yet). A busy engine never arms, so its
//! datagrams cost the thread nothing; an idle one costs one wake-up of this thread per sleep,
//! and one of the engine per burst of arrivals.
//!
//! Every wait is bounded ([`WAIT_MAX`]): a lost wake-up costs at most that, and the thread
//! notices a stop within it; dropping the [`Waker`] stops and joins the thread (an `eventfd`
//! in the epoll set ends its wait at once).
use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::fd::{AsFd, OwnedFd};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest sleep of the waker thread on either wait.
const WAIT_MAX: Duration = Duration::from_millis(100);

/// The epoll token of the stop eventfd (sockets carry their raw descriptor).
const STOP_TOKEN: u64 = u64::MAX;

/// What the engine and the waker thread share.
#[derive(Debug)]
struct Shared {
    /// What the engine sleeps on: bumped by every ring.
    bell: AtomicU32,
    /// 1 while the engine is (about to be) asleep: the thread watches the sockets only then.
    armed: AtomicU32,
    stop: AtomicBool,
    /// Times the thread rang the bell.
    rings: AtomicU64,
    epoll: OwnedFd,
    stop_fd: OwnedFd,
}

/// The fabric's doorbell and the thread that rings it. See the module doc.
#[derive(Debug)]
pub(super) struct Waker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Waker {
    /// A waker watching nothing yet ([`Waker::watch`] adds sockets), its thread started.
    pub fn new() -> std::io::Result<Waker> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let stop_fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(&epoll, &stop_fd, epoll::EventData::new_u64(STOP_TOKEN), epoll::EventFlags::IN)?;
        let shared = Arc::new(Shared {
            bell: AtomicU32::new(0),
            armed: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            rings: AtomicU64::new(0),
            epoll,
            stop_fd,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("ringcast-udp-bell".into()).spawn(move || run(&s))?;
        Ok(Waker { shared, thread: Some(thread) })
    }

    /// Watches `sock` for readability (a member or group socket).
    pub fn watch(&self, sock: impl AsFd) -> std::io::Result<()> {
        let token = epoll::EventData::new_u64(rustix::fd::AsRawFd::as_raw_fd(&sock.as_fd()) as u64);
        Ok(epoll::add(&self.shared.epoll, sock, token, epoll::EventFlags::IN)?)
    }

    /// Stops watching `sock` (before it is closed).
    pub fn unwatch(&self, sock: impl AsFd) {
        let _ = epoll::delete(&self.shared.epoll, sock);
    }

    /// The engine is about to sleep: the bell's value to sleep on. The thread starts watching
    /// the sockets; the engine re-checks them after this and before sleeping, so a datagram
    /// that arrived before the thread looked is found by the re-check.
    pub fn arm(&self) -> u32 {
        // SeqCst: the bell is read after `armed` is seen set (a ring after this read moves it).
        self.shared.armed.store(1, Ordering::SeqCst);
        let seen = self.shared.bell.load(Ordering::SeqCst);
        ringcast_ring::doorbell::wake(&self.shared.armed);
        seen
    }

    /// Awake again: the thread stops watching after its current wait.
    pub fn disarm(&self) {
        self.shared.armed.store(0, Ordering::SeqCst);
    }

    /// The word the engine sleeps on.
    pub fn bell(&self) -> &AtomicU32 {
        &self.shared.bell
    }

    /// Times the thread rang the engine (once per sleep at most).
    pub fn rings(&self) -> u64 {
        self.shared.rings.load(Ordering::Relaxed)
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        ringcast_ring::doorbell::wake(&self.shared.armed);
        // Ends an epoll wait at once; a failure leaves it to the wait's bound.
        let _ = rustix::io::write(&self.shared.stop_fd, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The waker thread: wait to be armed, then for a readable socket, ring, repeat.
fn run(s: &Shared) {
    let timeout = rustix::time::Timespec { tv_sec: 0, tv_nsec: WAIT_MAX.as_nanos() as i64 };
    let mut events = [MaybeUninit::<epoll::Event>::uninit(); 8];
    while !s.stop.load(Ordering::SeqCst) {
        if s.armed.load(Ordering::SeqCst) == 0 {
            ringcast_ring::doorbell::wait(&s.armed, 0, WAIT_MAX);
            continue;
        }
        let ready = match epoll::wait(&s.epoll, &mut events, Some(&timeout)) {
            Ok((ready, _)) => ready,
            Err(_) => continue, // EINTR: look again
        };
        if ready.iter().any(|e| e.data.u64() != STOP_TOKEN) && s.armed.swap(0, Ordering::SeqCst) == 1 {
            s.bell.fetch_add(1, Ordering::SeqCst);
            s.rings.fetch_add(1, Ordering::Relaxed);
            ringcast_ring::doorbell::wake(&s.bell);
        }
    }
}
