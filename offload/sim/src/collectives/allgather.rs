//! Allgather schedules across nodes (Mamidala et al. §4.1 and Figure 7), built as `Dag`s and
//! timed on a [`Machine`]: every rank contributes `bytes` and ends holding all `P` blocks. All
//! ranks start at time 0; the time is when the last rank holds everything.
use super::dag::{Cpu, Dag, Framing, OpId};
use super::Machine;

/// An allgather schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allgather {
    /// Flat ring over all `P` ranks (MPICH's and MVAPICH's allgather for long messages):
    /// `P − 1` steps; in step `s` rank `r` sends the block it received in step `s − 1` (its own
    /// in step 0) to rank `r + 1` and receives from `r − 1`, each step a send-receive (the next
    /// starts once both are over). Placement-unaware: with cyclic placement every edge crosses
    /// nodes and a node's `ppn` ranks share one NIC; with block placement `ppn − 1` of every
    /// `ppn` edges are shared memory.
    FlatRing,
    /// Flat recursive doubling (MPICH's allgather for short messages; `P` a power of two):
    /// `log₂ P` steps; in step `j` rank `r` exchanges everything it holds (`2ʲ` blocks) with
    /// rank `r XOR 2ʲ`. With block placement the first `log₂ ppn` steps stay on the node; with
    /// cyclic placement the last `log₂ ppn` do.
    FlatRecursiveDoubling,
    /// Mamidala's leader-based allgather: each rank copies its block into its node's shared
    /// buffer; once the node's `ppn` blocks are there, the node's leader (its first rank) starts
    /// a ring among the `n` leaders carrying whole node blocks (`ppn · bytes`), `n − 1` steps of
    /// send-receive, forwarding each node block as soon as it arrived; every rank of a node
    /// copies each node block out of the shared buffer as it arrives (its own node's `ppn − 1`
    /// other blocks once the gather is done), overlapped with the next ring steps. The leader
    /// forwards before it copies.
    Leaders,
    /// ringcast's multicast allgather, the schedule the engine composes: one broadcast per
    /// rank, each a single multicast train from its root's node (the engine, one per node,
    /// paying `o` per datagram) that the switch hands to every other node's NIC, which takes
    /// the arriving trains one after another. Delivery within a node by the **engine's core**:
    /// it reads the root's block (one copy), writes each received block into each of its `ppn`
    /// processes (`ppn` copies; the root's node `ppn − 1`), one copy after another — what the
    /// engine does today (DMA jobs it runs itself in emulation).
    MulticastEngineCopies,
    /// The same multicast trains, delivered by **each process** copying the blocks it needs
    /// out of the engine's receive buffer (and the root copying its block in), in parallel — as
    /// Mamidala's processes copy out of the leader's buffer; what a DMA engine with the
    /// bandwidth of `ppn` cores would give the engine.
    MulticastProcessCopies,
}

impl Allgather {
    /// Every schedule, in table order.
    pub const ALL: [Allgather; 5] = [
        Allgather::FlatRing,
        Allgather::FlatRecursiveDoubling,
        Allgather::Leaders,
        Allgather::MulticastEngineCopies,
        Allgather::MulticastProcessCopies,
    ];

    /// Short name (tables, plots).
    pub fn name(self) -> &'static str {
        match self {
            Allgather::FlatRing => "flat ring",
            Allgather::FlatRecursiveDoubling => "flat recursive doubling",
            Allgather::Leaders => "leader-based",
            Allgather::MulticastEngineCopies => "ringcast multicast (engine copies)",
            Allgather::MulticastProcessCopies => "ringcast multicast (process copies)",
        }
    }
}

/// Virtual nanoseconds for `alg` to allgather `bytes` per rank on `m`; `None` for recursive
/// doubling when `P` is not a power of two.
pub fn time(alg: Allgather, m: &Machine, bytes: u64) -> Option<f64> {
    let dag = match alg {
        Allgather::FlatRing => ring(m, bytes),
        Allgather::FlatRecursiveDoubling => recursive_doubling(m, bytes)?,
        Allgather::Leaders => leaders(m, bytes),
        Allgather::MulticastEngineCopies => multicast(m, bytes, false),
        Allgather::MulticastProcessCopies => multicast(m, bytes, true),
    };
    Some(dag.run(m))
}

