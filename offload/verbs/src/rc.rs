//! Reliable-connected queue pairs for the `rdma` DMA backend: the engine reaches a host's
//! memory by RDMA READ and RDMA WRITE on one RC queue pair per host, the host exposes its
//! memory by registering it for remote access and naming it by (address, length, rkey).
//!
//! * [`RcQueue`] — an RC queue pair with its completion queue and a registered local buffer
//!   (the engine's side of a job: READ lands there, WRITE leaves from there). Its data path is
//!   safe: the buffer is lent ([`RcQueue::buffer`]) only while no work request is in flight, so
//!   the device and Rust never touch it at once; [`RcQueue::post`] checks that the local part
//!   of a request lies inside the buffer.
//! * [`RcAddress`] — what the two ends exchange to connect (over the control channel: no
//!   rdmacm connection manager, the engine already has a channel to every host).
//! * [`ExposedMr`] — memory of the caller's own registered for remote read and write (the
//!   host's rings and its user buffers, in place).
//!
//! The remote side's bytes are never touched here: a READ or WRITE names them by address and
//! rkey, and the responder's NIC checks both (a wrong key or a range outside the region ends
//! in a `REMOTE_ACCESS_ERROR` completion and the QP's error state, never in a stray write).
use crate::device::{Context, Cq, Mr, Pd, Qp, QpSpec};
use crate::ffi::ToResult;
use crate::VerbsError;
use rdma_core_sys as sys;
use std::ptr::NonNull;
use std::sync::Arc;

/// One end of an RC connection, as the other end needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcAddress {
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number this end sends with.
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port's GID at the chosen index (RoCE, and InfiniBand across subnets).
    pub gid: [u8; 16],
    /// The active MTU as `enum ibv_mtu` (1 = 256 B … 5 = 4096 B).
    pub mtu: u8,
}

/// One RDMA work request on an [`RcQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// WRITE (local buffer → remote) or READ (remote → local buffer).
    pub write: bool,
    /// Start in the local buffer.
    pub local: usize,
    /// Bytes.
    pub len: u32,
    /// The remote address.
    pub remote: u64,
    /// The remote region's key.
    pub rkey: u32,
}

/// Why a post was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The local range is outside the buffer, or the queue is full.
    Invalid,
    /// The device refused the post (errno).
    Post(i32),
}

/// A reliable-connected queue pair, its completion queue and its registered local buffer.
pub struct RcQueue {
    ctx: Arc<Context>,
    qp: Arc<Qp>,
    cq: Arc<Cq>,
    mr: Arc<Mr>,
    port: u8,
    gid_index: u8,
    psn: u32,
    depth: u32,
    /// Work requests posted and not yet completed: while any is, the buffer is not lent.
    in_flight: u32,
}

// `RcQueue` posts and polls through `&mut self` only; it is `Send` (its parts are) and not
// shared: the `Sync` impls of `Qp` and `Cq` rely on a single poster and poller.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<RcQueue>();
};

impl RcQueue {
    /// An RC QP on `ctx`'s port `port` (GID index `gid_index`), with `buffer` bytes of local
    /// memory and room for `depth` work requests in flight; not yet connected.
    pub fn new(
        ctx: Arc<Context>,
        port: u8,
        gid_index: u8,
        buffer: usize,
        depth: u32,
    ) -> Result<RcQueue, VerbsError> {
        let pd = Pd::new(Arc::clone(&ctx))?;
        RcQueue::on(ctx, pd, port, gid_index, buffer, depth)
    }

