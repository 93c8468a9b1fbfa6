//! The node step of Mamidala's leader-based collectives: before a node's part leaves, every
//! local process's block is copied into the root's (the node leader's) receive buffer, so the
//! node sends its blocks as one message instead of one per process — or, for an allreduce or
//! a reduce, the local blocks are reduced there in local rank order (`engine/reduction.rs`), so the
//! node sends one block: its processes' partial result.
//!
//! Each local process posting its node's part hands over its *piece* — where its block is
//! (its send block, or in place) and where it goes in the part (`at`); the leader's post also
//! names the part's buffer. Once every local process has handed its piece over, the engine
//! copies each piece that is not already in place into the leader's buffer (DMA jobs, host to
//! host, as the sequencer's deliveries are), then tells the sequencer the slot may start
//! ([`crate::engine::node::sequencer::Sequencer::assembled`]). A copy that fails (a region
//! deregistered on the way, or one that could not be made, on no memory) is told to the node
//! with its status instead (`Node::assembled`): the part leaves on no memory, aborted, rather
//! than with wrong bytes; local processes in different calls break the communicator.
use crate::engine::action::{Dma, Outbox, NO_MEMORY};
use crate::engine::hands::Hands;
use crate::engine::ids::Seq;
use crate::engine::jobs::Job;
use crate::engine::node::Node;
use crate::engine::reduction::Then;
use crate::intake::regions::Resolved;
use crate::intake::HostId;
use crate::transfer::env::{reference_call, same_call};
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp, RegionKey, StatusKind};

/// One local process's block of a node part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The process (whose DMA queue moves it).
    pub host: HostId,
    /// Where its block is (`None`: no memory).
    pub src: Option<Resolved>,
    /// The block's region (a deregistration fails the copy).
    pub key: RegionKey,
    /// Where it goes: bytes from the start of the part (a reduction: its order, local rank
    /// times the block).
    pub at: u64,
    /// Bytes.
    pub len: u64,
    /// The call's context as its process posted it ([`crate::engine::node::sequencer::Kind::context`]).
    pub context: u64,
}

/// A node part being assembled: sequencer slot `seq` of communicator `comm`.
#[derive(Debug)]
pub(crate) struct Assembly {
    comm: u64,
    seq: Seq,
    /// Local processes that hand a piece over.
    expected: u32,
    /// The part's buffer at the leader (`None`: no memory), once the leader posted, and its
    /// region.
    leader: Option<(Option<Resolved>, RegionKey)>,
    pieces: Vec<Piece>,
    /// Copies still moving once started.
    pending: u32,
    /// Why a copy failed, if one did.
    failed: Option<StatusKind>,
    /// An allreduce's or reduce's node part: the blocks are reduced, not placed side by side.
    reduce: Option<(DataType, ReduceOp)>,
}

/// The node parts being assembled, and the piece lists of finished ones kept for the next.
#[derive(Debug, Default)]
pub(crate) struct Assemblies {
    list: Vec<Assembly>,
    spare: Vec<Vec<Piece>>,
}

