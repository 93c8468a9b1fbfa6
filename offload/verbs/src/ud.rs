//! One unreliable-datagram queue pair with its completion queue and the registered region it
//! posts into — [`UdQueue`] — with the data path as safe calls: the only place the fabric's
//! buffers meet the device.
//!
//! # The region
//!
//! One memory region ([`Regions`]), page-aligned and zeroed: receive slot `i` at
//! `i × recv_size`, then send buffer `j` at `recv_slots × recv_size + j × send_size`.
//!
//! # What the queue guarantees, whatever its caller does
//!
//! It keeps its own account of which bytes the device may touch — not the caller's policy
//! (which slot to post next, which buffer serves which send, when to signal: the caller's
//! bookkeeping decides that), only what memory safety needs:
//!
//! * **Receive slots.** A slot is posted with a work request id the caller chooses, whose low 32
//!   bits are the slot number and whose bit 63 ([`SEND_BIT`]) is clear; a slot posted already is
//!   refused. [`UdQueue::poll`] returns the slot to the caller when a completion carries exactly
//!   the id it was posted with (a completion from before a reset, or a made-up id, changes
//!   nothing). [`UdQueue::received`] lends a slot's bytes only while the slot is not posted; a
//!   post takes `&mut self`, so no lent slice outlives the next post.
//! * **Send buffers.** [`UdQueue::send`] copies the frame into the send buffer the caller names
//!   and posts it, refusing a buffer that a send in flight still uses. A send is in flight from
//!   its post until a completion of it or of a later send comes back (a send queue completes in
//!   order, so a signalled completion also completes every unsignalled send before it), or the
//!   queue pair is reset or destroyed. Send work request ids have [`SEND_BIT`] set.
//! * **Address handles.** A send in flight holds a clone of its [`Ah`]'s `Arc`, so a handle the
//!   caller drops is destroyed only after the last send naming it is complete.
//! * **Reset and destruction.** [`UdQueue::reset`] (RESET state: the device drops every work
//!   request) makes every slot unposted and every send complete. [`UdQueue::destroy`] destroys
//!   the QP; if that fails, the memory, the CQ, the PD and the address handles of the sends in
//!   flight are leaked rather than freed under a device that may still use them.
//!
//! `Send`, not `Sync` (asserted below): the `Sync` impls of [`crate::device`]'s shared objects
//! rely on one thread at a time posting to the QP and polling the CQ, which only this type does,
//! through `&mut self`.
use crate::device::{Ah, Cq, Mr, Pd, Qp, QpSpec};
use crate::VerbsError;
use rdma_core_sys as sys;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;

/// Bit 63 of a send's work request id (clear in a receive's).
pub const SEND_BIT: u64 = 1 << 63;

/// Receive work requests posted per `ibv_post_recv` call (one chain on the stack).
const RECV_CHAIN: usize = 32;

/// `EINVAL`: a post the queue refuses without asking the device.
const EINVAL: i32 = 22;
/// `EBUSY`: a send buffer still used by a send in flight.
const EBUSY: i32 = 16;

/// The sizes of the registered region (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regions {
    /// Receive slots.
    pub recv_slots: u32,
    /// Bytes of a receive slot (the GRH area included).
    pub recv_size: usize,
    /// Send buffers.
    pub send_buffers: u32,
    /// Bytes of a send buffer.
    pub send_size: usize,
}

impl Regions {
    /// Where the send buffers start, and the region's size; `None` if they overflow.
    fn offsets(&self) -> Option<(usize, usize)> {
        let send_offset = (self.recv_slots as usize).checked_mul(self.recv_size)?;
        let total = send_offset.checked_add((self.send_buffers as usize).checked_mul(self.send_size)?)?;
        Some((send_offset, total))
    }
}

/// A receive chain the device took only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostRecvError {
    /// Entries of the batch posted (from the first): the rest were not.
    pub posted: usize,
    /// Why (the provider's errno, or `EINVAL` for an entry the queue refused itself).
    pub errno: i32,
}

/// One send.
#[derive(Clone, Copy)]
pub struct SendRequest<'a> {
    /// The send buffer to copy the frame into (`< send_buffers`).
    pub buffer: u32,
    /// The work request id (with [`SEND_BIT`]).
    pub wr_id: u64,
    /// Where to: a handle on this queue's PD.
    pub ah: &'a Arc<Ah>,
    /// The destination QP number (`0xff_ffff` for a multicast group).
    pub remote_qpn: u32,
    /// The destination's Q_Key.
    pub remote_qkey: u32,
    /// Whether to ask for a completion.
    pub signalled: bool,
    /// The frame: `header`, then `body`.
    pub header: &'a [u8],
    /// See `header`.
    pub body: &'a [u8],
}

