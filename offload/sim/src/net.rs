//! The simulated network both worlds share: the discrete-event queue in virtual time, the
//! [`Fabric`](super::fabric) fault profile, each node's `RINGCAST_FAULT_*` injector, the
//! multicast groups, and the optional LogGP performance model. [`super::world`] puts one
//! protocol on each node, [`super::cluster`] one whole engine; both send through [`Net::send`]
//! and [`Net::multicast`] and take their events from [`Net::pop`].
use super::fabric::{Channel, Fate, Faults, Probe};
use super::keyheap::{self, KeyHeap};
use ringcast_proto::comm::GroupId;
use ringcast_proto::comm::Layout;
use ringcast_proto::fault::{Dir, FaultConfig, FaultInjector, Verdict};
use ringcast_proto::model::FabricModel;
use ringcast_proto::rng::SimRng;
use ringcast_proto::schedule::bcast::{rx_lane, tx_lane, LANE_ANY};
use ringcast_proto::Nanos;
use std::collections::HashMap;
use std::rc::Rc;

/// One event.
#[derive(Debug)]
pub(crate) enum Ev {
    /// A datagram reaches `to`'s NIC (`admitted`: its receive costs are already charged).
    Deliver {
        to: u32,
        from: u32,
        lane: u8,
        admitted: bool,
        frame: Rc<[u8]>,
    },
    Timer {
        node: u32,
        at: Nanos,
    },
    Wake {
        node: u32,
    },
    /// A DMA job an engine handed its driver falls due (late DMA: [`super::cluster`]).
    Job {
        node: u32,
        job: ringcast_proto::engine::JobId,
    },
}

/// The event queue, ordered by time then insertion: the heap holds only each event's key
/// (time, insertion number and slot: 16 bytes) and the events wait in slots beside it. Popping a
/// heap moves its entries a level at a time; with the events themselves in it (48 bytes each)
/// that was a twentieth of a DST sweep (docs/protocol.md, "DST speed"). The heap is 4-ary
/// ([`KeyHeap`]).
#[derive(Default)]
pub(crate) struct Queue {
    heap: KeyHeap,
    slots: Vec<Option<Ev>>,
    free: Vec<u32>,
}

impl Queue {
    fn push(&mut self, at: Nanos, seq: u64, ev: Ev) {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(ev);
                i
            }
            None => {
                self.slots.push(Some(ev));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap.push(keyheap::key(at, seq, slot));
    }

    fn pop(&mut self) -> Option<(Nanos, Ev)> {
        let key = self.heap.pop()?;
        let (at, slot) = (key.0, keyheap::slot(key));
        self.free.push(slot);
        // Every key in the heap names a filled slot (`push`), emptied only here.
        self.slots.get_mut(slot as usize).and_then(Option::take).map(|ev| (at, ev))
    }
}

/// The performance model's state: where each node sits and when each resource is next free.
pub(crate) struct Perf {
    fabric: FabricModel,
    layout: Layout,
    ranks: u32,
    /// Per rank: its engine's CPU (the `o` of every datagram it sends or receives).
    cpu_free: Vec<Nanos>,
    /// Per machine node and lane: sending and receiving side of the NIC.
    tx_free: Vec<Nanos>,
    rx_free: Vec<Nanos>,
    /// Per ordered pair of sites: the WAN pipe.
    wan_free: Vec<Nanos>,
    sites: u32,
}

impl Perf {
    fn lanes(&self) -> usize {
        self.fabric.lanes.max(1) as usize
    }
}

/// Everything except the nodes, so a node's protocol can borrow it as its `Env`.
pub(crate) struct Net {
    pub(crate) now: Nanos,
    pub(crate) seq: u64,
    pub(crate) queue: Queue,
    pub(crate) perf: Option<Perf>,
    pub(crate) faults: Faults,
    pub(crate) chan: Channel,
    /// Receivers by group (node numbers as `u32`s: a million-rank group is 4 MB, not 8).
    pub(crate) groups: HashMap<GroupId, std::sync::Arc<[u32]>>,
    /// Nodes of the network.
    nodes: usize,
    /// Multicast datagrams delivered so far per receiver, for a targeted drop
    /// (`Faults::drop_mcast`; empty, and not counted, without one).
    pub(crate) mcast_seen: Vec<u32>,
    /// Each node's `RINGCAST_FAULT_*` injector, as a real fabric endpoint would have (empty
    /// until [`Net::inject_faults`]: a million nodes without one hold nothing).
    pub(crate) injectors: Vec<Option<Box<FaultInjector>>>,
    pub(crate) crc: fn(&[u8]) -> u32,
    pub(crate) delivered: u64,
}

