//! The `udp` fabric's sending: a window of datagrams (at most [`MAX_BATCH`]) handed to the
//! kernel in as few system calls as it takes.
//!
//! * A run of datagrams to one destination, all of one length but the last (which may be
//!   shorter) — a root's fragments — goes as **one GSO send** (`UDP_SEGMENT`, one
//!   `sendmsg` whose payload the kernel or the NIC cuts into the datagrams), up to
//!   [`GSO_MAX_SEGMENTS`] datagrams and one IP packet's worth of bytes; every other datagram
//!   goes in **one `sendmmsg`** with the window's others. Order is kept: the `sendmmsg` of
//!   what came before a GSO run goes first.
//! * Each datagram is gathered from its parts (an iovec each): nothing is copied to build it.
//! * A kernel or a path that refuses a GSO send (`EIO`: an egress device without checksum
//!   offload; `EMSGSIZE`: a route whose MTU is below the segment; `EINVAL`; no `UDP_SEGMENT`)
//!   turns GSO off for this fabric ([`UdpStats::gso_refused`]) and the run goes by `sendmmsg`.
//! * Nothing blocks: a full send queue (`EAGAIN`, `ENOBUFS`) ends the window, its unsent rest
//!   counted as dropped ([`UdpStats::tx_dropped`]); a datagram the kernel refuses for another
//!   reason is counted ([`UdpStats::tx_errors`]) and the rest go on. What the kernel reported
//!   sent is in [`UdpStats::tx_datagrams`]: sent + dropped + failed is what was handed over.
use super::UdpStats;
use crate::fabric::{Datagram, MAX_PARTS};
use nix::sys::socket::{self as nsock, ControlMessage, MsgFlags, SockaddrStorage};
use rustix::io::Errno;
use rustix::net::{self as rnet, MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use std::io::IoSlice;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

/// Most datagrams in one window (one `sendmmsg`, one `recvmmsg`): the `udp.batch` ceiling.
pub const MAX_BATCH: usize = 64;

/// Most datagrams in one GSO send: the kernel's `UDP_MAX_SEGMENTS` (64 before Linux 6.9).
pub const GSO_MAX_SEGMENTS: usize = 64;

/// Most bytes in one GSO send: one IPv4 packet's UDP payload (the smaller family's).
const GSO_MAX_BYTES: usize = super::MAX_UDP_PAYLOAD_V4;

/// Tries of one system call interrupted by a signal before its datagrams count as failed.
const EINTR_TRIES: u32 = 4;

/// Where one datagram goes: the address in both crates' forms (rustix's `sendmmsg`, nix's
/// `sendmsg` with a control message), and a key that is equal for equal destinations.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub any: &'a SocketAddrAny,
    pub nix: &'a SockaddrStorage,
    pub key: usize,
}

/// One datagram of a window, its destination resolved.
#[derive(Clone, Copy)]
pub(super) struct Outgoing<'a> {
    pub to: Target<'a>,
    pub d: Datagram<'a>,
    pub len: usize,
}

/// The sending side's state: whether GSO is (still) in use, and the window size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tx {
    pub gso: bool,
    pub batch: usize,
}

/// A run of the window to send as one message: `len` datagrams from `start`, cut into
/// segments of `seg` bytes when `len > 1`.
#[derive(Clone, Copy)]
struct Run {
    start: usize,
    len: usize,
    seg: usize,
}

