//! The control path of the polling loop: connections accepted on the engine's abstract socket
//! and on its TCP address, those that do not ATTACH in time expired, and the control requests of
//! attached hosts served from one `epoll_wait` — hello/auth, attach (mapped or host-owned
//! rings), (de)register (a memfd or an address range), stats, detach — and the departure of
//! hosts that hung up or broke the ring protocol, freeing their slot and memory while every
//! other host keeps being served. The data path is `engine_loop.rs`; this runs every
//! `ctl_poll_us`.
//!
//! Who may attach: over the Unix socket, processes of this user (or root), by their peer
//! credentials; over TCP, whoever answers the connection's nonce with the job secret's tag
//! (`AUTH`) — nothing else crosses a network to vouch for a peer. A host-owned-ring attach also
//! proves the memory it names is its own: the ring header there must carry the nonce.
use super::dma::cma::Process;
use super::dma::rdma::RdmaLink;
use super::dma::rings::{HostRings, RemoteError, RemoteRings};
use super::dma::{Backend, HostMappings, Remote};
use super::engine_loop::{EngineLoop, HostConn, Pending};
use crate::config::{DmaMode, LocalRank};
use crate::ctl::{self, CtlSock, Received};
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, RegionKey, ABI_VERSION};
use ringcast_proto::intake::{Departure, HostId, Nanos};
use ringcast_ring::attach;
use rustix::event::{epoll, Timespec};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

/// epoll tokens of connections that have not attached yet carry this bit; hosts use their id.
const PENDING_TAG: u64 = 1 << 32;
/// Control messages served per host per control poll (a host cannot monopolise the loop).
const CTL_PER_HOST: usize = 16;
/// Control-socket events taken per `epoll_wait`.
const EPOLL_BATCH: usize = 64;