impl Assemblies {
    /// Local process `piece.host` posted slot `seq` of communicator `comm`, a node part of
    /// `expected` pieces (`leader`: the part's buffer, when this process is the leader;
    /// `reduce`: the pieces are reduced into it, not placed).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        comm: u64,
        seq: Seq,
        piece: Piece,
        leader: Option<(Option<Resolved>, RegionKey)>,
        expected: u32,
        reduce: Option<(DataType, ReduceOp)>,
        h: &mut Hands<'_>,
    ) {
        let i = match self.list.iter().position(|a| a.comm == comm && a.seq == seq) {
            Some(i) => i,
            None => {
                // Assemblies of a communicator that broke meanwhile never finish: let go of them.
                let node = h.node.as_ref();
                self.list.retain(|a| node.is_some_and(|n| n.usable(a.comm)));
                // A finished assembly's list, reused: no allocation once the largest node is seen.
                let mut pieces = self.spare.pop().unwrap_or_default();
                pieces.clear();
                self.list.push(Assembly {
                    comm,
                    seq,
                    expected,
                    leader: None,
                    pieces,
                    pending: 0,
                    failed: None,
                    reduce,
                });
                self.list.len() - 1
            }
        };
        let a = &mut self.list[i];
        a.pieces.push(piece);
        if leader.is_some() {
            a.leader = leader;
        }
        let Some((dst, dst_key)) = a.leader else { return };
        if (a.pieces.len() as u32) < a.expected {
            return;
        }
        let first = a.pieces.first().map_or(0, |p| p.context);
        let context = reference_call(first, a.pieces.iter().map(|p| p.context));
        let len = a.pieces.first().map_or(0, |p| p.len);
        // (`same_call` says whether two contexts are one call. A piece on no memory is never
        // read: its copy cannot be made, `RootFailed`.)
        if a.pieces.iter().any(|p| !same_call(p.context, context) || p.len != len) {
            // Local processes are in different calls (another collective, type or operation, or
            // one made a call that posted nothing: `Sequencer::posted_nothing`), or disagree on the length — the intake
            // bounded each piece by its own length only, so a piece would land on another
            // rank's place, or a node result of some of them be a wrong result every node
            // takes for the right one: the part would carry blocks of calls that are not this
            // one. It never leaves; the communicator breaks.
            let a = self.list.swap_remove(i);
            if let Some(node) = h.node.as_mut() {
                node.assembled(a.comm, a.seq, Some(StatusKind::DigestMismatch), h.out);
            }
            self.spare.push(a.pieces);
            return;
        }
        if let Some(spec) = a.reduce {
            return self.reduce_pieces(i, spec, dst, h);
        }
        for p in &a.pieces {
            let to = dst.map(|d| Resolved { segment: d.segment, offset: d.offset + p.at });
            if p.src == to {
                continue; // in place at the leader already (or both on no memory)
            }
            match Dma::copy(p.host, p.src, to, p.len, [p.key, dst_key]) {
                Some(dma) => {
                    a.pending += 1;
                    h.dma(Job::Assemble { comm, seq }, dma);
                }
                // An end on no memory: the copy fails where it is made.
                None => a.failed = a.failed.or(Some(NO_MEMORY)),
            }
        }
        if a.pending == 0 {
            self.done(i, h.node, h.out);
        }
    }

    /// One copy of the assembly of slot `seq` of communicator `comm` is over (`ok`; `fault`:
    /// why, if not).
    pub(crate) fn copied(
        &mut self,
        comm: u64,
        seq: Seq,
        ok: bool,
        fault: StatusKind,
        node: &mut Option<Node>,
        out: &mut Outbox,
    ) {
        let Some(i) = self.list.iter().position(|a| a.comm == comm && a.seq == seq) else { return };
        let a = &mut self.list[i];
        a.pending = a.pending.saturating_sub(1);
        if !ok {
            a.failed = a.failed.or(Some(fault));
        }
        if a.pending == 0 {
            self.done(i, node, out);
        }
    }

    /// Every piece of assembly `i`, a reduction's node part, is handed over: reduce them in
    /// local rank order into the leader's buffer `dst`; the part leaves once it is stored.
    fn reduce_pieces(
        &mut self,
        i: usize,
        spec: (DataType, ReduceOp),
        dst: Option<Resolved>,
        h: &mut Hands<'_>,
    ) {
        let mut a = self.list.swap_remove(i);
        a.pieces.sort_unstable_by_key(|p| p.at);
        // (Every piece has the same length: checked above.)
        let len = a.pieces.first().map_or(0, |p| p.len);
        let sources = a.pieces.iter().map(|p| (p.src, 1));
        let then = Then::Assembled { comm: a.comm, seq: a.seq };
        h.reduce(spec, len, sources, dst, then);
        self.spare.push(a.pieces);
    }

    fn done(&mut self, i: usize, node: &mut Option<Node>, out: &mut Outbox) {
        let a = self.list.swap_remove(i);
        if let Some(node) = node.as_mut() {
            node.assembled(a.comm, a.seq, a.failed, out);
        }
        self.spare.push(a.pieces);
    }
}