/// The run starting at `i`: as many datagrams as one GSO send may carry (see the module
/// doc); just `i` when GSO is off.
fn run_at(window: &[Outgoing<'_>], i: usize, gso: bool) -> Run {
    let first = &window[i];
    let seg = first.len;
    let mut end = i + 1;
    let mut bytes = seg;
    if gso && seg > 0 {
        while let Some(next) = window.get(end) {
            let prev_full = window[end - 1].len == seg;
            let fits = end - i < GSO_MAX_SEGMENTS && bytes + next.len <= GSO_MAX_BYTES;
            if next.to.key != first.to.key || !prev_full || next.len > seg || next.len == 0 || !fits {
                break;
            }
            bytes += next.len;
            end += 1;
        }
    }
    Run { start: i, len: end - i, seg }
}

/// Whether `e`, from a GSO send, says this kernel or path cannot segment (rather than that the
/// queue is full or the destination unreachable).
fn gso_refused(e: Errno) -> bool {
    matches!(e, Errno::IO | Errno::INVAL | Errno::MSGSIZE | Errno::NOPROTOOPT | Errno::OPNOTSUPP)
}

/// Whether `e` says the send queue is full (the datagram would have waited).
fn queue_full(e: Errno) -> bool {
    e == Errno::WOULDBLOCK || e == Errno::NOBUFS
}

/// Sends `window` on `sock` (see the module doc), counting into `stats`.
pub(super) fn send_window(sock: &UdpSocket, window: &[Outgoing<'_>], tx: &mut Tx, stats: &mut UdpStats) {
    // Datagrams waiting for the next `sendmmsg`, in window order.
    let mut plain: heapless::Vec<usize, MAX_BATCH> = heapless::Vec::new();
    let mut i = 0;
    while i < window.len() {
        let run = run_at(window, i, tx.gso);
        i += run.len;
        if run.len == 1 {
            // At most one entry per datagram of the window (MAX_BATCH): never full.
            let _ = plain.push(run.start);
            continue;
        }
        // What came before the run goes first.
        if !send_plain(sock, window, &plain, stats) {
            stats.tx_dropped += (window.len() - run.start) as u64;
            return;
        }
        plain.clear();
        match send_gso(sock, window, run, stats) {
            Ok(()) => {}
            Err(e) if gso_refused(e) => {
                tx.gso = false;
                stats.gso_refused += 1;
                for k in run.start..run.start + run.len {
                    let _ = plain.push(k);
                }
            }
            Err(e) if queue_full(e) => {
                stats.tx_dropped += (window.len() - run.start) as u64;
                return;
            }
            Err(_) => stats.tx_errors += run.len as u64,
        }
    }
    // A full queue here leaves nothing of the window behind the datagrams it counted.
    send_plain(sock, window, &plain, stats);
}

/// The non-empty parts of `d` into `iov` from `at`; returns the next free index.
fn gather<'a>(d: &Datagram<'a>, iov: &mut [IoSlice<'a>], mut at: usize) -> usize {
    for p in d.parts.iter().filter(|p| !p.is_empty()) {
        if let Some(slot) = iov.get_mut(at) {
            *slot = IoSlice::new(p);
            at += 1;
        }
    }
    at
}

/// One GSO send of `run`.
fn send_gso(sock: &UdpSocket, window: &[Outgoing<'_>], run: Run, stats: &mut UdpStats) -> Result<(), Errno> {
    let mut iov = [IoSlice::new(&[]); GSO_MAX_SEGMENTS * MAX_PARTS];
    let mut n = 0;
    for o in &window[run.start..run.start + run.len] {
        n = gather(&o.d, &mut iov, n);
    }
    // Below 2^16: a segment is at most one datagram of the MTU.
    let seg = u16::try_from(run.seg).map_err(|_| Errno::MSGSIZE)?;
    let to = window[run.start].to.nix;
    let cmsg = [ControlMessage::UdpGsoSegments(&seg)];
    for _ in 0..EINTR_TRIES {
        stats.tx_calls += 1;
        match nsock::sendmsg(sock.as_raw_fd(), &iov[..n], &cmsg, MsgFlags::MSG_DONTWAIT, Some(to)) {
            Ok(_) => {
                stats.tx_datagrams += run.len as u64;
                stats.gso_sends += 1;
                return Ok(());
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Errno::from_raw_os_error(e as i32)),
        }
    }
    Err(Errno::INTR)
}

/// One `sendmmsg` (more if the kernel takes part of it) of the datagrams of `window` at
/// `picks`. False if the send queue filled: the unsent rest of `picks` is counted dropped, and
/// the caller counts and stops the rest of its window.
fn send_plain(sock: &UdpSocket, window: &[Outgoing<'_>], picks: &[usize], stats: &mut UdpStats) -> bool {
    if picks.is_empty() {
        return true;
    }
    let mut iov = [IoSlice::new(&[]); MAX_BATCH * MAX_PARTS];
    let mut ranges = [(0usize, 0usize); MAX_BATCH];
    let mut n = 0;
    for (r, &k) in ranges.iter_mut().zip(picks) {
        let end = gather(&window[k].d, &mut iov, n);
        *r = (n, end);
        n = end;
    }
    let mut control: [SendAncillaryBuffer<'_, '_, '_>; MAX_BATCH] =
        core::array::from_fn(|_| Default::default());
    let mut hdrs: heapless::Vec<MMsgHdr<'_>, MAX_BATCH> = heapless::Vec::new();
    for ((&k, &(a, b)), ctl) in picks.iter().zip(&ranges).zip(control.iter_mut()) {
        let _ = hdrs.push(MMsgHdr::new_with_addr(window[k].to.any, &iov[a..b], ctl));
    }
    let mut start = 0;
    let mut interrupted = 0;
    while start < hdrs.len() {
        stats.tx_calls += 1;
        match rnet::sendmmsg(sock, &mut hdrs[start..], SendFlags::DONTWAIT) {
            Ok(k) if k > 0 => {
                stats.tx_datagrams += k as u64;
                start += k;
            }
            Err(Errno::INTR) if interrupted < EINTR_TRIES => interrupted += 1,
            // Nothing taken and no error counts as a full queue: never a spin.
            Ok(_) => {
                stats.tx_dropped += (hdrs.len() - start) as u64;
                return false;
            }
            Err(e) if queue_full(e) => {
                stats.tx_dropped += (hdrs.len() - start) as u64;
                return false;
            }
            Err(_) => {
                // This one datagram is refused (unreachable, forbidden, interrupted again and
                // again): the rest go on.
                stats.tx_errors += 1;
                start += 1;
            }
        }
    }
    true
}
