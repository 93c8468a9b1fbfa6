//! An in-memory stand-in for a UD queue pair, for the unit tests of the `verbs` fabric's logic
//! only (it is compiled under `cfg(test)`, never into the engine). It is not a device and
//! proves nothing about one: what it gives the tests is a [`Nic`] that behaves like a UD queue
//! pair in the ways the logic depends on —
//!
//! * several NICs on one [`Wire`], each with a GID and a QP number; unicast reaches the QP an
//!   address handle and QP number name; multicast reaches every QP attached to the MGID,
//!   **the sender's own included** (as NICs loop multicast back to an attached sender);
//! * messages land in posted receive slots in posting order, each prefixed by a 40-byte GRH
//!   area; a message that finds no posted receive is dropped and counted at the wire, unseen by
//!   the receiver (UD has no RNR); the slots are sized by the real NIC's [`Layout`] (from the
//!   port's MTU, given a local `mtu` of the test's choice);
//! * a message longer than its slot, or an error the test injects, completes the receive with
//!   an error and puts the queue pair into the error state: every posted receive is flushed,
//!   nothing is received or sent until [`Nic::recover`], which resets it (the multicast
//!   attachments are lost with the reset, as on providers that do not keep them), posts every
//!   slot again and attaches the groups again — or fails, if the test says so;
//! * the kernel's attach semantics: attaching a QP twice to one MGID is one attachment, one
//!   detach removes it; the fake counts its groups per MGID with the real NIC's
//!   [`Attachments`];
//! * the same [`RecvSlots`], [`SendRing`] and [`Retired`] bookkeeping the real NIC uses; send
//!   completions only for signalled sends, which a test can hold back to fill the send queue;
//!   destroyed address handles are retired until the sends before them completed;
//! * a clock the test moves, loss the test chooses, raw messages the test injects, and joins,
//!   address handles, posts and recoveries the test makes fail.
use super::group::{self, JoinMode, JoinSpec, LinkLayer, RoceVersion};
use super::nic::{
    AhId, AttachKey, Attachments, Dest, Joined, McastId, Nic, NicStats, PortInfo, Received, SendError,
};
use super::slots::{Layout, RecvSlots, Retired, SendRing};
use super::wire::{Hello, GRH_LEN, HEADER_LEN};
use super::VerbsError;
use ringcast_proto::comm::ident::{group_ip, IpFamily};
use ringcast_proto::comm::GroupId;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A loss rule: `(sender QPN, receiver QPN, message)` → drop it.
type DropRule = Box<dyn FnMut(u32, u32, &[u8]) -> bool + Send>;

/// What arrives at a station.
enum Incoming {
    /// A message from QP `.0`.
    Message(u32, Vec<u8>),
    /// An error completion of the next posted receive (say, a protection error).
    Error,
    /// A completion naming a slot the NIC does not hold.
    Bogus,
}

struct Station {
    gid: [u8; 16],
    qpn: u32,
    alive: bool,
    /// The kernel's attachments of the QP: each MGID at most once.
    attached: Vec<[u8; 16]>,
    inbox: VecDeque<Incoming>,
    send_done: VecDeque<u64>,
}

impl Station {
    fn attach(&mut self, mgid: [u8; 16]) {
        if !self.attached.contains(&mgid) {
            self.attached.push(mgid);
        }
    }

    fn detach(&mut self, mgid: [u8; 16]) {
        if let Some(i) = self.attached.iter().position(|m| *m == mgid) {
            self.attached.swap_remove(i);
        }
    }
}

#[derive(Default)]
struct State {
    now: u64,
    stations: Vec<Station>,
    drop_rule: Option<DropRule>,
    hold_completions: bool,
    held: Vec<(usize, u64)>,
    fail_join: bool,
    fail_ah: bool,
    fail_post: bool,
    fail_recover: bool,
    mgid_override: Option<[u8; 16]>,
    join_sgid: Option<u8>,
    /// Messages put into an inbox / dropped by the rule / dropped for want of a posted receive.
    delivered: u64,
    dropped: u64,
    no_slot: u64,
    /// Messages that reached a queue pair in the error state.
    lost_down: u64,
}

/// The medium several fake NICs share.
#[derive(Clone, Default)]
pub struct Wire(Arc<Mutex<State>>);

impl Wire {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new wire at time 0.
    pub fn new() -> Wire {
        Wire::default()
    }

