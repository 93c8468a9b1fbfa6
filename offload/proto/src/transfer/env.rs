//! What the protocol asks of its surroundings ([`Env`]: frames out, DMA jobs on host memory,
//! completions) and the values that cross that boundary: posts, outcomes, counters, handles.
use crate::comm::{GroupId, PeerId, Rank};
use crate::intake::regions::Resolved;
use ringcast_abi::frame::DropReason;
use ringcast_abi::StatusKind;

/// What the protocol asks of its surroundings (the runner, the simulator, a test).
pub trait Env {
    /// Send `frame` to one peer (unreliable; the protocol recovers losses).
    fn send(&mut self, to: PeerId, frame: &[u8]);
    /// Send `frame` to one peer on NIC lane `lane` ([`crate::schedule::bcast::LANE_ANY`]: any or all lanes
    /// aggregated). Fabrics with one lane ignore it.
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        let _ = lane;
        self.send(to, frame)
    }
    /// Multicast `frame` to the communicator's group (unreliable).
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// Send a frame that `build` writes into a buffer of `len` bytes (returning the length it
    /// used; 0 sends nothing). By default it is built in `scratch` and handed to
    /// [`Env::send_on`] / [`Env::multicast`]; a driver that queues frames (the engine's outbox)
    /// has it built where it is queued — one copy of every datagram fewer.
    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        scratch: &mut alloc::vec::Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        if scratch.len() < len {
            scratch.resize(len, 0); // once, to the largest frame (at most the MTU)
        }
        let n = build(&mut scratch[..len]);
        match to {
            _ if n == 0 => {}
            Dest::Peer(p, lane) => self.send_on(p, &scratch[..n], lane),
            Dest::Group(g) => self.multicast(g, &scratch[..n]),
        }
    }
    /// Sends a data frame whose payload is `range` of a channel (`data`, those bytes): `whole`
    /// builds the whole frame into `whole_len` bytes, `around` only its header and trailer into
    /// `around_len` (`ringcast_abi::frame::emit_around`: the payload left where it lies, the
    /// CRC the gathered frame's). A driver that gathers a frame into the wire from where its
    /// parts lie — the engine's outbox, a NIC's send gather — queues header, trailer and
    /// `range`, and the payload is read out of the channel only as the frame is written into
    /// the wire (a driver that sends at once may gather `data` there and then); by default the
    /// whole frame is built by [`Env::send_built`], the payload copied.
    /// Returns the frame's length, payload included (0: nothing sent), and whether its
    /// payload was copied.
    #[allow(clippy::too_many_arguments)]
    fn send_around(
        &mut self,
        to: Dest<'_>,
        range: ChannelRange,
        data: &[u8],
        scratch: &mut alloc::vec::Vec<u8>,
        whole_len: usize,
        whole: &mut dyn FnMut(&mut [u8]) -> usize,
        around_len: usize,
        around: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> (usize, bool) {
        let _ = (range, data, around_len, around);
        let mut built = 0;
        self.send_built(to, whole_len, scratch, &mut |out| {
            built = whole(out);
            built
        });
        (built, built > 0)
    }
    /// Takes a job moving `job.len` bytes between host memory (`job.buf`) and the protocol's
    /// own memory for it (its staging: a channel). Every job is answered asynchronously: the
    /// driver carries it out after this returns — a DMA engine's, on a DPU; the emulation
    /// runners', on their next pass; a test's or the simulator's once the handler that handed
    /// it over has returned ([`HostDriver`](crate::transfer::host_driver::HostDriver)) — moving
    /// the bytes to or from [`Protocol::staging`](crate::transfer::protocol::Protocol::staging),
    /// and answers with [`Protocol::dma_done`](crate::transfer::protocol::Protocol::dma_done).
    /// Never re-enter the protocol from here.
    ///
    /// A job's bytes are fetched from the staging when the job is carried out, not when it is
    /// handed over: a broadcast may end (fail, or its communicator go) while one of its store
    /// parts is out, and from then on its jobs have no staging and move nothing.
    fn dma(&mut self, job: DmaJob);
    /// Whether [`Env::place`] reaches host buffer `buf` at once: the driver maps it (the
    /// `mapped` backend, a simulated host). A receiver that reaches its buffer and serves
    /// nobody's repairs writes each fragment's payload straight into it as the frame is handled
    /// — a NIC's receive scatter — instead of into its channel and out again by a store job
    /// (`collective::bcast`). A driver that reaches host memory only by DMA jobs (`cma`,
    /// `rdma`, the engine's own [`Env::dma`] queue) says no.
    fn reaches(&self, buf: Resolved) -> bool {
        let _ = buf;
        false
    }
    /// Writes `bytes` into host memory at `buf` now (only where [`Env::reaches`] said yes);
    /// `true` if every byte was written. Called while a frame is handled, with the frame's
    /// payload where the fabric holds it. Never re-enter the protocol from here.
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        let _ = (buf, bytes);
        false
    }
    /// Hands `f` the `len` bytes of host memory at `buf` where they lie (only where
    /// [`Env::reaches`] said yes): a receiver that placed its payload there feeds its message
    /// MAC from the delivered bytes, with no copy. `false` when the range is not reached.
    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let _ = (buf, len, f);
        false
    }
    /// The broadcast posted with `token` is over.
    fn complete(&mut self, token: u64, outcome: Outcome);
    /// Actions handed over and not yet taken by the driver (its queue: frames, mostly). A root
    /// seals its next batch of fragments only while this is short, so a driver that falls
    /// behind is not handed the rest of a message at once; the engine's runner empties its
    /// queue on every pass, so there a root seals a batch per pass. A driver that sends at
    /// once says 0.
    fn backlog(&self) -> usize {
        0
    }
    /// The frame being handled is a fragment of a broadcast not posted here and no pre-posted
    /// slot is free: `true` if its fabric keeps it where it lies, to offer it again once a
    /// broadcast is posted here (back-pressure: `shm`'s multicast log, the group's receive
    /// queue, is not drained past it) — the protocol then does nothing with it and counts
    /// nothing. `false` (the default): it is dropped, `NoSlot`, and repaired later.
    fn keep_back(&mut self) -> bool {
        false
    }
}

