//! The engine's reductions as DMA jobs: load blocks of host memory into engine memory, reduce
//! them in the order given, store the result — the one shape both reduction steps of an
//! allreduce have:
//!
//! * **a node's step** (Mamidala's intra-node reduction, leader-based composition,
//!   `node/assembly.rs`): the contributions of the node's processes, in local rank order, reduced
//!   into the node's part at its leader before that part leaves — one message per node
//!   instead of one per process, and `ppn` times fewer bytes for every rank to load and reduce
//!   afterwards;
//! * **the last step** (`allreduce/`): the gathered parts (one per rank, or one per node),
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
//! could not be made, on no memory); the caller's continuation ([`Then`], which the
//! dispatcher carries out) decides what that means (an operation failed, a node part
//! on no memory, an exchange carrying on on no memory).
use crate::collective::reduce::reduce_blocks;
use crate::engine::action::{Dma, Outbox, NO_MEMORY};
use crate::engine::ids::{ExchangeId, JobId, OpId, ReductionId, Seq};
use crate::engine::jobs::Job;
use crate::intake::regions::Resolved;
use crate::transfer::protocol::OpCounters;
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp, StatusKind};
use slotmap::SlotMap;

/// What runs once a reduction's result is stored (or it failed): the dispatcher's to carry out.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Then {
    /// Complete host operation `op` with the result's length and `counters`.
    Complete { op: OpId, counters: OpCounters },
    /// Node part `seq` of communicator `comm` is assembled: it may leave.
    Assembled { comm: u64, seq: Seq },
    /// A step of exchange `key` is over (`exchange.rs`).
    Exchange { key: ExchangeId },
}

/// A reduction that ended: what runs next, whether its result is stored, its bytes, and why it
/// failed if it did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Over {
    pub(crate) then: Then,
    pub(crate) ok: bool,
    pub(crate) len: u64,
    pub(crate) fault: StatusKind,
}

/// A reduction in progress.
#[derive(Debug)]
struct Reduction {
    spec: (DataType, ReduceOp),
    /// Bytes per block.
    len: u64,
    /// Where the blocks are: runs of consecutive blocks, in reduction order (`None`: no memory).
    sources: Vec<(Option<Resolved>, u32)>,
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
    /// Why a load failed, if one did.
    failed: Option<StatusKind>,
    /// Where the result goes (`None`: no memory).
    dst: Option<Resolved>,
    then: Then,
}

/// The reductions in progress, and the buffers of finished ones kept for the next.
#[derive(Debug)]
pub(crate) struct Reductions {
    table: SlotMap<ReductionId, Reduction>,
    /// Reduction buffers between uses (one per reduction ever in flight at once).
    spare: Vec<Vec<u8>>,
    /// The source lists of reductions between uses (as `spare`).
    runs: Vec<Vec<(Option<Resolved>, u32)>>,
    /// `limits.reduce_staging_bytes`.
    budget: u64,
}

impl Reductions {
    /// No reduction yet; each may stage up to `budget` bytes per round.
    pub(crate) fn new(budget: u64) -> Reductions {
        Reductions { table: SlotMap::with_key(), spare: Vec::new(), runs: Vec::new(), budget }
    }