    /// A NIC on this wire: `slots` receives, `depth` send buffers, messages of at most
    /// `max_message` bytes (the port's MTU; the local `mtu` is the most that fits, see
    /// [`FakeNic::with_mtu`]), RoCE v2 with IPv4 groups, groups joined in `mode`.
    pub fn nic(&self, slots: u32, depth: u32, max_message: usize, mode: JoinMode) -> FakeNic {
        let mut st = self.lock();
        let idx = st.stations.len();
        let qpn = 0x100 + idx as u32 * 7;
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, idx as u8 + 1]);
        st.stations.push(Station {
            gid,
            qpn,
            alive: true,
            attached: Vec::new(),
            inbox: VecDeque::new(),
            send_done: VecDeque::new(),
        });
        let spec = JoinSpec {
            family: IpFamily::V4,
            link: LinkLayer::Ethernet,
            roce: RoceVersion::V2,
            pkey: group::DEFAULT_PKEY,
            scope: group::IPOIB_LINK_SCOPE,
        };
        drop(st);
        FakeNic {
            wire: self.clone(),
            idx,
            port: PortInfo { address: Hello { gid, qpn, lid: 0 }, gid_index: 0, max_message, spec, mode },
            slots: RecvSlots::new(slots),
            bufs: Vec::new(),
            posted: VecDeque::new(),
            cq: VecDeque::new(),
            ring: SendRing::new(depth, depth / 4),
            ahs: Vec::new(),
            retired: Retired::new(),
            groups: Vec::new(),
            attachments: Attachments::new(),
            failed: false,
            stats: NicStats::default(),
        }
        .with_mtu(max_message.saturating_sub(HEADER_LEN))
    }

    /// Moves the clock on.
    pub fn advance(&self, ns: u64) {
        self.lock().now += ns;
    }

    /// Drops the messages `rule` picks from now on (`None`: no loss).
    pub fn set_drop(&self, rule: Option<DropRule>) {
        self.lock().drop_rule = rule;
    }

    /// Holds send completions back (the send queue fills) or releases them.
    pub fn hold_completions(&self, hold: bool) {
        let mut st = self.lock();
        st.hold_completions = hold;
        if !hold {
            for (idx, wr) in std::mem::take(&mut st.held) {
                st.stations[idx].send_done.push_back(wr);
            }
        }
    }

    /// Makes joins, address handles, posts fail (or work again).
    pub fn fail(&self, join: bool, ah: bool, post: bool) {
        let mut st = self.lock();
        (st.fail_join, st.fail_ah, st.fail_post) = (join, ah, post);
    }

    /// Makes recoveries of a failed queue pair fail (or work again).
    pub fn fail_recovery(&self, fail: bool) {
        self.lock().fail_recover = fail;
    }

    /// Joins report this MGID instead of the predicted one.
    pub fn override_mgid(&self, mgid: Option<[u8; 16]>) {
        self.lock().mgid_override = mgid;
    }

    /// Joins report this source GID index (as rdmacm's reply does), in either mode.
    pub fn override_join_sgid(&self, index: Option<u8>) {
        self.lock().join_sgid = index;
    }

    fn push(&self, to: u32, what: Incoming) {
        let mut st = self.lock();
        if let Some(s) = st.stations.iter_mut().find(|s| s.qpn == to && s.alive) {
            s.inbox.push_back(what);
        }
    }

    /// Puts raw `bytes` (a frame without GRH) in the inbox of the QP `to`, as sent by `src_qp`.
    pub fn inject(&self, to: u32, src_qp: u32, bytes: &[u8]) {
        self.push(to, Incoming::Message(src_qp, bytes.to_vec()));
    }

    /// The next posted receive of QP `to` completes with an error (its queue pair goes to the
    /// error state).
    pub fn inject_error(&self, to: u32) {
        self.push(to, Incoming::Error);
    }

    /// QP `to`'s next completion names a slot it does not hold.
    pub fn inject_bogus_completion(&self, to: u32) {
        self.push(to, Incoming::Bogus);
    }

    /// Messages delivered to inboxes, dropped by the loss rule, dropped for want of a posted
    /// receive.
    pub fn counts(&self) -> (u64, u64, u64) {
        let st = self.lock();
        (st.delivered, st.dropped, st.no_slot)
    }

    /// Messages that reached a queue pair in the error state (and were lost).
    pub fn lost_down(&self) -> u64 {
        self.lock().lost_down
    }

    /// QPs attached to `mgid`.
    pub fn attached(&self, mgid: &[u8; 16]) -> usize {
        self.lock().stations.iter().filter(|s| s.alive && s.attached.contains(mgid)).count()
    }
}

