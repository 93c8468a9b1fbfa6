//! The collectives, each in a blocking form (`ringcast_bcast`, … — post, then wait for the
//! completion without holding the lock: `requests.rs`) and a non-blocking one (`ringcast_ibcast`,
//! … — post, the request in `*request`, finished by `ringcast_wait`/`ringcast_test`), both
//! built from one descriptor function per collective with the same local checks: every buffer
//! non-NULL where the call needs it, every length non-zero, and each range the library can judge
//! inside its buffer (`RingcastBuf::range`: a buffer of `size × block` bytes is checked from its
//! first block; the engine, which knows the communicator's size, checks the rest). A failed
//! check is `RINGCAST_ERR_INVALID` before anything is posted; the engine's own refusals come
//! back as its status codes.
use crate::buffers::{buf, RingcastBuf};
use crate::codes::RINGCAST_ERR_INVALID;
use crate::requests::{run, start};
use ringcast_abi::{reduce::reduce_spec, DataType, Opcode, ReduceOp};
use ringcast_host::{RegionRef, SubmissionDescriptor};
use std::ffi::c_int;

/// `len` bytes at `offset` of `b`, checked (`len` > 0).
///
/// # Safety
/// `b` is NULL or a live buffer of ours.
unsafe fn range(b: *const RingcastBuf, offset: usize, len: usize) -> Result<RegionRef, c_int> {
    // SAFETY: forwarded from the caller.
    let b = unsafe { buf(b) }.ok_or(RINGCAST_ERR_INVALID)?;
    if len == 0 {
        return Err(RINGCAST_ERR_INVALID);
    }
    b.range(offset, len).ok_or(RINGCAST_ERR_INVALID)
}

/// An optional send buffer (NULL: in place) of `len` bytes at `offset`.
///
/// # Safety
/// `b` is NULL or a live buffer of ours.
unsafe fn send_range(b: *const RingcastBuf, offset: usize, len: usize) -> Result<Option<RegionRef>, c_int> {
    if b.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded from the caller.
    unsafe { range(b, offset, len) }.map(Some)
}

/// The broadcast's descriptor.
///
/// # Safety
/// `b` is NULL or a live buffer of ours.
unsafe fn bcast_desc(
    cookie: u64,
    comm: u64,
    root: u32,
    b: *const RingcastBuf,
    offset: usize,
    len: usize,
) -> Result<SubmissionDescriptor, c_int> {
    // SAFETY: forwarded from the caller.
    let at = unsafe { range(b, offset, len) }?;
    Ok(SubmissionDescriptor::bcast(cookie, comm, root, at, len as u64))
}

/// Broadcasts `len` bytes at `offset` of `b` on communicator `comm` (0: the world) from rank
/// `root`; returns when this rank's part is done.
///
/// # Safety
/// `b` is NULL or a live buffer of ours.
#[no_mangle]
pub unsafe extern "C" fn ringcast_bcast(
    comm: u64,
    root: u32,
    b: *const RingcastBuf,
    offset: usize,
    len: usize,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { run(|_, cookie| bcast_desc(cookie, comm, root, b, offset, len)) }
}

/// Starts the broadcast of [`ringcast_bcast`] and stores its request in `*request`.
///
/// # Safety
/// `b` as for [`ringcast_bcast`]; `request` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ringcast_ibcast(
    comm: u64,
    root: u32,
    b: *const RingcastBuf,
    offset: usize,
    len: usize,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { start(request, |_, cookie| bcast_desc(cookie, comm, root, b, offset, len)) }
}

/// The allgather's descriptor (an allreduce's and a reduce's too, their type set after).
///
/// # Safety
/// `recv` and `send` are NULL or live buffers of ours.
unsafe fn allgather_desc(
    cookie: u64,
    comm: u64,
    (send, send_offset): (*const RingcastBuf, usize),
    (recv, recv_offset): (*const RingcastBuf, usize),
    block: usize,
) -> Result<SubmissionDescriptor, c_int> {
    // SAFETY: forwarded from the caller.
    let (from, to) = unsafe { (send_range(send, send_offset, block)?, range(recv, recv_offset, block)?) };
    Ok(SubmissionDescriptor::allgather(cookie, comm, to, from, block as u64))
}

/// Allgather on communicator `comm` (0: the world): this rank's `block` bytes at `send_offset`
/// of `send` — or, `send` NULL, already in place at `recv_offset + rank × block` of `recv` — go
/// to every rank, and every rank's block arrives at `recv_offset + rank × block` of `recv`
/// (which must hold `size × block` bytes there); returns when this rank has every block.
///
/// # Safety
/// `recv` is NULL or a live buffer of ours; `send` is NULL or a live buffer of ours.
#[no_mangle]
pub unsafe extern "C" fn ringcast_allgather(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    recv: *const RingcastBuf,
    recv_offset: usize,
    block: usize,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { run(|_, cookie| allgather_desc(cookie, comm, (send, send_offset), (recv, recv_offset), block)) }
}

