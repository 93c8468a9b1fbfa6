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
//! The blocks are reduced a slice at a time (*rounds*): slice `[at, at + n)` of every source
//! block is loaded (a DMA job each; on a DPU, reads across PCIe) into one staging buffer, the
//! slices are reduced in the order given, and the result's slice is stored at `dst + at` —
//! then the next slice. `blocks × n` stays within `limits.reduce_staging_bytes` (at least one
//! element of each block), so the engine memory a reduction holds is bounded by the
//! configuration, not by the message (a 4 MiB allreduce composed per rank on 64 ranks staged
//! 256 MiB before), and a round's bytes stay in a cache between the load, the reduction and the
//! store. When everything fits, it is one round with one load per run of consecutive blocks.
//! The staging buffer is taken from the spares of earlier reductions: no allocation once the
//! largest has been seen. Slices never overlap across rounds, so a destination that is also a
//! source (the result over a block of the work buffer) is only written where it was read. A
//! failed load or store ends the reduction as failed (`OutOfBounds`, or `RootFailed` where it
//! failed on a call refused at its rank: `Engine::dma_fault`); the caller's continuation
//! decides what that means (an operation failed, a node part poisoned, a doubling carrying on
//! on no memory).
use crate::collective::reduce::reduce_blocks;
use crate::engine::ids::{ExchangeId, OpId, ReductionId, Seq};
use crate::engine::{failed, Dma, Engine, Job};
use crate::intake::regions::Resolved;
use crate::transfer::protocol::{OpCounters, Outcome};
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp, StatusKind};

/// What runs once a reduction's result is stored (or it failed).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Then {
    /// Complete host operation `op` with the result's length and `counters`.
    Complete { op: OpId, counters: OpCounters },
    /// Node part `seq` of communicator `comm` is assembled: it may leave.
    Assembled { comm: u64, seq: Seq },
    /// A step of recursive doubling `key` is over (`doubling.rs`).
    Exchange { key: ExchangeId },
}

/// A reduction in progress (key of `Engine::reductions`).
#[derive(Debug)]
pub(crate) struct Reduction {
    spec: (DataType, ReduceOp),
    /// Bytes per block.
    len: u64,
    /// Where the blocks are: runs of consecutive blocks, in reduction order.
    sources: Vec<(Resolved, u32)>,
    /// Blocks in all.
    blocks: u32,
    /// Bytes of each block per round (a multiple of the element).
    slice: u64,
    /// This round's offset in each block, and its bytes.
    at: u64,
    n: u64,
    /// This round's slices side by side, in reduction order; the result in the first.
    bytes: Vec<u8>,
    /// Loads of this round not over yet.
    pending: u32,
    /// Why a load failed ([`Engine::dma_fault`]), if one did.
    failed: Option<StatusKind>,
    /// Where the result goes.
    dst: Resolved,
    then: Then,
}

impl Engine {
    /// Reduces the blocks of `len` bytes at `sources` — each a run of consecutive blocks — in
    /// the order given with `spec`, stores the result at `dst`, then runs `then`.
    pub(crate) fn reduce_into(
        &mut self,
        spec: (DataType, ReduceOp),
        len: u64,
        sources: &[(Resolved, u32)],
        dst: Resolved,
        then: Then,
    ) {
        let blocks: u32 = sources.iter().map(|&(_, n)| n).sum();
        let budget = self.core.config().limits.reduce_staging_bytes;
        let slice = slice_of(len, blocks, spec.0.size().unwrap_or(1) as u64, budget);
        let mut runs = self.reduce_runs.pop().unwrap_or_default();
        runs.clear();
        runs.extend(sources.iter().copied().filter(|&(_, n)| n > 0));
        let bytes = self.reduce_spare.pop().unwrap_or_default();
        let key = self.reductions.insert(Reduction {
            spec,
            len,
            sources: runs,
            blocks,
            slice,
            at: 0,
            n: 0,
            bytes,
            pending: 0,
            failed: None,
            dst,
            then,
        });
        if blocks == 0 || len == 0 {
            // Nothing to reduce (the intake refuses empty calls; a defect if it gets here).
            return self.reduction_over(key, false);
        }
        self.reduce_round(key);
    }

    /// Loads reduction `r`'s next slice of every block (from offset `at`).
    fn reduce_round(&mut self, r: ReductionId) {
        let Some(red) = self.reductions.get_mut(r) else { return };
        red.n = red.slice.min(red.len - red.at);
        let (n, at, len) = (red.n, red.at, red.len);
        // Every byte is loaded over before it is read: only growth is filled (the first round
        // of a reduction larger than any before; a spare is only cut to size).
        red.bytes.resize((u64::from(red.blocks) * n) as usize, 0);
        let whole = n == len;
        let mut first = 0u32;
        let mut loads = 0u32;
        for i in 0..red.sources.len() {
            let Some(red) = self.reductions.get(r) else { return };
            let (src, count) = red.sources[i];
            // A run of whole blocks is one contiguous load; slices of it are one load each.
            let pieces: &mut dyn Iterator<Item = (u64, u32)> = match whole {
                true => &mut core::iter::once((0, count)),
                false => &mut (0..count).map(|b| (u64::from(b) * len + at, 1)),
            };
            for (offset, k) in pieces {
                let job = self.jobs.insert(Job::ReduceLoad { r, first, blocks: k });
                let from = Resolved { segment: src.segment, offset: src.offset + offset };
                self.out.dma(job, Dma::Load { src: from, len: u64::from(k) * n });
                first += k;
                loads += 1;
            }
        }
        if let Some(red) = self.reductions.get_mut(r) {
            red.pending = loads;
        }
    }

