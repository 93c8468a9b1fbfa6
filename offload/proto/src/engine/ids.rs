//! The engine's identities: one type per kind of thing the engine names, none of them a number a
//! reader has to take apart.
//!
//! Those that can outlive what they name are keys of generational tables (`slotmap`): a key
//! whose entry is gone — a late answer for a job the engine has let go of, a part of a call that
//! already failed — finds nothing, and a slot is reused without the old key reaching the new
//! entry. The others are plain newtypes of what they count.
//!
//! | id | names | table |
//! |---|---|---|
//! | [`JobId`] | a job the driver carries out and answers (DMA, group join) | `Engine::jobs` |
//! | [`OpId`] | a host operation until its completion is published | `Engine::ops` |
//! | [`CallId`] | a collective call while it runs; each part it posts names it | `Engine::calls` |
//! | [`ReductionId`] | a reduction in rounds (`reduction.rs`) | `Engine::reductions` |
//! | [`ExchangeId`] | an exchange between the engines that the engine runs itself | `Engine::exchanges` |
//! | [`TransferId`] | a post handed to the reliable-transfer layer (its token there) | `Node::transfers` |
//! | [`Seq`] | a slot of a communicator's sequencer: its calls' order | — |
//!
//! The reliable-transfer layer names its own host-memory jobs ([`crate::transfer::env::DmaToken`],
//! generation-checked there) and carries the engine's [`TransferId`] as an opaque token, which
//! comes back with the outcome.
use slotmap::{Key, KeyData};

slotmap::new_key_type! {
    /// Names one job the driver carries out and answers ([`crate::engine::Engine::handle_dma_done`],
    /// [`crate::engine::Engine::handle_join_done`]). Stale once the engine has let go of the job: an
    /// answer for it is ignored.
    pub struct JobId;
}

slotmap::new_key_type! {
    /// A host operation: one descriptor, until its completion is published.
    pub(crate) struct OpId;
    /// A collective call while it runs (its parts name it: a part posted to a sequencer, a copy
    /// of its own).
    pub(crate) struct CallId;
    /// A reduction of host blocks in rounds of DMA jobs.
    pub(crate) struct ReductionId;
    /// An exchange between the engines the engine carries out itself (recursive doubling,
    /// Rabenseifner's, the ring, the pairwise alltoall).
    pub(crate) struct ExchangeId;
    /// A broadcast or barrier handed to the reliable-transfer layer, or a transfer on a link.
    pub(crate) struct TransferId;
}

impl TransferId {
    /// The token the reliable-transfer layer carries for it (opaque there, as a DMA engine's
    /// user data).
    pub(crate) fn token(self) -> u64 {
        self.data().as_ffi()
    }

    /// The id a token the layer gave back stands for (a stale one finds no entry).
    pub(crate) fn of_token(token: u64) -> TransferId {
        KeyData::from_ffi(token).into()
    }
}

/// A slot of a communicator's sequencer: the `k`-th call its local processes make there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub u64);

#[cfg(test)]
mod tests {
    use super::*;
    use slotmap::SlotMap;

    /// What `slab.rs` promised before the tables were `slotmap`'s: a key outlives its entry
    /// harmlessly, and a slot is reused without growing the table.
    #[test]
    fn a_stale_key_finds_nothing_and_slots_are_reused() {
        let mut s: SlotMap<JobId, u32> = SlotMap::with_key();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_ne!(a, b, "same slot, new generation");
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.len(), 1);
    }

    /// A transfer's token comes back as the same id, and a stale one names no live entry.
    #[test]
    fn a_transfer_token_round_trips() {
        let mut s: SlotMap<TransferId, u8> = SlotMap::with_key();
        let a = s.insert(7);
        assert_eq!(TransferId::of_token(a.token()), a);
        s.remove(a);
        let b = s.insert(8);
        assert_eq!(s.get(TransferId::of_token(a.token())), None);
        assert_eq!(s.get(TransferId::of_token(b.token())), Some(&8));
    }
}