fn ring(m: &Machine, bytes: u64) -> Dag {
    let p = m.ranks();
    let mut d = Dag::default();
    // (sending side, receiving side) of each rank's send in the previous step.
    let mut prev: Vec<(OpId, OpId)> = Vec::new();
    for s in 0..p.saturating_sub(1) {
        let mut cur = Vec::with_capacity(p as usize);
        for r in 0..p {
            let deps: Vec<OpId> = match s {
                0 => Vec::new(),
                _ => vec![prev[r as usize].0, prev[((r + p - 1) % p) as usize].1],
            };
            cur.push(d.send(m, r, (r + 1) % p, bytes, Framing::Message, &deps));
        }
        prev = cur;
    }
    d
}

fn recursive_doubling(m: &Machine, bytes: u64) -> Option<Dag> {
    let p = m.ranks();
    if !p.is_power_of_two() {
        return None;
    }
    let mut d = Dag::default();
    let mut prev: Vec<(OpId, OpId)> = Vec::new();
    let mut held = bytes;
    for j in 0..p.trailing_zeros() {
        let mut cur = Vec::with_capacity(p as usize);
        for r in 0..p {
            let deps: Vec<OpId> = match j {
                0 => Vec::new(),
                // Its own previous send, and what its previous partner sent it.
                _ => vec![prev[r as usize].0, prev[(r ^ (1 << (j - 1))) as usize].1],
            };
            cur.push(d.send(m, r, r ^ (1 << j), held, Framing::Message, &deps));
        }
        prev = cur;
        held *= 2;
    }
    Some(d)
}

fn leaders(m: &Machine, bytes: u64) -> Dag {
    let n = m.nodes.max(1);
    let q = u64::from(m.ppn.max(1));
    let nodes: Vec<Vec<Cpu>> = (0..n).map(|j| m.ranks_of(j)).collect();
    let mut d = Dag::default();
    let gathered: Vec<Vec<OpId>> =
        nodes.iter().map(|rs| rs.iter().map(|&r| d.copy(r, bytes, &[])).collect()).collect();
    // Every rank copies out its own node's other blocks once they are all in.
    let copy_out = |d: &mut Dag, j: usize, len: u64, deps: &[OpId]| {
        for &r in &nodes[j] {
            if len > 0 {
                d.copy(r, len, deps);
            }
        }
    };
    for (j, deps) in gathered.iter().enumerate() {
        copy_out(&mut d, j, (q - 1) * bytes, deps);
    }
    // The ring: leader j sends to leader j + 1; `prev[j]` is leader j's last send.
    let mut prev: Vec<(OpId, OpId)> = Vec::new();
    for s in 0..n - 1 {
        let mut cur = Vec::with_capacity(n as usize);
        for j in 0..n as usize {
            let next = (j + 1) % n as usize;
            let deps: Vec<OpId> = match s {
                0 => gathered[j].clone(),
                _ => vec![prev[j].0, prev[(j + n as usize - 1) % n as usize].1],
            };
            cur.push(d.send(m, nodes[j][0], nodes[next][0], q * bytes, Framing::Message, &deps));
        }
        // Copies of what the previous step brought, added after this step's sends: a leader
        // forwards before it copies.
        if s > 0 {
            for j in 0..n as usize {
                let rx = prev[(j + n as usize - 1) % n as usize].1;
                copy_out(&mut d, j, q * bytes, &[rx]);
            }
        }
        prev = cur;
    }
    for j in 0..prev.len() {
        let rx = prev[(j + prev.len() - 1) % prev.len()].1;
        copy_out(&mut d, j, q * bytes, &[rx]);
    }
    d
}

fn multicast(m: &Machine, bytes: u64, process_copies: bool) -> Dag {
    let (p, n) = (m.ranks(), m.nodes.max(1));
    let engine = |node: u32| p + node;
    let nodes: Vec<Vec<Cpu>> = (0..n).map(|j| m.ranks_of(j)).collect();
    let mut d = Dag::default();
    // Broadcasts in rank order, as every rank posts the allgather's parts.
    for root in 0..p {
        let j = m.node_of(root);
        let others: Vec<u32> = (0..n).filter(|&k| k != j).collect();
        // The root's block into the engine's hands.
        let read = d.copy(if process_copies { root } else { engine(j) }, bytes, &[]);
        let to: Vec<Cpu> = others.iter().map(|&k| engine(k)).collect();
        let rx = match to.is_empty() {
            true => Vec::new(),
            false => d.multicast(engine(j), &to, bytes, Framing::Datagram, &[read]).1,
        };
        for &r in nodes[j as usize].iter().filter(|&&r| r != root) {
            d.copy(if process_copies { r } else { engine(j) }, bytes, &[read]);
        }
        for (&k, &arrived) in others.iter().zip(&rx) {
            for &r in &nodes[k as usize] {
                d.copy(if process_copies { r } else { engine(k) }, bytes, &[arrived]);
            }
        }
    }
    d
}
