//! The engine's one fault injector (`RINGCAST_FAULT_*`, [`ringcast_proto::fault`]), a wrapper
//! around whichever fabric runs — `shm`, `udp`, `dpdk`, `verbs` alike — so a rehearsal of loss
//! behaves the same on every fabric and no fabric carries injection code of its own.
//!
//! Every datagram sent (`Tx`) and received (`Rx`) gets a verdict: pass (possibly corrupted in
//! place), drop, duplicate, or hold (delay and reorder). Held datagrams wait in a bounded queue
//! ([`MAX_HELD`]) with their destination and go out, or are delivered, on the first poll after
//! they are due. Time is this wrapper's own monotonic clock; the verdicts come from the
//! injector's own generator, seeded by `fault.seed` or, when that is 0, by the seed the caller
//! hands [`wrap`] (the runner's differs between processes: [`crate::entropy::fault_seed`]).
//!
//! # Where the wrapper stands, and what it counts
//!
//! The injector plays the wire between the engine and the fabric, so:
//! * a datagram above the fabric's MTU is handed straight to the fabric, which refuses and
//!   counts it: a refusal is the fabric's verdict, and it draws nothing from the generator;
//! * on receipt it sees only what the fabric delivers (after the fabric's own checks: member
//!   source, MTU, own loopback);
//! * [`Fabric::counters`] are taken at the wrapper's edge, as the engine sees the fabric:
//!   `sent`/`multicast` count what the engine handed over within the MTU (one each, whatever
//!   the injector then did with it), `received` what [`Fabric::poll`] delivered (duplicates and
//!   released datagrams included, injected drops not), `overrun` adds to the fabric's the
//!   copies this wrapper could not keep (below), `refused` is the fabric's. (A send to a member
//!   number the fabric does not know counts as sent here and as refused by the fabric; the
//!   engine never sends one.) The injector's own counts are [`Faulty::fault_counts`].
//! * `poll` delivers at most `budget` datagrams, as every fabric does: the engine sizes its
//!   per-pass buffers by it. A copy beyond the budget (a duplicate, a held datagram that is
//!   due) waits for the next poll; if the hold queue is full too it is lost and counted as
//!   `overrun`, like a datagram a full receive queue cannot take.
use super::{Fabric, FabricCounters, Take};
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::fault::{Dir, FaultConfig, FaultInjector, Verdict, MAX_HELD};
use ringcast_proto::Nanos;
use std::collections::VecDeque;
use std::time::Instant;

/// Where a held datagram goes when it is due.
#[derive(Clone, Copy, Debug)]
enum HeldTo {
    Send(PeerId),
    Multicast(GroupId),
    Recv(PeerId),
}

/// A datagram the injector holds back, with its due time on the wrapper's clock.
#[derive(Debug)]
struct Held {
    due: Nanos,
    to: HeldTo,
    frame: Vec<u8>,
}

/// `fabric` behind the injector when `faults` asks for any, else `fabric` itself (no
/// injection, no cost). The injector draws from `faults.seed`, or from `fallback_seed` when
/// that is 0.
pub fn wrap(
    fabric: Box<dyn Fabric + Send>,
    faults: &FaultConfig,
    fallback_seed: u64,
) -> Box<dyn Fabric + Send> {
    match FaultInjector::from_config(faults, fallback_seed) {
        Some(inj) => Box::new(Faulty::new(fabric, inj)),
        None => fabric,
    }
}

/// A fabric with injected faults. See the module documentation.
pub struct Faulty<F: Fabric> {
    inner: F,
    inj: FaultInjector,
    /// `inner.mtu()`, read once: a larger datagram bypasses the injector.
    mtu: usize,
    start: Instant,
    held: VecDeque<Held>,
    /// Copy of a datagram the injector may corrupt.
    scratch: Vec<u8>,
    /// `sent`, `multicast` and `received` at this wrapper's edge, and the overruns it caused.
    counters: FabricCounters,
}

impl<F: Fabric> Faulty<F> {
    /// `inner` with `inj`'s faults.
    pub fn new(inner: F, inj: FaultInjector) -> Self {
        let mtu = inner.mtu();
        Faulty {
            inner,
            inj,
            mtu,
            start: Instant::now(),
            held: VecDeque::with_capacity(MAX_HELD),
            scratch: Vec::with_capacity(mtu),
            counters: FabricCounters::default(),
        }
    }

    /// The injector's counts: dropped, corrupted, duplicated, held.
    pub fn fault_counts(&self) -> [u64; 4] {
        self.inj.counts
    }