impl EngineLoop {
    /// Handles control traffic; true if anything happened.
    pub(super) fn poll_control(&mut self, now: Nanos) -> bool {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); EPOLL_BATCH];
        let mut tokens = [0u64; EPOLL_BATCH];
        let n = match epoll::wait(&self.epoll, &mut events, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok((ready, _)) => {
                for (t, e) in tokens.iter_mut().zip(ready.iter()) {
                    *t = e.data.u64();
                }
                ready.len()
            }
            Err(_) => 0,
        };
        // Ready sockets first, then new connections: a flood of connects cannot push out a
        // connection whose ATTACH is already waiting.
        for &token in &tokens[..n] {
            if token & PENDING_TAG != 0 {
                self.serve_pending((token & !PENDING_TAG) as usize);
            } else {
                self.serve_host(HostId(token as u32));
            }
        }
        self.accept_and_expire(now) || n > 0
    }

    /// Closes every connection that did not ATTACH within `attach_timeout_ms`, then accepts
    /// the connections waiting in the listen backlog — all of them, up to a table's worth per
    /// poll (a flood cannot hold the loop). A full table closes its oldest connection for each
    /// new one, so idle connections never leave a host waiting in the backlog; a new
    /// connection's ATTACH, which a host sends right after connecting, is served at once.
    fn accept_and_expire(&mut self, now: Nanos) -> bool {
        let mut work = false;
        let mut expired = 0;
        for p in self.pending.iter_mut() {
            if p.as_ref().is_some_and(|p| now.saturating_sub(p.since) > self.attach_timeout) {
                // Told why before it is closed (closing removes it from the epoll set).
                if let Some(p) = p.take() {
                    let _ = p.sock.send_now(&CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::IDLE));
                }
                expired += 1;
            }
        }
        if expired > 0 {
            self.log(2, format_args!("closed {expired} connection(s) that did not attach in time"));
        }
        let mut evicted = 0;
        for tcp in [false, true] {
            work |= self.accept_from(tcp, now, &mut evicted);
        }
        if evicted > 0 {
            self.log(
                2,
                format_args!(
                    "closed {evicted} connection(s) not attached yet to make room (max_pending_conns)"
                ),
            );
        }
        work
    }

    /// Accepts what waits on one listener (the Unix socket, or TCP), up to a table's worth.
    fn accept_from(&mut self, tcp: bool, now: Nanos, evicted: &mut u32) -> bool {
        let mut work = false;
        for _ in 0..self.pending.len() {
            let listener = match (tcp, &self.tcp_listener) {
                (false, _) => self.listener.as_fd(),
                (true, Some((l, _))) => l.as_fd(),
                (true, None) => return work,
            };
            let sock = match ctl::accept(listener) {
                Ok(Some(fd)) => fd,
                Ok(None) => break,
                Err(e) if is_out_of_descriptors(&e) => {
                    // Out of descriptors: the oldest connection not attached yet makes room.
                    if self.evict_oldest().is_none() {
                        self.log(2, format_args!("accept failed: {e}"));
                        break;
                    }
                    *evicted += 1;
                    continue;
                }
                Err(e) => {
                    self.log(1, format_args!("accept failed: {e}"));
                    break;
                }
            };
            work = true;
            // Over the Unix socket only this machine's user (or root) is served; over TCP the
            // job secret decides (AUTH).
            let sock = if tcp {
                CtlSock::tcp(sock)
            } else if ctl::peer_is_trusted(sock.as_fd()) {
                CtlSock::unix(sock)
            } else {
                self.log(1, format_args!("refused a connection from another user"));
                continue;
            };
            let slot = match self.pending.iter().position(Option::is_none) {
                Some(slot) => slot,
                None => match self.evict_oldest() {
                    Some(slot) => {
                        *evicted += 1;
                        slot
                    }
                    None => continue, // unreachable: the table has at least one slot
                },
            };
            let token = epoll::EventData::new_u64(PENDING_TAG | slot as u64);
            if epoll::add(&self.epoll, sock.fd(), token, epoll::EventFlags::IN).is_ok() {
                self.pending_seq += 1;
                self.pending[slot] = Some(Pending {
                    sock,
                    since: now,
                    seq: self.pending_seq,
                    nonce: None,
                    authed: false,
                    link: None,
                });
                self.serve_pending(slot);
            }
        }
        work
    }

    /// Closes the oldest connection that has not attached; its slot.
    /// Authenticated connections (past `AUTH`) go last: a flood of connections that proved
    /// nothing cannot push out a host between its `AUTH` and its `ATTACH`.
    fn evict_oldest(&mut self) -> Option<usize> {
        let (_, _, slot) = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (p.authed, p.seq, i)))
            .min()?;
        if let Some(p) = self.pending[slot].take() {
            let _ = p.sock.send_now(&CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::IDLE));
        }
        Some(slot)
    }

    /// Serves a connection that has not attached: `HELLO`, `AUTH`, then `ATTACH` (which
    /// makes it a host), each answered at once; a connection that sends anything else, garbage,
    /// or a wrong tag is refused and closed.
    fn serve_pending(&mut self, slot: usize) {
        // HELLO, AUTH and ATTACH may all be waiting: a few messages per readiness.
        for _ in 0..4 {
            let Some(mut p) = self.pending.get_mut(slot).and_then(Option::take) else {
                return;
            };
            let received = p.sock.recv(&mut self.stray);
            self.closer.dispose_all(&mut self.stray);
            let msg = match received {
                Ok(Received::Msg(m, fd)) => {
                    if let Some(fd) = fd {
                        self.closer.dispose(fd);
                    }
                    m
                }
                Ok(Received::Empty) => {
                    self.pending[slot] = Some(p);
                    return;
                }
                Ok(Received::Malformed) => {
                    let bad = CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::BAD_REQUEST);
                    let _ = p.sock.send_now(&bad);
                    self.log(1, format_args!("refused a connection: malformed control message"));
                    return;
                }
                _ => return, // closed before attaching: drop the connection
            };
            let refuse = |p: &Pending, status: CtlStatus, b: u32| {
                let mut m = CtlMsg::error(&msg, status);
                m.b = b;
                let _ = p.sock.send_now(&m);
            };
            match msg.header_error() {
                Some(CtlStatus::ABI_MISMATCH) => {
                    self.log(
                        1,
                        format_args!("refused attach: host ABI {} != engine ABI {ABI_VERSION}", msg.version),
                    );
                    return refuse(&p, CtlStatus::ABI_MISMATCH, ABI_VERSION);
                }
                Some(status) => return refuse(&p, status, 0),
                None => {}
            }
            match msg.kind {
                CtlKind::HELLO if p.nonce.is_none() => {
                    let nonce =
                        u64::from_le_bytes(crate::entropy::gather()[..8].try_into().unwrap_or([1; 8]));
                    let mut ok = CtlMsg::reply(&msg, CtlKind::HELLO_OK);
                    ok.c = nonce;
                    // The engine's pid: a host with host-owned rings lets this process (and no
                    // other) reach its memory where Yama restricts ptrace (PR_SET_PTRACER).
                    ok.d = u64::from(std::process::id());
                    if p.sock.send_now(&ok).is_err() {
                        return;
                    }
                    p.nonce = Some(nonce);
                }
                CtlKind::AUTH => {
                    let secret = self.config.topology.job_secret.0;
                    let ok = match (secret, p.nonce) {
                        (Some(secret), Some(nonce)) => ctl::auth_ok(&secret, nonce, (msg.d, msg.e)),
                        _ => false,
                    };
                    if !ok {
                        self.log(1, format_args!("refused a connection: wrong or unasked AUTH"));
                        return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                    }
                    if p.sock.send_now(&CtlMsg::reply(&msg, CtlKind::AUTH_OK)).is_err() {
                        return;
                    }
                    p.authed = true;
                }
                CtlKind::RDMA_CONNECT if p.sock.is_tcp() && !p.authed => {
                    self.log(1, format_args!("refused RDMA_CONNECT over TCP without AUTH"));
                    return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                }
                CtlKind::RDMA_CONNECT if p.nonce.is_none() || p.link.is_some() => {
                    return refuse(&p, CtlStatus::BAD_REQUEST, 0);
                }
                CtlKind::RDMA_CONNECT => match self.rdma_connect(&msg) {
                    Ok((link, ok)) => {
                        if p.sock.send_now(&ok).is_err() {
                            return;
                        }
                        p.link = Some(link);
                    }
                    Err(status) => return refuse(&p, status, 0),
                },
                CtlKind::ATTACH if p.sock.is_tcp() && !p.authed => {
                    self.log(1, format_args!("refused attach over TCP without AUTH"));
                    return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                }
                CtlKind::ATTACH => return self.attach(p, &msg),
                _ => return refuse(&p, CtlStatus::BAD_REQUEST, 0),
            }
            self.pending[slot] = Some(p);
        }
    }

    /// `ATTACH` from a connection entitled to it: builds (mapped) or checks (host-owned) its
    /// rings and makes it a host.
    fn attach(&mut self, p: Pending, msg: &CtlMsg) {
        let refuse = |sock: &CtlSock, status: CtlStatus, b: u32| {
            let mut m = CtlMsg::error(msg, status);
            m.b = b;
            let _ = sock.send_now(&m);
        };
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
            let Some(nonce) = p.nonce else {
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
    fn rdma_connect(&mut self, msg: &CtlMsg) -> Result<(RdmaLink, CtlMsg), CtlStatus> {
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

/// Whether `e` says the process (or the system) has no descriptor left for a new connection.
fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    let raw = e.raw_os_error();
    raw == Some(rustix::io::Errno::MFILE.raw_os_error())
        || raw == Some(rustix::io::Errno::NFILE.raw_os_error())
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