/// Starts the allgather of [`ringcast_allgather`] and stores its request in `*request`.
///
/// # Safety
/// `send` and `recv` as for [`ringcast_allgather`]; `request` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ringcast_iallgather(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    recv: *const RingcastBuf,
    recv_offset: usize,
    block: usize,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, cookie| {
            allgather_desc(cookie, comm, (send, send_offset), (recv, recv_offset), block)
        })
    }
}

/// An ALLREDUCE (`root` `None`) or a REDUCE to `root`: the allgather's buffers, the type and
/// operation in `spec`.
///
/// # Safety
/// `send.0` and `work.0` are NULL or live buffers of ours.
unsafe fn reduce_desc(
    cookie: u64,
    root: Option<u32>,
    comm: u64,
    send: (*const RingcastBuf, usize),
    work: (*const RingcastBuf, usize),
    len: usize,
    (dtype, op): (u8, u8),
) -> Result<SubmissionDescriptor, c_int> {
    // SAFETY: forwarded from the caller.
    let mut d = unsafe { allgather_desc(cookie, comm, send, work, len) }?;
    d.opcode = if root.is_some() { Opcode::REDUCE } else { Opcode::ALLREDUCE };
    d.root = root.unwrap_or(0);
    d.spec = reduce_spec(DataType(dtype), ReduceOp(op));
    Ok(d)
}

/// Allreduce on communicator `comm` of `len` bytes of elements of type `dtype` with operation
/// `op` (`RINGCAST_TYPE_*`, `RINGCAST_OP_*`) in the work buffer at `work_offset` of `work`
/// (`size × len` bytes): this rank's contribution at `send_offset` of `send`, or — `send` NULL —
/// already in place at `work_offset + rank × len`; when it returns, the result, reduced in the
/// engine's documented order (rank order, or node by node when it composes leader-based, then
/// by recursive doubling between the nodes where the call's exchange, the cost model's choice,
/// is not multicast; bit-identical at every rank), is at `work_offset`.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_allreduce(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        run(|_, c| reduce_desc(c, None, comm, (send, send_offset), (work, work_offset), len, (dtype, op)))
    }
}

/// Starts the allreduce of [`ringcast_allreduce`] and stores its request in `*request`; the
/// result is at `work_offset` once it completes.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours; `request` is NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_iallreduce(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, c| {
            reduce_desc(c, None, comm, (send, send_offset), (work, work_offset), len, (dtype, op))
        })
    }
}

/// Reduce to rank `root` of communicator `comm`: the allreduce of [`ringcast_allreduce`] (same
/// buffers, types, operations) whose result only the root receives, at `work_offset` of its
/// `work` buffer; at every other rank the work buffer's contents are unspecified afterwards.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_reduce(
    comm: u64,
    root: u32,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        run(|_, c| {
            reduce_desc(c, Some(root), comm, (send, send_offset), (work, work_offset), len, (dtype, op))
        })
    }
}

/// Starts the reduce of [`ringcast_reduce`] and stores its request in `*request`.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours; `request` is NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_ireduce(
    comm: u64,
    root: u32,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, c| {
            reduce_desc(c, Some(root), comm, (send, send_offset), (work, work_offset), len, (dtype, op))
        })
    }
}

/// A SCAN (`exclusive`: an EXSCAN): the allreduce's buffers and checks, the prefix's opcode.
///
/// # Safety
/// `send.0` and `work.0` are NULL or live buffers of ours.
unsafe fn scan_desc(
    cookie: u64,
    exclusive: bool,
    comm: u64,
    send: (*const RingcastBuf, usize),
    work: (*const RingcastBuf, usize),
    len: usize,
    (dtype, op): (u8, u8),
) -> Result<SubmissionDescriptor, c_int> {
    // SAFETY: forwarded from the caller.
    let mut d = unsafe { reduce_desc(cookie, None, comm, send, work, len, (dtype, op)) }?;
    d.opcode = if exclusive { Opcode::EXSCAN } else { Opcode::SCAN };
    Ok(d)
}

/// Inclusive prefix reduction (`MPI_Scan`) on communicator `comm`: the buffers, types and
/// operations of [`ringcast_allreduce`]; when it returns, this rank's result — the contributions
/// of ranks 0 to this one reduced left to right in rank order, the same bits whatever the
/// placement — is at `work_offset`.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_scan(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        run(|_, c| scan_desc(c, false, comm, (send, send_offset), (work, work_offset), len, (dtype, op)))
    }
}

/// Starts the scan of [`ringcast_scan`] and stores its request in `*request`.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours; `request` is NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_iscan(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, c| {
            scan_desc(c, false, comm, (send, send_offset), (work, work_offset), len, (dtype, op))
        })
    }
}

