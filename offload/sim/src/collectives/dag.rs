//! A schedule across nodes as a graph of operations, executed in virtual time on the LogGP
//! fabric of a [`Machine`] — message-level, so 64 × 8 ranks exchanging 261,632 messages run in
//! a fraction of a second.
//!
//! # Operations
//! * a **network send** from one core to a core on another node: the sending core pays `o`, the
//!   node's NIC sends the message's datagrams back to back ([`Machine::train`]), the first
//!   arrives `L` later (`L + switch` for a multicast, which the switch replicates to every
//!   other node), the receiving NIC takes them one after another, and the receiving core pays
//!   `o`. Who pays `o` per what is the [`Framing`]: an MPI rank once per message (its HCA cuts
//!   the message into MTU packets), the ringcast engine once per datagram (it checks and places
//!   every one). A train's per-datagram `o`s are charged to the core as one block when the train
//!   starts (the core is then free for other work), and its completion is paced by the slower
//!   of the core and the wire.
//! * a **shared-memory send** between two cores of one node: the sender copies the message into
//!   a shared buffer, the receiver copies it out, chunk by chunk (a datagram's payload) behind
//!   it — two copies, as MPI's shared-memory channel made them in 2008.
//! * a **copy** by one core (a gather into a node buffer, a copy out of it): the core is busy
//!   `o_node + bytes·G_node`, the data is visible `L_node` later.
//!
//! The `intra_node` class prices copies per core: cores copy in parallel without sharing memory
//! bandwidth here (`fluid` is the model in which they do).
//!
//! # Execution
//! An operation starts once every operation it depends on is over; a network send's receiving
//! side starts when its first datagram reaches the receiving NIC. Each start takes its
//! resources — the core, the NIC's sending side, the NIC's receiving side, each "free from" a
//! time — in the order of the starts' times (ties in the order the operations were added), so
//! every resource serves first come, first served. The schedule's time is when the last
//! operation ends. No randomness, no clock: the same graph always gives the same time.
use super::{Machine, Train};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// An operation's index in its [`Dag`].
pub(crate) type OpId = u32;

/// Who pays the per-datagram overhead `o` of a network send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// An MPI rank: `o` once per message at each end.
    Message,
    /// The ringcast engine: `o` per datagram at each end.
    Datagram,
}

/// A core: ranks `0..P`, then one engine core per node (`P + node`).
pub(crate) type Cpu = u32;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The sending side of a network send; its `receivers` receiving sides are the next ops.
    NetTx { cpu: Cpu, bytes: u64, framing: Framing, multicast: bool, receivers: u32 },
    /// The receiving side at `cpu` of the network send `tx`.
    NetRx { cpu: Cpu, tx: OpId },
    /// The sender's copy of a shared-memory send; its receiver's copy is the next op.
    ShmTx { cpu: Cpu, bytes: u64 },
    /// The receiver's copy of the shared-memory send `tx`.
    ShmRx { cpu: Cpu, tx: OpId },
    /// A copy by one core.
    Copy { cpu: Cpu, bytes: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    /// Dependencies not over yet.
    waiting: u32,
    /// When the last dependency ended.
    ready: f64,
    /// For a sending side: when its first datagram (chunk) left, and when its last did.
    sent: (f64, f64),
}

/// A schedule being built: operations and who waits for whom.
#[derive(Default)]
pub(crate) struct Dag {
    ops: Vec<Op>,
    dependents: Vec<Vec<OpId>>,
}

impl Dag {
    fn push(&mut self, kind: Kind, deps: &[OpId]) -> OpId {
        let id = self.ops.len() as OpId;
        for &d in deps {
            self.dependents[d as usize].push(id);
        }
        self.ops.push(Op { kind, waiting: deps.len() as u32, ready: 0.0, sent: (0.0, 0.0) });
        self.dependents.push(Vec::new());
        id
    }

    /// Core `cpu` copies `bytes` once `deps` are over.
    pub(crate) fn copy(&mut self, cpu: Cpu, bytes: u64, deps: &[OpId]) -> OpId {
        self.push(Kind::Copy { cpu, bytes }, deps)
    }

