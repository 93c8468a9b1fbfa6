//! The in-step policy, owned here: how a rank takes part in a collective call it cannot carry
//! out. A call in step at one rank — for its buffers (an unregistered key, a range out of
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
//! (`intake::GatherCall::in_step` says why), and whatever holds a buffer holds an
//! `Option<Resolved>`. No job is ever made on none: where one would be, it fails where it is
//! made (`engine::action::NO_MEMORY`, `RootFailed` for whoever needed those bytes), through the
//! path a failed job's answer takes — a protocol post's load or store, a reduction's load or
//! store, an assembly's, a call's or a delivery's copy at once; an exchange's copy into
//! `Exchanges::done`, where its answer would have gone — so nothing reaches the driver, and no
//! queue of its own holds it (`offload/proto/tests/engine_bench.rs`,
//! `a_process_on_no_memory_hands_the_driver_no_job`).
//!
//! The vocabulary is this module's: a call *in step* (on no memory, with its refusal), a call
//! *awaiting its shape*, a call that *posted nothing* (refused at once, no shape learnt). Outside
//! it, only these files know the policy, each because it must:
//! * `intake/plan.rs` and `intake/mod.rs` decide it: a fault that leaves the shape known plans
//!   the call in step (`GatherCall::in_step`, every buffer `None`; `in_step_op` for an
//!   operation its type lacks), and `Core::submit_in_step` takes in a call whose shape was
//!   learnt;
//! * `engine/planner.rs` hands the intake's verdict here ([`Engine::participate`],
//!   `refused_at_once`), and `engine/mod.rs` stores the [`Participation`] on each host
//!   operation and asks [`Participation::ends`] when it completes;
//! * `engine/node/calls.rs` and `engine/node/call_shapes.rs` are the shape query itself, which
//!   exists for calls awaiting their shape (`SHAPE_AWAITING` on the wire);
//!   `engine/node/call_checks.rs` compares shapes, and leaves a scan's in-step operation (one
//!   its type lacks) to the run, as it leaves a reduction's operation;
//! * `engine/node/sequencer.rs` must place an in-step call among the others: an in-step slot
//!   (`Sequencer::in_step`) starts on no memory, and each process's count of calls that
//!   posted nothing (`Sequencer::posted_nothing`) goes into its context, so a process a call
//!   behind fails typed; `engine/node/mod.rs` and `exchange.rs` ask [`carries_on_in_step`]
//!   which failures carry on in step;
//! * `transfer/env.rs` holds the wire context's in-step operation byte (`IN_STEP_OP`) and the
//!   comparisons that set it aside (`same_call`, `reference_call`, which the sequencer and
//!   `assembly.rs` call); `engine/cx.rs` sets the byte, `comm/auth.rs` binds every rank's
//!   fragments under it, and `collective/bcast.rs` relays an in-step receive unchecked (the
//!   root's MAC is not its context's).
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

/// Whether a part that failed with `status` carries on in step with its partners, on no memory:
/// a part that could not be read (`RootFailed`: on no memory, here or at a partner, or an
/// aborted transfer; `OutOfBounds`: memory gone here). Any other failure (a partner
/// unreachable, calls that disagree) breaks the communicator. Asked by an exchange between the
/// engines (`exchange.rs`) and by the node's assembly of its local blocks (`Node::assembled`).
pub(crate) fn carries_on_in_step(status: StatusKind) -> bool {
    matches!(status, StatusKind::RootFailed | StatusKind::OutOfBounds)
}

/// The policy's state in the engine.
#[derive(Debug, Default)]
pub(crate) struct InStep {
    /// Calls waiting for their shape, and the descriptors held behind them (`shape.rs`).
    awaiting: Awaiting,
}

impl Engine {
    /// Host operation `op` was planned: in step with `in_step` when the intake refused it at
    /// this rank (`intake::GatherCall::in_step`), in full otherwise.
    pub(crate) fn participate(&mut self, op: OpId, in_step: Option<StatusKind>) {
        if let (Some(status), Some(o)) = (in_step, self.ops.get_mut(op)) {
            o.participation = Participation::InStep(status);
        }
    }
}
