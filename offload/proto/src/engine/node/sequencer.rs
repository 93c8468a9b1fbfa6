//! The slot sequencer of one communicator at one engine, and its delivery: one engine takes
//! part in a broadcast once for all of its node's processes
//! (docs/design.md §3.4, "one engine per node").
//!
//! The world communicator has `nodes * ppn` process ranks; the protocol sees only the `nodes`
//! engines. Each local process posts its broadcasts in order, so its `k`-th post is broadcast
//! `k` of the communicator: the sequencer files it in slot `k`. A slot goes to the protocol (in
//! slot order, since the protocol numbers broadcasts by posting order) as soon as it can:
//! * on the root's node, when the root process has posted — the protocol reads its buffer;
//! * on any other node, when the first local process has posted — the protocol writes into that
//!   process's buffer (the slot's *primary*) — or rather the first whose buffer exists: a post
//!   on no memory (`buf` `None`: its call runs in step at its rank, `engine/participation/`) is
//!   primary only once every local process posted and none has one.
//!
//! A slot whose assembly could not read a local block is *in step* ([`Sequencer::in_step`]): it
//! still starts, on no memory, so the other engines stay in step and learn `RootFailed`.
//!
//! When the protocol is done and every local process has posted, the slot finishes: the runner
//! copies the primary's bytes into every other local buffer (intra-node delivery; DMA on a DPU)
//! and completes every local process's operation — each after its own copy, the primary after
//! the last copy reading its buffer (`Delivery::copies`), so a process that reuses its buffer
//! after its completion never races a copy (found by the DST: an allreduce whose result, written
//! over the primary's contribution, reached a local process copying from it).
//!
//! Each process's arguments are checked against the slot's reference (the root process's post
//! on the root node, else the primary's): a different root fails that process's operation with
//! `BadRoot`, a different length with `LengthMismatch`; the others are unaffected.
//!
//! A local process that leaves while a slot is unfinished, or before posting a slot the others
//! posted, breaks the sequencer: every unfinished operation fails with `CommunicatorBroken`, and so
//! does every later post (the runner also drops the communicator from the protocol so remote
//! engines learn within `peer_timeout_ms` instead of waiting for a broadcast that never comes).
//! A process that left cleanly with nothing unfinished may be replaced: the newcomer with its
//! local rank continues its sequence.
use crate::comm::World;
use crate::engine::ids::{CallId, Seq};
use crate::engine::node::placement::{Members, Placement};
use crate::intake::regions::Resolved;
use crate::transfer::env::{reference_call, same_call};
use crate::transfer::protocol::{OpCounters, Outcome};
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::StatusKind;

/// What a post is beyond a plain broadcast: a composed collective's part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kind {
    /// The slot starts only once every local process has posted it (a barrier's part, an
    /// assembled part).
    pub all: bool,
    /// The slot starts only once the engine assembled every local process's block into the
    /// root's buffer ([`Sequencer::assembled`]): a leader-based allgather's node part.
    pub assemble: bool,
    /// The call's context ([`crate::transfer::protocol::Post::context`]; the sequencer adds the
    /// process's calls that posted nothing, [`Sequencer::posted_nothing`]): a process whose
    /// context is not the slot's reference's call ([`crate::transfer::env::same_call`])
    /// fails with `DigestMismatch`, as a remote rank would.
    pub context: u64,
    /// How far ahead the call's roots may run: its parts times its process's composed calls in
    /// flight ([`crate::transfer::protocol::Post::window`]; 0: a broadcast).
    pub window: u32,
    /// The slot never goes to the protocol as a broadcast: the engine carries it out itself
    /// (a recursive-doubling allreduce or allgather between the node leaders, `exchange.rs`, or
    /// a pairwise alltoall, `pairwise.rs`) once it starts,
    /// and reports its outcome with [`Sequencer::done`]. It starts and is delivered like any slot.
    pub local: bool,
    /// Every local process's result is already in its own buffer when the slot is done (a
    /// pairwise alltoall, `pairwise.rs`; a barrier, which carries no bytes): the slot finishes
    /// without copying the primary's bytes.
    pub in_place: bool,
    /// The slot goes to the protocol as a barrier on the synchronization's tree
    /// ([`crate::transfer::protocol::Protocol::post_barrier`]), not as a broadcast
    /// (`engine/barrier/`).
    pub barrier: bool,
}

