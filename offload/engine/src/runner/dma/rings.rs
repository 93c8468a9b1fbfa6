//! A host's rings as the engine sees them: mapped into its address space (the engine built them,
//! `mapped` backend), or host-owned and reached only by DMA (`cma` or `rdma` backend: the
//! BlueField contract).
//!
//! Host-owned rings have the layout of `shared-abi` (`SegmentHeader`, two `RingControl`s and
//! their slots) at an address of the host's memory. The engine plays its two ends by DMA:
//! - submissions: a read of the producer's line (mirror, then `tail`: trusted only when they
//!   agree) and of the new descriptors (a burst); `head` and its mirror go back with the pass's
//!   completions, or alone at the end of a pass that had none;
//! - completions: the entries, then `tail`, then its mirror (each visible before the next),
//!   then one read of the consumer's line — its `head` for the free slots and its `waiting`
//!   flag: a host asleep on its control socket is sent a `WAKE` there (no futex crosses the
//!   boundary);
//! - new work is found by reading the producer's line every pass (a DMA poll).
//!
//! Where one job keeps its parts in order (`Remote::keeps_order`: x86-64 with the `cma` system
//! calls) each step above is one job — the poll reads the tail and a burst of slots together —
//! so a descriptor costs three DMA jobs in all (poll; completions with `head`; consumer line);
//! elsewhere ordered parts are separate jobs with a fence between.
use super::remote::Remote;
use ringcast_abi::{Completion, RingControl, SegmentHeader, SubmissionDescriptor};
use ringcast_ring::attach::{self, EngineRings};
use zerocopy::{FromZeros, IntoBytes};

/// Offset of `tail` and of `tail_mirror` from a ring's control block.
const TAIL: u64 = 128;
const TAIL_MIRROR: u64 = 144;
/// Offset of `head`, `waiting` and `head_mirror` from a ring's control block.
const HEAD: u64 = 256;
const HEAD_MIRROR: u64 = 272;
const SLOTS: u64 = RingControl::SLOTS_OFFSET as u64;
const ENTRY: u64 = 64;
static_assertions::const_assert_eq!(core::mem::size_of::<SubmissionDescriptor>(), ENTRY as usize);
static_assertions::const_assert_eq!(core::mem::size_of::<Completion>(), ENTRY as usize);

/// The engine's ends of a host's host-owned rings, played by DMA jobs (`cma` or `rdma`).
#[derive(Debug)]
pub struct RemoteRings {
    process: Remote,
    sq: u64,
    cq: u64,
    entries: u64,
    /// Submissions consumed (ours; written back to the host).
    sq_head: u64,
    /// The host's last trusted `tail`.
    sq_tail: u64,
    /// Completions published (ours).
    cq_tail: u64,
    /// The host's last trusted `head`.
    cq_head: u64,
    /// The host's `waiting` as last read.
    host_waiting: bool,
    /// Submissions taken whose `head` has not gone back to the host yet.
    head_dirty: bool,
}

/// Why host-owned rings were refused at attach.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The header could not be read at the address the host named.
    #[error("host-owned rings unreachable by DMA at the address named")]
    Unreachable,
    /// The header is not the layout the engine would have built, or lacks the nonce.
    #[error("host-owned rings refused: {0}")]
    Header(#[from] attach::AttachError),
}

impl RemoteRings {
    /// Reads and checks the header of the `len` bytes at `addr` of `process` (the nonce
    /// `proof` included; capacities up to `max_entries`), then the rings' indices.
    pub fn open(
        process: Remote,
        addr: u64,
        len: u64,
        proof: u64,
        max_entries: u32,
    ) -> Result<Self, RemoteError> {
        let mut header = SegmentHeader::new_zeroed();
        if !process.read(addr, header.as_mut_bytes()) {
            return Err(RemoteError::Unreachable);
        }
        let entries = attach::check_host_owned(&header, len, proof, max_entries)?;
        let r = RemoteRings {
            process,
            sq: addr + header.sq_offset,
            cq: addr + header.cq_offset,
            entries: u64::from(entries),
            sq_head: 0,
            sq_tail: 0,
            cq_tail: 0,
            cq_head: 0,
            host_waiting: false,
            head_dirty: false,
        };
        // A fresh host starts both rings empty; anything else is refused rather than trusted.
        let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        if !r.process.read_many(&mut [
            (r.sq + HEAD, &mut a[..]),
            (r.sq + TAIL, &mut b[..]),
            (r.cq + TAIL, &mut c[..]),
        ]) {
            return Err(RemoteError::Unreachable);
        }
        if [a, b, c].iter().any(|v| u64::from_le_bytes(*v) != 0) {
            return Err(RemoteError::Header(attach::AttachError::Header("rings not fresh")));
        }
        Ok(r)
    }