/// A driver's direct reach into host memory, lent to the engine while it handles a frame
/// ([`crate::engine::Engine::handle_frame_placing`]): what [`Env::reaches`] and [`Env::place`]
/// answer with there.
pub trait HostPort {
    /// Whether `buf` is reached at once ([`Env::reaches`]).
    fn reaches(&self, buf: Resolved) -> bool;
    /// Writes `bytes` at `buf` now ([`Env::place`]).
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool;
    /// Hands `f` the bytes at `buf` ([`Env::view`]).
    fn view(&self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool;
}

/// Where [`Env::send_built`] sends: one peer on a lane, or a multicast group.
#[derive(Clone, Copy, Debug)]
pub enum Dest<'a> {
    /// One peer, on a NIC lane.
    Peer(PeerId, u8),
    /// The communicator's multicast group.
    Group(&'a GroupId),
}

/// Bytes of a communicator's channel a queued frame's payload is read from when it goes out
/// ([`Env::send_around`]). Named by its broadcast, not by address: the driver resolves it
/// when it writes the frame into the wire, and a range whose broadcast has left its channel
/// (the communicator gone, or its slot taken by a later broadcast) resolves to nothing — that
/// frame is not sent (a loss the protocol repairs), never sent with other bytes. Within one
/// broadcast a channel's bytes are never rewritten once sent: a root's are loaded before its
/// first fragment leaves, a receiver's fragment is written once, when it first arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelRange {
    /// Communicator.
    pub comm: CommHandle,
    /// Its generation (a handle is reused once its communicator is gone).
    pub generation: u32,
    /// Its channel.
    pub slot: u32,
    /// The broadcast the bytes are of.
    pub bid: u32,
    /// Where in the channel.
    pub off: u32,
    /// Bytes.
    pub len: u32,
}

/// Which way a host-memory job moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaDir {
    /// Host buffer to the protocol's staging: a root loads its message.
    Load,
    /// The protocol's staging to the host buffer: a receiver delivers (a part of the message,
    /// see [`DmaToken::off`]).
    Store,
}

/// Names a host-memory job: stale once its broadcast is gone (a late answer is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DmaToken {
    /// Communicator.
    pub comm: CommHandle,
    /// The communicator's generation (a handle is reused once its communicator is gone).
    pub generation: u32,
    /// Its channel.
    pub slot: u32,
    /// The broadcast.
    pub bid: u32,
    /// Where in the message the job's bytes start: a receiver stores its message in parts, each
    /// as soon as the MAC has covered it (`collective::bcast`); a load is the whole message
    /// (0).
    pub off: u32,
    /// The job's bytes from `off` (the staging's length).
    pub len: u32,
}

/// A host-memory transfer the protocol asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaJob {
    /// What to answer with.
    pub token: DmaToken,
    /// Which way.
    pub dir: DmaDir,
    /// The host buffer.
    pub buf: Resolved,
    /// Bytes (the staging's length).
    pub len: u64,
}