/// One local process's post in a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Member {
    root: u32,
    len: u32,
    /// `None`: no memory.
    buf: Option<Resolved>,
    part: CallId,
    kind: Kind,
}

#[derive(Debug)]
struct Slot {
    /// Index = local rank.
    members: Vec<Option<Member>>,
    /// Local rank whose buffer the protocol uses; set when the slot started.
    primary: Option<u32>,
    /// The protocol's result for this node.
    outcome: Option<Outcome>,
    /// Waiting for the engine's assembly of the local blocks ([`Kind::assemble`]).
    assembling: bool,
    /// Its assembly could not read a local block (a block on no memory, or memory gone): the
    /// slot still runs, in step with the other engines, on no memory
    /// ([`Sequencer::in_step`]).
    in_step: bool,
}

impl Slot {
    fn first(&self) -> Option<&Member> {
        self.members.iter().flatten().next()
    }
}

/// A slot handed to the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    /// The slot.
    pub seq: Seq,
    /// Root process rank.
    pub root: u32,
    /// Bytes.
    pub len: u32,
    /// The primary's buffer (`None`: no memory — the primary's, or the slot is in step).
    pub buf: Option<Resolved>,
    /// The call's context, as the primary posted it (its calls that posted nothing included).
    pub context: u64,
    /// The call's window ([`Kind::window`]), as the primary posted it (0: a broadcast).
    pub window: u32,
    /// The engine carries the slot out itself ([`Kind::local`]).
    pub local: bool,
    /// A barrier ([`Kind::barrier`]).
    pub barrier: bool,
}

/// What to do for one local process when a slot finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The call whose part its post is.
    pub(crate) part: CallId,
    /// Copy `len` bytes from the primary's buffer to its own first (then complete it with
    /// `outcome`, or, if the copy fails, with `OutOfBounds` — `RootFailed` where either end is
    /// no memory: no job can move it, and it fails where it is made, `dispatch.rs`).
    pub copy: Option<(Option<Resolved>, Option<Resolved>, u64)>,
    /// With `copy`: the primary's part, whose completion waits for this copy.
    pub(crate) primary: Option<CallId>,
    /// The primary's delivery: how many copies read its buffer — it completes only after the
    /// last of them, so a process that reuses its buffer after its completion (or an engine
    /// writing a result there) never races a copy still reading it.
    pub copies: u32,
    /// How its operation ended.
    pub outcome: Outcome,
}

/// The sequencer of one engine's local members of one communicator.
#[derive(Debug)]
pub struct Sequencer {
    /// Local members.
    ppn: u32,
    placement: Placement,
    /// `placement.ranges()`, computed once.
    ranges: Option<Vec<(u32, u32)>>,
    /// Each engine's ranks ([`Members::of`]), computed once (shared: a pairwise alltoall holds
    /// it while it posts, without copying it).
    members: Option<Arc<Members>>,
    /// Next slot of each local rank.
    next: Vec<u64>,
    /// Local ranks that left, and how — a process lost or detached (`CommunicatorBroken`) or
    /// one that freed the communicator (`CommunicatorFreed`): their next slots cannot be filled
    /// until a newcomer takes the rank, and a post waiting on them fails with that status.
    departed: Vec<Option<StatusKind>>,
    /// Calls of each local rank on this communicator that posted nothing ([`Sequencer::posted_nothing`]).
    unposted: Vec<u32>,
    /// Leader-based calls of each local rank on this communicator whose exchange between the
    /// engines was multicast, not over the pair communicators ([`Sequencer::multicast_exchange`]),
    /// modulo 256.
    multicast: Vec<u8>,
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Slot>,
    /// Slots below this were handed to the protocol.
    started: u64,
    broken: bool,
    /// Why it broke: [`StatusKind::CommunicatorBroken`] (a process left), or
    /// [`StatusKind::CommunicatorFreed`] (a process freed it with something unfinished):
    /// every operation the break fails ends with it.
    broken_by: StatusKind,
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}

