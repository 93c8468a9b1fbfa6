//! The verbs resources of one UD queue pair, each owned by a struct whose `Drop` releases it,
//! holding an `Arc` of the parent it was made from — so destruction order follows construction
//! whatever order the owners are dropped in (the rust-ibverbs pattern):
//!
//! ```text
//! Context ─┬─ Pd ─┬─ Mr (owns the registered memory) ─┐
//!          │      ├─ Ah                               ├─ Qp ── Attachment (multicast)
//!          └─ Cq ─────────────────────────────────────┘
//! ```
//!
//! A `Qp` holds its `Mr`: the memory its posted receives point into is deregistered and freed
//! only after the QP is destroyed. An `Attachment` holds its `Qp`. Nothing here panics; a
//! failing destroy in `Drop` is reported on stderr and otherwise ignored (the process is the
//! last owner and the kernel reclaims the rest at exit).
//!
//! The operations whose buffers must outlive a completion — [`Qp::post_send`],
//! [`Qp::post_recv`] — stay `unsafe fn`; [`super::qp::UdNic`] calls them under the bookkeeping
//! of [`super::slots`].
//!
//! `Send`/`Sync`: libibverbs is thread-safe; every object here is used through `&self` verbs
//! that rdma-core allows from any thread, or through `&mut` of its single owner.
use super::ffi::{errno, Status, ToResult};
use super::VerbsError;
use rdma_core_sys as sys;
use std::alloc::Layout;
use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

/// The device list, freed on drop.
struct DeviceList {
    raw: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// `ibv_get_device_list`: no device (a count of 0, or no kernel RDMA support at all, which
    /// rdma-core reports as NULL with `ENOSYS` and a count of 0) is [`VerbsError::NoDevice`].
    fn get() -> Result<DeviceList, VerbsError> {
        let mut n: std::os::raw::c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list, if any, is freed by Drop.
        let raw = unsafe { sys::ibv_get_device_list(&mut n) };
        let Some(raw) = NonNull::new(raw) else {
            let e = errno();
            return Err(if n == 0 && (e == rustix::io::Errno::NOSYS.raw_os_error() || e == 0) {
                VerbsError::NoDevice
            } else {
                VerbsError::call("ibv_get_device_list", e)
            });
        };
        let list = DeviceList { raw, len: usize::try_from(n).unwrap_or(0) };
        if list.len == 0 {
            return Err(VerbsError::NoDevice);
        }
        Ok(list)
    }

    fn device(&self, i: usize) -> Option<NonNull<sys::ibv_device>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: the list holds `len` device pointers (then NULL) and lives as long as self.
        NonNull::new(unsafe { *self.raw.as_ptr().add(i) })
    }

    fn name(&self, i: usize) -> Option<String> {
        let d = self.device(i)?;
        // SAFETY: a listed device is valid while the list is; `name` is a NUL-terminated array.
        Some(unsafe { CStr::from_ptr((*d.as_ptr()).name.as_ptr()) }.to_string_lossy().into_owned())
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: from ibv_get_device_list, freed once; opened contexts stay valid after it.
        unsafe { sys::ibv_free_device_list(self.raw.as_ptr()) }
    }
}

/// The names of the RDMA devices (see [`super::devices`]).
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let list = DeviceList::get()?;
    Ok((0..list.len).filter_map(|i| list.name(i)).collect())
}

/// Limits of a device (`ibv_query_device`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Completions per completion queue.
    pub max_cqe: u32,
}

/// A port's state (`ibv_query_port`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// `IBV_PORT_ACTIVE` and the like.
    pub state: sys::ibv_port_state,
    /// The active MTU in bytes.
    pub mtu: usize,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// The port's LID (InfiniBand).
    pub lid: u16,
    /// Entries of the GID table.
    pub gid_table: u32,
}

/// An open device.
pub struct Context {
    raw: NonNull<sys::ibv_context>,
    name: String,
}

// SAFETY: libibverbs contexts may be used from any thread; this one is only read after opening.
unsafe impl Send for Context {}
// SAFETY: as above: the verbs called through `&Context` (queries, allocations) are thread-safe.
unsafe impl Sync for Context {}

