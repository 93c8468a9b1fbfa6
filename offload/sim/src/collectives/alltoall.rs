//! Alltoall (Mamidala et al. §4.3, Figure 6(c)): every rank sends `bytes` to every other rank.
//!
//! * Within one node ([`node_time`], on the `fluid` model of a [`NodeMemory`]):
//!   pairwise exchange over the links between sockets, with the paper's two schedules.
//! * Across nodes ([`time`], on the `dag` model of a [`Machine`]): pairwise exchange
//!   among all ranks, with and without node-level aggregation.
use super::dag::{Cpu, Dag, Framing, OpId};
use super::fluid::{Flow, Program};
use super::node::NodeMemory;
use super::Machine;

/// How the two transfers of a pair cross the links in each step of an intra-node pairwise
/// exchange (`C − 1` steps, in step `i` core `r` exchanges with core `r XOR i`, both blocked —
/// sending, then receiving, or the other way round — until each transfer is over).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSchedule {
    /// The original: in every pair the lower rank sends first, so all transfers of a step
    /// that cross a link go one way, then all go back the other way.
    OneDirection,
    /// Mamidala's: the pairs a link carries alternate which side sends first (by the lower
    /// rank's core within its socket: even sends first, odd receives first), so both
    /// directions of every link are busy at once.
    Bidirectional,
}

impl NodeSchedule {
    /// Both, in table order.
    pub const ALL: [NodeSchedule; 2] = [NodeSchedule::OneDirection, NodeSchedule::Bidirectional];

    /// Short name (tables, plots).
    pub fn name(self) -> &'static str {
        match self {
            NodeSchedule::OneDirection => "one direction at a time",
            NodeSchedule::Bidirectional => "bidirectional",
        }
    }
}

/// Virtual nanoseconds of an intra-node pairwise alltoall of `bytes` per pair on `node` under
/// `schedule`; `None` unless the node has a power-of-two number of cores. Each transfer is one
/// copy by the receiving core from the sender's memory into its own (both cores blocked), after
/// a handshake of one call and one flag latency.
pub fn node_time(schedule: NodeSchedule, node: &NodeMemory, bytes: u64) -> Option<f64> {
    let c = node.cores();
    if !c.is_power_of_two() {
        return None;
    }
    let mut p = Program::new(c, node.capacities());
    let per_socket = node.cores_per_socket.max(1) as usize;
    for i in 1..c {
        for r in 0..c {
            let s = r ^ i;
            if r > s {
                continue;
            }
            let lower_first = match schedule {
                NodeSchedule::OneDirection => true,
                NodeSchedule::Bidirectional => (r % per_socket).is_multiple_of(2),
            };
            let order = if lower_first { [(r, s), (s, r)] } else { [(s, r), (r, s)] };
            for (from, to) in order {
                p.push(Flow {
                    cores: vec![r, s],
                    bytes: bytes as f64,
                    cap: node.copy_gbps,
                    uses: node.transfer(from, to, true),
                    setup_ns: node.overhead_ns + node.latency_ns,
                });
            }
        }
    }
    Some(p.run())
}

/// An alltoall schedule across nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alltoall {
    /// Pairwise exchange among all `P` ranks (MPICH's for long messages): `P − 1` steps of
    /// send-receive, in step `i` rank `r` with `r XOR i` (`P` a power of two; otherwise sending
    /// to `r + i` and receiving from `r − i`). A node's ranks share its NIC; ranks of one node
    /// exchange through shared memory.
    Pairwise,
    /// Node-level aggregation: ranks of a node exchange their blocks for each other by copies;
    /// for every other node (pairwise among nodes, `n − 1` steps of send-receive between
    /// leaders), each rank copies its `ppn` blocks for that node into a shared buffer (two
    /// buffers, so the copies run a step ahead), the leader sends the `ppn²` blocks as one
    /// message, and each rank of the receiving node copies its `ppn` blocks out.
    NodeAggregated,
}

impl Alltoall {
    /// Both, in table order.
    pub const ALL: [Alltoall; 2] = [Alltoall::Pairwise, Alltoall::NodeAggregated];

