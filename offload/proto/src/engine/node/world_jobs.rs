//! The world communicator across the jobs a daemon serves one after another: each job runs on a
//! world of its own — its own key, cookie and seed, broadcast ids and gather sequence from zero —
//! so nothing of the last one, failed or not, reaches into the next, and a failed job needs no
//! restart of the engines.
//!
//! A job is over at an engine when none of its local processes remains: each finalized
//! (`FINALIZE`), or left (lost, or detached) — a departure that does not end the job is one
//! whose rank a newcomer takes while its node-mates stay, and a world nothing broke continues
//! then. The next process to take a local rank starts the next job: generation `g + 1` of the
//! world. Every engine serves every job of its world and counts the same jobs, so all derive the
//! same generation without a word exchanged: its identity is derived like the first one's from
//! the job's name and secret, with the generation in the name (`world.rs`: `world_identity_of`); the
//! multicast group stays (the fabric's membership does not change between jobs). Frames of
//! another generation carry another cookie and tag, and are dropped as another job's. The old
//! world is dropped from the protocol when the next job starts: what it still owed a slower
//! peer (the last epoch's `SYNC_DOWN` of a job that ended well) is then given up, and that peer
//! drops its side after `peer_timeout_ms` (`communicators_overdue_total`).
use crate::engine::action::Outbox;
use crate::engine::ids::TransferId;
use crate::engine::node::{Node, Posted};

impl Node {
    /// Whether local rank `local`, arriving, starts a new job: every other local process of
    /// the world finalized or left, and the job is over here — all of them finalized, or the
    /// world broken (a process lost, a peer declared unreachable), which no newcomer continues.
    pub(crate) fn starts_a_job(&self, local: u32) -> bool {
        let Some(Some(world)) = self.comms.first() else { return false };
        let Some(index) = world.index_of_local(local) else { return false };
        let index = index as usize;
        let locals = world.freed.len();
        let all_finalized = world.freed.iter().all(|&f| f);
        let broken = world.sequencer.is_broken()
            || world.proto.is_none_or(|h| self.proto.is_broken(h).unwrap_or(true));
        let others_gone = (0..locals)
            .filter(|&i| i != index)
            .all(|i| world.freed[i] || world.sequencer.has_departed(i as u32));
        all_finalized || (broken && others_gone)
    }

    /// The next job starts: the world of the last one is dropped from the protocol (what its
    /// operations still owed fails; nobody is left to be told) and a fresh one of the next
    /// generation takes slot 0. On failure (the protocol's table is full) the old world stays.
    pub(crate) fn next_job(&mut self, out: &mut Outbox) {
        self.drop_proto(0, out);
        // What the protocol finished of the old world's slots is nobody's now: they name slot
        // 0, which the new world's sequencer numbers from zero again.
        let old_world = |p: Option<&Posted>| matches!(p, Some(Posted::Slot { comm: 0, .. }));
        let Node { finished, transfers, .. } = self;
        finished.retain(|(token, _)| !old_world(transfers.get(TransferId::of_token(*token))));
        transfers.retain(|_, p| !old_world(Some(p)));
        self.local_started.retain(|(handle, _)| *handle != 0);
        // Calls of the old world found to disagree: its operations are gone with it.
        self.disagreed.retain(|(handle, _)| *handle != 0);
        let mut recipe = self.recipe.clone();
        recipe.generation += 1;
        if let Ok(world) = recipe.build(&mut self.proto) {
            self.comms[0] = Some(world);
            self.recipe = recipe;
            self.created += 1;
            self.dropped += 1;
        }
    }
}
