//! The control-socket transport between host libraries and an engine.
//!
//! An engine listens on the abstract Unix socket `@ringcast.<name>` (abstract: nothing is left
//! in the file system when an engine dies). Each message is one 64-byte [`CtlMsg`] on a
//! `SOCK_SEQPACKET` socket, optionally carrying one file descriptor (`SCM_RIGHTS`): the engine's
//! attach segment, or a host's shared-memory region. Sequenced packets keep message boundaries,
//! so a short or long message is a protocol error, never a desynchronised stream. The socket's
//! hang-up is how each side learns that the other died.
//!
//! Across the PCIe boundary (an engine on a DPU's ARM cores) the same messages travel over TCP
//! ([`CtlSock`], [`listen_tcp`], [`connect_tcp`]): back to back, 64 bytes each, reassembled per
//! connection, never with a descriptor. A stream has no boundaries to check, so a message of
//! another size shows up as a bad magic at the next cut (`Malformed`) and a connection closed
//! mid-message as `Closed`. Once both ends proved the job's secret ([`session`]), a [`CtlSock`]
//! seals every message it sends with a MAC and checks every one it receives (`Forged` when one
//! fails, and for everything after it).
//!
//! Everything here is safe code over `rustix`, which hands received descriptors over as
//! `OwnedFd`s.
use ringcast_abi::ctl::{CtlMsg, CTL_MAGIC};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use zerocopy::{FromBytes, IntoBytes};

pub mod session;
pub use session::{Role, SessionKeys};

/// Size of every control message.
pub const MSG_LEN: usize = core::mem::size_of::<CtlMsg>();

/// Result of a receive.
#[derive(Debug)]
pub enum Received {
    /// A well-formed message, with the descriptor it carried.
    Msg(CtlMsg, Option<OwnedFd>),
    /// Nothing to read now (non-blocking socket).
    Empty,
    /// The peer closed its end (or died).
    Closed,
    /// The peer sent something that is not a control message (wrong size or magic).
    Malformed,
    /// On an authenticated session: a message that is not the next one the peer sent,
    /// unchanged (its MAC failed: changed, replayed, reordered or injected on the way). Nothing
    /// later on the connection is believed either.
    Forged,
}

fn abstract_addr(name: &str) -> io::Result<SocketAddrUnix> {
    Ok(SocketAddrUnix::new_abstract_name(format!("ringcast.{name}").as_bytes())?)
}

/// Binds and listens on `@ringcast.<name>` (non-blocking).
pub fn listen(name: &str) -> io::Result<OwnedFd> {
    let fd = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    net::bind(&fd, &abstract_addr(name)?)?;
    net::listen(&fd, 128)?;
    Ok(fd)
}

/// Connects to the engine `name` (blocking socket).
pub fn connect(name: &str) -> io::Result<OwnedFd> {
    connect_unix(name, None)
}

/// [`connect`], waiting at most `limit` for room in the engine's listen backlog (a stopped
/// engine's backlog fills, and a blocking connect to it would wait for ever; `TimedOut`).
fn connect_unix(name: &str, limit: Option<std::time::Duration>) -> io::Result<OwnedFd> {
    let fd = net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    bounded_connect(&fd, &abstract_addr(name)?, limit)?;
    Ok(fd)
}

/// Connects `fd` to `addr`, blocking at most `limit`: the kernel bounds a blocking `connect`
/// by the socket's send timeout (Unix and TCP alike), which is cleared again afterwards.
fn bounded_connect(
    fd: &OwnedFd,
    addr: &impl rustix::net::addr::SocketAddrArg,
    limit: Option<std::time::Duration>,
) -> io::Result<()> {
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    if let Some(limit) = limit {
        set_socket_timeout(fd, Timeout::Send, Some(limit.max(std::time::Duration::from_millis(1))))?;
    }
    match net::connect(fd, addr) {
        Ok(()) => {}
        // The send timeout ran out: EAGAIN on a Unix socket, EINPROGRESS on TCP.
        Err(Errno::AGAIN) | Err(Errno::INPROGRESS) if limit.is_some() => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the engine did not accept the connection in time",
            ))
        }
        Err(e) => return Err(e.into()),
    }
    if limit.is_some() {
        set_socket_timeout(fd, Timeout::Send, None)?;
    }
    Ok(())
}

