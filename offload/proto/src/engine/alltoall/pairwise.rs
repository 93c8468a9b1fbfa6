//! The pairwise alltoall between the engines (`protocol.alltoall_between = pairwise`), in
//! Mamidala's bidirectional order, over the links (`links.rs`), with her
//! node-level aggregation.
//!
//! The multicast alltoall (`alltoall/mod.rs`) sends every rank's whole send buffer to every rank:
//! `P` times the bytes each receiver needs. The pairwise exchange sends each block once. For a
//! communicator over `E` engines, engine `k` holding `count_k` ranks — any of them, not
//! necessarily consecutive (`node/placement.rs`: a communicator of every other rank, a cyclic
//! placement) — and the engines before `k` holding `offset_k`, at every engine `i`:
//! 1. every local process posts one slot of the communicator's sequencer, carried out by the
//!    engine ([`crate::engine::node::sequencer::Kind::local`], [`crate::engine::node::sequencer::Kind::in_place`]: nothing to copy
//!    when it is done); its send and receive buffers are noted here. The slot starts once every
//!    local process posted — the node-wide step the transfers' order needs;
//! 2. the node's own blocks: a DMA copy per pair of local ranks `(r, q)`, block `q` of `r`'s
//!    send buffer into `recv_q + r · len`;
//! 3. **bidirectional schedule**: for `k = 1, …, E − 1`, engine `i` sends to `i + k` and
//!    receives from `i − k` (mod `E`) — at each step every engine sends to one and receives
//!    from another, so every engine's links carry one message each way (Mamidala's
//!    bidirectional alltoall; the one-directional pairwise order `i ^ k` needs a power of two).
//!    On pair `(i, j)` the transfers `i → j` come at step `j − i` and `j → i` at step
//!    `E − (j − i)` at *both* ends, so both post them in one order (at step `E/2` both
//!    directions meet: the lower engine's first). All are posted at once; the pair's queue
//!    takes them in order. What a transfer carries:
//!    * **aggregated** (engines holding several ranks, [`compose::pairwise_aggregates`]):
//!      *one* transfer each way per pair of engines. First the engine copies, for every local
//!      rank `r` and engine `j`, the blocks of `r`'s send buffer meant for `j`'s ranks into a
//!      staging in the leader's work buffer past the result — engine `j`'s run at
//!      `count · offset_j · len`, `r`-major, `count_j · len` bytes per local rank; one copy per
//!      run of consecutive ranks of `j` (one per engine where its ranks are consecutive); the
//!      transfer to `j` carries that run, the one from `j` lands in a second staging laid out
//!      alike; then every received block is copied to its place (`recv_q + r · len`). One
//!      message per pair of engines instead of `count_i · count_j`, for two intra-node copies
//!      of each block;
//!    * **direct**: one transfer per block, `(r, q)` in the order of the sending engine's
//!      ranks, then the receiving one's, at both ends, from `r`'s send buffer straight into
//!      `recv_q + r · len` — no staging, no copies;
//! 4. the slot is done once every transfer and copy is: each local process's operation
//!    completes with `size · len` bytes, or with the first failure's status.
//!
//! Every transfer is a reliable broadcast on a two-engine communicator (CRC, tag and MAC with
//! the call's context, bitmaps, repair, back-off, `PeerUnreachable` within the peer timeout).
//! A call runs, as every exchange does (`exchange.rs`), one at a time per communicator, so calls never interleave
//! on a pair. Measured in docs/performance.md, "Pairwise alltoall".
use crate::engine::action::Dma;
use crate::engine::cx::{at, Cx};
use crate::engine::exchange::{ExchangeRun, Local, Schedule, Stop, What};
use crate::engine::hands::Hands;
use crate::engine::ids::{CallId, ExchangeId};
use crate::engine::jobs::Job;
use crate::engine::links::Transfer;
use crate::engine::node::placement::Members;
use crate::engine::node::sequencer::Kind;
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::model::compose;
use crate::Nanos;
use alloc::sync::Arc;
use ringcast_abi::StatusKind;

