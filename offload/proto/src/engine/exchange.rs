//! The exchange between the node leaders that the engine carries out itself, step by step over
//! its links (`links.rs`) — the schedules are their collectives' (`allreduce/schedule.rs`,
//! `allgather/schedule.rs`, `alltoall/pairwise.rs`, through [`Schedule`]); this file runs them.
//!
//! Mamidala's allreduce with the leaders' step on the engines: recursive doubling — or, for long
//! blocks, Rabenseifner's reduce-scatter + allgather — between the node leaders
//! (`protocol.allreduce_between = doubling`, or where the cost model picks it:
//! `model/compose.rs`); and Mamidala's leader-based allgather the same way
//! (`protocol.allgather_between = doubling` below `allgather_multicast_bytes`, or the cost
//! model's choice), or round a ring of the engines (`ring`:
//! `allgather/schedule.rs::ring_step_of`, steps of `Step::Shift`; the same machinery).
//!
//! An **allgather** runs the same three steps without reductions: the node's blocks are copied
//! to their places in the leader's receive buffer (the partial result is the whole receive
//! buffer), the leaders swap the parts they hold by recursive doubling
//! (`allgather/schedule.rs::gather_step_of`: every part it lacks reaches each engine once, into its
//! place; a fold for any engine count), and the slot copies the leader's whole buffer into every
//! local process's. Everything below about transfers, failures and the communicator breaking
//! holds for it unchanged.
//!
//! Algorithm, for `E` engines (nodes) of a communicator and `len`-byte contributions, at every
//! engine `i`:
//! 1. **intra-node**: every local process posts one slot of the communicator's gather, rooted at
//!    the node's leader (its first rank) and carried out by the engine, not broadcast
//!    ([`crate::engine::node::sequencer::Kind::local`]); the engine reduces the node's contributions in local rank
//!    order into the leader's work buffer (`assembly.rs`, as the leader-based multicast
//!    allreduce does) — the node result `n_i` at the leader's `work + 0`;
//! 2. **between the leaders**: the schedule of `allreduce/schedule.rs` — a fold onto the largest
//!    power of two `P`, then recursive doubling (whole blocks, distances `P/2, …, 1`) or, where
//!    the call's exchange is Rabenseifner's (`model/compose.rs`: the cost model's choice, or
//!    from `protocol.allreduce_halving_bytes` with doubling forced; four engines or more),
//!    Rabenseifner's
//!    recursive halving and doubling of `P` segments, then the unfold. Every transfer is one of
//!    two on the pair's communicator (`links.rs`), the lower engine's rooted first at both
//!    ends; every reduction is *lower ⊕ upper*, the lower engine's operand first, so both ends
//!    hold the same bytes;
//! 3. the slot is done: the sequencer copies the leader's result into every local process's
//!    `work + 0` and completes them.
//!
//! So every rank's result is the same bits. The order is fixed and documented: node results in
//! local rank order, then `(n_i ⊕ n_{i+P})` for `i < E − P`, then the pairs at distance `P/2`,
//! then `P/4`, …: `((m₀ ⊕ m₂) ⊕ (m₁ ⊕ m₃))` for four — the same tree for both schedules, so
//! which one runs changes no bit; not the multicast allreduce's left-to-right node order, so the
//! two settings may differ in a float's last bits (every rank of one job uses the same setting).
//! Each engine receives `log₂ P` blocks (doubling) or about two (Rabenseifner), plus one for a
//! fold, where the multicast allreduce gives every rank `E`; every transfer is a reliable
//! broadcast on a two-engine communicator: CRC, tag and MAC, repair, back-off,
//! `PeerUnreachable` within the peer timeout. A transfer that fails for want of its partner, or
//! between engines in different calls, fails the slot — every local process's operation ends
//! with that status — and breaks the communicator at that engine, whose partners of the later
//! steps then fail theirs within the peer timeout instead of waiting for transfers it will never
//! post: an engine dead at the start of an allreduce fails it everywhere within a peer timeout
//! per level of the schedule. A part that could not be read ([`carries_on_in_step`]: an aborted transfer,
//! a block on no memory, memory gone) breaks nothing: the engine runs the rest of the
//! schedule on no memory, aborting what it sends, so the slot ends `RootFailed` wherever the
//! missing part was needed and the next call finds every engine in step.
//!
//! Buffers: the partial result lives at the leader's `work + 0`; a partner's bytes to reduce
//! arrive in a scratch block of the same work buffer no local contribution occupies any more —
use crate::engine::action::NO_MEMORY;
use crate::engine::hands::Hands;
use crate::engine::ids::{ExchangeId, Seq};
use crate::engine::links::Transfer;
use crate::engine::node::sequencer::Start;
use crate::engine::node::Node;
use crate::engine::participation::carries_on_in_step;
use crate::engine::reduction::Then;
use crate::intake::regions::Resolved;
use crate::intake::HostId;
use crate::model::compose::{self, Exchange};
use crate::transfer::protocol::{OpCounters, Outcome};
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use ringcast_abi::{DataType, ReduceOp, RegionKey, StatusKind};
use slotmap::SlotMap;