    /// The host process.
    pub fn process(&self) -> &Remote {
        &self.process
    }

    /// Capacity of each ring.
    pub fn entries(&self) -> usize {
        self.entries as usize
    }

    /// Reads the host's submission `tail` (mirror first; the last trusted value while a store
    /// of it is in progress); `Err` when the read failed or it names an impossible state.
    fn read_sq_tail(&mut self) -> Result<u64, RingFault> {
        let (mut m, mut t) = ([0u8; 8], [0u8; 8]);
        if !self
            .process
            .read_in_order(&mut [(self.sq + TAIL_MIRROR, &mut m[..]), (self.sq + TAIL, &mut t[..])])
        {
            return Err(RingFault);
        }
        self.accept_sq_tail(m, t)
    }

    /// Takes the host's submission `tail` `t` read after its mirror `m`: trusted when they
    /// agree (else the last trusted value stands: a store in progress); `Err` when it names an
    /// impossible state.
    fn accept_sq_tail(&mut self, m: [u8; 8], t: [u8; 8]) -> Result<u64, RingFault> {
        let (m, t) = (u64::from_le_bytes(m), u64::from_le_bytes(t));
        if m == t {
            if t.wrapping_sub(self.sq_head) > self.entries {
                return Err(RingFault);
            }
            self.sq_tail = t;
        }
        Ok(self.sq_tail)
    }

    /// Takes up to `out.len()` new descriptors: `Ok(n)`; `Err` when the host's ring is corrupt
    /// or its memory is gone (the runner detaches it).
    pub fn pop_batch(&mut self, out: &mut [SubmissionDescriptor]) -> Result<usize, RingFault> {
        let n = if self.process.keeps_order() {
            self.read_tail_and_slots(out)?
        } else {
            let tail = self.read_sq_tail()?;
            let n = (tail - self.sq_head).min(out.len() as u64) as usize;
            // The slots are read only after the tail that published them (a fence between).
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if n > 0 && !self.read_slots(&mut out[..n]) {
                return Err(RingFault);
            }
            n
        };
        if n == 0 {
            return Ok(0);
        }
        // `head` goes back with this pass's completions (one job less per descriptor), or at
        // the end of the pass ([`RemoteRings::flush_head`]) when there are none.
        self.sq_head += n as u64;
        self.head_dirty = true;
        Ok(n)
    }

    /// Writes `head` (and its mirror) back if descriptors were taken since it last went: the
    /// end of a pass in which no completion carried it. False when the host's memory is gone.
    pub fn flush_head(&mut self) -> bool {
        if !self.head_dirty {
            return true;
        }
        self.head_dirty = false;
        let head = self.sq_head.to_le_bytes();
        let sq = self.sq;
        self.process.write_in_order(&[(sq + HEAD, &head), (sq + HEAD_MIRROR, &head)])
    }

    /// Reads the descriptors at positions `sq_head..sq_head + out.len()` (two parts when they
    /// wrap).
    fn read_slots(&self, out: &mut [SubmissionDescriptor]) -> bool {
        let start = self.sq_head % self.entries;
        let first = (out.len() as u64).min(self.entries - start) as usize;
        let (a, b) = out.split_at_mut(first);
        self.process.read_many(&mut [
            (self.sq + SLOTS + start * ENTRY, a.as_mut_bytes()),
            (self.sq + SLOTS, b.as_mut_bytes()),
        ])
    }