/// A send in flight.
struct InFlight<T> {
    wr_id: u64,
    buffer: u32,
    /// What it names that must outlive it (its address handle).
    _keep: T,
}

/// Which bytes of the region the device may use now (see the module doc): the safety
/// bookkeeping of [`UdQueue`], generic over what a send keeps alive so that it is tested
/// without a device.
struct Owned<T> {
    /// Per receive slot: the work request id it is posted with.
    posted: Vec<Option<u64>>,
    /// Per send buffer: used by a send in flight.
    busy: Vec<bool>,
    /// Sends in flight, in posting order.
    in_flight: VecDeque<InFlight<T>>,
}

impl<T> Owned<T> {
    fn new(slots: u32, buffers: u32) -> Owned<T> {
        Owned {
            posted: vec![None; slots as usize],
            busy: vec![false; buffers as usize],
            in_flight: VecDeque::with_capacity(buffers as usize),
        }
    }

    /// Whether `slot` may be posted with `wr_id`.
    fn may_post(&self, slot: u32, wr_id: u64) -> bool {
        wr_id & SEND_BIT == 0
            && wr_id as u32 == slot
            && self.posted.get(slot as usize).is_some_and(Option::is_none)
    }

    fn mark_posted(&mut self, slot: u32, wr_id: u64) {
        if let Some(p) = self.posted.get_mut(slot as usize) {
            *p = Some(wr_id);
        }
    }

    /// Whether `slot`'s bytes may be read (not posted).
    fn readable(&self, slot: u32) -> bool {
        self.posted.get(slot as usize).is_some_and(Option::is_none)
    }

    /// Whether a send may use `buffer` with `wr_id`.
    fn may_send(&self, buffer: u32, wr_id: u64) -> Result<(), i32> {
        match self.busy.get(buffer as usize) {
            _ if wr_id & SEND_BIT == 0 => Err(EINVAL),
            None => Err(EINVAL),
            Some(true) => Err(EBUSY),
            Some(false) => Ok(()),
        }
    }

    fn sent(&mut self, buffer: u32, wr_id: u64, keep: T) {
        if let Some(b) = self.busy.get_mut(buffer as usize) {
            *b = true;
        }
        self.in_flight.push_back(InFlight { wr_id, buffer, _keep: keep });
    }

    /// A completion of work request `wr_id` came back (any status).
    fn complete(&mut self, wr_id: u64) {
        if wr_id & SEND_BIT != 0 {
            // It and every send posted before it are complete; an id not in flight is stale.
            if let Some(i) = self.in_flight.iter().position(|s| s.wr_id == wr_id) {
                for s in self.in_flight.drain(..=i) {
                    if let Some(b) = self.busy.get_mut(s.buffer as usize) {
                        *b = false;
                    }
                }
            }
        } else if let Some(p) = self.posted.get_mut(wr_id as u32 as usize) {
            if *p == Some(wr_id) {
                *p = None;
            }
        }
    }

    /// The device dropped every work request.
    fn reset(&mut self) {
        self.posted.iter_mut().for_each(|p| *p = None);
        self.busy.iter_mut().for_each(|b| *b = false);
        self.in_flight.clear();
    }
}