/// Accepts one pending connection, if any (the new socket is non-blocking).
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    match net::accept_with(listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Process id of the peer of a connected Unix socket.
pub fn peer_pid(sock: BorrowedFd<'_>) -> Option<u32> {
    net::sockopt::socket_peercred(sock).ok().map(|c| c.pid.as_raw_nonzero().get() as u32)
}

/// True when the peer of `sock` runs as this process's user or as root: an engine serves only
/// its own user's processes (the abstract socket namespace is shared by every user).
pub fn peer_is_trusted(sock: BorrowedFd<'_>) -> bool {
    match net::sockopt::socket_peercred(sock) {
        Ok(c) => c.uid.is_root() || c.uid == rustix::process::getuid(),
        Err(_) => false,
    }
}

/// Sends `msg`, with `fd` attached if given (blocking on a blocking socket).
pub fn send(sock: BorrowedFd<'_>, msg: &CtlMsg, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    send_with(sock, msg, fd, SendFlags::empty())
}

/// Sends `msg` without ever blocking (`WouldBlock` if the peer's queue is full): for paths that
/// must not hang on a stopped peer, such as a host's `Drop`.
pub fn send_now(sock: BorrowedFd<'_>, msg: &CtlMsg) -> io::Result<()> {
    send_with(sock, msg, None, SendFlags::DONTWAIT)
}

fn send_with(
    sock: BorrowedFd<'_>,
    msg: &CtlMsg,
    fd: Option<BorrowedFd<'_>>,
    flags: SendFlags,
) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        cmsg.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let iov = [io::IoSlice::new(msg.as_bytes())];
    let n = loop {
        match net::sendmsg(sock, &iov, &mut cmsg, SendFlags::NOSIGNAL | flags) {
            Err(Errno::INTR) => continue,
            other => break other?,
        }
    };
    if n != MSG_LEN {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short control message"));
    }
    Ok(())
}

/// Receives one message (non-blocking or blocking, as the socket is). Descriptors that came
/// along but are not the message's own (extras, or any on a malformed message) are moved to
/// `stray`: closing a descriptor a peer chose can block (a TCP socket with `SO_LINGER`, a FUSE
/// file), so the caller decides where that happens — the engine hands them to a closer thread.
pub fn recv(sock: BorrowedFd<'_>, stray: &mut Vec<OwnedFd>) -> io::Result<Received> {
    recv_with(sock, RecvFlags::empty(), stray)
}

fn recv_with(sock: BorrowedFd<'_>, flags: RecvFlags, stray: &mut Vec<OwnedFd>) -> io::Result<Received> {
    // One byte more than a message, so an oversized message shows up as truncation.
    let mut buf = [0u8; MSG_LEN + 1];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = {
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        net::recvmsg(sock, &mut iov, &mut cmsg, RecvFlags::CMSG_CLOEXEC | flags)
    };
    let r = match r {
        Ok(r) => r,
        // A signal interrupted a blocking receive: nothing was consumed; the caller retries.
        Err(Errno::AGAIN) | Err(Errno::INTR) => return Ok(Received::Empty),
        Err(Errno::CONNRESET) => return Ok(Received::Closed),
        Err(e) => return Err(e.into()),
    };
    // Take ownership of every descriptor that came along: one may belong to the message, the
    // rest are stray.
    let first = stray.len();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            stray.extend(rights);
        }
    }
    let received = stray.len() - first;
    if r.bytes == 0 {
        return Ok(Received::Closed);
    }
    if r.bytes != MSG_LEN || received > 1 || r.flags.contains(net::ReturnFlags::TRUNC) {
        return Ok(Received::Malformed);
    }
    // NOTE(unwrap): exactly MSG_LEN bytes, and CtlMsg is FromBytes of that size.
    let msg = CtlMsg::read_from_bytes(&buf[..MSG_LEN]).unwrap();
    if msg.magic != CTL_MAGIC {
        return Ok(Received::Malformed);
    }
    let fd = if received == 1 { stray.pop() } else { None };
    Ok(Received::Msg(msg, fd))
}

