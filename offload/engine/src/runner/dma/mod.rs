//! The DMA port: the only way the engine's runner touches host memory.
//!
//! The sans-IO core asks for host memory as actions (`Action::Dma`: load into its staging,
//! store from it, copy between two regions), each on a (segment handle, offset) the core has
//! bounds-checked against the host's registration (`intake::regions`), and is told of each job's
//! end with `handle_dma_done`. The runner carries the jobs out here, on one of three backends,
//! chosen per host at attach:
//! - `mapped` ([`mapped`]): the host passed sealed memfds, the engine maps them and copies with
//!   `memcpy` — one machine, the fastest path, and what the thread mode uses;
//! - `cma` ([`cma`]): the host names addresses of its own memory and the engine reaches them
//!   with `process_vm_readv`/`writev`, mapping nothing — what the DPU emulation runs to prove
//!   the engine needs nothing else;
//! - `rdma` ([`rdma`]): the host registers its memory with its RDMA device and names it by
//!   (address, length, rkey); the engine reaches it by RDMA READ and WRITE on one
//!   reliable-connected queue pair per host — what a BlueField does across PCIe.
//!
//! `cma` and `rdma` share everything above the wire ([`remote::Remote`]): the table of ranges
//! registered by address ([`ranges`]) and host-owned rings ([`rings`]).
//!
//! Rules every backend keeps:
//! - a job is checked before it is issued — `cma` and `rdma` against the registered range
//!   (and `rdma` again against the regions the host exposed), `mapped` against the mapped
//!   segment — so a core bug cannot reach outside what the host registered or handed over; a
//!   job on memory the host took back fails, it never faults the engine;
//! - jobs complete in the order they were issued; a job's data is complete and visible to the
//!   host when the job completes (the runner answers the core after that), so a completion the
//!   engine writes after a job's data is seen after it;
//! - within one part of a job, no order between bytes is promised (a `cma` copy is `rep
//!   movsb`, an RDMA WRITE is placed in any order): anything the host polls is published by a
//!   later part, ordered after the data (`Remote::write_in_order`: later parts of one job where
//!   the CPU keeps them in order, separate jobs elsewhere) — the rings' mirrored indices
//!   ([`rings`]).
//!
//! Every backend here completes a job before the call that issues it returns (a kernel copy, a
//! `memcpy`, or RDMA work requests waited for); the core already treats every job as
//! asynchronous, so a backend that overlaps jobs needs no change above the runner.
pub mod cma;
pub mod mapped;
pub mod ranges;
pub mod rdma;
pub mod remote;
pub mod rings;

use ringcast_proto::engine::{HostPort, SummedLoad};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};

pub use mapped::SegmentTable;
pub use ranges::{RangeTable, RANGE_TAG};
pub use remote::Remote;

/// How the engine reaches one host's memory.
#[derive(Clone, Debug)]
pub enum Backend {
    /// Shared mappings of the host's memfds.
    Mapped,
    /// By DMA across the boundary: cross-memory attach into the host's process (`cma`), or
    /// RDMA on its queue pair (`rdma`).
    Remote(Remote),
}

/// Bytes of distinct segments or ranges one host holds registered, for its budget
/// (`max_host_bytes`).
#[derive(Debug, Default)]
pub struct HostMappings {
    held: Vec<(SegmentHandle, u64, u32)>,
    bytes: u64,
}

impl HostMappings {
    /// True when the host holds `handle` already (a second registration costs nothing more).
    pub fn holds(&self, handle: SegmentHandle) -> bool {
        self.held.iter().any(|(h, _, _)| *h == handle)
    }

    /// True when `len` more bytes fit within `budget`.
    pub fn fits(&self, len: u64, budget: u64) -> bool {
        self.bytes.saturating_add(len) <= budget
    }

    /// Records one more reference to `handle` of `len` bytes.
    pub fn take(&mut self, handle: SegmentHandle, len: u64) {
        match self.held.iter_mut().find(|(h, _, _)| *h == handle) {
            Some(entry) => entry.2 += 1,
            None => {
                self.held.push((handle, len, 1));
                self.bytes += len;
            }
        }
    }

    /// Drops one reference to `handle`.
    pub fn give_back(&mut self, handle: SegmentHandle) {
        if let Some(i) = self.held.iter().position(|(h, _, _)| *h == handle) {
            self.held[i].2 -= 1;
            if self.held[i].2 == 0 {
                self.bytes -= self.held[i].1;
                self.held.swap_remove(i);
            }
        }
    }
}

/// Chunk of a copy between two regions of which at least one is reached by DMA: it goes
/// through the engine's memory (a DPU copies host to host the same way, through its own).
const BOUNCE: usize = 256 * 1024;

/// [`HostMemory::port`]: the `mapped` segments as the engine's [`HostPort`].
pub struct MappedPort<'a>(&'a SegmentTable);