/// Bytes `[off, off + len)` of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub off: u64,
    pub len: u64,
}

/// One step of an engine's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the partial result's span to the partner.
    Send(u32, Span),
    /// Receive the partner's bytes for the span into the scratch block (a reduction follows).
    Receive(u32, Span),
    /// Receive the final result's span from the partner into the partial result.
    ReceiveResult(u32, Span),
    /// Send the partial result's `send` span; receive the partner's `recv` span into the
    /// scratch block (a reduction follows) or, `into_partial`, into its place in the partial
    /// result. The lower engine's transfer first, at both ends.
    Swap { partner: u32, send: Span, recv: Span, into_partial: bool },
    /// The partial result's span ← *lower ⊕ upper* of it and the scratch block's first bytes.
    Reduce(u32, Span),
    /// A ring's step: send the partial result's `send` span to `to` and receive `from`'s
    /// `recv` span into its place in the partial result, both at once (on two engines `to` and
    /// `from` are one partner: the lower engine's transfer first, as in a swap).
    Shift { to: u32, send: Span, from: u32, recv: Span },
}

/// What an engine's schedule depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// This engine's number and the engine count.
    pub me: u32,
    pub engines: u32,
    /// Bytes of the block, and of one element.
    pub len: u64,
    pub elem: u64,
    /// Rabenseifner's reduce-scatter + allgather instead of recursive doubling.
    pub halving: bool,
}

impl Shape {
    /// The schedule of engine `me` of `engines` for a block of `len` bytes of `elem`-byte
    /// elements: Rabenseifner's where `halving` (the call's exchange, [`compose::allreduce`])
    /// and it can run ([`compose::can_halve`]).
    pub(crate) fn new(me: u32, engines: u32, len: u64, elem: u64, halving: bool) -> Shape {
        let halving = halving && compose::can_halve(engines, len, elem);
        Shape { me, engines, len, elem: elem.max(1), halving }
    }

    /// Bytes of segments `[a, b)` of the block cut into `p` segments of whole elements.
    pub(crate) fn segments(&self, p: u32, a: u32, b: u32) -> Span {
        let elems = self.len / self.elem;
        let at = |s: u32| u64::from(s) * elems / u64::from(p) * self.elem;
        let end = |s: u32| if s == p { self.len } else { at(s) };
        Span { off: at(a), len: end(b) - at(a) }
    }
}

/// One local process's part in a pairwise alltoall: the buffers the exchange moves its blocks
/// between.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Local {
    /// Its rank in the communicator.
    pub rank: u32,
    pub host: HostId,
    /// Its send and receive buffers (`None`: no memory), and their regions.
    pub send: Option<Resolved>,
    pub recv: Option<Resolved>,
    pub keys: [RegionKey; 2],
    /// Its block length and its call's context (its calls that posted nothing included): the slot's, or
    /// nothing moves.
    pub len: u64,
    pub context: u64,
}

