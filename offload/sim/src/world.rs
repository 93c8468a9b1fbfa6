//! A simulated cluster: one real [`Protocol`] per node, a discrete-event queue in virtual time,
//! and the [`Fabric`](super::fabric) between them. Each node's host memory is a set of buffers
//! keyed by segment handle; what the protocol reads and writes there is what the checker sees.
//!
//! Two ways to price a datagram: the fault profile's latency and jitter alone (the DST), or a
//! performance model ([`World::set_model`]): LogGP per link class (intra-node, intra-site, WAN),
//! the sender's and receiver's per-datagram overhead `o` on their own CPU, each node's NIC lanes
//! (a send on one lane occupies it for `max(g, s·G)`, an aggregated send all lanes for
//! `s·G / lanes`), the receiving lane's serialization when several senders converge, a WAN pipe
//! per ordered pair of sites, and multicast replicated by the switch (the root's lane carries the
//! datagram once). Faults (loss, corruption, duplication, jitter) apply in both.
//!
//! Built for a million simulated ranks: an event is 32 bytes in one binary heap (no side
//! table), a multicast datagram is one shared buffer for all receivers, and a rank is its
//! protocol plus a few words of fabric state.
//!
//! Deterministic: events at equal times run in insertion order, and every random decision
//! comes from the run's seed.
use super::fabric::{Channel, Fate, Faults};
use ringcast_proto::collective::bcast::{rx_lane, tx_lane, LANE_ANY};
use ringcast_proto::comm::Layout;
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::fault::{Dir, FaultConfig, FaultInjector, Verdict};
use ringcast_proto::intake::regions::Resolved;
use ringcast_proto::model::FabricModel;
use ringcast_proto::rng::SimRng;
use ringcast_proto::transfer::protocol::{DmaDir, DmaJob, DmaStatus, Env, Outcome, Protocol};
use ringcast_proto::Nanos;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

/// One event.
#[derive(Debug)]
enum Ev {
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
}

/// A queued event, ordered by time then insertion.
#[derive(Debug)]
struct Entry {
    at: Nanos,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The performance model's state: where each node sits and when each resource is next free.
struct Perf {
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

/// A completion observed at a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Node.
    pub node: usize,
    /// Token of the post.
    pub token: u64,
    /// Outcome.
    pub outcome: Outcome,
    /// Virtual time.
    pub at: Nanos,
}

/// A simulated host's memory: a few buffers by segment handle (a list, not a hash map: a
/// simulated rank usually has one buffer, and a million of them must stay small).
#[derive(Debug, Default)]
pub struct HostMem(Vec<(u64, Vec<u8>)>);

impl HostMem {
    /// Sets segment `seg`'s bytes.
    pub fn insert(&mut self, seg: u64, bytes: Vec<u8>) {
        match self.0.iter_mut().find(|(s, _)| *s == seg) {
            Some(e) => e.1 = bytes,
            None => {
                self.0.reserve_exact(1);
                self.0.push((seg, bytes));
            }
        }
    }

    /// Segment `seg`'s bytes.
    pub fn get(&self, seg: &u64) -> Option<&Vec<u8>> {
        self.0.iter().find(|(s, _)| s == seg).map(|(_, b)| b)
    }

    /// Segment `seg`'s bytes, writable.
    pub fn get_mut(&mut self, seg: &u64) -> Option<&mut Vec<u8>> {
        self.0.iter_mut().find(|(s, _)| s == seg).map(|(_, b)| b)
    }
}

/// One simulated engine.
pub struct Node {
    /// The protocol under test.
    pub proto: Protocol,
    /// Host memory: segment handle → bytes.
    pub mem: HostMem,
    /// Crashed from this time on (stops processing anything).
    pub crash_at: Option<Nanos>,
    timer: Option<Nanos>,
    /// Timer events that ran `on_timeout`, and events of any kind handled (debugging).
    pub fired: u64,
    /// See `fired`.
    pub handled: u64,
}

impl Node {
    /// The timer event armed for this node (debugging).
    pub fn armed(&self) -> Option<Nanos> {
        self.timer
    }

