//! One multicore node as the `fluid` model sees it: sockets of cores, memory nodes
//! with a bandwidth their readers and writers share, per-core copy and reduce speeds, and the
//! links between sockets. Rank `i` runs on core `i`, socket-block (cores `0..cores_per_socket`
//! on socket 0).
//!
//! The paper gives architecture facts, not numbers (§2, §5.1): a quad-socket dual-core
//! Opteron (NUMA: each socket its own memory, sockets linked by HyperTransport in a square)
//! and a dual-socket quad-core Clovertown (one memory behind the chipset for both sockets, L2
//! shared by core pairs). The numbers in the presets are ours: plausible 2008 values, stated
//! with their source. The per-core copy speed and the per-call costs are the fabric's
//! `intra_node` class, so a copy costs here what it costs in `dag`.
use ringcast_proto::model::FabricModel;

/// A node's memory system.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeMemory {
    /// Name for tables.
    pub name: &'static str,
    /// Sockets (a power of two is linked as a hypercube: 2 by one link, 4 as a square).
    pub sockets: u32,
    /// Cores per socket.
    pub cores_per_socket: u32,
    /// One memory node per socket (NUMA: data lives where its writer first touched it), or one
    /// for the whole node (UMA).
    pub numa: bool,
    /// Bandwidth of one memory node, shared by everything reading and writing it, GB/s (= B/ns).
    pub memory_gbps: f64,
    /// One core copying (memcpy), GB/s.
    pub copy_gbps: f64,
    /// One core reducing (reading an operand into an accumulator it keeps in cache), GB/s of
    /// operand.
    pub reduce_gbps: f64,
    /// Bandwidth of a link between sockets, per direction (full duplex), GB/s; `None`: no
    /// links to share (UMA: the one memory is the bottleneck).
    pub link_gbps: Option<f64>,
    /// Fixed cost of one copy or reduce call, ns.
    pub overhead_ns: f64,
    /// Latency of a flag through shared memory, ns.
    pub latency_ns: f64,
}

impl NodeMemory {
    /// The paper's Opteron node: 4 sockets × 2 cores, NUMA. Our numbers: DDR2-667 on two
    /// channels per socket (10.7 GB/s peak) sustains about 6 GB/s; 16-bit HyperTransport at
    /// 1 GHz moves 4 GB/s each way; a K8 core sums doubles streamed from memory at about
    /// 2 GB/s. Copy speed (2.5 GB/s in the Mamidala fixture) and call costs from `fabric`.
    pub fn opteron_2008(fabric: &FabricModel) -> Self {
        NodeMemory {
            name: "Opteron 4×2 NUMA",
            sockets: 4,
            cores_per_socket: 2,
            numa: true,
            memory_gbps: 6.0,
            copy_gbps: 1.0 / fabric.intra_node.ns_per_byte.max(1e-9),
            reduce_gbps: 2.0,
            link_gbps: Some(4.0),
            overhead_ns: fabric.intra_node.overhead_ns,
            latency_ns: fabric.intra_node.latency_ns,
        }
    }

    /// The paper's Clovertown node: 2 sockets × 4 cores, UMA (both front-side buses into one
    /// memory controller). Our number: FB-DIMM 667 behind the 5000-series chipset sustains
    /// about 7 GB/s for the whole node. Cores as [`NodeMemory::opteron_2008`].
    pub fn clovertown_2008(fabric: &FabricModel) -> Self {
        NodeMemory {
            name: "Clovertown 2×4 UMA",
            sockets: 2,
            cores_per_socket: 4,
            numa: false,
            memory_gbps: 7.0,
            link_gbps: None,
            ..NodeMemory::opteron_2008(fabric)
        }
    }

    /// Cores of the node.
    pub fn cores(&self) -> usize {
        (self.sockets.max(1) * self.cores_per_socket.max(1)) as usize
    }

    /// The socket of core `c`.
    pub(crate) fn socket_of(&self, c: usize) -> usize {
        c / self.cores_per_socket.max(1) as usize
    }

    /// Memory nodes: resources `0..memory_nodes()`.
    fn memory_nodes(&self) -> usize {
        if self.numa {
            self.sockets.max(1) as usize
        } else {
            1
        }
    }