/// A collective's steps between the engines: which transfers, copies or reduction step `n`
/// takes. Each collective that exchanges point to point between the leaders implements it in
/// its folder; [`Exchanges`] runs any of them alike.
pub(crate) trait Schedule: core::fmt::Debug + Sync {
    /// Posts step `run.step` of exchange `key` — its transfers on links
    /// ([`Node::link_post`]), copies or reduction (with `key` as their owner) — and says how
    /// many it posted (0: none, the next step follows at once), or `None` past the last step.
    fn post(
        &self,
        key: ExchangeId,
        run: &mut ExchangeRun,
        h: &mut Hands<'_>,
        now: Nanos,
    ) -> Result<Option<u32>, Stop>;
}

/// Why an exchange stops before its last step: its slot ends with `status`, and (`breaks`) its
/// communicator breaks here, so its partners fail within the peer timeout instead of waiting
/// for transfers this engine will not post.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stop {
    pub(crate) status: StatusKind,
    pub(crate) breaks: bool,
}

/// An exchange in progress: the sequencer slot it carries out, its schedule and where it is.
#[derive(Debug)]
pub(crate) struct ExchangeRun {
    /// The sequencer slot it carries out.
    pub(crate) comm: u64,
    pub(crate) seq: Seq,
    /// Its steps.
    schedule: &'static dyn Schedule,
    /// A reduction's operation; `None` for an allgather or an alltoall.
    pub(crate) spec: Option<(DataType, ReduceOp)>,
    /// A pairwise alltoall's local processes.
    pub(crate) locals: Option<Vec<Local>>,
    /// The slot's bytes: a reduction's block, an allgather's whole result.
    pub(crate) len: u64,
    /// An allgather's bytes per rank (its node parts' places follow from the ranks' ranges).
    pub(crate) block: u64,
    /// An allgather round the ring of the engines instead of by recursive doubling.
    pub(crate) ring: bool,
    /// The call's context (every transfer's MAC carries it).
    pub(crate) context: u64,
    /// Where this engine is among the leaders, and a reduction's halving.
    pub(crate) shape: Shape,
    /// The partial result (the leader's `work + 0`) and the scratch block (`None`: no memory).
    pub(crate) partial: Option<Resolved>,
    pub(crate) scratch: Option<Resolved>,
    /// Copies of this step that could not be made (an end of them is no memory): counted
    /// among the step's posted, they fail where they are made, through `Exchanges::done`.
    pub(crate) unmade: u32,
    pub(crate) step: u32,
    /// Transfers, copies or the reduction of this step not over yet.
    pub(crate) pending: u32,
    /// The first failure of its steps (see [`carries_on_in_step`]).
    pub(crate) status: StatusKind,
    /// The first failure that is not on memory (a partner unreachable, calls that disagree):
    /// it breaks the communicator, in step or not.
    fatal: Option<StatusKind>,
    pub(crate) counters: OpCounters,
}

/// What a call the engine carries out between the engines is, as its processes post it.
#[derive(Debug)]
pub(crate) enum What {
    /// A reduction (an allreduce or a reduce), with its type and operation.
    Reduce((DataType, ReduceOp)),
    /// Node parts gathered: by recursive doubling, or round the ring of the engines (`ring`, as
    /// the posting process chose by [`crate::model::compose::allgather`]).
    Gather { ring: bool },
    /// Blocks swapped pairwise, with the local processes' buffers as they post.
    Pairwise(Vec<Local>),
}

/// A call waiting for its sequencer slot to start.
#[derive(Debug)]
struct Waiting {
    comm: u64,
    seq: Seq,
    what: What,
    schedule: &'static dyn Schedule,
}

