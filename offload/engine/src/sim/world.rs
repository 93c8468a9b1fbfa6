//! A simulated cluster: one real [`Protocol`] per node, a discrete-event queue in virtual time,
//! and the [`Fabric`](super::fabric) between them. Each node's host memory is a set of buffers
//! keyed by segment handle; what the protocol reads and writes there is what the checker sees.
//!
//! Deterministic: events at equal times run in insertion order, and every random decision
//! comes from the run's seed.
use super::fabric::{Channel, Fate, Faults};
use super::rng::SimRng;
use crate::core::regions::Resolved;
use crate::core::Nanos;
use crate::fault::{Dir, FaultInjector, Verdict};
use crate::proto::comm::{GroupId, PeerId};
use crate::proto::protocol::{Env, Outcome, Protocol};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// One event.
#[derive(Debug)]
enum Ev {
    Deliver { to: usize, from: PeerId, frame: Vec<u8> },
    Timer { node: usize, at: Nanos },
    Wake { node: usize },
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

/// One simulated engine.
pub struct Node {
    /// The protocol under test.
    pub proto: Protocol,
    /// Host memory: segment handle → bytes.
    pub mem: HashMap<u64, Vec<u8>>,
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
    heap: BinaryHeap<Reverse<(Nanos, u64)>>,
    events: HashMap<u64, Ev>,
    faults: Faults,
    chan: Channel,
    groups: HashMap<GroupId, std::sync::Arc<[usize]>>,
    /// Multicast datagrams delivered so far per receiver (for targeted drops).
    mcast_seen: Vec<u32>,
    /// Each node's `RINGCAST_FAULT_*` injector, as a real fabric endpoint would have.
    injectors: Vec<Option<FaultInjector>>,
    done: Vec<Done>,
    crc: fn(&[u8]) -> u32,
    delivered: u64,
}

impl Net {
    fn push(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, ev);
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

