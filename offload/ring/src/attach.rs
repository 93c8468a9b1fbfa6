//! A host's attach segment: one segment holding its submission ring and its completion ring
//! behind a [`SegmentHeader`] — built by the engine and shared ([`create`], [`open`]), or built
//! by the host in its own memory and reached by the engine only by DMA
//! ([`create_host_owned`], checked with [`check_host_owned`]).
//!
//! ```text
//! 0                    SegmentHeader (128 B)
//! sq_offset = 128      submission ring: RingControl + sq_capacity × 64 B descriptors
//! cq_offset            completion ring: RingControl + cq_capacity × 64 B completions
//! ```
//! The engine [`create`]s it (so the layout is the engine's, not the host's), keeps the
//! submission consumer and completion producer, seals the memfd against resizing, and passes the
//! fd to the host, which [`open`]s it and takes the other two ends after validating every header
//! field. Roles are fixed by this protocol: each process holds one end of each ring; whatever
//! the other process does to the shared bytes, the ring code neither panics nor leaves the
//! mapping (see the crate contract).
use crate::{footprint, init, Consumer, Producer, RingError, ShmSegment};
use core::ptr::NonNull;
use ringcast_abi::segment::SEGMENT_MAGIC;
use ringcast_abi::{Completion, RingRole, SegmentHeader, SubmissionDescriptor, ABI_VERSION};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Why an attach segment could not be built or opened.
#[derive(Debug)]
pub enum AttachError {
    /// Creating, sealing or mapping the memfd failed.
    Io(std::io::Error),
    /// A ring inside the segment is not valid.
    Ring(RingError),
    /// The segment header is not what this ABI expects.
    Header(&'static str),
}

impl core::fmt::Display for AttachError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AttachError::Io(e) => write!(f, "attach segment I/O: {e}"),
            AttachError::Ring(e) => write!(f, "attach segment ring: {e}"),
            AttachError::Header(why) => write!(f, "attach segment header: {why}"),
        }
    }
}

impl std::error::Error for AttachError {}

impl From<std::io::Error> for AttachError {
    fn from(e: std::io::Error) -> Self {
        AttachError::Io(e)
    }
}

impl From<RingError> for AttachError {
    fn from(e: RingError) -> Self {
        AttachError::Ring(e)
    }
}

/// The engine's ends of a host's rings.
pub struct EngineRings {
    /// The segment (its fd goes to the host).
    pub segment: Arc<ShmSegment>,
    /// Submission ring, consumer end.
    pub sq: Consumer<SubmissionDescriptor>,
    /// Completion ring, producer end.
    pub cq: Producer<Completion>,
}

/// The host's ends of its rings.
pub struct HostRings {
    /// The segment as mapped by the host.
    pub segment: Arc<ShmSegment>,
    /// The validated header.
    pub header: SegmentHeader,
    /// Submission ring, producer end.
    pub sq: Producer<SubmissionDescriptor>,
    /// Completion ring, consumer end.
    pub cq: Consumer<Completion>,
}

const HEADER_LEN: u64 = core::mem::size_of::<SegmentHeader>() as u64;

/// Offsets of the submission ring, of the completion ring, and the total length of a segment
/// whose rings hold `sq_capacity` and `cq_capacity` entries: the one layout both attach kinds
/// use (the engine checks a host-owned segment's header against it).
pub fn layout(sq_capacity: u32, cq_capacity: u32) -> (u64, u64, u64) {
    let sq_offset = HEADER_LEN;
    let cq_offset = sq_offset + footprint::<SubmissionDescriptor>(sq_capacity) as u64;
    let total = cq_offset + footprint::<Completion>(cq_capacity) as u64;
    (sq_offset, cq_offset, total)
}

/// The submission and completion rings' memory inside `seg`, checked to lie inside it.
fn ring_ranges(
    seg: &ShmSegment,
    sq_offset: u64,
    cq_offset: u64,
    total: u64,
) -> Result<[(NonNull<u8>, usize); 2], AttachError> {
    let sq = seg.sub_range(sq_offset, cq_offset - sq_offset).ok_or(AttachError::Header("sq range"))?;
    let cq = seg.sub_range(cq_offset, total - cq_offset).ok_or(AttachError::Header("cq range"))?;
    Ok([sq, cq])
}

/// Builds a new attach segment for host `host_id` with rings of `entries` entries each.
pub fn create(host_id: u32, entries: u32) -> Result<EngineRings, AttachError> {
    if !entries.is_power_of_two() || entries < 2 {
        return Err(AttachError::Ring(RingError::BadCapacity(entries)));
    }
    let (sq_offset, cq_offset, total) = layout(entries, entries);
    let seg = ShmSegment::create(&format!("ringcast-host-{host_id}"), total as usize)?;
    let mut header = SegmentHeader::new_zeroed();
    header.magic = SEGMENT_MAGIC;
    header.abi_version = ABI_VERSION;
    header.host_id = host_id;
    header.sq_offset = sq_offset;
    header.cq_offset = cq_offset;
    header.sq_capacity = entries;
    header.cq_capacity = entries;
    header.total_len = total;
    seg.write_at(0, header.as_bytes()).map_err(|_| AttachError::Header("segment too small"))?;
    let seg = Arc::new(seg);
    let [(sq_mem, sq_len), (cq_mem, cq_len)] = ring_ranges(&seg, sq_offset, cq_offset, total)?;
    // SAFETY: both ranges lie inside `seg`'s live mapping (checked by `sub_range`), are
    // 128-aligned (offsets are multiples of 128 on a page-aligned mapping), do not overlap, and no
    // other party has the segment yet, so initialising them races with nothing.
    unsafe {
        init::<SubmissionDescriptor>(sq_mem, sq_len, RingRole::SUBMISSION, entries)?;
        init::<Completion>(cq_mem, cq_len, RingRole::COMPLETION, entries)?;
    }
    let owner: Arc<dyn Send + Sync> = seg.clone();
    // SAFETY: the rings were just initialised in memory kept alive by `owner`; the engine takes
    // exactly these two ends (SQ consumer, CQ producer) and the host protocol the other two.
    let (sq, cq) = unsafe {
        (
            Consumer::attach(sq_mem, sq_len, RingRole::SUBMISSION, owner.clone())?,
            Producer::attach(cq_mem, cq_len, RingRole::COMPLETION, owner)?,
        )
    };
    Ok(EngineRings { segment: seg, sq, cq })
}