/// A fake UD queue pair on a [`Wire`]; see the module doc.
pub struct FakeNic {
    wire: Wire,
    idx: usize,
    port: PortInfo,
    slots: RecvSlots,
    bufs: Vec<Vec<u8>>,
    /// Posted receives in posting order (the NIC fills them in that order).
    posted: VecDeque<(u32, u64)>,
    /// Receive completions not polled yet.
    cq: VecDeque<Received>,
    ring: SendRing,
    ahs: Vec<Option<Hello>>,
    /// Destroyed handles (their index) waiting for the sends before them.
    retired: Retired<usize>,
    groups: Vec<Option<AttachKey>>,
    attachments: Attachments<()>,
    failed: bool,
    stats: NicStats,
}

impl FakeNic {
    /// This NIC with a local `mtu` (the engine's): its receive slots are laid out as the real
    /// NIC's for it ([`Layout`]), and posted.
    pub fn with_mtu(mut self, mtu: usize) -> FakeNic {
        let n = self.slots.len();
        // NOTE(unwrap): tests use small sizes.
        let layout = Layout::new(n, self.ring.depth(), self.port.max_message, mtu).expect("layout");
        self.bufs = vec![vec![0; layout.recv_size]; n as usize];
        self.repost();
        self
    }

    /// Address handles alive and usable (retired ones not counted).
    pub fn live_ahs(&self) -> usize {
        self.ahs.iter().flatten().count()
    }

    /// Bytes of a receive slot.
    pub fn recv_size(&self) -> usize {
        self.bufs.first().map_or(0, Vec::len)
    }

    /// Groups joined.
    pub fn live_groups(&self) -> usize {
        self.groups.iter().flatten().count()
    }

    /// Messages that landed in this NIC's receive slots and were not polled yet.
    pub fn completions_waiting(&self) -> usize {
        self.cq.len()
    }

    /// The queue pair goes to the error state: every posted receive is flushed.
    fn fail_qp(&mut self) {
        if !self.failed {
            self.failed = true;
            self.stats.qp_failures += 1;
        }
        while let Some((slot, wr)) = self.posted.pop_front() {
            if self.slots.complete(wr).is_ok() {
                self.stats.rx_flushed += 1;
                self.slots.release(slot);
            }
        }
    }

    /// Fills posted receives from the inbox; takes send completions.
    fn land(&mut self) {
        let wire = self.wire.clone();
        let mut st = wire.lock();
        let st = &mut *st;
        while let Some(what) = st.stations[self.idx].inbox.pop_front() {
            if self.failed {
                st.lost_down += 1; // a QP in the error state takes nothing
                continue;
            }
            let msg = match what {
                Incoming::Bogus => {
                    self.cq.push_back(Received { slot: u32::MAX, len: GRH_LEN as u32, src_qp: 0 });
                    continue;
                }
                Incoming::Message(src_qp, msg) => Some((src_qp, msg)),
                Incoming::Error => None,
            };
            let Some((slot, wr)) = self.posted.pop_front() else {
                st.no_slot += 1;
                continue;
            };
            let buf = &mut self.bufs[slot as usize];
            let Some((src_qp, msg)) = msg.filter(|(_, m)| GRH_LEN + m.len() <= buf.len()) else {
                // An injected error, or a local length error (the message is longer than the
                // slot): the receive completes with an error, and the QP goes to the error
                // state.
                self.stats.rx_errors += 1;
                if self.slots.complete(wr).is_ok() {
                    self.slots.release(slot);
                }
                self.fail_qp();
                continue;
            };
            let len = GRH_LEN + msg.len();
            buf[..GRH_LEN].fill(0x6b);
            buf[GRH_LEN..len].copy_from_slice(&msg);
            if let Ok(slot) = self.slots.complete(wr) {
                self.cq.push_back(Received { slot, len: len as u32, src_qp });
            }
        }
        while let Some(wr) = st.stations[self.idx].send_done.pop_front() {
            let _ = self.ring.complete(wr);
        }
        self.retired.reap(&self.ring);
    }
}

impl Nic for FakeNic {
    fn port(&self) -> PortInfo {
        self.port
    }

    fn now(&self) -> u64 {
        self.wire.lock().now
    }

    fn join(&mut self, group: &GroupId) -> Result<Joined, VerbsError> {
        let mut st = self.wire.lock();
        if st.fail_join {
            return Err(VerbsError::Join {
                group: format!("{group:02x?}"),
                reason: "refused by the test".into(),
            });
        }
        let mgid = st.mgid_override.unwrap_or(match self.port.mode {
            JoinMode::Attach => group::attach_mgid(group, self.port.spec.family),
            JoinMode::Rdmacm => group::rdmacm_mgid(group_ip(group, self.port.spec.family), &self.port.spec),
        });
        let sgid_index = st.join_sgid.or(match self.port.mode {
            JoinMode::Rdmacm => Some(self.port.gid_index),
            JoinMode::Attach => None,
        });
        let key = (mgid, 0);
        let station = &mut st.stations[self.idx];
        self.attachments.acquire(key, || {
            station.attach(mgid);
            Ok::<(), VerbsError>(())
        })?;
        self.groups.push(Some(key));
        Ok(Joined { id: McastId(self.groups.len() as u32 - 1), mgid, mlid: 0, sgid_index })
    }

