//! A host whose collective's shape this engine could not read ([`Participation::AwaitingShape`];
//! the node asks the other ranks, `node/call_shapes.rs`): the call waits for its shape from
//! them, and the host's later
//! descriptors on the same communicator wait behind it, in order, so its calls keep their
//! places among the other ranks'. Those on other communicators go on (the others' progress
//! there may be what lets them make this call). Each held descriptor, and the waiting call, has
//! its operation reserved when it is taken in: it counts as in flight, keeping its completion
//! slot.
//!
//! Once the shape is known, the call runs in step on no memory
//! ([`crate::intake::Core::submit_in_step`]) and ends with the status its own descriptor earned;
//! then the descriptors held behind it are taken in. A call whose shape nobody told within the
//! peer timeout ends with its status too, and breaks the communicator here.
use crate::engine::ids::OpId;
use crate::engine::node::call_shapes::posts_parts;
use crate::engine::node::calls::{Resolution, Shape};
use crate::engine::participation::held::Stalled;
use crate::engine::participation::Participation;
use crate::engine::{failed, Engine};
use crate::intake::HostId;
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use ringcast_abi::{Completion, Opcode, Status, StatusKind, SubmissionDescriptor};

impl Engine {
    /// Whether `host` has a call waiting for its shape on `desc`'s communicator: `desc` is then held
    /// behind it, its operation reserved.
    pub(crate) fn hold(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) -> bool {
        let Some(i) =
            self.in_step.awaiting.stalled.iter().position(|s| s.host == host && s.desc.comm == desc.comm)
        else {
            return false;
        };
        let op = self.reserve(host, desc, now);
        self.in_step.awaiting.stalled[i].held.push_back((*desc, op));
        true
    }

    /// A pending operation for `host`'s descriptor `desc`, in its place among the host's.
    fn reserve(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) -> OpId {
        let cqe = Completion::new(desc.cookie, desc.opcode, Status::OK, 0);
        self.new_op(host, cqe, now, true, true)
    }

    /// `host` made a collective on a communicator it is a member of (`shape`: its descriptor's,
    /// `None` for one that posts nothing): the node counts it.
    pub(crate) fn count_call(&mut self, host: HostId, comm: u64, shape: Option<Shape>) {
        if self.in_step.awaiting.resubmitting.is_some() {
            return; // counted when it began to wait
        }
        if let (Some(local), Some(node)) = (self.core.local_rank(host), self.node.as_mut()) {
            let call = node.call_made(local, comm, shape, &mut self.out);
            // The operation `new_op` creates next is this call (`node/call_checks.rs`).
            self.calling = call.filter(|_| shape.is_some()).map(|k| (comm, k));
            // A node-mate made it another way: its operations already taken in end
            // `DigestMismatch`, and the communicator breaks now — before this call posts a part
            // into the sequencer slot the node-mates' parts fill, which would then start as
            // theirs (a barrier's `SYNC_UP` saying the whole node arrived: DST seed
            // 777000003129; a barrier of one engine would complete at once).
            if let Some(k) = call.filter(|&k| node.disagrees(comm, k)) {
                for o in self.ops.values_mut().filter(|o| o.call == Some((comm, k))) {
                    o.disagreed = true;
                }
                node.break_comm(comm, &mut self.out);
            }
        }
    }

    /// `host`'s descriptor `desc` was refused at once (`cqe`, its completion): true if it is a
    /// collective that now waits for its shape ([`Engine::await_shape`]) instead of completing.
    /// A collective that cannot wait is counted as a call that posted nothing, and skipped.
    pub(crate) fn refused_at_once(
        &mut self,
        host: HostId,
        desc: &SubmissionDescriptor,
        cqe: Completion,
        now: Nanos,
    ) -> bool {
        if !posts_parts(desc.opcode) {
            return false;
        }
        // Refused for a field that shapes it: the call runs in step once the other ranks say
        // what it was; else it is skipped.
        let status = StatusKind::try_from(cqe.status).unwrap_or(StatusKind::BadDescriptor);
        if self.await_shape(host, desc, status, now) {
            return true;
        }
        self.count_call(host, desc.comm, None);
        self.posted_nothing(host, desc.comm);
        false
    }

    /// A call of `host` on communicator `comm` posted nothing (refused at once, and no shape
    /// learnt for it): its later posts there carry the count, so they are not matched with the
    /// other ranks' calls one behind ([`crate::engine::node::sequencer::Sequencer::posted_nothing`]).
    fn posted_nothing(&mut self, host: HostId, comm: u64) {
        if let (Some(node), Some(local)) = (self.node.as_mut(), self.core.local_rank(host)) {
            node.posted_nothing(local, comm);
        }
    }

