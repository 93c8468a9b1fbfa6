//! The pairwise alltoall between the engines (`protocol.alltoall_between = pairwise`), in
//! Mamidala's bidirectional order, over the pair communicators (`pairs.rs`).
//!
//! The multicast alltoall (`alltoall.rs`) sends every rank's whole send buffer to every rank:
//! `P` times the bytes each receiver needs. The pairwise exchange sends each block once, from
//! its sender's send buffer straight into its place in its receiver's buffer — no work buffer,
//! no scatter afterwards. For a communicator over `E` engines, engine `k` holding ranks
//! `first_k .. first_k + count_k` (consecutive, as the leader-based compositions need), at
//! every engine `i`:
//! 1. every local process posts one slot of the communicator's gather, carried out by the
//!    engine ([`super::gather::Kind::local`], [`super::gather::Kind::in_place`]: nothing to copy
//!    when it is done); its send and receive buffers are noted here. The slot starts once every
//!    local process posted — the node-wide step the transfers' order needs;
//! 2. the node's own blocks: a DMA copy per pair of local ranks `(r, q)`, block `q` of `r`'s
//!    send buffer into `recv_q + r · len`;
//! 3. **bidirectional schedule**: for `k = 1, …, E − 1`, engine `i` sends to `i + k` and
//!    receives from `i − k` (mod `E`) — every engine sends to one and receives from another at
//!    each step, so every engine's links carry one message each way (Mamidala's bidirectional
//!    alltoall; the one-directional pairwise order `i ^ k` needs a power of two). A send to
//!    engine `j` is one transfer per `(r, q)`, `r` a local rank and `q` one of `j`'s, block `q`
//!    of `r`'s send buffer; a receive from `j` one per `(r, q)`, `r` one of `j`'s ranks and `q`
//!    a local one, into `recv_q + r · len` — in `r`-major order at both ends. On pair `(i, j)`
//!    the transfers `i → j` come at step `j − i` and `j → i` at step `E − (j − i)` at *both*
//!    ends, so both post them in one order (at step `E/2` both directions meet: the lower
//!    engine's first);
//! 4. the slot is done once every transfer and copy is: each local process's operation
//!    completes with `size · len` bytes, or with the first failure's status.
//!
//! Every transfer is a reliable broadcast on a two-engine communicator (CRC, tag and MAC with
//! the call's context, bitmaps, repair, back-off, `PeerUnreachable` within the peer timeout).
//! All transfers of the call are posted at once — the pair's queue takes them in order — and it
//! runs, as a doubling does, one at a time per communicator, so calls never interleave on a
//! pair. With `ppn` processes per node a pair of engines carries `ppn²` blocks each way as as
//! many messages: no node aggregation here (the multicast alltoall aggregates per node); the
//! measured trade is in docs/performance.md, "Pairwise alltoall".
use super::composite::at;
use super::doubling::What;
use super::pairs::Transfer;
use super::{failed, Dma, Engine, Job, JobId};
use crate::intake::regions::Resolved;
use crate::intake::{GatherCall, HostId};
use crate::transfer::protocol::Outcome;
use crate::Nanos;
use alloc::vec::Vec;
use ringcast_abi::{RegionKey, StatusKind};

/// One local process's part in a pairwise alltoall.
#[derive(Clone, Copy, Debug)]
pub(super) struct Local {
    /// Its rank in the communicator.
    pub rank: u32,
    pub host: HostId,
    /// Its send and receive buffers, and their regions.
    pub send: Resolved,
    pub recv: Resolved,
    pub keys: [RegionKey; 2],
    /// Its block length and its call's context (its skipped calls included): the slot's, or
    /// nothing moves.
    pub len: u64,
    pub context: u64,
}

