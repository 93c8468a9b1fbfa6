//! The real NIC of the `verbs` fabric ([`UdNic`], implementing [`Nic`]): one unreliable-datagram
//! queue pair on an RDMA port, its completion queue, one registered memory region holding the
//! `n` receive slots and the send buffers, address handles, and multicast groups joined through
//! rdmacm or attached directly. Runs only where `ibv_get_device_list` finds a device.
//!
//! Safe code: the device is reached through the `ringcast-verbs` crate, whose
//! [`ringcast_verbs::UdQueue`] owns the queue pair and its region and keeps its own account of
//! which bytes the device may touch. This module decides the policy — which slot to post, which
//! buffer serves which send, when to signal, when to recover — with [`super::slots`].
//!
//! # Memory
//!
//! One region laid out by [`Layout`], page-aligned: receive slot `i` at `i × R`, where `R` is
//! the GRH area plus the port's active MTU, rounded up to 64 (UD delivers no more, so a member
//! whose `mtu` is larger than this one's never overflows a slot: its frames are rejected by the
//! parser); send buffer `j` after all receive slots at `j × S`, where `S` is the header plus
//! this member's `mtu`, rounded up to 64. The NIC writes a receive slot while it is posted; [`RecvSlots`] says
//! which are, and [`Nic::received`] hands out a slot's bytes only while it is held (and
//! [`ringcast_verbs::UdQueue::received`] only while it is not posted). A send
//! buffer is written only when [`SendRing::reserve`] hands it out, i.e. when the send that used
//! it last has completed (or was dropped by a reset).
//!
//! # Address handles
//!
//! A send names an address handle, which must live until the send completes. Handles destroyed
//! while sends may be in flight (a member restarted, a group was left) are retired
//! ([`Retired`]): kept until every send posted before has completed, the ring's next send being
//! signalled so that this happens at the next send even when the sends in flight were not.
//!
//! # Multicast attachments
//!
//! Counted by (MGID, MLID) ([`Attachments`]): the kernel attaches a QP to an MGID once however
//! often it is asked, and one detach removes it, so groups whose addresses map to one MGID
//! share one attachment, detached by the last leave. Each group keeps its own rdmacm join and
//! multicast address handle.
//!
//! # Errors on the data path
//!
//! Nothing on the data path fails loudly: a refused post, a completion with an error status, a
//! failed `ibv_poll_cq` are counted ([`NicStats`]), and the first error completion is kept in
//! words ([`UdNic::first_completion_error`]). An error completion of a live work request — a
//! flush too: the device flushes only in the error state — marks the queue pair failed
//! ([`Nic::failed`]): no receive is posted again (they would only be flushed), sends are refused
//! ([`SendError::Down`]), and dry polls are not counted. [`Nic::recover`] (which the fabric calls
//! at most once per interval) resets it: RESET drops every work request, the slots and the send
//! ring are told so, INIT (Q_Key, port, P_Key index 0), every slot posted, RTR, RTS, and every
//! attachment made again (some providers drop them with the reset). Completions of work
//! requests from before the reset match no slot or send any more and are only counted as stale.
//!
//! # Drop order
//!
//! [`UdNic`]'s `Drop` detaches from every group, leaves them (rdmacm), then destroys the QP (its
//! outstanding work requests die with it). If that fails, the QP may still send with the
//! address handles and receive into the memory: the handles are leaked, and so (by
//! [`ringcast_verbs::device`]'s rule) are the memory region, the CQ and the PD the QP holds, and
//! the handles of the sends in flight. Then the fields drop: every address handle, and — through
//! the `Arc` parents in [`ringcast_verbs::device`] — the CQ, the memory region, the protection
//! domain, the rdmacm event channel, the device context.
use super::group::{self, JoinMode, JoinSpec, LinkLayer, RoceVersion};
use super::nic::{
    AhId, AttachKey, Attachments, Dest, Joined, McastId, Nic, NicStats, PortInfo, Received, SendError,
};
use super::slots::{Layout, RecvSlots, Retired, SendRing, SEND_BIT};
use super::wire::Hello;
use super::{VerbsError, VerbsOptions, POLL_BURST};
use ringcast_proto::comm::ident::{group_ip, IpFamily};
use ringcast_verbs::{
    leak_all, sys, wc_status_str, Ah, Attachment, Context, Cq, EventChannel, McastJoin, Pd, QpSpec, Regions,
    SendRequest, UdQueue,
};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