    fn leave(&mut self, id: McastId) {
        let Some(key) = self.groups.get_mut(id.0 as usize).and_then(Option::take) else { return };
        if self.attachments.release(key).is_some() {
            self.wire.lock().stations[self.idx].detach(key.0);
        }
    }

    fn create_ah(&mut self, peer: &Hello) -> Result<AhId, VerbsError> {
        if self.wire.lock().fail_ah {
            return Err(VerbsError::call("ibv_create_ah", 22));
        }
        self.ahs.push(Some(*peer));
        Ok(AhId(self.ahs.len() as u32 - 1))
    }

    fn destroy_ah(&mut self, ah: AhId) {
        if self.ahs.get_mut(ah.0 as usize).and_then(Option::take).is_some() {
            self.retired.retire(&mut self.ring, ah.0 as usize);
        }
    }

    fn send(&mut self, dest: Dest, header: &[u8], body: &[u8]) -> Result<(), SendError> {
        if self.failed {
            return Err(SendError::Down);
        }
        let Some(r) = self.ring.reserve() else { return Err(SendError::Full) };
        let len = header.len() + body.len();
        let target = match dest {
            Dest::Unicast { ah, qpn } => {
                self.ahs.get(ah.0 as usize).copied().flatten().map(|h| (Some((h.gid, qpn)), None))
            }
            Dest::Multicast(id) => self.groups.get(id.0 as usize).copied().flatten().map(|m| (None, Some(m))),
        };
        let Some((unicast, multicast)) = target.filter(|_| len <= self.port.max_message) else {
            self.ring.unreserve(r);
            return Err(SendError::Invalid);
        };
        let mut st = self.wire.lock();
        let st = &mut *st;
        if st.fail_post {
            self.ring.unreserve(r);
            self.stats.post_errors += 1;
            return Err(SendError::Post(12));
        }
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(header);
        msg.extend_from_slice(body);
        let from = self.port.address.qpn;
        for s in st.stations.iter_mut().filter(|s| s.alive) {
            let hit = match (unicast, multicast) {
                (Some((gid, qpn)), _) => s.gid == gid && s.qpn == qpn,
                (_, Some((m, _))) => s.attached.contains(&m),
                _ => false,
            };
            if !hit {
                continue;
            }
            if st.drop_rule.as_mut().is_some_and(|rule| rule(from, s.qpn, &msg)) {
                st.dropped += 1;
                continue;
            }
            st.delivered += 1;
            s.inbox.push_back(Incoming::Message(from, msg.clone()));
        }
        if r.signalled {
            if st.hold_completions {
                st.held.push((self.idx, r.wr_id));
            } else {
                st.stations[self.idx].send_done.push_back(r.wr_id);
            }
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Received]) -> usize {
        self.land();
        let mut n = 0;
        while n < out.len() {
            let Some(r) = self.cq.pop_front() else { break };
            out[n] = r;
            n += 1;
        }
        if !self.failed {
            self.slots.note_burst();
        }
        n
    }

    fn received(&self, slot: u32, len: u32) -> Option<&[u8]> {
        if !self.slots.is_held(slot) {
            return None;
        }
        self.bufs.get(slot as usize)?.get(..len as usize)
    }

    fn release(&mut self, slot: u32) {
        self.slots.release(slot);
    }

    fn repost(&mut self) {
        if self.failed {
            return;
        }
        while let Some(p) = self.slots.next_to_post() {
            self.posted.push_back(p);
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
        let wire = self.wire.clone();
        let mut st = wire.lock();
        if st.fail_recover {
            return Err(VerbsError::call("ibv_modify_qp(RESET)", 5));
        }
        // The reset drops every work request, and (on some providers) the attachments.
        let station = &mut st.stations[self.idx];
        station.attached.clear();
        self.slots.unpost_all();
        self.posted.clear();
        self.ring.abandon_in_flight();
        self.retired.reap(&self.ring);
        self.failed = false;
        self.repost();
        for (key, ()) in self.attachments.iter() {
            station.attach(key.0);
        }
        Ok(())
    }
}

impl Drop for FakeNic {
    /// The QP is gone: it receives nothing more (like a process that exited).
    fn drop(&mut self) {
        let mut st = self.wire.lock();
        if let Some(s) = st.stations.get_mut(self.idx) {
            s.alive = false;
            s.attached.clear();
            s.inbox.clear();
        }
    }
}
