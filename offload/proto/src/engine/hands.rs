//! What the engine's own machinery acts through: the node (its communicators, sequencers,
//! links and the protocol), the job table and the outbox (DMA jobs, frames, completions), and
//! the reductions — borrowed together from the engine for one step of a collective, an
//! exchange or an assembly, so none of them holds the engine itself.
use crate::config::EngineConfig;
use crate::engine::action::{Dma, Outbox};
use crate::engine::ids::JobId;
use crate::engine::jobs::Job;
use crate::engine::node::Node;
use crate::engine::reduction::{Over, Reductions, Then};
use crate::intake::regions::Resolved;
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp};
use slotmap::SlotMap;

/// The engine's facilities, borrowed for one step.
pub(crate) struct Hands<'a> {
    pub(crate) config: &'a EngineConfig,
    /// `None` without a fabric: no collective runs.
    pub(crate) node: &'a mut Option<Node>,
    pub(crate) jobs: &'a mut SlotMap<JobId, Job>,
    pub(crate) out: &'a mut Outbox,
    pub(crate) reductions: &'a mut Reductions,
    /// Reductions that ended as they started (nothing to reduce), for the dispatcher to carry
    /// on once this step returns.
    pub(crate) over: &'a mut Vec<Over>,
}

impl Hands<'_> {
    /// Queues `dma` for the driver as job `job` (its answer goes to the job's owner).
    pub(crate) fn dma(&mut self, job: Job, dma: Dma) {
        let id = self.jobs.insert(job);
        self.out.dma(id, dma);
    }

    /// Reduces the blocks of `len` bytes at `sources` (runs of consecutive blocks) in the order
    /// given with `spec` into `dst`, then `then` ([`Reductions::start`]).
    pub(crate) fn reduce(
        &mut self,
        spec: (DataType, ReduceOp),
        len: u64,
        sources: impl IntoIterator<Item = (Option<Resolved>, u32)>,
        dst: Option<Resolved>,
        then: Then,
    ) {
        if let Some(over) = self.reductions.start(spec, len, sources, dst, then, self.jobs, self.out) {
            self.over.push(over);
        }
    }
}