impl Sequencer {
    /// The sequencer of node `node` of the world; `capacity` slots are reserved.
    pub fn new(node: u32, world: World, capacity: usize) -> Self {
        Self::with_placement(world.count(node), Placement::World { node, world }, capacity)
    }

    /// The sequencer of `locals` local members placed as `placement`.
    pub fn with_placement(locals: u32, placement: Placement, capacity: usize) -> Self {
        let ppn = locals.max(1);
        Sequencer {
            ppn,
            ranges: placement.ranges(),
            members: Members::of(&placement).map(Arc::new),
            placement,
            next: vec![0; ppn as usize],
            departed: vec![None; ppn as usize],
            unposted: vec![0; ppn as usize],
            multicast: vec![0; ppn as usize],
            base: 0,
            slots: VecDeque::with_capacity(capacity),
            started: 0,
            broken: false,
            broken_by: StatusKind::CommunicatorBroken,
        }
    }

    /// Nothing unfinished.
    pub fn idle(&self) -> bool {
        self.slots.is_empty()
    }

    /// Where the communicator's ranks live.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Each engine's consecutive ranks (first, count), in protocol-rank order, if they are.
    pub fn ranges(&self) -> Option<&[(u32, u32)]> {
        self.ranges.as_deref()
    }

    /// Each engine's ranks, consecutive or not (`None` for a placement naming no engine).
    pub fn members(&self) -> Option<&Arc<Members>> {
        self.members.as_ref()
    }

    /// Local members.
    pub fn locals(&self) -> u32 {
        self.ppn
    }

    /// Whether the sequencer broke (a local process left mid-collective, or [`Sequencer::fail`]).
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Files local process `local`'s next broadcast. `Err` when refused at once.
    #[cfg(test)]
    pub fn post(
        &mut self,
        local: u32,
        root: u32,
        buf: Option<Resolved>,
        len: u32,
        part: CallId,
    ) -> Result<(), StatusKind> {
        self.post_with(local, root, buf, len, part, Kind::default()).map(drop)
    }

