//! The `udp` fabric's receiving: one `recvmmsg` takes up to a window of datagrams from one
//! socket into the fabric's receive slab, a buffer each — or, with GRO, a buffer of several
//! datagrams of one sender and one size, which [`Meta::seg`] says how to cut.
//!
//! nix's `recvmmsg` headers ([`MultiHeaders`]) cannot be kept in the fabric: they hold raw
//! pointers, so they are not `Send`, and a thread-mode engine's loop is driven by its host's
//! threads as well as its own. Each thread keeps one set. And they cannot be reused after a
//! call that received: the kernel writes each message's control-data length back over the
//! capacity (`msg_controllen` is in-out), and nix 0.29 does not restore it — a slot whose
//! datagram carried no control message would then lose the next one's GRO segment size and
//! drop count. So a set is rebuilt after every call that received (one allocation per batch
//! of datagrams, none per empty poll, which keeps its set).
use super::tx::MAX_BATCH;
use nix::sys::socket::{self as nsock, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage};
use std::cell::RefCell;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

thread_local! {
    /// This thread's clean `recvmmsg` headers (see the module doc).
    static HEADERS: RefCell<Option<MultiHeaders<SockaddrStorage>>> = const { RefCell::new(None) };
}

/// One receive buffer's datagram(s).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Meta {
    /// Bytes the kernel had for it (more than the buffer when truncated: `MSG_TRUNC`).
    pub len: usize,
    /// The sender's address.
    pub src: Option<SocketAddr>,
    /// The socket's cumulative drop count (`SO_RXQ_OVFL`), when the kernel attached it.
    pub drops: Option<u32>,
    /// GRO: the buffer holds datagrams of this many bytes each (the last may be shorter).
    pub seg: Option<usize>,
}

/// Fresh headers for `MAX_BATCH` datagrams, with room for a drop count and a GRO size each.
fn fresh() -> MultiHeaders<SockaddrStorage> {
    MultiHeaders::preallocate(MAX_BATCH, Some(nix::cmsg_space!(u32, i32)))
}

/// Receives up to `slots` (≤ [`MAX_BATCH`]) buffers of `buf` bytes from `sock` into `slab`
/// without blocking, their metadata into `metas` (cleared first); returns how many (an
/// error when none: `WouldBlock` when the socket is empty).
pub(super) fn recv_batch(
    sock: &UdpSocket,
    slab: &mut [u8],
    buf: usize,
    slots: usize,
    metas: &mut Vec<Meta>,
) -> io::Result<usize> {
    metas.clear();
    HEADERS.with(|cell| {
        let mut headers = cell.borrow_mut().take().unwrap_or_else(fresh);
        // An array, not a collection with a destructor: nix ties the borrow of the headers to
        // the buffers' lifetime, which a destructor would make last to the end of the scope.
        let n = slots.min(MAX_BATCH).min(slab.len() / buf.max(1));
        let mut chunks = slab.chunks_mut(buf.max(1));
        let mut iovs: [[IoSliceMut<'_>; 1]; MAX_BATCH] =
            core::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or_default())]);
        let got = match nsock::recvmmsg(
            sock.as_raw_fd(),
            &mut headers,
            iovs[..n].iter_mut(),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
            None,
        ) {
            Ok(results) => {
                for m in results {
                    let mut meta = Meta { len: m.bytes, src: None, drops: None, seg: None };
                    // A truncated control buffer (never, at its size) only loses these two.
                    if let Ok(cmsgs) = m.cmsgs() {
                        for c in cmsgs {
                            match c {
                                ControlMessageOwned::RxqOvfl(n) => meta.drops = Some(n),
                                ControlMessageOwned::UdpGroSegments(s) => {
                                    meta.seg = usize::try_from(s).ok().filter(|&s| s > 0)
                                }
                                _ => {}
                            }
                        }
                    }
                    meta.src = m.address.as_ref().and_then(|a| {
                        if let Some(v6) = a.as_sockaddr_in6() {
                            Some(SocketAddr::V6(SocketAddrV6::from(*v6)))
                        } else {
                            a.as_sockaddr_in().map(|v4| SocketAddr::V4(SocketAddrV4::from(*v4)))
                        }
                    });
                    metas.push(meta);
                }
                Ok(metas.len())
            }
            Err(e) => Err(io::Error::from(e)),
        };
        // Used headers are dropped (see the module doc); unused ones are kept.
        if !matches!(got, Ok(n) if n > 0) {
            *cell.borrow_mut() = Some(headers);
        }
        got
    })
}