    /// Whether the node is dead at `now`.
    pub fn dead(&self, now: Nanos) -> bool {
        self.crash_at.is_some_and(|t| now >= t)
    }
}

/// Everything except the nodes, so a node's protocol can borrow it as its `Env`.
struct Net {
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Reverse<Entry>>,
    perf: Option<Perf>,
    faults: Faults,
    chan: Channel,
    groups: HashMap<GroupId, std::sync::Arc<[usize]>>,
    /// Multicast datagrams delivered so far per receiver (for targeted drops).
    mcast_seen: Vec<u32>,
    /// Each node's `RINGCAST_FAULT_*` injector, as a real fabric endpoint would have.
    injectors: Vec<Option<Box<FaultInjector>>>,
    done: Vec<Done>,
    crc: fn(&[u8]) -> u32,
    delivered: u64,
}

impl Net {
    fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse(Entry { at, seq: self.seq, ev }));
    }

    /// Runs node `node`'s injector on a datagram in `dir`: `None` when dropped, else the number
    /// of copies and any extra hold time.
    fn inject(&mut self, node: usize, dir: Dir, frame: &mut [u8]) -> Option<(u8, Nanos)> {
        let now = self.now;
        let Some(inj) = self.injectors[node].as_mut() else { return Some((1, 0)) };
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
    fn transmit_held(
        &mut self,
        from: usize,
        to: usize,
        multicast: bool,
        frame: &Rc<[u8]>,
        extra: Nanos,
        at: Option<Nanos>,
        lane: u8,
    ) {
        if multicast {
            self.mcast_seen[to] += 1;
            if self.faults.drop_mcast == Some((to, self.mcast_seen[to])) {
                return;
            }
        }
        let crc = self.crc;
        let mut rx_copies = 1;
        let mut rx_hold = 0;
        let mut owned: Option<Vec<u8>> = None;
        if self.injectors[to].is_some() {
            let mut bytes = frame.to_vec();
            let Some((c, h)) = self.inject(to, Dir::Rx, &mut bytes) else { return };
            (rx_copies, rx_hold) = (c, h);
            owned = Some(bytes);
        }
        // The fault decision may corrupt the datagram: only then does this receiver get a copy.
        let mut probe = owned.take().unwrap_or_default();
        let faulty = self.faults.corrupt > 0.0 || self.faults.sealed_corrupt > 0.0;
        if faulty && probe.is_empty() {
            probe = frame.to_vec();
        }
        let fate = self.chan.fate(&self.faults, to, multicast, &mut probe, crc);
        let bytes: Rc<[u8]> = if probe.is_empty() { frame.clone() } else { probe.into() };
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
    fn charge_send(&mut self, from: usize, to: Option<usize>, len: usize, lane: u8) -> Option<Nanos> {
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
    fn mcast_arrival(&self, from: usize, to: usize, t: Nanos, len: usize) -> Nanos {
        let Some(p) = self.perf.as_ref() else { return t };
        if p.layout.site_of(p.ranks, from as u32) == p.layout.site_of(p.ranks, to as u32) {
            return t;
        }
        t + (len as f64 * p.fabric.wan.ns_per_byte + p.fabric.wan.latency_ns) as Nanos
    }

    /// Charges the receiving side of a datagram that reached `to`'s NIC now: the receiving
    /// lane's serialization and the receiver's overhead. Returns when the protocol handles it.
    fn charge_receive(&mut self, from: usize, to: usize, len: usize, lane: u8) -> Nanos {
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

/// The `Env` a node's protocol acts through.
struct NodeEnv<'a> {
    me: usize,
    net: &'a mut Net,
    mem: &'a mut HostMem,
}

impl NodeEnv<'_> {
    /// `len` bytes of host memory at `offset` into `buf`, if they exist.
    fn range(&mut self, buf: Resolved, offset: u64, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(buf.offset.checked_add(offset)?).ok()?;
        self.mem.get_mut(&buf.segment.0)?.get_mut(start..start.checked_add(len)?)
    }
}

impl Env for NodeEnv<'_> {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        Env::send_on(self, to, frame, LANE_ANY)
    }

    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        let to = to.0 as usize;
        if to >= self.net.mcast_seen.len() {
            return; // not a node of this world
        }
        let mut bytes = frame.to_vec();
        let Some((copies, hold)) = self.net.inject(self.me, Dir::Tx, &mut bytes) else { return };
        let bytes: Rc<[u8]> = bytes.into();
        for _ in 0..copies {
            let at = self.net.charge_send(self.me, Some(to), bytes.len(), lane);
            self.net.transmit_held(self.me, to, false, &bytes, hold, at, lane);
        }
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        let Some(members) = self.net.groups.get(group).cloned() else { return };
        // Sender-side faults hit the datagram once, before the switch replicates it.
        let mut bytes = frame.to_vec();
        let Some((copies, hold)) = self.net.inject(self.me, Dir::Tx, &mut bytes) else { return };
        let bytes: Rc<[u8]> = bytes.into();
        for _ in 0..copies {
            // One transmission by the root's NIC; the switch replicates it.
            let left = self.net.charge_send(self.me, None, bytes.len(), LANE_ANY);
            for &to in members.iter().filter(|&&m| m != self.me) {
                let at = left.map(|t| self.net.mcast_arrival(self.me, to, t, bytes.len()));
                self.net.transmit_held(self.me, to, true, &bytes, hold, at, LANE_ANY);
            }
        }
    }

    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus {
        // Simulated host memory is reached at once (a DMA engine's latency is not modelled).
        let Some(host) = self.range(job.buf, 0, stage.len()) else { return DmaStatus::Done(false) };
        match job.dir {
            DmaDir::Load => stage.copy_from_slice(host),
            DmaDir::Store => host.copy_from_slice(stage),
        }
        DmaStatus::Done(true)
    }

    fn complete(&mut self, token: u64, outcome: Outcome) {
        self.net.done.push(Done { node: self.me, token, outcome, at: self.net.now });
    }
}

