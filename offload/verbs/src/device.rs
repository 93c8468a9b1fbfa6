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
//! only after the QP is destroyed. An `Attachment` holds its `Qp`. Nothing here panics.
//!
//! # A destroy that fails
//!
//! What a resource holds for its lifetime — its parents, and for an `Mr` the memory it
//! registers — is kept in a `Keep`: released after the resource's destroy verb succeeded, and
//! **leaked** (never freed, never destroyed) when it failed, counted ([`leaked_resources`]) and
//! reported on stderr. A QP that could not be destroyed may still have receives posted into
//! its memory region, and a region that could not be deregistered is still pinned and mapped
//! for the NIC: freeing the heap memory under either would let the device DMA into memory the
//! allocator hands out again. The same holds one level up: [`crate::UdQueue`] keeps the address
//! handles of its sends in flight when its QP could not be destroyed ([`Qp::destroy`]), and so
//! must its caller keep the handles it still holds ([`leak_all`]). Messages in `Drop` go
//! through `writeln!` to stderr with the error ignored: a `Drop` never panics, not even when
//! stderr is closed.
//!
//! The operations whose buffers must outlive a completion — `Qp::post_send`, `Qp::post_recv` —
//! stay `unsafe fn`, private to this crate; [`crate::UdQueue`] calls them under its own
//! bookkeeping of which buffer the device may touch, and offers the data path as safe calls.
//!
//! # `Send` and `Sync`
//!
//! Every type here is `Send` (libibverbs objects may be used from any thread). Those shared
//! through `Arc` — `Context`, `Pd`, `Cq`, `Mr`, `Qp` — must be `Sync` as well; what `&self`
//! allows on them is either thread-safe in libibverbs (queries, allocations, the kernel's
//! attach and detach) or private to this crate and used only by the one owner that is not
//! `Sync` itself: [`crate::UdQueue`] (asserted at compile time there) posts to the QP and polls
//! the CQ, so those data-path calls never run on two threads at once, whatever the provider's
//! own locking.
use crate::ffi::{errno, Status, ToResult};
pub(crate) use crate::keep::{destroy_error, report, Keep};
pub use crate::keep::{leak_all, leaked_resources};
use crate::VerbsError;
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

/// The names of the RDMA devices: [`VerbsError::NoDevice`] when there is none.
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
    /// RDMA READs (and atomics) a queue pair may have outstanding as a responder.
    pub max_qp_rd_atom: u32,
    /// RDMA READs (and atomics) a queue pair may have outstanding as a requester.
    pub max_qp_init_rd_atom: u32,
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
        Ok(DeviceCaps {
            max_qp_wr: u(attr.max_qp_wr),
            max_cqe: u(attr.max_cqe),
            max_qp_rd_atom: u(attr.max_qp_rd_atom),
            max_qp_init_rd_atom: u(attr.max_qp_init_rd_atom),
        })
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

    /// The type of entry `index` of port `port`'s GID table (`enum ibv_gid_type`: InfiniBand,
    /// RoCE v1, RoCE v2).
    pub fn query_gid_type(&self, port: u8, index: u8) -> Result<u32, VerbsError> {
        let mut entry = sys::ibv_gid_entry::default();
        // SAFETY: open context, valid out-pointer for the whole entry (the shim passes its size).
        Status(unsafe {
            sys::rc_ibv_query_gid_ex(self.as_ptr(), u32::from(port), u32::from(index), &mut entry, 0)
        })
        .to_result("ibv_query_gid_ex")?;
        Ok(entry.gid_type)
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
        if let Some(e) = destroy_error(r) {
            report(format_args!("ibv_close_device({}): {}", self.name, std::io::Error::from_raw_os_error(e)));
        }
    }
}

/// A protection domain.
pub struct Pd {
    raw: NonNull<sys::ibv_pd>,
    ctx: Keep<Arc<Context>>,
}