impl DmaJob {
    /// Carries the job out between `stage` (its staging, [`Protocol::staging`](crate::transfer::protocol::Protocol::staging))
    /// and `host`, a host memory of one flat buffer in which `buf.offset` is a byte offset (the
    /// segment is not looked at): the whole driver side of a test, a fuzz target or a
    /// one-buffer experiment ([`HostDriver`](crate::transfer::host_driver::HostDriver)).
    /// `false`, moving nothing, when the range is not inside `host`.
    pub fn carry_out(&self, host: &mut [u8], stage: &mut [u8]) -> bool {
        let range = usize::try_from(self.buf.offset).ok().and_then(|o| Some(o..o.checked_add(stage.len())?));
        let Some(host) = range.and_then(|r| host.get_mut(r)) else { return false };
        match self.dir {
            DmaDir::Load => stage.copy_from_slice(host),
            DmaDir::Store => host.copy_from_slice(stage),
        }
        true
    }
}

/// Per-operation counters returned in the completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Fragments received by multicast.
    pub frags_multicast: u32,
    /// Fragments received by repair (point-to-point).
    pub frags_repair: u32,
    /// Ring hops the data took to reach this rank beyond the multicast (Hoefler's "penalty
    /// rounds"): 0 when everything came by multicast (or this is the root).
    pub penalty_rounds: u32,
    /// Repair requests this rank sent.
    pub retransmits: u32,
    /// Fragments that arrived twice.
    pub duplicates: u32,
}

impl OpCounters {
    /// Adds the counters of one more part of a composed operation: counts add up, the penalty
    /// rounds are the worst part's.
    pub fn absorb(&mut self, part: OpCounters) {
        self.frags_multicast += part.frags_multicast;
        self.frags_repair += part.frags_repair;
        self.penalty_rounds = self.penalty_rounds.max(part.penalty_rounds);
        self.retransmits += part.retransmits;
        self.duplicates += part.duplicates;
    }
}

/// How a broadcast ended at this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Ok` or why not.
    pub status: StatusKind,
    /// Bytes delivered (0 on error).
    pub bytes: u64,
    /// Counters.
    pub counters: OpCounters,
}

/// Handle of a communicator in this engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CommHandle(pub u32);

/// The operation byte (bits 16–23 of [`Post::context`]) of a call *in step* for its operation
/// (at its rank, an operation nothing reduces its type with, `intake::plan`): it
/// runs in step on no memory under this operation byte, which no real call's context carries
/// (operations are 1–9). Its receives on no memory ([`Post::buf`] `None`) relay without
/// checking the MAC — the root's context is the real operation's, unknown here — and the node
/// compares it with its siblings' calls without the operation ([`same_call`]).
///
/// The policy itself is `engine/participation/`'s; this byte is how it reaches the wire
/// context, so the contexts' comparisons ([`same_call`], [`reference_call`]) live here.
pub const IN_STEP_OP: u64 = 0xff << 16;

/// Whether `context` is that of a call in step for its operation ([`IN_STEP_OP`]).
pub const fn is_in_step_op(context: u64) -> bool {
    context & IN_STEP_OP == IN_STEP_OP
}

/// Whether two processes' contexts are the same call: equal, or — one in step for its
/// operation — equal but for the operation (opcode, type, calls that posted nothing and
/// exchanges still compared).
pub const fn same_call(a: u64, b: u64) -> bool {
    if is_in_step_op(a) || is_in_step_op(b) {
        a & !IN_STEP_OP == b & !IN_STEP_OP
    } else {
        a == b
    }
}

/// The context processes of one call are compared with: `first`'s, or — `first` in step for
/// its operation — the first of `rest` that is not (so that the processes taking part in full
/// are compared with each other in full; an in-step operation as the reference would let them
/// differ in their operation).
pub fn reference_call(first: u64, rest: impl IntoIterator<Item = u64>) -> u64 {
    match is_in_step_op(first) {
        true => rest.into_iter().find(|&c| !is_in_step_op(c)).unwrap_or(first),
        false => first,
    }
}

