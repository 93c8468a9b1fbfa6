//! The engine's reductions as DMA jobs: load blocks of host memory into engine memory, reduce
//! them in the order given, store the result — the one shape both reduction steps of an
//! allreduce have:
//!
//! * **a node's step** (Mamidala's intra-node reduction, leader-based composition,
//!   `assembly.rs`): the contributions of the node's processes, in local rank order, reduced
//!   into the node's part at its leader before that part leaves — one message per node
//!   instead of one per process, and `ppn` times fewer bytes for every rank to load and reduce
//!   afterwards;
//! * **the last step** (`composite.rs`): the gathered parts (one per rank, or one per node),
//!   reduced in rank (node) order into the start of the work buffer.
//!
//! Who does the work: the engine. Mamidala et al. split a node's reduction into one sub-block
//! per core (shmem-parallel: contiguous sub-blocks; shmem-cyclic: interleaved ones) so every
//! core of the node reduces a share. Here the engine's one core reduces every sub-block — in
//! the emulation modes the engine thread (or daemon), on a DPU its ARM core — while the host
//! cores do nothing for it; the sub-block order changes neither the result (element-wise
//! operations, each element in local rank order) nor the work. The simulator models both
//! orders with the paper's per-core costs (docs/reproduction.md, Figure 6).
//!
//! Every source block is loaded (a DMA job each; on a DPU, reads across PCIe) into one staging
//! buffer, taken from the spares of earlier reductions: no allocation once the largest has been
//! seen. A failed load or store ends the reduction as failed (`OutOfBounds`); the caller's
//! continuation decides what that means (an operation failed, or a node part never leaving and
//! its communicator broken).
use super::{failed, Dma, Engine, Job, JobId};
use crate::collective::reduce::reduce_blocks;
use crate::intake::regions::Resolved;
use crate::transfer::protocol::{OpCounters, Outcome};
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp, StatusKind};

/// What runs once a reduction's result is stored (or it failed).
#[derive(Clone, Copy, Debug)]
pub(super) enum Then {
    /// Complete host operation `op` with the result's length and `counters`.
    Complete { op: u64, counters: OpCounters },
    /// Node part `seq` of communicator `comm` is assembled: it may leave.
    Assembled { comm: u64, seq: u64 },
}

/// A reduction in progress (key of `Engine::reductions`).
#[derive(Debug)]
pub(super) struct Reduction {
    spec: (DataType, ReduceOp),
    /// Bytes per block.
    len: usize,
    /// The loaded blocks side by side, in reduction order; the result in the first.
    bytes: Vec<u8>,
    /// Loads not over yet.
    pending: u32,
    failed: bool,
    /// Where the result goes.
    dst: Resolved,
    then: Then,
}

impl Engine {
    /// Reduces the blocks of `len` bytes at `sources` — each a run of consecutive blocks — in
    /// the order given with `spec`, stores the result at `dst`, then runs `then`.
    pub(super) fn reduce_into(
        &mut self,
        spec: (DataType, ReduceOp),
        len: u64,
        sources: &[(Resolved, u32)],
        dst: Resolved,
        then: Then,
    ) {
        let blocks: u64 = sources.iter().map(|&(_, n)| u64::from(n)).sum();
        let mut bytes = self.reduce_spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.resize((blocks * len) as usize, 0);
        let key = self.reductions.insert(Reduction {
            spec,
            len: len as usize,
            bytes,
            pending: 0,
            failed: false,
            dst,
            then,
        });
        let mut first = 0u32;
        for &(src, n) in sources.iter().filter(|&&(_, n)| n > 0) {
            let job = JobId(self.jobs.insert(Job::ReduceLoad { r: key, first, blocks: n }));
            self.out.dma(job, Dma::Load { src, len: u64::from(n) * len });
            first += n;
            if let Some(r) = self.reductions.get_mut(key) {
                r.pending += 1;
            }
        }
        if first == 0 {
            // Nothing to reduce (the intake refuses empty calls; a defect if it gets here).
            self.reduce_loaded(key, false);
        }
    }

    /// The engine memory reduction `r`'s job moves: blocks `first..first + blocks` of its
    /// staging (a load), or its result (`blocks` = 0: the store).
    pub(super) fn reduction_staging(&mut self, r: u64, first: u32, blocks: u32) -> Option<&mut [u8]> {
        let red = self.reductions.get_mut(r)?;
        let (from, n) = match blocks {
            0 => (0, 1),
            n => (first as usize, n as usize),
        };
        red.bytes.get_mut(from * red.len..(from + n) * red.len)
    }

    /// One load of reduction `r` is over (`ok`); the last one reduces and stores the result.
    pub(super) fn reduce_loaded(&mut self, r: u64, ok: bool) {
        let Some(red) = self.reductions.get_mut(r) else { return };
        red.pending = red.pending.saturating_sub(1);
        red.failed |= !ok;
        if red.pending > 0 {
            return;
        }
        // (The intake checked type, operation and length: only a failed load fails here.)
        if red.failed || reduce_blocks(red.spec.0, red.spec.1, &mut red.bytes, red.len).is_err() {
            return self.reduction_over(r, false);
        }
        let (dst, len) = (red.dst, red.len as u64);
        let job = JobId(self.jobs.insert(Job::ReduceStore { r }));
        self.out.dma(job, Dma::Store { dst, len });
    }

    /// Reduction `r` is over: its result stored (`ok`) or not.
    pub(super) fn reduction_over(&mut self, r: u64, ok: bool) {
        let Some(red) = self.reductions.remove(r) else { return };
        let len = red.len as u64;
        // Its buffer serves the next reduction (grown, never shrunk).
        self.reduce_spare.push(red.bytes);
        match red.then {
            Then::Complete { op, counters } => {
                let outcome = match ok {
                    true => Outcome { status: StatusKind::Ok, bytes: len, counters },
                    false => failed(StatusKind::OutOfBounds),
                };
                self.finish_collective(op, outcome);
            }
            Then::Assembled { comm, seq } => {
                if let Some(node) = self.node.as_mut() {
                    node.assembled(comm, seq, ok, &mut self.out);
                }
            }
        }
    }
}
