//! The node's communicators and local processes coming and going: a communicator created from
//! its record and its group joined, freed and dropped once the protocol settled it with the
//! other engines (or a peer timeout later), and local processes leaving, finalizing and
//! arriving — what each of those does to the communicators they are members of (`node/mod.rs`
//! holds the node itself and its data path).
use crate::comm::GroupId;
use crate::engine::action::Outbox;
use crate::engine::links::Links;
use crate::engine::node::calls::Calls;
use crate::engine::node::comms::{derive, parse_record, LocalComm};
use crate::engine::node::sequencer::{Delivery, Sequencer};
use crate::engine::node::{Node, NodeEnv};
use crate::timer::TimerKey;
use crate::Nanos;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use ringcast_abi::StatusKind;

impl Node {
    /// Creates (or joins, for a second local member) the communicator `handle` from the record
    /// `bytes` posted by engine-local rank `local`. `Ok(Some((slot, group)))`: created, and its
    /// group must be joined ([`Node::joined`] or [`Node::join_failed`]); `Ok(None)`: a second
    /// local member, done.
    pub(crate) fn comm_create(
        &mut self,
        local: u32,
        handle: u64,
        bytes: &[u8],
    ) -> Result<Option<(usize, GroupId)>, StatusKind> {
        let me = self.world.rank(self.node, local).ok_or(StatusKind::BadDescriptor)?;
        let rec = parse_record(bytes, me, self.world.size())?;
        if let Some(slot) = self.slot(handle) {
            let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
            // (One already broken — by calls that disagree, a node-mate gone — is joined all the
            // same: creating is local, and this process's calls on it then fail
            // `CommunicatorBroken`, as its node-mates' do.)
            if c.digest != rec.digest || c.freeing_since.is_some() {
                return Err(StatusKind::BadDescriptor);
            }
            match c.rank_of_local.get_mut(local as usize) {
                Some(r @ None) => *r = Some(rec.my_rank),
                _ => return Err(StatusKind::BadDescriptor), // created twice by one process
            }
            return Ok(None);
        }
        let (spec, placement, locals) = derive(handle, &rec, self.node, &self.world)?;
        let free = match self.comms.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.comms.len() < self.max_comms => {
                self.comms.push(None);
                self.comms.len() - 1
            }
            None => return Err(StatusKind::TooManyCommunicators), // max_comms alive
        };
        let group = spec.group;
        let (members, me) = (spec.members.clone(), spec.my_rank);
        let proto = self.proto.create_comm(spec)?;
        let links = Links::new(
            &format!("communicator {handle:#x}"),
            &rec.key,
            &members,
            me,
            self.link_set,
            &mut self.proto,
        );
        let mut rank_of_local = vec![None; self.world.count(self.node) as usize];
        rank_of_local[local as usize] = Some(rec.my_rank);
        self.comms[free] = Some(LocalComm {
            handle,
            proto: Some(proto),
            group,
            sequencer: Sequencer::with_placement(locals, placement, self.window),
            calls: Calls::new(locals as usize),
            checks: Default::default(),
            rank_of_local,
            digest: rec.digest,
            freed: vec![false; locals as usize],
            freeing_since: None,
            settled_since: None,
            links,
        });
        Ok(Some((free, group)))
    }

    /// The group of the communicator created in `slot` is joined.
    pub(crate) fn joined(&mut self, _slot: usize) {
        self.created += 1;
    }

    /// The group of the communicator created in `slot` could not be joined: the communicator
    /// is gone again (a refused communicator must not keep its group).
    pub(crate) fn join_failed(&mut self, slot: usize, out: &mut Outbox) {
        self.drop_proto(slot, out);
        if let Some(c) = self.comms.get_mut(slot).and_then(Option::take) {
            self.leave_unless_shared(&c.group, out);
        }
    }

    /// Engine-local rank `local` leaves communicator `handle`. Once every local member left, the
    /// communicator is dropped when the protocol has settled it with the other engines (or
    /// after a peer timeout).
    pub(crate) fn comm_free(
        &mut self,
        local: u32,
        handle: u64,
        now: Nanos,
        out: &mut Outbox,
    ) -> Result<(), StatusKind> {
        let slot = self.slot(handle).filter(|_| handle != 0).ok_or(StatusKind::UnknownCommunicator)?;
        let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
        let index = c.index_of_local(local).ok_or(StatusKind::UnknownCommunicator)?;
        c.rank_of_local[local as usize] = None;
        c.freed[index as usize] = true;
        // A collective of this process still open on it can never finish now: it ends with
        // `CommunicatorFreed`.
        let broke = c.sequencer.depart_freed(index);
        let last = c.freed.iter().all(|&f| f);
        if last {
            c.freeing_since = Some(now);
        }
        if broke {
            self.drop_proto(slot, out);
        } else if last {
            self.close_proto(slot, now, out);
        }
        Ok(())
    }

    /// Every local member freed communicator `slot`: the protocol settles its last broadcasts
    /// with the other engines (they close it when their own members free it), after which
    /// [`Node::reap_freed`] drops it.
    pub(crate) fn close_proto(&mut self, slot: usize, now: Nanos, out: &mut Outbox) {
        let Some(proto) = self.comms[slot].as_ref().and_then(|c| c.proto) else { return };
        let Node { proto: p, finished, jobs, comms, .. } = self;
        let mut env = NodeEnv { out, jobs, done: finished, port: None, keep: None };
        p.close_comm(proto, now, &mut env);
        if let Some(c) = comms[slot].as_mut() {
            c.links.close(p, now, &mut env);
        }
    }

    /// Leaves `group` unless a communicator still uses it (ids are drawn at random: only a
    /// deliberate reuse shares one).
    pub(crate) fn leave_unless_shared(&mut self, group: &GroupId, out: &mut Outbox) {
        if !self.comms.iter().flatten().any(|c| c.group == *group) {
            out.leave(*group);
        }
    }

    /// Drops communicator `slot` from the protocol: its operations still running fail.
    pub(crate) fn drop_proto(&mut self, slot: usize, out: &mut Outbox) {
        self.calls_dropped(slot);
        let Some(proto) = self.comms[slot].as_mut().and_then(|c| c.proto.take()) else { return };
        let Node { proto: p, finished, jobs, comms, link_done, .. } = self;
        let mut env = NodeEnv { out, jobs, done: finished, port: None, keep: None };
        p.destroy_comm(proto, &mut env);
        if let Some(c) = comms[slot].as_mut() {
            // Its pairs go with it; what their transfers owe is told now (the communicator
            // may be reaped before the engine takes them).
            c.links.drop_all(p, &mut env);
            link_done.append(&mut c.links.done);
        }
    }

    /// Drops the communicators every local member freed, once the protocol settled them with
    /// the other engines and then [`Node::time_wait`] passed (a member whose last `SYNC_DOWN`
    /// was lost asks again within it) — or, when a peer never answers, `peer_timeout_ms` after
    /// the last local member freed it (counted `overdue`).
    pub(crate) fn reap_freed(&mut self, now: Nanos, out: &mut Outbox, deliveries: &mut Vec<Delivery>) {
        for slot in 1..self.comms.len() {
            let Some(c) = self.comms[slot].as_mut() else { continue };
            let Some(since) = c.freeing_since else { continue };
            let settled =
                c.proto.is_none_or(|h| self.proto.is_quiescent(h)) && c.links.quiescent(&self.proto);
            if settled && c.settled_since.is_none() {
                c.settled_since = Some(now);
            }
            // Broken in the protocol (a peer declared unreachable, a synchronization that
            // NACKed): it stays until the peer timeout, as an unsettled one does
            // ([`broken_lingers`]).
            let broken = broken_lingers(&self.proto, c);
            // A child may have backed its repeats off waiting for the last DOWN: the longer wait
            // (`Protocol::time_wait_of`).
            let time_wait = time_wait_of(&self.proto, c, self.time_wait);
            let waited = !broken && c.settled_since.is_some_and(|t| now.saturating_sub(t) >= time_wait);
            // Its protocol side gone, nobody to answer (no synchronization children here), or
            // nothing ever synchronized (no broadcast: no SYNC_DOWN to repeat, and its slot is
            // back at once): nothing to wait for.
            let nothing_to_repeat = |h| {
                self.proto.is_broken(h).is_none()
                    || !self.proto.has_sync_children(h)
                    || self.proto.comm_state(h).is_none_or(|s| s.posted == 0)
            };
            // Its pairs too: one used only by exchanges may owe a lost SYNC_DOWN there.
            let gone =
                !broken && c.proto.is_none_or(nothing_to_repeat) && c.links.handles().all(nothing_to_repeat);
            // A call it ended as awaited everywhere may still be asked about (`call_shapes.rs`).
            if c.calls.lingers(self.free_linger).is_some_and(|t| now < t) {
                continue;
            }
            if (settled && (waited || gone)) || now.saturating_sub(since) > self.free_linger {
                let group = c.group;
                self.drop_proto(slot, out);
                self.settle(deliveries);
                self.comms[slot] = None;
                // Left even when a departing process broke the communicator (its protocol side
                // is gone already).
                self.leave_unless_shared(&group, out);
                self.dropped += 1;
                self.overdue += u64::from(!settled);
            }
        }
    }

    /// When freed communicator `c` is next looked at by [`Node::reap_freed`] (`None`: not
    /// freed): `peer_timeout_ms` after its last local member freed it (then it is dropped
    /// overdue), or earlier its TIME-WAIT after it settled — unless it is broken
    /// ([`broken_lingers`]) — and never before a call it ended for everyone may no longer be
    /// asked about.
    fn freeing_deadline(&self, c: &LocalComm) -> Option<Nanos> {
        let since = c.freeing_since?;
        let linger = self.free_linger;
        let overdue = since + linger + 1;
        let due = match broken_lingers(&self.proto, c) {
            true => overdue,
            false => c
                .settled_since
                .map_or(overdue, |s| overdue.min(s + time_wait_of(&self.proto, c, self.time_wait))),
        };
        Some(c.calls.lingers(linger).map_or(due, |t| due.max(t)))
    }

    /// Re-arms every communicator slot's [`TimerKey::Freeing`] (cleared for one not freed or
    /// gone). The engine calls it at the end of every event (`Engine::after`), where
    /// [`Node::reap_freed`] has just looked at each freed communicator: what its deadline
    /// depends on (its protocol side settling or breaking, a child's backed-off repeats, a call
    /// ended for everyone) moves only with events.
    pub(crate) fn rearm_freeing(&mut self) {
        for slot in 1..self.comms.len() {
            let at = self.comms[slot].as_ref().and_then(|c| self.freeing_deadline(c));
            self.proto.timers.set(TimerKey::Freeing(slot as u32), at);
        }
    }

    /// Whether every [`TimerKey::Freeing`] in the table is what [`Node::freeing_deadline`]
    /// says now (the debug builds' check that no event forgot [`Node::rearm_freeing`]).
    pub(crate) fn freeing_armed(&self) -> bool {
        let table = &self.proto.timers;
        let stale = self.comms.iter().enumerate().skip(1).any(|(slot, c)| {
            table.get(TimerKey::Freeing(slot as u32)) != c.as_ref().and_then(|c| self.freeing_deadline(c))
        });
        let beyond =
            table.armed().any(|(k, _)| matches!(k, TimerKey::Freeing(s) if s as usize >= self.comms.len()));
        !stale && !beyond
    }

    /// Local process `local` left. Every communicator it leaves with a broadcast unfinished is
    /// dropped from the protocol: its local operations fail with `CommunicatorBroken`, and
    /// remote engines, no longer answered, fail theirs with `PeerUnreachable` within
    /// `peer_timeout_ms` rather than wait forever. So is every communicator a *lost* process
    /// (`lost`: it died without detaching) had not freed — the world too, unless it finalized:
    /// between two collectives nothing was unfinished here, but the other ranks' next ones
    /// need its part, which nobody will post (they waited forever: `hw-tests/tests/dpu_qemu.rs`
    /// on a loaded machine, the host killed between two broadcasts). Communicators it created
    /// and did not free count as freed by it: once every local member freed or left one, it is
    /// dropped and its group left like any other. A process that detached without finalizing
    /// does not close the world: one that takes the rank next continues its sequence.
    pub(crate) fn local_gone(&mut self, local: u32, lost: bool, now: Nanos, out: &mut Outbox) {
        for slot in 0..self.comms.len() {
            let Some(c) = self.comms[slot].as_mut() else { continue };
            let Some(index) = c.index_of_local(local) else { continue };
            let owed = lost && !c.freed.get(index as usize).copied().unwrap_or(true);
            let mut last = false;
            if slot != 0 {
                // Membership of a created communicator does not pass to a newcomer.
                c.rank_of_local[local as usize] = None;
                c.freed[index as usize] = true;
                if c.freeing_since.is_none() && c.freed.iter().all(|&f| f) {
                    c.freeing_since = Some(now);
                    last = true;
                }
            }
            if c.sequencer.depart(index) {
                self.drop_proto(slot, out);
            } else if owed {
                c.sequencer.fail();
                self.drop_proto(slot, out);
            } else if last {
                self.close_proto(slot, now, out);
            }
            self.member_left(slot, index, now, out);
        }
    }

    /// Local process `local` finalized (`MPI_Finalize`): it posts nothing more on the world.
    /// Once every local process did, the world is closed — its last synchronization epoch,
    /// partial as it may be, settles with the other engines as a freed communicator's does
    /// (every rank posted the same collectives), so nobody pads epochs to leave.
    pub(crate) fn local_finalized(&mut self, local: u32, now: Nanos, out: &mut Outbox) {
        let Some(Some(world)) = self.comms.first_mut() else { return };
        let Some(index) = world.index_of_local(local) else { return };
        world.freed[index as usize] = true;
        if world.freed.iter().all(|&f| f) {
            self.close_proto(0, now, out);
        }
    }

    /// A host process took local rank `local`. If that starts the next job here (every other
    /// local process of the last one finalized or left, and that job is over: all finalized,
    /// or the world broken), the job runs on a world of its own (`world_jobs.rs`); otherwise
    /// the newcomer continues the sequence of the process that held the rank.
    pub(crate) fn local_arrived(&mut self, local: u32, out: &mut Outbox) {
        if self.starts_a_job(local) {
            self.next_job(out);
        }
        let Some(Some(world)) = self.comms.first_mut() else { return };
        let Some(index) = world.index_of_local(local) else { return };
        world.sequencer.arrive(index);
        world.calls.arrive(index);
        world.freed[index as usize] = false;
    }
}