// The device's rule for work request ids is the slots' own.
const _: () = assert!(SEND_BIT == ringcast_verbs::SEND_BIT);
// `group::roce_version` maps `enum ibv_gid_type` by value.
const _: () =
    assert!(sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V1.0 == 1 && sys::ibv_gid_type::IBV_GID_TYPE_ROCE_V2.0 == 2);

/// The Q_Key of every QP and group of the fabric: rdmacm's for UDP port-space groups (a QP
/// receives only messages carrying its Q_Key, and rdmacm's groups are created with this one).
pub const QKEY: u32 = sys::RDMA_UDP_QKEY;
/// The QP number that addresses a multicast group.
const MULTICAST_QPN: u32 = 0x00ff_ffff;
/// Inline data asked for at QP creation (small frames — HELLOs, sync messages — skip the DMA
/// read of their send buffer); the QP is created without inline data if the provider refuses.
const INLINE_WANTED: u32 = 128;
/// Receives posted per `ibv_post_recv` call.
const RECV_BATCH: usize = 32;
/// Hop limit of unicast: RoCE v2 may route between subnets.
const UNICAST_HOP_LIMIT: u8 = 64;
/// Hop limit of attach-mode multicast: the link only, like the `udp` fabric's.
const MULTICAST_HOP_LIMIT: u8 = 1;

/// A joined group: its attachment's key (the attachment itself is shared, in
/// [`UdNic::attachments`]) and its rdmacm join unless in attach mode.
struct Group {
    key: AttachKey,
    _join: Option<McastJoin>,
}

/// The UD queue pair and everything it uses; see the module doc.
pub struct UdNic {
    // Detached first, then left (see `Drop`).
    attachments: Attachments<Attachment>,
    groups: Vec<Option<Group>>,
    queue: UdQueue,
    mcast_ahs: Vec<Option<Arc<Ah>>>,
    ahs: Vec<Option<Arc<Ah>>>,
    retired: Retired<Arc<Ah>>,
    pd: Arc<Pd>,
    channel: Option<Arc<EventChannel>>,
    ctx: Arc<Context>,
    info: PortInfo,
    port: u8,
    gid_index: u8,
    bind: Option<IpAddr>,
    join_timeout: Duration,
    slots: RecvSlots,
    ring: SendRing,
    layout: Layout,
    wcs: Vec<sys::ibv_wc>,
    stats: NicStats,
    /// An error completion came back and no recovery succeeded since.
    failed: bool,
    other_events: u64,
    /// The first completion with an error status, described (bring-up needs to know why).
    first_error: Option<String>,
    start: Instant,
}

static_assertions::assert_impl_all!(UdNic: Send);

impl std::fmt::Debug for UdNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdNic")
            .field("device", &self.ctx.name())
            .field("port", &self.port)
            .field("qpn", &self.info.address.qpn)
            .field("gid", &group::gid_str(&self.info.address.gid))
            .finish()
    }
}