/// The UD queue pair and its region; see the module doc.
pub struct UdQueue {
    // Destroyed first (see `Drop`), then the sends' handles, then the parents.
    qp: Arc<Qp>,
    owned: Owned<Arc<Ah>>,
    mr: Arc<Mr>,
    cq: Arc<Cq>,
    regions: Regions,
    send_offset: usize,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

static_assertions::assert_not_impl_any!(UdQueue: Sync);
static_assertions::assert_impl_all!(UdQueue: Send);

impl UdQueue {
    /// Registers a fresh region of `regions`' sizes on `pd` and creates a UD QP completing into
    /// `cq` (in RESET state), asking for `spec`'s inline data, or none if the provider refuses.
    pub fn new(pd: &Arc<Pd>, cq: Arc<Cq>, regions: Regions, spec: QpSpec) -> Result<UdQueue, VerbsError> {
        let (send_offset, total) =
            regions.offsets().ok_or_else(|| VerbsError::Invalid(format!("{regions:?} do not fit memory")))?;
        if regions.recv_size > u32::MAX as usize || regions.send_size > u32::MAX as usize {
            return Err(VerbsError::Invalid(format!("{regions:?}: a buffer over 4 GiB")));
        }
        let mr = Mr::new(Arc::clone(pd), total)?;
        let qp = Qp::new_ud(Arc::clone(pd), Arc::clone(&cq), Arc::clone(&mr), spec).or_else(|_| {
            Qp::new_ud(Arc::clone(pd), Arc::clone(&cq), Arc::clone(&mr), QpSpec { inline: 0, ..spec })
        })?;
        Ok(UdQueue {
            qp,
            owned: Owned::new(regions.recv_slots, regions.send_buffers),
            mr,
            cq,
            regions,
            send_offset,
            _not_sync: PhantomData,
        })
    }

    /// The QP (its number, its inline limit, and to attach it to groups: [`crate::Attachment`]).
    pub fn qp(&self) -> &Arc<Qp> {
        &self.qp
    }

    /// The region's sizes.
    pub fn regions(&self) -> Regions {
        self.regions
    }

    /// RESET → INIT on `port` with Q_Key `qkey` (receives may be posted from here on).
    pub fn to_init(&mut self, port: u8, qkey: u32) -> Result<(), VerbsError> {
        self.qp.to_init(port, qkey)
    }

    /// INIT → RTR → RTS.
    pub fn to_rts(&mut self) -> Result<(), VerbsError> {
        self.qp.to_rts()
    }

    /// → RESET (to recover from the error state): the device drops every work request, so every
    /// slot is unposted and every send complete afterwards. Nothing changes if the verb fails.
    pub fn reset(&mut self) -> Result<(), VerbsError> {
        self.qp.to_reset()?;
        self.owned.reset();
        Ok(())
    }

    /// Whether `slot` is posted (the device may write it).
    pub fn is_posted(&self, slot: u32) -> bool {
        !self.owned.readable(slot) && (slot as usize) < self.owned.posted.len()
    }

    /// Sends in flight (posted, not known complete).
    pub fn sends_in_flight(&self) -> usize {
        self.owned.in_flight.len()
    }

    /// Posts a receive into each `(slot, wr_id)` of `batch`, in order (see the module doc for the
    /// ids). On an entry the queue refuses, or a post the device refuses, the entries before it
    /// are posted and the rest are not. If the provider does not say which work request it
    /// refused, every one of the chain counts as posted: a slot may be lost, never posted twice.
    pub fn post_recv(&mut self, batch: &[(u32, u64)]) -> Result<(), PostRecvError> {
        let base = self.mr.base().as_ptr() as u64;
        let lkey = self.mr.lkey();
        let size = self.regions.recv_size;
        let mut done = 0;
        for chunk in batch.chunks(RECV_CHAIN) {
            let mut sges = [sys::ibv_sge::default(); RECV_CHAIN];
            let mut wrs = [sys::ibv_recv_wr::default(); RECV_CHAIN];
            let mut n = 0;
            let mut refused = false;
            for &(slot, wr_id) in chunk {
                // A slot twice in one chain is refused too: the first marks it posted below
                // only after the post, so check the chain itself.
                if !self.owned.may_post(slot, wr_id) || chunk[..n].iter().any(|&(s, _)| s == slot) {
                    refused = true;
                    break;
                }
                sges[n] = sys::ibv_sge { addr: base + slot as u64 * size as u64, length: size as u32, lkey };
                wrs[n].wr_id = wr_id;
                wrs[n].num_sge = 1;
                n += 1;
            }
            if n > 0 {
                let (w, s) = (wrs.as_mut_ptr(), sges.as_mut_ptr());
                for i in 0..n {
                    // SAFETY: `i < n <= RECV_CHAIN`: both pointers stay inside their arrays,
                    // which are not otherwise touched until the post returns.
                    unsafe {
                        (*w.add(i)).sg_list = s.add(i);
                        if i + 1 < n {
                            (*w.add(i)).next = w.add(i + 1);
                        }
                    }
                }
                // SAFETY: the QP is alive (destroyed only by `destroy`/`Drop`, which end the
                // queue's use). The chain's `n` work requests and scatter entries live on this
                // stack frame through the call; each names one whole receive slot inside the
                // registered region (`slot < recv_slots`, checked by `may_post`), not posted
                // (checked, and distinct within the chain) — so no slice lent by `received`
                // covers it: lending takes `&self`, this takes `&mut self`. The slots are marked
                // posted right after, before anyone can read them again.
                let r = unsafe { self.qp.post_recv(w) };
                let taken = match r {
                    Ok(()) => n,
                    // From `bad` on nothing was posted; a `bad` that is none of ours: all were.
                    Err((_, bad)) => (0..n).find(|&i| w.wrapping_add(i) == bad).unwrap_or(n),
                };
                for &(slot, wr_id) in &chunk[..taken] {
                    self.owned.mark_posted(slot, wr_id);
                }
                if let Err((errno, _)) = r {
                    return Err(PostRecvError { posted: done + taken, errno });
                }
            }
            done += n;
            if refused {
                return Err(PostRecvError { posted: done, errno: EINVAL });
            }
        }
        Ok(())
    }

