//! A descriptor taken in: the core validates it (`intake`), and the engine carries out what
//! the core made of it — a completion, a host-memory copy, a communicator's creation or
//! release, or a collective started in its folder, one arm per collective
//! ([`Engine::start_collective`]) — counting every collective on its communicator
//! (`node/call_shapes.rs`), and making one whose shape the descriptor cannot give wait for it
//! (`participation/`).
use crate::engine::bcast::BcastCall;
use crate::engine::call::Call;
use crate::engine::jobs::Job;
use crate::engine::node::calls::Shape;
use crate::engine::{allgather, allreduce, alltoall, barrier, bcast, scan};
use crate::engine::{failed, Dma, Engine};
use crate::intake::regions::Resolved;
use crate::intake::GatherCall;
use crate::intake::{self, HostId};
use crate::Nanos;
use alloc::vec;
use ringcast_abi::{Completion, Op as AbiOp, RegionKey, Status, StatusKind, SubmissionDescriptor};

impl Engine {
    /// Takes in `host`'s descriptor `desc` (none of the host's is held).
    pub(crate) fn take_descriptor(&mut self, host: HostId, desc: &SubmissionDescriptor, now: Nanos) {
        let taken = match self.node.as_ref() {
            Some(node) => self.core.submit_with(host, desc, now, node),
            None => self.core.submit(host, desc, now),
        };
        self.take_actions(desc, taken, now);
    }

    /// Carries out what the core made of descriptor `desc` (`taken`).
    pub(crate) fn take_actions(&mut self, desc: &SubmissionDescriptor, taken: intake::Taken, now: Nanos) {
        let mut copy: Option<(Resolved, Resolved, u64, RegionKey, RegionKey)> = None;
        for action in taken {
            match action {
                intake::Action::Dma { src, dst, len, src_key, dst_key, .. } => {
                    copy = Some((src, dst, len, src_key, dst_key))
                }
                intake::Action::Complete { host, cqe, started } => {
                    // A collective refused at once may yet take part (`participation/`).
                    if !cqe.status.is_ok() && self.refused_at_once(host, desc, cqe, now) {
                        continue;
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
                intake::Action::Allgather(call)
                | intake::Action::Alltoall(call)
                | intake::Action::Barrier(call) => {
                    self.count_call(call.host, call.comm, Some(Shape::of(desc)));
                    self.start_collective(call, now)
                }
                intake::Action::Bcast { host, cookie, comm, root, buf, len, started, in_step, .. } => {
                    self.count_call(host, comm, Some(Shape::of(desc)));
                    let cqe = Completion::new(cookie, desc.opcode, Status::OK, 0);
                    let op = self.new_op(host, cqe, started, true, true);
                    self.participate(op, in_step);
                    // The core refused broadcasts from a host without a local rank.
                    let local = self.core.local_rank(host).unwrap_or(u32::MAX);
                    let b = BcastCall { comm, root, buf, len };
                    self.start_call(now, |id, cx| {
                        let (c, p) = bcast::start(b, op, local, id, cx);
                        (Call::Bcast(c), p)
                    });
                }
            }
        }
    }

    /// The planner's arms: collective call `a` (as the intake planned it) started in its
    /// collective's folder, as a host operation of its host.
    fn start_collective(&mut self, a: GatherCall, now: Nanos) {
        let cqe = Completion::new(a.cookie, a.opcode, Status::OK, 0);
        let op = self.new_op(a.host, cqe, a.started, true, true);
        self.participate(op, a.in_step);
        let local = self.core.local_rank(a.host).unwrap_or(u32::MAX);
        let window = self.calls_in_flight(a.host);
        match a.opcode {
            ringcast_abi::Opcode::BARRIER => self.start_call(now, |id, cx| {
                let (c, p) = barrier::start(&a, op, local, id, cx);
                (Call::Barrier(c), p)
            }),
            ringcast_abi::Opcode::ALLTOALL => self.start_call(now, |id, cx| {
                let (c, p) = alltoall::start(&a, op, local, window, id, cx);
                (Call::Alltoall(c), p)
            }),
            ringcast_abi::Opcode::SCAN | ringcast_abi::Opcode::EXSCAN => self.start_call(now, |id, cx| {
                let (c, p) = scan::start(&a, op, local, window, id, cx);
                (Call::Scan(c), p)
            }),
            _ if a.reduce.is_some() => self.start_call(now, |id, cx| {
                let (c, p) = allreduce::start(&a, op, local, window, id, cx);
                (Call::Allreduce(c), p)
            }),
            _ => self.start_call(now, |id, cx| {
                let (c, p) = allgather::start(&a, op, local, window, id, cx);
                (Call::Allgather(c), p)
            }),
        }
    }
}