    /// [`Sequencer::post`] of a composed collective's part ([`Kind`]); the slot's sequence number.
    /// A barrier's part (`all`) goes to the protocol only once every local process has posted
    /// it, so its broadcast leaving the root's node (or reaching it) says this whole node has
    /// arrived.
    pub fn post_with(
        &mut self,
        local: u32,
        root: u32,
        buf: Option<Resolved>,
        len: u32,
        part: CallId,
        kind: Kind,
    ) -> Result<Seq, StatusKind> {
        if self.broken {
            return Err(self.broken_by);
        }
        let l = local as usize;
        if l >= self.next.len() {
            return Err(StatusKind::NoRank);
        }
        let seq = self.next[l];
        // A departed rank has not posted this slot and never will: the slot cannot finish.
        let gone = self.departed.iter().enumerate().find_map(|(d, &why)| why.filter(|_| self.next[d] <= seq));
        if let Some(why) = gone {
            self.broken_by = why;
            self.break_all();
            return Err(why);
        }
        self.next[l] += 1;
        let kind = Kind { context: self.context_of(local, kind.context), ..kind };
        let idx = (seq - self.base) as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(Slot {
                members: vec![None; self.ppn as usize],
                primary: None,
                outcome: None,
                assembling: false,
                in_step: false,
            });
        }
        let slot = &mut self.slots[idx];
        slot.members[l] = Some(Member { root, len, buf, part, kind });
        slot.assembling |= kind.assemble;
        Ok(Seq(seq))
    }

    /// Local process `local` made a call on this communicator that posted nothing: one awaiting
    /// its shape (a field that shapes it was refused) whose shape no engine told this one within the peer timeout
    /// (`call_shapes.rs`; told, it runs in step), or one the sequencer refused at once. Its other
    /// ranks' engines post that call's broadcasts, so from here on this process's posts would
    /// be matched with the others' calls one behind. Its later posts carry the count in their
    /// context ([`crate::transfer::protocol::Post::context`]), which the message MAC covers:
    /// they fail with `DigestMismatch`, at both ends, instead of delivering another call's bytes
    /// as this call's (before, a rank whose broadcast posted nothing got the previous broadcast's
    /// bytes, `Ok`, from its next one: `offload/sim/tests/skipped_call.rs`).
    pub fn posted_nothing(&mut self, local: u32) {
        if let Some(s) = self.unposted.get_mut(local as usize) {
            *s = s.wrapping_add(1);
        }
    }

    /// Local process `local` made a leader-based call whose exchange between the engines is
    /// multicast (`model/compose.rs`). Which exchange a call takes depends on its length, so
    /// ranks that disagree on the length can take different ones: an engine that multicast its
    /// part goes on to its next call, whose pair transfers its partners, still in the call it
    /// skipped on the pairs, would take as that call's (`Ok` over another call's bytes: the
    /// simulator test `ranks_split_by_the_exchange_get_typed_errors`). Its later posts carry
    /// the count (bits 24–31 of the context, which the MAC covers), so such transfers fail with
    /// `DigestMismatch` at both ends.
    pub fn multicast_exchange(&mut self, local: u32) {
        if let Some(m) = self.multicast.get_mut(local as usize) {
            *m = m.wrapping_add(1);
        }
    }

    /// The context local process `local`'s next post with call context `context` carries: the
    /// call's (bits 0–23), its leader-based calls exchanged by multicast (24–31), and its
    /// calls that posted nothing in the high half.
    pub fn context_of(&self, local: u32, context: u64) -> u64 {
        let multicast = self.multicast.get(local as usize).copied().unwrap_or(0);
        context
            | u64::from(multicast) << 24
            | u64::from(self.unposted.get(local as usize).copied().unwrap_or(0)) << 32
    }

    /// The engine assembled slot `seq`'s local blocks into its root's buffer: it may start.
    pub fn assembled(&mut self, Seq(seq): Seq) {
        if let Some(slot) = seq.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize)) {
            slot.assembling = false;
        }
    }

    /// The engine could not read a local block of slot `seq`'s assembly: the slot starts all
    /// the same, on no memory (its part leaves as an aborted broadcast, or its
    /// doubling runs its schedule aborting what it sends), so the other engines stay in step
    /// and learn `RootFailed` rather than wait for a part or a transfer it never posts; every
    /// local process's operation ends with `RootFailed` (one on no memory with its own status,
    /// `engine/participation/`).
    pub fn in_step(&mut self, Seq(seq): Seq) {
        if let Some(slot) = seq.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize)) {
            slot.assembling = false;
            slot.in_step = true;
        }
    }

    /// Fails every unfinished operation, now and later, with `CommunicatorBroken` (local
    /// processes in different calls: the node's part would carry wrong bytes; a block the
    /// engine could not read puts the slot in step instead, [`Sequencer::in_step`]).
    pub fn fail(&mut self) {
        self.break_all();
    }

    /// The next slot the protocol may take, if it can start; call [`Sequencer::started`] once the
    /// protocol accepted it.
    pub fn next_start(&self) -> Option<Start> {
        self.choose().map(|(_, start)| start)
    }

    /// [`Sequencer::next_start`], and the local rank whose post it is (the slot's primary).
    fn choose(&self) -> Option<(u32, Start)> {
        let slot = self.slots.get((self.started - self.base) as usize)?;
        let first = slot.first()?;
        if slot.members.iter().flatten().any(|m| m.kind.all) && !slot.members.iter().all(Option::is_some) {
            return None; // a barrier's part: not before the whole node has arrived
        }
        if slot.assembling {
            return None; // a node part: not before its blocks are in the root's buffer
        }
        let primary = if let Some(root_local) = self.placement.local(first.root) {
            slot.members.get(root_local as usize)?.as_ref().map(|m| (root_local, m))
        } else {
            // The message is stored into a buffer that exists: a post on no memory is never
            // the primary while a sibling may still bring one — the siblings' copies would read
            // nothing.
            let posted =
                || slot.members.iter().enumerate().filter_map(|(l, m)| m.as_ref().map(|m| (l as u32, m)));
            match posted().find(|(_, m)| m.buf.is_some()) {
                Some(real) => Some(real),
                None if slot.members.iter().all(Option::is_some) => posted().next(),
                None => return None,
            }
        };
        let (l, m) = primary?;
        let start = Start {
            seq: Seq(self.started),
            root: m.root,
            len: m.len,
            buf: if slot.in_step { None } else { m.buf },
            context: m.kind.context,
            window: m.kind.window,
            local: m.kind.local,
            barrier: m.kind.barrier,
        };
        Some((l, start))
    }

    /// The slot [`Sequencer::next_start`] returned was accepted by the protocol.
    pub fn started(&mut self) {
        // The member `next_start` chose, recorded as it chose it — not found again by its
        // buffer: an in-step slot's `None` would match a sibling on no memory, or no member.
        let Some((primary, start)) = self.choose() else { return };
        let idx = (start.seq.0 - self.base) as usize;
        self.slots[idx].primary = Some(primary);
        self.started += 1;
    }

    /// The slot [`Sequencer::next_start`] returned was refused by the protocol with `status`: it
    /// ends with that status for every local process (now and when the others post).
    pub fn refused(&mut self, status: StatusKind) {
        let Some(start) = self.next_start() else { return };
        let idx = (start.seq.0 - self.base) as usize;
        self.slots[idx].outcome = Some(failed(status));
        self.started += 1;
    }

    /// The protocol finished slot `seq` at this node.
    pub fn done(&mut self, Seq(seq): Seq, outcome: Outcome) {
        if let Some(slot) = seq.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize)) {
            slot.outcome = Some(outcome);
        }
    }

    /// Finishes the slots at the front that are complete: every local process's delivery, in
    /// slot order, into `out`.
    pub fn take_finished(&mut self, out: &mut Vec<Delivery>) {
        while let Some(slot) = self.slots.front() {
            let complete = slot.outcome.is_some() && slot.members.iter().all(Option::is_some);
            if !complete && !self.broken {
                break;
            }
            let Some(slot) = self.slots.pop_front() else { break };
            self.base += 1;
            self.started = self.started.max(self.base);
            let outcome = match slot.outcome {
                // The protocol's side of a break the sequencer knows the cause of.
                Some(o) if self.broken && o.status == StatusKind::CommunicatorBroken => {
                    Outcome { status: self.broken_by, ..o }
                }
                Some(o) => o,
                None => failed(self.broken_by),
            };
            let reference = slot.primary.and_then(|p| slot.members[p as usize]);
            // The call every process is compared with: the reference's (`reference_call`).
            let contexts = slot.members.iter().flatten().map(|m| m.kind.context);
            let call = reference.map(|r| reference_call(r.kind.context, contexts));
            let first = out.len();
            let mut primary_at = None;
            for (l, m) in slot.members.iter().enumerate() {
                let Some(m) = m else { continue };
                let mut d = Delivery { part: m.part, copy: None, primary: None, copies: 0, outcome };
                match reference {
                    _ if !complete => d.outcome = failed(self.broken_by),
                    Some(r) if r.root != m.root => d.outcome = failed(StatusKind::BadRoot),
                    Some(r) if r.len != m.len => d.outcome = failed(StatusKind::LengthMismatch),
                    // (`same_call` says whether two contexts are one call.)
                    Some(_) if call.is_some_and(|c| !same_call(c, m.kind.context)) => {
                        d.outcome = failed(StatusKind::DigestMismatch)
                    }
                    // The primary posted on no memory, so it is the root (see `next_start`):
                    // its message could not be read (its load failed), as remote ranks learn
                    // too. Any other failure is reported as it is.
                    Some(r)
                        if r.buf.is_none()
                            && slot.primary != Some(l as u32)
                            && outcome.status == StatusKind::OutOfBounds =>
                    {
                        d.outcome = failed(StatusKind::RootFailed)
                    }
                    // An in-step slot's part was aborted on purpose: its own load failed.
                    _ if slot.in_step && outcome.status == StatusKind::OutOfBounds => {
                        d.outcome = failed(StatusKind::RootFailed)
                    }
                    Some(r)
                        if slot.primary != Some(l as u32)
                            && outcome.status == StatusKind::Ok
                            && !r.kind.in_place =>
                    {
                        d.copy = Some((r.buf, m.buf, u64::from(m.len)));
                        d.primary = Some(r.part);
                    }
                    _ => {}
                }
                if slot.primary == Some(l as u32) {
                    primary_at = Some(out.len());
                }
                out.push(d);
            }
            // The primary completes after every copy reading its buffer.
            let copies = out[first..].iter().filter(|d| d.copy.is_some()).count() as u32;
            if let Some(i) = primary_at {
                out[i].copies = copies;
            }
        }
    }

    /// Local process `local` left (`lost`: without detaching). True when that breaks the
    /// gather (something was unfinished): the caller fails the communicator.
    pub fn depart(&mut self, local: u32) -> bool {
        self.depart_for(local, StatusKind::CommunicatorBroken)
    }

    /// [`Sequencer::depart`] of a process that freed the communicator: what the break fails ends
    /// with [`StatusKind::CommunicatorFreed`], not as if a rank were lost.
    pub fn depart_freed(&mut self, local: u32) -> bool {
        self.depart_for(local, StatusKind::CommunicatorFreed)
    }

    fn depart_for(&mut self, local: u32, why: StatusKind) -> bool {
        let l = local as usize;
        if l >= self.departed.len() {
            return false;
        }
        self.departed[l] = Some(why);
        if !self.slots.is_empty() && !self.broken {
            self.broken_by = why;
            self.break_all();
        }
        self.broken
    }

    /// Whether local rank `local` left (and no newcomer took its rank since).
    pub fn has_departed(&self, local: u32) -> bool {
        self.departed.get(local as usize).is_some_and(Option::is_some)
    }

    /// A process took local rank `local`: it continues the sequence of the one that left.
    pub fn arrive(&mut self, local: u32) {
        if let Some(d) = self.departed.get_mut(local as usize) {
            *d = None;
        }
    }

    fn break_all(&mut self) {
        self.broken = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::regions::SegmentHandle;

    /// Node `node`'s gather in a world of 8 nodes of `ppn` processes.
    fn uniform(node: u32, ppn: u32, capacity: usize) -> Sequencer {
        Sequencer::new(node, World::Uniform { nodes: 8, ppn }, capacity)
    }

    /// The part of call `n` (a number in the tests).
    fn t(n: u64) -> CallId {
        slotmap::KeyData::from_ffi(n).into()
    }

    fn buf(i: u32) -> Option<Resolved> {
        Some(Resolved { segment: SegmentHandle(u64::from(i)), offset: 0 })
    }

    fn ok(bytes: u64) -> Outcome {
        Outcome { status: StatusKind::Ok, bytes, counters: OpCounters::default() }
    }

    fn finished(g: &mut Sequencer) -> Vec<Delivery> {
        let mut out = Vec::new();
        g.take_finished(&mut out);
        out
    }

    #[test]
    fn receiver_node_starts_with_the_first_poster_and_copies_to_the_rest() {
        // Node 1 of 2, ppn 3: root 0 lives on node 0.
        let mut g = uniform(1, 3, 4);
        g.post(2, 0, buf(12), 100, t(102)).unwrap();
        let s = g.next_start().unwrap();
        assert_eq!((s.seq, s.root, s.len, s.buf), (Seq(0), 0, 100, buf(12)));
        g.started();
        assert_eq!(g.next_start(), None);
        g.done(Seq(0), ok(100));
        assert!(finished(&mut g).is_empty(), "two local processes have not posted");
        g.post(0, 0, buf(10), 100, t(100)).unwrap();
        g.post(1, 0, buf(11), 100, t(101)).unwrap();
        let d = finished(&mut g);
        assert_eq!(d.len(), 3);
        let by_token = |n| d.iter().find(|d| d.part == t(n)).unwrap();
        assert_eq!(by_token(102).copy, None);
        assert_eq!(by_token(100).copy, Some((buf(12), buf(10), 100)));
        assert_eq!(by_token(101).copy, Some((buf(12), buf(11), 100)));
        assert!(d.iter().all(|d| d.outcome.status == StatusKind::Ok));
        assert!(g.idle());
    }

    /// An in-step slot starts on no memory from the member `next_start` chose — the real
    /// buffer's, not a sibling's on no memory, whose `None` the start's buffer equals.
    #[test]
    fn an_in_step_slot_records_the_member_it_started_from() {
        // Node 1 of 8, ppn 2: root 0 lives on node 0. Local 0 is in step, local 1 is not.
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, None, 100, t(100)).unwrap();
        g.post(1, 0, buf(11), 100, t(101)).unwrap();
        g.in_step(Seq(0));
        let s = g.next_start().unwrap();
        assert_eq!(s.buf, None, "in step: on no memory");
        g.started();
        assert_eq!(g.slots[0].primary, Some(1), "the member whose post it is");
    }

    #[test]
    fn root_node_waits_for_the_root_process() {
        // Node 0, ppn 2, root = process 1 (local 1 of node 0).
        let mut g = uniform(0, 2, 4);
        g.post(0, 1, buf(10), 8, t(100)).unwrap();
        assert_eq!(g.next_start(), None, "the root's buffer is not posted yet");
        g.post(1, 1, buf(11), 8, t(101)).unwrap();
        assert_eq!(g.next_start().map(|s| s.buf), Some(buf(11)));
        g.started();
        g.done(Seq(0), ok(8));
        let d = finished(&mut g);
        assert_eq!(d.iter().find(|d| d.part == t(100)).unwrap().copy, Some((buf(11), buf(10), 8)));
        assert_eq!(d.iter().find(|d| d.part == t(101)).unwrap().copy, None);
    }

    #[test]
    fn slots_start_in_order_and_later_slots_wait() {
        let mut g = uniform(0, 2, 4);
        // Local 1 runs ahead: slot 0 (root 0, local 0 on this node) then slot 1 (root 2, remote).
        g.post(1, 0, buf(11), 8, t(1)).unwrap();
        g.post(1, 2, buf(11), 8, t(2)).unwrap();
        assert_eq!(g.next_start(), None, "slot 0 waits for its root; slot 1 waits behind it");
        g.post(0, 0, buf(10), 8, t(3)).unwrap();
        assert_eq!(g.next_start().map(|s| s.seq), Some(Seq(0)));
        g.started();
        assert_eq!(g.next_start().map(|s| (s.seq, s.buf)), Some((Seq(1), buf(11))));
    }

    #[test]
    fn mismatched_arguments_fail_only_that_process() {
        let mut g = uniform(1, 3, 4);
        g.post(0, 0, buf(10), 100, t(100)).unwrap();
        g.started();
        g.post(1, 0, buf(11), 99, t(101)).unwrap();
        g.post(2, 1, buf(12), 100, t(102)).unwrap();
        g.done(Seq(0), ok(100));
        let d = finished(&mut g);
        let status = |n| d.iter().find(|d: &&Delivery| d.part == t(n)).unwrap().outcome.status;
        assert_eq!(status(100), StatusKind::Ok);
        assert_eq!(status(101), StatusKind::LengthMismatch);
        assert_eq!(status(102), StatusKind::BadRoot);
        assert!(d.iter().filter(|d| d.part != t(100)).all(|d| d.copy.is_none()));
    }

    #[test]
    fn a_failed_broadcast_copies_nothing() {
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, buf(10), 8, t(1)).unwrap();
        g.post(1, 0, buf(11), 8, t(2)).unwrap();
        g.started();
        g.done(Seq(0), failed(StatusKind::PeerUnreachable));
        let d = finished(&mut g);
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|d| d.copy.is_none() && d.outcome.status == StatusKind::PeerUnreachable));
    }

    #[test]
    fn a_process_leaving_mid_broadcast_breaks_the_gather() {
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, buf(10), 8, t(1)).unwrap();
        g.started();
        assert!(g.depart(1), "slot 0 can never finish without local 1");
        let d = finished(&mut g);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].outcome.status, StatusKind::CommunicatorBroken);
        assert_eq!(g.post(0, 0, buf(10), 8, t(3)), Err(StatusKind::CommunicatorBroken));
    }

    #[test]
    fn a_clean_departure_with_nothing_open_can_be_replaced() {
        let mut g = uniform(1, 2, 4);
        for (l, tok) in [(0, 1), (1, 2)] {
            g.post(l, 0, buf(10 + l), 8, t(tok)).unwrap();
        }
        g.started();
        g.done(Seq(0), ok(8));
        assert_eq!(finished(&mut g).len(), 2);
        assert!(!g.depart(1));
        g.arrive(1);
        g.post(1, 0, buf(21), 8, t(4)).unwrap();
        g.post(0, 0, buf(10), 8, t(3)).unwrap();
        assert_eq!(g.next_start().map(|s| s.seq), Some(Seq(1)), "the newcomer continues at slot 1");
    }

    #[test]
    fn posting_past_a_departed_process_fails_instead_of_waiting() {
        let mut g = uniform(1, 2, 4);
        assert!(!g.depart(1));
        assert_eq!(g.post(0, 0, buf(10), 8, t(1)), Err(StatusKind::CommunicatorBroken));
        assert!(g.broken);
    }

    #[test]
    fn a_process_that_freed_the_communicator_fails_what_it_leaves_unfinished_as_freed() {
        // In flight: local 0 posted slot 0, local 1 frees before posting it.
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, buf(10), 8, t(1)).unwrap();
        assert!(g.depart_freed(1));
        let d = finished(&mut g);
        assert_eq!(d.iter().map(|d| d.outcome.status).collect::<Vec<_>>(), [StatusKind::CommunicatorFreed]);
        assert_eq!(g.post(0, 0, buf(10), 8, t(2)), Err(StatusKind::CommunicatorFreed));
        // The protocol's own failure of a slot the free broke says freed too.
        let mut g = uniform(1, 2, 4);
        for l in 0..2 {
            g.post(l, 0, buf(10 + l), 8, t(u64::from(l) + 1)).unwrap();
        }
        g.started();
        assert!(g.depart_freed(1));
        g.done(Seq(0), failed(StatusKind::CommunicatorBroken));
        assert!(finished(&mut g).iter().all(|d| d.outcome.status == StatusKind::CommunicatorFreed));
        // Freed with nothing unfinished: a later post waiting on it fails as freed; a process
        // lost stays broken.
        let mut g = uniform(1, 2, 4);
        assert!(!g.depart_freed(1));
        assert_eq!(g.post(0, 0, buf(10), 8, t(1)), Err(StatusKind::CommunicatorFreed));
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, buf(10), 8, t(1)).unwrap();
        assert!(g.depart(1));
        assert_eq!(finished(&mut g)[0].outcome.status, StatusKind::CommunicatorBroken);
    }

    #[test]
    fn a_table_placement_finds_the_root_among_the_local_members() {
        // Ranks 0..4 on engines [1, 0, 1, 2]; this engine is protocol rank 1 with members 0 and 2
        // (local indexes 0 and 1).
        let node_of: std::sync::Arc<[u32]> = vec![1, 0, 1, 2].into();
        let index_of: std::sync::Arc<[u32]> = vec![0, 0, 1, 0].into();
        let p = Placement::Table { me: 1, node_of, index_of };
        assert_eq!(
            (p.local(0), p.local(1), p.local(2), p.local(3), p.local(9)),
            (Some(0), None, Some(1), None, None)
        );
        assert_eq!((p.node(3), p.node(9)), (2, u32::MAX));
        let mut g = Sequencer::with_placement(2, p, 4);
        g.post(0, 2, buf(10), 8, t(1)).unwrap();
        assert_eq!(g.next_start(), None, "root 2 is local index 1, not posted yet");
        g.post(1, 2, buf(11), 8, t(2)).unwrap();
        assert_eq!(g.next_start().map(|s| s.buf), Some(buf(11)));
    }

    #[test]
    fn a_refused_slot_fails_every_local_process() {
        let mut g = uniform(1, 2, 4);
        g.post(0, 0, buf(10), 8, t(1)).unwrap();
        g.refused(StatusKind::BadLength);
        g.post(1, 0, buf(11), 8, t(2)).unwrap();
        let d = finished(&mut g);
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|d| d.outcome.status == StatusKind::BadLength && d.copy.is_none()));
    }
}