    /// Reduces the blocks of `len` bytes at `sources` — each a run of consecutive blocks — in
    /// the order given with `spec`, stores the result at `dst`, then `then`. `Some` when it is
    /// over at once (nothing to reduce: the intake refuses empty calls, a defect if it gets
    /// here).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        &mut self,
        spec: (DataType, ReduceOp),
        len: u64,
        sources: impl IntoIterator<Item = (Option<Resolved>, u32)>,
        dst: Option<Resolved>,
        then: Then,
        jobs: &mut SlotMap<JobId, Job>,
        out: &mut Outbox,
    ) -> Option<Over> {
        let mut runs = self.runs.pop().unwrap_or_default();
        runs.clear();
        runs.extend(sources.into_iter().filter(|&(_, n)| n > 0));
        let blocks: u32 = runs.iter().map(|&(_, n)| n).sum();
        let slice = slice_of(len, blocks, spec.0.size().unwrap_or(1) as u64, self.budget);
        let bytes = self.spare.pop().unwrap_or_default();
        let key = self.table.insert(Reduction {
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
            return self.over(key, false);
        }
        self.round(key, jobs, out)
    }

    /// Loads reduction `r`'s next slice of every block (from offset `at`). A load from no
    /// memory cannot be made: it fails where it is made ([`NO_MEMORY`]); `Some` when that
    /// leaves none to wait for, and the reduction is over.
    fn round(&mut self, r: ReductionId, jobs: &mut SlotMap<JobId, Job>, out: &mut Outbox) -> Option<Over> {
        let red = self.table.get_mut(r)?;
        red.n = red.slice.min(red.len - red.at);
        let (n, at, len) = (red.n, red.at, red.len);
        // Every byte is loaded over before it is read: only growth is filled (the first round
        // of a reduction larger than any before; a spare is only cut to size).
        red.bytes.resize((u64::from(red.blocks) * n) as usize, 0);
        let whole = n == len;
        let mut first = 0u32;
        let mut loads = 0u32;
        let mut unmade = false;
        for &(src, count) in &red.sources {
            // A run of whole blocks is one contiguous load; slices of it are one load each.
            let pieces: &mut dyn Iterator<Item = (u64, u32)> = match whole {
                true => &mut core::iter::once((0, count)),
                false => &mut (0..count).map(|b| (u64::from(b) * len + at, 1)),
            };
            for (offset, k) in pieces {
                match src {
                    Some(src) => {
                        let job = jobs.insert(Job::Reduce { r, load: Some((first, k)) });
                        let from = Resolved { segment: src.segment, offset: src.offset + offset };
                        out.dma(job, Dma::Load { src: from, len: u64::from(k) * n });
                        loads += 1;
                    }
                    None => unmade = true,
                }
                first += k;
            }
        }
        red.pending = loads;
        if unmade {
            red.failed = red.failed.or(Some(NO_MEMORY));
        }
        if loads == 0 {
            return self.over(r, false);
        }
        None
    }

    /// The engine memory reduction `r`'s job moves: slices `first..first + blocks` of its
    /// staging (a load), or its result (`None`: the store).
    pub(crate) fn staging(&mut self, r: ReductionId, load: Option<(u32, u32)>) -> Option<&mut [u8]> {
        let red = self.table.get_mut(r)?;
        let (from, k) = match load {
            None | Some((_, 0)) => (0, 1),
            Some((first, k)) => (u64::from(first), u64::from(k)),
        };
        red.bytes.get_mut((from * red.n) as usize..((from + k) * red.n) as usize)
    }

    /// A job of reduction `r` is over (`ok`; `fault`: why, if not): the last load of a round
    /// reduces the round's slices and stores the result's; a store goes on to the next round.
    /// `Some` when the reduction is over.
    pub(crate) fn job_done(
        &mut self,
        r: ReductionId,
        load: Option<(u32, u32)>,
        ok: bool,
        fault: StatusKind,
        jobs: &mut SlotMap<JobId, Job>,
        out: &mut Outbox,
    ) -> Option<Over> {
        match load {
            Some(_) => self.loaded(r, ok, fault, jobs, out),
            None => self.stored(r, ok, fault, jobs, out),
        }
    }

    fn loaded(
        &mut self,
        r: ReductionId,
        ok: bool,
        fault: StatusKind,
        jobs: &mut SlotMap<JobId, Job>,
        out: &mut Outbox,
    ) -> Option<Over> {
        let red = self.table.get_mut(r)?;
        red.pending = red.pending.saturating_sub(1);
        if !ok {
            red.failed = red.failed.or(Some(fault));
        }
        if red.pending > 0 {
            return None;
        }
        // (The intake checked type, operation and length: only a failed load fails here.)
        if red.failed.is_some()
            || reduce_blocks(red.spec.0, red.spec.1, &mut red.bytes, red.n as usize).is_err()
        {
            return self.over(r, false);
        }
        let Some(dst) = red.dst.map(|d| Resolved { segment: d.segment, offset: d.offset + red.at }) else {
            // No memory: the store fails where it is made.
            return self.stored(r, false, NO_MEMORY, jobs, out);
        };
        let len = red.n;
        let job = jobs.insert(Job::Reduce { r, load: None });
        out.dma(job, Dma::Store { dst, len });
        None
    }

    fn stored(
        &mut self,
        r: ReductionId,
        ok: bool,
        fault: StatusKind,
        jobs: &mut SlotMap<JobId, Job>,
        out: &mut Outbox,
    ) -> Option<Over> {
        let red = self.table.get_mut(r)?;
        red.at += red.n;
        if !ok {
            red.failed = red.failed.or(Some(fault));
        }
        if !ok || red.at >= red.len {
            return self.over(r, ok);
        }
        self.round(r, jobs, out)
    }

    /// Reduction `r` is over: its result stored (`ok`) or not.
    fn over(&mut self, r: ReductionId, ok: bool) -> Option<Over> {
        let red = self.table.remove(r)?;
        let fault = red.failed.unwrap_or(StatusKind::OutOfBounds);
        // Its buffers serve the next reduction (grown, never shrunk; bounded by the staging).
        self.spare.push(red.bytes);
        self.runs.push(red.sources);
        Some(Over { then: red.then, ok, len: red.len, fault })
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
