//! The protocol's timers: root delays, a root's next batch of fragments, repair requests, dead
//! peers, synchronization retries and probes — one [`TimerKey::Comm`] entry per communicator in
//! the engine's timer table (`timer.rs`), re-armed by every entry point that may move it.
use crate::comm::{sync_children, sync_parent};
use crate::schedule::bcast as algo;
use crate::timer::TimerKey;
use crate::transfer::env::{CommHandle, Env};
use crate::transfer::protocol::Protocol;
use crate::transfer::seal::{header, send};
use crate::transfer::state::{fail, sync_wait_since, Comm, State};
use crate::transfer::sync::up_repeat_gap;
use crate::transfer::when::When;
use crate::Nanos;
use ringcast_abi::wire::{FrameKind, READY_FLAG_PROBE, SYNC_PROBE_BID};
use ringcast_abi::StatusKind;

impl Protocol {
    /// When the next call to [`Protocol::on_timeout`] is due: the timer table's earliest entry
    /// (in an engine, the table holds its node's keys too: `timer.rs`).
    pub fn next_timeout(&self) -> Option<Nanos> {
        // The table must say what a scan of every communicator says: a missed re-arm is a
        // hang. Debug builds (every test, the DST) check it on each call.
        debug_assert_eq!(
            self.timers.armed().filter(|(k, _)| matches!(k, TimerKey::Comm(_))).map(|(_, t)| t).min(),
            self.next_timeout_by_scan()
        );
        self.timers.next()
    }

    /// The communicators' earliest deadline the way it was found before the timer table: a
    /// scan of every communicator × channel. The debug builds' cross-check, and the baseline
    /// the `timers` bench measures the table against in the same run.
    #[doc(hidden)]
    pub fn next_timeout_by_scan(&self) -> Option<Nanos> {
        self.comms.iter().flatten().filter_map(|c| self.deadline_of(c)).min()
    }

    /// Timers: root delays, a root's next batch, repair requests, dead peers, synchronization
    /// retries. Only the communicators whose deadline is due are visited, each once per call.
    /// (A bare protocol's: an engine's node takes the due keys of the table itself and fires
    /// its communicators' through `Protocol::comm_due`, `Node::on_timeout`.)
    pub fn on_timeout(&mut self, now: Nanos, env: &mut impl Env) {
        let mut due = core::mem::take(&mut self.due);
        due.clear();
        while let Some((key, _)) = self.timers.pop_due(now) {
            match key {
                TimerKey::Comm(c) => due.push(c.0),
                // Only a node arms other keys, and a node never calls this.
                _ => debug_assert!(false, "{key:?} in a bare protocol's timer table"),
            }
        }
        // In slot order, as a sweep of the table would visit them: which of several
        // simultaneously due communicators sends first is arbitrary, and this keeps it
        // independent of the heap's history.
        due.sort_unstable();
        for &ci in &due {
            self.comm_due(CommHandle(ci), now, env);
        }
        self.due = due;
    }

    /// Communicator `comm`'s timers, due at `now` (its key taken from the table), fire; its
    /// next deadline is armed.
    pub(crate) fn comm_due(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        self.comm_timeout(comm.0 as usize, now, env);
        self.rearm(comm);
    }

