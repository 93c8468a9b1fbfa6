//! The polling loop: drives the sans-IO [`Engine`] against real rings, real shared memory and
//! a real fabric.
//!
//! One pass ([`EngineLoop::poll_once`]):
//! 1. for every attached host, whatever of it is in flight, take up to `burst` descriptors —
//!    never more than its completion ring has room for beside the completions its operations
//!    in flight will need ([`Engine::admits`]), so a completion is never dropped (engine-side
//!    back-pressure: the rest wait in its submission ring) — and hand each to the engine;
//! 2. hand the engine the fabric's datagrams, and its timers when due;
//! 3. carry out what the engine asks, in order: frames to the fabric, groups joined and left,
//!    host memory moved (a COPY moves at most `dma_pass_bytes` per host per pass, so a 1 GiB
//!    copy takes many passes and other hosts and control traffic are never stalled; the
//!    engine's staging loads and stores move at once), completions collected;
//! 4. publish each host's completions, stamped with one clock read: with one ring store (mapped
//!    rings), or by DMA with the submission head taken that pass, then the host's consumer line
//!    read back for its `waiting` flag (host-owned rings, `dma/rings.rs`); a host-owned head no
//!    completion carried goes back alone at the end of the pass.
//!
//! The engine publishes each host's completions as its operations end (not in submission
//! order: a later call on another communicator may end first). Every `ctl_poll_us` the
//! loop also serves its control path (`control.rs`): it accepts connections (at most
//! `max_pending_conns` not attached yet, the oldest closed for a new one past that), expires
//! those that do not ATTACH within `attach_timeout_ms`, and serves control requests from one
//! `epoll_wait` over all control sockets: attach, (de)register, stats, and detach of hosts
//! that hung up or broke the ring protocol — freeing their slot and memory while every other
//! host keeps being served.
//!
//! The data path makes no allocation once warm: every buffer is sized at start (`burst`, the
//! DMA bounce buffer) or at attach (each host's completions hold at most one ring). With mapped
//! rings it makes no system call either; a host-owned-ring host costs a few DMA jobs per pass
//! (each a system call under `cma`) and a `WAKE` send when it sleeps.
use super::clock::Clock;
use super::dma::rings::{HostRings, RingFault};
use super::dma::{Backend, HostMappings, HostMemory};
use super::net::Net;
use crate::config::Config;
use crate::ctl::{self, CtlSock};
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Completion, RegionKey, Status, StatusKind, SubmissionDescriptor};
use ringcast_proto::engine::{Action, Dma, Engine, JobId};
use ringcast_proto::intake::regions::Resolved;
use ringcast_proto::intake::{Departure, HostId, Nanos};
use rustix::event::epoll;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU32;

/// Longest sleep on the doorbells: control requests (attach, register) and a stop request are
/// noticed within it.
const PARK_MAX: Nanos = 2_000_000;

/// Longest wait on the fabric alone ([`EngineLoop::wait_on_fabric`]), and its unit: a
/// host's post, which that wait does not see, is taken within it. Whole milliseconds because
/// `epoll_pwait` counts in them (rounding a shorter limit up to one: a 200 µs wait slept
/// 1.1 ms), so the engine waits on the fabric only when its next timer is at least this far.
const FABRIC_WAIT_MAX: Nanos = 1_000_000;

/// Doorbells armed by [`EngineLoop::arm_park`], by address and the value each had: what the
/// sleep waits on, held without a borrow of the loop (see `doorbell::wait_any_addrs`: a word
/// freed meanwhile costs at most one `limit`).
pub(crate) struct ArmedPark {
    words: heapless::Vec<(*const AtomicU32, u32), { ringcast_ring::doorbell::MAX_WAIT_ANY }>,
    limit: Nanos,
}

impl ArmedPark {
    /// Sleeps until a word changes or is rung, at most `limit` (none when the re-check found
    /// work or a timer is due).
    pub(crate) fn sleep(&self) {
        if self.limit > 0 {
            ringcast_ring::doorbell::wait_any_addrs(&self.words, std::time::Duration::from_nanos(self.limit));
        }
    }
}

/// A COPY the engine asked for, in progress.
#[derive(Clone, Copy, Debug)]
pub(super) struct Copying {
    pub(super) job: JobId,
    pub(super) host: HostId,
    pub(super) keys: [RegionKey; 2],
    pub(super) src: Resolved,
    pub(super) dst: Resolved,
    pub(super) len: u64,
    pub(super) done: u64,
    pub(super) failed: bool,
}

