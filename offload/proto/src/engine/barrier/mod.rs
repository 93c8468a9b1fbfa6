//! Barrier: one slot of the communicator's sequencer, handed to the protocol as a barrier on the delayed
//! synchronization's tree once every local process arrived (`transfer/barrier.rs` holds the
//! algorithm).
//!
//! At every rank of a communicator spanning engines `0..E`:
//! 1. the call is filed as one slot of the communicator's sequencer, marked `all`: it starts
//!    only once every local process of this engine has posted it — this node has arrived;
//! 2. the slot starts as [`crate::transfer::protocol::Protocol::post_barrier`]: the engine ends
//!    the communicator's current synchronization epoch there; its `SYNC_UP` goes to its parent
//!    in the sync tree once its subtree has arrived, and the manager's `SYNC_DOWN` comes back
//!    down once every engine has;
//! 3. the `SYNC_DOWN` completes the slot, and with it every local process's call: `Ok`
//!    (0 bytes). A neighbour silent for `peer_timeout_ms` fails it `PeerUnreachable`, a local
//!    process that left mid-barrier `CommunicatorBroken`.
//!
//! `2 ⌊log₂ E⌋` hops and `2 (E − 1)` frames per barrier. Before, a barrier was `E` one-byte
//! broadcasts, one rooted at each engine: one hop, but `E (E − 1)` frames received — at 2
//! engines the same frames, at 64 engines 32 times more (docs/protocol.md, docs/performance.md).
//!
//! The scratch buffer the ABI asks for (`len ≥ size` bytes) is not touched.
use crate::engine::cx::{call_context, Collective, Cx, Progress};
use crate::engine::ids::{CallId, OpId};
use crate::engine::node::sequencer::Kind;
use crate::intake::GatherCall;
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::StatusKind;

/// A barrier at this process: one part, whose outcome is the call's.
#[derive(Debug)]
pub(crate) struct Barrier {
    op: OpId,
}

/// Starts barrier `a` as call `id` of host operation `op` (see the module doc).
pub(crate) fn start(
    a: &GatherCall,
    op: OpId,
    local: u32,
    id: CallId,
    cx: &mut Cx<'_>,
) -> (Barrier, Progress) {
    let kind = Kind {
        all: true,
        barrier: true,
        in_place: true,
        context: call_context(a.opcode, None),
        ..Kind::default()
    };
    // Root 0 at every process: the slot's reference, so a process posting anything else in its
    // place (another collective) fails with `BadRoot` or `DigestMismatch`.
    let posted = match cx.node() {
        Some(node) => node.post(local, a.comm, 0, a.recv, 0, id, kind).map(drop),
        None => Err(StatusKind::UnknownCommunicator),
    };
    let progress = match posted {
        Ok(()) => Progress::Running,
        Err(kind) => {
            cx.posted_nothing(local, a.comm);
            Progress::Done(Outcome { status: kind, bytes: 0, counters: OpCounters::default() })
        }
    };
    (Barrier { op }, progress)
}

impl Collective for Barrier {
    fn op(&self) -> OpId {
        self.op
    }

    fn part_done(&mut self, outcome: Outcome, _cx: &mut Cx<'_>) -> Progress {
        Progress::Done(outcome)
    }
}
