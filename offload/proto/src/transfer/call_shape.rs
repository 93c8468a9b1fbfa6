//! `CALL_SHAPE` frames: how engines tell each other what a call on a communicator was.
//!
//! An engine one of whose local processes made a call with a descriptor it cannot read the
//! shape of (a length, element type, root or flag it cannot run) asks what that call was — the
//! communicator's manager (rank 0) asks every engine, the others ask the manager — so it can
//! run it with them (`engine/node/call_shapes.rs`, docs/protocol.md "A call in step at one
//! rank"). The protocol only
//! carries the frames — sealed and tagged as every other frame, so only members ask and
//! answer — and hands the ones that arrive to the node ([`Protocol::take_call_shapes`]); what
//! they mean is the node's.
use crate::comm::Rank;
use crate::transfer::env::{CommHandle, Env};
use crate::transfer::protocol::Protocol;
use crate::transfer::seal::{header, send};
use ringcast_abi::frame::{CallShapeBody, Frame};
use ringcast_abi::wire::FrameKind;
use zerocopy::IntoBytes;

/// `CALL_SHAPE` frames held for the node between two of its steps; more are dropped (the asker
/// asks again).
const MAX_SHAPES_IN: usize = 256;

/// A `CALL_SHAPE` frame that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeIn {
    /// The protocol communicator it is about.
    pub comm: CommHandle,
    /// The engine (protocol rank) that sent it.
    pub from: Rank,
    /// `SHAPE_QUERY`, `SHAPE_KNOWN`, `SHAPE_AWAITING`, `SHAPE_PENDING` or `SHAPE_SILENT` (any
    /// other value is ignored).
    pub flags: u16,
    /// The call's index on the communicator (low 32 bits).
    pub call: u32,
    /// The call's shape (`SHAPE_KNOWN`).
    pub shape: CallShapeBody,
}

impl Protocol {
    /// Sends a `CALL_SHAPE` frame about call `call` of communicator `comm` to its engine `to`.
    pub fn send_call_shape(
        &mut self,
        comm: CommHandle,
        to: Rank,
        flags: u16,
        call: u32,
        shape: &CallShapeBody,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get(comm.0 as usize).and_then(Option::as_ref) else { return };
        let Some(&peer) = c.spec.members.get(to as usize) else { return };
        let h = header(c, FrameKind::CALL_SHAPE, call, flags);
        send(&mut self.scratch, &c.seal, &mut self.counters, env, peer, &h, &[shape.as_bytes()]);
    }

    /// A `CALL_SHAPE` frame, authenticated, from engine `src`: kept for the node.
    pub(crate) fn on_call_shape(&mut self, comm: CommHandle, src: Rank, frame: &Frame<'_>) {
        let Some(&shape) = frame.call_shape() else { return };
        if self.shapes_in.len() < MAX_SHAPES_IN {
            let h = frame.header();
            self.shapes_in.vec().push(ShapeIn {
                comm,
                from: src,
                flags: h.flags.get(),
                call: h.bid.get(),
                shape,
            });
        }
    }

    /// The `CALL_SHAPE` frames that arrived since the last call, moved into `out`.
    pub fn take_call_shapes(&mut self, out: &mut alloc::vec::Vec<ShapeIn>) {
        if let Some(v) = self.shapes_in.made() {
            out.append(v);
        }
    }

    /// Communicator `comm`'s engines: (how many, this one's rank); `None` once it is gone.
    pub fn engines(&self, comm: CommHandle) -> Option<(u32, Rank)> {
        let c = self.comms.get(comm.0 as usize).and_then(Option::as_ref)?;
        Some((c.spec.size(), c.spec.my_rank))
    }
}
