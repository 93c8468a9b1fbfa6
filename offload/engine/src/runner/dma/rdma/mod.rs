//! The `rdma` DMA backend: host memory reached by RDMA READ and RDMA WRITE on one
//! reliable-connected queue pair per host — what a BlueField's ARM cores do across PCIe.
//!
//! The host registers its memory with its own RDMA device (rings and user buffers, in place)
//! and names each region by (address, length, rkey) on the control channel; the engine keeps
//! those in an [`RdmaLink`] and issues every job as RDMA work requests through the link's
//! [`RcPort`], below which is the real queue pair (`ringcast_verbs::RcQueue`, feature `verbs`,
//! made by [`device::VerbsDevice`] when a host sends `RDMA_CONNECT`) or, in unit tests, a fake
//! NIC.
//!
//! Rules, as for every backend (`dma/mod.rs`):
//! - a job is checked against the regions the host exposed before any work request is posted
//!   (refused whole, nothing posted); the host's NIC checks it again (address and rkey);
//! - a job is complete when every one of its work requests completed successfully: the call
//!   that issues it returns then (jobs complete in order, a completion the engine writes after
//!   a job's data is posted only after that data was acknowledged);
//! - a work completion with an error status, or none within [`JOB_TIMEOUT`], faults the link
//!   for good ([`LinkFault`]): every later job fails at once, so the runner detaches that host
//!   — and only that host — with a typed error; a reliable-connected QP in the error state
//!   does not recover without a new connection.
//!
//! A job larger than the link's registered local buffer moves through it in pieces; parts of
//! one job are posted together (one batch) when they fit the buffer. Nothing is allocated per
//! job.
use crate::ctl::QpAddress;
use std::time::{Duration, Instant};

/// Longest wait for one batch's completions: past it the host is taken as gone. A live RC
/// connection completes, or reports an error itself within its retry budget (~30 ms, see
/// `ringcast_verbs::RcQueue::connect`), well inside it. The engine's loop waits here for every
/// host: a host that vanishes stalls it once, for that retry budget.
pub const JOB_TIMEOUT: Duration = Duration::from_millis(250);

/// Work requests posted in one batch at most (and so the pieces a batch tracks).
const BATCH: usize = 16;

/// Regions one host may expose at most (its rings and its registrations).
pub const MAX_EXPOSED: usize = 4096;

/// Parts of one job at most (the ring code's largest job has six).
pub const MAX_PARTS: usize = 8;

/// One RDMA work request, as the link asks its port for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// WRITE (buffer → host) or READ (host → buffer).
    pub write: bool,
    /// Start in the port's local buffer.
    pub local: usize,
    /// Bytes.
    pub len: u32,
    /// Host address.
    pub remote: u64,
    /// The host region's key.
    pub rkey: u32,
}

/// One work completion: its request's id and whether it succeeded (else the status code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkDone {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// `Ok`, or the completion status (`ibv_wc_status`).
    pub status: Result<(), u32>,
}

/// The queue pair below the link: the real one, or a fake NIC in tests.
pub trait RcPort: Send {
    /// The registered local buffer, unless a work request is in flight.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// Its length.
    fn buffer_len(&self) -> usize;
    /// Posts one signalled request; `Err` (errno, or 0 for a request the port refused itself)
    /// when it did not go out.
    fn post(&mut self, req: WorkRequest) -> Result<(), i32>;
    /// One completion, if any is ready; `Err` when polling itself failed.
    fn poll(&mut self) -> Result<Option<WorkDone>, i32>;
    /// The connection's description (for logs).
    fn describe(&self) -> String;
}

/// Why a link stopped serving its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkFault {
    /// A work completion came back with an error status (`ibv_wc_status`).
    #[error("RDMA work completion failed (status {0})")]
    Completion(u32),
    /// The device refused a post (errno).
    #[error("RDMA post refused (errno {0})")]
    Post(i32),
    /// Polling the completion queue failed.
    #[error("RDMA completion queue poll failed ({0})")]
    Poll(i32),
    /// No completion within [`JOB_TIMEOUT`].
    #[error("RDMA job not completed within {JOB_TIMEOUT:?}")]
    Timeout,
    /// A completion for a request this batch did not post.
    #[error("RDMA completion for an unknown request ({0})")]
    Unexpected(u64),
}

/// A region the host exposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Exposed {
    addr: u64,
    len: u64,
    rkey: u32,
}

/// One piece of a batch: `len` bytes of part `part` at `at` within it, at `local` in the buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Piece {
    part: usize,
    at: usize,
    local: usize,
    len: usize,
}

/// Counters of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Work requests posted.
    pub posted: u64,
    /// Jobs refused before posting (outside every exposed region).
    pub refused: u64,
}

