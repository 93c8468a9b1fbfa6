//! The protocol's state: one [`Op`] per broadcast in a channel, the pre-posted receive slots
//! ([`Early`]), the delayed synchronization's epoch ([`Sync`]) and the communicator ([`Comm`])
//! that holds them.
use crate::comm::auth::CommKeys;
use crate::comm::auth::{call_binding, CallBinding, Mac, MacState};
use crate::comm::{sync_children, sync_parent};
use crate::comm::{CommShared, PeerId, Rank};
use crate::intake::regions::Resolved;
use crate::schedule::bcast::{Algorithm, Shape};
use crate::transfer::barrier::Barrier;
use crate::transfer::bitmap::{FragBitmap, Geometry};
use crate::transfer::env::{OpCounters, Outcome, PostError};
use crate::transfer::when::When;
use crate::Nanos;
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use ringcast_abi::frame::Crc32c;
use ringcast_abi::frame::SyncBody;
use ringcast_abi::StatusKind;
use smallvec::SmallVec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Root waiting for its delay: until `at`, or until the picked rank's ready (`ready`).
    RootDelay { at: Nanos, ready: bool },
    /// Root loading its message from host memory (a DMA job in flight).
    Loading,
    /// Root sending its message a batch at a time ([`crate::collective::bcast`]'s
    /// `ROOT_BATCH`): `next` steps of the algorithm's send order are done, the next batch is due at
    /// `at`. Over (`Done`) once the last is sent.
    Sending { next: u32, at: Nanos },
    /// Non-root receiving.
    Receiving,
    /// Non-root with every fragment and a good MAC, storing the message into host memory (a
    /// DMA job in flight): it serves repairs, and counts as over only once stored.
    Storing,
    /// Data complete here: delivered, or the root's message sent — or held whole and
    /// authentic where storing it into host memory failed (the host is told; the rank still
    /// serves it, and acks it in the synchronization).
    Done,
    /// Failed here (reported to the host).
    Failed,
    /// Aborted by its root (unreadable root buffer): over, and not a NACK for the
    /// synchronization — the communicator stays usable.
    Aborted,
}

