//! Calls that disagree, checked when they wait (issue 38, docs/protocol.md "Calls that
//! disagree").
//!
//! Every rank of a communicator makes the same collectives in the same order, so the `k`-th call
//! of each is the same call — in a correct program. In an erroneous one the ranks' calls `k`
//! may differ, and where they take different exchanges between the engines (a length on either
//! side of a boundary of the cost model, `model/compose.rs`; one collective against another)
//! they never meet: one engine multicasts its part on the communicator while the others swap
//! over the pair communicators, each waiting for transfers the others never start — alive, so
//! never declared dead. Where they do meet, the call's context and length under the MAC fail
//! them `DigestMismatch` at once; this module covers the rest.
//!
//! A call that waited `peer_timeout_ms / 64` at an engine (the synchronization's probe interval)
//! is checked against the communicator's manager (its rank-0 engine), in the `CALL_SHAPE` frames
//! of `call_shapes.rs` — a query here carries the asker's shape of call `k`:
//! * another engine asks the manager; the manager answers with its shape (or `PENDING`, and its
//!   shape once its processes make the call), and compares the asker's;
//! * the manager asks every engine, while its own call `k` waits or once any engine asked about
//!   it, until every engine answered with a shape that agrees; each compares the manager's too.
//!
//! Shapes *agree* when they make the same schedule: the same opcode, length (but a barrier's,
//! which the engine never reads), element type for a reduction (its operation is not
//! compared: the context under the MAC still catches operations that differ), element type
//! and operation for a scan or an exscan (every rank's prefix is the operation's; an in-step
//! operation aside), and root for a broadcast or a reduce. Shapes that do not agree are a
//! verdict: every local process's call `k` fails `DigestMismatch` and the communicator breaks there (the engine
//! drops it, as a failed exchange does: its later calls fail `CommunicatorBroken`). An engine
//! that finds it tells the manager (`SHAPE_MISMATCH`), and the manager tells every engine,
//! which breaks alike — so an engine whose call agrees with the manager's but waits on one that
//! disagreed ends too, within a round trip; should that word be lost, the silence of the
//! engines that broke fails it within the peer timeout.
//!
//! Local processes of one engine whose calls `k` do not agree are a verdict too, found as the
//! second makes it (`call_shapes.rs`, `Node::call_made`): the node's part of the call cannot
//! be built, and every other engine's call would wait for it.
//!
//! Nothing is sent while calls progress: a call checked is one already overdue, and a slow
//! process is not a disagreeing one — its engine answers `PENDING`, and the check waits.
//!
//! A manager that answers nothing — not even `PENDING` — for the peer timeout while a call
//! waits at another engine is unreachable, by the protocol's own rule, and the communicator
//! breaks at that engine: the call and every later one there fail `CommunicatorBroken`. (So
//! ends a call one rank makes after every other rank's ended and they freed the communicator:
//! the manager let go of it, and the call's transfers would wait for parts nobody sends.) Once
//! it heard nothing for a while, the check asks every `peer_timeout_ms / 64`, as the
//! synchronization probes a neighbour, so loss alone does not silence a live manager.
use crate::engine::action::Outbox;
use crate::engine::node::calls::Shape;
use crate::engine::node::{Node, NodeEnv};
use crate::timer::TimerKey;
use crate::transfer::call_shape::ShapeIn;
use crate::transfer::env::CommHandle;
use crate::Nanos;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::frame::CallShapeBody;
use ringcast_abi::reduce::parse_reduce_spec;
use ringcast_abi::wire::{SHAPE_KNOWN, SHAPE_MISMATCH, SHAPE_PENDING, SHAPE_QUERY};
use ringcast_abi::Opcode;

/// Calls one communicator checks at once; past it, a call is not checked (its operations still
/// end as they would: this bounds only how many disagreements are looked for at a time).
const MAX_CHECKS: usize = 64;

/// How far the repetitions of a check's queries back off: to this many of its first waits
/// (`peer_timeout_ms / 64` each), eight times per peer timeout.
const BACKOFF_WAITS: Nanos = 8;

/// One communicator's calls checked, or to be checked once they wait.
#[derive(Clone, Debug, Default)]
pub(crate) struct Checks {
    open: Vec<Check>,
}

