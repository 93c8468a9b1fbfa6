//! The control path of the polling loop for connections entitled to attach (`accept.rs` lets
//! them in): attach (mapped or host-owned rings), then the control requests of attached hosts —
//! (de)register (a memfd or an address range), stats, detach — and the departure of hosts that
//! hung up, broke the ring protocol or sent a message that failed its MAC, freeing their slot
//! and memory while every other host keeps being served. The data path is `engine_loop.rs`;
//! this runs every `ctl_poll_us`.
//!
//! A host-owned-ring attach also proves the memory it names is its own: the ring header there
//! must carry the engine's nonce.
use super::dma::cma::Process;
use super::dma::rdma::RdmaLink;
use super::dma::rings::{HostRings, RemoteError, RemoteRings};
use super::dma::{Backend, HostMappings, Remote};
use super::engine_loop::{EngineLoop, HostConn, Pending};
use crate::config::{DmaMode, LocalRank};
use crate::ctl::{self, CtlSock, Received};
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, RegionKey, ABI_VERSION};
use ringcast_proto::intake::{Departure, HostId};
use ringcast_ring::attach;
use rustix::event::epoll;
use std::os::fd::OwnedFd;

/// Control messages served per host per control poll (a host cannot monopolise the loop).
const CTL_PER_HOST: usize = 16;