impl Context {
    /// Opens device `name`, or the first device when `name` is empty.
    pub fn open(name: &str) -> Result<Arc<Context>, VerbsError> {
        let list = DeviceList::get()?;
        let i = if name.is_empty() {
            0
        } else {
            (0..list.len).find(|&i| list.name(i).as_deref() == Some(name)).ok_or_else(|| {
                let names: Vec<String> = (0..list.len).filter_map(|i| list.name(i)).collect();
                VerbsError::Invalid(format!("no RDMA device named {name:?} (there are {names:?})"))
            })?
        };
        let dev = list.device(i).ok_or(VerbsError::NoDevice)?;
        let name = list.name(i).unwrap_or_default();
        // SAFETY: `dev` is listed and the list is alive; the context outlives the list.
        let raw = unsafe { sys::ibv_open_device(dev.as_ptr()) }.to_result("ibv_open_device")?;
        Ok(Arc::new(Context { raw, name }))
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn as_ptr(&self) -> *mut sys::ibv_context {
        self.raw.as_ptr()
    }

    /// The device's limits.
    pub fn query_device(&self) -> Result<DeviceCaps, VerbsError> {
        // SAFETY: all-zero is a valid value of this plain C struct (integers and arrays).
        let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: open context, valid out-pointer.
        Status(unsafe { sys::ibv_query_device(self.as_ptr(), &mut attr) }).to_result("ibv_query_device")?;
        let u = |v: i32| u32::try_from(v).unwrap_or(0);
        Ok(DeviceCaps { max_qp_wr: u(attr.max_qp_wr), max_cqe: u(attr.max_cqe) })
    }

    /// Port `port`'s attributes.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        // SAFETY: all-zero is a valid value of this plain C struct (integers and newtypes).
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: open context, valid out-pointer for the whole struct (the shim calls the
        // static inline `ibv_query_port`, which fills the current struct, not the compat one).
        Status(unsafe { sys::rc_ibv_query_port(self.as_ptr(), port, &mut attr) })
            .to_result("ibv_query_port")?;
        // IBV_MTU_256 = 1 … IBV_MTU_4096 = 5; anything else is unknown: the smallest.
        let mtu = match attr.active_mtu.0 {
            m @ 1..=5 => 128usize << m,
            _ => 256,
        };
        Ok(PortAttr {
            state: attr.state,
            mtu,
            link_layer: attr.link_layer,
            lid: attr.lid,
            gid_table: u32::try_from(attr.gid_tbl_len).unwrap_or(0),
        })
    }

    /// Entry `index` of port `port`'s GID table.
    pub fn query_gid(&self, port: u8, index: u8) -> Result<[u8; 16], VerbsError> {
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        // SAFETY: open context, valid out-pointer.
        Status(unsafe { sys::ibv_query_gid(self.as_ptr(), port, i32::from(index), &mut gid) })
            .to_result("ibv_query_gid")?;
        // SAFETY: every variant of the union is plain bytes; `raw` covers all 16.
        Ok(unsafe { gid.raw })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child (PD, CQ) holds an Arc of this context, so none is left; closed once.
        let r = unsafe { sys::ibv_close_device(self.as_ptr()) };
        if r != 0 {
            eprintln!(
                "verbs fabric: ibv_close_device({}): {}",
                self.name,
                std::io::Error::from_raw_os_error(r)
            );
        }
    }
}

/// A protection domain.
pub struct Pd {
    raw: NonNull<sys::ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: a PD is only passed to thread-safe verbs; owned here, destroyed once.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// A PD on `ctx`.
    pub fn new(ctx: Arc<Context>) -> Result<Arc<Pd>, VerbsError> {
        // SAFETY: open context.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) }.to_result("ibv_alloc_pd")?;
        Ok(Arc::new(Pd { raw, ctx }))
    }

    fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR, QP and AH of this PD holds an Arc of it: none is left.
        let r = unsafe { sys::ibv_dealloc_pd(self.as_ptr()) };
        if r != 0 {
            eprintln!(
                "verbs fabric: ibv_dealloc_pd({}): {}",
                self.ctx.name,
                std::io::Error::from_raw_os_error(r)
            );
        }
    }
}

/// A completion queue.
pub struct Cq {
    raw: NonNull<sys::ibv_cq>,
    _ctx: Arc<Context>,
}

