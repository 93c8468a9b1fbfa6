//! A descriptor taken in: the core validates it (`intake`), and the engine carries out what
//! the core made of it — a completion, a host-memory copy, a communicator's creation or
//! release, or a collective handed to its schedule (`allgather.rs`, `alltoall.rs`,
//! `barrier.rs`, the broadcast through the node's gather) — counting every collective on its
//! communicator (`call_shapes.rs`), and making one whose shape the descriptor cannot give a void
//! call (`void_calls.rs`).
use crate::engine::ids::PartOf;
use crate::engine::node::call_shapes::Shape;
use crate::engine::{failed, posts_parts, sequencer, Dma, Engine, Job};
use crate::intake::regions::Resolved;
use crate::intake::{self, HostId};
use crate::Nanos;
use alloc::vec;
use ringcast_abi::{Completion, Op as AbiOp, RegionKey, Status, StatusKind, SubmissionDescriptor};

impl Engine {
    /// Takes in `host`'s descriptor `desc` (none of the host's is held).
    pub(crate) fn take_descriptor(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) {
        match self.node.as_ref() {
            Some(node) => self.core.submit_with(host, desc, now, node),
            None => self.core.submit(host, desc, now),
        }
        self.take_actions(desc, now);
    }

    /// Carries out what the core made of descriptor `desc`.
    pub(crate) fn take_actions(&mut self, desc: &SubmissionDescriptor, now: Nanos) {
        let mut copy: Option<(Resolved, Resolved, u64, RegionKey, RegionKey)> = None;
        while let Some(action) = self.core.poll_action() {
            match action {
                intake::Action::Dma { src, dst, len, src_key, dst_key, .. } => {
                    copy = Some((src, dst, len, src_key, dst_key))
                }
                intake::Action::Complete { host, cqe, started } => {
                    if !cqe.status.is_ok() && posts_parts(desc.opcode) {
                        // Refused at once for a field that shapes it: the call runs in step
                        // once the other ranks say what it was; else it is skipped.
                        let status = StatusKind::try_from(cqe.status).unwrap_or(StatusKind::BadDescriptor);
                        if self.void_call(host, desc, status, now) {
                            continue;
                        }
                        self.count_call(host, desc.comm, None);
                        self.skipped_call(host, desc.comm);
                    }
                    let pending = copy.is_some();
                    let op = self.new_op(host, cqe, started, pending, false);
                    if let Some((src, dst, len, src_key, dst_key)) = copy.take() {
                        let job = self.jobs.insert(Job::Copy { op, len });
                        self.out.dma(job, Dma::Copy { host, src, dst, len, keys: [src_key, dst_key] });
                    }
                }
                intake::Action::Comm { host, cookie, comm, op: kind, buf, len, started } => {
                    let cqe = Completion::new(cookie, desc.opcode, Status::OK, 0);
                    let op = self.new_op(host, cqe, started, true, true);
                    let local = self.core.local_rank(host).unwrap_or(u32::MAX);
                    match (self.node.as_mut(), kind, buf) {
                        (None, ..) => self.finish_collective(op, failed(StatusKind::UnknownCommunicator)),
                        (Some(_), AbiOp::CommCreate, Some(src)) => {
                            // Read once, at creation: not the data path.
                            let bytes = vec![0u8; len as usize];
                            let job = self.jobs.insert(Job::Record { op, local, comm, bytes });
                            self.out.dma(job, Dma::Load { src, len });
                        }
                        (Some(node), AbiOp::CommFree, _) => {
                            let r = node.comm_free(local, comm, now, &mut self.out);
                            self.finish_collective(op, r.err().map_or(failed(StatusKind::Ok), failed));
                        }
                        _ => self.finish_collective(op, failed(StatusKind::BadDescriptor)),
                    }
                }
                intake::Action::Allgather(call) => {
                    self.count_call(call.host, call.comm, Some(Shape::of(desc)));
                    self.start_allgather(call)
                }
                intake::Action::Barrier(call) => {
                    self.count_call(call.host, call.comm, Some(Shape::of(desc)));
                    self.start_barrier(call)
                }
                intake::Action::Alltoall(call) => {
                    self.count_call(call.host, call.comm, Some(Shape::of(desc)));
                    self.start_alltoall(call)
                }
                intake::Action::Bcast { host, cookie, comm, root, buf, len, started, refused, .. } => {
                    self.count_call(host, comm, Some(Shape::of(desc)));
                    let cqe = Completion::new(cookie, desc.opcode, Status::OK, 0);
                    let op = self.new_op(host, cqe, started, true, true);
                    self.refuse_op(op, refused);
                    // The core refused broadcasts from a host without a local rank.
                    let local = self.core.local_rank(host).unwrap_or(u32::MAX);
                    let posted = match self.node.as_mut() {
                        Some(node) => node
                            .post(local, comm, root, buf, len, PartOf::Op(op), sequencer::Kind::default())
                            .map(drop),
                        None => Err(StatusKind::UnknownCommunicator),
                    };
                    if let Err(kind) = posted {
                        self.skipped_call(host, comm);
                        self.finish_collective(op, failed(kind));
                    }
                }
            }
        }
    }

    /// A call of `host` on communicator `comm` posted nothing (refused at once, and no shape
    /// learnt for it: `void_calls.rs`): its later
    /// posts there carry the count, so they are not matched with the other ranks' calls one
    /// behind ([`sequencer::Sequencer::skip`]).
    pub(crate) fn skipped_call(&mut self, host: HostId, comm: u64) {
        if let (Some(node), Some(local)) = (self.node.as_mut(), self.core.local_rank(host)) {
            node.skip(local, comm);
        }
    }

    /// `host` made a leader-based call on `comm` whose exchange between the engines is
    /// multicast ([`sequencer::Sequencer::multicast_exchange`]).
    pub(crate) fn multicast_exchange(&mut self, host: HostId, comm: u64) {
        if let (Some(node), Some(local)) = (self.node.as_mut(), self.core.local_rank(host)) {
            node.multicast_exchange(local, comm);
        }
    }
}
