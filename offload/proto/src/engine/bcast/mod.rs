//! Broadcast: one part — this process's post in its communicator's sequencer, which turns the
//! node's posts into one broadcast of the reliable-transfer layer (`transfer/protocol.rs`, whose
//! opening comment is the whole protocol, and `collective/bcast.rs`, its data path) and delivers
//! the message into every local buffer (`node/sequencer.rs`).
//!
//! At every rank of the communicator:
//! 1. the call posts its buffer with the root's rank, the length and no call context (0: a
//!    broadcast) as the next slot of its communicator's sequencer;
//! 2. on the root's engine the slot starts once the root process posted — the protocol loads
//!    its buffer, and the root's request completes as soon as the message is in its channel
//!    (Yu et al.'s buffer safety); on any other engine it starts with the first local post —
//!    the protocol stores into that process's buffer (the slot's *primary*);
//! 3. the algorithm of the broadcast (multicast with ring repair, binomial, linear,
//!    hierarchical, scatter-allgather: `schedule/bcast.rs`) is the cost model's choice for its
//!    length (`model/select.rs`), alike at every rank;
//! 4. once the protocol is done and every local process posted, the sequencer copies the
//!    primary's bytes into every other local buffer, and each process's call completes with
//!    the slot's outcome — its length, or the typed error the protocol or the sequencer gave
//!    (a different root `BadRoot`, length `LengthMismatch`, a dead peer `PeerUnreachable`).
use crate::engine::cx::{Collective, Cx, Progress};
use crate::engine::ids::{CallId, OpId};
use crate::engine::node::sequencer::Kind;
use crate::intake::regions::Resolved;
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::StatusKind;

/// A broadcast at this process: one part, whose outcome is the call's.
#[derive(Debug)]
pub(crate) struct Bcast {
    op: OpId,
}

/// A broadcast as the intake planned it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BcastCall {
    pub(crate) comm: u64,
    pub(crate) root: u32,
    /// `None`: no memory.
    pub(crate) buf: Option<Resolved>,
    pub(crate) len: u64,
}

/// Starts broadcast `b` as call `id` of host operation `op`, posted by engine-local rank
/// `local`.
pub(crate) fn start(b: BcastCall, op: OpId, local: u32, id: CallId, cx: &mut Cx<'_>) -> (Bcast, Progress) {
    let posted = match cx.node() {
        Some(node) => node.post(local, b.comm, b.root, b.buf, b.len, id, Kind::default()).map(drop),
        None => Err(StatusKind::UnknownCommunicator),
    };
    let progress = match posted {
        Ok(()) => Progress::Running,
        Err(kind) => {
            cx.posted_nothing(local, b.comm);
            Progress::Done(Outcome { status: kind, bytes: 0, counters: OpCounters::default() })
        }
    };
    (Bcast { op }, progress)
}

impl Collective for Bcast {
    fn op(&self) -> OpId {
        self.op
    }

    fn part_done(&mut self, outcome: Outcome, _cx: &mut Cx<'_>) -> Progress {
        Progress::Done(outcome)
    }
}
