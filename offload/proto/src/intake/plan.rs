//! Execution planning: what a descriptor asks for — checked against the host's registrations,
//! the engine's limits and the communicator's ranks — as a [`Plan`], or the typed refusal, and
//! which faults still let the call run in step on no memory. A pure function of its inputs:
//! [`Core`](super::Core) turns a plan into actions.
use super::regions::{RegionTable, Resolved};
use crate::comm::World;
use ringcast_abi::desc::DESC_FLAGS_DEFINED;
use ringcast_abi::{Access, Op, RegionKey, StatusKind, SubmissionDescriptor};
pub(super) enum Plan {
    Nothing,
    Dma {
        src: Resolved,
        dst: Resolved,
        len: u64,
    },
    Bcast {
        buf: Option<Resolved>,
        len: u64,
    },
    Comm {
        op: Op,
        buf: Option<Resolved>,
        len: u64,
    },
    Allgather {
        me: u32,
        size: u32,
        send: Option<Option<Resolved>>,
        recv: Option<Resolved>,
        len: u64,
        reduce: Option<(ringcast_abi::DataType, ringcast_abi::ReduceOp)>,
        root: Option<u32>,
        in_step_op: bool,
    },
    Barrier {
        me: u32,
        size: u32,
        scratch: Option<Resolved>,
        len: u64,
    },
    Alltoall {
        me: u32,
        size: u32,
        send: Option<Resolved>,
        work: Option<Resolved>,
        len: u64,
    },
}

/// Who a host is in a communicator, as the runner's communicator tables know it.
pub trait Ranks {
    /// The rank in communicator `comm` of the host holding engine-local rank `local`; `None`
    /// if it is not a member (or holds no local rank).
    fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32>;
    /// Ranks in communicator `comm`; `None` if this engine does not know it.
    fn size(&self, comm: u64) -> Option<u32>;
}

/// The world communicator only: ranks numbered node by node ([`World`]).
#[derive(Clone, Copy, Debug)]
pub struct WorldRanks<'a> {
    /// This engine's node.
    pub node: u32,
    /// The world's shape.
    pub world: &'a World,
}

impl Ranks for WorldRanks<'_> {
    fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32> {
        match comm {
            0 => self.world.rank(self.node, local?),
            _ => None,
        }
    }

    fn size(&self, comm: u64) -> Option<u32> {
        (comm == 0).then(|| self.world.size())
    }
}