// SAFETY: polled through `&mut` of its single user (the NIC); created and destroyed once.
unsafe impl Send for Cq {}
// SAFETY: as above; `&Cq` exposes nothing but its use in QP creation.
unsafe impl Sync for Cq {}

impl Cq {
    /// A CQ of at least `entries` completions on `ctx`.
    pub fn new(ctx: Arc<Context>, entries: u32) -> Result<Arc<Cq>, VerbsError> {
        let cqe = i32::try_from(entries).map_err(|_| VerbsError::Invalid(format!("{entries} CQ entries")))?;
        // SAFETY: open context; no completion channel, no context pointer.
        let raw =
            unsafe { sys::ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) }
                .to_result("ibv_create_cq")?;
        Ok(Arc::new(Cq { raw, _ctx: ctx }))
    }

    /// Polls up to `wcs.len()` completions into `wcs`; how many, or the (negative) error.
    pub fn poll(&self, wcs: &mut [sys::ibv_wc]) -> Result<usize, i32> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `wcs` has room for `n` completions, which the provider writes.
        let got = unsafe { sys::rc_ibv_poll_cq(self.raw.as_ptr(), n, wcs.as_mut_ptr()) };
        usize::try_from(got).map(|g| g.min(wcs.len())).map_err(|_| got)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc of it: none is left.
        let r = unsafe { sys::ibv_destroy_cq(self.raw.as_ptr()) };
        if r != 0 {
            eprintln!("verbs fabric: ibv_destroy_cq: {}", std::io::Error::from_raw_os_error(r));
        }
    }
}