impl Net {
    pub(crate) fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.queue.push(at, self.seq, ev);
    }

    /// Runs node `node`'s injector on a datagram in `dir`: `None` when dropped, else the number
    /// of copies and any extra hold time.
    pub(crate) fn inject(&mut self, node: usize, dir: Dir, frame: &mut [u8]) -> Option<(u8, Nanos)> {
        let now = self.now;
        let Some(inj) = self.injectors.get_mut(node).and_then(Option::as_mut) else { return Some((1, 0)) };
        match inj.on_datagram(dir, frame, now) {
            Verdict::Drop => None,
            Verdict::Pass => Some((1, 0)),
            Verdict::Duplicate => Some((2, 0)),
            Verdict::Held => {
                // The simulator takes the held datagram back at once and delivers it late.
                let at = inj.next_release().unwrap_or(now);
                let _ = inj.release(Nanos::MAX);
                Some((1, at.saturating_sub(now)))
            }
        }
    }

    /// Sends one datagram to one receiver through the fault profile, `extra` late; `at` is
    /// when the performance model has it reach the receiver's NIC (`None`: the profile's
    /// latency). `frame` is shared until a fault changes it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn transmit_held(
        &mut self,
        from: usize,
        to: usize,
        multicast: bool,
        frame: &Rc<[u8]>,
        extra: Nanos,
        at: Option<Nanos>,
        lane: u8,
    ) {
        if multicast && self.faults.drop_mcast.is_some() {
            if self.mcast_seen.is_empty() {
                self.mcast_seen = vec![0; self.nodes];
            }
            self.mcast_seen[to] += 1;
            if self.faults.drop_mcast == Some((to, self.mcast_seen[to])) {
                return;
            }
        }
        let crc = self.crc;
        let mut rx_copies = 1;
        let mut rx_hold = 0;
        let mut owned: Option<Vec<u8>> = None;
        if self.injectors.get(to).is_some_and(Option::is_some) {
            let mut bytes = frame.to_vec();
            let Some((c, h)) = self.inject(to, Dir::Rx, &mut bytes) else { return };
            (rx_copies, rx_hold) = (c, h);
            owned = Some(bytes);
        }
        // The fault decision may corrupt the datagram: only then does this receiver get a copy.
        // It sees the bytes (and draws its corruption decisions) where the profile corrupts or
        // the injector made a copy; otherwise none, as ever.
        let faulty = self.faults.corrupt > 0.0 || self.faults.sealed_corrupt > 0.0;
        let seen: &[u8] = match &owned {
            Some(o) => o,
            None if faulty => frame,
            None => &[],
        };
        let mut probe = Probe::new(seen);
        let fate = self.chan.fate(&self.faults, to, multicast, &mut probe, crc);
        let bytes: Rc<[u8]> = match (probe.into_altered(), owned) {
            (Some(altered), _) => altered.into(),
            (None, Some(o)) => o.into(),
            (None, None) => frame.clone(),
        };
        match fate {
            Fate::Lost => {}
            Fate::Deliver { delay, copies } => {
                let copies = copies.max(rx_copies);
                let arrive = match at {
                    // The model prices the trip; the profile's latency floor becomes jitter only.
                    Some(t) => t + delay.saturating_sub(self.faults.latency),
                    None => self.now + delay,
                } + extra
                    + rx_hold;
                let (to, from) = (to as u32, from as u32);
                if copies == 2 {
                    let later = arrive + 1 + self.chan.rng().below(self.faults.jitter + 1);
                    let frame = bytes.clone();
                    self.push(later, Ev::Deliver { to, from, lane, admitted: false, frame });
                }
                self.push(arrive, Ev::Deliver { to, from, lane, admitted: false, frame: bytes });
            }
        }
    }

    /// Charges the sender's side of a datagram of `len` bytes from rank `from` to `to` (`None`:
    /// a multicast leaving for the switch) on `lane`: returns when it reaches the receiving
    /// NIC (for a multicast, when it leaves the switch towards a receiver at the sender's site
    /// — see [`Net::mcast_arrival`]).
    pub(crate) fn charge_send(
        &mut self,
        from: usize,
        to: Option<usize>,
        len: usize,
        lane: u8,
    ) -> Option<Nanos> {
        let now = self.now;
        let p = self.perf.as_mut()?;
        let lanes = p.lanes();
        let (fr, size) = (from as u32, p.ranks);
        let src_node = p.layout.node_of(size, fr) as usize;
        let f = &p.fabric;
        let dst = to.map(|t| (p.layout.node_of(size, t as u32) as usize, p.layout.site_of(size, t as u32)));
        let local = dst.is_some_and(|(dn, _)| dn == src_node);
        let o = if local { f.intra_node.overhead_ns } else { f.intra_site.overhead_ns };
        let cpu = &mut p.cpu_free[from];
        let start = (*cpu).max(now) + o as Nanos;
        *cpu = start;
        if let Some((dn, _)) = dst {
            if dn == src_node {
                // Shared memory: no NIC, a copy at memory speed.
                let m = &f.intra_node;
                return Some(start + (m.latency_ns + len as f64 * m.ns_per_byte) as Nanos);
            }
        }
        let link = &f.intra_site;
        // The NIC: one lane for `max(g, s·G)`, or all lanes aggregated for `s·G / lanes`.
        let (first, n, occ) = match tx_lane(lane) {
            Some(l) if lanes > 1 => (l as usize % lanes, 1, link.occupancy(len)),
            _ => (0, lanes, (link.occupancy(len) / lanes as f64).max(link.gap_ns)),
        };
        let base = src_node * lanes;
        let tx = &mut p.tx_free[base + first..base + first + n];
        let nic = tx.iter().copied().max().unwrap_or(0).max(start);
        let left = nic + occ as Nanos;
        tx.iter_mut().for_each(|t| *t = left);
        let mut t = left + link.latency_ns as Nanos;
        match dst {
            Some((_, dsite)) => {
                let ssite = p.layout.site_of(size, fr);
                if dsite != ssite {
                    // Long and fat: the pair's WAN pipe serializes, then its latency.
                    let w = &mut p.wan_free[(ssite * p.sites + dsite) as usize];
                    let enter = (*w).max(left);
                    *w = enter + (len as f64 * f.wan.ns_per_byte) as Nanos;
                    t = *w + f.wan.latency_ns as Nanos;
                }
            }
            None => t += f.switch_ns as Nanos,
        }
        Some(t)
    }

    /// When a multicast that left the switch at `t` (at the root's site) reaches `to`: across
    /// sites it crosses the WAN once more (replicated beyond it).
    pub(crate) fn mcast_arrival(&self, from: usize, to: usize, t: Nanos, len: usize) -> Nanos {
        let Some(p) = self.perf.as_ref() else { return t };
        if p.layout.site_of(p.ranks, from as u32) == p.layout.site_of(p.ranks, to as u32) {
            return t;
        }
        t + (len as f64 * p.fabric.wan.ns_per_byte + p.fabric.wan.latency_ns) as Nanos
    }

    /// Charges the receiving side of a datagram that reached `to`'s NIC now: the receiving
    /// lane's serialization and the receiver's overhead. Returns when the protocol handles it.
    pub(crate) fn charge_receive(&mut self, from: usize, to: usize, len: usize, lane: u8) -> Nanos {
        let now = self.now;
        let Some(p) = self.perf.as_mut() else { return now };
        let lanes = p.lanes();
        let size = p.ranks;
        let (sn, dn) = (p.layout.node_of(size, from as u32), p.layout.node_of(size, to as u32));
        let mut done = now;
        if sn != dn {
            // The receiving NIC: the lane the sender addressed, or all lanes aggregated.
            let link = &p.fabric.intra_site;
            let (first, n, occ) = match rx_lane(lane) {
                Some(l) if lanes > 1 => (l as usize % lanes, 1, link.occupancy(len)),
                _ => (0, lanes, link.occupancy(len) / lanes as f64),
            };
            let base = dn as usize * lanes;
            let rx = &mut p.rx_free[base + first..base + first + n];
            done = now.max(rx.iter().copied().max().unwrap_or(0) + occ as Nanos);
            rx.iter_mut().for_each(|t| *t = done);
        }
        let o = if sn == dn { p.fabric.intra_node.overhead_ns } else { p.fabric.intra_site.overhead_ns };
        let cpu = &mut p.cpu_free[to];
        *cpu = (*cpu).max(done) + o as Nanos;
        *cpu
    }
}

