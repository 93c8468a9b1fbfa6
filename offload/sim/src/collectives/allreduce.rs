//! Allreduce within one node (Mamidala et al. §4.2, Figures 4 and 6(a,b)) on the
//! `fluid` model of a [`NodeMemory`]: `C` cores each hold `bytes`; all end holding
//! the reduction. Three schedules share steps 0 and the barriers:
//!
//! 0. every core copies its contribution into block `i` of a shared region — which lives in
//!    its own memory node (first touch), so afterwards block `i` is "close to" core `i`;
//!    a barrier.
//! 1. the reduction (below); a barrier.
//! 2. every core copies the result to its own buffer.
//!
//! The reducing core keeps its accumulator in cache and reads each operand from the memory
//! node of the block that holds it, through the links between sockets; the result is written
//! back where the reduction started. Each memory node's bandwidth is shared by all its readers
//! and writers, which is how the visiting order matters — the reason the paper gives.
use super::fluid::{Flow, Program};
use super::node::NodeMemory;

/// An intra-node allreduce schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allreduce {
    /// The shared-memory baseline: core 0 alone reduces the `C` blocks into block 0 (reading
    /// them in order 0, 1, …); every core then copies block 0 out.
    SingleReducer,
    /// shmem-parallel: each block is cut into `C` sub-blocks; core `i` reduces sub-block `i` of
    /// every block, all cores visiting the blocks in the same order 0, 1, …, `C − 1`, into
    /// block 0 (the paper's "0R in the space of 0a"); every core then copies block 0 out.
    ShmemParallel,
    /// shmem-cyclic: as shmem-parallel, but core `i` visits the blocks in the order `i, i + 1,
    /// …` (mod `C`) and so reduces into its own block `i`; every core then copies the result's
    /// sub-blocks out in the same cyclic order, sub-block `i` first.
    ShmemCyclic,
}

impl Allreduce {
    /// Every schedule, in table order.
    pub const ALL: [Allreduce; 3] =
        [Allreduce::SingleReducer, Allreduce::ShmemParallel, Allreduce::ShmemCyclic];

    /// Short name (tables, plots).
    pub fn name(self) -> &'static str {
        match self {
            Allreduce::SingleReducer => "single reducer",
            Allreduce::ShmemParallel => "shmem-parallel",
            Allreduce::ShmemCyclic => "shmem-cyclic",
        }
    }
}

/// Virtual nanoseconds for `alg` to allreduce `bytes` per core on `node`.
pub fn time(alg: Allreduce, node: &NodeMemory, bytes: u64) -> f64 {
    let c = node.cores();
    let n = bytes as f64;
    let sub = n / c as f64;
    let mut p = Program::new(c, node.capacities());
    let flow = |core: usize, bytes: f64, gbps: f64, uses: Vec<(usize, f64)>, setup_ns: f64| Flow {
        cores: vec![core],
        bytes,
        cap: gbps,
        uses,
        setup_ns,
    };
    let o = node.overhead_ns;
    // Where core i's reduction starts, and so where its result sub-block lives: block 0 for
    // every core, or its own block i.
    let first = |i: usize| if alg == Allreduce::ShmemCyclic { i } else { 0 };
    // 0. Into the shared region: read the private buffer, write block i, both on core i's node.
    for i in 0..c {
        p.push(flow(i, n, node.copy_gbps, node.transfer(i, i, true), o));
    }
    p.barrier(node.barrier_ns());
    // 1. Reduce: (core, block visited) in order; the result goes back where it started.
    match alg {
        Allreduce::SingleReducer => {
            for j in 0..c {
                p.push(flow(0, n, node.reduce_gbps, node.transfer(j, 0, false), o));
            }
            p.push(flow(0, n, node.copy_gbps, node.store(0, 0), 0.0));
        }
        Allreduce::ShmemParallel | Allreduce::ShmemCyclic => {
            for i in 0..c {
                let start = first(i);
                for k in 0..c {
                    let j = (start + k) % c;
                    p.push(flow(i, sub, node.reduce_gbps, node.transfer(j, i, false), o));
                }
                p.push(flow(i, sub, node.copy_gbps, node.store(i, start), 0.0));
            }
        }
    }
    p.barrier(node.barrier_ns());
    // 2. Out to every core's own buffer.
    for i in 0..c {
        match alg {
            Allreduce::SingleReducer | Allreduce::ShmemParallel => {
                p.push(flow(i, n, node.copy_gbps, node.transfer(0, i, true), o));
            }
            Allreduce::ShmemCyclic => {
                for k in 0..c {
                    let j = (i + k) % c;
                    p.push(flow(i, sub, node.copy_gbps, node.transfer(first(j), i, true), o));
                }
            }
        }
    }
    p.run()
}
