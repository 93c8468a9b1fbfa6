//! What the calls waiting for their shape hold (`shape.rs` carries them out): each host's
//! waiting call on a communicator with the descriptors it posted there after it, and the state
//! of taking one in again under the shape the other ranks gave it.
use crate::engine::ids::OpId;
use crate::intake::HostId;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use ringcast_abi::{Opcode, StatusKind, SubmissionDescriptor};

/// A host's call waiting for its shape on one communicator, and the descriptors it took there
/// after it.
#[derive(Debug)]
pub(crate) struct Stalled {
    pub(crate) host: HostId,
    pub(crate) desc: SubmissionDescriptor,
    /// Why its own descriptor was refused: what it ends with.
    pub(crate) status: StatusKind,
    /// Its index among its communicator's calls.
    pub(crate) call: u64,
    /// Its host operation, reserved.
    pub(crate) op: OpId,
    /// Descriptors `host` posted on the communicator after it, in order, each with its
    /// operation reserved.
    pub(crate) held: VecDeque<(SubmissionDescriptor, OpId)>,
}

/// The calls waiting for their shape, and a resolution in progress.
#[derive(Debug, Default)]
pub(crate) struct Awaiting {
    /// Calls waiting for their shape, each with the descriptors its host posted behind it on its communicator.
    pub(crate) stalled: Vec<Stalled>,
    /// The operation a held descriptor or a waiting call reserved, for the next `new_op` to fill.
    pub(crate) reserved: Option<OpId>,
    /// While a waiting call is taken in under the shape the other ranks gave it: its own opcode,
    /// which its completion echoes.
    pub(crate) resubmitting: Option<Opcode>,
    /// Waiting calls are being resolved (the descriptors held behind one may make another).
    pub(crate) resolving: bool,
}