impl HostPort for MappedPort<'_> {
    fn reaches(&self, buf: Resolved) -> bool {
        buf.segment.0 & RANGE_TAG == 0 && self.0.holds(buf.segment)
    }

    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        buf.segment.0 & RANGE_TAG == 0 && self.0.write(buf, 0, bytes)
    }

    fn view(&self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        buf.segment.0 & RANGE_TAG == 0 && self.0.view(buf, len, f)
    }
}

/// Every host's registered memory, on both backends: the port the runner issues jobs to.
pub struct HostMemory {
    mapped: SegmentTable,
    ranges: RangeTable,
    bounce: Vec<u8>,
}

impl HostMemory {
    /// Tables sized for `capacity` mappings, and the bounce buffer (allocated once, here: no
    /// allocation on the data path).
    pub fn with_capacity(capacity: usize) -> Self {
        HostMemory {
            mapped: SegmentTable::with_capacity(capacity),
            ranges: RangeTable::default(),
            bounce: vec![0; BOUNCE],
        }
    }

    /// The `mapped` backend's table (registration of memfds).
    pub fn mapped(&mut self) -> &mut SegmentTable {
        &mut self.mapped
    }

    /// The remote backends' table (registration of address ranges, `cma` or `rdma`).
    pub fn ranges(&mut self) -> &mut RangeTable {
        &mut self.ranges
    }

    /// Shared-memory segments mapped now.
    pub fn mapped_segments(&self) -> usize {
        self.mapped.mapped()
    }

    /// Address ranges registered by `cma` or `rdma` now.
    pub fn remote_ranges(&self) -> usize {
        self.ranges.registered()
    }

    /// Releases one registration of `handle`, whichever backend holds it.
    pub fn release(&mut self, handle: SegmentHandle, host: &mut HostMappings) {
        if handle.0 & RANGE_TAG != 0 {
            self.ranges.release(handle, host)
        } else {
            self.mapped.release(handle, host)
        }
    }

    /// Job: reads host memory at `at + offset` into `out`; false when it is refused or fails.
    pub fn read(&self, at: Resolved, offset: u64, out: &mut [u8]) -> bool {
        if at.segment.0 & RANGE_TAG != 0 {
            self.ranges.read(at, offset, out)
        } else {
            self.mapped.read(at, offset, out)
        }
    }

    /// Job: a root's message read from `at` into `load`'s staging in runs of whole fragments,
    /// each fragment's payload CRC32C computed right after its run lands, still in L1 (the
    /// `mapped` backend: a CPU copy; a NIC's DMA computes it as the bytes move). `None` for a
    /// `cma` or `rdma` range, which only copies ([`HostMemory::read`], one system call or work
    /// request for the whole message, not one per fragment).
    pub fn read_summed(&self, at: Resolved, load: SummedLoad<'_>) -> Option<bool> {
        if at.segment.0 & RANGE_TAG != 0 {
            return None;
        }
        Some(load.fill(crate::crc::crc32c, |off, into| self.mapped.read(at, off as u64, into)))
    }

    /// Job: writes `data` to host memory at `at + offset`; false as for [`HostMemory::read`].
    pub fn write(&self, at: Resolved, offset: u64, data: &[u8]) -> bool {
        if at.segment.0 & RANGE_TAG != 0 {
            self.ranges.write(at, offset, data)
        } else {
            self.mapped.write(at, offset, data)
        }
    }

    /// The direct reach the engine is lent while it handles frames
    /// (`Engine::handle_frame_placing`): the `mapped` backend's segments, written at once. A
    /// `cma` or `rdma` range is not reached this way — one system call or work request per
    /// fragment would cost more than the copy it saves: those receivers go through the channel
    /// and store their message in parts, as before.
    pub fn port(&self) -> MappedPort<'_> {
        MappedPort(&self.mapped)
    }

    /// Whether a copy of `len` bytes from `src` to `dst` would read bytes it wrote (two
    /// registrations of one process overlapping: the state machine, comparing handles, cannot
    /// see it). Such a copy through the bounce buffer would deliver overwritten bytes: the
    /// runner refuses it whole, before any chunk moves, as the state machine refuses overlap
    /// within one segment.
    pub fn overlap(&self, src: Resolved, dst: Resolved, len: u64) -> bool {
        (src.segment.0 & dst.segment.0) & RANGE_TAG != 0 && self.ranges.overlap(src, dst, len)
    }

    /// Job: copies `len` bytes between two regions (a COPY's chunk); false as for
    /// [`HostMemory::read`].
    pub fn copy(&mut self, src: Resolved, dst: Resolved, len: u64) -> bool {
        if (src.segment.0 | dst.segment.0) & RANGE_TAG == 0 {
            return self.mapped.dma(src, dst, len);
        }
        // Overlap was refused for the whole copy before its first chunk (`overlap`).
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BOUNCE as u64);
            let mut buf = std::mem::take(&mut self.bounce);
            let ok =
                self.read(src, done, &mut buf[..n as usize]) && self.write(dst, done, &buf[..n as usize]);
            self.bounce = buf;
            if !ok {
                return false;
            }
            done += n;
        }
        true
    }
}