/// Request/reply: sends `msg` and waits up to `timeout` for the reply carrying the same `seq`.
/// Neither the send nor the wait can outlast `timeout`; signals are retried. Replies to earlier
/// requests (whose caller gave up) are handed to `stale`, so a caller can undo what a late
/// success did (the host library deregisters a region whose REGISTER timed out).
pub fn call(
    sock: BorrowedFd<'_>,
    msg: &CtlMsg,
    fd: Option<BorrowedFd<'_>>,
    timeout: std::time::Duration,
    stale: &mut dyn FnMut(CtlMsg),
) -> io::Result<(CtlMsg, Option<OwnedFd>)> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match send_with(sock, msg, fd, SendFlags::DONTWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_until(sock, PollFlags::OUT, deadline)?,
            other => break other?,
        }
    }
    await_reply(msg.seq, stale, |stray| {
        wait_until(sock, PollFlags::IN, deadline)?;
        recv_with(sock, RecvFlags::DONTWAIT, stray)
    })
}

/// Receives with `next` (which waits, then reads one message) until the reply to request `seq`;
/// earlier replies go to `stale`.
fn await_reply(
    seq: u64,
    stale: &mut dyn FnMut(CtlMsg),
    mut next: impl FnMut(&mut Vec<OwnedFd>) -> io::Result<Received>,
) -> io::Result<(CtlMsg, Option<OwnedFd>)> {
    let mut stray = Vec::new();
    loop {
        match next(&mut stray)? {
            Received::Msg(m, _) if m.seq != seq => stale(m),
            Received::Msg(m, fd) => return Ok((m, fd)),
            Received::Empty => {}
            Received::Closed => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "engine closed the control connection",
                ))
            }
            Received::Malformed => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "malformed control reply"))
            }
            Received::Forged => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "a control message failed its MAC: changed, replayed or reordered on the way",
                ))
            }
        }
    }
}

/// True when the peer of `sock` has hung up (checked without blocking).
pub fn peer_gone(sock: BorrowedFd<'_>) -> bool {
    // RDHUP asked for explicitly: a TCP peer's FIN raises only IN|RDHUP (never HUP), and the
    // kernel reports RDHUP only to whoever asks (a Unix SEQPACKET hang-up raises HUP anyway).
    let mut fds = [PollFd::new(&sock, PollFlags::IN | PollFlags::RDHUP)];
    match poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) => false,
        Ok(_) => fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::RDHUP),
        Err(_) => false,
    }
}

/// One end of a control connection: a Unix `SOCK_SEQPACKET` socket (descriptors may travel) or
/// a TCP stream (64-byte messages back to back, reassembled here).
#[derive(Debug)]
pub struct CtlSock {
    fd: OwnedFd,
    /// TCP only: the message being reassembled and how many of its bytes have arrived.
    stream: Option<Box<([u8; MSG_LEN], usize)>>,
    /// After `AUTH_OK`: every message sent is sealed and every one received checked.
    session: Option<Box<session::Session>>,
}

impl CtlSock {
    /// A Unix `SOCK_SEQPACKET` socket.
    pub fn unix(fd: OwnedFd) -> Self {
        CtlSock { fd, stream: None, session: None }
    }

    /// A connected TCP socket.
    pub fn tcp(fd: OwnedFd) -> Self {
        // Control messages are small and latency-bound (a WAKE, a reply): never delayed.
        let _ = net::sockopt::set_tcp_nodelay(&fd, true);
        CtlSock { fd, stream: Some(Box::new(([0; MSG_LEN], 0))), session: None }
    }