// SAFETY: a PD is only passed to thread-safe verbs (creating and destroying MRs, AHs, QPs);
// owned here, destroyed once.
unsafe impl Send for Pd {}
// SAFETY: as above: `&Pd` gives nothing but its pointer to those verbs.
unsafe impl Sync for Pd {}

impl Pd {
    /// A PD on `ctx`.
    pub fn new(ctx: Arc<Context>) -> Result<Arc<Pd>, VerbsError> {
        // SAFETY: open context.
        let raw = unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) }.to_result("ibv_alloc_pd")?;
        Ok(Arc::new(Pd { raw, ctx: Keep::new(ctx) }))
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR, QP and AH of this PD holds an Arc of it (or leaked it with itself):
        // none is left; deallocated once.
        let r = unsafe { sys::ibv_dealloc_pd(self.as_ptr()) };
        self.ctx.settle("ibv_dealloc_pd", r);
    }
}

/// A completion queue.
pub struct Cq {
    raw: NonNull<sys::ibv_cq>,
    ctx: Keep<Arc<Context>>,
}

// SAFETY: a CQ may be polled and destroyed from any thread; created and destroyed once.
unsafe impl Send for Cq {}
// SAFETY: `&Cq` allows `poll` (and its pointer, for QP creation). `poll` takes `&self` because
// the CQ is shared through `Arc` (with the QPs completing into it), but it is private to this
// crate and its only callers are `UdQueue::poll` and `RcQueue::poll`, which take `&mut self` of
// the one queue owning that CQ, neither queue being `Sync`: one thread polls a CQ at a time. (Providers lock their CQ in
// `ibv_poll_cq` too, unless it is created single-threaded, which this one is not — that is
// the provider's business; this impl relies on the single poller.)
unsafe impl Sync for Cq {}

impl Cq {
    /// A CQ of at least `entries` completions on `ctx`.
    pub fn new(ctx: Arc<Context>, entries: u32) -> Result<Arc<Cq>, VerbsError> {
        let cqe = i32::try_from(entries).map_err(|_| VerbsError::Invalid(format!("{entries} CQ entries")))?;
        // SAFETY: open context; no completion channel, no context pointer.
        let raw =
            unsafe { sys::ibv_create_cq(ctx.as_ptr(), cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) }
                .to_result("ibv_create_cq")?;
        Ok(Arc::new(Cq { raw, ctx: Keep::new(ctx) }))
    }

    /// Polls up to `wcs.len()` completions into `wcs`; how many, or the (negative) error.
    pub(crate) fn poll(&self, wcs: &mut [sys::ibv_wc]) -> Result<usize, i32> {
        let n = i32::try_from(wcs.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `wcs` has room for `n` completions, which the provider writes; no
        // other thread polls it (see the Sync impl).
        let got = unsafe { sys::rc_ibv_poll_cq(self.raw.as_ptr(), n, wcs.as_mut_ptr()) };
        usize::try_from(got).map(|g| g.min(wcs.len())).map_err(|_| got)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc of it (or leaked it with itself): none is
        // left; destroyed once.
        let r = unsafe { sys::ibv_destroy_cq(self.raw.as_ptr()) };
        self.ctx.settle("ibv_destroy_cq", r);
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
        // SAFETY: allocated with this layout; freed once. An `Mr` drops its `Memory` only after
        // a successful deregistration, and leaks it otherwise (`Keep`).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered memory region over memory it owns.
pub struct Mr {
    raw: NonNull<sys::ibv_mr>,
    /// Start of `parts`' memory (which never moves).
    base: NonNull<u8>,
    len: usize,
    /// The memory, freed only after a successful deregistration, and the PD.
    parts: Keep<(Memory, Arc<Pd>)>,
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
        // registration (`Mr::drop` deregisters before it frees the memory, and leaks the memory
        // if the deregistration fails).
        let raw = unsafe { sys::ibv_reg_mr(pd.as_ptr(), mem.ptr.as_ptr().cast(), len, access) }
            .to_result("ibv_reg_mr")?;
        Ok(Arc::new(Mr { raw, base: mem.ptr, len, parts: Keep::new((mem, pd)) }))
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered; `lkey` is written once by ibv_reg_mr.
        unsafe { (*self.raw.as_ptr()).lkey }
    }

    /// Start of the memory.
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
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
        // SAFETY: every QP that posted into this memory holds an Arc of this MR (a QP that
        // could not be destroyed leaked its Arc), so none is left; deregistered once. The
        // memory is freed after this returns success, never otherwise (`Keep::settle`).
        let r = unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
        self.parts.settle("ibv_dereg_mr", r);
    }
}

/// An address handle.
pub struct Ah {
    raw: NonNull<sys::ibv_ah>,
    pd: Keep<Arc<Pd>>,
}

// SAFETY: an AH is only named in work requests and destroyed, from any thread; created and
// destroyed once.
unsafe impl Send for Ah {}
// SAFETY: `&Ah` gives out nothing but its pointer, and only inside this crate (to name it in a
// send work request, which `UdQueue` posts from one thread at a time); shared through `Arc` so
// that a send in flight keeps it alive.
unsafe impl Sync for Ah {}

impl Ah {
    /// An AH for `attr` on `pd`, shared: every send in flight that names it holds a clone
    /// ([`crate::UdQueue`]).
    pub fn new(pd: Arc<Pd>, attr: &sys::ibv_ah_attr) -> Result<Arc<Ah>, VerbsError> {
        let mut attr = *attr;
        // SAFETY: live PD; `attr` is a valid attribute struct for the call's duration.
        let raw = unsafe { sys::ibv_create_ah(pd.as_ptr(), &mut attr) }.to_result("ibv_create_ah")?;
        Ok(Arc::new(Ah { raw, pd: Keep::new(pd) }))
    }

