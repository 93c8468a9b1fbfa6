//! The collective calls of a [`Host`]: broadcast, allgather, allreduce, barrier, and the
//! creation and release of communicators — each one descriptor, blocking until its completion
//! (the non-blocking forms post the same descriptors with [`Host::post`]).
use crate::error::{Error, Result};
use crate::host::Host;
use crate::shared_buf::SharedBuf;
use ringcast_abi::{
    Access, CommCreateHeader, Completion, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::ident::CommIdentity;

impl Host {
    /// Broadcasts `len` bytes at `buf` on the engine's world communicator (`comm` 0) from rank
    /// `root`: read here if this engine is the root, written here otherwise. Blocks until this
    /// rank's part is over; the completion carries the protocol's counters (fragments by
    /// multicast and by repair, penalty rounds, repair requests).
    pub fn bcast(&mut self, comm: u64, root: u32, buf: RegionRef, len: u64) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::bcast(cookie, comm, root, buf, len))
    }

    /// Allgather on communicator `comm` (0: the world): this rank's `block` bytes — read from
    /// `send`, or in place (`None`: already at `recv + rank × block`) — go to every rank, and
    /// every rank's block arrives at `recv + rank × block` (`recv` holds `size × block` bytes).
    /// The engine runs it as one broadcast per rank, every property of the broadcast kept;
    /// blocks until this rank has every block.
    pub fn allgather(
        &mut self,
        comm: u64,
        recv: RegionRef,
        send: Option<RegionRef>,
        block: u64,
    ) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::allgather(cookie, comm, recv, send, block))
    }

    /// Allreduce on communicator `comm` of `len` bytes of `dtype` elements with `op`, in the
    /// work buffer `work` (`size × len` bytes): this rank's contribution — read from `send`, or
    /// in place (`None`: already at `work + rank × len`) — is gathered with every rank's, the
    /// engine reduces them in its documented order (rank order, or node by node when it
    /// composes leader-based, then by recursive doubling between the nodes where the call's
    /// exchange is not multicast:
    /// docs/protocol.md) and the result is at the start of `work` when
    /// this returns (bit-identical at every rank).
    pub fn allreduce(
        &mut self,
        comm: u64,
        work: RegionRef,
        send: Option<RegionRef>,
        len: u64,
        dtype: ringcast_abi::DataType,
        op: ringcast_abi::ReduceOp,
    ) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::allreduce(cookie, comm, work, send, len, dtype, op))
    }

    /// Reduce to rank `root` of communicator `comm`: the [`Host::allreduce`] (same buffers, types
    /// and operations) whose result only the root receives, at the start of its `work`; every
    /// other rank returns once its part is over, its `work` contents unspecified.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &mut self,
        comm: u64,
        root: u32,
        work: RegionRef,
        send: Option<RegionRef>,
        len: u64,
        dtype: ringcast_abi::DataType,
        op: ringcast_abi::ReduceOp,
    ) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::reduce(cookie, comm, root, work, send, len, dtype, op))
    }

    /// Alltoall on communicator `comm`: block `q` of `send` (`size × block` bytes) goes to rank
    /// `q`, and rank `r`'s block for this rank arrives at `work + r × block` — `work` holds
    /// `(size + 1) × size × block` bytes, the rest scratch (the engine's multicast alltoall:
    /// every rank's whole send buffer arrives there). Blocks until the result is in place.
    pub fn alltoall(
        &mut self,
        comm: u64,
        work: RegionRef,
        send: RegionRef,
        block: u64,
    ) -> Result<Completion> {
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::alltoall(cookie, comm, work, send, block))
    }

    /// Barrier on communicator `comm` (0: the world): returns once every rank of it has
    /// called it. The engine runs it on the delayed synchronization's tree once all of its
    /// node's processes arrived: an epoch cut short, whose `SYNC_DOWN` says every engine's
    /// processes did (docs/protocol.md, Barrier; a dead rank fails it with a typed error).
    pub fn barrier(&mut self, comm: u64) -> Result<Completion> {
        let d = self.barrier_descriptor(comm)?;
        self.execute(&d)
    }

    /// The descriptor of a barrier on communicator `comm` (a fresh cookie; post it with
    /// [`Host::post`] for a non-blocking barrier), with this process's barrier scratch — one
    /// byte per rank, registered at the first barrier and grown when a larger communicator
    /// needs more (concurrent barriers share it: its contents are never read back).
    pub fn barrier_descriptor(&mut self, comm: u64) -> Result<SubmissionDescriptor> {
        let size = match comm {
            0 => self.world_size(),
            c => *self.comm_sizes.get(&c).ok_or(Error::Op {
                cookie: 0,
                status: ringcast_abi::Status::from(StatusKind::UnknownCommunicator),
            })?,
        };
        let need = u64::from(size.max(1));
        if self.barrier_scratch.as_ref().is_none_or(|r| r.len() < need) {
            // Grown with room: a slightly larger communicator later registers nothing new.
            let buf = SharedBuf::new(need.next_power_of_two() as usize)?;
            let region = self.register(&buf, Access::READ_WRITE)?;
            // The old one stays registered: a barrier still in flight may write it (sizes
            // double, so what stays is less than what is in use).
            if let Some(old) = self.barrier_scratch.replace(region) {
                self.retired_scratch.push(old);
            }
        }
        let scratch = self
            .barrier_scratch
            .as_ref()
            .map(|r| r.at(0))
            .unwrap_or(RegionRef { key: RegionKey::NONE, offset: 0 });
        let cookie = self.next_cookie();
        Ok(SubmissionDescriptor::barrier(cookie, comm, scratch, need))
    }

    /// Creates the communicator `id` names (its cookie is the handle broadcasts name it by;
    /// every member passes the same identity) of the world ranks `members`, this process being
    /// `members[my_rank]`. One member draws the identity with
    /// `ringcast_offload::entropy::new_identity` and the others receive it (e.g. over
    /// MPI): it includes the communicator's secret, which keys its frames, so hand it only to
    /// members. Every member calls it; broadcasts name their roots by rank in `members`.
    pub fn comm_create(&mut self, id: &CommIdentity, my_rank: u32, members: &[u32]) -> Result<()> {
        let size = u32::try_from(members.len()).map_err(|_| Error::Protocol("communicator too large"))?;
        let handle = id.cookie;
        let header = CommCreateHeader::new(size, my_rank, id.seed, id.group, id.key.0);
        let record: Vec<u8> = header.record(members).collect();
        // The record travels in shared memory the engine reads once, at creation.
        let buf = SharedBuf::new(record.len())?;
        buf.write_at(0, &record)?;
        let region = self.register(&buf, Access::READ)?;
        let cookie = self.next_cookie();
        let result = self.execute(&SubmissionDescriptor::comm_create(
            cookie,
            handle,
            region.at(0),
            record.len() as u64,
        ));
        self.deregister(region)?;
        match result {
            Err(e) if e.status() == Some(StatusKind::TooManyCommunicators) => {
                Err(Error::TooManyCommunicators { handle })
            }
            other => {
                other?;
                self.comm_sizes.insert(handle, size);
                Ok(())
            }
        }
    }

    /// Leaves communicator `handle` (every member does; the engine drops it once its last
    /// local member left). A broadcast of this process still open on it fails.
    pub fn comm_free(&mut self, handle: u64) -> Result<()> {
        self.comm_sizes.remove(&handle);
        let cookie = self.next_cookie();
        self.execute(&SubmissionDescriptor::comm_free(cookie, handle)).map(drop)
    }
}
