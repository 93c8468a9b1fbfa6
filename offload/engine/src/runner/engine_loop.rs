//! The polling loop: drives the sans-IO [`Core`] against real rings and real shared memory.
//!
//! One pass ([`EngineLoop::poll_once`]):
//! 1. for every attached host, take up to `burst` descriptors from its submission ring — never
//!    more than its completion ring has room for, so no completion is ever dropped (engine-side
//!    back-pressure) — feed each to the core and carry out the actions in order (DMA, then the
//!    completion);
//! 2. every `ctl_poll_us`, one `poll(2)` over the listener and all control sockets: attach new
//!    hosts, (de)register memory, answer stats, and detach hosts that hung up or broke the ring
//!    protocol — freeing their slot and memory while every other host keeps being served.
//!
//! The data path makes no system call and no allocation: rings and DMA are plain memory access.
use super::clock::Clock;
use super::memory::SegmentTable;
use crate::config::Config;
use crate::core::{Action, Core, Departure, HostId, Nanos};
use crate::ctl::{self, Received};
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, RegionKey, Status, StatusKind, SubmissionDescriptor, ABI_VERSION};
use ringcast_ring::attach::{self, EngineRings};
use ringcast_ring::ShmSegment;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

struct HostConn {
    pid: u32,
    sock: OwnedFd,
    rings: EngineRings,
}

/// The engine's polling loop state.
pub struct EngineLoop {
    core: Core,
    clock: Clock,
    name: String,
    listener: OwnedFd,
    hosts: Vec<Option<HostConn>>,
    pending: Vec<OwnedFd>,
    segments: SegmentTable,
    burst: Vec<SubmissionDescriptor>,
    ctl_interval: Nanos,
    last_ctl: Nanos,
    dma_failed: bool,
    log_level: u8,
    ready: Vec<usize>,
}