impl UdNic {
    /// Opens the device, port and GID `opts` name, creates the QP with its memory, posts every
    /// receive and brings the QP to RTS.
    pub fn open(opts: &VerbsOptions) -> Result<UdNic, VerbsError> {
        let ctx = Context::open(&opts.device)?;
        let pa = ctx.query_port(opts.port)?;
        let dev = ctx.name().to_string();
        if pa.state != sys::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::Invalid(format!(
                "port {} of {dev} is not active (state {}): is the link up (and, on InfiniBand, the subnet manager running)?",
                opts.port, pa.state.0
            )));
        }
        let link = match u32::from(pa.link_layer) {
            sys::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            sys::IBV_LINK_LAYER_INFINIBAND | sys::IBV_LINK_LAYER_UNSPECIFIED => LinkLayer::Infiniband,
            other => {
                return Err(VerbsError::Invalid(format!("port {} of {dev}: link layer {other}", opts.port)))
            }
        };
        if u32::from(opts.gid_index) >= pa.gid_table {
            return Err(VerbsError::Invalid(format!(
                "verbs_gid_index {} outside the GID table of port {} of {dev} ({} entries)",
                opts.gid_index, opts.port, pa.gid_table
            )));
        }
        let gid = ctx.query_gid(opts.port, opts.gid_index)?;
        if gid == [0; 16] {
            return Err(VerbsError::Invalid(format!(
                "GID {} of port {} of {dev} is empty (show_gids lists the valid ones: verbs_gid_index)",
                opts.gid_index, opts.port
            )));
        }
        let bind = opts.addr.or_else(|| group::gid_ip(&gid));
        let family = match bind {
            Some(ip) => IpFamily::of(ip),
            None if std::net::Ipv6Addr::from(gid).to_ipv4_mapped().is_some() => IpFamily::V4,
            None => IpFamily::V6,
        };
        match (opts.join, link, bind) {
            (JoinMode::Rdmacm, _, None) => {
                return Err(VerbsError::Invalid(format!(
                    "rdmacm joins need an IP address of {dev}'s interface (IPoIB, or the RoCE netdev) in verbs_addr; GID {} is none",
                    group::gid_str(&gid)
                )))
            }
            (JoinMode::Attach, LinkLayer::Infiniband, _) => {
                return Err(VerbsError::Invalid(
                    "verbs_join=attach needs a RoCE port: InfiniBand routes a multicast group only after an SA join (verbs_join=rdmacm)".into(),
                ))
            }
            _ => {}
        }
        let caps = ctx.query_device()?;
        let (slots, depth) = (opts.recv_slots, opts.send_depth);
        if slots > caps.max_qp_wr || depth > caps.max_qp_wr || slots + depth > caps.max_cqe {
            return Err(VerbsError::Invalid(format!(
                "{dev} takes at most {} work requests per queue and {} completions per CQ; verbs_recv_slots {slots} and verbs_send_depth {depth} need more",
                caps.max_qp_wr, caps.max_cqe
            )));
        }
        // Receive slots for the port's largest message (what any member may send), send buffers
        // for this member's own frames.
        let layout = Layout::new(slots, depth, pa.mtu, opts.mtu).ok_or_else(|| {
            VerbsError::Invalid(format!("{slots} receive slots of {} bytes do not fit memory", pa.mtu))
        })?;
        // The GID's type (RoCE v1 or v2) decides the MGID rdma_cm predicts for an IPv4 group.
        let roce = match link {
            LinkLayer::Ethernet => ctx
                .query_gid_type(opts.port, opts.gid_index)
                .ok()
                .and_then(group::roce_version)
                .unwrap_or(RoceVersion::V2),
            LinkLayer::Infiniband => RoceVersion::V2,
        };
        let pd = Pd::new(Arc::clone(&ctx))?;
        let cq = Cq::new(Arc::clone(&ctx), slots + depth)?;
        let regions = Regions {
            recv_slots: slots,
            recv_size: layout.recv_size,
            send_buffers: depth,
            send_size: layout.send_size,
        };
        let qp_spec = QpSpec { send_wr: depth, recv_wr: slots, inline: INLINE_WANTED };
        let mut queue = UdQueue::new(&pd, cq, regions, qp_spec)?;
        queue.to_init(opts.port, QKEY)?;
        let qp = Arc::clone(queue.qp());
        let channel = match opts.join {
            JoinMode::Rdmacm => Some(EventChannel::new()?),
            JoinMode::Attach => None,
        };
        let info = PortInfo {
            address: Hello {
                gid,
                qpn: qp.qpn(),
                lid: if link == LinkLayer::Infiniband { pa.lid } else { 0 },
            },
            gid_index: opts.gid_index,
            max_message: pa.mtu,
            spec: JoinSpec { family, link, roce, pkey: group::DEFAULT_PKEY, scope: group::IPOIB_LINK_SCOPE },
            mode: opts.join,
        };
        let mut nic = UdNic {
            attachments: Attachments::new(),
            groups: Vec::new(),
            queue,
            mcast_ahs: Vec::new(),
            ahs: Vec::new(),
            retired: Retired::new(),
            pd,
            channel,
            ctx,
            info,
            port: opts.port,
            gid_index: opts.gid_index,
            bind,
            join_timeout: Duration::from_millis(u64::from(opts.join_timeout_ms)),
            slots: RecvSlots::new(slots),
            ring: SendRing::new(depth, depth / 4),
            layout,
            wcs: vec![sys::ibv_wc::default(); POLL_BURST],
            stats: NicStats::default(),
            failed: false,
            other_events: 0,
            first_error: None,
            start: Instant::now(),
        };
        nic.post_queued();
        if nic.slots.posted() == 0 {
            return Err(VerbsError::Invalid(format!("{dev} took none of the {slots} receives")));
        }
        nic.queue.to_rts()?;
        Ok(nic)
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        self.ctx.name()
    }

    /// rdmacm events of other groups read while joining (errors of earlier groups).
    pub fn other_cm_events(&self) -> u64 {
        self.other_events
    }

    /// The first completion that came back with an error status: its work request's kind, the
    /// status's message and the vendor error.
    pub fn first_completion_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    /// Address attributes for `dgid`/`dlid` from this port and GID.
    fn ah_attr(&self, dgid: [u8; 16], dlid: u16, hop_limit: u8) -> sys::ibv_ah_attr {
        sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: dgid },
                flow_label: 0,
                sgid_index: self.gid_index,
                hop_limit,
                traffic_class: 0,
            },
            dlid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: self.port,
        }
    }

    /// Keeps `ah` until every send posted so far has completed (see [`Retired`]).
    fn retire(&mut self, ah: Arc<Ah>) {
        self.retired.retire(&mut self.ring, ah);
    }

    /// Destroys the retired handles no send in flight can name any more.
    fn reap(&mut self) {
        self.retired.reap(&self.ring);
    }

    /// An error completion came back: the queue pair is in the error state.
    fn fail(&mut self) {
        if !self.failed {
            self.failed = true;
            self.stats.qp_failures += 1;
        }
    }

    /// Posts the queued receive slots, in chains of [`RECV_BATCH`].
    fn post_queued(&mut self) {
        loop {
            let mut batch = [(0u32, 0u64); RECV_BATCH];
            let mut n = 0;
            while n < RECV_BATCH {
                let Some(next) = self.slots.next_to_post() else { break };
                batch[n] = next;
                n += 1;
            }
            if n == 0 {
                return;
            }
            match self.queue.post_recv(&batch[..n]) {
                Ok(()) if n < RECV_BATCH => return,
                Ok(()) => {}
                Err(e) => {
                    // Entries from `e.posted` on were not posted (if the provider names none
                    // of ours, every one is taken as posted: a slot may be lost, but never
                    // posted twice).
                    for &(slot, _) in &batch[e.posted.min(n)..n] {
                        self.slots.post_failed(slot);
                    }
                    return;
                }
            }
        }
    }

    /// The steps of [`Nic::recover`]; the queue pair stays failed if one fails.
    fn reset_and_restart(&mut self) -> Result<(), VerbsError> {
        self.queue.reset()?;
        // The reset dropped every work request: no receive is posted, no send in flight, so no
        // retired handle is named by one any more.
        self.slots.unpost_all();
        self.ring.abandon_in_flight();
        self.reap();
        self.queue.to_init(self.port, QKEY)?;
        self.post_queued();
        if self.slots.posted() == 0 {
            return Err(VerbsError::Invalid(format!(
                "{} took none of the {} receives after a reset",
                self.ctx.name(),
                self.slots.len()
            )));
        }
        self.queue.to_rts()?;
        for (_, a) in self.attachments.iter() {
            a.reattach()?;
        }
        Ok(())
    }

    fn free_index<T>(table: &mut Vec<Option<T>>) -> usize {
        match table.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                table.push(None);
                table.len() - 1
            }
        }
    }
}

