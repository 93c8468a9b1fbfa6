//! The dispatcher: where every answer the engine gets goes. A job the driver answered goes to
//! its owner ([`Job`]: a COPY's operation, the reliable-transfer layer, a delivery, a call, an
//! assembly, a reduction, an exchange); a slot the node delivered goes to the call whose part
//! it was; a call that is over completes its host operation. After every event, [`Engine::after`]
//! runs the node and the exchanges until neither has anything more to do.
//!
//! ```text
//!  descriptor ─► planner ─► call = collective::start(..) ─► Cx: post part | note exchange |
//!                 (one arm per collective)                      dma | reduce | assemble
//!  frame, timer ─► node (sequencer + protocol + links) ─► slot delivered ─┐
//!  DMA answer ─► jobs[id] ─► owner: Call | Transfer | Deliver | Assemble | │
//!                                  Reduce | Exchange | Copy | Record       │
//!                                         │                                ▼
//!                                         └──────────► calls[id].part_done(outcome, cx)
//!                                                        Running | Done(outcome) | Handed
//!                                                                  │
//!                                              finish_collective(op) ─► ordered completion
//! ```
//!
//! What `after` converges on: every call whose shape became known has been resolved
//! (`participation/`), every slot that can start has started, every transfer the protocol
//! ended has been delivered (copies queued, parts finished), every exchange step that ended has
//! been carried on (a step's copy that could not be made counts as ended), every call the node
//! found to disagree has been failed and its communicator broken (`node/call_checks.rs`). A
//! round that resolved, delivered, issued, finished, failed or started none of these ends the
//! loop — so the round after any work checks once more, and work a round made possible (a part
//! finished by a delivery letting its call post the next) is started before `after` returns.
//! It terminates: each round that continues consumes one of those finite lists, and nothing in
//! a round refills the list it consumed without an event from outside, other than a step that
//! posts its next one (bounded by the call's schedule).
use crate::engine::action::{Dma, NO_MEMORY};
use crate::engine::call::Call;
use crate::engine::cx::{Cx, Progress};
use crate::engine::exchange::Exchanges;
use crate::engine::hands::Hands;
use crate::engine::ids::{CallId, JobId};
use crate::engine::jobs::Job;
use crate::engine::reduction::{Over, Then};
use crate::engine::{failed, Engine};
use crate::intake::HostId;
use crate::transfer::protocol::{DmaDir, OpCounters, Outcome};
use crate::Nanos;
use alloc::vec::Vec;
use ringcast_abi::{RegionKey, Status, StatusKind};
use slotmap::SlotMap;

impl Engine {
    /// The calls, and the context a call acts through: the rest of the engine but its host
    /// operations and intake.
    fn split(&mut self) -> (&mut SlotMap<CallId, Call>, Cx<'_>) {
        let Engine { core, node, out, jobs, calls, reductions, assemblies, exchanges, over, .. } = self;
        let h = Hands { config: core.config(), node, jobs, out, reductions, over };
        (calls, Cx { h, assemblies, exchanges })
    }

    /// The exchanges, and the hands they act through.
    fn exchange_hands(&mut self) -> (&mut Exchanges, Hands<'_>) {
        let Engine { core, node, out, jobs, reductions, exchanges, over, .. } = self;
        (exchanges, Hands { config: core.config(), node, jobs, out, reductions, over })
    }

