//! [`Host`]: one host process's attachment to an engine.
//!
//! Contract:
//! * Every posted descriptor yields exactly one completion. *Outstanding* = posted and not yet
//!   handed to the caller (still in the rings, or reaped into the stash). `try_post` refuses
//!   (`WouldBlock`) once `max_in_flight` are outstanding (default: the completion ring's
//!   capacity), so the stash never grows past it.
//! * Blocking calls never wait forever: waits check every 4096 empty polls that the engine's
//!   control socket is still up (`EngineGone`); a wait with nothing outstanding fails at once
//!   (`NothingInFlight`); control requests time out after `ctl_timeout_ms` (`Timeout`) and carry
//!   a sequence number, so a late reply is never taken for the next request's.
//! * Completions that arrive while the caller waits for something else (room to post, another
//!   cookie) are kept in arrival order and returned by later `poll`/`wait` calls.
use crate::error::{Error, Result};
use crate::handshake::{self, call, AttachOptions};
use crate::regions::Region;
use crate::shared_buf::SharedBuf;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Completion, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_offload::ctl::CtlSock;
use ringcast_offload::runner::{spawn_thread, Driver, Idle, ThreadEngine};
use ringcast_offload::{ctl, Config};
use ringcast_ring::attach::HostRings;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Empty completion polls between checks that the engine is still there (one `poll(2)` each).
const LIVENESS_EVERY: u32 = 4096;
/// Empty completion polls between deadline checks (one clock read each).
const DEADLINE_EVERY: u32 = 64;
/// Longest sleep on the completion doorbell before the host re-checks its deadline and the
/// engine's liveness.
const PARK_MAX: Duration = Duration::from_millis(5);

/// A host process's attachment to an engine.
pub struct Host {
    pub(crate) sock: CtlSock,
    pub(crate) rings: HostRings,
    /// The rings live in this process and the engine reaches them and every registered buffer
    /// by DMA (`cma`): buffers register by address, and the engine wakes a sleeping host with a
    /// `WAKE` on the control connection instead of a futex.
    pub(crate) host_owned: bool,
    /// The RDMA end its memory is exposed through (`rdma` backend).
    pub(crate) rdma: Option<crate::rdma::RdmaEnd>,
    /// Why the engine detached this host, if it said so (an unasked `ERROR`).
    pub(crate) detached_by_engine: Option<CtlStatus>,
    host_id: u32,
    engine_pid: u32,
    /// The CPU the engine's thread is pinned to, as it said at attach.
    engine_cpu: Option<usize>,
    /// The attaching thread was bound to `engine_cpu` (`runner.host_pin`).
    bound: bool,
    local_rank: Option<u32>,
    /// Posted and not yet reaped from the completion ring.
    in_flight: usize,
    max_in_flight: usize,
    next_cookie: u64,
    next_seq: u64,
    /// Reaped but not yet handed to the caller.
    stash: VecDeque<Completion>,
    /// Keys of late `REGISTER_OK`s nobody holds, deregistered at the next request.
    pub(crate) orphans: Vec<RegionKey>,
    idle_config: Config,
    /// Sizes of the communicators this process created (the world's is in `idle_config`): a
    /// barrier's scratch holds one byte per rank.
    pub(crate) comm_sizes: HashMap<u64, u32>,
    /// A barrier's scratch, registered at the first barrier and grown as needed.
    pub(crate) barrier_scratch: Option<Region>,
    /// Earlier, smaller barrier scratch regions (kept registered: see `barrier_descriptor`).
    pub(crate) retired_scratch: Vec<Region>,
    ctl_timeout: Duration,
    detached: bool,
    // Declared last: dropped after the rings and socket, so a local engine outlives its host.
    local: Option<ThreadEngine>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("host_id", &self.host_id)
            .field("engine_pid", &self.engine_pid)
            .field("outstanding", &self.in_flight())
            .field("local", &self.local.as_ref().map(|l| l.name()))
            .finish()
    }
}