    /// Copies `req`'s frame into its send buffer and posts it (inline when it fits the QP's
    /// inline limit). `Err(errno)`: `EINVAL` for a buffer or id out of range or a frame longer
    /// than a send buffer, `EBUSY` for a buffer a send in flight still uses (nothing posted),
    /// else the provider's refusal.
    pub fn send(&mut self, req: SendRequest<'_>) -> Result<(), i32> {
        self.owned.may_send(req.buffer, req.wr_id)?;
        let len = req.header.len() + req.body.len();
        if len > self.regions.send_size {
            return Err(EINVAL);
        }
        let offset = self.send_offset + req.buffer as usize * self.regions.send_size;
        debug_assert!(offset + self.regions.send_size <= self.mr.len());
        // SAFETY: `offset..offset + send_size` lies inside the registered region (`Regions`:
        // `send_buffers` buffers after the receive slots, and `buffer < send_buffers`, checked
        // by `may_send`).
        let buf = unsafe { self.mr.base().as_ptr().add(offset) };
        // SAFETY: send buffer `buffer` is used by no send in flight (`may_send`: not busy), the
        // device never writes send buffers, and no slice of it is lent (`received` lends receive
        // slots only); `len <= send_size`. The slice ends before the post below.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        out[..req.header.len()].copy_from_slice(req.header);
        out[req.header.len()..].copy_from_slice(req.body);
        let mut sge = sys::ibv_sge { addr: buf as u64, length: len as u32, lkey: self.mr.lkey() };
        let mut flags = sys::ibv_send_flags(0);
        if req.signalled {
            flags |= sys::ibv_send_flags::IBV_SEND_SIGNALED;
        }
        if len as u32 <= self.qp.max_inline() {
            flags |= sys::ibv_send_flags::IBV_SEND_INLINE;
        }
        let mut wr = sys::ibv_send_wr {
            wr_id: req.wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: sys::ibv_wr_opcode::IBV_WR_SEND,
            send_flags: flags.0,
            ..Default::default()
        };
        wr.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: req.ah.as_ptr(),
            remote_qpn: req.remote_qpn,
            remote_qkey: req.remote_qkey,
        };
        // SAFETY: the QP is alive (destroyed only by `destroy`/`Drop`). `wr` and `sge` live
        // through the call; the buffer lies in this QP's registered region and is not written
        // again until the send is complete (marked busy below, on success); the address handle
        // lives until then too (the send holds a clone of its `Arc` below, released when the
        // send is complete, leaked if the QP cannot be destroyed).
        unsafe { self.qp.post_send(&mut wr) }?;
        self.owned.sent(req.buffer, req.wr_id, Arc::clone(req.ah));
        Ok(())
    }

    /// Polls up to `wcs.len()` completions into `wcs`, taking each into account (a receive's
    /// slot becomes readable, a send's buffer free); how many, or the provider's error.
    pub fn poll(&mut self, wcs: &mut [sys::ibv_wc]) -> Result<usize, i32> {
        let got = self.cq.poll(wcs)?;
        for wc in &wcs[..got] {
            self.owned.complete(wc.wr_id);
        }
        Ok(got)
    }

