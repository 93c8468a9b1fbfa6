//! Where a [`Protocol`](super::protocol::Protocol) keeps its engine-wide counters
//! ([`ProtoCounters`] is what it reports): the counts every protocol that moves a frame touches
//! — frames sent and multicast, epochs, repair traffic, the per-byte [`Ledger`] — inline, and the
//! drops by reason behind a box made at the first drop. A frame dropped is never the common case
//! (a forgery, a stale or foreign frame, a full slot table), so a simulator's million ranks that
//! drop nothing hold 8 bytes for them, not 88; an engine pays one allocation in its life, at its
//! first drop, and one pointer dereference per drop after.
use crate::ledger::Ledger;
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
    pub(crate) ledger: Ledger,
    /// Frames dropped, by reason: `None` until the first.
    drops: Option<Box<[u64; DropReason::COUNT]>>,
}

impl Counts {
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
            ledger: self.ledger,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;
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
