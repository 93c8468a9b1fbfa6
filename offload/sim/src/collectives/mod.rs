//! Schedule models of Mamidala et al.'s multicore collectives (allgather, allreduce, alltoall),
//! priced on the simulator's LogGP fabric, in virtual time, deterministic: no seed, no clock.
//!
//! These are models of *schedules*, not the engine's collectives, which run the real protocol
//! in [`crate::cluster`] and the DST (leader-based and per-rank broadcasts, recursive doubling,
//! Rabenseifner, the pairwise alltoall — `docs/protocol.md`). They answer "what would this
//! schedule cost on this machine", to set the paper's schedules beside its Figures 5–7
//! (`docs/reproduction.md`).
//!
//! Two models, one per kind of figure:
//! * `dag` — across nodes: a schedule is a graph of messages and copies; each runs when the
//!   ones it depends on are over, and takes the resources it needs in time order (first come,
//!   first served): the sending and the receiving core, the node's one NIC (send and receive
//!   sides, serialized per datagram as `net.rs` prices them), shared-memory copies on the
//!   copying core. Used by [`allgather`] and [`alltoall`] (64 nodes × 8 ranks).
//! * `fluid` — within one node: transfers are streams sharing memory-node and link bandwidth
//!   fairly (max-min), each also limited by its core. Used by [`allreduce`] and the
//!   HyperTransport schedule of [`alltoall`]; the machines are [`node::NodeMemory`].
//!
//! [`Machine`] is the multi-node machine: a [`FabricModel`] (its `intra_site` class between
//! nodes, `intra_node` for shared-memory copies), nodes, ranks per node and their placement.
use ringcast_proto::comm::Layout;
use ringcast_proto::model::cost::FRAME_OVERHEAD;
use ringcast_proto::model::FabricModel;

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
mod dag;
mod fluid;
pub mod node;

/// `nodes` nodes of `ppn` ranks each on one switch, placed block (ranks `k·ppn ..` on node `k`)
/// or cyclic (rank `r` on node `r mod nodes`), as [`Layout`] places them.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// Link classes: `intra_site` between nodes, `intra_node` for copies; lanes, switch.
    pub fabric: FabricModel,
    /// Nodes (≥ 1).
    pub nodes: u32,
    /// Ranks per node (≥ 1).
    pub ppn: u32,
    /// Cyclic (true) or block (false) placement.
    pub cyclic: bool,
    /// Payload bytes of one datagram (the engine's `mtu −` [`FRAME_OVERHEAD`]); every datagram
    /// also carries those bytes of header, digest and trailer.
    pub payload: u32,
}

impl Machine {
    /// All ranks, `nodes × ppn`.
    pub fn ranks(&self) -> u32 {
        self.nodes.max(1) * self.ppn.max(1)
    }

    fn layout(&self) -> Layout {
        Layout { ppn: self.ppn.max(1), cyclic: self.cyclic, sites: 1 }
    }

    /// The node of rank `r`.
    pub fn node_of(&self, r: u32) -> u32 {
        self.layout().node_of(self.ranks(), r)
    }

    /// The ranks of node `node`, in rank order (the first is the node's leader).
    pub fn ranks_of(&self, node: u32) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.ppn as usize);
        self.layout().for_ranks_of_node(self.ranks(), node, |r| v.push(r));
        v
    }

    /// Wire time of a `bytes`-byte message on one NIC: its datagrams of [`Machine::payload`]
    /// bytes plus [`FRAME_OVERHEAD`], each occupying the NIC as `net.rs` prices a datagram
    /// sent on all lanes (`max(s·G / lanes, g)`, with [`LogGp::occupancy`]).
    ///
    /// [`LogGp::occupancy`]: ringcast_proto::model::LogGp::occupancy
    pub fn train(&self, bytes: u64) -> Train {
        let payload = u64::from(self.payload.max(1));
        let k = bytes.div_ceil(payload).max(1);
        let last = bytes - (k - 1) * payload;
        let lanes = f64::from(self.fabric.lanes.max(1));
        let link = &self.fabric.intra_site;
        let occ =
            |b: u64| (link.occupancy((b + u64::from(FRAME_OVERHEAD)) as usize) / lanes).max(link.gap_ns);
        let (full, tail) = (occ(payload.min(bytes)), occ(last));
        Train {
            datagrams: k,
            first: if k == 1 { tail } else { full },
            last: tail,
            total: (k - 1) as f64 * full + tail,
        }
    }
}

/// A message as datagrams on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Train {
    /// Datagrams (≥ 1).
    pub datagrams: u64,
    /// NIC time of the first and of the last datagram.
    pub first: f64,
    /// NIC time of the last datagram.
    pub last: f64,
    /// NIC time of all of them.
    pub total: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(ppn: u32, cyclic: bool) -> Machine {
        Machine { fabric: FabricModel::default_cluster(), nodes: 4, ppn, cyclic, payload: 1000 }
    }

    #[test]
    fn placement_follows_layout() {
        let block = machine(3, false);
        assert_eq!(block.ranks_of(1), vec![3, 4, 5]);
        assert_eq!(block.node_of(5), 1);
        let cyclic = machine(3, true);
        assert_eq!(cyclic.ranks_of(1), vec![1, 5, 9]);
        assert_eq!(cyclic.node_of(9), 1);
    }

    #[test]
    fn a_train_is_its_datagrams() {
        let m = machine(1, false);
        let t = m.train(2900);
        assert_eq!(t.datagrams, 3);
        let (g, h) = (m.fabric.intra_site.ns_per_byte, f64::from(FRAME_OVERHEAD));
        assert!((t.total - (2.0 * (1000.0 + h) + 900.0 + h) * g).abs() < 1e-9, "{t:?}");
        // A short datagram still takes the gap.
        assert_eq!(m.train(10).total, m.fabric.intra_site.gap_ns);
        assert_eq!(m.train(0).datagrams, 1, "an empty message is one datagram");
    }
}