/// Whether freed communicator `c` is broken in the protocol — it or a link of it: a peer
/// declared unreachable, or a synchronization that NACKed — and so stays until the peer
/// timeout after its members freed it. It still owes the engines waiting on it the news:
/// a child whose `SYNC_DOWN` (the one that broke it) was lost, a neighbour probing it, a
/// receiver asking it for fragments — each answered `READY`/broken (or the `DOWN` again)
/// and broken at once. Dropped as soon as it settled, it left them silence instead: each
/// waited a whole peer timeout before breaking, one level of the synchronization tree after
/// another, while every one of them repeated its `SYNC_UP` every two repair timeouts (DST
/// seeds 777000007587 and 3141592653590549: 656 and 3,336 engines, two crashed nodes or
/// corrupted broadcasts, the survivors still waiting 0.8 s later, 20 M events spent).
pub(crate) fn broken_lingers(proto: &crate::transfer::protocol::Protocol, c: &LocalComm) -> bool {
    c.proto.into_iter().chain(c.links.handles()).any(|h| proto.is_broken(h) == Some(true))
}

/// How long freed communicator `c`, settled, stays: `default`, or longer if a child of it or
/// of a link may have backed its repeats off ([`crate::transfer::protocol::Protocol::time_wait_of`]).
pub(crate) fn time_wait_of(
    proto: &crate::transfer::protocol::Protocol,
    c: &LocalComm,
    default: Nanos,
) -> Nanos {
    c.proto
        .into_iter()
        .chain(c.links.handles())
        .map(|h| proto.time_wait_of(h, default))
        .max()
        .unwrap_or(default)
}