/// Exclusive prefix reduction (`MPI_Exscan`): [`ringcast_scan`] of ranks 0 to the one before
/// this; at rank 0, which MPI leaves undefined, the work buffer's contents are unspecified
/// afterwards.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_exscan(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        run(|_, c| scan_desc(c, true, comm, (send, send_offset), (work, work_offset), len, (dtype, op)))
    }
}

/// Starts the exscan of [`ringcast_exscan`] and stores its request in `*request`.
///
/// # Safety
/// `work` and `send` are NULL or live buffers of ours; `request` is NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ringcast_iexscan(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    len: usize,
    dtype: u8,
    op: u8,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, c| {
            scan_desc(c, true, comm, (send, send_offset), (work, work_offset), len, (dtype, op))
        })
    }
}

/// The alltoall's descriptor: both buffers required (no in place), checked from their first
/// block.
///
/// # Safety
/// `send` and `work` are NULL or live buffers of ours.
unsafe fn alltoall_desc(
    cookie: u64,
    comm: u64,
    (send, send_offset): (*const RingcastBuf, usize),
    (work, work_offset): (*const RingcastBuf, usize),
    block: usize,
) -> Result<SubmissionDescriptor, c_int> {
    // SAFETY: forwarded from the caller.
    let (from, to) = unsafe { (range(send, send_offset, block)?, range(work, work_offset, block)?) };
    Ok(SubmissionDescriptor::alltoall(cookie, comm, to, from, block as u64))
}

/// Alltoall on communicator `comm`: block `q` of the send buffer (`size × block` bytes at
/// `send_offset` of `send`) goes to rank `q`; when it returns rank `r`'s block for this rank is
/// at `work_offset + r × block` of `work`, which must hold `(size + 1) × size × block` bytes
/// there (the rest is the engine's scratch).
///
/// # Safety
/// `send` and `work` are NULL or live buffers of ours.
#[no_mangle]
pub unsafe extern "C" fn ringcast_alltoall(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    block: usize,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { run(|_, cookie| alltoall_desc(cookie, comm, (send, send_offset), (work, work_offset), block)) }
}

/// Starts the alltoall of [`ringcast_alltoall`] and stores its request in `*request`.
///
/// # Safety
/// `send` and `work` are NULL or live buffers of ours; `request` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ringcast_ialltoall(
    comm: u64,
    send: *const RingcastBuf,
    send_offset: usize,
    work: *const RingcastBuf,
    work_offset: usize,
    block: usize,
    request: *mut u64,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe {
        start(request, |_, cookie| {
            alltoall_desc(cookie, comm, (send, send_offset), (work, work_offset), block)
        })
    }
}

/// Barrier on communicator `comm` (0: the world): returns once every rank of it has called
/// it (a rank that died fails it with a typed error within the protocol's bound).
#[no_mangle]
pub extern "C" fn ringcast_barrier(comm: u64) -> c_int {
    // SAFETY: the descriptor names no buffer of the caller's.
    unsafe { run(|s, _| s.host.barrier_descriptor(comm).map_err(|e| crate::codes::code(&e))) }
}

/// Starts the barrier of [`ringcast_barrier`] and stores its request in `*request`.
///
/// # Safety
/// `request` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ringcast_ibarrier(comm: u64, request: *mut u64) -> c_int {
    // SAFETY: `request` as the caller's contract says; the descriptor names no buffer of theirs.
    unsafe { start(request, |s, _| s.host.barrier_descriptor(comm).map_err(|e| crate::codes::code(&e))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix reductions' entries check their arguments as the allreduce's do: no work
    /// buffer or no request slot is refused before anything is posted.
    #[test]
    fn scan_entries_refuse_missing_buffers_and_requests() {
        let spec = (DataType::I64.0, ReduceOp::SUM.0);
        let null = std::ptr::null::<RingcastBuf>();
        for exclusive in [false, true] {
            // SAFETY: NULL buffers are allowed by the contract (and refused).
            let d = unsafe { scan_desc(1, exclusive, 0, (null, 0), (null, 0), 8, spec) };
            assert_eq!(d.err(), Some(RINGCAST_ERR_INVALID));
        }
        let none = std::ptr::null_mut::<u64>();
        // SAFETY: NULL buffers and a NULL request slot are allowed by the contract (and refused).
        let (i, e) = unsafe {
            (
                ringcast_iscan(0, null, 0, null, 0, 8, spec.0, spec.1, none),
                ringcast_iexscan(0, null, 0, null, 0, 8, spec.0, spec.1, none),
            )
        };
        assert!(i < 0 && e < 0, "{i} {e}: refused, nothing posted");
        // SAFETY: NULL buffers are allowed by the contract; no engine is attached in this test.
        let (s, x) = unsafe {
            (
                ringcast_scan(0, null, 0, null, 0, 8, spec.0, spec.1),
                ringcast_exscan(0, null, 0, null, 0, 8, spec.0, spec.1),
            )
        };
        assert!(s < 0 && x < 0, "{s} {x}: refused, nothing posted");
    }
}