    /// Both ends proved the secret (`AUTH`, `AUTH_OK`): from the next message on, every one
    /// sent carries its MAC and every one received must (see [`session`]).
    pub fn start_session(&mut self, keys: SessionKeys, role: Role) {
        self.session = Some(Box::new(session::Session::new(keys, role)));
    }

    /// Whether messages on this connection are authenticated.
    pub fn authenticated(&self) -> bool {
        self.session.is_some()
    }

    /// Connects to `engine`: `tcp://host:port`, else the abstract socket of that name.
    pub fn connect(engine: &str) -> io::Result<Self> {
        Self::connect_within(engine, None)
    }

    /// [`Self::connect`], giving up (`TimedOut`) after `limit` when the engine does not accept
    /// (a stopped engine whose listen backlog is full, an unreachable TCP address).
    pub fn connect_within(engine: &str, limit: Option<std::time::Duration>) -> io::Result<Self> {
        match engine.strip_prefix("tcp://") {
            Some(addr) => Ok(Self::tcp(connect_tcp_within(addr, limit)?)),
            None => Ok(Self::unix(connect_unix(engine, limit)?)),
        }
    }

    /// True for a TCP connection (no descriptors, no peer credentials).
    pub fn is_tcp(&self) -> bool {
        self.stream.is_some()
    }

    /// The socket.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Sends `msg` (with `fd` on a Unix socket; a descriptor cannot cross TCP: `InvalidInput`),
    /// blocking on a blocking socket.
    pub fn send(&self, msg: &CtlMsg, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        self.send_flags(msg, fd, SendFlags::empty())
    }

    /// Sends `msg` without ever blocking (see [`send_now`]). On TCP a message only part of which
    /// fits is an error too: the caller drops the connection, whose stream is cut mid-message.
    pub fn send_now(&self, msg: &CtlMsg) -> io::Result<()> {
        self.send_flags(msg, None, SendFlags::DONTWAIT)
    }