/// The exchanges in progress, the calls waiting for their slot, and the steps that ended.
#[derive(Debug, Default)]
pub(crate) struct Exchanges {
    runs: SlotMap<ExchangeId, ExchangeRun>,
    waiting: Vec<Waiting>,
    /// Pairwise alltoalls' lists of local processes between uses.
    spare_locals: Vec<Vec<Local>>,
    /// Started slots waiting for the exchange before them on their communicator: one runs at a
    /// time per communicator, in slot order, so both ends of a link post in the same order.
    queue: VecDeque<(u64, Start)>,
    /// Their steps that ended (reductions, copies, transfers): taken by the dispatcher.
    pub(crate) done: Vec<(ExchangeId, Outcome)>,
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}

impl Exchanges {
    /// Notes call `what` of sequencer slot `seq` of `comm`, run by `schedule`, when its first
    /// local process posts it (the next ones find it); the call noted. `None` when another
    /// local process made another kind of call at that slot (a pairwise alltoall beside a
    /// doubling allgather, or an allgather beside an allreduce): the slot cannot run, so the
    /// communicator breaks here and every process's operation on it ends typed.
    pub(crate) fn note(
        &mut self,
        comm: u64,
        seq: Seq,
        what: What,
        schedule: &'static dyn Schedule,
        h: &mut Hands<'_>,
    ) -> Option<&mut What> {
        let Some(i) = self.waiting.iter().position(|c| c.comm == comm && c.seq == seq) else {
            // Calls of a communicator that broke before their slot started never start.
            let node = h.node.as_ref();
            self.waiting.retain(|c| node.is_some_and(|n| n.usable(c.comm)));
            self.waiting.push(Waiting { comm, seq, what, schedule });
            return self.waiting.last_mut().map(|c| &mut c.what);
        };
        let same = core::mem::discriminant(&what) == core::mem::discriminant(&self.waiting[i].what);
        if let What::Pairwise(spare) = what {
            self.spare_locals.push(spare);
        }
        if !same {
            if let Some(node) = h.node.as_mut() {
                node.break_comm(comm, h.out);
            }
            return None;
        }
        Some(&mut self.waiting[i].what)
    }

    /// A list for a pairwise alltoall's local processes (one used before, if any).
    pub(crate) fn locals(&mut self) -> Vec<Local> {
        self.spare_locals.pop().unwrap_or_default()
    }

    /// The slots the node started that the engine carries out, queued; the link transfers
    /// that ended, into [`Exchanges::done`].
    pub(crate) fn take_started(&mut self, node: &mut Node) {
        let mut started = Vec::new();
        node.take_local_started(&mut started);
        node.take_link_done(&mut self.done);
        self.queue.extend(started);
    }

    /// Starts the first queued slot of a communicator without an exchange running; whether
    /// one started.
    pub(crate) fn start_next(&mut self, h: &mut Hands<'_>, now: Nanos) -> bool {
        let next = self.queue.iter().position(|(c, _)| !self.runs.values().any(|d| d.comm == *c));
        match next.and_then(|i| self.queue.remove(i)) {
            Some((comm, start)) => {
                self.start(comm, start, h, now);
                true
            }
            None => false,
        }
    }

