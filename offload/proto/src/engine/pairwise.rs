//! The pairwise alltoall between the engines (`protocol.alltoall_between = pairwise`), in
//! Mamidala's bidirectional order, over the pair communicators (`pairs.rs`).
//!
//! The multicast alltoall (`alltoall.rs`) sends every rank's whole send buffer to every rank:
//! `P` times the bytes each receiver needs. The pairwise exchange sends each block once, from
//! its sender's send buffer straight into its place in its receiver's buffer — no scratch
//! past the result in the work buffer (the ABI's `(size + 1) · size · len` bytes stay the
//! multicast alltoall's), no scatter afterwards. For a communicator over `E` engines, engine `k` holding ranks
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
                let spare = self.spare_locals.pop().unwrap_or_default();
                match self.note_call(a.comm, seq, What::Alltoall(spare)) {
                    Some(What::Alltoall(locals)) => locals.push(me),
                    _ => {
                        // Another local process made another kind of call at this slot: the
                        // slot cannot run. Every process's operation on it ends typed.
                        if let Some(node) = self.node.as_mut() {
                            node.break_comm(a.comm, &mut self.out);
                        }
                    }
                }
            }
            Err(kind) => {
                self.skipped_call(a.host, a.comm);
                self.finish_part(token, failed(kind));
            }
        }
    }

    /// Posts every transfer and copy of pairwise alltoall `key` (the doubling table's entry)
    /// at once; the number posted.
    pub(super) fn pairwise_post(
        &mut self,
        key: u64,
        comm: u64,
        locals: &mut [Local],
        len: u64,
        context: u64,
        now: Nanos,
    ) -> Result<u32, StatusKind> {
        let node = self.node.as_mut().ok_or(StatusKind::UnknownCommunicator)?;
        let (ranges, me) = node.ranges(comm).ok_or(StatusKind::CommunicatorBroken)?;
        let engines = ranges.len() as u32;
        let (first, count) = *ranges.get(me as usize).ok_or(StatusKind::CommunicatorBroken)?;
        // (The gather started the slot with every local process's post.) A process in another
        // call, or giving another length, would have its buffers written past what it
        // registered for its own: nothing moves, and every local operation fails.
        locals.sort_unstable_by_key(|l| l.rank);
        let ranks_ok = locals.len() == count as usize && locals.iter().zip(first..).all(|(l, r)| l.rank == r);
        if !ranks_ok {
            return Err(StatusKind::CommunicatorBroken);
        }
        if locals.iter().any(|l| l.len != len) {
            return Err(StatusKind::LengthMismatch);
        }
        if locals.iter().any(|l| l.context != context) {
            return Err(StatusKind::DigestMismatch);
        }
        // (Refused by the caller: a block longer than a message never comes here.)
        let block = len as u32;
        let mut posted = 0u32;
        // Copy the ranges out of the node's borrow: (first, count) of each engine, by index.
        let range = |node: &super::node::Node, e: u32| {
            node.ranges(comm).and_then(|(r, _)| r.get(e as usize).copied())
        };
        for k in 1..engines {
            let to = (me + k) % engines;
            let from = (me + engines - k) % engines;
            // Both directions on one pair at step `E/2`: the lower engine's transfers first.
            let order = if to == from && to < me { [false, true] } else { [true, false] };
            for send in order {
                let partner = if send { to } else { from };
                let Some(node) = self.node.as_mut() else { break };
                let Some((f, c)) = range(node, partner) else { return Err(StatusKind::CommunicatorBroken) };
                // The eager rule's window: 2, a swap's, though up to `2 · count · c` transfers of
                // this call share the pair. Its receiver posts them all at once when its slot
                // starts, so only a late receiver finds more early fragments than slots (dropped,
                // counted, repaired); counting every transfer sent parts beyond 8 fragments on
                // 2 × 2 by rendezvous and measured 1.4–2× slower at 64 KiB (245 against
                // 345–502 µs), equal elsewhere (docs/performance.md, "Pairwise alltoall").
                let window = 2;
                // `r`-major at both ends: the sending rank, then the receiving one.
                let (senders, receivers) =
                    if send { ((first, count), (f, c)) } else { ((f, c), (first, count)) };
                for r in senders.0..senders.0 + senders.1 {
                    for q in receivers.0..receivers.0 + receivers.1 {
                        let buf = if send {
                            at(locals[(r - first) as usize].send, u64::from(q) * len)
                        } else {
                            at(locals[(q - first) as usize].recv, u64::from(r) * len)
                        };
                        let t = Transfer { partner, send, buf, len: block, token: key, context, window };
                        node.pair_post(comm, t, now, &mut self.out);
                        posted += 1;
                    }
                }
            }
        }
        for r in locals.iter() {
            for q in locals.iter() {
                let (src, dst) = (at(r.send, u64::from(q.rank) * len), at(q.recv, u64::from(r.rank) * len));
                let job = JobId(self.jobs.insert(Job::Pairwise { key }));
                let copy = Dma::Copy { host: r.host, src, dst, len, keys: [r.keys[0], q.keys[1]] };
                self.out.dma(job, copy);
                posted += 1;
            }
        }
        Ok(posted)
    }

    /// A local copy of pairwise alltoall `key` is over (`ok`); carried on in `after`.
    pub(super) fn pairwise_copied(&mut self, key: u64, ok: bool) {
        let outcome = if ok { failed(StatusKind::Ok) } else { failed(StatusKind::OutOfBounds) };
        self.doubling_done.push((key, Outcome { bytes: 0, ..outcome }));
    }
}