    fn send_flags(&self, msg: &CtlMsg, fd: Option<BorrowedFd<'_>>, flags: SendFlags) -> io::Result<()> {
        if self.stream.is_none() {
            return self.sealed(msg, |m| send_with(self.fd(), m, fd, flags));
        }
        // A blocking send waits for room as long as it takes; `send_now` never waits.
        let wait = (!flags.contains(SendFlags::DONTWAIT))
            .then(|| std::time::Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600));
        self.send_stream(msg, fd, wait)
    }

    /// Sends `msg` with `send`, sealed when the session is authenticated; the next message
    /// takes the next counter only when this one went whole (a send that failed before any
    /// byte left may be retried).
    fn sealed(&self, msg: &CtlMsg, send: impl FnOnce(&CtlMsg) -> io::Result<()>) -> io::Result<()> {
        match &self.session {
            None => send(msg),
            Some(s) => {
                send(&s.seal(msg))?;
                s.sent_one();
                Ok(())
            }
        }
    }

    /// A received message as the caller sees it: checked against the session (its MAC
    /// cleared) when there is one.
    fn opened(&mut self, msg: CtlMsg, fd: Option<OwnedFd>, stray: &mut Vec<OwnedFd>) -> Received {
        let Some(s) = self.session.as_mut() else {
            return Received::Msg(msg, fd);
        };
        match s.open(&msg) {
            Some(m) => Received::Msg(m, fd),
            None => {
                stray.extend(fd);
                Received::Forged
            }
        }
    }

    /// Sends `msg` whole on the TCP stream, never blocking in the kernel: with `wait`, a full
    /// socket buffer is waited out until that deadline (`TimedOut`); without, it is an error
    /// (`WouldBlock` before any byte went, `WriteZero` after some did: the stream is cut, the
    /// caller drops the connection).
    fn send_stream(
        &self,
        msg: &CtlMsg,
        fd: Option<BorrowedFd<'_>>,
        wait: Option<std::time::Instant>,
    ) -> io::Result<()> {
        if fd.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no descriptor crosses a TCP control connection",
            ));
        }
        self.sealed(msg, |msg| self.send_whole(msg, wait))
    }

    /// The stream part of [`Self::send_stream`]: all of `msg`, or an error.
    fn send_whole(&self, msg: &CtlMsg, wait: Option<std::time::Instant>) -> io::Result<()> {
        let bytes = msg.as_bytes();
        let mut sent = 0;
        while sent < MSG_LEN {
            match net::send(&self.fd, &bytes[sent..], SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
                Ok(n) => sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => match wait {
                    Some(deadline) => wait_until(self.fd(), PollFlags::OUT, deadline)?,
                    None if sent > 0 => {
                        return Err(io::Error::new(io::ErrorKind::WriteZero, "control message cut short"))
                    }
                    None => return Err(io::Error::from(io::ErrorKind::WouldBlock)),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Receives one message without blocking (descriptors as in [`recv`]).
    pub fn recv(&mut self, stray: &mut Vec<OwnedFd>) -> io::Result<Received> {
        if self.session.as_ref().is_some_and(|s| s.broken()) {
            return Ok(Received::Forged);
        }
        let Some(st) = self.stream.as_mut() else {
            return Ok(match recv_with(std::os::fd::AsFd::as_fd(&self.fd), RecvFlags::DONTWAIT, stray)? {
                Received::Msg(m, fd) => self.opened(m, fd, stray),
                other => other,
            });
        };
        let (buf, have) = &mut **st;
        while *have < MSG_LEN {
            match net::recv(&self.fd, &mut buf[*have..], RecvFlags::DONTWAIT) {
                // The peer closed, before or in the middle of a message.
                Ok((0, _)) => return Ok(Received::Closed),
                Ok((n, _)) => *have += n,
                Err(Errno::AGAIN) | Err(Errno::INTR) => return Ok(Received::Empty),
                Err(Errno::CONNRESET) => return Ok(Received::Closed),
                Err(e) => return Err(e.into()),
            }
        }
        *have = 0;
        // NOTE(unwrap): exactly MSG_LEN bytes, and CtlMsg is FromBytes of that size.
        let msg = CtlMsg::read_from_bytes(&buf[..]).unwrap();
        if msg.magic != CTL_MAGIC {
            return Ok(Received::Malformed);
        }
        Ok(self.opened(msg, None, stray))
    }

    /// Request/reply over this connection, as [`call`].
    pub fn call(
        &mut self,
        msg: &CtlMsg,
        fd: Option<BorrowedFd<'_>>,
        timeout: std::time::Duration,
        stale: &mut dyn FnMut(CtlMsg),
    ) -> io::Result<(CtlMsg, Option<OwnedFd>)> {
        // Never blocks past the deadline, not even on a peer that stopped reading.
        let deadline = std::time::Instant::now() + timeout;
        if self.stream.is_none() {
            self.sealed(msg, |m| loop {
                match send_with(self.fd(), m, fd, SendFlags::DONTWAIT) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        wait_until(self.fd(), PollFlags::OUT, deadline)?
                    }
                    other => break other,
                }
            })?;
        } else {
            self.send_stream(msg, fd, Some(deadline))?;
        }
        await_reply(msg.seq, stale, |stray| {
            wait_until(self.fd(), PollFlags::IN, deadline)?;
            self.recv(stray)
        })
    }

    /// The last message was sent: on TCP, ends our direction (the peer reads everything sent
    /// and then the end) and drops what the peer sent that nobody will read (`WAKE`s) — a TCP
    /// socket closed with unread data resets the connection, which can lose the last message.
    pub fn finish(&mut self) {
        if self.stream.is_some() {
            let _ = net::shutdown(&self.fd, net::Shutdown::Write);
            let mut stray = Vec::new();
            while let Ok(Received::Msg(..)) = self.recv(&mut stray) {}
        }
    }

    /// True when the peer has hung up (see [`peer_gone`]).
    pub fn peer_gone(&self) -> bool {
        peer_gone(self.fd())
    }
}

/// Waits until `sock` is ready for `events` or `deadline` passes (`TimedOut`).
fn wait_until(sock: BorrowedFd<'_>, events: PollFlags, deadline: std::time::Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no reply from the engine"));
        }
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        let mut fds = [PollFd::new(&sock, events)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(Errno::INTR) => continue,
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until `sock` has something to read or `timeout` passes; false on timeout. (A host
/// with host-owned rings sleeps here for the engine's `WAKE`.)
pub fn readable_within(sock: BorrowedFd<'_>, timeout: std::time::Duration) -> bool {
    wait_until(sock, PollFlags::IN, std::time::Instant::now() + timeout).is_ok()
}

/// Binds and listens on the TCP address `addr` (`ip:port`; port 0 picks one: see
/// [`local_port`]), non-blocking.
pub fn listen_tcp(addr: &str) -> io::Result<OwnedFd> {
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("bad TCP address {addr:?}")))?;
    let family = if sa.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd =
        net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)?;
    net::sockopt::set_socket_reuseaddr(&fd, true)?;
    net::bind(&fd, &sa)?;
    net::listen(&fd, 128)?;
    Ok(fd)
}

