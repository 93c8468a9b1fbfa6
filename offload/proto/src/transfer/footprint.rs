//! What one simulated rank's fixed protocol state weighs, held to a budget: a rank of the
//! simulator's million (`fixtures/sim/million.toml`, docs/performance.md "Simulator") is a
//! [`Protocol`] with one [`Comm`] holding one [`Op`] — the first of each inline in the one
//! before, so the three are one structure in the rank's node — and their sizes are most of its
//! bytes.
//! A field added to any of them shows here first: raise a budget only with the reason in
//! docs/performance.md, or find the field a place a simulated rank does not pay for (the shared
//! [`Tunables`], the communicator's shared part, a box made at first use).
//!
//! [`Protocol`]: crate::transfer::protocol::Protocol
//! [`Comm`]: crate::transfer::state::Comm
//! [`Op`]: crate::transfer::state::Op
//! [`Tunables`]: crate::transfer::tunables::Tunables

mod tests {
    use crate::transfer::protocol::Protocol;
    use crate::transfer::state::{Comm, Op, Sync};
    use core::mem::size_of;

    /// Bytes of a protocol's own fields, its first communicator aside (520 before issue 40's
    /// item 5, with no communicator inline).
    const PROTOCOL_OWN_BUDGET: usize = 200;
    /// Bytes of a communicator's own fields, its first broadcast aside (584 before, with no
    /// broadcast inline; 312 before its synchronization's round was boxed, its seal's version
    /// byte read from its keys and its fail-over bid made a `NonZeroU32`).
    const COMM_OWN_BUDGET: usize = 208;
    /// Bytes of a broadcast, `Option<Op>` as its channel table holds it (296 before).
    const OP_BUDGET: usize = 272;
    /// A simulated rank's protocol with its communicator and broadcast inline: one structure
    /// (1,400 bytes before, in three allocations; 784 before the communicator's 104 bytes
    /// went).
    const RANK_BUDGET: usize = 680;
    /// Bytes of a communicator's synchronization while no round of it has started (104 before
    /// its round was boxed).
    const SYNC_BUDGET: usize = 16;

    /// The structures a simulated rank holds stay within their budgets.
    #[test]
    fn a_simulated_ranks_fixed_state_stays_within_its_budget() {
        let (p, c, o) = (size_of::<Protocol>(), size_of::<Option<Comm>>(), size_of::<Option<Op>>());
        let (p_own, c_own) = (p - c, c - o);
        std::eprintln!(
            "Protocol {p} B ({p_own} B own), Option<Comm> {c} B ({c_own} B own; Sync {} B), Option<Op> {o} B",
            size_of::<Sync>()
        );
        assert!(
            p_own <= PROTOCOL_OWN_BUDGET,
            "a Protocol's own fields are {p_own} bytes, over {PROTOCOL_OWN_BUDGET}"
        );
        assert!(c_own <= COMM_OWN_BUDGET, "a Comm's own fields are {c_own} bytes, over {COMM_OWN_BUDGET}");
        assert!(o <= OP_BUDGET, "Option<Op> is {o} bytes, over its budget of {OP_BUDGET}");
        assert!(p <= RANK_BUDGET, "a rank's protocol state is {p} bytes, over its budget of {RANK_BUDGET}");
        let sync = size_of::<Sync>();
        assert!(sync <= SYNC_BUDGET, "Sync is {sync} bytes, over its budget of {SYNC_BUDGET}");
    }
}