/// Page-aligned, zeroed memory that never moves, freed on drop. Only raw pointers into it are
/// handed out: the NIC writes parts of it at any time, so no Rust reference to all of it may
/// exist.
struct Memory {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Memory {
    fn new(len: usize) -> Result<Memory, VerbsError> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| VerbsError::Invalid(format!("{len} bytes of registered memory")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or_else(|| VerbsError::Invalid(format!("cannot allocate {len} bytes")))?;
        Ok(Memory { ptr, layout })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout; freed once (the MR owning it is deregistered).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered memory region over memory it owns.
pub struct Mr {
    raw: NonNull<sys::ibv_mr>,
    // Freed after deregistration (Drop runs first, then the fields in order).
    mem: Memory,
    len: usize,
    _pd: Arc<Pd>,
}

// SAFETY: the memory is reached only through raw pointers under the slot bookkeeping of its
// single user; the MR handle is used by thread-safe verbs only.
unsafe impl Send for Mr {}
// SAFETY: as above: `&Mr` gives out addresses and the key, never references to the bytes.
unsafe impl Sync for Mr {}

impl Mr {
    /// `len` bytes of fresh memory registered for local writes on `pd`.
    pub fn new(pd: Arc<Pd>, len: usize) -> Result<Arc<Mr>, VerbsError> {
        let mem = Memory::new(len)?;
        let access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: live PD; `len` bytes at `mem.ptr` are owned by `mem`, which outlives the
        // registration (field order in Mr, deregistered in Drop first).
        let raw = unsafe { sys::ibv_reg_mr(pd.as_ptr(), mem.ptr.as_ptr().cast(), len, access) }
            .to_result("ibv_reg_mr")?;
        Ok(Arc::new(Mr { raw, mem, len, _pd: pd }))
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered; `lkey` is written once by ibv_reg_mr.
        unsafe { (*self.raw.as_ptr()).lkey }
    }

    /// Start of the memory.
    pub fn base(&self) -> NonNull<u8> {
        self.mem.ptr
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Nothing registered (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: every QP that posted into this memory holds an Arc of this MR, so none is
        // left; deregistered once, before `mem` is freed.
        let r = unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
        if r != 0 {
            eprintln!("verbs fabric: ibv_dereg_mr: {}", std::io::Error::from_raw_os_error(r));
        }
    }
}

/// An address handle.
pub struct Ah {
    raw: NonNull<sys::ibv_ah>,
    _pd: Arc<Pd>,
}

// SAFETY: an AH is only named in work requests; created and destroyed once.
unsafe impl Send for Ah {}

impl Ah {
    /// An AH for `attr` on `pd`.
    pub fn new(pd: Arc<Pd>, attr: &sys::ibv_ah_attr) -> Result<Ah, VerbsError> {
        let mut attr = *attr;
        // SAFETY: live PD; `attr` is a valid attribute struct for the call's duration.
        let raw = unsafe { sys::ibv_create_ah(pd.as_ptr(), &mut attr) }.to_result("ibv_create_ah")?;
        Ok(Ah { raw, _pd: pd })
    }

    /// For work requests.
    pub fn as_ptr(&self) -> *mut sys::ibv_ah {
        self.raw.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once. The NIC retires an AH only after the
        // sends posted with it completed, or after its QP is gone.
        let r = unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
        if r != 0 {
            eprintln!("verbs fabric: ibv_destroy_ah: {}", std::io::Error::from_raw_os_error(r));
        }
    }
}

/// An unreliable-datagram queue pair.
pub struct Qp {
    raw: NonNull<sys::ibv_qp>,
    max_inline: u32,
    _mr: Arc<Mr>,
    _cq: Arc<Cq>,
    _pd: Arc<Pd>,
}

// SAFETY: posts go through `&Qp` verbs that libibverbs serialises per queue; the single user
// posts from one thread at a time anyway. Created and destroyed once.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

/// What a UD QP is created with.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    /// Send work requests.
    pub send_wr: u32,
    /// Receive work requests.
    pub recv_wr: u32,
    /// Inline data wanted (the provider may give less, reported by [`Qp::max_inline`]).
    pub inline: u32,
}

impl Qp {
    /// A UD QP on `pd` completing into `cq`, posting into `mr`'s memory; in RESET state.
    pub fn new_ud(pd: Arc<Pd>, cq: Arc<Cq>, mr: Arc<Mr>, spec: QpSpec) -> Result<Arc<Qp>, VerbsError> {
        let mut attr = sys::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.raw.as_ptr(),
            recv_cq: cq.raw.as_ptr(),
            srq: std::ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: spec.send_wr,
                max_recv_wr: spec.recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: spec.inline,
            },
            qp_type: sys::ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ (their Arcs are kept by the Qp); `attr` valid for the call, which
        // writes the granted capabilities back into it.
        let raw = unsafe { sys::ibv_create_qp(pd.as_ptr(), &mut attr) }.to_result("ibv_create_qp")?;
        Ok(Arc::new(Qp { raw, max_inline: attr.cap.max_inline_data, _mr: mr, _cq: cq, _pd: pd }))
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: live QP; `qp_num` is set at creation and never changes.
        unsafe { (*self.raw.as_ptr()).qp_num }
    }

    /// Inline data the provider granted.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// RESET → INIT → RTR → RTS for a UD QP on `port` with Q_Key `qkey` (partition index 0).
    /// Receives may be posted between [`Qp::to_init`] and this.
    pub fn to_init(&self, port: u8, qkey: u32) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        attr.qkey = qkey;
        let mask = M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_QKEY;
        self.modify(&mut attr, mask, "ibv_modify_qp(INIT)")
    }