/// The port a TCP listener is bound to.
pub fn local_port(listener: BorrowedFd<'_>) -> Option<u16> {
    std::net::SocketAddr::try_from(net::getsockname(listener).ok()?).ok().map(|a| a.port())
}

/// Connects to the TCP address `addr` (`ip:port`), blocking socket.
pub fn connect_tcp(addr: &str) -> io::Result<OwnedFd> {
    connect_tcp_within(addr, None)
}

fn connect_tcp_within(addr: &str, limit: Option<std::time::Duration>) -> io::Result<OwnedFd> {
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("bad TCP address {addr:?}")))?;
    let family = if sa.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    bounded_connect(&fd, &sa, limit)?;
    Ok(fd)
}

/// Lets process `engine` (a pid from `HELLO_OK`) reach this process's memory by cross-memory
/// attach where Yama restricts ptrace to descendants (`ptrace_scope` 1): `PR_SET_PTRACER` names
/// that one process, as registering memory with an RDMA NIC grants it a key. Best effort:
/// without Yama (or with a pid of 0) there is nothing to set.
pub fn let_engine_in(engine: u64) {
    if let Some(pid) = i32::try_from(engine).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(pid));
    }
}

/// An RC queue pair's address as `RDMA_CONNECT` and `RDMA_CONNECT_OK` carry it (the `rdma` DMA
/// backend; see `ringcast_abi::ctl::CtlKind::RDMA_CONNECT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAddress {
    /// The QP number.
    pub qpn: u32,
    /// The first PSN it sends with.
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port's GID.
    pub gid: [u8; 16],
    /// The active MTU (`enum ibv_mtu`: 1 = 256 B … 5 = 4096 B).
    pub mtu: u8,
}

impl QpAddress {
    /// Writes it into `m`'s `a`..`e`.
    pub fn put(&self, m: &mut CtlMsg) {
        m.a = self.qpn;
        m.b = self.psn;
        m.c = u64::from_le_bytes(self.gid[..8].try_into().unwrap_or_default());
        m.d = u64::from_le_bytes(self.gid[8..].try_into().unwrap_or_default());
        m.e = u64::from(self.lid) | u64::from(self.mtu) << 16;
    }

    /// Reads it from `m`; `None` when `e` has bits past the MTU's or the MTU is not 1..=5.
    pub fn get(m: &CtlMsg) -> Option<QpAddress> {
        let mtu = (m.e >> 16) as u8;
        if m.e >> 24 != 0 || !(1..=5).contains(&mtu) {
            return None;
        }
        let mut gid = [0u8; 16];
        gid[..8].copy_from_slice(&m.c.to_le_bytes());
        gid[8..].copy_from_slice(&m.d.to_le_bytes());
        Some(QpAddress { qpn: m.a, psn: m.b, lid: m.e as u16, gid, mtu })
    }
}
