//! The jobs the driver carries out and answers, and whose each one is: a
//! [`JobId`](crate::engine::JobId) names one of
//! these until its answer comes back ([`super::Engine::handle_dma_done`],
//! [`super::Engine::handle_join_done`]) and the dispatcher hands the answer to its owner. One
//! variant per kind of owner — a collective's own copies all go to [`Job::Call`], whatever the
//! collective — so a new collective adds none.
use crate::engine::ids::{CallId, ExchangeId, OpId, ReductionId, Seq};
use crate::transfer::protocol::{DmaToken, Outcome};
use alloc::vec::Vec;

/// What a [`JobId`] stands for.
#[derive(Debug)]
pub(crate) enum Job {
    /// A COPY descriptor's bytes.
    Copy { op: OpId, len: u64 },
    /// The reliable-transfer layer's load or store of a broadcast's channel.
    Transfer(DmaToken),
    /// A delivery's copy into one more local buffer (`node/sequencer.rs`), then the outcome of
    /// the part it delivers; then the primary's, if this was the last copy reading its buffer.
    Deliver { part: CallId, outcome: Outcome, primary: Option<CallId> },
    /// A communicator's creation record, loaded into `bytes`.
    Record { op: OpId, local: u32, comm: u64, bytes: Vec<u8> },
    /// The multicast group of the communicator in slot `slot`, created by `op`.
    Join { op: OpId, slot: usize },
    /// A copy a call makes itself (a block into its place): one of its parts.
    Call(CallId),
    /// Blocks `first..first + blocks` of reduction `r`'s staging being loaded, or (`None`) its
    /// result's slice being stored (`reduction.rs`).
    Reduce { r: ReductionId, load: Option<(u32, u32)> },
    /// One copy of a node part's assembly (`node/assembly.rs`): slot `seq` of `comm`.
    Assemble { comm: u64, seq: Seq },
    /// A local copy of an exchange between the engines (`exchange.rs`).
    Exchange(ExchangeId),
}