    /// For work requests.
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_ah {
        self.raw.as_ptr()
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once, when its last `Arc` goes. No posted
        // send still names it: every send `UdQueue` posts holds a clone of the `Arc` until the
        // send is known complete (its own or a later signalled completion), or the QP was reset
        // or destroyed; if destroying the QP fails, those clones are leaked (`UdQueue::destroy`).
        let r = unsafe { sys::ibv_destroy_ah(self.raw.as_ptr()) };
        self.pd.settle("ibv_destroy_ah", r);
    }
}

/// A queue pair: unreliable datagram ([`crate::UdQueue`]) or reliable connected ([`crate::rc`]).
pub struct Qp {
    raw: NonNull<sys::ibv_qp>,
    qpn: u32,
    max_inline: u32,
    /// Whether `ibv_destroy_qp` succeeded, once it was called (it is never called again).
    destroyed: Option<bool>,
    /// The memory its work requests point into, its CQ and its PD.
    parents: Keep<(Arc<Mr>, Arc<Cq>, Arc<Pd>)>,
}

// SAFETY: a QP may be used and destroyed from any thread; created and destroyed once.
unsafe impl Send for Qp {}
// SAFETY: `&Qp` allows posting, state changes and attach/detach. Attach and detach
// (`Attachment`, which holds an `Arc<Qp>`) are `ibv_attach_mcast`/`ibv_detach_mcast`, system
// calls serialised by the kernel. Posting and state changes are private to this crate and called
// only by the one owner of each QP — `UdQueue` through `&mut UdQueue`, `RcQueue` through
// `&mut RcQueue` — neither of which is `Sync` or shares its QP: they never run on two threads at
// once — whether a provider serialises posts per queue is provider-dependent and not relied on.
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
        Qp::create(pd, cq, mr, spec, sys::ibv_qp_type::IBV_QPT_UD)
    }

    /// A QP of `qp_type` (UD here, RC for [`crate::rc`]) on `pd` completing into `cq`, posting
    /// into `mr`'s memory; in RESET state.
    pub(crate) fn create(
        pd: Arc<Pd>,
        cq: Arc<Cq>,
        mr: Arc<Mr>,
        spec: QpSpec,
        qp_type: sys::ibv_qp_type,
    ) -> Result<Arc<Qp>, VerbsError> {
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
            qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ (their Arcs are kept by the Qp); `attr` valid for the call, which
        // writes the granted capabilities back into it.
        let raw = unsafe { sys::ibv_create_qp(pd.as_ptr(), &mut attr) }.to_result("ibv_create_qp")?;
        // SAFETY: the QP was just created; `qp_num` is set at creation and never changes.
        let qpn = unsafe { (*raw.as_ptr()).qp_num };
        Ok(Arc::new(Qp {
            raw,
            qpn,
            max_inline: attr.cap.max_inline_data,
            destroyed: None,
            parents: Keep::new((mr, cq, pd)),
        }))
    }

    /// Destroys the QP: whether `ibv_destroy_qp` succeeded (called once; later calls return
    /// the first outcome). On success its memory region, CQ and PD are released (dropped here
    /// if this was their last owner); on failure they are leaked — its posted receives may
    /// still point into the memory — and the caller must keep whatever its posted sends name
    /// (their address handles) as well. The QP must not be used afterwards.
    pub fn destroy(&mut self) -> bool {
        if let Some(ok) = self.destroyed {
            return ok;
        }
        // SAFETY: `&mut self` of a QP shared by `Arc` means no attachment (each holds an Arc)
        // is left, and no post is running; destroyed once (`destroyed`), before its MR, CQ and
        // PD, which `parents` keeps until `settle`.
        let r = unsafe { sys::ibv_destroy_qp(self.raw.as_ptr()) };
        let ok = self.parents.settle("ibv_destroy_qp", r);
        self.destroyed = Some(ok);
        ok
    }

    /// → RESET: the device drops every work request, posted receives and sends in flight
    /// alike (to recover from the error state; then [`Qp::to_init`] and [`Qp::to_rts`]).
    pub(crate) fn to_reset(&self) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RESET;
        self.modify(&mut attr, M::IBV_QP_STATE, "ibv_modify_qp(RESET)")
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The QP, unless it was destroyed (safe callers get an error then, never a dangling
    /// pointer).
    fn live(&self) -> Result<NonNull<sys::ibv_qp>, VerbsError> {
        match self.destroyed {
            None => Ok(self.raw),
            Some(_) => Err(VerbsError::Invalid("the queue pair was destroyed".into())),
        }
    }

    /// Inline data the provider granted.
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// RESET → INIT → RTR → RTS for a UD QP on `port` with Q_Key `qkey` (partition index 0).
    /// Receives may be posted between [`Qp::to_init`] and this.
    pub(crate) fn to_init(&self, port: u8, qkey: u32) -> Result<(), VerbsError> {
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
    pub(crate) fn to_rts(&self) -> Result<(), VerbsError> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: as in to_init.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut attr, M::IBV_QP_STATE, "ibv_modify_qp(RTR)")?;
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = 0;
        self.modify(&mut attr, M::IBV_QP_STATE | M::IBV_QP_SQ_PSN, "ibv_modify_qp(RTS)")
    }

    pub(crate) fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
        op: &'static str,
    ) -> Result<(), VerbsError> {
        let mask = i32::try_from(mask.0).unwrap_or(i32::MAX);
        let qp = self.live()?;
        // SAFETY: live QP (not destroyed: `live`); `attr` valid for the call.
        Status(unsafe { sys::ibv_modify_qp(qp.as_ptr(), attr, mask) }).to_result(op)
    }

    /// Posts the receive chain starting at `wr`; on failure, the errno and the first work
    /// request not posted.
    ///
    /// # Safety
    /// The QP was not destroyed ([`Qp::destroy`]). Every work request of the chain is valid for
    /// the call, and every buffer its scatter entries name lies in this QP's registered memory
    /// and is not read or written by anyone until its completion has been polled (or the QP is
    /// reset or destroyed).
    pub(crate) unsafe fn post_recv(
        &self,
        wr: *mut sys::ibv_recv_wr,
    ) -> Result<(), (i32, *mut sys::ibv_recv_wr)> {
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the caller's contract (a live QP, valid requests); `bad` is a valid out-pointer.
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
    /// The QP was not destroyed ([`Qp::destroy`]). `wr` is valid for the call; the buffer its
    /// scatter entry names lies in this QP's registered memory and is not written until the send
    /// completed (a later signalled completion, or the QP's reset or destruction); its address
    /// handle lives until then too.
    pub(crate) unsafe fn post_send(&self, wr: *mut sys::ibv_send_wr) -> Result<(), i32> {
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the caller's contract (a live QP, a valid request); `bad` is a valid
        // out-pointer.
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
        self.destroy();
    }
}

