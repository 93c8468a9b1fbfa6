//! The doorway of the control path: connections accepted on the engine's abstract socket and
//! on its TCP address, those that do not ATTACH in time expired, a full table making room, and
//! what a connection may say before it is a host — `HELLO`, `AUTH` (over TCP: the session's
//! mutual proof, after which every message carries a MAC: `crate::ctl::session`),
//! `RDMA_CONNECT` — until its `ATTACH` (`control.rs`) makes it one.
//!
//! Who may attach: over the Unix socket, processes of this user (or root), by their peer
//! credentials; over TCP, whoever proves the job's secret over this connection's two nonces
//! (`AUTH`) — nothing else crosses a network to vouch for a peer.
use super::engine_loop::{EngineLoop, Pending};
use crate::ctl::{self, session, CtlSock, Received, Role, SessionKeys};
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::ABI_VERSION;
use ringcast_proto::intake::{HostId, Nanos};
use rustix::event::{epoll, Timespec};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;

/// epoll tokens of connections that have not attached yet carry this bit; hosts use their id.
const PENDING_TAG: u64 = 1 << 32;
/// epoll tokens of the listeners: this bit, plus 0 for the Unix socket and 1 for TCP. A
/// listener is accepted from only when epoll finds it readable: an `accept4` on an empty
/// backlog allocates a socket inode before it fails (`EAGAIN`), and tried at every control
/// poll it took 7 % of a daemon's samples (issue 40's profile, 2 nodes, 2 B broadcasts).
pub(super) const LISTEN_TAG: u64 = 1 << 33;
/// Control-socket events taken per `epoll_wait`.
const EPOLL_BATCH: usize = 64;
/// A connection not attached yet that has been silent for more than `attach_timeout_ms` over
/// this is not in the middle of a handshake: the first to make room for a new one.
const SILENT_FRACTION: Nanos = 8;

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
        let mut listening = [false; 2];
        for &token in &tokens[..n] {
            if token & LISTEN_TAG != 0 {
                listening[(token & 1) as usize] = true;
            } else if token & PENDING_TAG != 0 {
                self.serve_pending((token & !PENDING_TAG) as usize);
            } else {
                self.serve_host(HostId(token as u32));
            }
        }
        self.accept_and_expire(now, listening) || n > 0
    }

    /// Closes every connection that did not ATTACH within `attach_timeout_ms`, then accepts
    /// the connections waiting in the listen backlog — all of them, up to a table's worth per
    /// poll (a flood cannot hold the loop). A full table closes its oldest connection for each
    /// new one, so idle connections never leave a host waiting in the backlog; a new
    /// connection's ATTACH, which a host sends right after connecting, is served at once.
    /// `listening`: whether the Unix and the TCP listener were found readable.
    fn accept_and_expire(&mut self, now: Nanos, listening: [bool; 2]) -> bool {
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
            if listening[usize::from(tcp)] {
                work |= self.accept_from(tcp, now, &mut evicted);
            }
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
                    if self.evict_oldest(now).is_none() {
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
                None => match self.evict_oldest(now) {
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
                    heard: now,
                    seq: self.pending_seq,
                    hello: None,
                    link: None,
                });
                self.serve_pending(slot);
            }
        }
        work
    }

    /// Closes a connection that has not attached to make room; its slot. First the one silent
    /// the longest, if it has been silent for more than `attach_timeout_ms /`
    /// [`SILENT_FRACTION`]: a host in its handshake answers each reply at once, so it is never
    /// that silent, while a connection that authenticated and then waits is — a flood of those,
    /// more than the table holds and reopened as they are pushed out, used to push out hosts
    /// between their `HELLO` and `AUTH` instead (issue 38, item 8). Without such a connection
    /// (a burst of new ones), the oldest, authenticated ones last: a flood of connections that
    /// proved nothing cannot push out a host between its `AUTH` and its `ATTACH`.
    fn evict_oldest(&mut self, now: Nanos) -> Option<usize> {
        let grace = self.attach_timeout / SILENT_FRACTION;
        let open = || self.pending.iter().enumerate().filter_map(|(i, p)| p.as_ref().map(|p| (i, p)));
        let silent = open().filter(|(_, p)| now.saturating_sub(p.heard) > grace).min_by_key(|(_, p)| p.heard);
        let slot = match silent {
            Some((i, _)) => i,
            None => open().map(|(i, p)| (p.sock.authenticated(), p.seq, i)).min()?.2,
        };
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
                    p.heard = self.clock.now();
                    m
                }
                Ok(Received::Empty) => {
                    self.pending[slot] = Some(p);
                    return;
                }
                Ok(Received::Forged) => {
                    let bad = CtlMsg::error(&CtlMsg::new(CtlKind(0)), CtlStatus::UNAUTHORIZED);
                    let _ = p.sock.send_now(&bad);
                    self.log(1, format_args!("refused a connection: a control message failed its MAC"));
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
                CtlKind::HELLO if p.hello.is_none() => {
                    // The engine's pid: a host with host-owned rings lets this process (and no
                    // other) reach its memory where Yama restricts ptrace (PR_SET_PTRACER).
                    let ok = session::hello_ok(&msg, std::process::id());
                    if p.sock.send_now(&ok).is_err() {
                        return;
                    }
                    p.hello = Some((msg, ok));
                }
                CtlKind::AUTH if !p.sock.authenticated() => {
                    // The session's keys from the secret and both hellos: the host's proof must
                    // be of this connection's transcript, and only then does the engine prove
                    // itself in turn.
                    let keys = match (self.config.topology.job_secret.0, &p.hello) {
                        (Some(secret), Some((hello, ok))) => Some(SessionKeys::derive(&secret, hello, ok)),
                        _ => None,
                    };
                    let Some(keys) = keys.filter(|k| k.proves(Role::Host, (msg.d, msg.e))) else {
                        self.log(1, format_args!("refused a connection: wrong or unasked AUTH"));
                        return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                    };
                    let mut ok = CtlMsg::reply(&msg, CtlKind::AUTH_OK);
                    (ok.d, ok.e) = keys.engine_proof();
                    if p.sock.send_now(&ok).is_err() {
                        return;
                    }
                    p.sock.start_session(keys, Role::Engine);
                }
                CtlKind::RDMA_CONNECT if p.sock.is_tcp() && !p.sock.authenticated() => {
                    self.log(1, format_args!("refused RDMA_CONNECT over TCP without AUTH"));
                    return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                }
                CtlKind::RDMA_CONNECT if p.hello.is_none() || p.link.is_some() => {
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
                CtlKind::ATTACH if p.sock.is_tcp() && !p.sock.authenticated() => {
                    self.log(1, format_args!("refused attach over TCP without AUTH"));
                    return refuse(&p, CtlStatus::UNAUTHORIZED, 0);
                }
                CtlKind::ATTACH => return self.attach(p, &msg),
                _ => return refuse(&p, CtlStatus::BAD_REQUEST, 0),
            }
            self.pending[slot] = Some(p);
        }
    }
}

/// Whether `e` says the process (or the system) has no descriptor left for a new connection.
fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    let raw = e.raw_os_error();
    raw == Some(rustix::io::Errno::MFILE.raw_os_error())
        || raw == Some(rustix::io::Errno::NFILE.raw_os_error())
}