#[derive(Clone, Debug)]
struct Check {
    /// The call's index on the communicator.
    call: u64,
    /// Its local operations not over yet (0: over here; the manager may still check it for
    /// the others).
    ops: u32,
    phase: Phase,
    /// When it asks next (`Waiting`: when it starts), and the interval after that.
    next: Nanos,
    backoff: Nanos,
    /// The manager: engines (protocol ranks) whose shape agreed (empty at another engine).
    agreed: Vec<bool>,
    /// When an answer last came: nothing new for the peer timeout, and a check that is not
    /// open here any more stops asking (an engine that silent is dead, which its transfers
    /// find out).
    heard: Nanos,
    /// A local operation of it ended `DigestMismatch` or `LengthMismatch` — what calls that
    /// meet and disagree end with, but corruption too: checked at once, over or not.
    failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Open here, not overdue yet.
    Waiting,
    /// Asking: another engine the manager, the manager every engine not yet agreed.
    Asking,
    /// Nothing more to ask: the manager's shape agreed (another engine); every engine's
    /// agreed, or nobody new answered for the peer timeout (the manager).
    Settled,
}

impl Check {
    /// Whether it still has a timer.
    fn timed(&self) -> bool {
        match self.phase {
            Phase::Waiting => self.ops > 0 || self.failed,
            Phase::Asking => true,
            Phase::Settled => false,
        }
    }

    /// Whether it is still worth keeping: open here, or asking (the manager for the others, or
    /// about a call that failed here).
    fn kept(&self) -> bool {
        self.ops > 0 || self.timed() && (self.failed || !self.agreed.is_empty())
    }
}

/// Whether shapes `a` and `b` of one call make the same schedule (module doc).
pub(crate) fn agree(a: &Shape, b: &Shape) -> bool {
    let op = Opcode(a.opcode);
    let scans = op == Opcode::SCAN || op == Opcode::EXSCAN;
    let reduces = op == Opcode::ALLREDUCE || op == Opcode::REDUCE || scans;
    let rooted = op == Opcode::BCAST || op == Opcode::REDUCE;
    a.opcode == b.opcode
        && (op == Opcode::BARRIER || a.len == b.len)
        && (!reduces || a.spec & 0xff == b.spec & 0xff)
        && (!scans || same_operation(a.spec, b.spec))
        && (!rooted || a.root == b.root)
}

/// Whether a scan's operations, in `spec`s of one element type, agree: the same, or one of them
/// in step at its rank — an operation the engine does not reduce that type with runs as an
/// in-step operation (`intake::GatherCall::in_step_op`), its rank ending with its own status —
/// which the check leaves to the call's run, as it does an allreduce's.
fn same_operation(a: u16, b: u16) -> bool {
    let ((ta, oa), (tb, ob)) = (parse_reduce_spec(a), parse_reduce_spec(b));
    oa == ob || !oa.supports(ta) || !ob.supports(tb)
}

