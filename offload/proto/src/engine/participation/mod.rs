//! The in-step policy, owned here: how a rank takes part in a collective call it cannot carry
//! out. A call refused at one rank — for its buffers (an unregistered key, a range out of
//! bounds, missing access, send and receive overlapping) or for a field its schedule does not
//! read — still runs in step there, on no memory, so the other ranks' calls complete; it ends
//! with its own typed status, whatever that run met. A call whose shape this rank could not
//! read (a field that shapes it was refused) first waits for its shape from the other ranks
//! (`shape.rs`, with what it holds in `held.rs`), then runs in step the same way.
//!
//! Each host operation carries its [`Participation`]; the rest of the engine asks it, or calls
//! the few functions here: [`Engine::participate`] as a call is planned, and `shape.rs`'s entry
//! points as descriptors arrive and hosts leave.
//!
//! On no memory means no buffer: the intake plans such a call with every buffer `None`
//! (`intake::GatherCall::refused` says why), and whatever holds a buffer holds an
//! `Option<Resolved>`. No job is ever made on none: where one would be, it fails where it is
//! made (`engine::action::NO_MEMORY`, `RootFailed` for whoever needed those bytes), through the
//! path a failed job's answer takes — a protocol post's load or store, a reduction's load or
//! store, an assembly's, a call's or a delivery's copy at once; an exchange's copy into
//! `Exchanges::done`, where its answer would have gone — so nothing reaches the driver, and no
//! queue of its own holds it (`offload/proto/tests/engine_bench.rs`,
//! `a_process_on_no_memory_hands_the_driver_no_job`).
mod held;
mod shape;

pub(crate) use held::Awaiting;

use crate::engine::ids::OpId;
use crate::engine::Engine;
use crate::transfer::protocol::Outcome;
use ringcast_abi::StatusKind;

/// How this rank takes part in one collective call (stored on its host operation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Participation {
    /// On its own buffers: it ends with what its run met.
    #[default]
    Full,
    /// Refused at this rank with this status (its buffers, or a field its schedule does not
    /// read): it runs in step on no memory and ends with this status.
    InStep(StatusKind),
    /// Its shape could not be read here: it waits for the other ranks to tell it (`shape.rs`),
    /// then runs [`Participation::InStep`] as a new operation in the place this one reserved.
    AwaitingShape,
}

impl Participation {
    /// What a call taking part this way ends with, when its run ended with `outcome`: `None`
    /// leaves it to the run. A call in step could never have succeeded, so it ends with why it
    /// was refused — unless the engine then refused it for a field that shapes it (a
    /// broadcast's root outside the communicator: it never ran, and that rank is out of step).
    pub(crate) fn ends(self, outcome: Outcome) -> Option<Outcome> {
        let never_ran = matches!(
            outcome.status,
            StatusKind::BadRoot
                | StatusKind::BadLength
                | StatusKind::BadDescriptor
                | StatusKind::UnknownCommunicator
                | StatusKind::NoRank
                | StatusKind::EngineShutdown
        );
        match self {
            Participation::InStep(status) if !never_ran => Some(Outcome { status, bytes: 0, ..outcome }),
            _ => None,
        }
    }
}

/// The policy's state in the engine.
#[derive(Debug, Default)]
pub(crate) struct InStep {
    /// Calls waiting for their shape, and the descriptors held behind them (`shape.rs`).
    awaiting: Awaiting,
}

impl Engine {
    /// Host operation `op` was planned: in step with `refused` when the intake refused it at
    /// this rank (`intake::GatherCall::refused`), in full otherwise.
    pub(crate) fn participate(&mut self, op: OpId, refused: Option<StatusKind>) {
        if let (Some(status), Some(o)) = (refused, self.ops.get_mut(op)) {
            o.participation = Participation::InStep(status);
        }
    }
}