    /// Sequencer slot `start` of communicator `comm`, carried out by the engine, started: a
    /// doubling allreduce's (every local contribution reduced into the leader's `work + 0`), a
    /// doubling allgather's (every local block copied into its place in the leader's receive
    /// buffer), or a pairwise alltoall's (nothing gathered).
    fn start(&mut self, comm: u64, start: Start, h: &mut Hands<'_>, now: Nanos) {
        let Some(i) = self.waiting.iter().position(|c| c.comm == comm && c.seq == start.seq) else {
            // (Registered when the first local process posted it.)
            return finish_slot(h, comm, start.seq, failed(StatusKind::CommunicatorBroken));
        };
        let Waiting { what, schedule, .. } = self.waiting.swap_remove(i);
        let (spec, locals, ring) = match what {
            What::Reduce(spec) => (Some(spec), None, false),
            What::Gather { ring } => (None, None, ring),
            What::Pairwise(locals) => (None, Some(locals), false),
        };
        let Some(node) = h.node.as_ref() else { return };
        // The engines and this one's protocol rank: for a pairwise alltoall, of any placement
        // (`node/placement.rs`); the others' node parts are ranges of consecutive ranks.
        let place = match locals {
            Some(_) => node.members(comm).map(|(m, me)| (m.engines(), me, &[][..])),
            None => node.ranges(comm).map(|(r, me)| (r.len() as u32, me, r)),
        };
        let Some((engines, me, ranges)) = place else {
            return finish_slot(h, comm, start.seq, failed(StatusKind::UnknownCommunicator));
        };
        let len = u64::from(start.len);
        let mine = ranges.get(me as usize).map_or(0, |r| r.0);
        let other = ranges.iter().map(|r| r.0).find(|&f| f != 0).unwrap_or(0);
        let scratch_rank = if mine != 0 { mine } else { other };
        let at = |r: u32| crate::intake::regions::at(start.buf, u64::from(r) * len);
        // An allgather's block per rank follows from the leader's slot (`size` blocks), not
        // from whichever local process posted first: a process disagreeing on the length fails
        // the assembly, and this slot starts only after it.
        let ranks = ranges.last().map_or(0, |r| u64::from(r.0) + u64::from(r.1));
        let block = len / ranks.max(1);
        // (An allgather never reduces: no scratch beyond its receive buffer.)
        let scratch = if spec.is_some() { at(scratch_rank) } else { at(0) };
        let elem = spec.and_then(|s| s.0.size()).unwrap_or(1) as u64;
        // A reduction halves where its exchange is Rabenseifner's (decided alike where its
        // processes posted, `allgather/mod.rs`).
        let largest = ranges.iter().map(|r| r.1).max().unwrap_or(1);
        let halving = spec.is_some()
            && compose::allreduce(h.config, engines, largest, len, elem) == Exchange::Rabenseifner;
        // A slot on no memory (its assembly put in step, or the leader's post on none) runs its
        // schedule all the same, aborting what it sends.
        let status = if start.buf.is_none() { StatusKind::RootFailed } else { StatusKind::Ok };
        let d = ExchangeRun {
            comm,
            seq: start.seq,
            schedule,
            spec,
            locals,
            len,
            block,
            ring,
            context: start.context,
            shape: Shape::new(me, engines, len, elem, halving),
            partial: at(0),
            scratch,
            unmade: 0,
            step: 0,
            pending: 0,
            status,
            fatal: None,
            counters: OpCounters::default(),
        };
        let key = self.runs.insert(d);
        self.advance(key, h, now);
    }

    /// Carries exchange `key` on from its step `step`: posts the step's transfers, copies or
    /// reduction — going on at once past a step that posts none — or, past the last step,
    /// finishes its slot.
    fn advance(&mut self, key: ExchangeId, h: &mut Hands<'_>, now: Nanos) {
        loop {
            let Some(d) = self.runs.get_mut(key) else { return };
            let schedule = d.schedule;
            match schedule.post(key, d, h, now) {
                Ok(Some(0)) => d.step += 1,
                Ok(Some(n)) => {
                    d.pending = n;
                    // The copies that could not be made fail as a failed job does.
                    let unmade = core::mem::take(&mut d.unmade);
                    let failed = Outcome { status: NO_MEMORY, bytes: 0, counters: OpCounters::default() };
                    self.done.extend((0..unmade).map(|_| (key, failed)));
                    return;
                }
                Ok(None) => {
                    let Some(mut d) = self.runs.remove(key) else { return };
                    if let Some(mut l) = d.locals.take() {
                        l.clear();
                        self.spare_locals.push(l);
                    }
                    // (A step that failed on memory ran the rest on none: `part_over`.)
                    let bytes = if d.status == StatusKind::Ok { d.len } else { 0 };
                    let outcome = Outcome { status: d.status, bytes, counters: d.counters };
                    return finish_slot(h, d.comm, d.seq, outcome);
                }
                Err(stop) => {
                    let Some(d) = self.runs.remove(key) else { return };
                    finish_slot(h, d.comm, d.seq, failed(stop.status));
                    if let (true, Some(node)) = (stop.breaks, h.node.as_mut()) {
                        node.break_comm(d.comm, h.out);
                    }
                    return;
                }
            }
        }
    }

