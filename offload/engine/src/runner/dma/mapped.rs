//! The `mapped` DMA backend: segment handles (what the core knows) to mappings of the hosts'
//! sealed memfds (what a job touches). Same machine only: the engine maps what the host passed.
//!
//! One mapping per memfd (identified by device and inode), shared by every registration of it
//! and reference-counted: registering a buffer twice neither maps it twice nor hides from the
//! core's overlap check that two regions are the same bytes. Each host's mapped bytes are
//! budgeted (`max_host_bytes`), so no host can exhaust the engine's address space; pages of a
//! sparse segment that an engine DMA faults in are charged to the engine's memory cgroup, which
//! the same budget bounds. The core has
//! bounds-checked every DMA range against the registration; the copy re-checks against the
//! mapping, so even a core bug cannot reach outside host memory.
use super::HostMappings;
use ringcast_abi::ctl::CtlStatus;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_ring::{copy_between, ShmSegment};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

struct Mapping {
    seg: Arc<ShmSegment>,
    id: (u64, u64),
    refs: u32,
}

/// Mapped segments by handle.
#[derive(Default)]
pub struct SegmentTable {
    by_handle: HashMap<u64, Mapping>,
    by_file: HashMap<(u64, u64), u64>,
    next: u64,
}

impl SegmentTable {
    /// A table with room for `capacity` mappings before it reallocates (sized at engine start).
    pub fn with_capacity(capacity: usize) -> Self {
        SegmentTable {
            by_handle: HashMap::with_capacity(capacity),
            by_file: HashMap::with_capacity(capacity),
            next: 1,
        }
    }

    /// Maps (or shares the existing mapping of) the memfd `fd` on behalf of a host whose mapped
    /// bytes are `host`, within `budget`. On refusal the descriptor comes back, for the caller
    /// to close off the polling loop.
    ///
    /// The descriptor must be a memfd sealed against shrinking and growing, checked first with
    /// `F_GET_SEALS` (answered inside the kernel for any file): only then is it `fstat`ed and
    /// mapped, so a FUSE file or a socket never gets an operation that could block.
    pub fn acquire(
        &mut self,
        fd: OwnedFd,
        host: &mut HostMappings,
        budget: u64,
    ) -> Result<(SegmentHandle, u64), (CtlStatus, Option<OwnedFd>)> {
        use rustix::fs::SealFlags;
        let sealed = rustix::fs::fcntl_get_seals(&fd)
            .is_ok_and(|s| s.contains(SealFlags::SHRINK) && s.contains(SealFlags::GROW));
        if !sealed {
            return Err((CtlStatus::MAP_FAILED, Some(fd)));
        }
        let Ok(st) = rustix::fs::fstat(&fd) else { return Err((CtlStatus::MAP_FAILED, None)) };
        let id = (st.st_dev, st.st_ino);
        let existing = self.by_file.get(&id).copied();
        let handle = SegmentHandle(existing.unwrap_or(self.next));
        // The mapping's own length, not the file's: sealed, they are equal, but the mapping is
        // what a DMA is checked against.
        let len = match existing.and_then(|h| self.by_handle.get(&h)) {
            Some(m) => m.seg.len() as u64,
            None => u64::try_from(st.st_size).map_err(|_| (CtlStatus::MAP_FAILED, None))?,
        };
        if !host.holds(handle) && !host.fits(len, budget) {
            return Err((CtlStatus::LIMIT, Some(fd)));
        }
        match existing {
            Some(h) => {
                if let Some(m) = self.by_handle.get_mut(&h) {
                    m.refs += 1;
                }
            }
            None => {
                // A sealed memfd: closing it on this thread never blocks.
                let seg = ShmSegment::from_fd(fd).map_err(|_| (CtlStatus::MAP_FAILED, None))?;
                self.next += 1;
                self.by_file.insert(id, handle.0);
                self.by_handle.insert(handle.0, Mapping { seg: Arc::new(seg), id, refs: 1 });
            }
        }
        host.take(handle, len);
        Ok((handle, len))
    }

    /// Drops one reference of `host` to `handle`, unmapping when no registration uses it.
    pub fn release(&mut self, handle: SegmentHandle, host: &mut HostMappings) {
        host.give_back(handle);
        if let Some(m) = self.by_handle.get_mut(&handle.0) {
            m.refs -= 1;
            if m.refs == 0 {
                let id = m.id;
                self.by_handle.remove(&handle.0);
                self.by_file.remove(&id);
            }
        }
    }

    /// Whether `handle` is mapped now.
    pub fn holds(&self, handle: SegmentHandle) -> bool {
        self.by_handle.contains_key(&handle.0)
    }

    /// Mappings alive.
    pub fn mapped(&self) -> usize {
        self.by_handle.len()
    }

    /// Reads host memory at `at + offset` into `out` (the broadcast root's buffer); false when
    /// the handle is unknown or the range falls outside its mapping.
    pub fn read(&self, at: Resolved, offset: u64, out: &mut [u8]) -> bool {
        let Some(m) = self.by_handle.get(&at.segment.0) else { return false };
        at.offset.checked_add(offset).is_some_and(|o| m.seg.read_at(o, out).is_ok())
    }