/// What descriptor `d` asks for — validated against the host's registrations and limits — or
/// why it is refused.
///
/// A collective is refused at once (`Err`) only for a fault that leaves its *shape* — the
/// schedule the other ranks run for this call — unknown here; the engine then learns the
/// shape from the other ranks and takes the call in again through [`Core::submit_in_step`]
/// (`engine/call_shapes.rs`), so it runs in step all the same. The faults: an unknown opcode
/// (not taken in again: nothing says it was a collective); a flag no ABI version defines
/// (unlike a reserved word, a flag is how a later ABI would change what the call does); a
/// broadcast's or reduce's root outside the communicator; a length that is zero, past the
/// limit or not a whole number of its type's elements; a type that does not exist (its
/// elements' size shapes a reduction); a communicator this host has no rank in (nobody waits
/// for it). A collective whose fault leaves its shape whole — this rank's memory (a buffer's
/// key, range or access; a send block overlapping its receive buffer), or a field the schedule
/// does not read (an operation its type lacks or that does not exist, a root or send buffer a
/// call without one names, a reserved word, a barrier's scratch shorter than a byte per rank
/// or past the limit) — is not refused at once: its status goes to `in_step`, its buffers
/// are none (`None`: no memory), and the plan stands with that field set aside (a reduction
/// under an in-step operation, `in_step_op`), for the call to run in step with the other ranks
/// on no memory, which then fail typed instead of waiting for parts this rank never posts. A
/// descriptor fault of either kind is reported before a buffer fault of
/// the same call, and a fault that refuses at once before one that does not.
pub(super) fn plan(
    regions: &RegionTable,
    d: &SubmissionDescriptor,
    max_op_bytes: u64,
    (me, size): (Option<u32>, Option<u32>),
    in_step: &mut Option<StatusKind>,
) -> Result<Plan, StatusKind> {
    // A collective's buffer: resolved, or none and the call in step (the first reason kept).
    fn memory(in_step: &mut Option<StatusKind>, r: Result<Resolved, StatusKind>) -> Option<Resolved> {
        r.map_err(|s| stray(in_step, s)).ok()
    }
    // A field the call's shape does not depend on is wrong (or, through `memory`, a buffer):
    // the call runs in step, with the first reason kept.
    fn stray(in_step: &mut Option<StatusKind>, s: StatusKind) {
        in_step.get_or_insert(s);
    }
    let op = Op::try_from(d.opcode).map_err(|_| StatusKind::UnknownOpcode)?;
    if d.flags & !DESC_FLAGS_DEFINED != 0 {
        return Err(StatusKind::BadFlags);
    }
    let reduces = matches!(op, Op::Allreduce | Op::Reduce | Op::Scan | Op::Exscan);
    let collective = op.is_collective();
    if d._reserved1 != 0 || (d.spec != 0 && !reduces) {
        if !collective {
            return Err(StatusKind::BadDescriptor);
        }
        stray(in_step, StatusKind::BadDescriptor);
    }
    match op {
        Op::Nop => {
            let unused = d.len
                | d.offset
                | d.aux_offset
                | d.comm
                | d.root as u64
                | d.key.0 as u64
                | d.aux_key.0 as u64;
            if unused != 0 {
                return Err(StatusKind::BadDescriptor);
            }
            Ok(Plan::Nothing)
        }
        Op::Copy => {
            if d.comm != 0 || d.root != 0 {
                return Err(StatusKind::BadDescriptor);
            }
            if d.len == 0 || d.len > max_op_bytes {
                return Err(StatusKind::BadLength);
            }
            let src = regions.resolve(d.aux_key, d.aux_offset, d.len, Access::READ)?;
            let dst = regions.resolve(d.key, d.offset, d.len, Access::WRITE)?;
            if src.segment == dst.segment
                && src.offset < dst.offset + d.len
                && dst.offset < src.offset + d.len
            {
                return Err(StatusKind::Overlap);
            }
            Ok(Plan::Dma { src, dst, len: d.len })
        }
        Op::Bcast => {
            if d.aux_key != RegionKey::NONE || d.aux_offset != 0 {
                stray(in_step, StatusKind::BadDescriptor); // a send buffer a broadcast has not
            }
            if d.len == 0 || d.len > max_op_bytes {
                return Err(StatusKind::BadLength);
            }
            let me =
                me.ok_or(if d.comm == 0 { StatusKind::NoRank } else { StatusKind::UnknownCommunicator })?;
            if size.is_some_and(|size| d.root >= size) {
                return Err(StatusKind::BadRoot);
            }
            // The root only reads its buffer; every other rank writes it.
            let need = if d.root == me { Access::READ } else { Access::WRITE };
            let buf = memory(in_step, regions.resolve(d.key, d.offset, d.len, need));
            Ok(Plan::Bcast { buf, len: d.len })
        }
        // (A scan's is an allreduce's: the same buffers, type and operation.)
        Op::Allgather | Op::Allreduce | Op::Reduce | Op::Scan | Op::Exscan => {
            // A root where the call has none.
            if op != Op::Reduce && d.root != 0 {
                stray(in_step, StatusKind::BadDescriptor);
            }
            let mut in_step_op = false;
            let reduce = match op {
                Op::Allreduce | Op::Reduce | Op::Scan | Op::Exscan => {
                    let (dtype, rop) = ringcast_abi::reduce::parse_reduce_spec(d.spec);
                    // An unknown type: the size of its elements — where a reduce-scatter cuts
                    // the blocks, what the cost model picks — is unknown, and so the schedule.
                    let Some(elem) = dtype.size() else { return Err(StatusKind::BadDescriptor) };
                    if !(d.len as usize).is_multiple_of(elem) {
                        return Err(StatusKind::BadLength);
                    }
                    if rop.supports(dtype) {
                        Some((dtype, rop))
                    } else {
                        // An operation nothing reduces this type with: the schedule does not
                        // depend on it, so the call runs in step, under an in-step operation (no
                        // block of this rank is ever read, so nothing is reduced with it).
                        stray(in_step, StatusKind::BadDescriptor);
                        in_step_op = true;
                        // (An operation the type has: a pair's is MAXLOC.)
                        let any = if dtype.is_pair() {
                            ringcast_abi::ReduceOp::MAXLOC
                        } else {
                            ringcast_abi::ReduceOp::SUM
                        };
                        Some((dtype, any))
                    }
                }
                _ => None,
            };
            let unknown = if d.comm == 0 { StatusKind::NoRank } else { StatusKind::UnknownCommunicator };
            let (me, size) = (me.ok_or(unknown)?, size.ok_or(unknown)?);
            // A reduce's root, this rank or another.
            let root = match op {
                Op::Reduce if d.root >= size => return Err(StatusKind::BadRoot),
                Op::Reduce => Some(d.root),
                _ => None,
            };
            let total = d.len.checked_mul(u64::from(size)).ok_or(StatusKind::BadLength)?;
            if d.len == 0 || total > max_op_bytes {
                return Err(StatusKind::BadLength);
            }
            if d.aux_key == RegionKey::NONE && d.aux_offset != 0 {
                stray(in_step, StatusKind::BadDescriptor); // an offset into no send buffer
            }
            // Every block arrives in the receive (work) buffer (this rank's own too, unless in
            // place).
            let recv = memory(in_step, regions.resolve(d.key, d.offset, total, Access::WRITE));
            let send = if d.aux_key == RegionKey::NONE {
                // In place: the block is read where it already is (and the work buffer is read
                // back for the reduction). (`me · len` < `total`, bounded above; the offset is
                // the host's own.)
                let own = d.offset.checked_add(u64::from(me) * d.len).ok_or(StatusKind::OutOfBounds);
                memory(in_step, own.and_then(|at| regions.resolve(d.key, at, d.len, Access::READ)));
                None
            } else {
                let send = memory(in_step, regions.resolve(d.aux_key, d.aux_offset, d.len, Access::READ));
                let overlap = send.zip(recv).is_some_and(|(send, recv)| {
                    send.segment == recv.segment
                        && send.offset < recv.offset + total
                        && recv.offset < send.offset + d.len
                });
                if overlap {
                    memory(in_step, Err(StatusKind::Overlap));
                }
                Some(send)
            };
            if reduce.is_some() {
                // The engine reads every contribution back from the work buffer.
                memory(in_step, regions.resolve(d.key, d.offset, total, Access::READ));
            }
            Ok(Plan::Allgather { me, size, send, recv, len: d.len, reduce, root, in_step_op })
        }
        Op::Alltoall => {
            if d.len == 0 {
                return Err(StatusKind::BadLength); // as for every collective of no bytes
            }
            if d.root != 0 || d.aux_key == RegionKey::NONE {
                // A root it has not; no send buffer of its own (no in place): the schedule is
                // the length's, so the call runs in step.
                stray(in_step, StatusKind::BadDescriptor);
            }
            let unknown = if d.comm == 0 { StatusKind::NoRank } else { StatusKind::UnknownCommunicator };
            let (me, size) = (me.ok_or(unknown)?, size.ok_or(unknown)?);
            let total = d.len.checked_mul(u64::from(size)).ok_or(StatusKind::BadLength)?;
            // The work buffer: the result, then every rank's whole send buffer.
            let work_len = total.checked_mul(u64::from(size) + 1).ok_or(StatusKind::BadLength)?;
            if d.len == 0 || work_len > max_op_bytes {
                return Err(StatusKind::BadLength);
            }
            let work = memory(in_step, regions.resolve(d.key, d.offset, work_len, Access::READ_WRITE));
            let send = memory(in_step, regions.resolve(d.aux_key, d.aux_offset, total, Access::READ));
            let overlap = send.zip(work).is_some_and(|(send, work)| {
                send.segment == work.segment
                    && send.offset < work.offset + work_len
                    && work.offset < send.offset + total
            });
            if overlap {
                memory(in_step, Err(StatusKind::Overlap));
            }
            Ok(Plan::Alltoall { me, size, send, work, len: d.len })
        }
        Op::Barrier => {
            // Fields a barrier has not, and its scratch's length, which the engine never touches:
            // none of them shapes the barrier, so a wrong one runs it in step.
            if d.root != 0 || d.aux_key != RegionKey::NONE || d.aux_offset != 0 {
                stray(in_step, StatusKind::BadDescriptor);
            }
            let unknown = if d.comm == 0 { StatusKind::NoRank } else { StatusKind::UnknownCommunicator };
            let (me, size) = (me.ok_or(unknown)?, size.ok_or(unknown)?);
            // One scratch byte per rank at least (the engine uses one per engine spanned).
            if d.len < u64::from(size) || d.len > max_op_bytes {
                stray(in_step, StatusKind::BadLength);
            }
            let scratch = memory(in_step, regions.resolve(d.key, d.offset, d.len, Access::READ_WRITE));
            Ok(Plan::Barrier { me, size, scratch, len: d.len })
        }
        Op::CommCreate => {
            if d.comm == 0 || d.root != 0 || d.aux_key != RegionKey::NONE || d.aux_offset != 0 {
                return Err(StatusKind::BadDescriptor);
            }
            let min = ringcast_abi::CommCreateHeader::record_len(1) as u64;
            if d.len < min || d.len > max_op_bytes {
                return Err(StatusKind::BadLength);
            }
            let buf = regions.resolve(d.key, d.offset, d.len, Access::READ)?;
            Ok(Plan::Comm { op, buf: Some(buf), len: d.len })
        }
        Op::CommFree => {
            let unused =
                d.len | d.offset | d.aux_offset | d.root as u64 | d.key.0 as u64 | d.aux_key.0 as u64;
            if d.comm == 0 || unused != 0 {
                return Err(StatusKind::BadDescriptor);
            }
            Ok(Plan::Comm { op, buf: None, len: 0 })
        }
    }
}