    /// Starts a collective call: `start` posts its parts, as call `id`, through the context.
    pub(crate) fn start_call(
        &mut self,
        now: Nanos,
        start: impl FnOnce(CallId, &mut Cx<'_>) -> (Call, Progress),
    ) {
        let (calls, mut cx) = self.split();
        let mut progress = Progress::Running;
        let id = calls.insert_with_key(|id| {
            let (call, p) = start(id, &mut cx);
            progress = p;
            call
        });
        self.progress(id, progress, now);
    }

    /// What a call said after an event: it runs on, its operation completes, or its last step
    /// completes it.
    fn progress(&mut self, id: CallId, progress: Progress, now: Nanos) {
        match progress {
            Progress::Running => {}
            Progress::Handed => {
                self.calls.remove(id);
            }
            Progress::Done(outcome) => {
                if let Some(call) = self.calls.remove(id) {
                    self.finish_collective(call.op(), outcome);
                }
            }
        }
        self.carry_over(now);
    }

    /// One part of call `id` ended with `outcome`.
    pub(crate) fn finish_part(&mut self, id: CallId, outcome: Outcome, now: Nanos) {
        let (calls, mut cx) = self.split();
        let Some(call) = calls.get_mut(id) else { return };
        let progress = call.part_done(outcome, &mut cx);
        self.progress(id, progress, now);
    }

    /// Reductions that ended as they started: carried on now.
    fn carry_over(&mut self, now: Nanos) {
        while !self.over.is_empty() {
            for over in core::mem::take(&mut self.over) {
                self.reduction_over(over, now);
            }
        }
    }

    /// A reduction ended: what was to run next runs.
    fn reduction_over(&mut self, o: Over, now: Nanos) {
        match o.then {
            Then::Complete { op, counters } => {
                let outcome = match o.ok {
                    true => Outcome { status: StatusKind::Ok, bytes: o.len, counters },
                    false => failed(o.fault),
                };
                self.finish_collective(op, outcome);
            }
            Then::Assembled { comm, seq } => {
                if let Some(node) = self.node.as_mut() {
                    node.assembled(comm, seq, (!o.ok).then_some(o.fault), &mut self.out);
                }
            }
            Then::Exchange { key } => {
                let status = if o.ok { StatusKind::Ok } else { o.fault };
                let outcome = Outcome { status, bytes: o.len, counters: OpCounters::default() };
                // Carried on in `after`.
                self.exchanges.done.push((key, outcome));
            }
        }
        let _ = now;
    }

    /// The host whose call `part` is (`None`: the call or its host is gone).
    fn host_of(&self, part: CallId) -> Option<HostId> {
        let op = self.calls.get(part)?.op();
        self.ops.get(op).map(|o| o.host)
    }

    /// The composed calls `host` has in flight on any communicator, the one being started
    /// included: how many calls a root of their parts may be ahead of a receiver
    /// ([`crate::transfer::env::Post::window`]; an over-count only makes a rendezvous likelier).
    pub(crate) fn calls_in_flight(&self, host: HostId) -> u32 {
        let mine = self
            .calls
            .values()
            .filter(|c| c.in_window() && self.ops.get(c.op()).is_some_and(|o| o.host == host));
        mine.count() as u32 + 1
    }

    /// [`Engine::handle_dma_done`] without the round of [`Engine::after`]: the job's owner
    /// takes the answer.
    pub(crate) fn dma_over(&mut self, job: JobId, ok: bool, now: Nanos) {
        let Some(j) = self.jobs.remove(job) else { return };
        let done = |fault| if ok { failed(StatusKind::Ok) } else { failed(fault) };
        match j {
            Job::Copy { op, len } => {
                if let Some(o) = self.ops.get_mut(op) {
                    if !ok {
                        o.cqe.status = Status::from(StatusKind::OutOfBounds);
                        o.cqe.bytes = 0;
                        self.core.dma_failed(len);
                    }
                    o.pending = false;
                    self.publish(op);
                }
            }
            Job::Transfer(token) => {
                if let Some(node) = self.node.as_mut() {
                    node.dma_done(token, ok, now, &mut self.out);
                }
            }
            Job::Deliver { part, outcome, primary } => {
                let outcome = if ok {
                    outcome
                } else {
                    Outcome { status: StatusKind::OutOfBounds, bytes: 0, ..outcome }
                };
                self.finish_part(part, outcome, now);
                self.copied(primary, now);
            }
            Job::Record { op, local, comm, bytes } => {
                let node = self.node.as_mut();
                match (ok, node) {
                    (false, _) => self.finish_collective(op, failed(StatusKind::OutOfBounds)),
                    (true, None) => self.finish_collective(op, failed(StatusKind::UnknownCommunicator)),
                    (true, Some(node)) => match node.comm_create(local, comm, &bytes) {
                        Ok(None) => self.finish_collective(op, failed(StatusKind::Ok)),
                        Ok(Some((slot, group))) => {
                            let job = self.jobs.insert(Job::Join { op, slot });
                            self.out.join(job, group);
                        }
                        Err(kind) => self.finish_collective(op, failed(kind)),
                    },
                }
            }
            Job::Assemble { comm, seq } => {
                self.assemblies.copied(comm, seq, ok, StatusKind::OutOfBounds, &mut self.node, &mut self.out);
            }
            Job::Exchange(key) => {
                let outcome = done(StatusKind::OutOfBounds);
                // Carried on in `after`.
                self.exchanges.done.push((key, Outcome { bytes: 0, ..outcome }));
            }
            Job::Call(id) => {
                let outcome = done(StatusKind::OutOfBounds);
                self.finish_part(id, outcome, now);
            }
            Job::Reduce { r, load } => {
                if let Some(o) = self.reductions.job_done(
                    r,
                    load,
                    ok,
                    StatusKind::OutOfBounds,
                    &mut self.jobs,
                    &mut self.out,
                ) {
                    self.reduction_over(o, now);
                }
            }
            Job::Join { .. } => {} // answered by handle_join_done
        }
    }

    /// One copy reading primary `primary`'s buffer is over: the last one completes it.
    fn copied(&mut self, primary: Option<CallId>, now: Nanos) {
        let Some(p) = primary else { return };
        let Some(i) = self.primaries.iter().position(|w| w.0 == p) else { return };
        self.primaries[i].1 -= 1;
        if self.primaries[i].1 == 0 {
            let (part, _, outcome) = self.primaries.swap_remove(i);
            self.finish_part(part, outcome, now);
        }
    }

    /// After every event: the slots that can start, the protocol's host-memory jobs and the
    /// broadcasts it ended, the deliveries they make, the communicators that settled, the
    /// exchanges' steps (see the module doc for what it converges on).
    pub(crate) fn after(&mut self, now: Nanos) {
        self.converge(now);
        // The deadlines this event moved that no entry point re-arms on its own: the freed
        // communicators' and the drain's (the protocol's, the shape queries' and the checks' are
        // re-armed where they change).
        if let Some(node) = self.node.as_mut() {
            node.rearm_freeing();
        }
        self.arm_linger(now);
    }

    /// [`Engine::after`]'s fix point.
    fn converge(&mut self, now: Nanos) {
        loop {
            let resolved = self.resolve_shapes(now);
            let stepped = self.step_node(now);
            // Slots and transfers the engine carries out itself (`exchange.rs`): their progress
            // may finish slots, which the next round delivers.
            let Some(node) = self.node.as_mut() else { return };
            self.exchanges.take_started(node);
            let done = core::mem::take(&mut self.exchanges.done);
            let disagreed = self.disagreed_calls();
            let progress = resolved || stepped || !done.is_empty() || disagreed;
            for (key, outcome) in done {
                let (exchanges, mut h) = self.exchange_hands();
                exchanges.part_over(key, outcome, &mut h, now);
                self.carry_over(now);
            }
            // The first waiting slot of each communicator without an exchange running starts.
            let (exchanges, mut h) = self.exchange_hands();
            let started = exchanges.start_next(&mut h, now);
            self.carry_over(now);
            // (A step's copies that could not be made fail into `exchanges.done`: another
            // round carries them on.)
            if !started && !progress && self.exchanges.done.is_empty() {
                return;
            }
        }
    }

    /// Fails the calls the node found to disagree and breaks their communicators (true if any):
    /// every local operation of such a call ends `DigestMismatch` once the breaking ends it,
    /// every other one on the communicator `CommunicatorBroken` (`node/call_checks.rs`).
    fn disagreed_calls(&mut self) -> bool {
        let Some(node) = self.node.as_mut() else { return false };
        let mut found = Vec::new();
        node.take_disagreed(&mut found);
        for &(comm, call) in &found {
            for o in self.ops.values_mut().filter(|o| o.call == Some((comm, call))) {
                o.disagreed = true;
            }
            if let Some(node) = self.node.as_mut() {
                node.break_comm(comm, &mut self.out);
            }
        }
        !found.is_empty()
    }

    /// One step of the node: slots started, the protocol's jobs issued, deliveries carried out.
    /// True if it issued a job or made a delivery: a delivery that finishes a part may let its
    /// call post the next one, which only the next step starts.
    fn step_node(&mut self, now: Nanos) -> bool {
        let Some(node) = self.node.as_mut() else { return false };
        let mut deliveries = Vec::new();
        let mut jobs = Vec::new();
        node.step(now, &mut self.out, &mut jobs, &mut deliveries);
        let stepped = !jobs.is_empty() || !deliveries.is_empty();
        for j in jobs {
            let dma = match j.dir {
                DmaDir::Load => Dma::Load { src: j.buf, len: j.len },
                DmaDir::Store => Dma::Store { dst: j.buf, len: j.len },
            };
            let job = self.jobs.insert(Job::Transfer(j.token));
            self.out.dma(job, dma);
        }
        // Primaries first: a copy ending at once (its host gone) finds its primary waiting.
        for d in deliveries.iter().filter(|d| d.copies > 0) {
            // Completed after the last copy reading its buffer (`copied`).
            self.primaries.push((d.part, d.copies, d.outcome));
        }
        for d in deliveries {
            if d.copies > 0 {
                continue;
            }
            let Some(host) = self.host_of(d.part) else {
                // Its host left (or its call is over): no copy, but the primary no longer waits
                // for it, and the call is let go of.
                self.calls.remove(d.part);
                self.copied(d.primary, now);
                continue;
            };
            match d.copy.map(|(src, dst, len)| Dma::copy(host, src, dst, len, [RegionKey::NONE; 2])) {
                Some(Some(dma)) => {
                    let deliver = Job::Deliver { part: d.part, outcome: d.outcome, primary: d.primary };
                    let job = self.jobs.insert(deliver);
                    self.out.dma(job, dma);
                }
                // An end on no memory: the copy fails where it is made, as a failed job does.
                Some(None) => {
                    self.finish_part(d.part, Outcome { status: NO_MEMORY, bytes: 0, ..d.outcome }, now);
                    self.copied(d.primary, now);
                }
                None => self.finish_part(d.part, d.outcome, now),
            }
        }
        stepped
    }
}