    /// INIT → RTR → RTS (see [`Qp::to_init`]).
    pub fn to_rts(&self) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: as in to_init.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut attr, M::IBV_QP_STATE, "ibv_modify_qp(RTR)")?;
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = 0;
        self.modify(&mut attr, M::IBV_QP_STATE | M::IBV_QP_SQ_PSN, "ibv_modify_qp(RTS)")
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
        op: &'static str,
    ) -> Result<(), VerbsError> {
        let mask = i32::try_from(mask.0).unwrap_or(i32::MAX);
        // SAFETY: live QP; `attr` valid for the call.
        Status(unsafe { sys::ibv_modify_qp(self.raw.as_ptr(), attr, mask) }).to_result(op)
    }

    /// Posts the receive chain starting at `wr`; on failure, the errno and the first work
    /// request not posted.
    ///
    /// # Safety
    /// Every work request of the chain is valid for the call, and every buffer its scatter
    /// entries name lies in this QP's registered memory and is not read or written by anyone
    /// until its completion has been polled (or the QP is destroyed).
    pub unsafe fn post_recv(&self, wr: *mut sys::ibv_recv_wr) -> Result<(), (i32, *mut sys::ibv_recv_wr)> {
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the caller's contract; live QP; `bad` is a valid out-pointer.
        let r = unsafe { sys::rc_ibv_post_recv(self.raw.as_ptr(), wr, &mut bad) };
        match r {
            0 => Ok(()),
            e if e > 0 => Err((e, bad)),
            _ => Err((errno(), bad)),
        }
    }

    /// Posts one send work request.
    ///
    /// # Safety
    /// `wr` is valid for the call; the buffer its scatter entry names lies in this QP's
    /// registered memory and is not written until the send completed (a later signalled
    /// completion, or the QP's destruction); its address handle lives until then too.
    pub unsafe fn post_send(&self, wr: *mut sys::ibv_send_wr) -> Result<(), i32> {
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the caller's contract; live QP; `bad` is a valid out-pointer.
        let r = unsafe { sys::rc_ibv_post_send(self.raw.as_ptr(), wr, &mut bad) };
        match r {
            0 => Ok(()),
            e if e > 0 => Err(e),
            _ => Err(errno()),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: every attachment holds an Arc of this QP: none is left; destroyed once, before
        // its MR, CQ and PD (held by Arc).
        let r = unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) };
        if r != 0 {
            eprintln!("verbs fabric: ibv_destroy_qp: {}", std::io::Error::from_raw_os_error(r));
        }
    }
}

/// A QP attached to a multicast group, detached on drop.
pub struct Attachment {
    qp: Arc<Qp>,
    gid: sys::ibv_gid,
    lid: u16,
}

// SAFETY: holds plain data and an Arc<Qp> (Send + Sync).
unsafe impl Send for Attachment {}

impl Attachment {
    /// Attaches `qp` to the group `mgid` (multicast LID `mlid`; 0 on RoCE).
    pub fn new(qp: Arc<Qp>, mgid: [u8; 16], mlid: u16) -> Result<Attachment, VerbsError> {
        let gid = sys::ibv_gid { raw: mgid };
        // SAFETY: live QP; `gid` valid for the call.
        Status(unsafe { sys::ibv_attach_mcast(qp.raw.as_ptr(), &gid, mlid) })
            .to_result("ibv_attach_mcast")?;
        Ok(Attachment { qp, gid, lid: mlid })
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // SAFETY: attached by `new` on this live QP (held by Arc); detached once.
        let r = unsafe { sys::ibv_detach_mcast(self.qp.raw.as_ptr(), &self.gid, self.lid) };
        if r != 0 {
            eprintln!("verbs fabric: ibv_detach_mcast: {}", std::io::Error::from_raw_os_error(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine either there is a device — then it opens and its first port answers —
    /// or `ibv_get_device_list` finds none, which is the typed `NoDevice`, not a panic and not
    /// a generic error.
    #[test]
    fn the_device_list_is_read_or_typed_as_empty() {
        match device_names() {
            Err(VerbsError::NoDevice) => {
                assert!(matches!(Context::open(""), Err(VerbsError::NoDevice)));
                assert_eq!(VerbsError::NoDevice.to_string(), super::super::NO_DEVICE);
            }
            Ok(names) => {
                assert!(!names.is_empty() && names.iter().all(|n| !n.is_empty()), "{names:?}");
                let ctx = Context::open(&names[0]).expect("the first device opens");
                assert_eq!(ctx.name(), names[0]);
                let port = ctx.query_port(1).expect("port 1");
                assert!(port.mtu >= 256 && port.gid_table > 0, "{port:?}");
                assert!(ctx.query_device().expect("query").max_qp_wr > 0);
                assert!(matches!(Context::open("no-such-device-0"), Err(VerbsError::Invalid(_))));
            }
            Err(e) => panic!("ibv_get_device_list failed otherwise: {e}"),
        }
    }

    #[test]
    fn memory_is_page_aligned_and_zeroed() {
        let m = Memory::new(10_000).expect("memory");
        assert_eq!(m.ptr.as_ptr() as usize % 4096, 0);
        // SAFETY: 10 000 bytes were allocated and zeroed, and nothing else uses them.
        let bytes = unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), 10_000) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
