//! The control-socket transport between host libraries and an engine.
//!
//! An engine listens on the abstract Unix socket `@ringcast.<name>` (abstract: nothing is left
//! in the file system when an engine dies). Each message is one 64-byte [`CtlMsg`] on a
//! `SOCK_SEQPACKET` socket, optionally carrying one file descriptor (`SCM_RIGHTS`): the engine's
//! attach segment, or a host's shared-memory region. Sequenced packets keep message boundaries,
//! so a short or long message is a protocol error, never a desynchronised stream. The socket's
//! hang-up is how each side learns that the other died.
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
    let fd = net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?;
    net::connect(&fd, &abstract_addr(name)?)?;
    Ok(fd)
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
    let wait_for = |events: PollFlags| -> io::Result<()> {
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
    };
    loop {
        match send_with(sock, msg, fd, SendFlags::DONTWAIT) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wait_for(PollFlags::OUT)?,
            other => break other?,
        }
    }
    let mut stray = Vec::new();
    loop {
        wait_for(PollFlags::IN)?;
        match recv_with(sock, RecvFlags::DONTWAIT, &mut stray)? {
            Received::Msg(m, _) if m.seq != msg.seq => stale(m),
            Received::Msg(m, fd) => return Ok((m, fd)),
            Received::Empty => {}
            Received::Closed => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "engine closed the control socket",
                ))
            }
            Received::Malformed => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "malformed control reply"))
            }
        }
    }
}

/// True when the peer of `sock` has hung up (checked without blocking).
pub fn peer_gone(sock: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(&sock, PollFlags::IN)];
    match poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) => false,
        Ok(_) => fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::RDHUP),
        Err(_) => false,
    }
}