    /// The first `len` bytes of receive slot `slot`, unless the slot is posted (the device may
    /// be writing it) or out of range, or `len` exceeds a slot.
    pub fn received(&self, slot: u32, len: usize) -> Option<&[u8]> {
        if slot >= self.regions.recv_slots || len > self.regions.recv_size || !self.owned.readable(slot) {
            return None;
        }
        let offset = slot as usize * self.regions.recv_size;
        // SAFETY: the slot is not posted, so the device does not write it until it is posted
        // again, which takes `&mut self` and so ends this borrow first; the range lies inside the
        // registered region (slot < recv_slots, len <= recv_size), which lives as long as `self`
        // and was zeroed at allocation (every byte initialised).
        Some(unsafe { std::slice::from_raw_parts(self.mr.base().as_ptr().add(offset), len) })
    }

    /// Destroys the QP (once; later calls return the first outcome): whether it succeeded. On
    /// failure the address handles of the sends in flight are leaked with the region, the CQ
    /// and the PD, and the caller must keep the handles it holds too ([`crate::leak_all`]). `false`
    /// also when someone still holds the QP (an [`crate::Attachment`]). The queue posts nothing
    /// afterwards (a post would find the QP destroyed: an error, never a dangling pointer).
    pub fn destroy(&mut self) -> bool {
        let destroyed = Arc::get_mut(&mut self.qp).is_some_and(Qp::destroy);
        if destroyed {
            self.owned.reset();
        } else {
            crate::device::leak_all(
                self.owned.in_flight.drain(..).map(|s| s._keep),
                "address handles of sends in flight",
            );
        }
        destroyed
    }
}

impl Drop for UdQueue {
    fn drop(&mut self) {
        self.destroy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_slots_are_lent_only_while_not_posted() {
        let mut o: Owned<()> = Owned::new(4, 2);
        let id = |generation: u64, slot: u32| generation << 32 | u64::from(slot);
        assert!(o.readable(0) && !o.readable(4), "never posted: readable; out of range: not");
        assert!(o.may_post(1, id(1, 1)));
        assert!(!o.may_post(1, id(1, 2)), "the id names another slot");
        assert!(!o.may_post(1, SEND_BIT | 1), "a send's id");
        assert!(!o.may_post(4, id(1, 4)), "out of range");
        o.mark_posted(1, id(1, 1));
        assert!(!o.readable(1) && !o.may_post(1, id(2, 1)), "posted: neither read nor posted again");
        o.complete(id(0, 1));
        assert!(!o.readable(1), "a stale completion (older generation) changes nothing");
        o.complete(id(1, 1));
        assert!(o.readable(1), "its own completion returns it");
        o.mark_posted(2, id(3, 2));
        o.reset();
        assert!(o.readable(2), "a reset drops every posted receive");
    }

    #[test]
    fn send_buffers_are_free_once_a_later_send_completed() {
        let keep = Arc::new(());
        let mut o: Owned<Arc<()>> = Owned::new(0, 3);
        assert_eq!(o.may_send(0, 5), Err(EINVAL), "a receive's id");
        assert_eq!(o.may_send(3, SEND_BIT), Err(EINVAL), "out of range");
        for (b, seq) in [(0, 0), (1, 1), (2, 2)] {
            assert_eq!(o.may_send(b, SEND_BIT | seq), Ok(()));
            o.sent(b, SEND_BIT | seq, Arc::clone(&keep));
        }
        assert_eq!(o.may_send(1, SEND_BIT | 3), Err(EBUSY));
        assert_eq!(Arc::strong_count(&keep), 4, "each send keeps its handle");
        o.complete(SEND_BIT | 9);
        assert_eq!(o.in_flight.len(), 3, "a stale id changes nothing");
        o.complete(SEND_BIT | 1);
        assert_eq!((o.may_send(0, SEND_BIT), o.may_send(1, SEND_BIT)), (Ok(()), Ok(())));
        assert_eq!(o.may_send(2, SEND_BIT), Err(EBUSY), "sent after the completed one");
        assert_eq!(Arc::strong_count(&keep), 2, "completed sends release their handles");
        o.reset();
        assert_eq!((o.may_send(2, SEND_BIT), Arc::strong_count(&keep)), (Ok(()), 1));
    }

    #[test]
    fn regions_lay_receive_slots_then_send_buffers() {
        let r = Regions { recv_slots: 4, recv_size: 4160, send_buffers: 2, send_size: 4096 };
        assert_eq!(r.offsets(), Some((4 * 4160, 4 * 4160 + 2 * 4096)));
        let huge = Regions { recv_slots: u32::MAX, recv_size: usize::MAX / 2, ..r };
        assert_eq!(huge.offsets(), None);
    }
}
