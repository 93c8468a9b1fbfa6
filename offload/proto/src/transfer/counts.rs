//! Where a [`Protocol`](super::protocol::Protocol) keeps its engine-wide counters
//! ([`ProtoCounters`] is what it reports): the counts every protocol that moves a frame touches
//! — frames sent and multicast, epochs, repair traffic, the per-byte [`Ledger`] — inline, and the
//! drops by reason behind a box made at the first drop. A frame dropped is never the common case
//! (a forgery, a stale or foreign frame, a full slot table), so a simulator's million ranks that
//! drop nothing hold 8 bytes for them, not 88; an engine pays one allocation in its life, at its
//! first drop, and one pointer dereference per drop after.
//!
//! The ledger is boxed too, made with the protocol, and absent from a protocol told to count
//! none ([`Protocol::count_no_ledger`](super::protocol::Protocol::count_no_ledger): the
//! simulator's ranks, whose simulated fabric copies nothing and which report no ledger — 72
//! bytes a rank saved). An engine pays one pointer dereference and a test per count, per
//! datagram, never per byte.
use crate::ledger::{Ledger, Side};
use crate::transfer::env::ProtoCounters;
use alloc::boxed::Box;
use ringcast_abi::frame::DropReason;

/// A protocol's counters (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) sent: u64,
    pub(crate) multicast: u64,
    pub(crate) syncs: u64,
    pub(crate) repair_frames: u64,
    pub(crate) repair_bytes: u64,
    pub(crate) ledger: LedgerSlot,
    /// Frames dropped, by reason: `None` until the first.
    drops: Option<Box<[u64; DropReason::COUNT]>>,
}

impl Counts {
    /// All zero, with a ledger or none.
    pub(crate) fn with_ledger(ledger: bool) -> Self {
        // Every field named: `..Counts::default()` would make a ledger to drop.
        Counts {
            sent: 0,
            multicast: 0,
            syncs: 0,
            repair_frames: 0,
            repair_bytes: 0,
            ledger: if ledger { LedgerSlot::default() } else { LedgerSlot::none() },
            drops: None,
        }
    }

    /// One frame dropped for `reason`.
    pub(crate) fn dropped(&mut self, reason: DropReason) {
        self.drops.get_or_insert_with(|| Box::new([0; DropReason::COUNT]))[reason as usize] += 1;
    }

    /// What they say now.
    pub(crate) fn snapshot(&self) -> ProtoCounters {
        ProtoCounters {
            drops: self.drops.as_deref().copied().unwrap_or([0; DropReason::COUNT]),
            sent: self.sent,
            multicast: self.multicast,
            syncs: self.syncs,
            repair_frames: self.repair_frames,
            repair_bytes: self.repair_bytes,
            ledger: self.ledger.get(),
        }
    }
}

/// The per-byte ledger a protocol counts, or none (see the module doc). Its counting methods are
/// the [`Ledger`]'s, doing nothing where there is none.
#[derive(Debug)]
pub(crate) struct LedgerSlot(Option<Box<Ledger>>);

impl Default for LedgerSlot {
    fn default() -> Self {
        LedgerSlot(Some(Box::default()))
    }
}

impl LedgerSlot {
    /// No ledger: nothing is counted.
    pub(crate) fn none() -> Self {
        LedgerSlot(None)
    }

    /// Whether it counts.
    pub(crate) fn counts(&self) -> bool {
        self.0.is_some()
    }

    /// See [`Ledger::copied`].
    pub(crate) fn copied(&mut self, side: Side, n: u64) {
        if let Some(l) = &mut self.0 {
            l.copied(side, n);
        }
    }

    /// See [`Ledger::hashed`].
    pub(crate) fn hashed(&mut self, side: Side, n: u64) {
        if let Some(l) = &mut self.0 {
            l.hashed(side, n);
        }
    }

    /// See [`Ledger::crcd`].
    pub(crate) fn crcd(&mut self, side: Side, n: u64) {
        if let Some(l) = &mut self.0 {
            l.crcd(side, n);
        }
    }

    /// See [`Ledger::delivered`].
    pub(crate) fn delivered(&mut self, side: Side, n: u64) {
        if let Some(l) = &mut self.0 {
            l.delivered(side, n);
        }
    }

    /// Its counts (zeros where there is none).
    pub(crate) fn get(&self) -> Ledger {
        self.0.as_deref().copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::{Counts, LedgerSlot};
    use crate::ledger::Side;

    /// A ledger counts; none counts nothing and reads as zeros.
    #[test]
    fn a_ledger_counts_and_none_counts_nothing() {
        let (mut on, mut off) = (LedgerSlot::default(), LedgerSlot::none());
        for l in [&mut on, &mut off] {
            l.copied(Side::Send, 3);
            l.hashed(Side::Receive, 4);
            l.crcd(Side::Receive, 5);
            l.delivered(Side::Receive, 6);
        }
        let g = on.get();
        assert!(on.counts() && !off.counts());
        assert_eq!(
            (g.copied_bytes(Side::Send), g.hashed_bytes(Side::Receive), g.crcd_bytes(Side::Receive)),
            (3, 4, 5)
        );
        assert_eq!(g.delivered_bytes(Side::Receive), 6);
        assert_eq!(off.get(), crate::ledger::Ledger::default());
    }

    use ringcast_abi::frame::DropReason;

    /// Drops are counted by reason once the box exists, and none are reported before.
    #[test]
    fn drops_are_counted_by_reason_from_the_first() {
        let mut c = Counts::default();
        assert_eq!(c.snapshot().drops, [0; DropReason::COUNT]);
        c.dropped(DropReason::BadTag);
        c.dropped(DropReason::BadTag);
        c.dropped(DropReason::NoSlot);
        c.sent += 3;
        let s = c.snapshot();
        assert_eq!(s.drops[DropReason::BadTag as usize], 2);
        assert_eq!(s.drops[DropReason::NoSlot as usize], 1);
        assert_eq!(s.drops.iter().sum::<u64>(), 3);
        assert_eq!(s.sent, 3);
    }
}
