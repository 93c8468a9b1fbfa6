//! The schedule models of `ringcast_sim::collectives` against what can be worked out by hand
//! and against the orderings Mamidala et al. report: a ring of one rank per node is `P − 1`
//! LogGP steps; the leader-based allgather beats the flat ring on 64 × 8 cyclic and reduces to
//! it, up to its copies, with one rank per node; shmem-cyclic is not slower than shmem-parallel
//! and both beat the single reducer at 1 MiB; the bidirectional alltoall schedule beats the
//! one-direction one where there are links to share. All times are virtual: deterministic.
use ringcast_proto::model::{FabricModel, LogGp};
use ringcast_sim::collectives::allgather::{self, Allgather};
use ringcast_sim::collectives::allreduce::{self, Allreduce};
use ringcast_sim::collectives::alltoall::{self, Alltoall, NodeSchedule};
use ringcast_sim::collectives::node::NodeMemory;
use ringcast_sim::collectives::Machine;

/// The fabric of `fixtures/sim/mamidala-leaders-64x8.toml`: InfiniBand DDR (16 Gb/s), 2 µs,
/// 1 µs per message; shared memory at 2.5 GB/s per copy.
fn ddr() -> FabricModel {
    FabricModel {
        intra_site: LogGp { latency_ns: 2000.0, overhead_ns: 1000.0, gap_ns: 100.0, ns_per_byte: 0.5 },
        intra_node: LogGp { latency_ns: 300.0, overhead_ns: 300.0, gap_ns: 0.0, ns_per_byte: 0.4 },
        switch_ns: 200.0,
        ..FabricModel::default_cluster()
    }
}

fn machine(nodes: u32, ppn: u32, cyclic: bool) -> Machine {
    Machine { fabric: ddr(), nodes, ppn, cyclic, payload: 8940 }
}

fn ag(alg: Allgather, m: &Machine, bytes: u64) -> f64 {
    allgather::time(alg, m, bytes).expect("a power-of-two machine")
}

/// Within `tol` (relative).
fn near(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs()
}

#[test]
fn a_ring_of_one_rank_per_node_is_p_minus_1_loggp_steps() {
    let m = machine(16, 1, false);
    let f = &m.fabric.intra_site;
    for bytes in [8, 1000, 65_536, 1 << 20] {
        // A send-receive step: o, the message's datagrams on the wire, L, o.
        let step = 2.0 * f.overhead_ns + f.latency_ns + m.train(bytes).total;
        let t = ag(Allgather::FlatRing, &m, bytes);
        assert!(near(t, 15.0 * step, 1e-9), "{bytes} B: {t} ns against 15 × {step} ns");
    }
}

#[test]
fn the_leader_based_allgather_beats_the_flat_ring_at_64x8_from_64_kib() {
    for bytes in [64 << 10, 256 << 10] {
        let cyclic = machine(64, 8, true);
        let leaders = ag(Allgather::Leaders, &cyclic, bytes);
        let ring = ag(Allgather::FlatRing, &cyclic, bytes);
        // Cyclic: the flat ring pushes every block through every NIC 8 times (once per rank).
        assert!(ring > 4.0 * leaders, "{bytes} B cyclic: ring {ring} leaders {leaders}");
        // Block: still better — the flat ring copies every block twice per rank through shared memory.
        let block = machine(64, 8, false);
        assert!(ag(Allgather::FlatRing, &block, bytes) > 1.2 * ag(Allgather::Leaders, &block, bytes));
    }
}

#[test]
fn leaders_and_the_flat_ring_coincide_with_one_rank_per_node_up_to_the_copies() {
    let m = machine(32, 1, false);
    let n = &m.fabric.intra_node;
    for bytes in [1024, 65_536, 1 << 20] {
        let (leaders, ring) = (ag(Allgather::Leaders, &m, bytes), ag(Allgather::FlatRing, &m, bytes));
        // The leader's gather copy before the ring, its last copy-out after it; the copies in
        // between overlap the ring.
        let copy = n.overhead_ns + n.latency_ns + bytes as f64 * n.ns_per_byte;
        assert!(leaders >= ring && leaders <= ring + 2.0 * copy + 1e-6, "{bytes}: {leaders} vs {ring}");
    }
}

#[test]
fn placement_changes_the_flat_schedules_only() {
    let (block, cyclic) = (machine(16, 8, false), machine(16, 8, true));
    for alg in [Allgather::Leaders, Allgather::MulticastEngineCopies, Allgather::MulticastProcessCopies] {
        assert_eq!(ag(alg, &block, 16_384), ag(alg, &cyclic, 16_384), "{alg:?}");
    }
    // Recursive doubling's big last steps stay on the node with cyclic placement, its first
    // small ones with block placement: cyclic is the better placement for it, block for the ring.
    let b = 65_536;
    assert!(
        ag(Allgather::FlatRecursiveDoubling, &cyclic, b) < ag(Allgather::FlatRecursiveDoubling, &block, b)
    );
    assert!(ag(Allgather::FlatRing, &block, b) < ag(Allgather::FlatRing, &cyclic, b));
}