    /// The engine memory reduction `r`'s job moves: slices `first..first + blocks` of its
    /// staging (a load), or its result (`blocks` = 0: the store).
    pub(crate) fn reduction_staging(&mut self, r: ReductionId, first: u32, blocks: u32) -> Option<&mut [u8]> {
        let red = self.reductions.get_mut(r)?;
        let (from, k) = match blocks {
            0 => (0, 1),
            k => (u64::from(first), u64::from(k)),
        };
        red.bytes.get_mut((from * red.n) as usize..((from + k) * red.n) as usize)
    }

    /// One load of reduction `r` is over (`ok`); the last of a round reduces the round's slices
    /// and stores the result's.
    pub(crate) fn reduce_loaded(&mut self, r: ReductionId, ok: bool) {
        let fault = self.dma_fault();
        let Some(red) = self.reductions.get_mut(r) else { return };
        red.pending = red.pending.saturating_sub(1);
        if !ok {
            red.failed = red.failed.or(Some(fault));
        }
        if red.pending > 0 {
            return;
        }
        // (The intake checked type, operation and length: only a failed load fails here.)
        if red.failed.is_some()
            || reduce_blocks(red.spec.0, red.spec.1, &mut red.bytes, red.n as usize).is_err()
        {
            return self.reduction_over(r, false);
        }
        let dst = Resolved { segment: red.dst.segment, offset: red.dst.offset + red.at };
        let job = self.jobs.insert(Job::ReduceStore { r });
        self.out.dma(job, Dma::Store { dst, len: red.n });
    }

    /// A round of reduction `r` is stored (`ok`): the next round, or the end.
    pub(crate) fn reduce_stored(&mut self, r: ReductionId, ok: bool) {
        let fault = self.dma_fault();
        let Some(red) = self.reductions.get_mut(r) else { return };
        red.at += red.n;
        if !ok {
            red.failed = red.failed.or(Some(fault));
        }
        if !ok || red.at >= red.len {
            return self.reduction_over(r, ok);
        }
        self.reduce_round(r);
    }

    /// Reduction `r` is over: its result stored (`ok`) or not.
    pub(crate) fn reduction_over(&mut self, r: ReductionId, ok: bool) {
        let Some(red) = self.reductions.remove(r) else { return };
        let len = red.len;
        let fault = red.failed.unwrap_or(StatusKind::OutOfBounds);
        // Its buffers serve the next reduction (grown, never shrunk; bounded by the staging).
        self.reduce_spare.push(red.bytes);
        self.reduce_runs.push(red.sources);
        match red.then {
            Then::Complete { op, counters } => {
                let outcome = match ok {
                    true => Outcome { status: StatusKind::Ok, bytes: len, counters },
                    false => failed(fault),
                };
                self.finish_collective(op, outcome);
            }
            Then::Assembled { comm, seq } => {
                if let Some(node) = self.node.as_mut() {
                    node.assembled(comm, seq, (!ok).then_some(fault), &mut self.out);
                }
            }
            Then::Exchange { key } => {
                let status = if ok { StatusKind::Ok } else { fault };
                let outcome = Outcome { status, bytes: len, counters: OpCounters::default() };
                // Carried on in `after`, which knows the time.
                self.exchange_done.push((key, outcome));
            }
        }
    }
}

/// Bytes of each block one round reduces: as many whole elements (`elem` bytes) as keep
/// `blocks` slices within `budget`, at least one, at most the block.
fn slice_of(len: u64, blocks: u32, elem: u64, budget: u64) -> u64 {
    let elem = elem.max(1);
    let per_block = budget / u64::from(blocks.max(1));
    (per_block / elem * elem).max(elem).min(len)
}

#[cfg(test)]
mod tests {
    use super::slice_of;

    /// Rounds stay within the budget, in whole elements, and a reduction that fits is one round.
    #[test]
    fn slices_keep_the_staging_within_its_budget() {
        // Fits: one round of the whole block.
        assert_eq!(slice_of(4096, 4, 8, 512 << 10), 4096);
        // 4 MiB blocks, 2 of them, 512 KiB of staging: 256 KiB each.
        assert_eq!(slice_of(4 << 20, 2, 8, 512 << 10), 256 << 10);
        // Whole elements only: 3 blocks of f64 share 1000 bytes as 3 x 328.
        assert_eq!(slice_of(8000, 3, 8, 1000), 328);
        // More blocks than the budget has elements: one element each.
        assert_eq!(slice_of(8000, 1000, 8, 1000), 8);
        // Never more than the block.
        assert_eq!(slice_of(6, 1, 2, 1 << 20), 6);
    }
}