impl Copying {
    /// Moves up to `budget` more bytes; true when the copy is over (finished or failed).
    fn advance(&mut self, memory: &mut HostMemory, budget: &mut u64) -> bool {
        let chunk = (self.len - self.done).min(*budget);
        if chunk > 0 && !self.failed {
            let at = |r: Resolved| Resolved { segment: r.segment, offset: r.offset + self.done };
            if memory.copy(at(self.src), at(self.dst), chunk) {
                self.done += chunk;
            } else {
                // The engine checked the range against the registration; failing here means
                // the memory went away under the operation (deregistered mid-flight).
                self.failed = true;
            }
            *budget -= chunk;
        }
        self.failed || self.done == self.len
    }
}

pub(super) struct HostConn {
    pub(super) pid: u32,
    pub(super) sock: CtlSock,
    /// How the engine reaches its memory (chosen at attach).
    pub(super) backend: Backend,
    pub(super) rings: HostRings,
    /// Completions the engine handed out, to publish at the end of the pass (with their start
    /// time parked in `engine_ns`).
    pub(super) done: Vec<Completion>,
    pub(super) maps: HostMappings,
    /// Its control connection can no longer be trusted (a message cut short): detached at the
    /// end of the pass.
    pub(super) broken: bool,
}

impl HostConn {
    /// Publishes its completions with one ring store, turning each parked start time into the
    /// engine time up to `end` (one clock read per batch).
    fn publish(&mut self, end: Nanos) {
        if self.done.is_empty() {
            return;
        }
        for c in self.done.iter_mut() {
            c.engine_ns = end.saturating_sub(c.engine_ns);
        }
        match &mut self.rings {
            HostRings::Mapped(r) => {
                let pushed = r.cq.push_batch(&self.done);
                debug_assert_eq!(pushed, self.done.len(), "completion ring overflow despite reservation");
                // A host sleeping on its completion doorbell is woken (one system call, only
                // then).
                r.cq.wake_consumer();
            }
            HostRings::Remote(r) => {
                // A failed write means the host's memory is gone: its socket's hang-up detaches
                // it at the next control poll. A host asleep on its socket is woken there; a
                // WAKE that does not go out whole has cut the stream: the host is detached.
                if r.push_batch(&self.done)
                    && r.host_sleeping()
                    && self.sock.send_now(&CtlMsg::new(CtlKind::WAKE)).is_err()
                {
                    self.broken = true;
                }
            }
        }
        self.done.clear();
    }
}

/// A connection that has not sent ATTACH yet.
pub(super) struct Pending {
    pub(super) sock: CtlSock,
    pub(super) since: Nanos,
    /// When it last sent a message (or was accepted): the longest silent makes room first.
    pub(super) heard: Nanos,
    /// Order of acceptance: when the table is full, the oldest makes room.
    pub(super) seq: u64,
    /// The connection's `HELLO` and the engine's `HELLO_OK` to it, as sent: the transcript a
    /// TCP session's keys come from (`AUTH` passed: `sock.authenticated()`).
    pub(super) hello: Option<(CtlMsg, CtlMsg)>,
    /// The RDMA connection `RDMA_CONNECT` made (the `rdma` backend), until `ATTACH`.
    pub(super) link: Option<super::dma::rdma::RdmaLink>,
}

impl Pending {
    /// The engine's nonce (low half) this connection was given: the attach proof its
    /// host-owned rings must carry.
    pub(super) fn nonce(&self) -> Option<u64> {
        self.hello.as_ref().map(|(_, ok)| ok.c)
    }
}