    /// `host`'s collective `desc` was refused at once with `status`, for a field that shapes
    /// it: if `host` is a member of its communicator, it waits for its shape (true), which the
    /// node finds out; the host's later descriptors there are held until it ends.
    fn await_shape(
        &mut self,
        host: HostId,
        desc: &SubmissionDescriptor,
        status: StatusKind,
        now: Nanos,
    ) -> bool {
        if self.in_step.awaiting.resubmitting.is_some() {
            return false;
        }
        let (Some(local), Some(node)) = (self.core.local_rank(host), self.node.as_mut()) else {
            return false;
        };
        let Some(call) = node.call_awaiting_shape(local, desc.comm, now, &mut self.out) else { return false };
        // Counted when it ends (`finish_collective`), not as refused at once.
        self.core.runs_in_step();
        let op = self.reserve(host, desc, now);
        if let Some(o) = self.ops.get_mut(op) {
            o.participation = Participation::AwaitingShape;
        }
        let stall = Stalled { host, desc: *desc, status, call, op, held: VecDeque::new() };
        self.in_step.awaiting.stalled.push(stall);
        true
    }

    /// Ends the waiting calls the node resolved (true if any did): each runs in step under the
    /// shape learnt, or ends at once; the descriptors held behind it are taken in.
    pub(crate) fn resolve_shapes(&mut self, now: Nanos) -> bool {
        if self.in_step.awaiting.resolving {
            return false;
        }
        let Some(node) = self.node.as_mut() else { return false };
        let mut done = Vec::new();
        node.take_resolved_calls(&mut done);
        if done.is_empty() {
            return false;
        }
        self.in_step.awaiting.resolving = true;
        for (comm, local, call, how) in done {
            let found = self.in_step.awaiting.stalled.iter().position(|s| {
                s.desc.comm == comm && s.call == call && self.core.local_rank(s.host) == Some(local)
            });
            let Some(i) = found else { continue };
            let s = self.in_step.awaiting.stalled.swap_remove(i);
            match how {
                Resolution::Known(shape) => {
                    let run = shape.onto(&s.desc);
                    self.in_step.awaiting.resubmitting = Some(s.desc.opcode);
                    self.in_step.awaiting.reserved = Some(s.op);
                    let taken = match self.node.as_ref() {
                        Some(node) => self.core.submit_in_step(s.host, &run, s.status, now, node),
                        None => Default::default(),
                    };
                    self.take_actions(&run, taken, now);
                    self.in_step.awaiting.resubmitting = None;
                    if self.in_step.awaiting.reserved.take().is_some() {
                        // (Never: a descriptor yields one operation.)
                        self.finish_collective(s.op, failed(s.status));
                    }
                }
                Resolution::Everywhere => self.finish_collective(s.op, failed(s.status)),
                Resolution::Silent => {
                    // Nobody said what call `k` was within the peer timeout: this engine cannot
                    // post its parts, and every other engine that made it waits for them. The
                    // communicator breaks here (see `node/call_shapes.rs`): the node-mates' call
                    // `k` and every later call fail at once, and the other engines learn within
                    // the peer timeout.
                    self.finish_collective(s.op, failed(s.status));
                    if let Some(node) = self.node.as_mut() {
                        node.break_comm(comm, &mut self.out);
                    }
                }
            }
            for (d, op) in s.held {
                if let Some(j) = self
                    .in_step
                    .awaiting
                    .stalled
                    .iter()
                    .position(|t| t.host == s.host && t.desc.comm == d.comm)
                {
                    self.in_step.awaiting.stalled[j].held.push_back((d, op));
                    continue;
                }
                self.in_step.awaiting.reserved = Some(op);
                self.take_descriptor(s.host, &d, now);
                if self.in_step.awaiting.reserved.take().is_some() {
                    // (Never: every descriptor yields one operation —
                    // a waiting call's too, which takes the reserved one. Ended all the same, so
                    // the host is answered.)
                    self.finish_collective(op, failed(StatusKind::BadDescriptor));
                }
            }
        }
        self.in_step.awaiting.resolving = false;
        true
    }

    /// The engine is shutting down: the waiting calls are dropped (their operations, and those
    /// held behind them, are pending collectives: `abort_collectives` ends them).
    pub(crate) fn abort_shape_waits(&mut self) {
        self.in_step.awaiting.stalled.clear();
    }

    /// `host` left: its waiting calls and held descriptors go with it. Each waiting call was
    /// counted and never ran, so it counts as skipped (`Sequencer::posted_nothing`): a process that takes the rank
    /// and continues its calls is told typed, never paired with the others' calls one behind.
    pub(crate) fn drop_shape_waits(&mut self, host: HostId) {
        let comms: Vec<u64> =
            self.in_step.awaiting.stalled.iter().filter(|s| s.host == host).map(|s| s.desc.comm).collect();
        for comm in comms {
            self.posted_nothing(host, comm);
        }
        self.in_step.awaiting.stalled.retain(|s| s.host != host);
    }

    /// The operation `host` creates now: a reserved one, filled in with `cqe` (the opcode a
    /// waiting call's own, while it runs under the shape the other ranks gave it), or a new one.
    pub(crate) fn echoed(&mut self, host: HostId, cqe: Completion) -> (Option<OpId>, Completion) {
        let opcode: Opcode = self.in_step.awaiting.resubmitting.unwrap_or(cqe.opcode);
        let key = self
            .in_step
            .awaiting
            .reserved
            .take()
            .filter(|&k| self.ops.get(k).is_some_and(|o| o.host == host));
        (key, Completion { opcode, ..cqe })
    }
}