#[derive(Debug)]
pub(crate) struct Op {
    pub(crate) bid: u32,
    pub(crate) root: Rank,
    /// The call's root as a rank of the communicator ([`crate::transfer::env::Post::rank_root`]):
    /// what the message MAC and the bound data tags cover.
    pub(crate) rank_root: Rank,
    /// The call's place in its communicator's sequence ([`crate::transfer::env::Post::slot`]):
    /// covered by the message MAC and the bound data tags too.
    pub(crate) call_slot: u64,
    pub(crate) token: u64,
    /// `None`: no memory ([`crate::transfer::env::Post::buf`]).
    pub(crate) buf: Option<Resolved>,
    pub(crate) geo: Geometry,
    pub(crate) bits: FragBitmap,
    /// Fragments whose allgather copy this rank has relayed (scatter–allgather, hierarchical):
    /// a later copy of the same fragment in that phase is a duplicate and goes no further.
    /// Made at the first such relay ([`Op::relay`]) and kept with the channel's spare bitmaps
    /// after: a broadcast of any other algorithm — a simulated multicast rank's — holds a word.
    pub(crate) relayed: Option<Box<FragBitmap>>,
    pub(crate) alg: Algorithm,
    /// Broadcasts a root may run ahead of a receiver ([`crate::transfer::env::Post::window`],
    /// at most `channels`).
    pub(crate) window: u32,
    pub(crate) shape: Shape,
    pub(crate) selective: bool,
    pub(crate) state: State,
    /// The message MAC: computed by the root, carried by the last fragment.
    pub(crate) digest: Option<Mac>,
    /// The MAC of the message so far (a receiver's: the contiguous prefix it holds, fed in
    /// batches as fragments arrive, up to `hashed` bytes; the prefix's next fragment is
    /// `prefix`), while it is hashed in more than one batch — a message hashed in one pass
    /// keeps none ([`crate::transfer::mac`]).
    pub(crate) mac: Option<Box<MacState>>,
    /// The call context the MAC covers ([`crate::transfer::env::Post::context`]).
    pub(crate) context: u64,
    /// A receiver's own MAC of the whole message, once hashed, checked against `digest` (which
    /// the last fragment brought before it could be hashed): whether they are equal. (The
    /// verdict, not the MAC: 32 bytes an op need not hold.)
    pub(crate) own_ok: Option<bool>,
    /// Whether the MAC covers the payload (`protocol.auth = mac`); with `tag` it is fed no
    /// byte of the message — only the call (broadcast id, length, context, root and place) — and `hashed` just
    /// follows the contiguous prefix held.
    pub(crate) payload_mac: bool,
    /// A receive on no memory under an in-step context
    /// ([`crate::transfer::env::IN_STEP_OP`]): the root's MAC is not this context's, so the
    /// message is relayed and acked without being checked — nothing of it is ever stored.
    pub(crate) unverified: bool,
    pub(crate) hashed: u32,
    pub(crate) prefix: u32,
    /// A receiver's message handed to host-memory store jobs so far (bytes from the start;
    /// never past `hashed`), the jobs not answered yet, and whether any failed: the broadcast
    /// completes once it is `Storing` and none is out.
    pub(crate) stored: u32,
    pub(crate) stores_out: u32,
    pub(crate) store_failed: bool,
    /// A receiver's payload goes straight into its host buffer as each frame is handled
    /// (`Env::place`), not through the channel and a store job: decided at its first fragment
    /// (`collective::bcast::places_directly`), `None` until then. Such a receiver serves no
    /// repairs (it holds no copy that outlives the host's buffer); its channel keeps only the
    /// fragments that arrived ahead of a gap, until the MAC has covered them.
    pub(crate) direct: Option<bool>,
    /// A root's: the driver's load computed each fragment's payload CRC32C as the bytes moved
    /// into the channel ([`Comm::sums`] of its slot; `Engine::staging_summed`), so its frames
    /// are sealed without a pass over the payload (`transfer::seal`).
    pub(crate) summed: bool,
    pub(crate) counters: OpCounters,
    /// Hops of the copy this rank holds (0 = multicast or root).
    pub(crate) hops: u16,
    /// When this rank posted it.
    pub(crate) posted: Nanos,
    /// Last time the repair source (or root) answered or data arrived.
    pub(crate) heard: Nanos,
    /// Next repair request.
    pub(crate) nack_at: Nanos,
    /// No request before `posted + patience` (the broadcast is not overdue before).
    pub(crate) patience: Nanos,
    pub(crate) backoff: Nanos,
    pub(crate) fruitless: u32,
}

impl Op {
    /// Notes fragment `seq`'s allgather copy as relayed by this rank: whether it was not yet.
    /// The bitmap is made here the first time, with `bits`' capacity (one allocation per
    /// channel, at its first scatter–allgather broadcast; the synchronization keeps it).
    pub(crate) fn relay(&mut self, seq: u32) -> bool {
        let bits = &self.bits;
        let relayed = self.relayed.get_or_insert_with(|| {
            let mut r = Box::new(bits.clone());
            // NOTE(unwrap-free): `bits` holds this count, so its clone can.
            let _ = r.reset(bits.count());
            r
        });
        relayed.set(seq)
    }

    pub(crate) fn over(&self) -> bool {
        matches!(self.state, State::Done | State::Failed | State::Aborted)
    }

    /// What its data frames' tags bind besides the header ([`CommKeys::data_tag`]): under
    /// `protocol.auth = tag` the call — its context, root and place ([`call_binding`]) — since no
    /// payload byte is hashed and a fragment of another call with the same id and length would
    /// otherwise be taken for this one's; `None` under `mac`, whose message MAC covers the
    /// payload and the call.
    ///
    /// [`CommKeys::data_tag`]: crate::comm::auth::CommKeys::data_tag
    pub(crate) fn binding(&self) -> Option<CallBinding> {
        (!self.payload_mac).then(|| call_binding(self.context, self.rank_root, self.call_slot))
    }
}

/// A pre-posted receive slot: keeps one fragment of a broadcast this rank has not posted yet.
/// The slots are made when a fragment first needs one, and reused.
#[derive(Debug)]
pub(crate) struct Early {
    pub(crate) used: bool,
    pub(crate) bid: u32,
    pub(crate) from: PeerId,
    pub(crate) len: usize,
    pub(crate) frame: Vec<u8>,
}

impl Early {
    /// A free slot, its buffer not grown yet.
    pub(crate) fn free() -> Self {
        Early { used: false, bid: 0, from: PeerId(0), len: 0, frame: Vec::new() }
    }
}