#[test]
fn the_multicast_allgather_is_bound_by_the_receiving_nic_or_by_the_engines_copies() {
    let m = machine(16, 8, false);
    let (p, q) = (m.ranks() as f64, 8.0);
    let bytes = 65_536;
    // Every NIC takes the 120 blocks of the other nodes, one after another.
    let nic = (p - q) * m.train(bytes).total;
    let procs = ag(Allgather::MulticastProcessCopies, &m, bytes);
    assert!(procs >= nic && procs < 1.1 * nic, "{procs} against the NIC's {nic}");
    // One engine core writes every block into each of its 8 processes.
    let n = &m.fabric.intra_node;
    let copies = (p - q) * q * (n.overhead_ns + bytes as f64 * n.ns_per_byte);
    let engine = ag(Allgather::MulticastEngineCopies, &m, bytes);
    assert!(engine >= copies && engine < 1.2 * copies, "{engine} against the copies' {copies}");
}

#[test]
fn recursive_doubling_needs_a_power_of_two() {
    assert!(allgather::time(Allgather::FlatRecursiveDoubling, &machine(3, 2, false), 100).is_none());
    assert!(allgather::time(Allgather::FlatRing, &machine(3, 2, false), 100).is_some());
}

#[test]
fn shmem_cyclic_is_not_slower_than_parallel_and_both_beat_the_single_reducer_at_1_mib() {
    let f = ddr();
    for node in [NodeMemory::opteron_2008(&f), NodeMemory::clovertown_2008(&f)] {
        let at = |alg| allreduce::time(alg, &node, 1 << 20);
        let (single, parallel, cyclic) =
            (at(Allreduce::SingleReducer), at(Allreduce::ShmemParallel), at(Allreduce::ShmemCyclic));
        assert!(cyclic <= parallel * (1.0 + 1e-3), "{}: cyclic {cyclic} parallel {parallel}", node.name);
        assert!(parallel < single, "{}: parallel {parallel} single {single}", node.name);
    }
}

#[test]
fn the_visiting_order_matters_on_numa_only() {
    let f = ddr();
    let at = |node: &NodeMemory, alg| allreduce::time(alg, node, 1 << 20);
    // UMA: one memory for all, so every order meets the same contention (the paper: "identical").
    let uma = NodeMemory::clovertown_2008(&f);
    assert!(near(at(&uma, Allreduce::ShmemCyclic), at(&uma, Allreduce::ShmemParallel), 0.01));
    // NUMA: the same order puts all eight cores on one memory node at a time.
    let numa = NodeMemory::opteron_2008(&f);
    assert!(at(&numa, Allreduce::ShmemCyclic) < 0.8 * at(&numa, Allreduce::ShmemParallel));
}

#[test]
fn the_bidirectional_alltoall_schedule_beats_the_one_direction_one() {
    let f = ddr();
    let numa = NodeMemory::opteron_2008(&f);
    for bytes in [65_536, 1 << 20] {
        let one = alltoall::node_time(NodeSchedule::OneDirection, &numa, bytes).expect("8 cores");
        let two = alltoall::node_time(NodeSchedule::Bidirectional, &numa, bytes).expect("8 cores");
        assert!(two < 0.95 * one, "{bytes}: bidirectional {two} one direction {one}");
    }
    // Without links between sockets (UMA) there is nothing to schedule.
    let uma = NodeMemory::clovertown_2008(&f);
    let one = alltoall::node_time(NodeSchedule::OneDirection, &uma, 1 << 20).expect("8 cores");
    let two = alltoall::node_time(NodeSchedule::Bidirectional, &uma, 1 << 20).expect("8 cores");
    assert!(near(two, one, 0.01), "{two} {one}");
}

#[test]
fn node_aggregation_pays_off_for_small_alltoall_messages_only() {
    let m = machine(16, 8, false);
    let at = |alg, bytes| alltoall::time(alg, &m, bytes);
    assert!(at(Alltoall::NodeAggregated, 16) * 2.0 < at(Alltoall::Pairwise, 16));
    // Large: both move the same bytes through each NIC.
    let (agg, pair) = (at(Alltoall::NodeAggregated, 65_536), at(Alltoall::Pairwise, 65_536));
    assert!(near(agg, pair, 0.1), "{agg} {pair}");
}

#[test]
fn every_model_is_deterministic() {
    let m = machine(8, 4, true);
    let node = NodeMemory::opteron_2008(&ddr());
    for _ in 0..2 {
        assert_eq!(ag(Allgather::Leaders, &m, 5000), ag(Allgather::Leaders, &m, 5000));
        assert_eq!(alltoall::time(Alltoall::Pairwise, &m, 300), alltoall::time(Alltoall::Pairwise, &m, 300));
        let a = allreduce::time(Allreduce::ShmemCyclic, &node, 12_345);
        assert_eq!(a, allreduce::time(Allreduce::ShmemCyclic, &node, 12_345));
        assert!(a.is_finite() && a > 0.0);
    }
}