    /// `from` sends `bytes` to `to` once `deps` are over: a network send between nodes, a
    /// shared-memory send within one. Returns (sending side, receiving side): the sending side
    /// is over when its last datagram has left (the sender may go on), the receiving side when
    /// the message is in the receiver's hands.
    pub(crate) fn send(
        &mut self,
        m: &Machine,
        from: Cpu,
        to: Cpu,
        bytes: u64,
        framing: Framing,
        deps: &[OpId],
    ) -> (OpId, OpId) {
        if node_of(m, from) == node_of(m, to) {
            let tx = self.push(Kind::ShmTx { cpu: from, bytes }, deps);
            (tx, self.push(Kind::ShmRx { cpu: to, tx }, &[]))
        } else {
            let tx =
                self.push(Kind::NetTx { cpu: from, bytes, framing, multicast: false, receivers: 1 }, deps);
            (tx, self.push(Kind::NetRx { cpu: to, tx }, &[]))
        }
    }

    /// `from` multicasts `bytes` once `deps` are over; the switch hands a copy to each of `to`
    /// (cores on other nodes than `from`'s). Returns the sending side and the receiving sides,
    /// in the order of `to`.
    pub(crate) fn multicast(
        &mut self,
        from: Cpu,
        to: &[Cpu],
        bytes: u64,
        framing: Framing,
        deps: &[OpId],
    ) -> (OpId, Vec<OpId>) {
        let receivers = to.len() as u32;
        let tx = self.push(Kind::NetTx { cpu: from, bytes, framing, multicast: true, receivers }, deps);
        (tx, to.iter().map(|&cpu| self.push(Kind::NetRx { cpu, tx }, &[])).collect())
    }

    /// Runs the schedule on `m`: virtual nanoseconds until the last operation is over.
    pub(crate) fn run(mut self, m: &Machine) -> f64 {
        let mut x = Exec::new(m, self.ops.len());
        for (id, op) in self.ops.iter().enumerate() {
            let receiving = matches!(op.kind, Kind::NetRx { .. } | Kind::ShmRx { .. });
            if op.waiting == 0 && !receiving {
                x.at(0.0, Ev::Start(id as OpId));
            }
        }
        let mut end: f64 = 0.0;
        while let Some(Reverse(Timed { t, ev, .. })) = x.heap.pop() {
            match ev {
                Ev::Start(id) => x.start(&mut self.ops, id, t),
                Ev::Received(id) => x.received(&self.ops, id, t),
                Ev::Done(id) => {
                    end = end.max(t);
                    for &d in &self.dependents[id as usize] {
                        let op = &mut self.ops[d as usize];
                        op.ready = op.ready.max(t);
                        op.waiting -= 1;
                        if op.waiting == 0 {
                            x.at(op.ready, Ev::Start(d));
                        }
                    }
                }
            }
        }
        debug_assert!(self.ops.iter().all(|o| o.waiting == 0), "a schedule waited on itself");
        end
    }
}

fn node_of(m: &Machine, cpu: Cpu) -> u32 {
    let p = m.ranks();
    if cpu < p {
        m.node_of(cpu)
    } else {
        cpu - p
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// The operation's dependencies are over (a receiving side: its first datagram is in).
    Start(OpId),
    /// A message-framed receiving side's last datagram is in.
    Received(OpId),
    /// The operation is over.
    Done(OpId),
}

/// An event at a virtual time; ties go in the order they were scheduled.
struct Timed {
    t: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> Ordering {
        self.t.total_cmp(&o.t).then(self.seq.cmp(&o.seq))
    }
}

/// The resources while a schedule runs: when each core and each NIC side is next free.
struct Exec<'m> {
    m: &'m Machine,
    node: Vec<u32>,
    cpu_free: Vec<f64>,
    tx_free: Vec<f64>,
    rx_free: Vec<f64>,
    heap: BinaryHeap<Reverse<Timed>>,
    seq: u64,
}