/// A communicator's synchronization (Yu et al.): the epochs done, inline (every frame's window
/// check reads it), and the current epoch's round — children heard, their combined ACK/NACK,
/// the UP's repeats, the last DOWN — behind a box made the first time an epoch's round starts
/// and kept for every later epoch (one allocation a communicator's life, none per broadcast):
/// a rank that never synchronizes (a simulated one among a million, its one broadcast short of
/// an epoch) holds 16 bytes, not the round's 150.
#[derive(Debug, Default)]
pub(crate) struct Sync {
    /// Epochs synchronized; broadcast ids below `done * channels` are released.
    pub(crate) done: u32,
    /// Consecutive synchronized epochs in which no rank received anything by multicast.
    /// (Beside `done`, in the word the box's pointer would pad.)
    pub(crate) mcast_dead_epochs: u32,
    round: Option<Box<SyncRound>>,
}

/// The round of epoch `Sync::done` (see [`Sync`]).
#[derive(Debug, Clone)]
pub(crate) struct SyncRound {
    /// Children (of 2) whose UP for epoch `done` arrived, as bits.
    pub(crate) heard: u8,
    pub(crate) acked: u64,
    pub(crate) nacked: u64,
    pub(crate) mcast: u32,
    pub(crate) total: u32,
    /// How the first sync child's UP said the epoch ended ([`SyncBody::barrier`],
    /// [`SyncBody::cut`]).
    pub(crate) child_barrier: Option<(u64, u32)>,
    /// A child's subtree ended the epoch with different calls ([`ringcast_abi::frame::SYNC_MISMATCH`]).
    pub(crate) mismatch: bool,
    /// UP sent for epoch `done`: when to repeat it.
    pub(crate) up_retry: When,
    /// When the first UP of epoch `done` went out (no DOWN by `+ peer_timeout`: broken).
    pub(crate) up_since: When,
    /// Since when this rank has done its own part of epoch `done` but still misses a sync
    /// child's UP.
    pub(crate) ready_since: When,
    pub(crate) up_backoff: Nanos,
    /// The DOWN of epoch `done - 1`, to repeat to a child that missed it.
    pub(crate) last_down: Option<SyncBody>,
    /// When the first child's UP of epoch `done` was heard.
    pub(crate) first_up_at: When,
}

impl SyncRound {
    /// A round not started.
    const IDLE: SyncRound = SyncRound {
        heard: 0,
        acked: 0,
        nacked: 0,
        mcast: 0,
        total: 0,
        child_barrier: None,
        mismatch: false,
        up_retry: When::NONE,
        up_since: When::NONE,
        ready_since: When::NONE,
        up_backoff: 0,
        last_down: None,
        first_up_at: When::NONE,
    };
}

impl Sync {
    /// The current epoch's round (an idle one where none started yet).
    pub(crate) fn r(&self) -> &SyncRound {
        self.round.as_deref().unwrap_or(&SyncRound::IDLE)
    }

    /// The current epoch's round, to change: the box is made here the first time.
    pub(crate) fn w(&mut self) -> &mut SyncRound {
        self.round.get_or_insert_with(|| Box::new(SyncRound::IDLE))
    }

    /// Stops repeating the UP (given up, or broken): nothing to clear where no round started.
    pub(crate) fn stop_up(&mut self) {
        if let Some(r) = self.round.as_deref_mut() {
            r.up_retry = When::NONE;
            r.up_since = When::NONE;
        }
    }

    /// Epoch `done` synchronized (its DOWN is `down`): the next round starts idle, keeping the
    /// DOWN for a child that missed it, in the same box.
    pub(crate) fn next_epoch(&mut self, down: SyncBody) {
        self.done += 1;
        *self.w() = SyncRound { last_down: Some(down), ..SyncRound::IDLE };
    }
}