    /// One job for a poll where parts are read in order ([`Remote::keeps_order`]): the tail's
    /// mirror, the tail, then as many slots from `sq_head` as `out` holds (up to the ring's
    /// end) — those below the tail were published before it, so they are read complete; the
    /// rest are ignored. Returns how many new descriptors `out` holds.
    fn read_tail_and_slots(&mut self, out: &mut [SubmissionDescriptor]) -> Result<usize, RingFault> {
        let start = self.sq_head % self.entries;
        let window = (out.len() as u64).min(self.entries - start) as usize;
        let (mut m, mut t) = ([0u8; 8], [0u8; 8]);
        if !self.process.read_many(&mut [
            (self.sq + TAIL_MIRROR, &mut m[..]),
            (self.sq + TAIL, &mut t[..]),
            (self.sq + SLOTS + start * ENTRY, out[..window].as_mut_bytes()),
        ]) {
            return Err(RingFault);
        }
        let tail = self.accept_sq_tail(m, t)?;
        Ok(((tail - self.sq_head) as usize).min(window))
    }

    /// Descriptors published and not taken (for the drop count when the host goes).
    pub fn unread(&mut self) -> u64 {
        self.read_sq_tail().map_or(0, |t| t - self.sq_head)
    }

    /// Reads the host's completion `head` (mirror first) and `waiting`. A head is taken only
    /// when it agrees with its mirror and lies between the last one taken and our tail: a host
    /// moving it backwards (or past what we published) is ignored, so the free count never
    /// exceeds the ring.
    fn read_cq_consumer(&mut self) -> bool {
        let (mut h, mut w, mut m) = ([0u8; 8], [0u8; 4], [0u8; 8]);
        if !self.process.read_in_order(&mut [
            (self.cq + HEAD_MIRROR, &mut m[..]),
            (self.cq + HEAD, &mut h[..]),
            (self.cq + HEAD + 8, &mut w[..]),
        ]) {
            return false;
        }
        let (m, h) = (u64::from_le_bytes(m), u64::from_le_bytes(h));
        if m == h && h >= self.cq_head && h <= self.cq_tail {
            self.cq_head = h;
        }
        self.host_waiting = u32::from_le_bytes(w) != 0;
        true
    }

    /// Free completion slots (re-reading the host's `head` only when the cached count is short
    /// of `want`).
    pub fn free_slots(&mut self, want: usize) -> usize {
        let free = |r: &Self| r.entries.saturating_sub(r.cq_tail - r.cq_head) as usize;
        if free(self) < want {
            self.read_cq_consumer();
        }
        free(self)
    }

    /// Publishes `items` (all of them fit: the runner reserved the slots); false when the
    /// host's memory is gone. After it, [`RemoteRings::host_sleeping`] says whether to wake it.
    pub fn push_batch(&mut self, items: &[Completion]) -> bool {
        let n = items.len() as u64;
        if n == 0 {
            return true;
        }
        let start = self.cq_tail % self.entries;
        let first = n.min(self.entries - start) as usize;
        let (a, b) = items.split_at(first);
        let (cq, sq) = (self.cq, self.sq);
        let tail = (self.cq_tail + n).to_le_bytes();
        let head = self.sq_head.to_le_bytes();
        // The submission `head` taken this pass first (empty parts when it has gone already):
        // a host that sees these completions then sees the room they made, never a ring still
        // full. Then the entries, the tail, its mirror: each visible before the next.
        let head_part: &[u8] = if self.head_dirty { &head } else { &[] };
        let ok = self.process.write_in_order(&[
            (sq + HEAD, head_part),
            (sq + HEAD_MIRROR, head_part),
            (cq + SLOTS + start * ENTRY, a.as_bytes()),
            (cq + SLOTS, b.as_bytes()),
            (cq + TAIL, &tail),
            (cq + TAIL_MIRROR, &tail),
        ]);
        self.head_dirty = false;
        if !ok {
            return false;
        }
        self.cq_tail += n;
        // The host stores `waiting` before it re-checks `tail`; we stored `tail` before this
        // read: one of us sees the other (the fence orders our store before our load).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.read_cq_consumer()
    }