impl Net {
    /// A network of `nodes` nodes with `faults`, its decisions drawn from `rng`.
    pub(crate) fn new(nodes: usize, faults: Faults, rng: SimRng, crc: fn(&[u8]) -> u32) -> Net {
        Net {
            now: 0,
            seq: 0,
            queue: Queue::default(),
            perf: None,
            faults,
            chan: Channel::new(rng, nodes),
            groups: HashMap::new(),
            nodes,
            mcast_seen: Vec::new(),
            injectors: Vec::new(),
            crc,
            delivered: 0,
        }
    }

    /// The next event, with virtual time moved to it.
    pub(crate) fn pop(&mut self) -> Option<Ev> {
        let (at, ev) = self.queue.pop()?;
        self.now = at;
        Some(ev)
    }

    /// Prices every datagram with `fabric` from now on, node `i` being rank `i` of a
    /// communicator placed as `layout` over all `ranks` nodes.
    pub(crate) fn set_model(&mut self, fabric: FabricModel, layout: Layout, ranks: u32) {
        let lanes = fabric.lanes.max(1) as usize;
        let machines = layout.nodes(ranks) as usize;
        let sites = layout.site_count(ranks);
        self.perf = Some(Perf {
            fabric,
            layout,
            ranks,
            cpu_free: vec![0; ranks as usize],
            tx_free: vec![0; machines * lanes],
            rx_free: vec![0; machines * lanes],
            wan_free: vec![0; (sites * sites) as usize],
            sites,
        });
    }

