//! The engine's drain once its driver stops ([`Engine::start_drain`]): how long it keeps
//! serving, and when it may go ([`Engine::drained`]) — the engine's to say, not the driver's.
//!
//! An engine that leaves at once would make the others fail with `PeerUnreachable`: it lingers
//! while the protocol still owes its peers something (repairs they may ask for, the
//! synchronization of the broadcasts it took part in) or ranked local processes are still
//! attached (in thread mode the engine lives in one of its node's processes) — until a peer
//! timeout passes without work. Once it owes nothing, an engine that synchronized others still
//! answers for a quiet period (TCP's TIME-WAIT: [`TIME_WAIT_REPAIRS`] repair timeouts, at least
//! a [`TIME_WAIT_PEER_FRACTION`]th of the peer timeout; 64 of a child's backed-off repeats when
//! its last synchronization waited long, [`Engine::time_wait`]): the last `SYNC_DOWN` it sent
//! may be lost, and the child asking again must find it here, not a peer timeout of silence.
//! However busy, never more than four peer timeouts: a host that keeps asking (an observer
//! polling its counters) must not hold a stopping engine.
//!
//! The driver says when a pass of its loop did work ([`Engine::drain_busy`]: it alone sees its
//! control sockets); the next linger deadline is [`TimerKey::Linger`] in the engine's timer
//! table, so a driver asleep until [`Engine::poll_timeout`] wakes when it falls due.
//!
//! [`TIME_WAIT_REPAIRS`]: crate::transfer::protocol::TIME_WAIT_REPAIRS
use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::timer::TimerKey;
use crate::transfer::protocol::time_wait;
use crate::Nanos;

/// A draining engine that owes nothing still answers for at least this fraction of the peer
/// timeout (200 ms by default), however short its repair timeouts.
pub(crate) const TIME_WAIT_PEER_FRACTION: Nanos = 10;

/// The drain's constants and, once started, its deadlines.
#[derive(Debug)]
pub(crate) struct Drain {
    /// The peer timeout: how long a drain waits without work.
    linger: Nanos,
    /// The quiet period of an engine that synchronized others and owes nothing.
    time_wait: Nanos,
    /// Deadlines, once the driver stopped.
    draining: Option<Draining>,
}

#[derive(Clone, Copy, Debug)]
struct Draining {
    /// The quiet period this drain started with (0: this engine synchronized nobody).
    quiet: Nanos,
    /// A peer timeout after the last work.
    until: Nanos,
    /// The quiet period after the last work: once nothing is owed, the drain ends here.
    quiet_until: Nanos,
    /// Four peer timeouts after the stop, however busy.
    hard: Nanos,
}

impl Drain {
    pub(crate) fn new(config: &EngineConfig) -> Drain {
        let linger = config.protocol.peer_timeout_ms as Nanos * 1_000_000;
        // Long enough for a child's retry to come through a loaded machine, not only a repair
        // timeout's doubling (seen: a debug build on 2 busy cores, a 1.6 ms wait too short).
        let time_wait = time_wait(&config.protocol).max(linger / TIME_WAIT_PEER_FRACTION);
        Drain { linger, time_wait, draining: None }
    }
}

impl Engine {
    /// The driver stopped at `now` (it takes no new hosts): the engine drains. Only an engine
    /// that synchronized others keeps a quiet period (a leaf owes nobody a repeat).
    pub fn start_drain(&mut self, now: Nanos) {
        let quiet = if self.answers_sync_children() { self.drain.time_wait } else { 0 };
        let linger = self.drain.linger;
        self.drain.draining =
            Some(Draining { quiet, until: now + linger, quiet_until: now + quiet, hard: now + 4 * linger });
        self.arm_linger(now);
    }

    /// A pass of the draining driver's loop did work at `now` (frames, descriptors, DMA, a
    /// control request): the linger starts over, and the quiet period with it (the protocol's
    /// longer TIME-WAIT if a synchronization waited long meanwhile).
    pub fn drain_busy(&mut self, now: Nanos) {
        let Some(d) = self.drain.draining else { return };
        let quiet = if d.quiet == 0 { 0 } else { self.time_wait(d.quiet) };
        self.drain.draining =
            Some(Draining { until: now + self.drain.linger, quiet_until: now + quiet, ..d });
        self.arm_linger(now);
    }

    /// Whether the draining engine has nothing left to do at `now` and its driver may shut it
    /// down: a peer timeout passed without work, or four since the stop, or it owes nothing —
    /// no broadcast in progress or unsynchronized, no ranked host attached — and its quiet
    /// period is over. Never before [`Engine::start_drain`].
    pub fn drained(&self, now: Nanos) -> bool {
        let Some(d) = self.drain.draining else { return false };
        let owes = !self.quiescent() || self.core.ranked_hosts_now() > 0;
        now >= d.until || now >= d.hard || (!owes && now >= d.quiet_until)
    }

    /// Arms [`TimerKey::Linger`] at the drain's next deadline after `now` (each event re-arms
    /// it: one that fell due is replaced by the next).
    pub(crate) fn arm_linger(&mut self, now: Nanos) {
        let Some(d) = self.drain.draining else { return };
        let Some(node) = self.node.as_mut() else { return };
        let next = [d.until, d.hard, d.quiet_until].into_iter().filter(|&t| t > now).min();
        node.proto.timers.set(TimerKey::Linger, next);
    }
}
