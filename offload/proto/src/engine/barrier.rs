//! Barrier as the engine composes it from its reliable broadcast: one broadcast per engine
//! the communicator spans, each rooted at that engine's first rank (its *leader*), each
//! leaving its node only once every local process there has posted the barrier.
//!
//! Algorithm, for a communicator spanning engines `0..E` (protocol ranks, numbered by first
//! rank), at every rank:
//! 1. post `E` one-byte broadcasts on the communicator, in engine order: part `k` has root
//!    `leader(k)` and buffer `scratch + k`. Every rank posts the same sequence, so the
//!    communicator's broadcast numbering lines up everywhere;
//! 2. the local gather marks the parts `all`: a part goes to the protocol only once every
//!    local process of this engine has posted it ([`super::gather::Gather::post_with`]). On
//!    engine `k`, part `k`'s byte therefore leaves only after all of engine `k`'s processes
//!    arrived; everywhere else it is delivered only after it left engine `k`;
//! 3. complete once every part is over: `Ok` (0 bytes) when all are — by then every engine's
//!    part left its node, so every process of the communicator has arrived — else the first
//!    failure's status (a dead rank's engine fails its part with `PeerUnreachable` within the
//!    protocol's bound, a departed local process with `CommunicatorBroken`).
//!
//! `E` broadcasts of one byte each: with multicast, every engine sends one datagram per barrier
//! and receives `E - 1`, with every property of the reliable broadcast (CRC and MAC per
//! datagram, repair, retransmission, typed errors, delayed synchronization). Not the
//! log-depth dissemination or tree barrier (fewer messages at large `E`), and not yet a barrier
//! on the delayed synchronization's own tree, which would need a frame of its own.
//!
//! The scratch is the host's (the ABI asks `len ≥ size` bytes; `E ≤ size`): the engine reads
//! and writes one byte per part there, and what it holds afterwards is unspecified.
use super::composite::{call_context, Composite};
use super::gather::Kind;
use super::slab::TAGGED;
use super::{failed, Engine};
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use ringcast_abi::{Completion, Status, StatusKind};

impl Engine {
    /// Starts a barrier (see the module doc).
    pub(super) fn start_barrier(&mut self, a: GatherCall) {
        let cqe = Completion::new(a.cookie, a.opcode, Status::OK, 0);
        let op = self.new_op(a.host, cqe, a.started, true, true);
        let local = self.core.local_rank(a.host).unwrap_or(u32::MAX);
        let engines = match self.node.as_ref().and_then(|n| n.leaders(a.comm)) {
            // (The intake checked `len ≥ size ≥` engines.)
            Some(l) if !l.is_empty() && l.len() as u64 <= a.len => l.len() as u32,
            _ => return self.finish_collective(op, failed(StatusKind::UnknownCommunicator)),
        };
        let token = TAGGED | self.parts.insert(Composite::new(op, engines, 0));
        let context = call_context(a.opcode, None);
        for k in 0..engines {
            let buf = Resolved { segment: a.recv.segment, offset: a.recv.offset + u64::from(k) };
            let posted = match self.node.as_mut() {
                Some(node) => match node.leaders(a.comm).and_then(|l| l.get(k as usize).copied()) {
                    Some(root) => node.post(
                        local,
                        a.comm,
                        root,
                        buf,
                        1,
                        token,
                        Kind { all: true, context, ..Kind::default() },
                    ),
                    None => Err(StatusKind::UnknownCommunicator),
                },
                None => Err(StatusKind::UnknownCommunicator),
            };
            if let Err(kind) = posted {
                // Refused at once: this and every later part fail here; parts already filed
                // end through the protocol.
                if k == 0 {
                    self.skipped_call(a.host, a.comm);
                }
                for _ in k..engines {
                    self.finish_part(token, failed(kind));
                }
                return;
            }
        }
    }
}