impl<'m> Exec<'m> {
    fn new(m: &'m Machine, ops: usize) -> Self {
        let (p, n) = (m.ranks(), m.nodes.max(1));
        let node: Vec<u32> = (0..p + n).map(|c| node_of(m, c)).collect();
        Exec {
            m,
            cpu_free: vec![0.0; node.len()],
            node,
            tx_free: vec![0.0; n as usize],
            rx_free: vec![0.0; n as usize],
            heap: BinaryHeap::with_capacity(ops.min(1 << 20)),
            seq: 0,
        }
    }

    fn at(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse(Timed { t, seq: self.seq, ev }));
    }

    /// Operation `id` starts at `t`: takes its resources, schedules its end (and a sending
    /// side's receiving sides).
    fn start(&mut self, ops: &mut [Op], id: OpId, t: f64) {
        let f = &self.m.fabric;
        let (mem, net) = (f.intra_node, f.intra_site);
        match ops[id as usize].kind {
            Kind::Copy { cpu, bytes } => {
                let c = &mut self.cpu_free[cpu as usize];
                *c = c.max(t) + mem.overhead_ns + bytes as f64 * mem.ns_per_byte;
                let done = *c + mem.latency_ns;
                self.at(done, Ev::Done(id));
            }
            Kind::ShmTx { cpu, bytes } => {
                let c = &mut self.cpu_free[cpu as usize];
                let s = c.max(t);
                *c = s + mem.overhead_ns + bytes as f64 * mem.ns_per_byte;
                let end = *c;
                let chunk = bytes.min(u64::from(self.m.payload)) as f64 * mem.ns_per_byte;
                ops[id as usize].sent = (s, end);
                self.at(s + mem.overhead_ns + chunk + mem.latency_ns, Ev::Start(id + 1));
                self.at(end, Ev::Done(id));
            }
            Kind::ShmRx { cpu, tx } => {
                let Kind::ShmTx { bytes, .. } = ops[tx as usize].kind else { return };
                let chunk = bytes.min(u64::from(self.m.payload)) as f64 * mem.ns_per_byte;
                let c = &mut self.cpu_free[cpu as usize];
                let s = c.max(t);
                // Chunk by chunk behind the sender: never before its last chunk is visible.
                *c = (s + mem.overhead_ns + bytes as f64 * mem.ns_per_byte)
                    .max(ops[tx as usize].sent.1 + mem.latency_ns + chunk);
                let done = *c;
                self.at(done, Ev::Done(id));
            }
            Kind::NetTx { cpu, bytes, framing, multicast, receivers } => {
                let tr = self.m.train(bytes);
                let per = match framing {
                    Framing::Message => 1.0,
                    Framing::Datagram => tr.datagrams as f64,
                };
                let c = &mut self.cpu_free[cpu as usize];
                let s = c.max(t);
                *c = s + per * net.overhead_ns;
                let fed = *c;
                let nic = &mut self.tx_free[self.node[cpu as usize] as usize];
                let first = nic.max(s + net.overhead_ns);
                // The wire, unless the core hands over datagrams more slowly than it sends them.
                *nic = (first + tr.total).max(fed + tr.last);
                ops[id as usize].sent = (first, *nic);
                let end = *nic;
                let arrive = first + tr.first + self.latency(multicast);
                for r in 1..=receivers {
                    self.at(arrive, Ev::Start(id + r));
                }
                self.at(end, Ev::Done(id));
            }
            Kind::NetRx { cpu, tx } => {
                let Kind::NetTx { bytes, framing, multicast, .. } = ops[tx as usize].kind else { return };
                let tr: Train = self.m.train(bytes);
                let last = ops[tx as usize].sent.1 + self.latency(multicast);
                // A datagram occupies the receiving NIC for the `occupancy` before its arrival
                // (as `net.rs` charges it): busy from `t − first` when idle.
                let nic = &mut self.rx_free[self.node[cpu as usize] as usize];
                let from = nic.max(t - tr.first);
                *nic = last.max(from + tr.total);
                let received = *nic;
                match framing {
                    // The core polls one completion once the message is in: it is taken then,
                    // not now (it may copy or send in between).
                    Framing::Message => self.at(received, Ev::Received(id)),
                    Framing::Datagram => {
                        let c = &mut self.cpu_free[cpu as usize];
                        *c = c.max(from + tr.first) + tr.datagrams as f64 * net.overhead_ns;
                        let done = c.max(received + net.overhead_ns);
                        self.at(done, Ev::Done(id));
                    }
                }
            }
        }
    }

    /// The message of receiving side `id` is all in at `t`: its core pays `o` and it is over.
    fn received(&mut self, ops: &[Op], id: OpId, t: f64) {
        let Kind::NetRx { cpu, .. } = ops[id as usize].kind else { return };
        let c = &mut self.cpu_free[cpu as usize];
        *c = c.max(t) + self.m.fabric.intra_site.overhead_ns;
        let done = *c;
        self.at(done, Ev::Done(id));
    }

    /// Wire and switch latency of a unicast or a multicast datagram.
    fn latency(&self, multicast: bool) -> f64 {
        let f = &self.m.fabric;
        f.intra_site.latency_ns + if multicast { f.switch_ns } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcast_proto::model::FabricModel;

    fn machine(nodes: u32, ppn: u32) -> Machine {
        Machine { fabric: FabricModel::default_cluster(), nodes, ppn, cyclic: false, payload: 8960 }
    }

    #[test]
    fn one_message_costs_o_plus_wire_plus_latency_plus_o() {
        let m = machine(2, 1);
        let f = &m.fabric.intra_site;
        for framing in [Framing::Message, Framing::Datagram] {
            let mut d = Dag::default();
            d.send(&m, 0, 1, 100_000, framing, &[]);
            let want = 2.0 * f.overhead_ns + f.latency_ns + m.train(100_000).total;
            assert!((d.run(&m) - want).abs() < 1e-6, "{framing:?}");
        }
    }

    #[test]
    fn two_senders_share_one_nic() {
        let m = machine(2, 2);
        let one = {
            let mut d = Dag::default();
            d.send(&m, 0, 2, 1 << 20, Framing::Message, &[]);
            d.run(&m)
        };
        let mut d = Dag::default();
        d.send(&m, 0, 2, 1 << 20, Framing::Message, &[]);
        d.send(&m, 1, 3, 1 << 20, Framing::Message, &[]);
        let two = d.run(&m);
        let wire = m.train(1 << 20).total;
        assert!((two - one - wire).abs() < 1e-6, "the second waits for the first on the NIC");
    }

    #[test]
    fn dependencies_order_operations_and_copies_take_the_core() {
        let m = machine(1, 2);
        let n = &m.fabric.intra_node;
        let mut d = Dag::default();
        let a = d.copy(0, 1000, &[]);
        d.copy(1, 1000, &[a]);
        let copy = n.overhead_ns + 1000.0 * n.ns_per_byte + n.latency_ns;
        assert!((d.run(&m) - 2.0 * copy).abs() < 1e-6);
        // A shared-memory send is two copies, the second pipelined behind the first.
        let mut d = Dag::default();
        d.send(&m, 0, 1, 100_000, Framing::Message, &[]);
        let t = d.run(&m);
        let one = n.overhead_ns + 100_000.0 * n.ns_per_byte;
        assert!(t > one && t < 2.0 * one, "{t}");
    }

    #[test]
    fn a_multicast_reaches_every_node_once_through_the_switch() {
        let m = machine(4, 1);
        let f = &m.fabric;
        let mut d = Dag::default();
        let p = m.ranks();
        let (_, rx) = d.multicast(p, &[p + 1, p + 2, p + 3], 50_000, Framing::Datagram, &[]);
        assert_eq!(rx.len(), 3);
        let want =
            2.0 * f.intra_site.overhead_ns + f.intra_site.latency_ns + f.switch_ns + m.train(50_000).total;
        assert!((d.run(&m) - want).abs() < 1e-6);
    }
}