impl EngineLoop {
    /// Listens on `@ringcast.<config.engine_name>`. `log_offset` lowers the log level (the
    /// in-process thread runner is quieter than the daemon).
    pub fn bind(config: Config, log_offset: u8) -> std::io::Result<Self> {
        let listener = ctl::listen(&config.engine_name).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "an engine named {:?} is already running",
                        config.engine_name
                    ),
                )
            } else {
                e
            }
        })?;
        let max_hosts = config.max_hosts as usize;
        Ok(EngineLoop {
            listener,
            name: config.engine_name.clone(),
            burst: vec![SubmissionDescriptor::default(); config.burst as usize],
            ctl_interval: config.ctl_poll_us as Nanos * 1000,
            log_level: config.log_level.saturating_sub(log_offset),
            segments: SegmentTable::with_capacity(max_hosts * 8),
            hosts: (0..max_hosts).map(|_| None).collect(),
            pending: Vec::with_capacity(max_hosts),
            ready: Vec::with_capacity(max_hosts * 2 + 1),
            core: Core::new(config),
            clock: Clock::new(),
            last_ctl: 0,
            dma_failed: false,
        })
    }

    /// The core (counters, config).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Engine name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn log(&self, level: u8, msg: std::fmt::Arguments<'_>) {
        if self.log_level >= level {
            eprintln!("ringcast-engine[{}]: {msg}", self.name);
        }
    }

    /// One pass over every host and, when due, the control sockets. Returns true if it did work.
    pub fn poll_once(&mut self) -> bool {
        let now = self.clock.now();
        let mut work = false;
        let mut lost: Option<HostId> = None;
        for i in 0..self.hosts.len() {
            let Some(conn) = self.hosts[i].as_mut() else {
                continue;
            };
            let room = conn.rings.cq.free_slots().min(self.burst.len());
            if room == 0 {
                continue;
            }
            let n = match conn.rings.sq.pop_batch(&mut self.burst[..room]) {
                Ok(n) => n,
                Err(_) => {
                    lost = Some(HostId(i as u32));
                    continue;
                }
            };
            work |= n > 0;
            for d in 0..n {
                let desc = self.burst[d];
                self.core.submit(HostId(i as u32), &desc, now);
                self.run_actions();
            }
        }
        if let Some(h) = lost {
            self.log(
                1,
                format_args!("host {} broke the ring protocol; detaching it", h.0),
            );
            self.detach(h, Departure::Lost);
        }
        if now.saturating_sub(self.last_ctl) >= self.ctl_interval {
            self.last_ctl = now;
            work |= self.poll_control();
        }
        work
    }

    fn run_actions(&mut self) {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Dma { src, dst, len, .. } => {
                    // The core checked the ranges against the registration; a failure here
                    // means the mapping and the registration disagree — report, never copy.
                    self.dma_failed = !self.segments.dma(src, dst, len);
                }
                Action::Complete {
                    host,
                    mut cqe,
                    started,
                } => {
                    if std::mem::take(&mut self.dma_failed) {
                        cqe.status = Status::from(StatusKind::OutOfBounds);
                        cqe.bytes = 0;
                    }
                    cqe.engine_ns = self.clock.now().saturating_sub(started);
                    if let Some(conn) = self.hosts.get_mut(host.0 as usize).and_then(Option::as_mut)
                    {
                        // Room was reserved before the descriptor was taken.
                        let pushed = conn.rings.cq.try_push(cqe);
                        debug_assert!(
                            pushed.is_ok(),
                            "completion ring overflow despite reservation"
                        );
                    }
                }
            }
        }
    }

    /// Handles control traffic; true if anything happened.
    fn poll_control(&mut self) -> bool {
        let mut work = false;
        // New connections wait in `pending` until they send ATTACH.
        while self.pending.len() < self.hosts.len() {
            match ctl::accept(self.listener.as_fd()) {
                Ok(Some(fd)) => {
                    self.pending.push(fd);
                    work = true;
                }
                Ok(None) => break,
                Err(e) => {
                    self.log(1, format_args!("accept failed: {e}"));
                    break;
                }
            }
        }
        let host_ids: Vec<usize> = (0..self.hosts.len())
            .filter(|&i| self.hosts[i].is_some())
            .collect();
        {
            let mut socks: Vec<BorrowedFd<'_>> = self.pending.iter().map(|f| f.as_fd()).collect();
            socks.extend(
                host_ids
                    .iter()
                    .filter_map(|&i| self.hosts[i].as_ref().map(|c| c.sock.as_fd())),
            );
            if socks.is_empty() || ctl::ready(&socks, &mut self.ready).is_err() {
                return work;
            }
        }
        let ready = std::mem::take(&mut self.ready);
        let npending = self.pending.len();
        // Host sockets first (indices stay valid), then pending ones from the back.
        for &r in ready.iter().filter(|&&r| r >= npending) {
            self.serve_host(HostId(host_ids[r - npending] as u32));
            work = true;
        }
        for &r in ready.iter().filter(|&&r| r < npending).rev() {
            let sock = self.pending.swap_remove(r);
            self.serve_pending(sock);
            work = true;
        }
        self.ready = ready;
        work
    }

    fn serve_pending(&mut self, sock: OwnedFd) {
        let msg = match ctl::recv(sock.as_fd()) {
            Ok(Received::Msg(m, _)) => m,
            Ok(Received::Empty) => {
                self.pending.push(sock);
                return;
            }
            _ => return, // closed or garbage before attaching: drop the connection
        };
        let reply_err = |status: CtlStatus| {
            let _ = ctl::send(sock.as_fd(), &CtlMsg::error(msg.kind, status), None);
        };
        if msg.kind != CtlKind::ATTACH {
            return reply_err(CtlStatus::BAD_REQUEST);
        }
        if msg.version != ABI_VERSION {
            self.log(
                1,
                format_args!(
                    "refused attach: host ABI {} != engine ABI {ABI_VERSION}",
                    msg.version
                ),
            );
            let mut m = CtlMsg::error(msg.kind, CtlStatus::ABI_MISMATCH);
            m.b = ABI_VERSION;
            let _ = ctl::send(sock.as_fd(), &m, None);
            return;
        }
        let cfg = self.core.config();
        let entries = if msg.b == 0 { cfg.ring_entries } else { msg.b };
        if !entries.is_power_of_two() || entries < 2 || entries > cfg.max_ring_entries {
            return reply_err(CtlStatus::LIMIT);
        }
        let now = self.clock.now();
        let id = match self.core.attach_host(now) {
            Ok(id) => id,
            Err(status) => return reply_err(status),
        };
        let rings = match attach::create(id.0, entries) {
            Ok(r) => r,
            Err(e) => {
                self.log(
                    1,
                    format_args!("attach segment for host {} failed: {e}", id.0),
                );
                self.core.detach_host(id, Departure::Clean, 0, now);
                return reply_err(CtlStatus::MAP_FAILED);
            }
        };
        let pid = ctl::peer_pid(sock.as_fd()).unwrap_or(msg.a);
        let mut ok = CtlMsg::new(CtlKind::ATTACH_OK);
        ok.a = id.0;
        ok.b = std::process::id();
        ok.c = rings.segment.len() as u64;
        if ctl::send(sock.as_fd(), &ok, Some(rings.segment.fd())).is_err() {
            self.core.detach_host(id, Departure::Lost, 0, now);
            return;
        }
        self.log(
            2,
            format_args!("host {} (pid {pid}) attached, rings of {entries}", id.0),
        );
        self.hosts[id.0 as usize] = Some(HostConn { pid, sock, rings });
    }

    fn serve_host(&mut self, id: HostId) {
        // Bounded: a host cannot keep the loop in its control handling.
        for _ in 0..16 {
            let Some(conn) = self.hosts[id.0 as usize].as_ref() else {
                return;
            };
            let received = ctl::recv(conn.sock.as_fd());
            let (msg, fd) = match received {
                Ok(Received::Msg(m, fd)) => (m, fd),
                Ok(Received::Empty) => return,
                Ok(Received::Closed) | Err(_) => return self.detach(id, Departure::Lost),
                Ok(Received::Malformed) => {
                    self.log(1, format_args!("host {}: malformed control message", id.0));
                    self.reply(id, CtlMsg::error(CtlKind(0), CtlStatus::BAD_REQUEST), None);
                    continue;
                }
            };
            let reply = match msg.kind {
                CtlKind::REGISTER => self.register(id, &msg, fd),
                CtlKind::DEREGISTER => self.deregister(id, RegionKey(msg.a)),
                CtlKind::STATS => {
                    let c = self.core.counters();
                    let mut m = CtlMsg::new(CtlKind::STATS_OK);
                    m.a = self.core.hosts_attached_now() as u32;
                    m.b = c.hosts_lost as u32;
                    m.c = c.completed_ok;
                    m.d = c.completed_err;
                    m.e = c.dropped_in_flight;
                    m
                }
                CtlKind::DETACH => return self.detach(id, Departure::Clean),
                other => CtlMsg::error(other, CtlStatus::BAD_REQUEST),
            };
            if reply.kind == CtlKind::ERROR {
                self.log(
                    1,
                    format_args!(
                        "host {}: refused {:?}: {}",
                        id.0,
                        msg.kind,
                        reply.status.message()
                    ),
                );
            }
            self.reply(id, reply, None);
        }
    }

    fn reply(&mut self, id: HostId, msg: CtlMsg, fd: Option<BorrowedFd<'_>>) {
        let failed = match self.hosts[id.0 as usize].as_ref() {
            Some(conn) => ctl::send(conn.sock.as_fd(), &msg, fd).is_err(),
            None => false,
        };
        if failed {
            self.detach(id, Departure::Lost);
        }
    }

    fn register(&mut self, id: HostId, msg: &CtlMsg, fd: Option<OwnedFd>) -> CtlMsg {
        let err = |s| CtlMsg::error(CtlKind::REGISTER, s);
        let Some(fd) = fd else {
            return err(CtlStatus::BAD_REQUEST);
        };
        // Only a memfd sealed against shrinking can be mapped safely: otherwise the host could
        // truncate it under the engine and turn a DMA into SIGBUS.
        let seg = match ShmSegment::from_sealed_fd(fd) {
            Ok(s) => s,
            Err(e) => {
                self.log(
                    1,
                    format_args!("host {}: cannot map region segment: {e}", id.0),
                );
                return err(CtlStatus::MAP_FAILED);
            }
        };
        let seg_len = seg.len() as u64;
        let handle = self.segments.insert(seg);
        match self
            .core
            .register(id, handle, seg_len, msg.d, msg.e, Access(msg.a))
        {
            Ok(key) => {
                self.log(
                    2,
                    format_args!(
                        "host {}: registered {} bytes as key {:#x}",
                        id.0, msg.e, key.0
                    ),
                );
                let mut m = CtlMsg::new(CtlKind::REGISTER_OK);
                m.a = key.0;
                m
            }
            Err(status) => {
                self.segments.remove(handle);
                err(status)
            }
        }
    }

    fn deregister(&mut self, id: HostId, key: RegionKey) -> CtlMsg {
        match self.core.deregister(id, key) {
            Ok(seg) => {
                self.segments.remove(seg);
                let mut m = CtlMsg::new(CtlKind::DEREGISTER_OK);
                m.a = key.0;
                m
            }
            Err(status) => CtlMsg::error(CtlKind::DEREGISTER, status),
        }
    }

    fn detach(&mut self, id: HostId, how: Departure) {
        let Some(mut conn) = self.hosts[id.0 as usize].take() else {
            return;
        };
        let in_flight = conn.rings.sq.len().unwrap_or(0) as u64;
        let now = self.clock.now();
        for seg in self.core.detach_host(id, how, in_flight, now) {
            self.segments.remove(seg);
        }
        let level = if how == Departure::Lost { 1 } else { 2 };
        self.log(
            level,
            format_args!(
                "host {} (pid {}) {}; {in_flight} descriptors dropped in flight",
                id.0,
                conn.pid,
                match how {
                    Departure::Lost => "went away",
                    Departure::Clean => "detached",
                }
            ),
        );
    }

    /// Runs until `stop` is set, backing off per the idle strategy when there is no work.
    pub fn run(&mut self, stop: &std::sync::atomic::AtomicBool) {
        let mut idle = super::idle::Idle::new(self.core.config());
        // Relaxed: the flag carries no data, only "stop"; a late observation costs one pass.
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if self.poll_once() {
                idle.busy();
            } else {
                idle.idle();
            }
        }
        let hosts: Vec<HostId> = (0..self.hosts.len())
            .filter(|&i| self.hosts[i].is_some())
            .map(|i| HostId(i as u32))
            .collect();
        for h in hosts {
            self.detach(h, Departure::Clean);
        }
    }
}