    /// True when the host said (at the last read) that it sleeps waiting for completions.
    pub fn host_sleeping(&self) -> bool {
        self.host_waiting
    }
}

/// A ring a host broke or took away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFault;

/// A host's rings: mapped (engine-built) or host-owned.
// One per attached host, in a table sized at start: boxing the mapped variant (the hot one)
// would add a pointer chase to every pass for nothing.
#[allow(clippy::large_enum_variant)]
pub enum HostRings {
    /// Mapped into the engine (the `mapped` backend).
    Mapped(EngineRings),
    /// Reached by DMA (the `cma` or `rdma` backend).
    Remote(RemoteRings),
}

impl HostRings {
    /// Up to `out.len()` new descriptors; `Err` on a corrupt or vanished ring.
    pub fn pop_batch(&mut self, out: &mut [SubmissionDescriptor]) -> Result<usize, RingFault> {
        match self {
            HostRings::Mapped(r) => r.sq.pop_batch(out).map_err(|_| RingFault),
            HostRings::Remote(r) => r.pop_batch(out),
        }
    }

    /// Free completion slots, looking again only when fewer than `want` are known free.
    pub fn free_slots(&mut self, want: usize) -> usize {
        match self {
            HostRings::Mapped(r) => r.cq.free_slots(),
            HostRings::Remote(r) => r.free_slots(want),
        }
    }

    /// Descriptors published and not taken.
    pub fn unread(&mut self) -> u64 {
        match self {
            HostRings::Mapped(r) => r.sq.len().unwrap_or(0) as u64,
            HostRings::Remote(r) => r.unread(),
        }
    }

    /// Whether the host sleeps waiting for its completions — it armed its completion ring's
    /// doorbell, has read every completion published to it and left nothing unread in its
    /// submission ring — so that it posts nothing until a completion wakes it (a hint: a post
    /// racing the check waits out one fabric wait at most). Host-owned rings: false (their
    /// engine never waits on the fabric: `park_unavailable`).
    pub fn host_asleep(&mut self) -> bool {
        match self {
            HostRings::Mapped(r) => {
                r.cq.consumer_asleep() && r.cq.in_flight() == 0 && r.sq.is_empty().unwrap_or(false)
            }
            HostRings::Remote(_) => false,
        }
    }