    /// Sends one datagram to one receiver through the fabric model, `extra` late.
    fn transmit_held(&mut self, from: usize, to: usize, multicast: bool, frame: &[u8], extra: Nanos) {
        if multicast {
            self.mcast_seen[to] += 1;
            if self.faults.drop_mcast == Some((to, self.mcast_seen[to])) {
                return;
            }
        }
        let mut bytes = frame.to_vec();
        let crc = self.crc;
        let Some((rx_copies, rx_hold)) = self.inject(to, Dir::Rx, &mut bytes) else { return };
        match self.chan.fate(&self.faults, to, multicast, &mut bytes, crc) {
            Fate::Lost => {}
            Fate::Deliver { delay, copies } => {
                let copies = copies.max(rx_copies);
                let at = self.now + delay + extra + rx_hold;
                if copies == 2 {
                    let later = at + 1 + self.chan.rng().below(self.faults.jitter + 1);
                    self.push(later, Ev::Deliver { to, from: PeerId(from as u32), frame: bytes.clone() });
                }
                self.push(at, Ev::Deliver { to, from: PeerId(from as u32), frame: bytes });
            }
        }
    }
}

/// The `Env` a node's protocol acts through.
struct NodeEnv<'a> {
    me: usize,
    net: &'a mut Net,
    mem: &'a mut HashMap<u64, Vec<u8>>,
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
        let mut bytes = frame.to_vec();
        let Some((copies, hold)) = self.net.inject(self.me, Dir::Tx, &mut bytes) else { return };
        for _ in 0..copies {
            self.net.transmit_held(self.me, to.0 as usize, false, &bytes, hold);
        }
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        let Some(members) = self.net.groups.get(group).cloned() else { return };
        // Sender-side faults hit the datagram once, before the switch replicates it.
        let mut bytes = frame.to_vec();
        let Some((copies, hold)) = self.net.inject(self.me, Dir::Tx, &mut bytes) else { return };
        for &to in members.iter().filter(|&&m| m != self.me) {
            for _ in 0..copies {
                self.net.transmit_held(self.me, to, true, &bytes, hold);
            }
        }
    }

    fn read(&mut self, buf: Resolved, offset: u64, out: &mut [u8]) -> bool {
        self.range(buf, offset, out.len()).map(|src| out.copy_from_slice(src)).is_some()
    }

    fn write(&mut self, buf: Resolved, offset: u64, data: &[u8]) -> bool {
        self.range(buf, offset, data.len()).map(|dst| dst.copy_from_slice(data)).is_some()
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
    pub fn new(protos: Vec<Protocol>, faults: Faults, rng: SimRng, crc: fn(&[u8]) -> u32) -> Self {
        let n = protos.len();
        World {
            nodes: protos
                .into_iter()
                .map(|proto| Node {
                    proto,
                    mem: HashMap::new(),
                    crash_at: None,
                    timer: None,
                    fired: 0,
                    handled: 0,
                })
                .collect(),
            net: Net {
                now: 0,
                seq: 0,
                heap: BinaryHeap::new(),
                events: HashMap::new(),
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

    /// Virtual time now.
    pub fn now(&self) -> Nanos {
        self.net.now
    }

    /// Datagrams delivered so far.
    pub fn delivered(&self) -> u64 {
        self.net.delivered
    }

    /// Gives every node a fault injector per `config`'s `fault_*` tunables (none when all zero).
    pub fn inject_faults(&mut self, config: &crate::config::Config) {
        for (i, inj) in self.net.injectors.iter_mut().enumerate() {
            let mut c = config.clone();
            c.fault_seed = c.fault_seed.wrapping_add(i as u64 * 0x9e37_79b9);
            *inj = FaultInjector::from_config(&c);
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
        self.net.push(at, Ev::Wake { node: i });
    }

    /// Injects a raw datagram to node `to` at `at` (foreign or garbage frames).
    pub fn inject(&mut self, to: usize, from: PeerId, at: Nanos, frame: Vec<u8>) {
        self.net.push(at, Ev::Deliver { to, from, frame });
    }

    fn rearm(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let next = node.proto.next_timeout();
        if next != node.timer {
            node.timer = next;
            if let Some(at) = next {
                self.net.push(at.max(self.net.now), Ev::Timer { node: i, at });
            }
        }
    }

    /// Runs the next event; returns the node it concerned (for the driver), or `None` when the
    /// queue is empty.
    pub fn step(&mut self) -> Option<Option<usize>> {
        let Reverse((at, seq)) = self.net.heap.pop()?;
        self.net.now = at;
        // NOTE(unwrap-free): every heap entry has its event.
        let ev = self.net.events.remove(&seq)?;
        let now = self.net.now;
        let node = match ev {
            Ev::Deliver { to, from, frame } => {
                if self.nodes[to].dead(now) {
                    return Some(None);
                }
                self.net.delivered += 1;
                let node = &mut self.nodes[to];
                let mut env = NodeEnv { me: to, net: &mut self.net, mem: &mut node.mem };
                node.proto.on_frame(from, &frame, now, &mut env);
                to
            }
            Ev::Timer { node: i, at } => {
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
    /// See [`Env::multicast`].
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// See [`Env::read`].
    fn read(&mut self, buf: Resolved, offset: u64, out: &mut [u8]) -> bool;
    /// See [`Env::write`].
    fn write(&mut self, buf: Resolved, offset: u64, data: &[u8]) -> bool;
    /// See [`Env::complete`].
    fn complete(&mut self, token: u64, outcome: Outcome);
}

impl<T: Env> DynEnv for T {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        Env::send(self, to, frame)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        Env::multicast(self, group, frame)
    }
    fn read(&mut self, buf: Resolved, offset: u64, out: &mut [u8]) -> bool {
        Env::read(self, buf, offset, out)
    }
    fn write(&mut self, buf: Resolved, offset: u64, data: &[u8]) -> bool {
        Env::write(self, buf, offset, data)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        Env::complete(self, token, outcome)
    }
}

impl Env for &mut dyn DynEnv {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        (**self).send(to, frame)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        (**self).multicast(group, frame)
    }
    fn read(&mut self, buf: Resolved, offset: u64, out: &mut [u8]) -> bool {
        (**self).read(buf, offset, out)
    }
    fn write(&mut self, buf: Resolved, offset: u64, data: &[u8]) -> bool {
        (**self).write(buf, offset, data)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        (**self).complete(token, outcome)
    }
}