#[derive(Debug)]
pub(crate) struct Comm {
    /// Which communicator of this protocol's life it is: a host-memory job's token carries it,
    /// so the answer to a job of a communicator since destroyed is not taken for one of its
    /// successor in the same table slot (whose broadcast ids restart at 0).
    pub(crate) generation: u32,
    /// Its handle in this protocol (a frame queued around its channel names it: `ChannelRange`).
    pub(crate) handle: u32,
    pub(crate) spec: Spec,
    /// How its frames are sealed: the CRC function and the tag and MAC keys derived from
    /// `spec.key`.
    pub(crate) seal: Seal,
    pub(crate) next_bid: u32,
    /// Per channel (`bid % channels`): its broadcast, and its bytes — grown to the channels
    /// used so far, once each ([`open_slot`]), the bytes to the largest message sent there.
    pub(crate) ops: Ops,
    pub(crate) channels: SmallVec<[Channel; 1]>,
    /// Per channel: the payload CRC32C of each fragment of a root's message, where its driver
    /// computed them as it loaded the message ([`Op::summed`]); grown once, the first time a
    /// driver asks for them, to the fragments of the largest message loaded there — empty
    /// where no driver ever does (a simulated rank's).
    pub(crate) sums: crate::transfer::boxed_vec::BoxedVec<Vec<u32>>,
    pub(crate) early: crate::transfer::boxed_vec::BoxedVec<Early>,
    /// Fragment bitmaps ([`Op::bits`], [`Op::relayed`]) of channels not in use, sized for
    /// `max_message_bytes`: a post takes a pair (made the first time a channel is used), the
    /// synchronization gives it back ([`give_back`]).
    pub(crate) spare_bits: crate::transfer::boxed_vec::BoxedVec<(FragBitmap, Option<Box<FragBitmap>>)>,
    /// MAC states not in use: one per broadcast hashed in several batches at once, allocated
    /// the first time (`transfer::mac`).
    pub(crate) spare_macs: crate::transfer::mac::Spares,
    /// `READY`s of broadcasts whose message this root has not loaded yet (at most `channels`,
    /// the room made at the first).
    pub(crate) ready_seen: crate::transfer::boxed_vec::BoxedVec<u32>,
    pub(crate) sync: Sync,
    pub(crate) broken: bool,
    /// Closed by [`Protocol::close_comm`]: no broadcast is posted here again, and the last,
    /// partial epoch synchronizes as soon as it is over.
    pub(crate) closing: bool,
    /// The last DOWN went out more than the fast window after a child's UP was heard: the
    /// child may have backed its repeats off ([`crate::transfer::sync::UP_FAST_REPAIRS`]).
    pub(crate) down_after_wait: bool,
    /// A post has been waiting for a channel since.
    pub(crate) blocked_since: When,
    /// Barriers waiting for the `SYNC_DOWN` of the epoch they cut (`barrier.rs`): empty until
    /// the first, then [`MAX_BARRIERS`](crate::transfer::barrier::MAX_BARRIERS) entries.
    pub(crate) barriers: crate::transfer::boxed_vec::BoxedVec<Option<Barrier>>,
    /// Last answer from a synchronization neighbour to a probe, and when to probe next.
    pub(crate) sync_heard: Nanos,
    pub(crate) probe_at: When,
    /// Adaptive root delay: EWMA of the picked ranks' arrival lag behind the root, and the
    /// multiplier (in quarters) the multicast hit rate tunes.
    pub(crate) lag_ewma: Nanos,
    pub(crate) lag_factor: u32,
    /// From this broadcast id on, multicast has failed over to point-to-point (binomial).
    /// (Never 0: the first broadcast a fail-over can reach is `channels`'; 4 bytes, not an
    /// `Option<u32>`'s 8.)
    pub(crate) failover_from: Option<core::num::NonZeroU32>,
    /// Fragments received this epoch (multicast, all): reported in SYNC_UP.
    pub(crate) epoch_mcast: u32,
    pub(crate) epoch_total: u32,
}

/// A communicator as this rank knows it: what every member knows alike, shared
/// ([`CommShared`]: one copy for a simulator's ranks of one communicator), and its own rank.
/// Reads through to the shared part: `c.spec.cookie`, `c.spec.size()`; `c.spec.my_rank` is
/// this rank's (the shared part has none, so it cannot be read from there by mistake).
#[derive(Debug)]
pub(crate) struct Spec {
    pub(crate) shared: Arc<CommShared>,
    pub(crate) my_rank: Rank,
}

impl core::ops::Deref for Spec {
    type Target = CommShared;
    fn deref(&self) -> &CommShared {
        &self.shared
    }
}

/// A communicator's broadcasts by channel: the first inline (a communicator of one broadcast
/// at a time — a simulated rank's — allocates no table for it; the engine's 16 channels spill
/// to the heap once, as the `Vec` did).
pub(crate) type Ops = SmallVec<[Option<Op>; 1]>;