    /// The mapped rings (doorbells), if these are.
    pub fn mapped(&self) -> Option<&EngineRings> {
        match self {
            HostRings::Mapped(r) => Some(r),
            HostRings::Remote(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::dma::cma::Process;
    use crate::runner::dma::rdma::{fake::FakeNic, RdmaLink};
    use ringcast_abi::{Opcode, Status};

    /// Host-owned rings in this very process, played by DMA into it: cma on our own pid, or
    /// RDMA through the fake NIC (a 256-byte buffer: bursts move in pieces).
    fn rings_by(entries: u32, rdma: bool) -> (ringcast_ring::attach::HostRings, RemoteRings) {
        let mut host = attach::create_host_owned(entries, 42).unwrap();
        host.sq.set_mirrored();
        host.cq.set_mirrored();
        let addr = host.segment.as_non_null().as_ptr() as u64;
        let me = if rdma {
            let (nic, state) = FakeNic::new(256);
            state.lock().unwrap().registered.push((addr, host.header.total_len, 0x5eed));
            let mut link = RdmaLink::new(Box::new(nic));
            assert!(link.expose(addr, host.header.total_len, 0x5eed));
            Remote::rdma(link)
        } else {
            Remote::Cma(Process::open(nix::unistd::Pid::this()).unwrap())
        };
        let remote = RemoteRings::open(me, addr, host.header.total_len, 42, 1024).unwrap();
        (host, remote)
    }

    fn rings(entries: u32) -> (ringcast_ring::attach::HostRings, RemoteRings) {
        rings_by(entries, false)
    }

    #[test]
    fn descriptors_and_completions_cross_by_dma_in_order_through_wraps() {
        for rdma in [false, true] {
            cross_through_wraps(rdma);
        }
    }

    fn cross_through_wraps(rdma: bool) {
        let (mut host, mut remote) = rings_by(8, rdma);
        let mut out = [SubmissionDescriptor::default(); 5];
        let mut next = 0u64;
        for round in 0..50u64 {
            let n = (round % 5 + 1) as usize;
            let batch: Vec<_> = (0..n).map(|i| SubmissionDescriptor::nop(next + i as u64)).collect();
            assert_eq!(host.sq.push_batch(&batch), n);
            // A burst stops at the ring's end; the rest comes with the next poll.
            let mut taken = Vec::new();
            while taken.len() < n {
                let got = remote.pop_batch(&mut out).unwrap();
                assert!(got > 0, "published descriptors are found");
                taken.extend_from_slice(&out[..got]);
            }
            assert_eq!(taken.len(), n);
            assert!(taken.iter().enumerate().all(|(i, d)| d.cookie == next + i as u64));
            let done: Vec<_> =
                taken.iter().map(|d| Completion::new(d.cookie, Opcode::NOP, Status::OK, 0)).collect();
            assert!(remote.free_slots(n) >= n);
            assert!(remote.push_batch(&done));
            for i in 0..n as u64 {
                assert_eq!(host.cq.try_pop().unwrap().map(|c| c.cookie), Some(next + i));
            }
            next += n as u64;
        }
        assert_eq!(remote.unread(), 0);
    }

    #[test]
    fn a_host_moving_its_head_backwards_or_past_the_tail_gets_no_more_room() {
        let (host, mut remote) = rings(8);
        let cq = host.header.cq_offset;
        let done = [Completion::new(1, Opcode::NOP, Status::OK, 0); 8];
        assert_eq!(remote.free_slots(8), 8);
        assert!(remote.push_batch(&done[..6]));
        let write_head = |v: u64| {
            host.segment.write_at(cq + HEAD, &v.to_le_bytes()).unwrap();
            host.segment.write_at(cq + HEAD_MIRROR, &v.to_le_bytes()).unwrap();
        };
        // The host consumed 4, then claims 0 again, then 100: neither frees what it holds.
        write_head(4);
        assert_eq!(remote.free_slots(8), 6);
        write_head(0);
        assert_eq!(remote.free_slots(8), 6, "a head moving backwards is ignored");
        write_head(100);
        assert_eq!(remote.free_slots(8), 6, "a head past our tail is ignored");
        assert!(remote.push_batch(&done[..6]));
        write_head(0);
        assert_eq!(remote.free_slots(8), 0, "never more than the ring, never a wrap-around");
    }

    #[test]
    fn a_tail_more_than_a_ring_ahead_breaks_the_ring_and_stale_rings_are_refused() {
        let (host, mut remote) = rings(8);
        let sq = host.header.sq_offset;
        host.segment.write_at(sq + TAIL, &9u64.to_le_bytes()).unwrap();
        host.segment.write_at(sq + TAIL_MIRROR, &9u64.to_le_bytes()).unwrap();
        let mut out = [SubmissionDescriptor::default(); 4];
        assert_eq!(remote.pop_batch(&mut out), Err(RingFault));
        // Rings that are not fresh, or without the nonce, are refused at attach.
        let me = || Remote::Cma(Process::open(nix::unistd::Pid::this()).unwrap());
        let addr = host.segment.as_non_null().as_ptr() as u64;
        assert!(RemoteRings::open(me(), addr, host.header.total_len, 42, 1024).is_err(), "not fresh");
        let other = attach::create_host_owned(8, 42).unwrap();
        let addr = other.segment.as_non_null().as_ptr() as u64;
        assert!(RemoteRings::open(me(), addr, other.header.total_len, 43, 1024).is_err(), "wrong nonce");
        assert!(
            RemoteRings::open(me(), addr, other.header.total_len - 64, 42, 1024).is_err(),
            "wrong length"
        );
        assert!(RemoteRings::open(me(), addr, other.header.total_len, 42, 4).is_err(), "over the limit");
        assert!(RemoteRings::open(me(), 8, other.header.total_len, 42, 1024).is_err(), "unmapped");
    }
}