impl Host {
    /// Attaches to the engine daemon `name` with default options.
    pub fn attach(name: &str) -> Result<Host> {
        Self::attach_with(name, AttachOptions::default())
    }

    /// Attaches to the engine daemon `name`, retrying while it is not listening yet (a daemon
    /// just started) for up to `timeout`; other errors are returned at once.
    pub fn attach_wait(name: &str, timeout: std::time::Duration) -> Result<Host> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match Self::attach(name) {
                Err(Error::Connect { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => return other,
            }
        }
    }

    /// Attaches to the engine daemon `name` (`tcp://ip:port`: across the PCIe boundary), with
    /// the configuration of the environment.
    pub fn attach_with(name: &str, opts: AttachOptions) -> Result<Host> {
        Self::attach_config(name, &Config::from_env()?, opts)
    }

    /// Attaches with an explicit configuration (what it reads: `runner.dma`, the job secret for
    /// TCP, the idle strategy, the control timeout, the local rank claim).
    pub fn attach_config(name: &str, config: &Config, opts: AttachOptions) -> Result<Host> {
        let config = config.clone();
        let ctl_timeout =
            opts.ctl_timeout.unwrap_or(Duration::from_millis(config.runner.ctl_timeout_ms as u64));
        let handshake::Attached { sock, rings, host_owned, reply, next_seq, rdma } =
            handshake::attach(name, &config, &opts, ctl_timeout)?;
        let engine_cpu = usize::try_from(reply.e).ok().and_then(|c| c.checked_sub(1));
        // Beside a daemon the host and its engine take turns on the engine's CPU; beside an
        // engine thread of this very process the host drives that engine's loop while it waits
        // (one poller per process, `runner::thread`), so binding it keeps that poller on the CPU
        // its engine claimed, as an MPI library binds rank i to core i: two ranks' pollers never
        // crowd one CPU while the other holds an unrelated busy process (issue 40, item 4).
        // Best effort: a CPU outside this process's affinity set leaves the thread as it is.
        let bound = match (config.runner.host_pin, engine_cpu) {
            (true, Some(cpu)) => {
                ringcast_offload::runner::pin_current_thread(ringcast_offload::config::PinCpu::Cpu(cpu))
                    .is_ok()
            }
            _ => false,
        };
        let capacity = rings.cq.capacity();
        let max_in_flight = opts.max_in_flight.unwrap_or(capacity).max(1);
        Ok(Host {
            sock,
            rings,
            host_owned,
            rdma,
            detached_by_engine: None,
            host_id: reply.a,
            engine_pid: reply.b,
            engine_cpu,
            bound,
            local_rank: u32::try_from(reply.d).ok().and_then(|d| d.checked_sub(1)),
            in_flight: 0,
            max_in_flight,
            next_cookie: 1,
            next_seq,
            stash: VecDeque::with_capacity(max_in_flight.min(capacity)),
            orphans: Vec::new(),
            idle_config: config,
            comm_sizes: HashMap::new(),
            barrier_scratch: None,
            retired_scratch: Vec::new(),
            ctl_timeout,
            detached: false,
            local: None,
        })
    }

    /// Starts an engine polling thread in this process with `config` (under a private name)
    /// and attaches to it.
    pub fn spawn_local(config: Config) -> Result<Host> {
        Self::spawn(config, false)
    }

    /// Like [`Host::spawn_local`], but the engine listens under `config.engine_name`, so the
    /// node's other processes can attach to it (thread mode with several processes per node).
    pub fn spawn_named(config: Config) -> Result<Host> {
        Self::spawn(config, true)
    }

    fn spawn(config: Config, keep_name: bool) -> Result<Host> {
        let engine = spawn_thread(config, keep_name)?;
        let mut host = Self::attach(engine.name())?;
        if host.bound {
            // This thread was bound to the engine thread's CPU at attach: the two take turns there.
            engine.host_bound();
        }
        host.local = Some(engine);
        Ok(host)
    }