/// A QP attached to a multicast group, detached on drop.
pub struct Attachment {
    qp: Arc<Qp>,
    gid: sys::ibv_gid,
    lid: u16,
}

impl Attachment {
    /// Attaches `qp` to the group `mgid` (multicast LID `mlid`; 0 on RoCE).
    pub fn new(qp: Arc<Qp>, mgid: [u8; 16], mlid: u16) -> Result<Attachment, VerbsError> {
        let gid = sys::ibv_gid { raw: mgid };
        let raw = qp.live()?;
        // SAFETY: live QP (not destroyed: `live`; held by Arc); `gid` valid for the call.
        Status(unsafe { sys::ibv_attach_mcast(raw.as_ptr(), &gid, mlid) }).to_result("ibv_attach_mcast")?;
        Ok(Attachment { qp, gid, lid: mlid })
    }

    /// Attaches the QP again after a reset (some providers drop the attachments with it): a
    /// detach first, whose failure is expected where the attachment is gone already (the kernel
    /// ignores a second attach of one it still lists), then the attach.
    pub fn reattach(&self) -> Result<(), VerbsError> {
        let raw = self.qp.live()?;
        // SAFETY: live QP (`live`; held by Arc); `gid` valid for the call.
        let _ = unsafe { sys::ibv_detach_mcast(raw.as_ptr(), &self.gid, self.lid) };
        // SAFETY: as above.
        Status(unsafe { sys::ibv_attach_mcast(raw.as_ptr(), &self.gid, self.lid) })
            .to_result("ibv_attach_mcast")
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // The QP cannot have been destroyed: that takes `&mut Qp`, i.e. no Arc held here.
        let Ok(raw) = self.qp.live() else { return };
        // SAFETY: attached by `new` on this live QP (held by Arc); detached once. A failure is
        // only reported: nothing is freed that the attachment needs (destroying the QP detaches
        // what remains).
        let r = unsafe { sys::ibv_detach_mcast(raw.as_ptr(), &self.gid, self.lid) };
        if let Some(e) = destroy_error(r) {
            report(format_args!("ibv_detach_mcast: {}", std::io::Error::from_raw_os_error(e)));
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
                assert_eq!(VerbsError::NoDevice.to_string(), crate::NO_DEVICE);
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
    fn what_a_failed_destroy_would_free_is_leaked_instead() {
        let parent = Arc::new(());
        let mut k = Keep::new(Arc::clone(&parent));
        assert!(k.settle("ibv_destroy_x", 0));
        assert_eq!(Arc::strong_count(&parent), 1, "released");
        let before = leaked_resources();
        let mut k = Keep::new((Arc::clone(&parent), Memory::new(64).expect("memory")));
        assert!(!k.settle("ibv_dereg_mr", 16), "EBUSY");
        assert_eq!(Arc::strong_count(&parent), 2, "never dropped: the parent and the memory stay");
        // -1 with errno: a failure too.
        let mut k = Keep::new(Arc::clone(&parent));
        assert!(!k.settle("rdma_destroy_id", -1));
        assert_eq!(Arc::strong_count(&parent), 3);
        leak_all(vec![Arc::clone(&parent), Arc::clone(&parent)], "address handles");
        leak_all(Vec::<Arc<()>>::new(), "nothing");
        assert_eq!(Arc::strong_count(&parent), 5);
        assert!(leaked_resources() >= before + 4, "counted");
        assert_eq!((destroy_error(0), destroy_error(16)), (None, Some(16)));
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