/// An aggregated call's staging in its leader's work buffer, past the result: what this node
/// sends, by destination engine, then what it receives, by source engine — engine `j`'s run of
/// each at `count · first_j · len`, `count · count_j · len` bytes.
#[derive(Clone, Copy, Debug)]
struct Staging {
    /// The leader's work buffer past the result (`size · len` bytes in; `None`: no memory).
    base: Option<Resolved>,
    /// This engine's ranks and the block length.
    count: u64,
    len: u64,
    /// Where the received runs start, past the sent ones (`count · size · len`).
    received: u64,
}

impl Staging {
    /// Engine `j`'s run, the engines before `j` holding `offset_j` ranks: sent (`receive`
    /// false) or received.
    fn run(&self, receive: bool, offset_j: u32) -> Option<Resolved> {
        let from = if receive { self.received } else { 0 };
        at(self.base, from + self.count * u64::from(offset_j) * self.len)
    }
}

/// An alltoall's one part when it runs pairwise: this node's slot, carried out by the engine
/// once every local process posted it. Posts nothing else yet. `Err(status)`: refused at once.
pub(crate) fn post(
    a: &GatherCall,
    local: u32,
    id: CallId,
    context: u64,
    mine: u32,
    cx: &mut Cx<'_>,
) -> Result<(), StatusKind> {
    let node = cx.h.node.as_mut().ok_or(StatusKind::UnknownCommunicator)?;
    let Some(first) = node.members(a.comm).and_then(|(m, _)| m.of_engine(mine).first().copied()) else {
        cx.posted_nothing(local, a.comm);
        return Err(StatusKind::UnknownCommunicator);
    };
    let kind = Kind { all: true, context, local: true, in_place: true, ..Default::default() };
    let full = node.context_of(local, a.comm, context);
    match node.post(local, a.comm, first, a.recv, a.len, id, kind) {
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
            let spare = cx.exchanges.locals();
            // (Another kind of call at this slot breaks the communicator: `Exchanges::note`.)
            let noted = cx.exchanges.note(a.comm, seq, What::Pairwise(spare), &PAIRWISE, &mut cx.h);
            if let Some(What::Pairwise(locals)) = noted {
                locals.push(me);
            }
            Ok(())
        }
        Err(kind) => {
            cx.posted_nothing(local, a.comm);
            Err(kind)
        }
    }
}

/// The pairwise alltoall's steps: the node's own blocks (and, aggregated, the staging of the
/// others'), the transfers, then (aggregated) the received blocks into place. A refusal fails
/// the slot and breaks the communicator: the partners would wait for transfers this engine will
/// not post. (A copy or transfer that failed on memory does not: the steps go on on none,
/// `exchange.rs`.)
#[derive(Debug)]
pub(crate) struct Pairwise;

/// The one [`Pairwise`] every pairwise alltoall runs by.
pub(crate) static PAIRWISE: Pairwise = Pairwise;

impl Schedule for Pairwise {
    fn post(
        &self,
        key: ExchangeId,
        run: &mut ExchangeRun,
        h: &mut Hands<'_>,
        now: Nanos,
    ) -> Result<Option<u32>, Stop> {
        let (comm, len, context, step) = (run.comm, run.len, run.context, run.step);
        let mut locals = run.locals.take().unwrap_or_default();
        let result = step_posts(key, comm, &mut locals, len, context, step, &mut run.unmade, h, now);
        run.locals = Some(locals);
        result.map_err(|status| Stop { status, breaks: true })
    }
}