    /// Datagrams held back now (released by `poll` when due).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The wrapped fabric (its own statistics).
    pub fn inner(&self) -> &F {
        &self.inner
    }

    /// The wrapped fabric, mutably.
    pub fn inner_mut(&mut self) -> &mut F {
        &mut self.inner
    }

    fn now(&self) -> Nanos {
        Nanos::try_from(self.start.elapsed().as_nanos()).unwrap_or(Nanos::MAX)
    }

    /// Takes the datagram the injector just held back, with its due time, into our queue
    /// (which knows where it goes); hands it back when the queue is full (bounded memory). The
    /// injector's own queue does not record destinations, so it is kept empty: with this one
    /// datagram in it, `release(Nanos::MAX)` returns exactly it.
    fn hold(&mut self, to: HeldTo, now: Nanos) -> Option<(HeldTo, Vec<u8>)> {
        let due = self.inj.next_release().unwrap_or(now);
        let frame = self.inj.release(Nanos::MAX)?;
        if self.held.len() < MAX_HELD {
            self.held.push_back(Held { due, to, frame });
            None
        } else {
            Some((to, frame))
        }
    }

    fn transmit(&mut self, to: HeldTo, frame: &[u8]) {
        match to {
            HeldTo::Send(p) => self.inner.send(p, frame),
            HeldTo::Multicast(g) => self.inner.multicast(&g, frame),
            HeldTo::Recv(_) => {}
        }
    }

    fn outgoing(&mut self, to: HeldTo, frame: &[u8]) {
        let now = self.now();
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(frame);
        match self.inj.on_datagram(Dir::Tx, &mut buf, now) {
            Verdict::Drop => {}
            Verdict::Pass => self.transmit(to, &buf),
            Verdict::Duplicate => {
                self.transmit(to, &buf);
                self.transmit(to, &buf);
            }
            Verdict::Held => {
                if let Some((to, f)) = self.hold(to, now) {
                    self.transmit(to, &f);
                }
            }
        }
        self.scratch = buf;
    }

    /// Sends the held datagrams that are due and delivers the due receptions, at most `room`
    /// of them (the rest wait); returns the deliveries.
    fn release_due(&mut self, now: Nanos, room: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let mut delivered = 0;
        let mut i = 0;
        // Bounded by the queue's length (≤ MAX_HELD): every step removes an entry or advances.
        while i < self.held.len() {
            let Some(h) = self.held.get(i) else { break };
            let blocked = matches!(h.to, HeldTo::Recv(_)) && delivered >= room;
            if h.due > now || blocked {
                i += 1;
                continue;
            }
            let Some(h) = self.held.remove(i) else { break };
            match h.to {
                HeldTo::Recv(from) => {
                    delivered += 1;
                    rx(from, &h.frame);
                }
                to => self.transmit(to, &h.frame),
            }
        }
        delivered
    }
}

impl<F: Fabric> Fabric for Faulty<F> {
    fn local(&self) -> PeerId {
        self.inner.local()
    }

    fn mtu(&self) -> usize {
        self.inner.mtu()
    }

    fn join(&mut self, group: &GroupId) -> std::io::Result<()> {
        self.inner.join(group)
    }

    fn leave(&mut self, group: &GroupId) {
        self.inner.leave(group)
    }

