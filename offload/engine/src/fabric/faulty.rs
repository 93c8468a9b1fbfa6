//! The engine's fault injector (`RINGCAST_FAULT_*`, [`ringcast_proto::fault`]) around any fabric that
//! has none of its own (the `udp` fabric applies it itself, at the socket): every datagram sent
//! (`Tx`) and received (`Rx`) gets a verdict — pass (possibly corrupted in place), drop,
//! duplicate, or hold (delay and reorder). Held datagrams wait in a bounded queue
//! ([`MAX_HELD`]) with their destination and go out, or are delivered, on the first poll after
//! they are due. Time is this wrapper's own monotonic clock.
use super::{Fabric, FabricCounters};
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::fault::{Dir, FaultInjector, Verdict, MAX_HELD};
use ringcast_proto::Nanos;
use std::collections::VecDeque;
use std::time::Instant;

enum HeldTo {
    Send(PeerId),
    Multicast(GroupId),
    Recv(PeerId),
}

/// A fabric with injected faults.
pub struct Faulty<F: Fabric> {
    inner: F,
    inj: FaultInjector,
    start: Instant,
    held: VecDeque<(Nanos, HeldTo, Vec<u8>)>,
    scratch: Vec<u8>,
}

impl<F: Fabric> Faulty<F> {
    /// `inner` with `inj`'s faults.
    pub fn new(inner: F, inj: FaultInjector) -> Self {
        Faulty {
            inner,
            inj,
            start: Instant::now(),
            held: VecDeque::with_capacity(MAX_HELD),
            scratch: Vec::new(),
        }
    }

    /// The injector's counts: dropped, corrupted, duplicated, held.
    pub fn fault_counts(&self) -> [u64; 4] {
        self.inj.counts
    }

    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    /// Takes the datagram the injector just held back, with its due time, into our queue (which
    /// knows where it goes); delivers it at once when the queue is full (bounded memory).
    fn hold(&mut self, to: HeldTo, now: Nanos) -> Option<(HeldTo, Vec<u8>)> {
        let due = self.inj.next_release().unwrap_or(now);
        let frame = self.inj.release(Nanos::MAX)?;
        if self.held.len() < MAX_HELD {
            self.held.push_back((due, to, frame));
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
                let again = match &to {
                    HeldTo::Send(p) => HeldTo::Send(*p),
                    HeldTo::Multicast(g) => HeldTo::Multicast(*g),
                    HeldTo::Recv(p) => HeldTo::Recv(*p),
                };
                self.transmit(to, &buf);
                self.transmit(again, &buf);
            }
            Verdict::Held => {
                if let Some((to, f)) = self.hold(to, now) {
                    self.transmit(to, &f);
                }
            }
        }
        self.scratch = buf;
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
        self.outgoing(HeldTo::Send(to), frame);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.outgoing(HeldTo::Multicast(*group), frame);
    }

    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let now = self.now();
        let mut n = 0;
        // Held datagrams that are due, in the order they were held.
        let mut i = 0;
        while i < self.held.len() && n < budget {
            if self.held[i].0 > now {
                i += 1;
                continue;
            }
            let Some((_, to, frame)) = self.held.remove(i) else { break };
            match to {
                HeldTo::Recv(from) => {
                    rx(from, &frame);
                    n += 1;
                }
                other => self.transmit(other, &frame),
            }
        }
        let Faulty { inner, inj, held, scratch, .. } = self;
        n + inner.poll(budget.saturating_sub(n), &mut |from, d| {
            scratch.clear();
            scratch.extend_from_slice(d);
            match inj.on_datagram(Dir::Rx, scratch, now) {
                Verdict::Drop => {}
                Verdict::Pass => rx(from, scratch),
                Verdict::Duplicate => {
                    rx(from, scratch);
                    rx(from, scratch);
                }
                Verdict::Held => {
                    let due = inj.next_release().unwrap_or(now);
                    if let Some(f) = inj.release(Nanos::MAX) {
                        if held.len() < MAX_HELD {
                            held.push_back((due, HeldTo::Recv(from), f));
                        } else {
                            rx(from, &f);
                        }
                    }
                }
            }
        })
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

    fn flush(&mut self) {
        self.inner.flush();
    }

    fn counters(&self) -> FabricCounters {
        self.inner.counters()
    }

    fn groups(&self) -> usize {
        self.inner.groups()
    }
}