impl Node {
    /// A local process's operation of call `call` on communicator `comm` started: checked once
    /// it waited `check_after`.
    pub(crate) fn call_opened(&mut self, comm: u64, call: u64, now: Nanos) {
        let wait = self.check_after;
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) else { return };
        match c.checks.open.iter().position(|k| k.call == call) {
            Some(i) => c.checks.open[i].ops += 1,
            None if c.checks.open.len() < MAX_CHECKS => c.checks.open.push(Check {
                call,
                ops: 1,
                phase: Phase::Waiting,
                next: now + wait,
                backoff: wait,
                agreed: Vec::new(),
                heard: now,
                failed: false,
            }),
            None => return,
        }
        self.refresh_checks();
    }

    /// A local process's operation of call `call` on communicator `comm` is over.
    pub(crate) fn call_closed(&mut self, comm: u64, call: u64) {
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) else { return };
        let Some(k) = c.checks.open.iter_mut().find(|k| k.call == call) else { return };
        k.ops = k.ops.saturating_sub(1);
        // Over here: nothing left to check (but a manager asking for the others goes on).
        c.checks.open.retain(Check::kept);
        self.refresh_checks();
    }

    /// A local process's operation of call `call` on communicator `comm` ended `DigestMismatch`
    /// or `LengthMismatch`: the engines met, and their calls may disagree — or a payload was
    /// corrupted in flight. If they disagree, some engine may have spent broadcast ids or an
    /// epoch this one did not (a barrier against a broadcast), so the next calls would not meet:
    /// checked at once, whatever the call's other operations do.
    pub(crate) fn call_failed(&mut self, comm: u64, call: u64) {
        let wait = self.check_after;
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) else { return };
        if c.proto.is_none() {
            return; // broken here already: nothing to check
        }
        let i = match c.checks.open.iter().position(|k| k.call == call) {
            Some(i) => i,
            None if c.checks.open.len() < MAX_CHECKS => {
                c.checks.open.push(Check {
                    call,
                    ops: 0,
                    phase: Phase::Waiting,
                    next: 0,
                    backoff: wait,
                    agreed: Vec::new(),
                    heard: 0,
                    failed: false,
                });
                c.checks.open.len() - 1
            }
            None => return,
        };
        let k = &mut c.checks.open[i];
        k.failed = true;
        if k.phase == Phase::Waiting {
            k.next = 0; // due now
        }
        self.refresh_checks();
    }

    /// Calls found to disagree since the last call: (communicator handle, call), into `out`.
    pub(crate) fn take_disagreed(&mut self, out: &mut Vec<(u64, u64)>) {
        out.append(&mut self.disagreed);
    }

    /// Whether call `call` of communicator `comm` was found to disagree and the engine has not
    /// taken it yet ([`Node::take_disagreed`]).
    pub(crate) fn disagrees(&self, comm: u64, call: u64) -> bool {
        self.disagreed.contains(&(comm, call))
    }

    /// Re-arms [`TimerKey::CallChecks`], when the earliest check asks next, after checks
    /// changed.
    fn refresh_checks(&mut self) {
        let at = self
            .comms
            .iter()
            .flatten()
            .flat_map(|c| c.checks.open.iter())
            .filter(|k| k.timed())
            .map(|k| k.next)
            .min();
        self.proto.timers.set(TimerKey::CallChecks, at);
    }

    /// Checks due at `now`: the calls that waited start asking, and those asking ask again.
    pub(crate) fn on_check_timers(&mut self, now: Nanos, out: &mut Outbox) {
        let peer = self.free_linger;
        let wait = self.check_after;
        let cap = wait * BACKOFF_WAITS;
        // Communicators whose manager stayed silent while a call of theirs waits here.
        let mut unreachable: Vec<u64> = Vec::new();
        for slot in 0..self.comms.len() {
            let engines = self.comms[slot].as_ref().and_then(|c| c.proto).and_then(|p| self.proto.engines(p));
            let Some(c) = self.comms[slot].as_mut() else { continue };
            let Some((engines, me)) = engines else {
                // Its protocol side is gone (broken here): nothing to ask with, nobody to ask.
                c.checks.open.clear();
                continue;
            };
            let manager = me == 0;
            let mut due: Vec<u64> = Vec::new();
            let mut silent_manager = false;
            c.checks.open.retain_mut(|k| {
                if !k.timed() || now < k.next {
                    return true;
                }
                // Another engine asking the manager about a call open here.
                let waits_on_manager = k.phase == Phase::Asking && !manager && k.ops > 0;
                if waits_on_manager && now >= k.heard + peer {
                    // The manager answered nothing — not even `PENDING` — for the peer timeout
                    // while this call waits: unreachable, by the protocol's own rule (or it let
                    // go of the communicator: every other rank's call ended and they freed it,
                    // and this rank's call is one they never made). Nothing else would end the
                    // call: its transfers wait for parts nobody sends (DST seed 999000007373).
                    silent_manager = true;
                    return true;
                }
                if k.phase == Phase::Asking && (manager || k.ops == 0) && now >= k.heard + peer {
                    // Nobody new answered for the peer timeout: the engines that did not are
                    // dead, which their transfers find out. Stop; keep it while it is open here.
                    k.phase = Phase::Settled;
                    return k.kept();
                }
                if k.phase == Phase::Waiting {
                    // Waited long enough: start asking.
                    k.phase = Phase::Asking;
                    k.heard = now;
                    if manager {
                        k.agreed = vec![false; engines as usize];
                        if let Some(a) = k.agreed.get_mut(me as usize) {
                            *a = true;
                        }
                    }
                }
                // Heard nothing for a while: ask every `peer_timeout_ms / 64`, as the
                // synchronization probes a neighbour — 64 chances per peer timeout, so loss
                // alone does not make the manager look silent.
                let quiet = waits_on_manager && now.saturating_sub(k.heard) >= cap;
                k.next = now + if quiet { wait } else { k.backoff };
                k.backoff = (k.backoff * 2).min(cap.max(1));
                due.push(k.call);
                true
            });
            if silent_manager {
                unreachable.push(c.handle);
                continue;
            }
            for call in due {
                self.ask_check(slot, call, out);
            }
        }
        // Their calls, and every later one, fail `CommunicatorBroken` here; the other engines,
        // if any still wait, learn within the peer timeout.
        for handle in unreachable {
            self.break_comm(handle, out);
        }
        self.refresh_checks();
    }

    /// Sends call `call`'s check queries on communicator `slot`, carrying this engine's shape of
    /// it: the manager to every engine not yet agreed, another engine to the manager. (Nothing
    /// while this engine's own shape of it is not known: the manager before its processes made
    /// the call; it asks again on its next turn.)
    fn ask_check(&mut self, slot: usize, call: u64, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_ref() else { return };
        let (Some(proto), Some(mine)) = (c.proto, c.calls.known(call)) else { return };
        let Some(k) = c.checks.open.iter().find(|k| k.call == call) else { return };
        let to: Vec<u32> = match k.agreed.is_empty() {
            true => vec![0],
            false => (0..k.agreed.len() as u32).filter(|&r| !k.agreed[r as usize]).collect(),
        };
        let body = mine.body();
        for r in to {
            self.send_check(proto, r, SHAPE_QUERY, call as u32, &body, out);
        }
    }

    fn send_check(
        &mut self,
        proto: CommHandle,
        to: u32,
        flags: u16,
        call: u32,
        body: &CallShapeBody,
        out: &mut Outbox,
    ) {
        let Node { proto: p, finished, jobs, .. } = self;
        p.send_call_shape(
            proto,
            to,
            flags,
            call,
            body,
            &mut NodeEnv { out, jobs, done: finished, port: None, keep: None },
        );
    }

    /// A `CALL_SHAPE` frame on communicator `slot` the check may use (after `call_shapes.rs`
    /// answered or used it): a query carrying the asker's shape, a shape answering this
    /// engine's query, a pending answer, or the word that call `k` disagreed.
    pub(crate) fn on_check_frame(&mut self, slot: usize, f: &ShapeIn, now: Nanos, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_ref() else { return };
        let Some(proto) = c.proto else { return };
        // A world every local process finalized: its calls were the last job's.
        if slot == 0 && c.freed.iter().all(|&f| f) {
            return;
        }
        let manager = self.proto.engines(proto).is_some_and(|(_, me)| me == 0);
        let Some(c) = self.comms[slot].as_mut() else { return };
        // The call's full index (the frame carries its low 32 bits).
        let call = c.calls.index_of(f.call);
        match f.flags {
            // A query without a shape asks for one (`call_shapes.rs`).
            SHAPE_QUERY if f.shape.opcode != 0 => {
                let theirs = Shape::from_body(&f.shape);
                if c.calls.known(call).is_some_and(|mine| !agree(&mine, &theirs)) {
                    return self.disagree(slot, call, true, out);
                }
                if manager {
                    // Someone waits on call `k`: ask every engine about it too.
                    self.manager_checks(slot, call, now);
                }
            }
            SHAPE_KNOWN => {
                let theirs = Shape::from_body(&f.shape);
                let Some(mine) = c.calls.known(call) else { return };
                if !agree(&mine, &theirs) {
                    return self.disagree(slot, call, true, out);
                }
                let Some(k) = c.checks.open.iter_mut().find(|k| k.call == call) else { return };
                k.heard = now;
                match k.agreed.get_mut(f.from as usize) {
                    Some(a) => *a = true,
                    // Another engine: the manager's shape agrees; nothing more to ask.
                    None if f.from == 0 => k.phase = Phase::Settled,
                    None => {}
                }
                if !k.agreed.is_empty() && k.agreed.iter().all(|&a| a) {
                    k.phase = Phase::Settled;
                }
                c.checks.open.retain(Check::kept);
                self.refresh_checks();
            }
            SHAPE_PENDING => {
                if let Some(k) = c.checks.open.iter_mut().find(|k| k.call == call) {
                    k.heard = now;
                }
            }
            // From the manager: every engine breaks. From another engine (which found it): the
            // manager takes its word — an authenticated member's — and tells every engine.
            SHAPE_MISMATCH if f.from == 0 => self.disagree(slot, call, false, out),
            SHAPE_MISMATCH if manager => self.disagree(slot, call, true, out),
            _ => {}
        }
    }

    /// The manager starts asking every engine about call `call` (another engine waits on it).
    fn manager_checks(&mut self, slot: usize, call: u64, now: Nanos) {
        let Some(proto) = self.comms[slot].as_ref().and_then(|c| c.proto) else { return };
        let Some((engines, me)) = self.proto.engines(proto) else { return };
        let wait = self.check_after;
        let Some(c) = self.comms[slot].as_mut() else { return };
        let i = match c.checks.open.iter().position(|k| k.call == call) {
            Some(i) => i,
            None if c.checks.open.len() < MAX_CHECKS => {
                c.checks.open.push(Check {
                    call,
                    ops: 0,
                    phase: Phase::Waiting,
                    next: now,
                    backoff: wait,
                    agreed: Vec::new(),
                    heard: now,
                    failed: false,
                });
                c.checks.open.len() - 1
            }
            None => return,
        };
        let k = &mut c.checks.open[i];
        if k.phase == Phase::Asking {
            return;
        }
        k.phase = Phase::Asking;
        k.heard = now;
        k.next = now;
        k.agreed = vec![false; engines as usize];
        if let Some(a) = k.agreed.get_mut(me as usize) {
            *a = true;
        }
        self.refresh_checks();
    }

    /// Call `call` of communicator `slot` disagrees: tell the others if `tell` (the manager:
    /// every engine; another engine, which found it itself: the manager), then fail its local
    /// operations `DigestMismatch` and break the communicator here ([`Node::take_disagreed`]:
    /// the engine does both).
    pub(crate) fn disagree(&mut self, slot: usize, call: u64, tell: bool, out: &mut Outbox) {
        let Some(c) = self.comms[slot].as_mut() else { return };
        let handle = c.handle;
        c.checks.open.retain(|k| k.call != call);
        if self.disagreed.contains(&(handle, call)) {
            return;
        }
        self.disagreed.push((handle, call));
        let proto = c.proto;
        if let (true, Some(proto)) = (tell, proto) {
            if let Some((engines, me)) = self.proto.engines(proto) {
                let none = CallShapeBody::default();
                let to: Vec<u32> = match me {
                    0 => (1..engines).collect(),
                    _ => vec![0],
                };
                for r in to {
                    self.send_check(proto, r, SHAPE_MISMATCH, call as u32, &none, out);
                }
            }
        }
        self.refresh_checks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(opcode: Opcode, spec: u16, root: u32, len: u64) -> Shape {
        Shape { opcode: opcode.0, flags: 0, spec, root, len }
    }

    #[test]
    fn shapes_agree_on_what_makes_the_schedule_only() {
        // A type in the low byte of `spec`, the operation in the high byte.
        let (sum, max) = (0x0106, 0x0406);
        let a = shape(Opcode::ALLREDUCE, sum, 0, 4096);
        assert!(agree(&a, &a));
        assert!(!agree(&a, &shape(Opcode::ALLREDUCE, sum, 0, 2048)), "another length");
        assert!(!agree(&a, &shape(Opcode::ALLGATHER, 0, 0, 4096)), "another collective");
        assert!(!agree(&a, &shape(Opcode::ALLREDUCE, 0x0108, 0, 4096)), "another type");
        assert!(agree(&a, &shape(Opcode::ALLREDUCE, max, 0, 4096)), "an in-step operation");
        assert!(agree(&a, &shape(Opcode::ALLREDUCE, sum, 3, 4096)), "a root an allreduce has not");
        let b = shape(Opcode::BCAST, 0, 1, 100);
        assert!(!agree(&b, &shape(Opcode::BCAST, 0, 2, 100)), "another root");
        assert!(!agree(&shape(Opcode::REDUCE, sum, 1, 8), &shape(Opcode::REDUCE, sum, 2, 8)));
        let barrier = shape(Opcode::BARRIER, 0, 0, 4);
        assert!(agree(&barrier, &shape(Opcode::BARRIER, 0, 0, 64)), "a barrier's scratch");
        assert!(!agree(&barrier, &b));
        // A scan: opcode, length, type and operation (the prefix is the operation's).
        let scan = shape(Opcode::SCAN, sum, 0, 4096);
        assert!(agree(&scan, &scan));
        assert!(agree(&scan, &shape(Opcode::SCAN, sum, 2, 4096)), "a root a scan has not");
        assert!(!agree(&scan, &shape(Opcode::EXSCAN, sum, 0, 4096)), "an exclusive scan");
        assert!(!agree(&scan, &shape(Opcode::SCAN, sum, 0, 2048)), "another length");
        assert!(!agree(&scan, &shape(Opcode::SCAN, 0x0108, 0, 4096)), "another type");
        assert!(!agree(&scan, &shape(Opcode::SCAN, max, 0, 4096)), "another operation");
        assert!(!agree(&scan, &a), "an allreduce");
        let exscan = shape(Opcode::EXSCAN, sum, 0, 64);
        assert!(!agree(&exscan, &shape(Opcode::EXSCAN, max, 0, 64)), "another operation");
        // An operation no type has (none numbered 0x7f): an in-step operation, left to the run.
        assert!(agree(&exscan, &shape(Opcode::EXSCAN, 0x7f06, 0, 64)), "an in-step operation");
    }
}