impl EngineLoop {
    /// `ATTACH` from a connection entitled to it: builds (mapped) or checks (host-owned) its
    /// rings and makes it a host.
    pub(super) fn attach(&mut self, p: Pending, msg: &CtlMsg) {
        let refuse = |sock: &CtlSock, status: CtlStatus, b: u32| {
            let mut m = CtlMsg::error(msg, status);
            m.b = b;
            let _ = sock.send_now(&m);
        };
        let nonce = p.nonce();
        let sock = p.sock;
        let cfg = &self.config;
        let host_owned = msg.d != 0 || msg.e != 0;
        let dma = cfg.runner.dma;
        let rdma = p.link.is_some();
        // What the engine serves, and what a connection can carry: no descriptor crosses TCP;
        // a host that connected by RDMA attaches host-owned rings by RDMA.
        let served = match (host_owned, rdma) {
            (false, false) => matches!(dma, DmaMode::Auto | DmaMode::Mapped) && !sock.is_tcp(),
            (true, false) => matches!(dma, DmaMode::Auto | DmaMode::Cma),
            (true, true) => matches!(dma, DmaMode::Auto | DmaMode::Rdma),
            (false, true) => false,
        };
        if !served {
            self.log(1, format_args!("refused attach: DMA backend not served (engine: {dma})"));
            return refuse(&sock, CtlStatus::BACKEND, 0);
        }
        let entries = if msg.b == 0 { cfg.limits.ring_entries } else { msg.b };
        if !entries.is_power_of_two() || entries < 2 || entries > cfg.limits.max_ring_entries {
            return refuse(&sock, CtlStatus::LIMIT, cfg.limits.max_ring_entries);
        }
        // The peer's own pid where the socket can tell it; over TCP the claim, which the nonce
        // in the ring header at the named address then proves.
        // (An `rdma` host's `a` is its rings' rkey: its pid means nothing across the boundary.)
        let pid = match (rdma, sock.is_tcp()) {
            (true, _) => 0,
            (false, true) => msg.a,
            (false, false) => ctl::peer_pid(sock.fd()).unwrap_or(msg.a),
        };
        let rings = if host_owned {
            let Some(nonce) = nonce else {
                return refuse(&sock, CtlStatus::UNAUTHORIZED, 0);
            };
            // A claimed pid (TCP) is never the engine itself — its memory holds other hosts'
            // data, and a host could have placed the nonce in it by broadcasting it — nor init.
            // (Over the Unix socket the kernel vouches for the pid: a thread-mode host is in the
            // engine's own process.)
            let remote = if let Some(link) = p.link {
                // The rings' region, exposed under the rkey `a` carries.
                let remote = Remote::rdma(link);
                if !remote.expose(msg.d, msg.e, msg.a) {
                    return refuse(&sock, CtlStatus::BAD_REQUEST, 0);
                }
                remote
            } else {
                let Ok(raw) = i32::try_from(pid) else {
                    return refuse(&sock, CtlStatus::BAD_REQUEST, 0);
                };
                if sock.is_tcp() && (pid == std::process::id() || raw <= 1) {
                    self.log(1, format_args!("refused attach naming pid {pid}"));
                    return refuse(&sock, CtlStatus::UNAUTHORIZED, 0);
                }
                match Process::open(nix::unistd::Pid::from_raw(raw)) {
                    Ok(p) => Remote::Cma(p),
                    Err(e) => {
                        self.log(1, format_args!("refused attach of pid {pid}: {e}"));
                        return refuse(&sock, CtlStatus::BACKEND, 0);
                    }
                }
            };
            match RemoteRings::open(remote, msg.d, msg.e, nonce, cfg.limits.max_ring_entries) {
                Ok(r) if r.entries() as u32 == entries => Some(r),
                Ok(_) => return refuse(&sock, CtlStatus::BAD_REQUEST, 0),
                Err(e) => {
                    self.log(1, format_args!("refused attach of pid {pid}: {e}"));
                    let status = match e {
                        RemoteError::Header(ringcast_ring::attach::AttachError::Header(why))
                            if why.starts_with("attach proof") =>
                        {
                            CtlStatus::UNAUTHORIZED
                        }
                        _ => CtlStatus::BACKEND,
                    };
                    return refuse(&sock, status, 0);
                }
            }
        } else {
            None
        };
        let now = self.clock.now();
        let claim = match msg.c {
            0 => LocalRank::Auto,
            u64::MAX => LocalRank::None,
            r => LocalRank::Fixed(u32::try_from(r - 1).unwrap_or(u32::MAX)),
        };
        let id = match self.engine.attach_host(claim, now) {
            Ok(id) => id,
            Err(status) => return refuse(&sock, status, 0),
        };
        let fail = |this: &mut Self, status| {
            this.engine.refuse_host(id, Departure::Clean, now);
            refuse(&sock, status, 0);
        };
        let (rings, backend) = match rings {
            Some(r) => {
                let remote = r.process().clone();
                (HostRings::Remote(r), Backend::Remote(remote))
            }
            None => match attach::create(id.0, entries) {
                Ok(r) => (HostRings::Mapped(r), Backend::Mapped),
                Err(e) => {
                    self.log(1, format_args!("attach segment for host {} failed: {e}", id.0));
                    return fail(self, CtlStatus::MAP_FAILED);
                }
            },
        };
        if epoll::modify(
            &self.epoll,
            sock.fd(),
            epoll::EventData::new_u64(id.0 as u64),
            epoll::EventFlags::IN,
        )
        .is_err()
        {
            return fail(self, CtlStatus::MAP_FAILED);
        }
        let mut ok = CtlMsg::reply(msg, CtlKind::ATTACH_OK);
        ok.a = id.0;
        ok.b = std::process::id();
        let local = self.engine.core().local_rank(id);
        ok.d = local.map_or(0, |l| u64::from(l) + 1);
        ok.e = self.cpu.map_or(0, |c| c as u64 + 1);
        let sent = match &rings {
            HostRings::Mapped(r) => {
                ok.c = r.segment.len() as u64;
                sock.send(&ok, Some(r.segment.fd()))
            }
            HostRings::Remote(_) => {
                ok.c = msg.e;
                sock.send_now(&ok)
            }
        };
        if sent.is_err() {
            self.engine.refuse_host(id, Departure::Lost, now);
            return;
        }
        self.engine.host_arrived(id);
        let how = match &backend {
            Backend::Mapped => "mapped rings".to_string(),
            Backend::Remote(r) => format!("host-owned rings by {}", r.path()),
        };
        let via = if sock.is_tcp() { "TCP" } else { "Unix socket" };
        self.log(
            2,
            format_args!(
                "host {} (pid {pid}) attached over {via} as local rank {local:?}, {how} of {entries}",
                id.0
            ),
        );
        let done = Vec::with_capacity(entries as usize);
        self.hosts[id.0 as usize] =
            Some(HostConn { pid, sock, backend, rings, done, maps: HostMappings::default(), broken: false });
    }