/// One host's RDMA connection and the regions it exposed.
pub struct RdmaLink {
    port: Box<dyn RcPort>,
    exposed: Vec<Exposed>,
    fault: Option<LinkFault>,
    next_wr: u64,
    timeout: Duration,
    stats: LinkStats,
}

impl std::fmt::Debug for RdmaLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaLink")
            .field("port", &self.port.describe())
            .field("exposed", &self.exposed.len())
            .field("fault", &self.fault)
            .finish()
    }
}

impl RdmaLink {
    /// A link over `port` with nothing exposed yet.
    pub fn new(port: Box<dyn RcPort>) -> RdmaLink {
        RdmaLink {
            port,
            exposed: Vec::with_capacity(16),
            fault: None,
            next_wr: 1,
            timeout: JOB_TIMEOUT,
            stats: LinkStats::default(),
        }
    }

    /// With another completion timeout (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> RdmaLink {
        self.timeout = timeout;
        self
    }

    /// Records that the host exposed `len` bytes at `addr` under `rkey`; false when the range
    /// wraps, is empty, or the host exposed [`MAX_EXPOSED`] regions already.
    pub fn expose(&mut self, addr: u64, len: u64, rkey: u32) -> bool {
        if len == 0 || addr.checked_add(len).is_none() || self.exposed.len() >= MAX_EXPOSED {
            return false;
        }
        self.exposed.push(Exposed { addr, len, rkey });
        true
    }

    /// Forgets the exposure of exactly that region under `rkey` (the host deregistered it: a
    /// second registration of the same bytes has a key of its own and stays).
    pub fn withdraw(&mut self, addr: u64, len: u64, rkey: u32) {
        if let Some(i) = self.exposed.iter().position(|e| *e == Exposed { addr, len, rkey }) {
            self.exposed.swap_remove(i);
        }
    }

    /// Why the link stopped, if it did.
    pub fn fault(&self) -> Option<LinkFault> {
        self.fault
    }

    /// Its counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The connection (for logs).
    pub fn describe(&self) -> String {
        self.port.describe()
    }

    /// The rkey of an exposed region holding all of `len` bytes at `addr`.
    fn rkey(&self, addr: u64, len: u64) -> Option<u32> {
        let end = addr.checked_add(len)?;
        self.exposed.iter().find(|e| e.addr <= addr && end <= e.addr + e.len).map(|e| e.rkey)
    }

    /// Whether every part lies in an exposed region (an empty part moves nothing and is not
    /// checked, as with `cma`) and the job has at most [`MAX_PARTS`] parts; counts a refusal.
    fn check(&mut self, parts: impl ExactSizeIterator<Item = (u64, usize)>) -> bool {
        debug_assert!(parts.len() <= MAX_PARTS, "a job of {} parts", parts.len());
        let mut ok = self.fault.is_none() && parts.len() <= MAX_PARTS;
        for (addr, len) in parts.filter(|&(_, len)| len > 0) {
            ok &= self.rkey(addr, len as u64).is_some();
        }
        if !ok && self.fault.is_none() {
            self.stats.refused += 1;
        }
        ok
    }

    /// Reads every part (host address → bytes), in order; false when refused or faulted.
    pub fn read_many(&mut self, parts: &mut [(u64, &mut [u8])]) -> bool {
        if !self.check(parts.iter().map(|(a, b)| (*a, b.len()))) {
            return false;
        }
        let lens: [usize; MAX_PARTS] = lens_of(parts.iter().map(|(_, b)| b.len()));
        let addrs: [u64; MAX_PARTS] = addrs_of(parts.iter().map(|(a, _)| *a));
        self.run(
            false,
            parts.len(),
            &lens,
            &addrs,
            |piece, buf| {
                let out = &mut parts[piece.part].1[piece.at..piece.at + piece.len];
                out.copy_from_slice(&buf[piece.local..piece.local + piece.len]);
            },
            |_, _| {},
        )
    }

    /// Writes every part (bytes → host address), each part's pieces complete before the next
    /// part's are posted only when `ordered`; false when refused or faulted.
    pub fn write_many(&mut self, parts: &[(u64, &[u8])], ordered: bool) -> bool {
        if !self.check(parts.iter().map(|(a, b)| (*a, b.len()))) {
            return false;
        }
        if ordered {
            return parts.iter().all(|p| self.write_many(std::slice::from_ref(p), false));
        }
        let lens: [usize; MAX_PARTS] = lens_of(parts.iter().map(|(_, b)| b.len()));
        let addrs: [u64; MAX_PARTS] = addrs_of(parts.iter().map(|(a, _)| *a));
        self.run(
            true,
            parts.len(),
            &lens,
            &addrs,
            |_, _| {},
            |piece, buf| {
                buf[piece.local..piece.local + piece.len]
                    .copy_from_slice(&parts[piece.part].1[piece.at..piece.at + piece.len]);
            },
        )
    }

    /// Moves `n` parts (lengths `lens`, host addresses `addrs`) through the buffer in batches:
    /// `fill` copies a piece into the buffer before a WRITE batch is posted, `drain` out of it
    /// after a READ batch completed.
    fn run(
        &mut self,
        write: bool,
        n: usize,
        lens: &[usize],
        addrs: &[u64],
        mut drain: impl FnMut(Piece, &[u8]),
        mut fill: impl FnMut(Piece, &mut [u8]),
    ) -> bool {
        let cap = self.port.buffer_len();
        if cap == 0 || n > MAX_PARTS {
            return false;
        }
        let (mut part, mut at) = (0, 0);
        while part < n {
            // One batch: pieces until the buffer or the batch is full.
            let mut pieces = [Piece::default(); BATCH];
            let mut rkeys = [0u32; BATCH];
            let (mut count, mut used) = (0, 0);
            while part < n && count < BATCH && used < cap {
                let len = (lens[part] - at).min(cap - used);
                if len > 0 {
                    // Every piece's key before anything is posted: a refusal leaves nothing
                    // in flight (`check` made it unreachable; kept so it stays harmless).
                    let Some(rkey) = self.rkey(addrs[part] + at as u64, len as u64) else { return false };
                    pieces[count] = Piece { part, at, local: used, len };
                    rkeys[count] = rkey;
                    count += 1;
                    used += len;
                    at += len;
                }
                if at == lens[part] {
                    part += 1;
                    at = 0;
                }
            }
            if write {
                let Some(buf) = self.port.buffer() else { return self.faulted(LinkFault::Timeout) };
                for p in &pieces[..count] {
                    fill(*p, buf);
                }
            }
            let first = self.next_wr;
            for (p, &rkey) in pieces[..count].iter().zip(&rkeys) {
                let remote = addrs[p.part] + p.at as u64;
                let wr_id = self.next_wr;
                self.next_wr += 1;
                let req = WorkRequest { wr_id, write, local: p.local, len: p.len as u32, remote, rkey };
                if let Err(e) = self.port.post(req) {
                    return self.faulted(LinkFault::Post(e));
                }
                self.stats.posted += 1;
            }
            if !self.wait(count, first) {
                return false;
            }
            if !write {
                let Some(buf) = self.port.buffer() else { return self.faulted(LinkFault::Timeout) };
                for p in &pieces[..count] {
                    drain(*p, buf);
                }
            }
        }
        true
    }

    /// Waits for the `n` completions of the requests posted from `wr_id` `first` on (every
    /// request in flight); false, faulted, on an error status, a completion of another
    /// request, a failed poll or the timeout.
    fn wait(&mut self, mut n: usize, first: u64) -> bool {
        let mut deadline: Option<Instant> = None;
        let mut spins = 0u32;
        while n > 0 {
            match self.port.poll() {
                Ok(Some(done)) => {
                    if let Err(status) = done.status {
                        return self.faulted(LinkFault::Completion(status));
                    }
                    if done.wr_id < first || done.wr_id >= self.next_wr {
                        return self.faulted(LinkFault::Unexpected(done.wr_id));
                    }
                    n -= 1;
                }
                Ok(None) => {
                    // The clock is read every 64 empty polls: a completion takes a few µs.
                    spins += 1;
                    if spins.is_multiple_of(64) {
                        let now = Instant::now();
                        match deadline {
                            None => deadline = Some(now + self.timeout),
                            Some(d) if now >= d => return self.faulted(LinkFault::Timeout),
                            Some(_) => std::hint::spin_loop(),
                        }
                    }
                }
                Err(e) => return self.faulted(LinkFault::Poll(e)),
            }
        }
        true
    }

    fn faulted(&mut self, fault: LinkFault) -> bool {
        self.fault.get_or_insert(fault);
        false
    }
}

/// The lengths of up to [`MAX_PARTS`] parts (`check` refused longer jobs).
fn lens_of(it: impl Iterator<Item = usize>) -> [usize; MAX_PARTS] {
    let mut out = [0; MAX_PARTS];
    for (o, v) in out.iter_mut().zip(it) {
        *o = v;
    }
    out
}

/// The host addresses of up to [`MAX_PARTS`] parts.
fn addrs_of(it: impl Iterator<Item = u64>) -> [u64; MAX_PARTS] {
    let mut out = [0; MAX_PARTS];
    for (o, v) in out.iter_mut().zip(it) {
        *o = v;
    }
    out
}

/// Where the engine's queue pairs come from: the RDMA device (feature `verbs`: [`device`]),
/// or a fake in tests.
pub trait RdmaDevice: Send {
    /// A queue pair connected to the host's at `host`, and its own address for the host.
    fn connect(&mut self, host: &QpAddress) -> Result<(Box<dyn RcPort>, QpAddress), String>;
}

#[cfg(feature = "verbs")]
pub mod device;

#[cfg(test)]
pub(crate) mod fake;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod engine_tests;