/// One rank's part of a broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    /// Communicator.
    pub comm: CommHandle,
    /// Root rank (of the protocol: the engine that holds the root).
    pub root: Rank,
    /// The call's root as a rank of the communicator (a leader-based communicator's engine
    /// holds several; elsewhere `root`). The message MAC and, under `protocol.auth = tag`, the
    /// data frames' tags cover it: ranks whose calls got out of step may hold the same
    /// broadcast id for broadcasts of one length from two ranks on one engine, which `root`
    /// alone does not tell apart (DST seed 999000067668 with non-blocking calls, `WrongBytes`).
    pub rank_root: Rank,
    /// The call's place in its communicator's sequence of calls at this engine (the node's
    /// slot: every engine numbers a communicator's slots alike when the ranks agree; 0 where
    /// there is no sequencer). The message MAC and the bound data tags cover it too: a rank
    /// whose earlier call took no broadcast id (an exchange between the engines) holds its next
    /// broadcast under the id the others gave their previous one — of the same root and length
    /// (DST seed 999000004130 with non-blocking calls, `WrongBytes`).
    pub slot: u64,
    /// The buffer: read at the root, written at the others. `None`: no memory — this rank's
    /// call runs in step on none (docs/protocol.md, "A call in step at one rank"): a root's
    /// load fails where it is made (the broadcast is aborted), a receiver relays and serves the
    /// message and completes failed, and no job on it ever reaches [`Env::dma`].
    pub buf: Option<Resolved>,
    /// Message length (the same at every rank).
    pub len: u32,
    /// Returned in the completion.
    pub token: u64,
    /// What the call is beyond a broadcast, folded into the message MAC so every rank must
    /// agree on it. Low half: 0 for a broadcast; a composed collective's opcode, element type
    /// and operation (`engine::cx::call_context`, bits 0–23), and the posting process's
    /// leader-based calls exchanged by multicast, modulo 256 (bits 24–31:
    /// `engine::node::sequencer::Sequencer::multicast_exchange` — so engines that took different exchanges
    /// for one call do not pair its transfers with the next call's). High half: how many calls on the
    /// communicator the posting process made that posted nothing (refused at once and no shape
    /// learnt for it from the others: `engine::node::sequencer::Sequencer::posted_nothing`) — so a process whose call posted nothing
    /// while the others' did is not matched with their calls shifted by one. A receiver that posted
    /// another context than the root fails the broadcast with `DigestMismatch` instead of
    /// delivering bytes meant for another call — but for a call in step for its operation ([`IN_STEP_OP`]) posted
    /// on no memory (`buf` `None`), which relays the message unchecked.
    pub context: u64,
    /// How far ahead of a receiver its root can run, in broadcasts: 0 for a broadcast, whose
    /// root completes once its message is in the channel and may run `channels` broadcasts
    /// ahead; for a composed collective's part, its call's parts times the composed calls this
    /// engine has in flight: no rank completes a call before every part of it arrived, so a
    /// root is at most as many calls ahead as it has not completed (one, for blocking calls).
    /// With the pre-posted slots it decides whether the root sends eagerly or waits for a
    /// rendezvous ([`crate::transfer::state::rendezvous`]); receivers answer a rendezvous
    /// wherever a window of `channels` would need one, so they never leave a root waiting.
    pub window: u32,
}

impl Post {
    /// A plain broadcast's post (no call context, no sequencer: `rank_root` is `root`, `slot`
    /// 0, `window` 0) — what a bare protocol, its tests and the simulator's experiments post.
    pub fn plain(comm: CommHandle, root: Rank, buf: Resolved, len: u32, token: u64) -> Post {
        Post { comm, root, rank_root: root, slot: 0, buf: Some(buf), len, token, context: 0, window: 0 }
    }
}

/// Why a post was not accepted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The channel this broadcast needs is still held (its epoch is not synchronized yet):
    /// post again after the next event.
    WouldBlock,
    /// Refused for good with this status.
    Refused(StatusKind),
}

/// Protocol-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProtoCounters {
    /// Frames dropped, by reason (`DropReason as usize`).
    pub drops: [u64; DropReason::COUNT],
    /// Frames sent point-to-point.
    pub sent: u64,
    /// Frames multicast.
    pub multicast: u64,
    /// Synchronization epochs completed.
    pub syncs: u64,
    /// Repair (point-to-point data) datagrams sent, and their bytes: the repair traffic.
    pub repair_frames: u64,
    /// See `repair_frames`.
    pub repair_bytes: u64,
    /// Payload bytes the protocol copied, hashed and CRC'd, and the bytes it delivered
    /// ([`crate::ledger`]): its own sites and the DMA jobs it saw completed.
    pub ledger: crate::ledger::Ledger,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::regions::SegmentHandle;

    #[test]
    fn a_job_carried_out_on_one_buffer_moves_its_range_or_fails_whole() {
        let token = DmaToken { comm: CommHandle(0), generation: 1, slot: 0, bid: 0, off: 0, len: 4 };
        let job =
            |dir, offset| DmaJob { token, dir, buf: Resolved { segment: SegmentHandle(1), offset }, len: 4 };
        let mut host: Vec<u8> = (0..10).collect();
        let mut stage = [0u8; 4];
        assert!(job(DmaDir::Load, 3).carry_out(&mut host, &mut stage));
        assert_eq!(stage, [3, 4, 5, 6]);
        assert!(job(DmaDir::Store, 6).carry_out(&mut host, &mut stage));
        assert_eq!(&host[6..], &[3, 4, 5, 6]);
        for offset in [7, u64::MAX] {
            assert!(!job(DmaDir::Store, offset).carry_out(&mut host, &mut stage));
        }
        assert_eq!(&host[6..], &[3, 4, 5, 6], "a failed job moved nothing");
    }
}
