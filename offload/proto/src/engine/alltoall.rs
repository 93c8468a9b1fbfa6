//! Alltoall as the engine composes it from its reliable broadcast — the *multicast alltoall*:
//! every rank multicasts its whole send buffer once, and every rank keeps the block meant for
//! it. `P` messages of `P · len` bytes instead of the `P · (P − 1)` point-to-point messages of a
//! pairwise exchange: the right trade for short blocks on a fabric with multicast, where the
//! per-message cost dominates, and the wrong one for long blocks, where every receiver takes in
//! `P` times the bytes it needs. Each part is a whole send buffer, so it must fit the protocol's
//! message limit (`max_message_bytes`, 4 MiB by default: a larger alltoall fails `BadLength`);
//! the MPI interposer offloads only what fits and leaves the rest to the library.
//!
//! Algorithm, for a communicator of `size` ranks and `len`-byte blocks, at every rank `me`,
//! with a work buffer of `(size + 1) · size · len` bytes:
//! 1. post `size` broadcasts of `size · len` bytes, in rank order: broadcast `r` has root `r`;
//!    its buffer is this rank's send buffer when `r = me`, else `work + (1 + r) · size · len`.
//!    Every rank posts the same sequence, so the communicator's numbering lines up;
//! 2. once every part is over, copy block `me` of each into its place (`composite.rs`'s
//!    `scatter_blocks`): from
//!    `work + (1 + r) · size · len + me · len` (or, for `r = me`, from the send buffer) to
//!    `work + r · len` — `size` DMA copies on this node;
//! 3. complete with `size · len` bytes once the copies are over; a failed part fails the
//!    operation with its status (a dead rank's part with `PeerUnreachable` within the protocol's
//!    bound), before any copy.
//!
//! Each part carries every property of the broadcast (CRC and MAC per datagram, bitmaps,
//! repair, retransmission, typed errors, channels, and the call's context in its MAC: a rank
//! posting an alltoall against another's allgather of the same bytes fails typed). Not the
//! pairwise exchange with node aggregation or Mamidala's bidirectional schedule, which need
//! point-to-point reliable transfers the protocol does not have (its transfers are broadcasts).
use super::composite::{at, call_context, Composite, Scatter};
use super::gather::Kind;
use super::slab::TAGGED;
use super::{failed, Engine};
use crate::intake::GatherCall;
use ringcast_abi::{Completion, Status, StatusKind};

impl Engine {
    /// Starts an alltoall (see the module doc).
    pub(super) fn start_alltoall(&mut self, a: GatherCall) {
        let cqe = Completion::new(a.cookie, a.opcode, Status::OK, 0);
        let op = self.new_op(a.host, cqe, a.started, true, true);
        let local = self.core.local_rank(a.host).unwrap_or(u32::MAX);
        let whole = a.len * u64::from(a.size);
        // (The intake made sure there is a send buffer.)
        let send = a.send.unwrap_or(a.recv);
        let scatter =
            Scatter { host: a.host, send, work: a.recv, len: a.len, size: a.size, me: a.me, keys: a.keys };
        let mut composite = Composite::new(op, a.size, whole);
        composite.scatter = Some(scatter);
        let token = TAGGED | self.parts.insert(composite);
        let window = a.size.saturating_mul(self.calls_in_flight(a.host));
        let kind = Kind { context: call_context(a.opcode, None), window, ..Kind::default() };
        for r in 0..a.size {
            let buf = if r == a.me { send } else { at(a.recv, (1 + u64::from(r)) * whole) };
            let posted = match self.node.as_mut() {
                Some(node) => node.post(local, a.comm, r, buf, whole, token, kind),
                None => Err(StatusKind::UnknownCommunicator),
            };
            if let Err(kind) = posted {
                // Refused at once: this and every later part fail here; parts already filed
                // end through the protocol.
                for _ in r..a.size {
                    self.finish_part(token, failed(kind));
                }
                return;
            }
        }
    }
}