    pub(super) fn serve_host(&mut self, id: HostId) {
        for _ in 0..CTL_PER_HOST {
            let Some(conn) = self.hosts.get_mut(id.0 as usize).and_then(Option::as_mut) else {
                return;
            };
            let received = conn.sock.recv(&mut self.stray);
            self.closer.dispose_all(&mut self.stray);
            let (msg, fd) = match received {
                Ok(Received::Msg(m, fd)) => (m, fd),
                Ok(Received::Empty) => return,
                Ok(Received::Closed) | Err(_) => return self.detach(id, Departure::Lost),
                Ok(Received::Forged) => {
                    // Changed, replayed or reordered on the way: said (sealed, so the host
                    // knows it is its engine speaking) and the connection ends.
                    self.log(1, format_args!("host {}: a control message failed its MAC: detached", id.0));
                    self.reply(id, CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::UNAUTHORIZED));
                    return self.detach(id, Departure::Lost);
                }
                Ok(Received::Malformed) => {
                    self.log(1, format_args!("host {}: malformed control message", id.0));
                    self.reply(id, CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::BAD_REQUEST));
                    // A TCP stream cut wrong stays wrong: every later message would be too.
                    if self.hosts[id.0 as usize].as_ref().is_some_and(|c| c.sock.is_tcp()) {
                        return self.detach(id, Departure::Lost);
                    }
                    continue;
                }
            };
            // Only REGISTER carries a descriptor; any other is closed off the loop.
            let fd = match (msg.kind, fd) {
                (CtlKind::REGISTER, fd) => fd,
                (_, Some(fd)) => {
                    self.closer.dispose(fd);
                    None
                }
                (_, None) => None,
            };
            // Another ABI version or a reserved field set: refused whatever the kind.
            if let Some(status) = msg.header_error() {
                if let Some(fd) = fd {
                    self.closer.dispose(fd);
                }
                let mut m = CtlMsg::error(&msg, status);
                if status == CtlStatus::ABI_MISMATCH {
                    m.b = ABI_VERSION;
                }
                self.log(1, format_args!("host {}: refused {:?}: {}", id.0, msg.kind, status.message()));
                self.reply(id, m);
                continue;
            }
            let reply = match msg.kind {
                CtlKind::REGISTER => self.register(id, &msg, fd),
                CtlKind::REGISTER_ADDR => self.register_addr(id, &msg),
                CtlKind::DEREGISTER => self.deregister(id, &msg),
                CtlKind::STATS => {
                    let c = self.engine.counters();
                    let mut m = CtlMsg::reply(&msg, CtlKind::STATS_OK);
                    m.a = self.engine.core().hosts_attached_now() as u32;
                    m.b = c.hosts_lost as u32;
                    m.c = c.completed_ok;
                    m.d = c.completed_err;
                    m.e = c.dropped_in_flight;
                    m
                }
                CtlKind::NET_STATS => match self.net.as_ref().map(|n| n.stats(&self.engine)) {
                    Some(n) => {
                        let mut m = CtlMsg::reply(&msg, CtlKind::NET_STATS_OK);
                        m.a = u32::try_from(n.syncs).unwrap_or(u32::MAX);
                        m.b = u32::try_from(n.overrun).unwrap_or(u32::MAX);
                        m.c = n.crc_drops;
                        m.d = n.other_drops;
                        m.e = n.repair_frames;
                        m
                    }
                    None => CtlMsg::error(&msg, CtlStatus::BAD_REQUEST),
                },
                CtlKind::COMMS => match self.net.as_ref().map(|n| n.comm_stats(&self.engine)) {
                    Some(s) => {
                        let mut m = CtlMsg::reply(&msg, CtlKind::COMMS_OK);
                        m.a = s.alive;
                        m.b = s.groups;
                        m.c = s.created;
                        m.d = s.dropped;
                        m.e = s.freeing;
                        m
                    }
                    None => CtlMsg::error(&msg, CtlStatus::BAD_REQUEST),
                },
                CtlKind::COUNTERS => {
                    let all = super::counters::snapshot(&self.engine, self.net.as_ref());
                    let mut m = CtlMsg::reply(&msg, CtlKind::COUNTERS_OK);
                    m.a = msg.a;
                    m.b = all.len() as u32;
                    let at = |k: u32| all.get(msg.a.saturating_add(k) as usize).copied().unwrap_or(0);
                    (m.c, m.d, m.e) = (at(0), at(1), at(2));
                    m
                }
                CtlKind::COMM_LIST => super::counters::comm_list_reply(&self.engine, &msg),
                CtlKind::FINALIZE => {
                    let now = self.clock.now();
                    self.engine.finalize_host(id, now);
                    CtlMsg::reply(&msg, CtlKind::FINALIZE_OK)
                }
                CtlKind::DETACH => return self.detach(id, Departure::Clean),
                _ => CtlMsg::error(&msg, CtlStatus::BAD_REQUEST),
            };
            if reply.kind == CtlKind::ERROR {
                self.log(
                    1,
                    format_args!("host {}: refused {:?}: {}", id.0, msg.kind, reply.status.message()),
                );
            }
            self.reply(id, reply);
        }
    }

    fn reply(&mut self, id: HostId, msg: CtlMsg) {
        let failed = match self.hosts[id.0 as usize].as_ref() {
            // Never block on a host: one whose socket buffer is full is not reading its replies.
            Some(conn) => conn.sock.send_now(&msg).is_err(),
            None => false,
        };
        if failed {
            self.detach(id, Departure::Lost);
        }
    }

    fn register(&mut self, id: HostId, msg: &CtlMsg, fd: Option<OwnedFd>) -> CtlMsg {
        let err = |s| CtlMsg::error(msg, s);
        let Some(fd) = fd else {
            return err(CtlStatus::BAD_REQUEST);
        };
        let budget = self.config.limits.max_host_bytes;
        let EngineLoop { hosts, memory, engine, closer, .. } = self;
        let Some(conn) = hosts[id.0 as usize].as_mut() else {
            closer.dispose(fd);
            return err(CtlStatus::BAD_REQUEST);
        };
        // A host-owned-ring host registers by address: the engine maps nothing of it.
        if !matches!(conn.backend, Backend::Mapped) {
            closer.dispose(fd);
            return err(CtlStatus::BACKEND);
        }
        // Only a sealed memfd is mapped (see SegmentTable::acquire); anything else goes back
        // to be closed off the loop.
        let (handle, seg_len) = match memory.mapped().acquire(fd, &mut conn.maps, budget) {
            Ok(x) => x,
            Err((status, fd)) => {
                if let Some(fd) = fd {
                    closer.dispose(fd);
                }
                return err(status);
            }
        };
        match engine.register(id, handle, seg_len, msg.d, msg.e, Access(msg.a)) {
            Ok(key) => {
                let mut m = CtlMsg::reply(msg, CtlKind::REGISTER_OK);
                m.a = key.0;
                self.log(2, format_args!("host {}: registered {} bytes as key {:#x}", id.0, msg.e, key.0));
                m
            }
            Err(status) => {
                memory.release(handle, &mut conn.maps);
                err(status)
            }
        }
    }

    /// `REGISTER_ADDR`: `e` bytes at address `c` of a `cma` or `rdma` host's memory (`rdma`:
    /// under rkey `b`).
    fn register_addr(&mut self, id: HostId, msg: &CtlMsg) -> CtlMsg {
        let err = |s| CtlMsg::error(msg, s);
        let budget = self.config.limits.max_host_bytes;
        let EngineLoop { hosts, memory, engine, .. } = self;
        let Some(conn) = hosts[id.0 as usize].as_mut() else {
            return err(CtlStatus::BAD_REQUEST);
        };
        let Backend::Remote(remote) = &conn.backend else {
            return err(CtlStatus::BACKEND);
        };
        if msg.e == 0 || msg.c.checked_add(msg.e).is_none() {
            return err(CtlStatus::BAD_REQUEST);
        }
        // An `rdma` host's range is exposed under the rkey in `b` (released with it).
        if !remote.expose(msg.c, msg.e, msg.b) {
            return err(CtlStatus::LIMIT);
        }
        let (handle, len) = match memory.ranges().acquire(remote, msg.c, msg.e, msg.b, &mut conn.maps, budget)
        {
            Ok(x) => x,
            Err(status) => {
                remote.withdraw(msg.c, msg.e, msg.b);
                return err(status);
            }
        };
        match engine.register(id, handle, len, 0, len, Access(msg.a)) {
            Ok(key) => {
                let mut m = CtlMsg::reply(msg, CtlKind::REGISTER_OK);
                m.a = key.0;
                self.log(
                    2,
                    format_args!("host {}: registered {len} bytes at {:#x} as key {:#x}", id.0, msg.c, key.0),
                );
                m
            }
            Err(status) => {
                memory.release(handle, &mut conn.maps);
                err(status)
            }
        }
    }

    /// `RDMA_CONNECT`: a queue pair connected to the host's (the device opened at the first
    /// request), and the reply carrying its address; `BACKEND` when the engine does not serve
    /// `rdma` or has no device, `BAD_REQUEST` for an address that cannot be one.
    pub(super) fn rdma_connect(&mut self, msg: &CtlMsg) -> Result<(RdmaLink, CtlMsg), CtlStatus> {
        if !matches!(self.config.runner.dma, DmaMode::Auto | DmaMode::Rdma) {
            return Err(CtlStatus::BACKEND);
        }
        let host = ctl::QpAddress::get(msg).ok_or(CtlStatus::BAD_REQUEST)?;
        if self.rdma.is_none() {
            match open_rdma_device(&self.config) {
                Ok(d) => self.rdma = Some(d),
                Err(e) => {
                    self.log(1, format_args!("refused RDMA_CONNECT: {e}"));
                    return Err(CtlStatus::BACKEND);
                }
            }
        }
        let device = self.rdma.as_mut().ok_or(CtlStatus::BACKEND)?;
        match device.connect(&host) {
            Ok((port, ours)) => {
                let mut ok = CtlMsg::reply(msg, CtlKind::RDMA_CONNECT_OK);
                ours.put(&mut ok);
                self.log(2, format_args!("RDMA connection to QP {:#x} as QP {:#x}", host.qpn, ours.qpn));
                Ok((RdmaLink::new(port), ok))
            }
            Err(e) => {
                self.log(1, format_args!("refused RDMA_CONNECT to QP {:#x}: {e}", host.qpn));
                Err(CtlStatus::BACKEND)
            }
        }
    }

    fn deregister(&mut self, id: HostId, msg: &CtlMsg) -> CtlMsg {
        let EngineLoop { hosts, memory, engine, copies, .. } = self;
        let Some(conn) = hosts[id.0 as usize].as_mut() else {
            return CtlMsg::error(msg, CtlStatus::BAD_REQUEST);
        };
        let key = RegionKey(msg.a);
        match engine.deregister(id, key) {
            Ok(seg) => {
                // Copies on this region fail rather than keep moving bytes into memory the host
                // has taken back (another registration may keep it mapped).
                for c in copies.iter_mut().filter(|c| c.host == id && c.keys.contains(&key)) {
                    c.failed = true;
                }
                memory.release(seg, &mut conn.maps);
                let mut m = CtlMsg::reply(msg, CtlKind::DEREGISTER_OK);
                m.a = msg.a;
                m
            }
            Err(status) => CtlMsg::error(msg, status),
        }
    }

    pub(super) fn detach(&mut self, id: HostId, how: Departure) {
        let Some(mut conn) = self.hosts.get_mut(id.0 as usize).and_then(Option::take) else {
            return;
        };
        // Its operations die with the host: their memory is about to be unmapped. The engine
        // counted those it finished as completed; they move to the dropped count.
        let queued = (self.engine.in_flight(id) + conn.done.len()) as u64;
        for c in conn.done.drain(..) {
            self.engine.abandon(&c);
        }
        self.copies.retain(|c| c.host != id);
        let unread = conn.rings.unread();
        let in_flight = unread + queued;
        let now = self.clock.now();
        // The collectives must let go of its buffers before they are unmapped.
        for seg in self.engine.detach_host(id, how, unread, now) {
            self.memory.release(seg, &mut conn.maps);
        }
        self.carry_out(now);
        let level = if how == Departure::Lost { 1 } else { 2 };
        let what = if how == Departure::Lost { "went away" } else { "detached" };
        self.log(
            level,
            format_args!(
                "host {} (pid {}) {what}; {in_flight} descriptors dropped in flight",
                id.0, conn.pid
            ),
        );
    }
}

/// The RDMA device of the `verbs` section (feature `verbs`; without it, none).
#[cfg(feature = "verbs")]
fn open_rdma_device(config: &crate::config::Config) -> Result<Box<dyn super::dma::rdma::RdmaDevice>, String> {
    Ok(Box::new(super::dma::rdma::device::VerbsDevice::open(&config.verbs)?))
}

#[cfg(not(feature = "verbs"))]
fn open_rdma_device(_: &crate::config::Config) -> Result<Box<dyn super::dma::rdma::RdmaDevice>, String> {
    Err("built without the verbs feature (rdma-core)".into())
}
