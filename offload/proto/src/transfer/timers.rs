//! The protocol's timers: root delays, repair requests, dead peers, synchronization retries and
//! probes.
use crate::collective::bcast::{self as algo};
use crate::comm::{sync_children, sync_parent};
use crate::transfer::protocol::*;
use crate::transfer::seal::*;
use crate::transfer::state::*;
use crate::transfer::sync::sync_wait_since;
use crate::Nanos;
use ringcast_abi::wire::{FrameKind, READY_FLAG_PROBE, SYNC_PROBE_BID};
use ringcast_abi::StatusKind;

impl Protocol {
    /// When the next call to [`Protocol::on_timeout`] is due.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let mut next: Option<Nanos> = None;
        let mut at = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        for c in self.comms.iter().flatten() {
            for op in c.ops.iter().flatten() {
                match op.state {
                    State::RootDelay { at: t, .. } => at(t),
                    State::Receiving => {
                        at(op.nack_at);
                        at(op.heard + self.peer_timeout);
                    }
                    _ => {}
                }
            }
            if c.broken {
                continue; // a broken communicator synchronizes nothing more
            }
            if let Some(t) = c.sync.up_retry {
                at(t);
            }
            if let Some(t) = c.probe_at {
                at(t);
            }
            if let Some(since) = sync_wait_since(c) {
                at(since.max(c.sync_heard) + self.peer_timeout);
            }
        }
        next
    }

    /// Timers: root delays, repair requests, dead peers, synchronization retries.
    pub fn on_timeout(&mut self, now: Nanos, env: &mut impl Env) {
        for ci in 0..self.comms.len() {
            let comm = CommHandle(ci as u32);
            for slot in 0..self.channels as usize {
                let Some(c) = self.comms[ci].as_mut() else { break };
                let Some(op) = c.ops[slot].as_mut() else { continue };
                match op.state {
                    State::RootDelay { .. } => self.advance_root(comm, slot, now, env),
                    State::Receiving if now >= op.heard + self.peer_timeout => {
                        op.state = State::Failed;
                        c.broken = true;
                        env.complete(op.token, fail(StatusKind::PeerUnreachable, op.counters));
                    }
                    State::Receiving if now >= op.nack_at => {
                        // Ask the repair source; after `escalate_after` fruitless requests, the
                        // root (fail-over to point-to-point repair from the source of the data).
                        let first = op.bits.missing().next().unwrap_or(0);
                        let src = algo::source(op.alg, &op.shape, c.spec.my_rank, first).unwrap_or(op.root);
                        let to = if op.fruitless >= self.escalate_after { op.root } else { src };
                        op.fruitless += 1;
                        op.backoff = (op.backoff * 2).min(self.backoff_max);
                        self.request(comm, slot, to, now, env);
                    }
                    _ => {}
                }
            }
            let Some(c) = self.comms[ci].as_mut() else { continue };
            // Waiting on the synchronization (a blocked post, or an UP without its DOWN): probe
            // the neighbours waited on; only engines silent for `peer_timeout` break the
            // communicator — a slow application never does.
            if let Some(since) = sync_wait_since(c) {
                if now >= since.max(c.sync_heard) + self.peer_timeout {
                    c.broken = true;
                    c.blocked_since = None;
                    c.sync.up_retry = None;
                    c.sync.up_since = None;
                    c.probe_at = None;
                } else if c.probe_at.is_some_and(|t| now >= t) {
                    let me = c.spec.my_rank;
                    let h = header(c, FrameKind::READY, SYNC_PROBE_BID, READY_FLAG_PROBE);
                    // At most two children and a parent: no allocation on this timer path.
                    let waited = sync_children(c.spec.size(), me)
                        .enumerate()
                        .filter(|(i, _)| c.sync.heard & (1 << i) == 0)
                        .map(|(_, k)| k)
                        .chain(sync_parent(me).filter(|_| c.sync.up_since.is_some()));
                    for k in waited {
                        let to = c.spec.members[k as usize];
                        send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                    }
                    c.probe_at = Some(now + self.probe_every);
                }
            } else {
                c.probe_at = None;
            }
            // An operation may have ended in this pass (delay over, failure): the epoch may be
            // ready to synchronize.
            self.maybe_sync_up(comm, now, env);
            let Some(c) = self.comms[ci].as_mut() else { continue };
            if c.broken {
                c.sync.up_retry = None;
                c.probe_at = None;
                continue;
            }
            if c.sync.up_retry.is_some_and(|t| now >= t) {
                c.sync.up_retry = None;
                c.sync.up_backoff = (c.sync.up_backoff * 2).min(self.backoff_max);
                self.send_up(comm, now, env);
            }
        }
    }
}