/// Posts step `step` of pairwise alltoall `key`: the number of copies and transfers posted,
/// or `None` past the last step. A copy that cannot be made (an end on no memory) counts as
/// posted and in `unmade`: it fails where it is made ([`ExchangeRun::unmade`]).
#[allow(clippy::too_many_arguments)]
fn step_posts(
    key: ExchangeId,
    comm: u64,
    locals: &mut [Local],
    len: u64,
    context: u64,
    step: u32,
    unmade: &mut u32,
    h: &mut Hands<'_>,
    now: Nanos,
) -> Result<Option<u32>, StatusKind> {
    let node = h.node.as_ref().ok_or(StatusKind::UnknownCommunicator)?;
    let (m, me) = node.members(comm).ok_or(StatusKind::CommunicatorBroken)?;
    // The grouping, out of the node's borrow (shared, not copied).
    let members = Arc::clone(m);
    posts(key, comm, locals, &members, me, len, context, step, unmade, h, now)
}

#[allow(clippy::too_many_arguments)]
fn posts(
    key: ExchangeId,
    comm: u64,
    locals: &mut [Local],
    members: &Members,
    me: u32,
    len: u64,
    context: u64,
    step: u32,
    unmade: &mut u32,
    h: &mut Hands<'_>,
    now: Nanos,
) -> Result<Option<u32>, StatusKind> {
    let mine = members.of_engine(me);
    let count = mine.len() as u32;
    let size = members.size();
    if step == 0 {
        // (The sequencer started the slot with every local process's post.) A process in
        // another call, or giving another length, would have its buffers written past what
        // it registered for its own: nothing moves, and every local operation fails.
        locals.sort_unstable_by_key(|l| l.rank);
        let ranks_ok =
            count > 0 && locals.len() == count as usize && locals.iter().zip(mine).all(|(l, &r)| l.rank == r);
        if !ranks_ok {
            return Err(StatusKind::CommunicatorBroken);
        }
        if locals.iter().any(|l| l.len != len) {
            return Err(StatusKind::LengthMismatch);
        }
        if locals.iter().any(|l| l.context != context) {
            return Err(StatusKind::DigestMismatch);
        }
    }
    // (After the sort above: the leader, whose work buffer holds the staging, comes first;
    // local `i` is the engine's `i`-th rank.)
    let leader = locals[0];
    let whole = len * u64::from(size);
    let aggregated = compose::pairwise_aggregates(&h.config.protocol, size, members.largest(), len);
    let staging = aggregated.then(|| {
        let base = at(leader.recv, whole);
        Staging { base, count: u64::from(count), len, received: u64::from(count) * whole }
    });
    let mut posted = 0u32;
    let mut copy = |h: &mut Hands<'_>, host, src, dst, bytes, keys| {
        match Dma::copy(host, src, dst, bytes, keys) {
            Some(dma) => h.dma(Job::Exchange(key), dma),
            None => *unmade += 1,
        }
        posted += 1;
    };
    match (staging, step) {
        (_, 0) => {
            // The node's own blocks, straight into place.
            for r in locals.iter() {
                for q in locals.iter() {
                    let (src, dst) =
                        (at(r.send, u64::from(q.rank) * len), at(q.recv, u64::from(r.rank) * len));
                    copy(h, r.host, src, dst, len, [r.keys[0], q.keys[1]]);
                }
            }
            if let Some(stage) = staging {
                // Each local send buffer's blocks for engine `j` into their places in the
                // staging (`i`-th local, `t`-th of `j`'s ranks at `(i · count_j + t) · len`),
                // a run of consecutive ranks per copy: one per engine where they are.
                for (i, r) in locals.iter().enumerate() {
                    for j in (0..members.engines()).filter(|&j| j != me) {
                        let c = u64::from(members.count(j));
                        let run = stage.run(false, members.offset(j));
                        for (q0, n, t0) in members.runs(j) {
                            let dst = at(run, (i as u64 * c + u64::from(t0)) * len);
                            let src = at(r.send, u64::from(q0) * len);
                            let keys = [r.keys[0], leader.keys[1]];
                            copy(h, r.host, src, dst, u64::from(n) * len, keys);
                        }
                    }
                }
            } else {
                // Direct: every block's transfer at once, beside the copies.
                posted += transfers(key, comm, locals, members, me, len, context, None, h, now);
            }
        }
        (Some(stage), 2) => {
            // Each received run's blocks into their places: block `(r, q)` of engine `j`'s
            // run (`r` its `t`-th rank, `q` this engine's `iq`-th) at
            // `(t · count + iq) · len`.
            for j in (0..members.engines()).filter(|&j| j != me) {
                let run = stage.run(true, members.offset(j));
                for (t, &r) in members.of_engine(j).iter().enumerate() {
                    for (iq, q) in locals.iter().enumerate() {
                        let i = t as u64 * u64::from(count) + iq as u64;
                        let dst = at(q.recv, u64::from(r) * len);
                        copy(h, leader.host, at(run, i * len), dst, len, [leader.keys[1], q.keys[1]]);
                    }
                }
            }
        }
        (Some(stage), 1) => {
            posted += transfers(key, comm, locals, members, me, len, context, Some(stage), h, now)
        }
        _ => return Ok(None),
    }
    Ok(Some(posted))
}

