//! The `udp` fabric's readiness check: which of its sockets hold something to read, for one
//! system call whatever their number, so that a poll of an idle fabric costs one `epoll_wait`
//! instead of one `recvmmsg` per socket (the unicast socket and one per joined group).
//!
//! A polling engine reads its fabric on every pass, and most passes find nothing: an engine
//! on 2 cores takes turns with its host and the other engines, and each empty `recvmmsg`
//! (copy the headers in, resolve the socket, lock its queue, find it empty) was the largest
//! share of its pass (issue 40: 2-node 1 MiB profile, ~28 % of the receiving engine's samples
//! in empty receives). A level-triggered epoll set of the fabric's own — not the doorbell
//! thread's (`waker.rs`), which waits on its set while the engine sleeps — answers with the
//! sockets that have a datagram or an error queued; the poll then reads only those.
//!
//! Level-triggered, so nothing is lost between checks: a socket the poll leaves datagrams in
//! (its budget ran out) is reported again by the next check; an error queued on a socket (an
//! ICMP "port unreachable" from a peer that left) is reported as readable until a receive
//! takes it.
use rustix::event::epoll;
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use std::mem::MaybeUninit;

/// Sockets reported per check. More ready at once are reported by the next checks (epoll
/// moves the ones it reported behind the others, so none is starved).
pub(super) const READY_MAX: usize = 16;

/// The fabric's readiness set. See the module doc.
#[derive(Debug)]
pub(super) struct Ready {
    epoll: OwnedFd,
}

impl Ready {
    /// An empty set.
    pub fn new() -> std::io::Result<Ready> {
        Ok(Ready { epoll: epoll::create(epoll::CreateFlags::CLOEXEC)? })
    }

    /// Adds `sock`, known by its descriptor.
    pub fn watch(&self, sock: impl AsFd) -> std::io::Result<()> {
        let token = epoll::EventData::new_u64(sock.as_fd().as_raw_fd() as u64);
        Ok(epoll::add(&self.epoll, sock, token, epoll::EventFlags::IN)?)
    }

    /// Removes `sock` (before it is closed).
    pub fn unwatch(&self, sock: impl AsFd) {
        let _ = epoll::delete(&self.epoll, sock);
    }

    /// The descriptors of the sockets with something to read now (at most [`READY_MAX`]),
    /// without waiting. `None` when the check itself failed (`EINTR`): the caller then reads
    /// every socket, as without the set.
    pub fn check(&self) -> Option<heapless::Vec<i32, READY_MAX>> {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); READY_MAX];
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        let (ready, _) = epoll::wait(&self.epoll, &mut events, Some(&zero)).ok()?;
        Some(ready.iter().filter_map(|e| i32::try_from(e.data.u64()).ok()).collect())
    }

    /// Waits until a socket has something to read, at most `limit`; whether one has (a
    /// signal's `EINTR` counts as nothing: the caller looks again). `epoll_pwait` counts whole
    /// milliseconds and rounds a shorter limit up to one: callers pass whole milliseconds.
    pub fn wait(&self, limit: std::time::Duration) -> bool {
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); 1];
        let limit = rustix::time::Timespec {
            tv_sec: limit.as_secs() as i64,
            tv_nsec: i64::from(limit.subsec_nanos()),
        };
        matches!(epoll::wait(&self.epoll, &mut events, Some(&limit)), Ok((ready, _)) if !ready.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A socket is reported while — and only while — it holds a datagram; an empty set and
    /// drained sockets report nothing; a socket left with a datagram is reported again.
    #[test]
    fn reports_the_sockets_with_datagrams_until_they_are_read() {
        let ready = Ready::new().expect("epoll");
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        ready.watch(&a).expect("watch a");
        ready.watch(&b).expect("watch b");
        assert_eq!(ready.check().expect("check").len(), 0, "nothing sent yet");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.send_to(b"x", b.local_addr().expect("addr")).expect("send");
        tx.send_to(b"y", b.local_addr().expect("addr")).expect("send");
        let fd_b = b.as_raw_fd();
        assert_eq!(ready.check().expect("check").as_slice(), &[fd_b]);
        let mut buf = [0u8; 8];
        b.recv(&mut buf).expect("first");
        assert_eq!(ready.check().expect("check").as_slice(), &[fd_b], "level-triggered: one left");
        b.recv(&mut buf).expect("second");
        assert_eq!(ready.check().expect("check").len(), 0, "drained");
        tx.send_to(b"z", a.local_addr().expect("addr")).expect("send");
        ready.unwatch(&a);
        assert_eq!(ready.check().expect("check").len(), 0, "unwatched");
    }

    /// A wait ends when a datagram lands (from another thread, while it waits), and otherwise
    /// after its limit, saying which.
    #[test]
    fn a_wait_ends_at_a_datagram_or_at_its_limit() {
        use std::time::{Duration, Instant};
        let ready = Ready::new().expect("epoll");
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        ready.watch(&rx).expect("watch");
        let start = Instant::now();
        assert!(!ready.wait(Duration::from_millis(20)), "nothing came");
        assert!(start.elapsed() >= Duration::from_millis(19), "returned early: {:?}", start.elapsed());
        let to = rx.local_addr().expect("addr");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            UdpSocket::bind("127.0.0.1:0").expect("bind").send_to(b"x", to).expect("send");
        });
        assert!(ready.wait(Duration::from_secs(10)), "the datagram ends the wait");
        sender.join().expect("sender");
        assert_eq!(ready.check().expect("check").as_slice(), &[rx.as_raw_fd()]);
    }
}