    /// A transfer, copy or the reduction of exchange `key`'s step ended with `outcome`.
    pub(crate) fn part_over(&mut self, key: ExchangeId, outcome: Outcome, h: &mut Hands<'_>, now: Nanos) {
        let Some(d) = self.runs.get_mut(key) else { return };
        d.pending = d.pending.saturating_sub(1);
        let mut status = outcome.status;
        // A pairwise store into a local process's buffer on no memory fails in the protocol as
        // `OutOfBounds`; its siblings' buffers are fine: a part could not be had.
        let no_memory =
            d.locals.as_ref().is_some_and(|l| l.iter().any(|l| l.send.is_none() || l.recv.is_none()));
        if status == StatusKind::OutOfBounds && no_memory {
            status = StatusKind::RootFailed;
        }
        if status != StatusKind::Ok && d.status == StatusKind::Ok {
            d.status = status;
        }
        if status != StatusKind::Ok && !carries_on_in_step(status) && d.fatal.is_none() {
            d.fatal = Some(status);
        }
        d.counters.absorb(outcome.counters);
        if d.pending > 0 {
            return;
        }
        if let Some(fatal) = d.fatal {
            d.status = fatal;
        }
        if d.fatal.is_none() && carries_on_in_step(d.status) {
            // A part could not be read — here (on no memory, memory gone) or
            // at a partner (its transfer aborted): this engine carries on in step with its
            // partners on no memory, so whatever it sends from here is aborted too and every
            // engine whose result needed the missing part learns `RootFailed` from a transfer,
            // while the communicator stays usable for the next call.
            d.partial = None;
            d.scratch = None;
            if let Some(locals) = d.locals.as_mut() {
                for l in locals.iter_mut() {
                    (l.send, l.recv) = (None, None);
                }
            }
        } else if d.status != StatusKind::Ok {
            // The partners of the steps to come would wait for transfers this engine will not
            // post: the communicator breaks here, and they learn within the peer timeout (each
            // level of the schedule adds at most one).
            let Some(d) = self.runs.remove(key) else { return };
            finish_slot(h, d.comm, d.seq, failed(d.status));
            if let Some(node) = h.node.as_mut() {
                node.break_comm(d.comm, h.out);
            }
            return;
        }
        d.step += 1;
        self.advance(key, h, now);
    }
}

/// The engine finished sequencer slot `seq` of communicator `comm`, one it carried out itself.
fn finish_slot(h: &mut Hands<'_>, comm: u64, seq: Seq, outcome: Outcome) {
    if let Some(node) = h.node.as_mut() {
        node.finish_local(comm, seq, outcome);
    }
}