/// One channel's bytes: up to [`CHANNEL_INLINE`] of them inline (a simulated rank's 2-byte
/// broadcast allocates no 32-byte chunk), beyond that on the heap, grown once to the largest
/// message sent there, as a `Vec` — the data path reads it as a slice either way.
pub(crate) type Channel = SmallVec<[u8; CHANNEL_INLINE]>;

/// Bytes of a channel kept inline (as many as the `Vec` pointer and length they share room with).
pub(crate) const CHANNEL_INLINE: usize = 16;

/// A communicator's frame sealing: the CRC32C function and its keys.
#[derive(Debug)]
pub(crate) struct Seal {
    pub(crate) crc: Crc32c,
    /// Shared where the ranks of a simulator share them ([`crate::transfer::protocol::Protocol::create_comm_sharing`]).
    /// They know the setting they were derived under (`protocol.auth`), so the version byte
    /// the frames carry too ([`CommKeys::wire_version`]: no byte of it in each communicator).
    pub(crate) keys: Arc<CommKeys>,
    /// The CRC shift for its fragments' payload length, kept between frames sealed around a
    /// channel's bytes (`ringcast_abi::frame::emit_around`): 132 bytes, made the first time
    /// this communicator seals such a frame (a root's), so a rank that never does — a
    /// simulated receiver among a million — does not hold it.
    pub(crate) combiner: core::cell::OnceCell<alloc::boxed::Box<ringcast_abi::crc_combine::Combiner>>,
}

pub(crate) enum Located {
    Slot(usize),
    Future,
    Stale,
}

/// Where broadcast `bid` stands for this rank: a live slot, not posted yet (within the window),
/// or outside the window.
pub(crate) fn locate(c: &Comm, bid: u32, channels: u32) -> Located {
    let floor = c.sync.done * channels;
    if bid < floor {
        return Located::Stale;
    }
    if bid >= c.next_bid {
        return if bid < c.next_bid.saturating_add(channels) { Located::Future } else { Located::Stale };
    }
    let slot = (bid % channels) as usize;
    match c.ops.get(slot) {
        Some(Some(op)) if op.bid == bid => Located::Slot(slot),
        _ => Located::Stale,
    }
}

/// Communicator `comm` of `comms`, if a new operation may be posted on it: one that exists, is
/// not broken (`CommunicatorBroken`) and is not being freed (`UnknownCommunicator`, as a
/// communicator already gone).
pub(crate) fn postable(comms: &mut [Option<Comm>], comm: u32) -> Result<&mut Comm, PostError> {
    let refuse = |s| Err(PostError::Refused(s));
    match comms.get_mut(comm as usize).and_then(Option::as_mut) {
        None => refuse(StatusKind::UnknownCommunicator),
        Some(c) if c.broken => refuse(StatusKind::CommunicatorBroken),
        Some(c) if c.closing => refuse(StatusKind::UnknownCommunicator),
        Some(c) => Ok(c),
    }
}

/// Makes channel `slot`'s state exist: a communicator holds the channels it has used, each
/// made once — a simulated rank of one broadcast holds one, not `channels`. (Channels are used
/// in order, so each grows the tables by one: no spare room reserved.)
pub(crate) fn open_slot(c: &mut Comm, slot: usize) {
    if c.ops.len() <= slot {
        c.ops.reserve_exact(slot + 1 - c.ops.len());
        c.ops.resize_with(slot + 1, || None);
    }
    if c.channels.len() <= slot {
        c.channels.reserve_exact(slot + 1 - c.channels.len());
        c.channels.resize_with(slot + 1, Channel::new);
    }
}

/// Puts `x` back on the spare list `pool`, which grows by one where it must: it never holds
/// more than its communicator's channels ever took at once.
pub(crate) fn give_back<T>(pool: &mut Vec<T>, x: T) {
    if pool.len() == pool.capacity() {
        pool.reserve_exact(1);
    }
    pool.push(x);
}

/// Keeps the `READY` of broadcast `bid` for the root's delay, if there is room (`channels`:
/// made once, at the first).
pub(crate) fn note_ready(c: &mut Comm, bid: u32, channels: u32) {
    if c.ready_seen.len() < channels as usize {
        let seen = c.ready_seen.vec();
        seen.reserve_exact(channels as usize - seen.len());
        seen.push(bid);
    }
}