/// The engine's polling loop state.
pub struct EngineLoop {
    pub(super) engine: Engine,
    /// The configuration it was started with (the runner, the fabric and the state machine each
    /// read their sections of it).
    pub(super) config: Config,
    pub(super) clock: Clock,
    pub(super) name: String,
    pub(super) listener: OwnedFd,
    /// The TCP control listener (`runner.listen_tcp`), and the port it is bound to.
    pub(super) tcp_listener: Option<(OwnedFd, u16)>,
    pub(super) epoll: OwnedFd,
    pub(super) hosts: Vec<Option<HostConn>>,
    /// Connections not attached yet (`max_pending_conns` slots; the slot is in the epoll token).
    pub(super) pending: Vec<Option<Pending>>,
    pub(super) pending_seq: u64,
    /// The DMA port: every host's registered memory, on its backend.
    pub(super) memory: HostMemory,
    pub(super) burst: Vec<SubmissionDescriptor>,
    /// COPYs in progress, in the order the engine asked for them.
    pub(super) copies: VecDeque<Copying>,
    /// Copies that ended this pass (answered to the engine after the sweep).
    pub(super) ended: Vec<(JobId, bool)>,
    pub(super) ctl_interval: Nanos,
    pub(super) attach_timeout: Nanos,
    pub(super) last_ctl: Nanos,
    pub(super) log_level: u8,
    pub(super) closer: super::closer::Closer,
    pub(super) stray: Vec<OwnedFd>,
    /// The fabric (`fabric = none`: absent).
    pub(super) net: Option<Net>,
    /// Doorbell values of the hosts armed for the current sleep (sized `max_hosts` once).
    pub(super) armed: Vec<u32>,
    /// Sleeps on the doorbells and waits on the fabric alone ([`EngineLoop::wait_on_fabric`]),
    /// logged at exit: where the engine's wake-ups come from.
    sleeps: (u64, u64),
    /// The CPU the loop's thread is pinned to (told to attaching hosts: `ATTACH_OK.e`).
    pub(super) cpu: Option<usize>,
    /// Where hosts' RDMA connections are made (`rdma` backend), opened at the first
    /// `RDMA_CONNECT`.
    pub(super) rdma: Option<Box<dyn super::dma::rdma::RdmaDevice>>,
}