/// Posts a leaders' step of exchange `key` (`run`'s schedule gave it): its transfers on the
/// links, in the pair's posting order, or its reduction — the number posted (0: an empty
/// step, passed over alike at both ends). Shared by the allreduce's and the allgather's
/// schedules.
pub(crate) fn post_step(
    key: ExchangeId,
    run: &ExchangeRun,
    step: Step,
    h: &mut Hands<'_>,
    now: Nanos,
) -> Result<Option<u32>, Stop> {
    let comm = run.comm;
    let (me, partial, scratch, context, spec) =
        (run.shape.me, run.partial, run.scratch, run.context, run.spec);
    let at = crate::intake::regions::at;
    // (partner, send?, buffer, bytes), in the pair's posting order.
    let mut transfers: [(u32, bool, Option<Resolved>, u64); 2] = [(0, false, partial, 0); 2];
    let count = match step {
        Step::Send(p, x) => {
            transfers[0] = (p, true, at(partial, x.off), x.len);
            1
        }
        Step::Receive(p, x) => {
            transfers[0] = (p, false, scratch, x.len);
            1
        }
        Step::ReceiveResult(p, x) => {
            transfers[0] = (p, false, at(partial, x.off), x.len);
            1
        }
        Step::Swap { partner: p, send, recv, into_partial } => {
            let into = if into_partial { at(partial, recv.off) } else { scratch };
            let (out, inn) = ((p, true, at(partial, send.off), send.len), (p, false, into, recv.len));
            transfers = if me < p { [out, inn] } else { [inn, out] };
            2
        }
        Step::Shift { to, send, from, recv } => {
            let (out, inn) =
                ((to, true, at(partial, send.off), send.len), (from, false, at(partial, recv.off), recv.len));
            // (Two engines: one pair both ways, the lower engine's transfer first.)
            transfers = if to != from || me < to { [out, inn] } else { [inn, out] };
            2
        }
        Step::Reduce(p, x) => {
            // Only reductions' schedules reduce; never leave a slot waiting, whatever.
            let spec = spec.ok_or(Stop { status: StatusKind::CommunicatorBroken, breaks: false })?;
            let mine = at(partial, x.off);
            let order = if me < p { [(mine, 1), (scratch, 1)] } else { [(scratch, 1), (mine, 1)] };
            h.reduce(spec, x.len, order, mine, Then::Exchange { key });
            return Ok(Some(1));
        }
    };
    // An allgather's swap may be one-sided (no folded parts on one side): empty transfers are
    // not posted, alike at both ends.
    let mut posted = 0;
    for &(partner, send, buf, n) in transfers[..count].iter().filter(|t| t.3 > 0) {
        let Some(node) = h.node.as_mut() else { break };
        // (The sequencer checked that the block's length fits.)
        let t = Transfer { partner, send, buf, len: n as u32, owner: key, context };
        node.link_post(comm, t, now, h.out);
        posted += 1;
    }
    Ok(Some(posted))
}

/// (root is the lower engine, bytes) of the transfers between `me` and `other` in `schedule`,
/// in order; empty transfers are not posted: what both ends of a pair must agree on.
#[cfg(test)]
pub(crate) fn on_pair(schedule: &[Step], me: u32, other: u32) -> alloc::vec::Vec<(bool, u64)> {
    let lower = me.min(other);
    // Both directions on one pair: the lower engine's transfer first.
    let swap = |send: Span, recv: Span| {
        let (mine, theirs) = ((me == lower, send.len), (other == lower, recv.len));
        if me == lower {
            alloc::vec![mine, theirs]
        } else {
            alloc::vec![theirs, mine]
        }
    };
    schedule
        .iter()
        .flat_map(|&s| match s {
            Step::Send(p, x) if p == other => alloc::vec![(me == lower, x.len)],
            Step::Receive(p, x) | Step::ReceiveResult(p, x) if p == other => {
                alloc::vec![(other == lower, x.len)]
            }
            Step::Swap { partner, send, recv, .. } if partner == other => swap(send, recv),
            Step::Shift { to, send, from, recv } if to == other && from == other => swap(send, recv),
            Step::Shift { to, send, .. } if to == other => alloc::vec![(me == lower, send.len)],
            Step::Shift { from, recv, .. } if from == other => alloc::vec![(other == lower, recv.len)],
            _ => alloc::vec![],
        })
        .filter(|&(_, len)| len > 0)
        .collect()
}