    /// Short name (tables, plots).
    pub fn name(self) -> &'static str {
        match self {
            Alltoall::Pairwise => "pairwise",
            Alltoall::NodeAggregated => "node-aggregated",
        }
    }
}

/// Virtual nanoseconds of an alltoall of `bytes` per pair of ranks on `m` with `alg`.
pub fn time(alg: Alltoall, m: &Machine, bytes: u64) -> f64 {
    match alg {
        Alltoall::Pairwise => pairwise(m, bytes),
        Alltoall::NodeAggregated => aggregated(m, bytes),
    }
    .run(m)
}

/// Step `i`'s (destination, source) of `r` among `p`.
fn partners(r: u32, i: u32, p: u32) -> (u32, u32) {
    if p.is_power_of_two() {
        (r ^ i, r ^ i)
    } else {
        ((r + i) % p, (r + p - i) % p)
    }
}

fn pairwise(m: &Machine, bytes: u64) -> Dag {
    let p = m.ranks();
    let mut d = Dag::default();
    let mut prev: Vec<(OpId, OpId)> = Vec::new();
    for i in 1..p {
        let mut cur = Vec::with_capacity(p as usize);
        for r in 0..p {
            let deps: Vec<OpId> = match i {
                1 => Vec::new(),
                _ => vec![prev[r as usize].0, prev[partners(r, i - 1, p).1 as usize].1],
            };
            cur.push(d.send(m, r, partners(r, i, p).0, bytes, Framing::Message, &deps));
        }
        prev = cur;
    }
    d
}

fn aggregated(m: &Machine, bytes: u64) -> Dag {
    let n = m.nodes.max(1);
    let q = u64::from(m.ppn.max(1));
    let nodes: Vec<Vec<Cpu>> = (0..n).map(|j| m.ranks_of(j)).collect();
    let mut d = Dag::default();
    for rs in &nodes {
        for &r in rs.iter().filter(|_| q > 1) {
            d.copy(r, (q - 1) * bytes, &[]);
        }
    }
    // Per node, its leader's sends so far (sending side, receiving side).
    let mut sent: Vec<Vec<(OpId, OpId)>> = vec![Vec::new(); n as usize];
    for i in 1..n {
        let mut txs = Vec::with_capacity(n as usize);
        for j in 0..n {
            let ju = j as usize;
            // The buffer of step i is the one step i − 2 sent from; filling it waits for step
            // i − 2's send-receive to be over, so that the leader's core sends step i − 1
            // before it copies for step i.
            let free: Vec<OpId> = match i {
                1 | 2 => Vec::new(),
                _ => vec![sent[ju][i as usize - 3].0, received(&sent, j, i - 2, n)],
            };
            let mut deps: Vec<OpId> = nodes[ju].iter().map(|&r| d.copy(r, q * bytes, &free)).collect();
            if i > 1 {
                deps.extend([sent[ju][i as usize - 2].0, received(&sent, j, i - 1, n)]);
            }
            let to = partners(j, i, n).0 as usize;
            txs.push(d.send(m, nodes[ju][0], nodes[to][0], q * q * bytes, Framing::Message, &deps));
        }
        for (j, tx) in txs.into_iter().enumerate() {
            sent[j].push(tx);
        }
        if i > 1 {
            copy_out(&mut d, &nodes, &sent, i - 1, n, q * bytes);
        }
    }
    if n > 1 {
        copy_out(&mut d, &nodes, &sent, n - 1, n, q * bytes);
    }
    d
}

/// The receiving side at node `j` of step `i`'s message.
fn received(sent: &[Vec<(OpId, OpId)>], j: u32, i: u32, n: u32) -> OpId {
    sent[partners(j, i, n).1 as usize][i as usize - 1].1
}

/// Every rank copies its part of what arrived in step `i` out of the node's buffer.
fn copy_out(d: &mut Dag, nodes: &[Vec<Cpu>], sent: &[Vec<(OpId, OpId)>], i: u32, n: u32, len: u64) {
    for (j, rs) in nodes.iter().enumerate() {
        let arrived = received(sent, j as u32, i, n);
        for &r in rs {
            d.copy(r, len, &[arrived]);
        }
    }
}