impl EngineLoop {
    /// Listens on `@ringcast.<config.engine_name>`. `log_offset` lowers the log level (the
    /// in-process thread runner is quieter than the daemon).
    pub fn bind(config: Config, log_offset: u8) -> std::io::Result<Self> {
        if config.runner.engine_name.starts_with("tcp://") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an engine listens under a name; RINGCAST_LISTEN_TCP adds a TCP address",
            ));
        }
        let tcp_listener = match config.runner.listen_tcp.as_str() {
            "" => None,
            addr => {
                let fd = ctl::listen_tcp(addr)?;
                let port = ctl::local_port(std::os::fd::AsFd::as_fd(&fd)).unwrap_or(0);
                Some((fd, port))
            }
        };
        let listener = ctl::listen(&config.runner.engine_name).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                std::io::Error::new(
                    e.kind(),
                    format!("an engine named {:?} is already running", config.runner.engine_name),
                )
            } else {
                e
            }
        })?;
        let max_hosts = config.limits.max_hosts as usize;
        let networked = config.topology.fabric != crate::config::FabricKind::None;
        let engine = Engine::new(&config.engine(), crate::crc::crc32c, networked)
            .map_err(|s| std::io::Error::other(format!("world communicator refused: {s:?}")))?;
        let net = Net::new(&config, engine.world_group())?;
        // The listeners are in the control set: accepted from when readable (`accept.rs`).
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let tag = super::accept::LISTEN_TAG;
        epoll::add(&epoll, &listener, epoll::EventData::new_u64(tag), epoll::EventFlags::IN)?;
        if let Some((fd, _)) = &tcp_listener {
            epoll::add(&epoll, fd, epoll::EventData::new_u64(tag | 1), epoll::EventFlags::IN)?;
        }
        Ok(EngineLoop {
            listener,
            tcp_listener,
            epoll,
            name: config.runner.engine_name.clone(),
            burst: vec![SubmissionDescriptor::default(); config.runner.burst as usize],
            copies: VecDeque::with_capacity(max_hosts),
            ended: Vec::with_capacity(max_hosts),
            ctl_interval: config.runner.ctl_poll_us as Nanos * 1000,
            attach_timeout: config.runner.attach_timeout_ms as Nanos * 1_000_000,
            log_level: config.runner.log_level.saturating_sub(log_offset),
            memory: HostMemory::with_capacity(max_hosts * 8),
            hosts: (0..max_hosts).map(|_| None).collect(),
            pending: (0..config.runner.max_pending_conns).map(|_| None).collect(),
            pending_seq: 0,
            net,
            armed: Vec::with_capacity(max_hosts),
            sleeps: (0, 0),
            engine,
            config,
            clock: Clock::new(),
            closer: super::closer::Closer::spawn()?,
            stray: Vec::with_capacity(4),
            cpu: None,
            rdma: None,
            last_ctl: 0,
        })
    }

    /// The state machine (counters).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The TCP port hosts can attach on (`runner.listen_tcp`), if any.
    pub fn tcp_port(&self) -> Option<u16> {
        self.tcp_listener.as_ref().map(|(_, p)| *p)
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Engine name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Records the CPU the loop's thread is pinned to (the runner pinned it), which attaching
    /// hosts learn (`ATTACH_OK.e`).
    pub fn set_cpu(&mut self, cpu: Option<usize>) {
        self.cpu = cpu;
    }

    /// Shared-memory segments mapped right now (registered regions share them).
    pub fn mapped_segments(&self) -> usize {
        self.memory.mapped_segments()
    }

    /// Host address ranges registered by `cma` now.
    pub fn cma_ranges(&self) -> usize {
        self.memory.remote_ranges()
    }

    pub(super) fn log(&self, level: u8, msg: std::fmt::Arguments<'_>) {
        if self.log_level >= level {
            super::log::line(&self.name, level, msg);
        }
    }

    /// One pass over every host, the fabric and, when due, the control sockets. Returns true
    /// if it did work.
    pub fn poll_once(&mut self) -> bool {
        let now = self.clock.now();
        let mut work = false;
        for i in 0..self.hosts.len() {
            match self.take_descriptors(i, now) {
                Ok(w) => work |= w,
                Err(RingFault) => {
                    // A host that exited cleanly takes its memory with it: its DETACH may wait on
                    // the control socket, so that is read first. Still attached after it, the
                    // host broke the ring protocol or its memory went away under us.
                    self.serve_host(HostId(i as u32));
                    let fault = self.hosts[i].as_ref().and_then(|c| match &c.backend {
                        Backend::Remote(r) => r.fault(),
                        Backend::Mapped => None,
                    });
                    if let (Some(conn), Some(fault)) = (self.hosts[i].as_ref(), fault) {
                        // Its RDMA connection failed: that host alone is detached, told why.
                        self.log(1, format_args!("host {i}: {fault}; detaching it"));
                        let _ =
                            conn.sock.send_now(&CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::BACKEND));
                        self.detach(HostId(i as u32), Departure::Lost);
                    } else if let Some(conn) = self.hosts[i].as_ref() {
                        self.log(1, format_args!("host {i} broke the ring protocol or its rings became unreachable; detaching it"));
                        // Told why, if it is still there to hear it.
                        let _ = conn
                            .sock
                            .send_now(&CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::BAD_REQUEST));
                        self.detach(HostId(i as u32), Departure::Lost);
                    }
                }
            }
        }
        if let Some(net) = self.net.as_mut() {
            work |= net.receive(&mut self.engine, now, &mut self.memory.port());
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            // (The drain's own deadline falling due is no work: it would start the linger over.)
            work |= self.engine.handle_timeout(now);
        }
        work |= self.carry_out(now);
        work |= self.advance_copies(now, self.config.limits.dma_pass_bytes);
        // The clock is read again only when there is something to stamp: on an idle pass the
        // clock reads were a fifth of a polling loop's samples (2-node 2 B stream, perf).
        if self.hosts.iter().flatten().any(|c| !c.done.is_empty()) {
            let end = self.clock.now();
            for conn in self.hosts.iter_mut().flatten() {
                conn.publish(end);
            }
            for i in 0..self.hosts.len() {
                if self.hosts[i].as_ref().is_some_and(|c| c.broken) {
                    self.log(1, format_args!("host {i}: control connection cut mid-message; detaching it"));
                    self.detach(HostId(i as u32), Departure::Lost);
                }
            }
        }
        // Submission heads that no completion carried back this pass go now.
        for conn in self.hosts.iter_mut().flatten() {
            if let HostRings::Remote(r) = &mut conn.rings {
                // A failed write: the host's memory is gone, its hang-up detaches it.
                let _ = r.flush_head();
            }
        }
        if let Some(net) = self.net.as_mut() {
            net.flush();
        }
        if now.saturating_sub(self.last_ctl) >= self.ctl_interval {
            self.last_ctl = now;
            work |= self.poll_control(now);
        }
        work
    }

    /// Step 1 for host `i`: new descriptors, as many as there are free completion slots not
    /// reserved by its operations in flight or held for publication ([`Engine::admits`]: the
    /// reservation stays exact). `Err` when its submission ring is corrupt.
    fn take_descriptors(&mut self, i: usize, now: Nanos) -> Result<bool, RingFault> {
        let EngineLoop { hosts, engine, burst, .. } = self;
        let Some(conn) = hosts[i].as_mut() else {
            return Ok(false);
        };
        let host = HostId(i as u32);
        let cq_free = conn.rings.free_slots(burst.len()).saturating_sub(conn.done.len());
        let room = engine.admits(host, cq_free).min(burst.len());
        let n = if room > 0 { conn.rings.pop_batch(&mut burst[..room])? } else { 0 };
        for desc in &burst[..n] {
            engine.handle_descriptor(host, desc, now);
        }
        Ok(n > 0)
    }

    /// Step 3: carries out the engine's actions until it has none. True if there were any.
    pub(super) fn carry_out(&mut self, now: Nanos) -> bool {
        let EngineLoop { engine, net, hosts, memory, copies, .. } = self;
        let mut work = false;
        loop {
            // A run of frames goes to the fabric whole, lent from the engine's outbox: one
            // `sendmmsg` for a pass's frames on `udp` instead of a system call each.
            if let Some(n) = net.as_mut() {
                work |= n.send_frames(engine.poll_frames());
            }
            let Some(action) = engine.poll_action() else { break };
            work = true;
            match action {
                // Frames with no fabric to carry them (`fabric = none`) go nowhere.
                Action::Send { .. } | Action::Multicast { .. } => {}
                Action::Join { job, group } => {
                    let ok = net.as_mut().is_some_and(|n| n.join(&group));
                    engine.handle_join_done(job, ok, now);
                }
                Action::Leave { group } => {
                    if let Some(n) = net.as_mut() {
                        n.leave(&group);
                    }
                }
                Action::Dma { job, dma: Dma::Copy { host, src, dst, len, keys } } => {
                    if memory.overlap(src, dst, len) {
                        engine.handle_dma_done(job, false, now);
                    } else {
                        copies.push_back(Copying { job, host, keys, src, dst, len, done: 0, failed: false });
                    }
                }
                Action::Dma { job, dma: Dma::Load { src, len } } => {
                    // A root's message on the `mapped` backend: summed as it is loaded, so its
                    // frames are sealed without a pass over each payload.
                    let summed = engine
                        .staging_summed(job)
                        .filter(|load| load.bytes.len() as u64 == len)
                        .and_then(|load| memory.read_summed(src, load));
                    match summed {
                        Some(true) => engine.handle_dma_summed(job, now),
                        Some(false) => engine.handle_dma_done(job, false, now),
                        None => {
                            let ok = engine
                                .staging(job)
                                .is_some_and(|s| s.len() as u64 == len && memory.read(src, 0, s));
                            engine.handle_dma_done(job, ok, now);
                        }
                    }
                }
                Action::Dma { job, dma: Dma::Store { dst, len } } => {
                    let ok =
                        engine.staging(job).is_some_and(|s| s.len() as u64 == len && memory.write(dst, 0, s));
                    engine.handle_dma_done(job, ok, now);
                }
                Action::Complete { host, cqe, started } => {
                    if let Some(conn) = hosts.get_mut(host.0 as usize).and_then(Option::as_mut) {
                        conn.done.push(Completion { engine_ns: started, ..cqe });
                    } else {
                        engine.abandon(&cqe);
                    }
                }
            }
        }
        work
    }

    /// Moves the copies in progress, at most `budget` bytes per host, and tells the engine of
    /// those that ended (then carries out what that asks). True if any moved.
    fn advance_copies(&mut self, now: Nanos, budget: u64) -> bool {
        if self.copies.is_empty() {
            return false;
        }
        let mut budgets = [0u64; 0].to_vec();
        budgets.resize(self.hosts.len(), budget);
        let EngineLoop { copies, memory, ended, .. } = self;
        copies.retain_mut(|c| {
            let Some(b) = budgets.get_mut(c.host.0 as usize) else { return false };
            if c.advance(memory, b) {
                ended.push((c.job, !c.failed));
                false
            } else {
                true
            }
        });
        for (job, ok) in std::mem::take(&mut self.ended) {
            self.engine.handle_dma_done(job, ok, now);
        }
        self.carry_out(now);
        true
    }

    /// Runs until `stop` is set, backing off per the idle strategy when there is no work; then
    /// finishes what hosts queued, answers descriptors still in their rings with
    /// `EngineShutdown`, and detaches everyone.
    pub fn run(&mut self, stop: &std::sync::atomic::AtomicBool) {
        self.run_until_stopped(stop, || {});
    }

    /// [`EngineLoop::run`], calling `stopping` once `stop` is seen, before the drain.
    pub fn run_until_stopped(&mut self, stop: &std::sync::atomic::AtomicBool, stopping: impl FnOnce()) {
        let mut idle = super::idle::Idle::new(&self.config);
        // Relaxed: the flag carries no data, only "stop"; a late observation costs one pass.
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            self.step(&mut idle);
        }
        stopping();
        self.finish(&mut idle);
    }

    /// After the stop: the engine drains (`Engine::start_drain`) — it keeps serving while it
    /// owes its peers something or ranked hosts are attached, then answers for a quiet period
    /// if it synchronized others; how long is the engine's to say (`ringcast_proto`'s
    /// `engine/drain.rs`). Each pass that did work tells it so, and it says when it is drained;
    /// then shut down.
    pub(crate) fn finish(&mut self, idle: &mut super::idle::Idle) {
        self.engine.start_drain(self.clock.now());
        while self.net.is_some() {
            if self.engine.drained(self.clock.now()) {
                break;
            }
            if self.step(idle) {
                self.engine.drain_busy(self.clock.now());
            }
        }
        self.shutdown();
    }

    /// One pass, then the idle strategy's back-off if it found nothing: spin, yield, and then
    /// sleep on the doorbells (or nap, when the fabric cannot ring one). True if it did work.
    pub(crate) fn step(&mut self, idle: &mut super::idle::Idle) -> bool {
        if self.poll_once() {
            idle.busy();
            return true;
        }
        if idle.sleeping() {
            match self.park() {
                Some(true) => {
                    idle.busy();
                    return true;
                }
                Some(false) => return false, // slept
                None => {}                   // cannot sleep on doorbells now: nap
            }
        }
        idle.idle();
        false
    }

    /// Whether this engine cannot sleep on doorbells (its fabric cannot wake it, it serves
    /// more hosts than one wait can cover, or a host with host-owned rings, whose new work only
    /// a DMA poll finds): it naps instead.
    fn park_unavailable(&self) -> bool {
        let hosts = self.hosts.iter().flatten().count();
        hosts + 1 > ringcast_ring::doorbell::MAX_WAIT_ANY
            || self.net.as_ref().is_some_and(|n| n.bell().is_none())
            || self.hosts.iter().flatten().any(|c| c.rings.mapped().is_none())
    }

    /// Sleeps until a host posts, a peer publishes a frame for us, the protocol's next timer, or
    /// `PARK_MAX` (control requests wait that long at most). `None` if it cannot (see
    /// [`EngineLoop::park_unavailable`]); else whether the re-check after arming found work.
    pub(crate) fn park(&mut self) -> Option<bool> {
        if self.wait_on_fabric() {
            self.sleeps.1 += 1;
            return Some(false);
        }
        let (work, armed) = self.arm_park()?;
        if !work {
            self.sleeps.0 += 1;
            armed.sleep();
        }
        self.disarm_park();
        Some(work)
    }

    /// While every host it serves sleeps waiting on an operation of its own — a broadcast in
    /// flight, whose next step is a peer's datagram, not a post — the engine waits on its fabric
    /// directly ([`crate::fabric::Fabric::wait`]) instead of on the doorbells: on `udp` the
    /// kernel then wakes the engine when the datagram lands, where the doorbell thread took a
    /// wake-up of its own and then rang the engine's (issue 40: 2 B on `udp`, two sleepers
    /// between the socket and the host). [`FABRIC_WAIT_MAX`] at most, and only when no
    /// protocol timer is due within it (a post from another thread of a sleeping host, or a
    /// control request, waits that long at most). False if it did not wait (a host is awake and so
    /// free to post, the fabric cannot wait, a timer is due, or the
    /// engine cannot park at all: a host's work that only a DMA poll finds).
    fn wait_on_fabric(&mut self) -> bool {
        if self.park_unavailable() {
            return false;
        }
        // Not when a timer is due within the wait's unit (it would fire late).
        if self.engine.poll_timeout().is_some_and(|t| t.saturating_sub(self.clock.now()) < FABRIC_WAIT_MAX) {
            return false;
        }
        let mut hosts = 0;
        for (i, c) in self.hosts.iter_mut().enumerate() {
            if let Some(c) = c {
                // Asleep on its completion doorbell, with nothing posted or completed that it
                // has not seen, as well: a host that spins in its wait, runs between calls, or
                // was woken and has not run yet may post at any moment (a second non-blocking
                // call), and its doorbell is not among the fabric's readiness sources.
                if self.engine.in_flight(HostId(i as u32)) == 0 || !c.rings.host_asleep() {
                    return false;
                }
                hosts += 1;
            }
        }
        let Some(net) = self.net.as_ref().filter(|_| hosts > 0) else { return false };
        net.wait(std::time::Duration::from_nanos(FABRIC_WAIT_MAX)).is_some()
    }

    /// [`EngineLoop::park`] in halves, so that a thread-mode engine thread sleeps without the
    /// loop's lock (`runner::thread`): arms every host's submission doorbell and the fabric's,
    /// then re-checks with one pass; returns whether that pass found work, and the doorbells
    /// to sleep on (none when it did). `None` if it cannot park. [`EngineLoop::disarm_park`]
    /// must follow, whatever happened in between.
    pub(crate) fn arm_park(&mut self) -> Option<(bool, ArmedPark)> {
        if self.park_unavailable() {
            return None;
        }
        // 1. Arm: every host's submission doorbell, then the fabric's.
        self.armed.clear();
        for rings in self.hosts.iter().flatten().filter_map(|c| c.rings.mapped()) {
            self.armed.push(rings.sq.arm());
        }
        let fabric_seen = match self.net.as_ref() {
            Some(n) => match n.arm() {
                Some(v) => Some(v),
                None => {
                    n.disarm();
                    self.disarm_hosts();
                    return None; // held datagrams: not now
                }
            },
            None => None,
        };
        // 2. Re-check: anything published before its producer saw us armed is found here.
        let work = self.poll_once();
        let mut armed = ArmedPark { words: heapless::Vec::new(), limit: 0 };
        if !work {
            let now = self.clock.now();
            armed.limit = PARK_MAX;
            if let Some(t) = self.engine.poll_timeout() {
                armed.limit = armed.limit.min(t.saturating_sub(now));
            }
            for (rings, &seen) in
                self.hosts.iter().flatten().filter_map(|c| c.rings.mapped()).zip(&self.armed)
            {
                let _ = armed.words.push((rings.sq.bell(), seen));
            }
            if let (Some(bell), Some(seen)) = (self.net.as_ref().and_then(Net::bell), fabric_seen) {
                let _ = armed.words.push((bell, seen));
            }
        }
        Some((work, armed))
    }

    /// The end of a park: producers stop ringing.
    pub(crate) fn disarm_park(&self) {
        self.disarm_hosts();
        if let Some(n) = self.net.as_ref() {
            n.disarm();
        }
    }

    fn disarm_hosts(&self) {
        for rings in self.hosts.iter().flatten().filter_map(|c| c.rings.mapped()) {
            rings.sq.disarm();
        }
    }

    fn shutdown(&mut self) {
        let now = self.clock.now();
        // Copies finish; collectives not finished end with the engine.
        self.advance_copies(now, u64::MAX);
        self.engine.abort_collectives(StatusKind::EngineShutdown);
        self.carry_out(now);
        if let Some(net) = self.net.as_mut() {
            net.flush(); // the last datagrams' doorbells
        }
        let refused = Status::from(StatusKind::EngineShutdown);
        for i in 0..self.hosts.len() {
            let EngineLoop { hosts, burst, clock, .. } = self;
            let Some(conn) = hosts[i].as_mut() else {
                continue;
            };
            // Everything still in the ring is answered, as far as the completion ring has room.
            let now = clock.now();
            loop {
                let room =
                    conn.rings.free_slots(burst.len()).saturating_sub(conn.done.len()).min(burst.len());
                let n = conn.rings.pop_batch(&mut burst[..room]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                conn.done.extend(burst[..n].iter().map(|d| Completion {
                    engine_ns: now,
                    ..Completion::new(d.cookie, d.opcode, refused, 0)
                }));
            }
            conn.publish(now);
        }
        for i in 0..self.hosts.len() {
            self.detach(HostId(i as u32), Departure::Clean);
        }
        if let Some(net) = self.net.as_ref() {
            let (bells, fabric) = self.sleeps;
            self.log(
                2,
                format_args!(
                    "{}; slept on doorbells {bells}, on the fabric {fabric}",
                    net.describe(&self.engine)
                ),
            );
        }
    }
}