    /// Writes `data` to host memory at `at + offset` (a broadcast's delivery); false as for
    /// [`SegmentTable::read`].
    pub fn write(&self, at: Resolved, offset: u64, data: &[u8]) -> bool {
        let Some(m) = self.by_handle.get(&at.segment.0) else { return false };
        at.offset.checked_add(offset).is_some_and(|o| m.seg.write_at(o, data).is_ok())
    }

    /// Hands `f` the `len` bytes of host memory at `at` where they lie in the mapping (a
    /// receiver's MAC over the bytes it placed there); false as for [`SegmentTable::read`].
    pub fn view(&self, at: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let Some(m) = self.by_handle.get(&at.segment.0) else { return false };
        m.seg.with_bytes(at.offset, len as u64, |b| f(b)).is_ok()
    }

    /// Copies one chunk of a DMA; false when a handle is unknown or a range falls outside its
    /// mapping.
    pub fn dma(&self, src: Resolved, dst: Resolved, len: u64) -> bool {
        match (self.by_handle.get(&src.segment.0), self.by_handle.get(&dst.segment.0)) {
            (Some(s), Some(d)) => copy_between(&s.seg, src.offset, &d.seg, dst.offset, len).is_ok(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_outside_its_mapping_is_refused_before_it_is_issued() {
        let host_buf = ShmSegment::create("ringcast-test", 4096).unwrap();
        host_buf.write_at(0, &[9u8; 4096]).unwrap();
        let fd = host_buf.fd().try_clone_to_owned().unwrap();
        let mut table = SegmentTable::with_capacity(4);
        let mut host = HostMappings::default();
        let (h, len) = table.acquire(fd, &mut host, u64::MAX).unwrap();
        assert_eq!(len, 4096);
        let at = Resolved { segment: h, offset: 0 };
        let mut out = [0u8; 16];
        assert!(table.read(at, 4080, &mut out));
        assert_eq!(out, [9; 16]);
        // One byte past the end, an offset that overflows, an unknown handle: refused.
        assert!(!table.read(at, 4081, &mut out));
        assert!(!table.read(Resolved { segment: h, offset: u64::MAX }, 1, &mut out));
        assert!(!table.read(Resolved { segment: SegmentHandle(h.0 + 1), offset: 0 }, 0, &mut out));
        assert!(!table.write(at, 4090, &[0; 7]));
        assert!(!table.dma(at, Resolved { segment: h, offset: 4000 }, 200));
        let mut back = [0u8; 4096];
        host_buf.read_at(0, &mut back).unwrap();
        assert_eq!(back, [9u8; 4096], "refused jobs wrote nothing");
        table.release(h, &mut host);
        assert_eq!(table.mapped(), 0);
        assert!(!table.read(at, 0, &mut out), "a released segment is unknown");
    }

    /// The engine's direct reach (`HostMemory::port`): it places into a mapped segment and
    /// lends its bytes in place, within the mapping only, and reaches nothing once released.
    #[test]
    fn the_port_places_and_lends_mapped_bytes_and_nothing_else() {
        use ringcast_proto::engine::HostPort;
        let host_buf = ShmSegment::create("ringcast-test", 4096).unwrap();
        let fd = host_buf.fd().try_clone_to_owned().unwrap();
        let mut memory = super::super::HostMemory::with_capacity(4);
        let mut host = HostMappings::default();
        let (h, _) = memory.mapped().acquire(fd, &mut host, u64::MAX).unwrap();
        let at = Resolved { segment: h, offset: 4000 };
        let mut port = memory.port();
        assert!(port.reaches(at));
        assert!(port.place(at, &[5; 96]));
        assert!(!port.place(at, &[5; 97]), "past the mapping");
        let mut seen = Vec::new();
        assert!(port.view(at, 96, &mut |b| seen.extend_from_slice(b)));
        assert_eq!(seen, [5; 96]);
        assert!(!port.view(at, 97, &mut |_| panic!("lent past the mapping")));
        let mut back = [0u8; 96];
        host_buf.read_at(4000, &mut back).unwrap();
        assert_eq!(back, [5; 96], "the host sees the placed bytes");
        let unknown = Resolved { segment: SegmentHandle(h.0 + 1), offset: 0 };
        assert!(!port.reaches(unknown) && !port.place(unknown, &[1]));
        let ranged = Resolved { segment: SegmentHandle(super::super::RANGE_TAG | 1), offset: 0 };
        assert!(!port.reaches(ranged), "a cma/rdma range goes through jobs");
        memory.release(h, &mut host);
        assert!(!memory.port().reaches(at) && !memory.port().place(at, &[1]));
    }

    #[test]
    fn only_a_sealed_memfd_is_mapped() {
        // A plain file: not sealed, never fstat'ed or mapped, handed back to be closed.
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut table = SegmentTable::with_capacity(4);
        let mut host = HostMappings::default();
        match table.acquire(file.into(), &mut host, u64::MAX) {
            Err((CtlStatus::MAP_FAILED, Some(_))) => {}
            other => panic!("an unsealed file must be refused, got {:?}", other.map(|x| x.1)),
        }
        assert_eq!(table.mapped(), 0);
    }
}
