//! The performance model shared by the simulator and the engine's algorithm choice: LogGP
//! parameters per link class ([`LogGp`]), a node's NIC lanes and its fabric ([`FabricModel`]),
//! and the closed-form costs of every broadcast algorithm ([`cost`], Chiba et al. Table 1
//! extended with the multicast algorithm and LogGP terms) from which [`select`] picks one per call.
//! The engine's fabric is the default cluster with the inter-node class, lanes and switch latency
//! taken from the `model_*` tunables ([`select::fabric_from_config`]); `RINGCAST_ALGORITHM`
//! forces one algorithm instead.
//!
//! How the engines exchange in an allreduce, allgather or alltoall is priced the same way
//! ([`exchange`]: per message, datagram, byte and reduced byte, and the CPUs the engines share)
//! and picked per call ([`compose`]).
//!
//! The simulator *executes* the engine on a fabric priced by a `FabricModel`; the cost formulas
//! only *predict*. `ringcast sim` compares the two, which is how we know the formulas (and so the
//! selection) are right.
pub mod compose;
pub mod cost;
pub mod exchange;
pub mod select;

/// LogGP parameters of one link class (Alexandrov et al.), in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGp {
    /// `L`: wire and switch latency of a datagram.
    pub latency_ns: f64,
    /// `o`: per-datagram processing at the sending and at the receiving end (engine cost).
    pub overhead_ns: f64,
    /// `g`: smallest interval between two datagrams on one NIC lane.
    pub gap_ns: f64,
    /// `G`: time per byte on one NIC lane (the inverse of one lane's bandwidth).
    pub ns_per_byte: f64,
}

impl LogGp {
    /// Time the sending lane is busy with an `s`-byte datagram.
    pub fn occupancy(&self, s: usize) -> f64 {
        (s as f64 * self.ns_per_byte).max(self.gap_ns)
    }
}

/// How the simulated machine is built: link classes, lanes and multicast.
#[derive(Clone, Debug, PartialEq)]
pub struct FabricModel {
    /// Between ranks on one node (shared memory: no NIC, a memory copy).
    pub intra_node: LogGp,
    /// Between nodes of one site (one switch hop; multicast is replicated by the switch).
    pub intra_site: LogGp,
    /// Between sites (long and fat: Chiba's `L`; one WAN pipe per pair of sites).
    pub wan: LogGp,
    /// NIC lanes per node (Chiba: 2); a lane-less send aggregates all of them.
    pub lanes: u32,
    /// Extra latency of a multicast datagram for the switch to replicate it.
    pub switch_ns: f64,
}

impl FabricModel {
    /// A 2020s HPC cluster node: 100 Gb/s per lane, 1 µs switch latency, 0.3 µs engine cost
    /// per datagram, shared memory at 10 GB/s with 0.2 µs latency; WAN 10 ms at 100 Gb/s.
    pub fn default_cluster() -> Self {
        let lane = LogGp { latency_ns: 1_000.0, overhead_ns: 300.0, gap_ns: 50.0, ns_per_byte: 0.08 };
        FabricModel {
            intra_node: LogGp { latency_ns: 200.0, overhead_ns: 150.0, gap_ns: 0.0, ns_per_byte: 0.1 },
            intra_site: lane,
            wan: LogGp { latency_ns: 10_000_000.0, ..lane },
            lanes: 1,
            switch_ns: 200.0,
        }
    }
}