/// Builds host-owned rings (the `cma` DMA backend): the segment stays in this process — it is
/// never passed to the engine, which reads and writes it only by DMA at the address the host
/// names at `ATTACH`. `proof` is the engine's `HELLO_OK` nonce, written into the header for the
/// engine to find there. `host_id` is 0: the engine's id for the host comes in `ATTACH_OK`.
pub fn create_host_owned(entries: u32, proof: u64) -> Result<HostRings, AttachError> {
    let engine = create(0, entries)?;
    let seg = engine.segment.clone();
    let mut header = SegmentHeader::new_zeroed();
    seg.read_at(0, header.as_mut_bytes()).map_err(|_| AttachError::Header("segment too small"))?;
    header.attach_proof = proof;
    seg.write_at(0, header.as_bytes()).map_err(|_| AttachError::Header("segment too small"))?;
    let (sq_offset, cq_offset, total) = layout(entries, entries);
    let [(sq_mem, sq_len), (cq_mem, cq_len)] = ring_ranges(&seg, sq_offset, cq_offset, total)?;
    // The engine's ends built above are dropped unused: this process holds the other two.
    drop(engine);
    let owner: Arc<dyn Send + Sync> = seg.clone();
    // SAFETY: the ranges lie inside `seg`'s mapping, which `owner` keeps alive, and were
    // initialised by `create`; this process takes the host's ends only (SQ producer, CQ
    // consumer); the engine's ends are played by DMA through the same layout.
    let (sq, cq) = unsafe {
        (
            Producer::attach(sq_mem, sq_len, RingRole::SUBMISSION, owner.clone())?,
            Consumer::attach(cq_mem, cq_len, RingRole::COMPLETION, owner)?,
        )
    };
    Ok(HostRings { segment: seg, header, sq, cq })
}

/// Checks a host-owned segment's header, read by DMA from `len` bytes the host named, against
/// the layout the engine would build for its capacities; `Ok` with the capacity when every
/// field matches, `proof` included.
pub fn check_host_owned(
    header: &SegmentHeader,
    len: u64,
    proof: u64,
    max_entries: u32,
) -> Result<u32, AttachError> {
    if header.magic != SEGMENT_MAGIC {
        return Err(AttachError::Header("bad magic"));
    }
    if header.abi_version != ABI_VERSION {
        return Err(AttachError::Header("ABI version differs from the engine's"));
    }
    let entries = header.sq_capacity;
    if header.cq_capacity != entries || !entries.is_power_of_two() || entries < 2 || entries > max_entries {
        return Err(AttachError::Header("ring capacities"));
    }
    let (sq_offset, cq_offset, total) = layout(entries, entries);
    if header.sq_offset != sq_offset
        || header.cq_offset != cq_offset
        || header.total_len != total
        || len != total
    {
        return Err(AttachError::Header("ring offsets do not match the capacities"));
    }
    if header.attach_proof != proof {
        return Err(AttachError::Header("attach proof differs from the engine's nonce"));
    }
    Ok(entries)
}

/// Maps an attach segment received from an engine and takes the host's ends of its rings.
pub fn open(fd: OwnedFd) -> Result<HostRings, AttachError> {
    // Sealed or refused: an engine that could shrink the file would turn our ring accesses into
    // SIGBUS.
    let seg = ShmSegment::from_sealed_fd(fd)?;
    let mut raw = [0u8; HEADER_LEN as usize];
    seg.read_at(0, &mut raw).map_err(|_| AttachError::Header("segment shorter than its header"))?;
    // NOTE(unwrap): `raw` has exactly the header's size.
    let header = SegmentHeader::read_from_bytes(&raw).unwrap();
    if header.magic != SEGMENT_MAGIC {
        return Err(AttachError::Header("bad magic"));
    }
    if header.abi_version != ABI_VERSION {
        return Err(AttachError::Header("ABI version differs from this library's"));
    }
    let (sq_offset, cq_offset, total) = layout(header.sq_capacity, header.cq_capacity);
    if header.sq_offset != sq_offset || header.cq_offset != cq_offset || header.total_len != total {
        return Err(AttachError::Header("ring offsets do not match the capacities"));
    }
    if total > seg.len() as u64 {
        return Err(AttachError::Header("segment shorter than its rings"));
    }
    let seg = Arc::new(seg);
    let [(sq_mem, sq_len), (cq_mem, cq_len)] = ring_ranges(&seg, sq_offset, cq_offset, total)?;
    let owner: Arc<dyn Send + Sync> = seg.clone();
    // SAFETY: ranges checked inside the mapping `owner` keeps alive; `attach` validates each ring
    // header; by protocol the host takes the SQ producer and CQ consumer ends only.
    let (sq, cq) = unsafe {
        (
            Producer::attach(sq_mem, sq_len, RingRole::SUBMISSION, owner.clone())?,
            Consumer::attach(cq_mem, cq_len, RingRole::COMPLETION, owner)?,
        )
    };
    Ok(HostRings { segment: seg, header, sq, cq })
}