    /// As [`RcQueue::new`], on protection domain `pd`.
    fn on(
        ctx: Arc<Context>,
        pd: Arc<Pd>,
        port: u8,
        gid_index: u8,
        buffer: usize,
        depth: u32,
    ) -> Result<RcQueue, VerbsError> {
        let cq = Cq::new(Arc::clone(&ctx), depth)?;
        let mr = Mr::new(Arc::clone(&pd), buffer)?;
        let spec = QpSpec { send_wr: depth, recv_wr: 1, inline: 0 };
        let qp = Qp::create(pd, Arc::clone(&cq), Arc::clone(&mr), spec, sys::ibv_qp_type::IBV_QPT_RC)?;
        // The starting PSN only has to differ between incarnations of a QP number: take it from
        // the clock (24 bits).
        let psn = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() & 0xff_ffff);
        Ok(RcQueue { ctx, qp, cq, mr, port, gid_index, psn, depth, in_flight: 0 })
    }

    /// This end's address, to send to the other end.
    pub fn address(&self) -> Result<RcAddress, VerbsError> {
        let port = self.ctx.query_port(self.port)?;
        let gid = self.ctx.query_gid(self.port, self.gid_index)?;
        let mtu = (port.mtu.trailing_zeros().saturating_sub(7)).clamp(1, 5) as u8;
        Ok(RcAddress { qpn: self.qp.qpn(), psn: self.psn, lid: port.lid, gid, mtu })
    }

    /// Connects to `remote`: RESET → INIT (remote read and write allowed to this end's
    /// memory regions of the same protection domain) → RTR → RTS.
    pub fn connect(&mut self, remote: &RcAddress) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        let local = self.address()?;
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = self.port;
        attr.qp_access_flags = (sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE)
            .0;
        let mask = M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS;
        self.qp.modify(&mut attr, mask, "ibv_modify_qp(INIT)")?;

        // SAFETY: as above.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = sys::ibv_mtu(u32::from(local.mtu.min(remote.mtu).max(1)));
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn;
        // READs in flight at once, each way: up to a batch (16), as far as the device allows
        // (1 would run a batch of READs one after the other).
        let caps = self.ctx.query_device()?;
        attr.max_dest_rd_atomic = caps.max_qp_rd_atom.clamp(1, 16) as u8;
        attr.min_rnr_timer = 12;
        attr.ah_attr = sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: remote.gid },
                flow_label: 0,
                sgid_index: self.gid_index,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: remote.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            // Global routing whenever the peer has a GID (RoCE always does).
            is_global: u8::from(remote.gid != [0; 16]),
            port_num: self.port,
        };
        let mask = M::IBV_QP_STATE
            | M::IBV_QP_AV
            | M::IBV_QP_PATH_MTU
            | M::IBV_QP_DEST_QPN
            | M::IBV_QP_RQ_PSN
            | M::IBV_QP_MAX_DEST_RD_ATOMIC
            | M::IBV_QP_MIN_RNR_TIMER;
        self.qp.modify(&mut attr, mask, "ibv_modify_qp(RTR)")?;

        // SAFETY: as above.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        // 4.096 µs × 2^10 ≈ 4 ms per try, 7 tries: a host that vanished fails the job in ~30 ms
        // — the engine's loop waits that long once, for every host (jobs are synchronous).
        attr.timeout = 10;
        attr.retry_cnt = 7;
        attr.rnr_retry = 7;
        attr.sq_psn = self.psn;
        attr.max_rd_atomic = caps.max_qp_init_rd_atom.clamp(1, 16) as u8;
        let mask = M::IBV_QP_STATE
            | M::IBV_QP_TIMEOUT
            | M::IBV_QP_RETRY_CNT
            | M::IBV_QP_RNR_RETRY
            | M::IBV_QP_SQ_PSN
            | M::IBV_QP_MAX_QP_RD_ATOMIC;
        self.qp.modify(&mut attr, mask, "ibv_modify_qp(RTS)")
    }

    /// Bytes of local buffer.
    pub fn buffer_len(&self) -> usize {
        self.mr.len()
    }

    /// Work requests in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The local buffer, unless a work request is in flight (the device may be reading or
    /// writing it then).
    pub fn buffer(&mut self) -> Option<&mut [u8]> {
        if self.in_flight > 0 {
            return None;
        }
        // SAFETY: no work request is in flight, so the device does not touch the buffer until
        // the next `post`, which takes `&mut self` and so ends this borrow first; the memory
        // lives as long as `self.mr` and was zeroed at allocation.
        Some(unsafe { std::slice::from_raw_parts_mut(self.mr.base().as_ptr(), self.mr.len()) })
    }

    /// Posts one signalled READ or WRITE.
    pub fn post(&mut self, req: RdmaRequest) -> Result<(), PostError> {
        let end = req.local.checked_add(req.len as usize);
        if end.is_none_or(|e| e > self.mr.len()) || self.in_flight >= self.depth {
            return Err(PostError::Invalid);
        }
        let base = self.mr.base().as_ptr() as u64;
        let mut sge = sys::ibv_sge { addr: base + req.local as u64, length: req.len, lkey: self.mr.lkey() };
        let opcode = if req.write {
            sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE
        } else {
            sys::ibv_wr_opcode::IBV_WR_RDMA_READ
        };
        let mut wr = sys::ibv_send_wr {
            wr_id: req.wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode,
            send_flags: sys::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: req.remote, rkey: req.rkey };
        // SAFETY: the QP lives (destroyed only when `self.qp` drops). `wr` and `sge` live through
        // the call; the local range lies inside this QP's registered buffer (checked above),
        // which is not lent while the request is in flight (`buffer` refuses until `poll` has
        // seen every completion, or the QP is destroyed).
        unsafe { self.qp.post_send(&mut wr) }.map_err(PostError::Post)?;
        self.in_flight += 1;
        Ok(())
    }

    /// Polls up to `wcs.len()` completions; how many, or the provider's error. Every
    /// completion, successful or not (a flush too), ends one request in flight.
    pub fn poll(&mut self, wcs: &mut [sys::ibv_wc]) -> Result<usize, i32> {
        let got = self.cq.poll(wcs)?;
        self.in_flight = self.in_flight.saturating_sub(got as u32);
        Ok(got)
    }
}