/// Posts every transfer of pairwise alltoall `key` in Mamidala's bidirectional schedule:
/// one per block, or, aggregated (`staging`), one each way per pair of engines from and
/// into the leader's staging. The number posted.
#[allow(clippy::too_many_arguments)]
fn transfers(
    key: ExchangeId,
    comm: u64,
    locals: &[Local],
    members: &Members,
    me: u32,
    len: u64,
    context: u64,
    staging: Option<Staging>,
    h: &mut Hands<'_>,
    now: Nanos,
) -> u32 {
    let engines = members.engines();
    let count = members.count(me);
    let mut posted = 0u32;
    // Mamidala's bidirectional schedule, every transfer posted at once.
    for k in 1..engines {
        let to = (me + k) % engines;
        let from = (me + engines - k) % engines;
        // Both directions on one pair at step `E/2`: the lower engine's first.
        let order = if to == from && to < me { [false, true] } else { [true, false] };
        for send in order {
            let partner = if send { to } else { from };
            let Some(node) = h.node.as_mut() else { break };
            // (Aggregated, one transfer each way per pair; direct, up to `2 · count · c`,
            // which the receiver posts all at once when its slot starts: the pair's window,
            // `links.rs::PAIR_WINDOW`, holds for both.)
            if let Some(stage) = staging {
                // One transfer each way: this node's run for the partner, the
                // partner's run for this node.
                let c = members.count(partner);
                let bytes = (u64::from(count) * u64::from(c) * len) as u32;
                let buf = stage.run(!send, members.offset(partner));
                let t = Transfer { partner, send, buf, len: bytes, owner: key, context };
                node.link_post(comm, t, now, h.out);
                posted += 1;
                continue;
            }
            // One transfer per block, in the sending engine's rank order, then the
            // receiving one's, at both ends (local `i` is this engine's `i`-th rank).
            let (senders, receivers) = if send { (me, partner) } else { (partner, me) };
            for (rs, &r) in members.of_engine(senders).iter().enumerate() {
                for (qs, &q) in members.of_engine(receivers).iter().enumerate() {
                    // (Step 0 checked that the locals are this engine's ranks, in order.)
                    let local = if send { locals.get(rs) } else { locals.get(qs) };
                    let Some(local) = local else { continue };
                    let buf = if send {
                        at(local.send, u64::from(q) * len)
                    } else {
                        at(local.recv, u64::from(r) * len)
                    };
                    // (A block longer than a message never comes here:
                    // `compose::alltoall`.)
                    let t = Transfer { partner, send, buf, len: len as u32, owner: key, context };
                    node.link_post(comm, t, now, h.out);
                    posted += 1;
                }
            }
        }
    }
    posted
}
