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
//!   the receiver (UD has no RNR);
//! * the same [`RecvSlots`] and [`SendRing`] bookkeeping the real NIC uses; send completions
//!   only for signalled sends, which a test can hold back to fill the send queue;
//! * a clock the test moves, loss the test chooses, raw messages the test injects, and joins,
//!   address handles and posts the test makes fail.
use super::group::{self, Family, JoinMode, JoinSpec, LinkLayer, RoceVersion};
use super::nic::{AhId, Dest, Joined, McastId, Nic, NicStats, PortInfo, Received, SendError};
use super::slots::{RecvSlots, SendRing};
use super::wire::{Hello, GRH_LEN};
use super::VerbsError;
use crate::proto::comm::GroupId;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A loss rule: `(sender QPN, receiver QPN, message)` → drop it.
type DropRule = Box<dyn FnMut(u32, u32, &[u8]) -> bool + Send>;

struct Station {
    gid: [u8; 16],
    qpn: u32,
    alive: bool,
    attached: Vec<[u8; 16]>,
    inbox: VecDeque<(u32, Vec<u8>)>,
    send_done: VecDeque<u64>,
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
    mgid_override: Option<[u8; 16]>,
    /// Messages put into an inbox / dropped by the rule / dropped for want of a posted receive.
    delivered: u64,
    dropped: u64,
    no_slot: u64,
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
    /// `max_message` bytes, RoCE v2 with IPv4 groups, groups joined in `mode`.
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
            family: Family::V4,
            link: LinkLayer::Ethernet,
            roce: RoceVersion::V2,
            pkey: group::DEFAULT_PKEY,
            scope: group::IPOIB_LINK_SCOPE,
        };
        FakeNic {
            wire: self.clone(),
            idx,
            port: PortInfo { address: Hello { gid, qpn, lid: 0 }, max_message, spec, mode },
            slots: RecvSlots::new(slots),
            bufs: vec![vec![0; GRH_LEN + max_message]; slots as usize],
            posted: VecDeque::new(),
            cq: VecDeque::new(),
            ring: SendRing::new(depth, depth / 4),
            ahs: Vec::new(),
            groups: Vec::new(),
            stats: NicStats::default(),
        }
        .posted_all()
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

    /// Joins report this MGID instead of the predicted one.
    pub fn override_mgid(&self, mgid: Option<[u8; 16]>) {
        self.lock().mgid_override = mgid;
    }

    /// Puts raw `bytes` (a frame without GRH) in the inbox of the QP `to`, as sent by `src_qp`.
    pub fn inject(&self, to: u32, src_qp: u32, bytes: &[u8]) {
        let mut st = self.lock();
        if let Some(s) = st.stations.iter_mut().find(|s| s.qpn == to && s.alive) {
            s.inbox.push_back((src_qp, bytes.to_vec()));
        }
    }

    /// Messages delivered to inboxes, dropped by the loss rule, dropped for want of a posted
    /// receive.
    pub fn counts(&self) -> (u64, u64, u64) {
        let st = self.lock();
        (st.delivered, st.dropped, st.no_slot)
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
    groups: Vec<Option<[u8; 16]>>,
    stats: NicStats,
}

impl FakeNic {
    fn posted_all(mut self) -> FakeNic {
        self.repost();
        self
    }

    /// Address handles alive.
    pub fn live_ahs(&self) -> usize {
        self.ahs.iter().flatten().count()
    }

    /// Groups joined.
    pub fn live_groups(&self) -> usize {
        self.groups.iter().flatten().count()
    }

    /// Messages that landed in this NIC's receive slots and were not polled yet.
    pub fn completions_waiting(&self) -> usize {
        self.cq.len()
    }

    /// Fills posted receives from the inbox; takes send completions.
    fn land(&mut self) {
        let wire = self.wire.clone();
        let mut st = wire.lock();
        let st = &mut *st;
        let station = &mut st.stations[self.idx];
        while let Some((src_qp, msg)) = station.inbox.pop_front() {
            let Some((slot, wr)) = self.posted.pop_front() else {
                st.no_slot += 1;
                continue;
            };
            let buf = &mut self.bufs[slot as usize];
            let len = GRH_LEN + msg.len();
            if len > buf.len() {
                // A real NIC completes such a receive with a local length error.
                self.stats.rx_errors += 1;
                let _ = self.slots.complete(wr);
                self.slots.release(slot);
                continue;
            }
            buf[..GRH_LEN].fill(0x6b);
            buf[GRH_LEN..len].copy_from_slice(&msg);
            if let Ok(slot) = self.slots.complete(wr) {
                self.cq.push_back(Received { slot, len: len as u32, src_qp });
            }
        }
        while let Some(wr) = station.send_done.pop_front() {
            let _ = self.ring.complete(wr);
        }
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
            JoinMode::Rdmacm => {
                group::rdmacm_mgid(group::join_ip(group, self.port.spec.family), &self.port.spec)
            }
        });
        st.stations[self.idx].attached.push(mgid);
        self.groups.push(Some(mgid));
        Ok(Joined { id: McastId(self.groups.len() as u32 - 1), mgid, mlid: 0 })
    }

    fn leave(&mut self, id: McastId) {
        let Some(mgid) = self.groups.get_mut(id.0 as usize).and_then(Option::take) else { return };
        let mut st = self.wire.lock();
        let attached = &mut st.stations[self.idx].attached;
        if let Some(i) = attached.iter().position(|m| *m == mgid) {
            attached.swap_remove(i);
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
        if let Some(a) = self.ahs.get_mut(ah.0 as usize) {
            *a = None;
        }
    }

    fn send(&mut self, dest: Dest, header: &[u8], body: &[u8]) -> Result<(), SendError> {
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
                (_, Some(m)) => s.attached.contains(&m),
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
            s.inbox.push_back((from, msg.clone()));
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
        self.slots.note_burst();
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
        while let Some(p) = self.slots.next_to_post() {
            self.posted.push_back(p);
        }
    }

    fn stats(&self) -> NicStats {
        NicStats { recv: self.slots.stats(), send: self.ring.stats(), ..self.stats }
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