/// Memory of this process registered for remote read and write: the other end of an RC
/// connection on the same protection domain reaches it by (address, rkey).
pub struct ExposedMr {
    raw: NonNull<sys::ibv_mr>,
    addr: u64,
    len: usize,
    pd: crate::device::Keep<Arc<Pd>>,
}

// SAFETY: the MR handle is used by thread-safe verbs only (deregistration, once).
unsafe impl Send for ExposedMr {}

impl ExposedMr {
    /// Registers `len` bytes at `addr` of this process on `pd`'s device for remote read, and
    /// for remote write when `writable` (with local write, which remote write requires).
    ///
    /// Safe, as sending a `REGISTER_ADDR` for a `cma` engine is: registering reads and writes
    /// nothing in this process. What the remote end then writes, behind the compiler's back, is
    /// the contract of the API that decides what to expose — the host library's `unsafe fn
    /// register_memory` (no Rust reference to those bytes is used while an operation naming
    /// them is outstanding), its `SharedBuf`s and its rings, which Rust reaches only through
    /// raw pointers. The kernel pins the pages; an address this process has not mapped fails
    /// the registration.
    pub fn register(pd: &Arc<Pd>, addr: u64, len: usize, writable: bool) -> Result<ExposedMr, VerbsError> {
        if len == 0 {
            return Err(VerbsError::Invalid("registering 0 bytes".into()));
        }
        // Remote write only where the host allows the engine to write (it needs local write,
        // which a read-only mapping refuses): the NIC then refuses any WRITE to the rest.
        let mut access = sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        if writable {
            access |= sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        }
        let access = access.0 as i32;
        // SAFETY: live PD; the kernel checks that the range is mapped in this process and pins
        // it (no Rust reference is made to it here).
        let raw = unsafe { sys::ibv_reg_mr(pd.as_ptr(), addr as *mut std::ffi::c_void, len, access) }
            .to_result("ibv_reg_mr")?;
        Ok(ExposedMr { raw, addr, len, pd: crate::device::Keep::new(Arc::clone(pd)) })
    }

    /// The remote key the other end names it by.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is registered; `rkey` is written once by ibv_reg_mr.
        unsafe { (*self.raw.as_ptr()).rkey }
    }

    /// Its first address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: at least one byte is registered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ExposedMr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once; the PD is kept until this succeeds.
        let r = unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
        self.pd.settle("ibv_dereg_mr", r);
    }
}

/// A host's passive end: an RC queue pair that only answers (its memory is read and written by
/// the engine's requests) and its protection domain, on which [`ExposedMr`]s are registered.
pub struct Responder {
    queue: RcQueue,
    pd: Arc<Pd>,
}

impl Responder {
    /// A passive RC end on `device` (first device when empty), port `port`, GID index
    /// `gid_index`.
    pub fn open(device: &str, port: u8, gid_index: u8) -> Result<Responder, VerbsError> {
        let ctx = Context::open(device)?;
        let pd = Pd::new(Arc::clone(&ctx))?;
        let queue = RcQueue::on(ctx, Arc::clone(&pd), port, gid_index, 64, 1)?;
        Ok(Responder { queue, pd })
    }

    /// Its address, for the engine.
    pub fn address(&self) -> Result<RcAddress, VerbsError> {
        self.queue.address()
    }

    /// Connects it to the engine's queue pair.
    pub fn connect(&mut self, engine: &RcAddress) -> Result<(), VerbsError> {
        self.queue.connect(engine)
    }

    /// Registers `len` bytes at `addr` for the engine, writable by it or not (see
    /// [`ExposedMr::register`]).
    pub fn expose(&self, addr: u64, len: usize, writable: bool) -> Result<ExposedMr, VerbsError> {
        ExposedMr::register(&self.pd, addr, len, writable)
    }
}