    /// Re-computes `comm`'s earliest deadline into the timer table. Every entry point that may
    /// change a communicator's timers ends with it.
    pub(crate) fn rearm(&mut self, comm: CommHandle) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else {
            return self.timers.set(TimerKey::Comm(comm), None);
        };
        // A probe belongs to a wait: once the wait is over, so is its probe (a later wait arms
        // its own, `probe_every` after it starts).
        if sync_wait_since(c).is_none() {
            c.probe_at = When::NONE;
        }
        let Some(c) = self.comms[comm.0 as usize].as_ref() else { return };
        let at = self.deadline_of(c);
        self.timers.set(TimerKey::Comm(comm), at);
    }

    /// The earliest of `c`'s deadlines: its operations' root delays, next batches (due at once),
    /// repair requests and peer silences, and (unless broken) its synchronization's retry, probe
    /// and silence.
    fn deadline_of(&self, c: &Comm) -> Option<Nanos> {
        let mut next: Option<Nanos> = None;
        let mut at = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        for op in c.ops.iter().flatten() {
            match op.state {
                State::RootDelay { at: t, .. } | State::Sending { at: t, .. } => at(t),
                State::Receiving => {
                    at(op.nack_at);
                    at(op.heard + self.cfg.peer_timeout);
                }
                _ => {}
            }
        }
        // A broken communicator synchronizes nothing more.
        if !c.broken {
            if let Some(t) = c.sync.r().up_retry.get() {
                at(t);
            }
            if let Some(t) = c.probe_at.get() {
                at(t);
            }
            if let Some(since) = sync_wait_since(c) {
                at(since.max(c.sync_heard) + self.cfg.peer_timeout);
            }
        }
        next
    }

    /// The timers of communicator `ci`, due now.
    fn comm_timeout(&mut self, ci: usize, now: Nanos, env: &mut impl Env) {
        let comm = CommHandle(ci as u32);
        for slot in 0..self.cfg.channels as usize {
            let Some(c) = self.comms[ci].as_mut() else { break };
            let Some(op) = c.ops.get_mut(slot).and_then(Option::as_mut) else { continue };
            match op.state {
                State::RootDelay { .. } => self.advance_root(comm, slot, now, env),
                State::Sending { .. } => self.send_batch(comm, slot, now, env),
                State::Receiving if now >= op.heard + self.cfg.peer_timeout => {
                    op.state = State::Failed;
                    c.broken = true;
                    env.complete(op.token, fail(StatusKind::PeerUnreachable, op.counters));
                }
                State::Receiving if now >= op.nack_at => {
                    // Ask the repair source; after `escalate_after` fruitless requests, the
                    // root (fail-over to point-to-point repair from the source of the data).
                    let first = op.bits.missing().next().unwrap_or(0);
                    let src = algo::source(op.alg, &op.shape, c.spec.my_rank, first).unwrap_or(op.root);
                    // A selective multicast's receiver missing only a tail (nothing held past
                    // its first missing fragment) cannot tell lost from not yet sent: a root
                    // descheduled mid-message stops every receiver's progress. Its ring
                    // predecessor, asked, answered later with what it had read meanwhile — every
                    // one of those came by multicast too (8 nodes on 2 cores, 1 MiB, nothing
                    // lost: hundreds of repair frames per broadcast). The root knows what it has
                    // sent, and repairs only that (`on_request`); a tail lost for real is
                    // repaired by it, or by the predecessor's have-all once that completes.
                    let tail =
                        op.selective && op.alg == algo::Algorithm::Multicast && !op.bits.holds_after(first);
                    let to = if op.fruitless >= self.cfg.escalate_after || tail { op.root } else { src };
                    op.fruitless += 1;
                    op.backoff = (op.backoff * 2).min(self.cfg.backoff_max);
                    self.request(comm, slot, to, now, env);
                }
                _ => {}
            }
        }
        let Some(c) = self.comms[ci].as_mut() else { return };
        // A post blocked behind the synchronization while this rank's own part of the epoch is
        // still running (many broadcasts in flight: an allgather's parts, nonblocking posts)
        // waits on those broadcasts, not on the neighbours: each has its own liveness (a silent
        // root fails it), and a slow application behind one of them is not a dead engine. The
        // synchronization's clock starts once this rank's part is done.
        let end = c.sync.done.saturating_add(1).saturating_mul(self.cfg.channels);
        if c.blocked_since.is_some() && c.ops.iter().flatten().any(|op| op.bid < end && !op.over()) {
            c.sync_heard = now;
        }
        // Waiting on the synchronization (a blocked post, or an UP without its DOWN): probe
        // the neighbours waited on; only engines silent for `peer_timeout` break the
        // communicator — a slow application never does.
        if let Some(since) = sync_wait_since(c) {
            if now >= since.max(c.sync_heard) + self.cfg.peer_timeout {
                c.broken = true;
                c.blocked_since = When::NONE;
                c.sync.stop_up();
                c.probe_at = When::NONE;
            } else if c.probe_at.is_some_and(|t| now >= t) {
                let me = c.spec.my_rank;
                let h = header(c, FrameKind::READY, SYNC_PROBE_BID, READY_FLAG_PROBE);
                // At most two children and a parent: no allocation on this timer path.
                let waited = sync_children(c.spec.size(), me)
                    .enumerate()
                    .filter(|(i, _)| c.sync.r().heard & (1 << i) == 0)
                    .map(|(_, k)| k)
                    .chain(sync_parent(me).filter(|_| c.sync.r().up_since.is_some()));
                for k in waited {
                    let to = c.spec.members[k as usize];
                    send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                }
                c.probe_at = When::at(now + self.cfg.probe_every);
            }
        } else {
            c.probe_at = When::NONE;
        }
        // An operation may have ended in this pass (delay over, failure): the epoch may be
        // ready to synchronize; a broken communicator fails its barriers.
        self.maybe_sync_up(comm, now, env);
        self.settle_barriers(comm, env);
        let Some(c) = self.comms[ci].as_mut() else { return };
        if c.broken {
            if c.sync.r().up_retry.is_some() {
                c.sync.w().up_retry = When::NONE;
            }
            c.probe_at = When::NONE;
            return;
        }
        if c.sync.r().up_retry.is_some_and(|t| now >= t) {
            c.sync.w().up_retry = When::NONE;
            let since = c.sync.r().up_since.unwrap_or(now);
            c.sync.w().up_backoff = up_repeat_gap(
                since,
                now,
                c.sync.r().up_backoff,
                self.cfg.backoff_max,
                self.cfg.repair_timeout,
            );
            self.send_up(comm, now, env);
        }
    }
}