    /// Engine-assigned id of this host.
    pub fn host_id(&self) -> u32 {
        self.host_id
    }

    /// Process id of the engine (this process in thread mode).
    pub fn engine_pid(&self) -> u32 {
        self.engine_pid
    }

    /// The CPU the engine's polling thread is pinned to (`None`: unpinned), as it said at
    /// attach; with `runner.host_pin` the attaching thread was pinned there too.
    pub fn engine_cpu(&self) -> Option<usize> {
        self.engine_cpu
    }

    /// Ranks in the job's world communicator (as this process's configuration says).
    pub fn world_size(&self) -> u32 {
        self.idle_config.topology.world_size()
    }

    /// This process's local rank on its engine (`None`: every local rank was taken when it
    /// attached; it can COPY but not broadcast). Its world rank is
    /// `config.topology.world_rank(local)` (`node * ppn + local rank` in a uniform world).
    pub fn local_rank(&self) -> Option<u32> {
        self.local_rank
    }

    /// Name of the in-process engine, in thread mode.
    pub fn local_engine(&self) -> Option<&str> {
        self.local.as_ref().map(|l| l.name())
    }

    /// Submission (and completion) ring entries.
    pub fn ring_entries(&self) -> usize {
        self.rings.sq.capacity()
    }

    /// Operations posted whose completion the caller has not received yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight + self.stash.len()
    }

    /// Descriptors posted that the engine has not taken from the submission ring yet (read from
    /// the engine's consumer index). Once this is 0 every posted descriptor is in the engine's
    /// hands: what happens to it from then on is reported by its completion.
    pub fn unclaimed(&self) -> usize {
        self.rings.sq.in_flight()
    }

    /// A fresh cookie (unique per host, never 0).
    pub fn next_cookie(&mut self) -> u64 {
        let c = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1).max(1);
        c
    }

    /// One control request/reply with this host's timeout and a fresh sequence number. A late
    /// REGISTER_OK (its request timed out) names a region nobody holds: it is deregistered.
    /// The error for an engine that is gone: `Detached` with its reason when it said why,
    /// `EngineGone` otherwise.
    fn gone(&self) -> Error {
        match self.detached_by_engine {
            Some(status) => Error::Detached { status },
            None => Error::EngineGone,
        }
    }

    pub(crate) fn request(
        &mut self,
        mut msg: CtlMsg,
        buf: Option<&SharedBuf>,
        what: &'static str,
    ) -> Result<CtlMsg> {
        msg.seq = self.next_seq;
        self.next_seq += 1;
        let mut orphans: Vec<RegionKey> = std::mem::take(&mut self.orphans);
        let mut detached = self.detached_by_engine;
        let mut stale = |m: CtlMsg| match m.kind {
            CtlKind::REGISTER_OK => orphans.push(RegionKey(m.a)),
            CtlKind::ERROR if m.seq == 0 => detached = Some(m.status),
            _ => {}
        };
        let fd = buf.map(SharedBuf::fd);
        let reply = call(&mut self.sock, &msg, fd, self.ctl_timeout, what, &mut stale).map(|(m, _)| m);
        self.detached_by_engine = detached;
        let reply = match reply {
            Err(Error::EngineGone) => Err(self.gone()),
            other => other,
        };
        for key in orphans {
            let mut req = CtlMsg::new(CtlKind::DEREGISTER);
            req.a = key.0;
            // Best effort: the host never had this key; a failure leaves it to detach.
            let _ = self.request(req, None, "deregister");
        }
        reply
    }

    /// Posts one descriptor without blocking.
    pub fn try_post(&mut self, desc: &SubmissionDescriptor) -> Result<()> {
        if self.in_flight() >= self.max_in_flight {
            return Err(Error::WouldBlock { in_flight: self.in_flight() });
        }
        if self.rings.sq.try_push(*desc).is_err() {
            return Err(Error::WouldBlock { in_flight: self.in_flight() });
        }
        self.rings.sq.wake_consumer();
        self.in_flight += 1;
        Ok(())
    }

    /// Posts as many of `descs` as fit, behind one doorbell; returns how many.
    pub fn post_batch(&mut self, descs: &[SubmissionDescriptor]) -> usize {
        let room = self.max_in_flight.saturating_sub(self.in_flight()).min(descs.len());
        let n = self.rings.sq.push_batch(&descs[..room]);
        if n > 0 {
            self.rings.sq.wake_consumer();
        }
        self.in_flight += n;
        if n > 0 {
            self.progress(); // thread mode: taken in now, as `post` does
        }
        n
    }

    /// Posts one descriptor, waiting for room. Completions that arrive meanwhile are kept for
    /// [`Host::poll`]/[`Host::wait`]; when every outstanding operation has completed and is
    /// kept, waiting cannot make room and this returns `WouldBlock`.
    pub fn post(&mut self, desc: &SubmissionDescriptor) -> Result<()> {
        let mut idle = Idle::new(&self.idle_config);
        let mut n = 0u32;
        // Taken at the first full ring only: a post that finds room costs nothing more.
        let mut driver: Option<Driver> = None;
        loop {
            match self.try_post(desc) {
                Err(Error::WouldBlock { .. }) if self.in_flight > 0 => {}
                Ok(()) => {
                    // Thread mode: the engine thread may be holding back for us (see
                    // `runner::thread`); take the descriptor in now.
                    self.progress();
                    return Ok(());
                }
                other => return other,
            }
            if let Some(c) = self.reap()? {
                self.stash.push_back(c);
                idle.busy();
                continue;
            }
            // Thread mode: run the engine loop while waiting for room (see `reap_until`).
            if driver.is_none() {
                driver = self.local.as_ref().map(ThreadEngine::driver);
            }
            if driver.as_ref().is_some_and(Driver::poll) {
                idle.busy();
                continue;
            }
            n = n.wrapping_add(1);
            if n.is_multiple_of(LIVENESS_EVERY) && self.sock.peer_gone() {
                return Err(self.gone());
            }
            idle.idle();
        }
    }

    /// Thread mode: one pass of this process's engine loop, unless a pass is under way (see
    /// `runner::thread`); what an application's own wait loop (an MPI library's progress engine
    /// in its barrier) calls to keep broadcasts moving while it waits elsewhere. The host's
    /// non-blocking calls (`post`, `poll`, `test_cookie`) make one such pass themselves.
    /// Nothing in daemon mode (the engine has a core of its own).
    pub fn progress(&mut self) {
        if let Some(t) = self.local.as_ref() {
            t.progress();
        }
    }

    /// The completion of `cookie` if it has arrived, without waiting; completions of other
    /// operations that arrive meanwhile are kept for later (`wait_cookie`, `poll`).
    pub fn test_cookie(&mut self, cookie: u64) -> Result<Option<Completion>> {
        self.progress();
        while let Some(c) = self.reap()? {
            self.stash.push_back(c);
        }
        Ok(self.stash.iter().position(|c| c.cookie == cookie).and_then(|i| self.stash.remove(i)))
    }

    /// The next completion, if one is there.
    pub fn poll(&mut self) -> Result<Option<Completion>> {
        if let Some(c) = self.stash.pop_front() {
            return Ok(Some(c));
        }
        self.progress();
        self.reap()
    }

    /// Takes one completion from the ring (not the stash).
    fn reap(&mut self) -> Result<Option<Completion>> {
        let c = self.rings.cq.try_pop()?;
        if c.is_some() {
            if self.in_flight == 0 {
                return Err(Error::Protocol("engine completed more descriptors than were posted"));
            }
            self.in_flight -= 1;
        }
        Ok(c)
    }

    /// Waits for the next completion. Fails with `EngineGone` if the engine dies meanwhile and
    /// with `NothingInFlight` if nothing is outstanding.
    pub fn wait(&mut self) -> Result<Completion> {
        if let Some(c) = self.stash.pop_front() {
            return Ok(c);
        }
        let c = self.reap_until(None)?;
        c.ok_or_else(|| self.gone())
    }

    /// Waits up to `timeout` for the next completion (`Ok(None)` when it runs out).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<Completion>> {
        if let Some(c) = self.stash.pop_front() {
            return Ok(Some(c));
        }
        self.reap_until(Some(Instant::now() + timeout))
    }

    /// Polls the completion ring until a completion, the deadline, or the engine's death.
    fn reap_until(&mut self, deadline: Option<Instant>) -> Result<Option<Completion>> {
        if self.in_flight == 0 {
            return Err(Error::NothingInFlight { cookie: None });
        }
        let mut idle = Idle::new(&self.idle_config);
        let mut n = 0u32;
        // Thread mode: this thread runs the engine loop while it waits, and the engine thread
        // parks — one poller in the process, not two (see `runner::thread`).
        let mut driver = self.local.as_ref().map(ThreadEngine::driver);
        loop {
            if let Some(c) = self.reap()? {
                return Ok(Some(c));
            }
            if driver.as_ref().is_some_and(Driver::poll) {
                idle.busy();
                continue;
            }
            n = n.wrapping_add(1);
            // Checked every few polls while spinning and on every poll once the back-off sleeps,
            // so a timeout ends within one poll interval (≤ PARK_MAX) of its deadline, and an
            // engine's death is noticed within one.
            let sleeping = idle.sleeping();
            if (n.is_multiple_of(DEADLINE_EVERY) || sleeping) && deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Ok(None);
            }
            if (n.is_multiple_of(LIVENESS_EVERY) || sleeping) && self.sock.peer_gone() {
                return Err(self.gone());
            }
            if sleeping {
                // Asleep on the doorbell, this thread runs nothing: the engine thread takes the
                // loop back meanwhile.
                // Handed back at once: the engine thread runs the loop while this one sleeps.
                let driving = driver.take().map(Driver::release_now).is_some();
                self.park(deadline);
                if driving {
                    driver = self.local.as_ref().map(ThreadEngine::driver);
                }
            } else {
                idle.idle();
            }
        }
    }

    /// Sleeps on the completion ring's doorbell until the engine publishes a completion (it
    /// wakes us: the host spends no CPU while the engine works), at most `PARK_MAX` or until
    /// `deadline`.
    fn park(&mut self, deadline: Option<Instant>) {
        let mut limit = PARK_MAX;
        if let Some(d) = deadline {
            limit = limit.min(d.saturating_duration_since(Instant::now()));
        }
        let cq = &mut self.rings.cq;
        let seen = cq.arm();
        // Re-checked after arming: a completion published before the engine saw us waiting is
        // found here; one published after rings the bell (or, host-owned rings, sends WAKE).
        if cq.is_empty().unwrap_or(false) {
            if self.host_owned {
                ctl::readable_within(self.sock.fd(), limit);
            } else {
                ringcast_ring::doorbell::wait(cq.bell(), seen, limit);
            }
        }
        cq.disarm();
        if self.host_owned {
            // WAKEs said what the ring now shows. A reply only comes during a request — but a
            // late REGISTER_OK (its request timed out) names a region nobody holds: kept to be
            // deregistered at the next request.
            let mut stray = Vec::new();
            while let Ok(ctl::Received::Msg(m, _)) = self.sock.recv(&mut stray) {
                match m.kind {
                    CtlKind::REGISTER_OK => self.orphans.push(RegionKey(m.a)),
                    // The engine detaches us and says why: kept for the error the wait returns.
                    CtlKind::ERROR if m.seq == 0 => self.detached_by_engine = Some(m.status),
                    _ => {}
                }
            }
        }
    }

    /// Waits for the completion of `cookie`, keeping the others (in order) for later.
    pub fn wait_cookie(&mut self, cookie: u64) -> Result<Completion> {
        if let Some(i) = self.stash.iter().position(|c| c.cookie == cookie) {
            // NOTE(unwrap): `i` was just found.
            return Ok(self.stash.remove(i).unwrap());
        }
        loop {
            match self.reap_until(None) {
                Ok(Some(c)) if c.cookie == cookie => return Ok(c),
                Ok(Some(c)) => self.stash.push_back(c),
                Ok(None) => return Err(self.gone()),
                Err(Error::NothingInFlight { .. }) => {
                    return Err(Error::NothingInFlight { cookie: Some(cookie) })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `timeout` for the completion of `cookie` (`Ok(None)` when it runs out),
    /// keeping the others for later: what a caller that must let go of the host now and then
    /// (the C ABI's blocking calls, other threads posting meanwhile) waits with.
    pub fn wait_cookie_timeout(&mut self, cookie: u64, timeout: Duration) -> Result<Option<Completion>> {
        if let Some(i) = self.stash.iter().position(|c| c.cookie == cookie) {
            return Ok(self.stash.remove(i));
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.reap_until(Some(deadline)) {
                Ok(Some(c)) if c.cookie == cookie => return Ok(Some(c)),
                Ok(Some(c)) => self.stash.push_back(c),
                Ok(None) => return Ok(None),
                Err(Error::NothingInFlight { .. }) => {
                    return Err(Error::NothingInFlight { cookie: Some(cookie) })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Posts `desc` and waits for its completion; an error status becomes `Error::Op`.
    pub fn execute(&mut self, desc: &SubmissionDescriptor) -> Result<Completion> {
        self.post(desc)?;
        let c = self.wait_cookie(desc.cookie)?;
        match StatusKind::try_from(c.status) {
            Ok(StatusKind::Ok) => Ok(c),
            _ => Err(Error::Op { cookie: c.cookie, status: c.status }),
        }
    }

    /// A NOP round trip.
    pub fn nop(&mut self) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::nop(cookie))
    }

    /// Engine-side copy of `len` bytes from `src` to `dst`, waiting for completion.
    pub fn copy(&mut self, dst: RegionRef, src: RegionRef, len: u64) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::copy(cookie, dst, src, len))
    }

    /// Finalizes (`MPI_Finalize`'s part), then detaches: this process posts nothing more on the
    /// world, and once every process of its node finalized, the engines settle the world's last,
    /// partial synchronization epoch among themselves — however many collectives were posted,
    /// nobody pads epochs. Operations still in flight are waited for first. A process that only
    /// detaches (or is dropped) leaves the world open: one taking its rank continues its
    /// sequence.
    pub fn finalize(mut self) -> Result<()> {
        while self.in_flight > 0 {
            self.wait()?;
        }
        let r = self.request(CtlMsg::new(CtlKind::FINALIZE), None, "finalize")?;
        if r.kind != CtlKind::FINALIZE_OK {
            return Err(Error::Refused { request: "finalize", status: r.status });
        }
        self.detach()
    }

    /// Detaches cleanly, reporting whether the engine could be told (dropping a `Host` detaches
    /// too, ignoring errors). A process that dies without either is detected by the engine.
    pub fn detach(mut self) -> Result<()> {
        self.detached = true;
        self.sock.send_now(&CtlMsg::new(CtlKind::DETACH))?;
        self.sock.finish();
        Ok(())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.detached {
            // Never blocks: a stopped engine with a full socket buffer must not hang a drop.
            let _ = self.sock.send_now(&CtlMsg::new(CtlKind::DETACH));
            self.sock.finish();
        }
    }
}