    /// Gives every node a fault injector per `config` (none when every rate is zero), each with
    /// a seed of its own derived from `config.seed` (never from the process: replays are exact).
    pub(crate) fn inject_faults(&mut self, config: &FaultConfig) {
        self.injectors.resize_with(self.nodes, || None);
        for (i, inj) in self.injectors.iter_mut().enumerate() {
            let mut c = config.clone();
            c.seed = c.seed.wrapping_add(i as u64 * 0x9e37_79b9);
            *inj = FaultInjector::from_config(&c, i as u64 + 1).map(Box::new);
        }
    }

    /// Node `me` sends `frame` to node `to` on NIC lane `lane`.
    pub(crate) fn send(&mut self, me: usize, to: usize, frame: &[u8], lane: u8) {
        if to >= self.nodes {
            return; // not a node of this world
        }
        let Some((bytes, copies, hold)) = self.outgoing(me, frame) else { return };
        for _ in 0..copies {
            let at = self.charge_send(me, Some(to), bytes.len(), lane);
            self.transmit_held(me, to, false, &bytes, hold, at, lane);
        }
    }

    /// `frame` as it leaves node `me`: shared bytes (copied once, straight into the shared
    /// allocation), after its sending injector — `None` when it dropped it, else the copies
    /// and the extra hold time.
    fn outgoing(&mut self, me: usize, frame: &[u8]) -> Option<(Rc<[u8]>, u8, Nanos)> {
        if self.injectors.get(me).is_none_or(Option::is_none) {
            return Some((Rc::from(frame), 1, 0));
        }
        let mut bytes = frame.to_vec();
        let (copies, hold) = self.inject(me, Dir::Tx, &mut bytes)?;
        Some((bytes.into(), copies, hold))
    }

    /// Node `me` multicasts `frame` to the receivers of `group` (itself excepted).
    pub(crate) fn multicast(&mut self, me: usize, group: &GroupId, frame: &[u8]) {
        let Some(members) = self.groups.get(group).cloned() else { return };
        // Sender-side faults hit the datagram once, before the switch replicates it.
        let Some((bytes, copies, hold)) = self.outgoing(me, frame) else { return };
        for _ in 0..copies {
            // One transmission by the root's NIC; the switch replicates it.
            let left = self.charge_send(me, None, bytes.len(), LANE_ANY);
            for to in members.iter().map(|&m| m as usize).filter(|&m| m != me) {
                let at = left.map(|t| self.mcast_arrival(me, to, t, bytes.len()));
                self.transmit_held(me, to, true, &bytes, hold, at, LANE_ANY);
            }
        }
    }

    /// Node `node` receives `group` from now on.
    pub(crate) fn join(&mut self, group: GroupId, node: usize) {
        let node = node as u32;
        let mut m: Vec<u32> = self.groups.get(&group).map(|m| m.to_vec()).unwrap_or_default();
        if !m.contains(&node) {
            m.push(node);
        }
        self.groups.insert(group, m.into());
    }

    /// Node `node` no longer receives `group`.
    pub(crate) fn leave(&mut self, group: GroupId, node: usize) {
        if let Some(m) = self.groups.get(&group) {
            let m: Vec<u32> = m.iter().copied().filter(|&n| n as usize != node).collect();
            self.groups.insert(group, m.into());
        }
    }
}
