//! What one simulated rank's fixed protocol state weighs, held to a budget: a rank of the
//! simulator's million (`fixtures/sim/million.toml`, docs/performance.md "Simulator") is a
//! [`Protocol`] with one [`Comm`] holding one [`Op`], and these sizes are most of its bytes.
//! A field added to any of them shows here first: raise a budget only with the reason in
//! docs/performance.md, or find the field a place a simulated rank does not pay for (the shared
//! [`Tunables`], the communicator's shared part, a box made at first use).
//!
//! [`Protocol`]: crate::transfer::protocol::Protocol
//! [`Comm`]: crate::transfer::state::Comm
//! [`Op`]: crate::transfer::state::Op
//! [`Tunables`]: crate::transfer::tunables::Tunables

mod tests {
    /// Bytes of a [`crate::transfer::protocol::Protocol`] (520 before issue 40's item 5).
    const PROTOCOL_BUDGET: usize = 272;
    /// Bytes of a communicator, `Option<Comm>` as its table holds it (584 before).
    const COMM_BUDGET: usize = 320;
    /// Bytes of a broadcast, `Option<Op>` as its channel table holds it (296 before).
    const OP_BUDGET: usize = 296;

    use crate::transfer::protocol::Protocol;
    use crate::transfer::state::{Comm, Op, Sync};
    use core::mem::size_of;

    /// The three structures a simulated rank holds stay within their budgets.
    #[test]
    fn a_simulated_ranks_fixed_state_stays_within_its_budget() {
        let (p, c, o) = (size_of::<Protocol>(), size_of::<Option<Comm>>(), size_of::<Option<Op>>());
        std::eprintln!("Protocol {p} B, Option<Comm> {c} B (Sync {} B), Option<Op> {o} B", size_of::<Sync>());
        assert!(p <= PROTOCOL_BUDGET, "Protocol is {p} bytes, over its budget of {PROTOCOL_BUDGET}");
        assert!(c <= COMM_BUDGET, "Option<Comm> is {c} bytes, over its budget of {COMM_BUDGET}");
        assert!(o <= OP_BUDGET, "Option<Op> is {o} bytes, over its budget of {OP_BUDGET}");
    }
}