pub(crate) fn fail(status: StatusKind, counters: OpCounters) -> Outcome {
    Outcome { status, bytes: 0, counters }
}

/// Since when this rank waits on the synchronization — a post blocked on a channel, its part of
/// the epoch done but a child's UP missing, or an UP without its DOWN — if it does. A broken
/// communicator waits for nothing.
pub(crate) fn sync_wait_since(c: &Comm) -> Option<Nanos> {
    if c.broken {
        return None;
    }
    [c.blocked_since, c.sync.r().ready_since, c.sync.r().up_since].into_iter().filter_map(When::get).min()
}

/// Whether this rank waits on `src` for the synchronization: its parent while an UP is
/// unanswered, a child whose UP is missing while this rank's own part is done.
pub(crate) fn waits_on(c: &Comm, src: Rank) -> bool {
    let me = c.spec.my_rank;
    if c.sync.r().up_since.is_some() && sync_parent(me) == Some(src) {
        return true;
    }
    (c.sync.r().ready_since.is_some() || c.blocked_since.is_some())
        && sync_children(c.spec.size(), me)
            .enumerate()
            .any(|(i, k)| k == src && c.sync.r().heard & (1 << i) == 0)
}

/// Whether a broadcast of `frags` fragments is sent by rendezvous: its root waits for the
/// picked rank's `READY` (as in randomized synchronization) because the pre-posted slots
/// (`slots`, fragments) cannot hold a window of such broadcasts — `window` of them (a
/// broadcast's root completes at once and runs up to `channels` broadcasts ahead of a receiver
/// that has not posted yet; a composed collective's root at most its call's parts times its
/// calls in flight: no rank completes a call before every part arrived). The picked rank
/// decides with a window of `channels`, the most any root may use, so a waiting root is
/// always answered. Sent eagerly, every fragment beyond the slots
/// is dropped there and travels again a repair timeout later: measured on 2 nodes, a third of
/// an 8 KiB stream was, and 2-byte broadcasts with 64 channels took 75 µs instead of 2.5 µs.
/// So only messages of which a full window fits the slots go eagerly (with the defaults, 64
/// slots and 16 channels: a broadcast of up to 4 fragments, 5,644 bytes on Ethernet and 16,000
/// on `shm`; an allreduce's part on 2 nodes, 2 parts, of up to 32 fragments).
/// The rendezvous costs one control frame and a hop, next to the many fragments it saves —
/// but the hop waits for the picked rank's process to post, which in a composed collective
/// means its next call: on 2 cores shared by 4 ranks, a 4 KiB allreduce by rendezvous took
/// 160–300 µs and eagerly 55–63 µs (docs/performance.md).
/// Only where one picked rank stands for every receiver or for few: two ranks (whatever the
/// algorithm: the pipelined ones the model picks for large messages degenerate to root → peer),
/// and the small communicators' linear and binomial trees, where the root sends to ranks
/// directly. The large communicators' multicast, trees and pipelines keep their own loss
/// handling (measured: applied to hierarchical on 96 ranks with 19 % duplicated datagrams, it
/// moved 1.42× the clean run's datagrams, not 1.19×).
pub(crate) fn rendezvous(alg: Algorithm, size: u32, frags: u32, slots: usize, window: u32) -> bool {
    (size == 2 || matches!(alg, Algorithm::Linear | Algorithm::Binomial))
        && frags as usize * window as usize > slots
}

/// The window of a post ([`crate::transfer::env::Post::window`]): a broadcast's is `channels`,
/// a composed collective's its parts, never more than `channels`.
pub(crate) fn window_of(posted: u32, channels: u32) -> u32 {
    match posted {
        0 => channels,
        n => n.min(channels),
    }
}

#[cfg(test)]
mod tests {
    use super::{rendezvous, window_of};
    use crate::schedule::bcast::Algorithm;