impl Engine {
    /// An alltoall's one part when it runs pairwise: this node's slot, carried out by the
    /// engine once every local process posted it. Posts nothing else yet.
    pub(super) fn post_pairwise(&mut self, a: &GatherCall, local: u32, token: u64, context: u64, mine: u32) {
        let Some(node) = self.node.as_mut() else {
            return self.finish_part(token, failed(StatusKind::UnknownCommunicator));
        };
        let first = match node.ranges(a.comm) {
            Some((r, _)) if (mine as usize) < r.len() => r[mine as usize].0,
            _ => {
                self.skipped_call(a.host, a.comm);
                return self.finish_part(token, failed(StatusKind::UnknownCommunicator));
            }
        };
        let kind =
            super::gather::Kind { all: true, context, local: true, in_place: true, ..Default::default() };
        let full = node.context_of(local, a.comm, context);
        match node.post(local, a.comm, first, a.recv, a.len, token, kind) {
            Ok(seq) => {
                let me = Local {
                    rank: a.me,
                    host: a.host,
                    send: a.send.unwrap_or(a.recv),
                    recv: a.recv,
                    keys: a.keys,
                    len: a.len,
                    context: full,
                };
                self.note_call(a.comm, seq, What::Alltoall(Vec::new()));
                if let Some(What::Alltoall(locals)) = self.call_what(a.comm, seq) {
                    locals.push(me);
                }
            }
            Err(kind) => {
                self.skipped_call(a.host, a.comm);
                self.finish_part(token, failed(kind));
            }
        }
    }

    /// Posts every transfer and copy of pairwise alltoall `key` (the doubling table's entry)
    /// at once; the number posted (0: nothing to wait for).
    pub(super) fn pairwise_post(
        &mut self,
        key: u64,
        comm: u64,
        locals: &[Local],
        len: u64,
        context: u64,
        now: Nanos,
    ) -> Result<u32, StatusKind> {
        let node = self.node.as_ref().ok_or(StatusKind::UnknownCommunicator)?;
        let (ranges, me) = node.ranges(comm).ok_or(StatusKind::CommunicatorBroken)?;
        let engines = ranges.len() as u32;
        let (first, count) = *ranges.get(me as usize).ok_or(StatusKind::CommunicatorBroken)?;
        // (The gather started the slot with every local process's post.) A process in another
        // call, or giving another length, would have its buffers written past what it
        // registered for its own: nothing moves (the gather tells each process its mismatch).
        if locals.len() != count as usize {
            return Err(StatusKind::CommunicatorBroken);
        }
        if locals.iter().any(|l| l.len != len) {
            return Err(StatusKind::LengthMismatch);
        }
        if locals.iter().any(|l| l.context != context) {
            return Err(StatusKind::DigestMismatch);
        }
        let local = |rank: u32| locals.iter().find(|l| l.rank == rank);
        // (partner, send?, buffer) in posting order; the ranges are the communicator's.
        let mut transfers: Vec<(u32, bool, Resolved)> = Vec::new();
        for k in 1..engines {
            let to = (me + k) % engines;
            let from = (me + engines - k) % engines;
            let sends = |out: &mut Vec<(u32, bool, Resolved)>| {
                let (f, c) = ranges[to as usize];
                for r in first..first + count {
                    for q in f..f + c {
                        if let Some(l) = local(r) {
                            out.push((to, true, at(l.send, u64::from(q) * len)));
                        }
                    }
                }
            };
            let receives = |out: &mut Vec<(u32, bool, Resolved)>| {
                let (f, c) = ranges[from as usize];
                for r in f..f + c {
                    for q in first..first + count {
                        if let Some(l) = local(q) {
                            out.push((from, false, at(l.recv, u64::from(r) * len)));
                        }
                    }
                }
            };
            // Both directions on one pair at step `E/2`: the lower engine's transfers first.
            if to == from && to < me {
                receives(&mut transfers);
                sends(&mut transfers);
            } else {
                sends(&mut transfers);
                receives(&mut transfers);
            }
        }
        let mut posted = 0u32;
        for r in locals {
            for q in locals {
                let (src, dst) = (at(r.send, u64::from(q.rank) * len), at(q.recv, u64::from(r.rank) * len));
                let job = JobId(self.jobs.insert(Job::Pairwise { key }));
                let copy = Dma::Copy { host: r.host, src, dst, len, keys: [r.keys[0], q.keys[1]] };
                self.out.dma(job, copy);
                posted += 1;
            }
        }
        for (partner, send, buf) in transfers {
            let Some(node) = self.node.as_mut() else { break };
            // (The intake checked that a block's length fits a message.)
            let t = Transfer { partner, send, buf, len: len as u32, token: key, context };
            node.pair_post(comm, t, now, &mut self.out);
            posted += 1;
        }
        Ok(posted)
    }

    /// A local copy of pairwise alltoall `key` is over (`ok`); carried on in `after`.
    pub(super) fn pairwise_copied(&mut self, key: u64, ok: bool) {
        let outcome = if ok { failed(StatusKind::Ok) } else { failed(StatusKind::OutOfBounds) };
        self.doubling_done.push((key, Outcome { bytes: 0, ..outcome }));
    }
}