    /// The memory node (resource) holding data written first by core `c`.
    pub(crate) fn memory_of(&self, c: usize) -> usize {
        if self.numa {
            self.socket_of(c)
        } else {
            0
        }
    }

    /// Every resource's capacity, bytes per ns: the memory nodes, then one per ordered pair of
    /// sockets (a link direction; unlinked pairs never used).
    pub(crate) fn capacities(&self) -> Vec<f64> {
        let s = self.sockets.max(1) as usize;
        let mut v = vec![self.memory_gbps; self.memory_nodes()];
        v.extend(std::iter::repeat_n(self.link_gbps.unwrap_or(f64::INFINITY), s * s));
        v
    }

    /// The link directions from socket `a` to socket `b`: dimension by dimension on a hypercube
    /// (on the square, 0 → 3 goes through 1), directly otherwise; none without links.
    fn path(&self, mut a: usize, b: usize) -> Vec<usize> {
        let s = self.sockets.max(1) as usize;
        let base = self.memory_nodes();
        let mut hops = Vec::new();
        if self.link_gbps.is_none() || a == b {
            return hops;
        }
        if !s.is_power_of_two() {
            return vec![base + a * s + b];
        }
        let mut bit = 1;
        while a != b {
            if (a ^ b) & bit != 0 {
                hops.push(base + a * s + (a ^ bit));
                a ^= bit;
            }
            bit <<= 1;
        }
        hops
    }

    /// What a core on socket `to` reading data homed at memory of core `from_core` crosses
    /// (and, with `write`, writing it into its own socket's memory): the memory nodes and the
    /// link directions, one byte each per byte moved.
    pub(crate) fn transfer(&self, from_core: usize, to_core: usize, write: bool) -> Vec<(usize, f64)> {
        let mut uses: Vec<(usize, f64)> = vec![(self.memory_of(from_core), 1.0)];
        if write {
            add(&mut uses, self.memory_of(to_core), 1.0);
        }
        let (a, b) = (self.socket_of(from_core), self.socket_of(to_core));
        if self.numa {
            for l in self.path(a, b) {
                add(&mut uses, l, 1.0);
            }
        }
        uses
    }

    /// What core `from_core` writing data from its cache into the memory of core `home_core`
    /// crosses: that memory node and the link directions towards it.
    pub(crate) fn store(&self, from_core: usize, home_core: usize) -> Vec<(usize, f64)> {
        let mut uses: Vec<(usize, f64)> = vec![(self.memory_of(home_core), 1.0)];
        if self.numa {
            for l in self.path(self.socket_of(from_core), self.socket_of(home_core)) {
                add(&mut uses, l, 1.0);
            }
        }
        uses
    }

    /// A barrier through shared-memory flags: `⌈log₂ cores⌉` rounds of one flag latency.
    pub(crate) fn barrier_ns(&self) -> f64 {
        let c = self.cores();
        f64::from(c.next_power_of_two().trailing_zeros()) * self.latency_ns
    }
}

fn add(uses: &mut Vec<(usize, f64)>, r: usize, w: f64) {
    match uses.iter_mut().find(|(x, _)| *x == r) {
        Some((_, v)) => *v += w,
        None => uses.push((r, w)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opteron_square_routes_diagonals_through_a_neighbour() {
        let n = NodeMemory::opteron_2008(&FabricModel::default_cluster());
        assert_eq!(n.cores(), 8);
        // Core 0 (socket 0) to core 6 (socket 3): memory 0 read, memory 3 written, 0→1, 1→3.
        let uses = n.transfer(0, 6, true);
        assert_eq!(uses, vec![(0, 1.0), (3, 1.0), (4 + 1, 1.0), (4 + 4 + 3, 1.0)]);
        // Within a socket: one memory node, read and written.
        assert_eq!(n.transfer(0, 1, true), vec![(0, 2.0)]);
    }

    #[test]
    fn uma_has_one_memory_and_no_links() {
        let n = NodeMemory::clovertown_2008(&FabricModel::default_cluster());
        assert_eq!(n.transfer(0, 7, true), vec![(0, 2.0)]);
        assert_eq!(n.memory_of(7), 0);
    }
}