    /// A communicator's synchronization holds no round until one starts (a simulated rank's
    /// one broadcast short of an epoch: 16 bytes, docs/performance.md "Simulator"); reading an
    /// idle round or stopping an UP never sent makes none; the box made at the first round is
    /// the one every later epoch reuses (no allocation per epoch), each starting idle with the
    /// last DOWN kept.
    #[test]
    fn a_sync_round_is_boxed_at_its_first_use_and_kept() {
        use super::{Sync, SyncRound};
        use crate::transfer::when::When;
        use ringcast_abi::frame::SyncBody;
        let mut s = Sync::default();
        assert_eq!((s.r().heard, s.r().up_retry.is_none(), s.r().last_down), (0, true, None));
        s.stop_up();
        assert!(s.round.is_none(), "reading or stopping an idle round makes no box");
        s.w().heard = 0b11;
        s.w().up_retry = When::at(5);
        let first: *const SyncRound = s.r();
        s.stop_up();
        assert!(s.r().up_retry.is_none() && s.r().up_since.is_none(), "the UP stopped");
        let down = SyncBody { acked: 3.into(), ..SyncBody::default() };
        s.next_epoch(down);
        assert_eq!(s.done, 1);
        assert_eq!((s.r().heard, s.r().last_down), (0, Some(down)), "a new round, the DOWN kept");
        assert!(core::ptr::eq(s.r(), first), "the same box for the next epoch");
    }

    /// The simulator's ranks of one communicator share its keys, derived once
    /// (`Protocol::create_comm_sharing`); keys of another secret are never taken for a
    /// communicator's own — it derives them from its spec.
    #[test]
    fn shared_keys_are_taken_only_from_the_same_secret() {
        use crate::comm::auth::{CommKeys, Secret};
        use crate::comm::{CommSpec, Layout, PeerId};
        use crate::config::{Auth, EngineConfig};
        use crate::transfer::protocol::{CommHandle, Protocol};
        use alloc::sync::Arc;
        let spec = |key: [u8; 32]| CommSpec {
            cookie: u64::from(key[0]),
            group: [7; 14],
            members: (0..2).map(PeerId).collect(),
            my_rank: 0,
            seed: 0,
            key: Secret(key),
            layout: Layout::FLAT,
        };
        let shared = Arc::new(CommKeys::new(&Secret([1; 32])));
        let mut p = Protocol::new(&EngineConfig::default(), crc32c::crc32c);
        let same = p.create_comm_sharing(spec([1; 32]), &shared).expect("a communicator");
        let other = p.create_comm_sharing(spec([2; 32]), &shared).expect("a communicator");
        let keys = |h: CommHandle| p.comms[h.0 as usize].as_ref().map(|c| Arc::clone(&c.seal.keys));
        assert!(keys(same).is_some_and(|k| Arc::ptr_eq(&k, &shared)), "the same secret: shared");
        let own = keys(other).expect("the other communicator");
        assert!(!Arc::ptr_eq(&own, &shared), "another secret: not the shared keys");
        assert!(
            own.derived_from(&Secret([2; 32]), Auth::Mac) && !own.derived_from(&Secret([1; 32]), Auth::Mac)
        );
        assert!(!own.derived_from(&Secret([2; 32]), Auth::Tag));
    }

    /// A broadcast's root may run `channels` broadcasts ahead, a composed collective's root only
    /// its call's parts: with the defaults (64 slots, 16 channels) a 2-node allreduce's part of 8
    /// fragments goes eagerly — by rendezvous it waited for the other process's next call
    /// (docs/performance.md) — while a broadcast of 8 fragments still waits.
    #[test]
    fn a_composed_collectives_parts_go_eagerly_where_one_call_fits_the_slots() {
        let (slots, channels) = (64, 16);
        assert_eq!(window_of(0, channels), channels, "a broadcast: `channels` ahead");
        assert_eq!(window_of(2, channels), 2, "an allreduce on 2 nodes: its 2 parts");
        assert_eq!(window_of(1000, channels), channels, "never more than the channels");
        assert!(rendezvous(Algorithm::Linear, 2, 8, slots, window_of(0, channels)));
        assert!(!rendezvous(Algorithm::Linear, 2, 8, slots, window_of(2, channels)));
        assert!(rendezvous(Algorithm::Linear, 2, 33, slots, window_of(2, channels)), "beyond the slots");
        assert!(
            !rendezvous(Algorithm::Linear, 2, 4, slots, window_of(0, channels)),
            "a window of 4-fragment broadcasts fits"
        );
        // Multicast on many ranks keeps its own loss handling, whatever the window.
        assert!(!rendezvous(Algorithm::Multicast, 64, 100, slots, channels));
    }
}