impl Nic for UdNic {
    fn port(&self) -> PortInfo {
        self.info
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn join(&mut self, group_id: &ringcast_proto::comm::GroupId) -> Result<Joined, VerbsError> {
        let ip = group_ip(group_id, self.info.spec.family);
        let (group, ah, sgid_index) = match self.info.mode {
            JoinMode::Rdmacm => {
                let (Some(channel), Some(bind)) = (self.channel.as_ref(), self.bind) else {
                    return Err(VerbsError::Invalid("rdmacm joins need verbs_addr".into()));
                };
                let join = McastJoin::join(channel, bind, ip, self.join_timeout, &mut self.other_events)?;
                if join.device != self.ctx.name() || join.port != self.port {
                    return Err(VerbsError::Invalid(format!(
                        "verbs_addr {bind} is on {} port {}, but the fabric uses {} port {} (verbs_device, verbs_port)",
                        join.device,
                        join.port,
                        self.ctx.name(),
                        self.port
                    )));
                }
                if join.reply.qkey != QKEY {
                    return Err(VerbsError::Invalid(format!(
                        "group {ip} has Q_Key {:#x}, not rdmacm's {QKEY:#x}",
                        join.reply.qkey
                    )));
                }
                let attr = join.reply.ah_attr;
                let mgid = join.reply.mgid();
                let ah = Ah::new(Arc::clone(&self.pd), &attr)?;
                let sgid = Some(attr.grh.sgid_index);
                (Group { key: (mgid, attr.dlid), _join: Some(join) }, ah, sgid)
            }
            JoinMode::Attach => {
                let mgid = group::attach_mgid(group_id, self.info.spec.family);
                let ah = Ah::new(Arc::clone(&self.pd), &self.ah_attr(mgid, 0, MULTICAST_HOP_LIMIT))?;
                (Group { key: (mgid, 0), _join: None }, ah, None)
            }
        };
        let (mgid, mlid) = group.key;
        let qp = self.queue.qp();
        // A group whose MGID another joined group has already shares its attachment.
        self.attachments.acquire(group.key, || Attachment::new(Arc::clone(qp), mgid, mlid))?;
        let i = Self::free_index(&mut self.groups);
        self.groups[i] = Some(group);
        if self.mcast_ahs.len() <= i {
            self.mcast_ahs.resize_with(i + 1, || None);
        }
        self.mcast_ahs[i] = Some(ah);
        Ok(Joined { id: McastId(i as u32), mgid, mlid, sgid_index })
    }

    fn leave(&mut self, id: McastId) {
        let i = id.0 as usize;
        // Detached (if no other group shares the attachment) and left at once; the handle waits
        // for the sends that may still name it.
        if let Some(group) = self.groups.get_mut(i).and_then(Option::take) {
            drop(self.attachments.release(group.key));
            drop(group);
        }
        if let Some(ah) = self.mcast_ahs.get_mut(i).and_then(Option::take) {
            self.retire(ah);
        }
    }

    fn create_ah(&mut self, peer: &Hello) -> Result<AhId, VerbsError> {
        let ah = Ah::new(Arc::clone(&self.pd), &self.ah_attr(peer.gid, peer.lid, UNICAST_HOP_LIMIT))?;
        let i = Self::free_index(&mut self.ahs);
        self.ahs[i] = Some(ah);
        Ok(AhId(i as u32))
    }

    fn destroy_ah(&mut self, ah: AhId) {
        if let Some(ah) = self.ahs.get_mut(ah.0 as usize).and_then(Option::take) {
            self.retire(ah);
        }
    }

    fn send(&mut self, dest: Dest, header: &[u8], body: &[u8]) -> Result<(), SendError> {
        if self.failed {
            return Err(SendError::Down);
        }
        let len = header.len() + body.len();
        if len > self.layout.send_size || len > self.info.max_message {
            return Err(SendError::Invalid);
        }
        let (ah, qpn) = match dest {
            Dest::Unicast { ah, qpn } => (self.ahs.get(ah.0 as usize), qpn),
            Dest::Multicast(id) => (self.mcast_ahs.get(id.0 as usize), MULTICAST_QPN),
        };
        let Some(ah) = ah.and_then(Option::as_ref) else { return Err(SendError::Invalid) };
        let Some(r) = self.ring.reserve() else { return Err(SendError::Full) };
        let req = SendRequest {
            buffer: r.slot,
            wr_id: r.wr_id,
            ah,
            remote_qpn: qpn,
            remote_qkey: QKEY,
            signalled: r.signalled,
            header,
            body,
        };
        match self.queue.send(req) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.ring.unreserve(r);
                self.stats.post_errors += 1;
                Err(SendError::Post(e))
            }
        }
    }

    fn poll(&mut self, out: &mut [Received]) -> usize {
        let mut filled = 0;
        while filled < out.len() {
            let want = (out.len() - filled).min(POLL_BURST);
            let got = match self.queue.poll(&mut self.wcs[..want]) {
                Ok(n) => n,
                Err(_) => {
                    self.stats.cq_errors += 1;
                    break;
                }
            };
            for i in 0..got {
                let wc = self.wcs[i];
                let ok = wc.status == sys::ibv_wc_status::IBV_WC_SUCCESS;
                let flush = wc.status == sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR;
                if !ok && self.first_error.is_none() {
                    let kind = if wc.wr_id & SEND_BIT != 0 { "send" } else { "receive" };
                    self.first_error = Some(format!(
                        "{kind}: {} (vendor error {:#x})",
                        wc_status_str(wc.status),
                        wc.vendor_err
                    ));
                }
                if wc.wr_id & SEND_BIT != 0 {
                    // A stale id (a send from before a reset) is counted by the ring.
                    if self.ring.complete(wc.wr_id).is_ok() && !ok {
                        if flush {
                            self.stats.tx_flushed += 1;
                        } else {
                            self.stats.tx_errors += 1;
                        }
                        self.fail();
                    }
                    continue;
                }
                match self.slots.complete(wc.wr_id) {
                    Err(_) => {} // counted as stale by the slots (flushes from before a reset too)
                    Ok(slot) if ok && (wc.byte_len as usize) <= self.layout.recv_size => {
                        out[filled] = Received { slot, len: wc.byte_len, src_qp: wc.src_qp & MULTICAST_QPN };
                        filled += 1;
                    }
                    Ok(slot) => {
                        if flush {
                            self.stats.rx_flushed += 1;
                        } else {
                            self.stats.rx_errors += 1;
                        }
                        self.slots.release(slot);
                        if !ok {
                            self.fail();
                        }
                    }
                }
            }
            if got < want {
                break;
            }
        }
        if !self.failed {
            self.slots.note_burst();
        }
        self.reap();
        filled
    }

    fn received(&self, slot: u32, len: u32) -> Option<&[u8]> {
        if !self.slots.is_held(slot) || len as usize > self.layout.recv_size {
            return None;
        }
        // A held slot is not posted: the queue lends its bytes (written by the NIC before its
        // completion was polled) until it is posted again, which takes `&mut self`.
        self.queue.received(slot, len as usize)
    }

    fn release(&mut self, slot: u32) {
        self.slots.release(slot);
    }

    fn repost(&mut self) {
        // A failed queue pair would only flush them: they wait for the recovery.
        if !self.failed {
            self.post_queued();
        }
    }

    fn stats(&self) -> NicStats {
        NicStats {
            recv: self.slots.stats(),
            send: self.ring.stats(),
            retired_now: self.retired.len() as u32,
            ..self.stats
        }
    }

    fn failed(&self) -> bool {
        self.failed
    }

    fn recover(&mut self) -> Result<(), VerbsError> {
        if !self.failed {
            return Ok(());
        }
        self.reset_and_restart()?;
        self.failed = false;
        Ok(())
    }
}

impl Drop for UdNic {
    fn drop(&mut self) {
        // Detached from every group (each attachment once), then left.
        self.attachments.clear();
        self.groups.clear();
        // Then the QP, before the address handles its sends may name. It can be destroyed only
        // if no attachment holds it any more (all were just dropped).
        let destroyed = self.queue.destroy();
        if !destroyed {
            // The QP is still there (its destroy failed, or someone still holds it): its posted
            // sends may name any of these handles, so none is destroyed.
            leak_all(
                std::mem::take(&mut self.ahs)
                    .into_iter()
                    .chain(std::mem::take(&mut self.mcast_ahs))
                    .flatten(),
                "address handles",
            );
            leak_all(self.retired.take_all(), "retired address handles");
        }
    }
}