/// The simulated cluster.
pub struct World {
    /// The nodes (index = `PeerId`).
    pub nodes: Vec<Node>,
    net: Net,
}

impl World {
    /// A world of `protos` (one per node) on a fabric with `faults`, randomness from `rng`.
    pub fn new(
        protos: impl IntoIterator<Item = Protocol>,
        faults: Faults,
        rng: SimRng,
        crc: fn(&[u8]) -> u32,
    ) -> Self {
        // Straight into the nodes (no second vector of a million protocols at the peak).
        let nodes: Vec<Node> = protos
            .into_iter()
            .map(|proto| Node {
                proto,
                mem: HostMem::default(),
                crash_at: None,
                timer: None,
                fired: 0,
                handled: 0,
            })
            .collect();
        let n = nodes.len();
        World {
            nodes,
            net: Net {
                now: 0,
                seq: 0,
                heap: BinaryHeap::new(),
                perf: None,
                faults,
                chan: Channel::new(rng, n),
                groups: HashMap::new(),
                done: Vec::new(),
                mcast_seen: vec![0; n],
                injectors: (0..n).map(|_| None).collect(),
                crc,
                delivered: 0,
            },
        }
    }

    /// Prices every datagram with `fabric` from now on, node `i` being rank `i` of a
    /// communicator placed as `layout` over all the world's nodes.
    pub fn set_model(&mut self, fabric: FabricModel, layout: Layout) {
        let ranks = self.nodes.len() as u32;
        let lanes = fabric.lanes.max(1) as usize;
        let machines = layout.nodes(ranks) as usize;
        let sites = layout.site_count(ranks);
        self.net.perf = Some(Perf {
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

    /// Virtual time now.
    pub fn now(&self) -> Nanos {
        self.net.now
    }

    /// Datagrams delivered so far.
    pub fn delivered(&self) -> u64 {
        self.net.delivered
    }

    /// Gives every node a fault injector per `config` (none when every rate is zero), each with
    /// a seed of its own derived from `config.seed` (never from the process: replays are exact).
    pub fn inject_faults(&mut self, config: &FaultConfig) {
        for (i, inj) in self.net.injectors.iter_mut().enumerate() {
            let mut c = config.clone();
            c.seed = c.seed.wrapping_add(i as u64 * 0x9e37_79b9);
            *inj = FaultInjector::from_config(&c, i as u64 + 1).map(Box::new);
        }
    }

    /// Makes `members` the receivers of multicast group `group`.
    pub fn join(&mut self, group: GroupId, members: Vec<usize>) {
        self.net.groups.insert(group, members.into());
    }

    /// Completions so far, in order.
    pub fn done(&self) -> &[Done] {
        &self.net.done
    }

    /// Runs `f` on node `i`'s protocol with its `Env` at the current virtual time (posting,
    /// creating communicators), then re-arms the node's timer.
    pub fn with_node<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Protocol, Nanos, &mut dyn DynEnv) -> R,
    ) -> R {
        let now = self.net.now;
        let node = &mut self.nodes[i];
        let mut env = NodeEnv { me: i, net: &mut self.net, mem: &mut node.mem };
        let r = f(&mut node.proto, now, &mut env);
        self.rearm(i);
        r
    }

    /// Schedules a wake-up of node `i` at `at` (the driver posts then).
    pub fn wake(&mut self, i: usize, at: Nanos) {
        self.net.push(at, Ev::Wake { node: i as u32 });
    }

    /// Injects a raw datagram to node `to` at `at` (foreign or garbage frames).
    pub fn inject(&mut self, to: usize, from: PeerId, at: Nanos, frame: Vec<u8>) {
        let (to, from) = (to as u32, from.0);
        self.net.push(at, Ev::Deliver { to, from, lane: LANE_ANY, admitted: true, frame: frame.into() });
    }

    fn rearm(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let next = node.proto.next_timeout();
        if next != node.timer {
            node.timer = next;
            if let Some(at) = next {
                self.net.push(at.max(self.net.now), Ev::Timer { node: i as u32, at });
            }
        }
    }

    /// Runs the next event; returns the node it concerned (for the driver), or `None` when the
    /// queue is empty.
    pub fn step(&mut self) -> Option<Option<usize>> {
        let Reverse(Entry { at, ev, .. }) = self.net.heap.pop()?;
        self.net.now = at;
        let now = self.net.now;
        let node = match ev {
            Ev::Deliver { to, from, lane, admitted, frame } => {
                let to = to as usize;
                if to >= self.nodes.len() || self.nodes[to].dead(now) {
                    return Some(None);
                }
                if !admitted && self.net.perf.is_some() {
                    // The receiving lane and the receiver's engine: handled when both are free.
                    let ready = self.net.charge_receive(from as usize, to, frame.len(), lane);
                    if ready > now {
                        self.net
                            .push(ready, Ev::Deliver { to: to as u32, from, lane, admitted: true, frame });
                        return Some(None);
                    }
                }
                self.net.delivered += 1;
                let node = &mut self.nodes[to];
                let mut env = NodeEnv { me: to, net: &mut self.net, mem: &mut node.mem };
                node.proto.on_frame(PeerId(from), &frame, now, &mut env);
                to
            }
            Ev::Timer { node: i, at } => {
                let i = i as usize;
                if self.nodes[i].timer != Some(at) || self.nodes[i].dead(now) {
                    return Some(None); // superseded, or dead
                }
                self.nodes[i].timer = None;
                self.nodes[i].fired += 1;
                let node = &mut self.nodes[i];
                let mut env = NodeEnv { me: i, net: &mut self.net, mem: &mut node.mem };
                node.proto.on_timeout(now, &mut env);
                i
            }
            Ev::Wake { node: i } => {
                let i = i as usize;
                if self.nodes[i].dead(now) {
                    return Some(None);
                }
                i
            }
        };
        self.nodes[node].handled += 1;
        self.rearm(node);
        Some(Some(node))
    }
}

/// `Env` as a trait object.
pub trait DynEnv {
    /// See [`Env::send`].
    fn send(&mut self, to: PeerId, frame: &[u8]);
    /// See [`Env::send_on`].
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8);
    /// See [`Env::multicast`].
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// See [`Env::dma`].
    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus;
    /// See [`Env::complete`].
    fn complete(&mut self, token: u64, outcome: Outcome);
}

impl<T: Env> DynEnv for T {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        Env::send(self, to, frame)
    }
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        Env::send_on(self, to, frame, lane)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        Env::multicast(self, group, frame)
    }
    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus {
        Env::dma(self, job, stage)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        Env::complete(self, token, outcome)
    }
}

impl Env for &mut dyn DynEnv {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        (**self).send(to, frame)
    }
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        (**self).send_on(to, frame, lane)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        (**self).multicast(group, frame)
    }
    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus {
        (**self).dma(job, stage)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        (**self).complete(token, outcome)
    }
}