    fn send(&mut self, to: PeerId, frame: &[u8]) {
        if frame.len() > self.mtu {
            return self.inner.send(to, frame);
        }
        self.counters.sent += 1;
        self.outgoing(HeldTo::Send(to), frame);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        if frame.len() > self.mtu {
            return self.inner.multicast(group, frame);
        }
        self.counters.multicast += 1;
        self.outgoing(HeldTo::Multicast(*group), frame);
    }

    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        self.poll_keeping(budget, &mut |from, d, _| {
            rx(from, d);
            Take::Taken
        })
    }

    /// The injector judges each datagram the inner fabric offers (a declined one offered again
    /// is judged again); one it passes is offered as the inner fabric offered it, keepable or
    /// not, and a declined one stays in the inner fabric. Duplicates and held datagrams are the
    /// injector's copies: taken or lost, never kept.
    fn poll_keeping(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take) -> usize {
        let now = self.now();
        // (A `Resume` from a held datagram is only a hint: the inner fabric is resumed by its
        // own answers, or by `resume`.)
        let mut delivered = self.release_due(now, budget, &mut |from, d| {
            let _ = rx(from, d, false);
        });
        let Faulty { inner, inj, held, scratch, counters, .. } = self;
        // The fabric is asked for no more than the budget left; a duplicate among them may
        // still find the budget spent, and waits (see the module documentation).
        inner.poll_keeping(budget.saturating_sub(delivered), &mut |from, d, keepable| {
            scratch.clear();
            scratch.extend_from_slice(d);
            let copies = match inj.on_datagram(Dir::Rx, scratch, now) {
                Verdict::Drop => 0,
                Verdict::Pass => 1,
                Verdict::Duplicate => 2,
                Verdict::Held => {
                    let due = inj.next_release().unwrap_or(now);
                    let Some(frame) = inj.release(Nanos::MAX) else { return Take::Taken };
                    if held.len() < MAX_HELD {
                        held.push_back(Held { due, to: HeldTo::Recv(from), frame });
                    } else if delivered < budget {
                        // No room to hold: delivered now, as the injector itself passes a
                        // datagram on when its queue is full.
                        delivered += 1;
                        let _ = rx(from, &frame, false);
                    } else {
                        counters.overrun += 1;
                    }
                    return Take::Taken;
                }
            };
            let mut answer = Take::Taken;
            for k in 0..copies {
                if delivered < budget {
                    // The first copy is the inner fabric's own: it may stay there.
                    match rx(from, scratch, keepable && k == 0) {
                        Take::Declined => return Take::Declined,
                        Take::Resume => answer = Take::Resume,
                        Take::Taken => {}
                    }
                    delivered += 1;
                } else if held.len() < MAX_HELD {
                    held.push_back(Held { due: now, to: HeldTo::Recv(from), frame: scratch.clone() });
                } else {
                    counters.overrun += 1;
                }
            }
            answer
        });
        self.counters.received += delivered as u64;
        delivered
    }

    fn resume(&mut self) {
        self.inner.resume();
    }

    /// Held datagrams are released by `poll` when due: while any is held the engine must not
    /// sleep past it, so the bell is not offered (the engine naps instead).
    fn arm(&self) -> Option<u32> {
        if !self.held.is_empty() {
            return None;
        }
        self.inner.arm()
    }

    fn bell(&self) -> Option<&std::sync::atomic::AtomicU32> {
        self.inner.bell()
    }

    fn disarm(&self) {
        self.inner.disarm();
    }

    /// Not while it holds delayed datagrams (as [`Fabric::arm`]): they are due without any
    /// arrival.
    fn wait(&self, limit: std::time::Duration) -> Option<bool> {
        if !self.held.is_empty() {
            return None;
        }
        self.inner.wait(limit)
    }

    fn flush(&mut self) {
        self.inner.flush();
    }

    /// The fabric's copies: the injector's own (it copies each datagram to corrupt, hold or
    /// duplicate it) belong to the experiment, not the engine's data path, and are left out.
    fn ledger(&self) -> ringcast_proto::ledger::Ledger {
        self.inner.ledger()
    }

    fn counters(&self) -> FabricCounters {
        let inner = self.inner.counters();
        FabricCounters {
            sent: self.counters.sent,
            multicast: self.counters.multicast,
            received: self.counters.received,
            overrun: inner.overrun + self.counters.overrun,
            refused: inner.refused,
            tx_calls: inner.tx_calls,
            rx_calls: inner.rx_calls,
        }
    }

    fn groups(&self) -> usize {
        self.inner.groups()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcast_proto::fault::FaultDirection;

    /// An in-memory fabric: `inbox` is what `poll` delivers, `sent` what was handed to it;
    /// it refuses (and counts) what exceeds its MTU, as every fabric does.
    #[derive(Default)]
    struct Fake {
        inbox: VecDeque<(PeerId, Vec<u8>)>,
        sent: Vec<Vec<u8>>,
        counters: FabricCounters,
    }

    const MTU: usize = 64;

    impl Fabric for Fake {
        fn local(&self) -> PeerId {
            PeerId(0)
        }
        fn mtu(&self) -> usize {
            MTU
        }
        fn join(&mut self, _: &GroupId) -> std::io::Result<()> {
            Ok(())
        }
        fn leave(&mut self, _: &GroupId) {}
        fn groups(&self) -> usize {
            0
        }
        fn send(&mut self, _: PeerId, frame: &[u8]) {
            if frame.len() > MTU {
                self.counters.refused += 1;
                return;
            }
            self.counters.sent += 1;
            self.sent.push(frame.to_vec());
        }
        fn multicast(&mut self, _: &GroupId, frame: &[u8]) {
            self.send(PeerId(1), frame);
        }
        fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
            let mut n = 0;
            while n < budget {
                let Some((from, d)) = self.inbox.pop_front() else { break };
                self.counters.received += 1;
                rx(from, &d);
                n += 1;
            }
            n
        }
        fn counters(&self) -> FabricCounters {
            self.counters
        }
        fn ledger(&self) -> ringcast_proto::ledger::Ledger {
            ringcast_proto::ledger::Ledger::default() // copies nothing: hands frames over in place
        }
        /// Always ready to wake a sleeper: the wrapper decides when that is offered.
        fn arm(&self) -> Option<u32> {
            Some(0)
        }
        /// Likewise: a wait that says nothing came.
        fn wait(&self, _: std::time::Duration) -> Option<bool> {
            Some(false)
        }
    }

    fn faulty(inbox: usize, f: impl FnOnce(&mut FaultConfig)) -> Faulty<Fake> {
        let mut c = FaultConfig { seed: 1, ..FaultConfig::default() };
        f(&mut c);
        let mut fake = Fake::default();
        for i in 0..inbox {
            fake.inbox.push_back((PeerId(1), vec![0, 1, i as u8]));
        }
        Faulty::new(fake, FaultInjector::from_config(&c, 9).expect("faults asked for"))
    }

    #[test]
    fn inactive_faults_leave_the_fabric_unwrapped() {
        let f = wrap(Box::new(Fake::default()), &FaultConfig::default(), 1);
        assert_eq!(f.counters(), FabricCounters::default());
        assert!(FaultInjector::from_config(&FaultConfig::default(), 1).is_none(), "nothing to wrap with");
    }

    /// Duplicates never exceed the poll's budget (the engine sizes its buffers by it): the
    /// copies beyond wait for the next poll, and nothing is lost or counted twice.
    #[test]
    fn duplicates_beyond_the_budget_wait_for_the_next_poll() {
        let mut f = faulty(3, |c| {
            c.duplicate = 1.0;
            c.direction = FaultDirection::Rx;
        });
        let mut got = Vec::new();
        assert_eq!(f.poll(4, &mut |_, d| got.push(d[2])), 4);
        assert_eq!(f.held(), 2, "the third datagram's two copies wait");
        assert_eq!(f.poll(4, &mut |_, d| got.push(d[2])), 2);
        assert_eq!(got, [0, 0, 1, 1, 2, 2]);
        assert_eq!(f.fault_counts(), [0, 0, 3, 0]);
        let c = f.counters();
        assert_eq!((c.received, c.overrun), (6, 0), "received counts what poll delivered");
        assert_eq!(f.inner().counters().received, 3, "the fabric's own count is kept apart");
    }

    /// Counters are the engine's view: a datagram handed over counts as sent whatever the
    /// injector does with it; one above the MTU is the fabric's to refuse, and draws nothing.
    #[test]
    fn sends_are_counted_at_the_edge_and_oversize_bypasses_the_injector() {
        let mut f = faulty(0, |c| {
            c.drop = 1.0;
            c.direction = FaultDirection::Tx;
        });
        f.send(PeerId(1), &[0, 2, 0]);
        f.multicast(&[7; 14], &[0, 1, 0]);
        f.send(PeerId(1), &[0; MTU + 1]);
        let c = f.counters();
        assert_eq!((c.sent, c.multicast, c.refused), (1, 1, 1));
        assert_eq!(f.fault_counts(), [2, 0, 0, 0], "the over-MTU datagram was not drawn on");
        assert!(f.inner().sent.is_empty());
    }

    /// Delayed datagrams in both directions come out when due, in order, and keep the bell
    /// from being offered meanwhile.
    #[test]
    fn held_datagrams_are_released_when_due() {
        let mut f = faulty(2, |c| c.delay_us = 2_000);
        f.send(PeerId(1), &[0, 2, 9]);
        let mut got = Vec::new();
        assert_eq!(f.poll(8, &mut |_, d| got.push(d[2])), 0);
        assert_eq!((f.held(), f.arm()), (3, None));
        assert_eq!(f.wait(std::time::Duration::from_secs(1)), None, "nor a wait on the fabric");
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while f.held() > 0 && Instant::now() < deadline {
            f.poll(8, &mut |_, d| got.push(d[2]));
        }
        assert_eq!(got, [0, 1]);
        assert_eq!(f.arm(), Some(0), "nothing held: the fabric's bell again");
        assert_eq!(f.inner().sent, [vec![0, 2, 9]]);
        assert_eq!(f.fault_counts()[3], 3);
    }
}
