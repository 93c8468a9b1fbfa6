//! Ranges of host memory registered by address, reached by a remote backend (`cma` or
//! `rdma`): the table every such job is checked against before it is issued. A host registers
//! any range of its own memory (an MPI user buffer in place); the core sees each range as a
//! segment of its own starting at offset 0, under a handle tagged [`RANGE_TAG`].
use super::remote::Remote;
use super::HostMappings;
use ringcast_abi::ctl::CtlStatus;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use std::collections::HashMap;

/// Handles of ranges registered by address carry this bit (mapped segments never do), so one
/// handle space serves every backend and the core's overlap checks see distinct handles.
pub const RANGE_TAG: u64 = 1 << 63;

/// One registered range of a host's memory.
#[derive(Clone, Debug)]
struct Range {
    remote: Remote,
    base: u64,
    len: u64,
    /// The key it was exposed under (`rdma`; 0 for `cma`).
    rkey: u32,
}

/// Registered ranges by handle (both remote backends).
#[derive(Default)]
pub struct RangeTable {
    ranges: HashMap<u64, Range>,
    next: u64,
}

impl RangeTable {
    /// Registers `len` bytes at `addr` of `remote` for a host whose registered bytes are
    /// `host`, within `budget` (`rkey`: the key an `rdma` host exposed it under, already
    /// recorded on its link). The range must be reachable now: its first and last byte are
    /// read once (a range the host does not have mapped is refused, not discovered later —
    /// with `rdma`, a wrong key is discovered by the host's NIC on that read, which ends the
    /// connection: a reliable-connected queue pair does not survive a remote access error).
    pub fn acquire(
        &mut self,
        remote: &Remote,
        addr: u64,
        len: u64,
        rkey: u32,
        host: &mut HostMappings,
        budget: u64,
    ) -> Result<(SegmentHandle, u64), CtlStatus> {
        if len == 0 || addr.checked_add(len).is_none_or(|end| end > usize::MAX as u64) {
            return Err(CtlStatus::BAD_REQUEST);
        }
        if !host.fits(len, budget) {
            return Err(CtlStatus::LIMIT);
        }
        let mut probe = [0u8; 1];
        if !remote.read(addr, &mut probe) || !remote.read(addr + len - 1, &mut probe) {
            return Err(CtlStatus::BACKEND);
        }
        self.next += 1;
        let handle = SegmentHandle(RANGE_TAG | self.next);
        self.ranges.insert(handle.0, Range { remote: remote.clone(), base: addr, len, rkey });
        host.take(handle, len);
        // The core sees the range as a segment of its own, starting at offset 0.
        Ok((handle, len))
    }

    /// Drops `handle` (one registration, never shared); the address range it named.
    pub fn release(&mut self, handle: SegmentHandle, host: &mut HostMappings) {
        host.give_back(handle);
        if let Some(r) = self.ranges.remove(&handle.0) {
            // An `rdma` host's region is exposed once per registration: the link forgets it.
            r.remote.withdraw(r.base, r.len, r.rkey);
        }
    }

    /// Ranges registered now.
    pub fn registered(&self) -> usize {
        self.ranges.len()
    }

    /// The process and address of `len` bytes at `at + offset`, checked inside the range.
    fn locate(&self, at: Resolved, offset: u64, len: u64) -> Option<(&Remote, u64)> {
        let r = self.ranges.get(&at.segment.0)?;
        let start = at.offset.checked_add(offset)?;
        (start.checked_add(len)? <= r.len).then_some((&r.remote, r.base + start))
    }

    /// Whether `len` bytes at `a` and at `b` are the same memory in part (two registrations of
    /// one host may overlap: each has a handle of its own, so the state machine's overlap
    /// check, which compares handles, cannot see it).
    pub fn overlap(&self, a: Resolved, b: Resolved, len: u64) -> bool {
        match (self.locate(a, 0, len), self.locate(b, 0, len)) {
            (Some((pa, xa)), Some((pb, xb))) => pa.same_memory(pb) && xa < xb + len && xb < xa + len,
            _ => false,
        }
    }

    /// Reads host memory at `at + offset` into `out`; false when the handle is unknown, the
    /// range falls outside the registration, or the host no longer has it mapped.
    pub fn read(&self, at: Resolved, offset: u64, out: &mut [u8]) -> bool {
        self.locate(at, offset, out.len() as u64).is_some_and(|(p, addr)| p.read(addr, out))
    }

    /// Writes `data` to host memory at `at + offset`; false as for [`CmaTable::read`].
    pub fn write(&self, at: Resolved, offset: u64, data: &[u8]) -> bool {
        self.locate(at, offset, data.len() as u64).is_some_and(|(p, addr)| p.write(addr, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::dma::cma::Process;
    use nix::unistd::Pid;

    fn me() -> Remote {
        Remote::Cma(Process::open(Pid::this()).unwrap())
    }

    #[test]
    fn a_job_outside_its_registration_is_refused_before_it_is_issued() {
        let mut table = RangeTable::default();
        let mut host = HostMappings::default();
        let buf = vec![7u8; 4096];
        let (h, len) = table.acquire(&me(), buf.as_ptr() as u64, 4096, 0, &mut host, u64::MAX).unwrap();
        assert_eq!(len, 4096);
        let at = Resolved { segment: h, offset: 0 };
        let mut out = [0u8; 16];
        assert!(table.read(at, 4080, &mut out));
        assert_eq!(out, [7; 16]);
        // One byte past the end, an offset that overflows, an unknown handle: refused.
        assert!(!table.read(at, 4081, &mut out));
        assert!(!table.read(Resolved { segment: h, offset: u64::MAX }, 1, &mut out));
        assert!(!table.read(Resolved { segment: SegmentHandle(RANGE_TAG | 99), offset: 0 }, 0, &mut out));
        assert!(!table.write(at, 4090, &[0; 7]));
        assert_eq!(buf[4090..], [7; 6], "a refused write wrote nothing");
        table.release(h, &mut host);
        assert!(!table.read(at, 0, &mut out), "a released range is unknown");
        assert_eq!(table.registered(), 0);
    }

    #[test]
    fn a_range_the_host_has_not_mapped_or_an_empty_one_or_over_budget_is_refused() {
        let mut table = RangeTable::default();
        let mut host = HostMappings::default();
        // Page 0 is never mapped.
        assert_eq!(table.acquire(&me(), 0, 4096, 0, &mut host, u64::MAX).err(), Some(CtlStatus::BACKEND));
        let buf = [0u8; 64];
        let addr = buf.as_ptr() as u64;
        assert_eq!(table.acquire(&me(), addr, 0, 0, &mut host, u64::MAX).err(), Some(CtlStatus::BAD_REQUEST));
        assert_eq!(
            table.acquire(&me(), u64::MAX - 1, 8, 0, &mut host, u64::MAX).err(),
            Some(CtlStatus::BAD_REQUEST)
        );
        assert_eq!(table.acquire(&me(), addr, 64, 0, &mut host, 32).err(), Some(CtlStatus::LIMIT));
        assert!(table.acquire(&me(), addr, 64, 0, &mut host, 64).is_ok());
        assert_eq!(
            table.acquire(&me(), addr, 1, 0, &mut host, 64).err(),
            Some(CtlStatus::LIMIT),
            "budget spent"
        );
    }
}
