//! The reliable broadcast protocol: one state machine per engine, sans-IO.
//!
//! Inputs (each with `now` and an [`Env`] to act through): [`Protocol::create_comm`],
//! [`Protocol::post_bcast`], [`Protocol::on_frame`], [`Protocol::on_timeout`]. Outputs go through
//! the `Env`: frames to send or multicast, host-memory reads and writes, completions. The caller
//! asks [`Protocol::next_timeout`] when to call `on_timeout` next. No clock, socket or thread.
//!
//! **The broadcast** (Hoefler et al. made reliable and buffer-safe with Yu et al.):
//! * every rank keeps each broadcast's bytes in one of its communicator's `channels` (engine
//!   memory), so it can serve repairs after its host has the data back, and delivers to the
//!   host buffer when complete; the root completes its host's request as soon as the message is
//!   in its channel;
//! * stage 1: after the optional root delay the root multicasts every fragment once (large
//!   communicators); receivers that have not posted yet keep at most `preposted_slots`
//!   fragments per communicator, the rest are lost as on a NIC without posted receives;
//! * stage 2: each rank forwards every fragment it newly holds, once, to its children in the
//!   broadcast's topology — the ring successor (the root's predecessor link omitted), or the
//!   binomial/linear children for small communicators, which then skip multicast. Messages from
//!   `selective_repair_bytes` up are not forwarded eagerly: a rank that completes tells its
//!   children (`READY`/have-all) and each answers with a bitmap of what it misses, so only those
//!   fragments travel;
//! * loss recovery is receiver-driven and needs no ACK per fragment: every header carries the
//!   fragment count, so an incomplete rank knows what it misses; after `repair_timeout_us`
//!   without progress it asks its repair source (exponential back-off), after `escalate_after`
//!   fruitless requests it asks the root (fail-over to point-to-point). A request is always
//!   answered — with fragments or with `READY`/alive — so only an unreachable engine stays
//!   silent, and after `peer_timeout_ms` of silence the operation fails with
//!   `PeerUnreachable` and the communicator is marked broken;
//! * integrity and authenticity: every frame carries a CRC32C (noise) and a tag keyed by the
//!   communicator's secret ([`crate::comm::auth`]), checked before anything in the frame is believed —
//!   a forged frame is dropped (`BadTag`); the last fragment carries a keyed MAC of the whole
//!   message, checked before delivery (`DigestMismatch` instead of wrong bytes);
//! * channels are freed by the delayed synchronization of Yu et al.: broadcast ids are grouped in
//!   epochs of `channels`; a rank that completed every broadcast of an epoch and heard from its
//!   sync-tree children sends `SYNC_UP` (combined ACK/NACK) to its parent; the manager (rank 0)
//!   answers down the tree with `SYNC_DOWN`, which frees the epoch's channels everywhere. A post
//!   that finds its channel still held waits (`PostError::WouldBlock`) — the only time a rank
//!   waits for the synchronization, so its cost is amortised over `channels` broadcasts.
use super::bitmap::{FragBitmap, Geometry, MAX_FRAGS};
use crate::collective::bcast::{self as algo, Algorithm, Hop, Phase, Shape, LANE_ANY};
use crate::comm::auth::{CommKeys, Mac};
use crate::comm::{
    authenticate, children, parent, sync_children, sync_parent, CommSpec, GroupId, PeerId, Rank, Topology,
};
use crate::config::{EngineConfig, RootDelay};
use crate::intake::regions::Resolved;
use crate::model::select::Selector;
use crate::Nanos;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use ringcast_abi::frame::{
    emit, Crc32c, DropReason, Frame, RetransmitBody, SyncBody, DIGEST_LEN, MAX_RETRANSMIT_FRAGS,
};
use ringcast_abi::wire::{
    FrameKind, WireHeader, READY_FLAG_ABORTED, READY_FLAG_ALIVE, READY_FLAG_BROKEN, READY_FLAG_HAVE_ALL,
    READY_FLAG_PROBE, READY_FLAG_READY, SYNC_PROBE_BID, WIRE_HEADER_LEN, WIRE_TRAILER_LEN, WIRE_VERSION,
};
use ringcast_abi::StatusKind;
use zerocopy::byteorder::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

/// Largest ring fan-out the selective repair announces to (the ring has one successor).
const MAX_CHILDREN: usize = 4;
/// Hop counts a repair datagram carries in its flags (bits 0..=11); bits 12..=13 carry the
/// [`Phase`] of the scatter–allgather algorithms.
const HOPS_MASK: u16 = 0x0fff;
const PHASE_SHIFT: u16 = 12;
/// How long a root waits for the picked rank's "ready" before it multicasts anyway.
const READY_WAIT_MAX: Nanos = 10_000_000;
/// Fragments one repair request can draw: a ~50-byte request must not trigger thousands of
/// datagrams at once (the asker asks again for the rest).
const MAX_REPAIR_PER_REQUEST: u32 = 256;

/// What the protocol asks of its surroundings (the runner, the simulator, a test).
pub trait Env {
    /// Send `frame` to one peer (unreliable; the protocol recovers losses).
    fn send(&mut self, to: PeerId, frame: &[u8]);
    /// Send `frame` to one peer on NIC lane `lane` ([`algo::LANE_ANY`]: any or all lanes
    /// aggregated). Fabrics with one lane ignore it.
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        let _ = lane;
        self.send(to, frame)
    }
    /// Multicast `frame` to the communicator's group (unreliable).
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// Move `job.len` bytes between host memory (`job.buf`) and `stage`, the protocol's own
    /// memory for the job (a channel). A driver that reaches host memory directly may do it at
    /// once and say how it went ([`DmaStatus::Done`]); one that hands it to a DMA engine says
    /// [`DmaStatus::Pending`] and answers later with [`Protocol::dma_done`], moving the bytes
    /// to or from [`Protocol::staging`] meanwhile. Never re-enter the protocol from here.
    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus;
    /// The broadcast posted with `token` is over.
    fn complete(&mut self, token: u64, outcome: Outcome);
}

/// Which way a host-memory job moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaDir {
    /// Host buffer to the protocol's staging: a root loads its message.
    Load,
    /// The protocol's staging to the host buffer: a receiver delivers.
    Store,
}

/// Names a host-memory job: stale once its broadcast is gone (a late answer is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DmaToken {
    /// Communicator.
    pub comm: CommHandle,
    /// Its channel.
    pub slot: u32,
    /// The broadcast.
    pub bid: u32,
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

/// What became of a job handed to [`Env::dma`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaStatus {
    /// Carried out at once: `true` if every byte moved.
    Done(bool),
    /// Answered later with [`Protocol::dma_done`].
    Pending,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommHandle(pub u32);

/// One rank's part of a broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    /// Communicator.
    pub comm: CommHandle,
    /// Root rank.
    pub root: Rank,
    /// The buffer: read at the root, written at the others.
    pub buf: Resolved,
    /// Message length (the same at every rank).
    pub len: u32,
    /// Returned in the completion.
    pub token: u64,
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Root waiting for its delay: until `at`, or until the picked rank's ready (`ready`).
    RootDelay { at: Nanos, ready: bool },
    /// Root loading its message from host memory (a DMA job in flight).
    Loading,
    /// Non-root receiving.
    Receiving,
    /// Non-root with every fragment and a good MAC, storing the message into host memory (a
    /// DMA job in flight): it serves repairs, and counts as over only once stored.
    Storing,
    /// Data complete here (delivered, or the root's message sent).
    Done,
    /// Failed here (reported to the host).
    Failed,
    /// Aborted by its root (unreadable root buffer): over, and not a NACK for the
    /// synchronization — the communicator stays usable.
    Aborted,
}

#[derive(Debug)]
struct Op {
    bid: u32,
    root: Rank,
    token: u64,
    buf: Resolved,
    geo: Geometry,
    bits: FragBitmap,
    /// Fragments whose allgather copy this rank has relayed (scatter–allgather, hierarchical):
    /// a later copy of the same fragment in that phase is a duplicate and goes no further.
    relayed: FragBitmap,
    alg: Algorithm,
    shape: Shape,
    selective: bool,
    state: State,
    /// The message MAC: computed by the root, carried by the last fragment.
    digest: Option<Mac>,
    counters: OpCounters,
    /// Hops of the copy this rank holds (0 = multicast or root).
    hops: u16,
    /// When this rank posted it.
    posted: Nanos,
    /// Last time the repair source (or root) answered or data arrived.
    heard: Nanos,
    /// Next repair request.
    nack_at: Nanos,
    /// No request before `posted + patience` (the broadcast is not overdue before).
    patience: Nanos,
    backoff: Nanos,
    fruitless: u32,
}

impl Op {
    fn over(&self) -> bool {
        matches!(self.state, State::Done | State::Failed | State::Aborted)
    }
}

/// A pre-posted receive slot: keeps one fragment of a broadcast this rank has not posted yet.
/// The buffers are allocated with the communicator and reused.
#[derive(Debug)]
struct Early {
    used: bool,
    bid: u32,
    from: PeerId,
    len: usize,
    frame: Vec<u8>,
}

#[derive(Debug, Default)]
struct Sync {
    /// Epochs synchronized; broadcast ids below `done * channels` are released.
    done: u32,
    /// Children (of 2) whose UP for epoch `done` arrived, as bits.
    heard: u8,
    acked: u64,
    nacked: u64,
    mcast: u32,
    total: u32,
    /// UP sent for epoch `done`: when to repeat it.
    up_retry: Option<Nanos>,
    /// When the first UP of epoch `done` went out (no DOWN by `+ peer_timeout`: broken).
    up_since: Option<Nanos>,
    /// Since when this rank has done its own part of epoch `done` but still misses a sync
    /// child's UP.
    ready_since: Option<Nanos>,
    up_backoff: Nanos,
    /// The DOWN of epoch `done - 1`, to repeat to a child that missed it.
    last_down: Option<SyncBody>,
}

#[derive(Debug)]
struct Comm {
    spec: CommSpec,
    /// How its frames are sealed: the CRC function and the tag and MAC keys derived from
    /// `spec.key`.
    seal: Seal,
    next_bid: u32,
    ops: Vec<Option<Op>>,
    channels: Vec<Vec<u8>>,
    early: Vec<Early>,
    /// Fragment bitmaps of the channels not in use (one per channel, sized at creation for
    /// `max_message_bytes`): a post takes one, the synchronization gives it back.
    spare_bits: Vec<FragBitmap>,
    /// The same for [`Op::relayed`].
    spare_relayed: Vec<FragBitmap>,
    ready_seen: Vec<u32>,
    sync: Sync,
    broken: bool,
    /// Closed by [`Protocol::close_comm`]: no broadcast is posted here again, and the last,
    /// partial epoch synchronizes as soon as it is over.
    closing: bool,
    /// A post has been waiting for a channel since.
    blocked_since: Option<Nanos>,
    /// Last answer from a synchronization neighbour to a probe, and when to probe next.
    sync_heard: Nanos,
    probe_at: Option<Nanos>,
    /// Adaptive root delay: EWMA of the picked ranks' arrival lag behind the root, and the
    /// multiplier (in quarters) the multicast hit rate tunes.
    lag_ewma: Nanos,
    lag_factor: u32,
    /// Consecutive synchronized epochs in which no rank received anything by multicast.
    mcast_dead_epochs: u32,
    /// From this broadcast id on, multicast has failed over to point-to-point (binomial).
    failover_from: Option<u32>,
    /// Fragments received this epoch (multicast, all): reported in SYNC_UP.
    epoch_mcast: u32,
    epoch_total: u32,
}

/// The broadcast protocol of one engine.
pub struct Protocol {
    channels: u32,
    payload: u32,
    mtu: usize,
    max_message: u32,
    slots: usize,
    root_delay: RootDelay,
    root_delay_max: Nanos,
    repair_timeout: Nanos,
    backoff_max: Nanos,
    escalate_after: u32,
    peer_timeout: Nanos,
    /// How often a rank waiting on the synchronization probes its neighbours: 64 chances per
    /// `peer_timeout` for an answer to get through a lossy link before the neighbour is declared
    /// unreachable.
    probe_every: Nanos,
    selective_bytes: u32,
    comms: Vec<Option<Comm>>,
    max_comms: usize,
    counters: ProtoCounters,
    scratch: Vec<u8>,
    early_buf: Vec<u8>,
    kids: [Rank; MAX_CHILDREN],
    crc: Crc32c,
    /// Algorithm every broadcast uses instead of the selection (`algorithm` tunable, tests,
    /// the simulator's sweeps).
    forced: Option<Algorithm>,
    /// The cost model that picks an algorithm per call and says how long one should take.
    selector: Selector,
}

impl Protocol {
    /// A protocol sized from `config`; `crc` computes CRC32C (the engine passes the hardware
    /// accelerated `crc32c` crate).
    pub fn new(config: &EngineConfig, crc: Crc32c) -> Self {
        let mtu = config.protocol.mtu as usize;
        let payload = (mtu - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - DIGEST_LEN) as u32;
        Protocol {
            channels: config.protocol.channels,
            payload,
            mtu,
            max_message: config.protocol.max_message_bytes,
            slots: config.protocol.preposted_slots as usize,
            root_delay: config.protocol.root_delay,
            root_delay_max: config.protocol.root_delay_max_us as Nanos * 1000,
            repair_timeout: config.protocol.repair_timeout_us as Nanos * 1000,
            backoff_max: config.protocol.repair_backoff_max_us as Nanos * 1000,
            escalate_after: config.protocol.escalate_after,
            peer_timeout: config.protocol.peer_timeout_ms as Nanos * 1_000_000,
            probe_every: (config.protocol.peer_timeout_ms as Nanos * 1_000_000 / 64)
                .max(config.protocol.repair_timeout_us as Nanos * 1000),
            selective_bytes: config.protocol.selective_repair_bytes,
            // Grows to `max_comms` as communicators are created: a simulated rank of one
            // communicator holds one entry, not 64.
            comms: Vec::new(),
            max_comms: config.limits.max_comms as usize,
            counters: ProtoCounters::default(),
            scratch: Vec::new(),
            early_buf: Vec::new(),
            kids: [0; MAX_CHILDREN],
            crc,
            forced: config.protocol.algorithm.forced(),
            selector: Selector::from_config(config),
        }
    }

    /// Makes every later broadcast use `alg` (`None`: choose per call). Every member of a
    /// communicator must force the same.
    pub fn force_algorithm(&mut self, alg: Option<Algorithm>) {
        self.forced = alg;
    }

    /// The algorithm a broadcast of `len` bytes on a communicator of `size` ranks placed as
    /// `layout` uses (`multicast_ok`: multicast has not failed over). The same at every rank.
    pub fn choose(&self, size: u32, len: u32, layout: &crate::comm::Layout, multicast_ok: bool) -> Algorithm {
        if let Some(a) = self.forced {
            if a != Algorithm::Multicast || multicast_ok {
                return a;
            }
        }
        self.selector.choose(size, len as u64, layout, multicast_ok)
    }

    /// Counters so far.
    pub fn counters(&self) -> ProtoCounters {
        self.counters
    }

    /// Bytes of protocol state held now: channel buffers and pre-posted slots.
    pub fn memory_bytes(&self) -> usize {
        self.comms
            .iter()
            .flatten()
            .map(|c| {
                c.channels.iter().map(Vec::len).sum::<usize>()
                    + c.early.iter().map(|e| e.frame.len()).sum::<usize>()
            })
            .sum()
    }

    /// The most [`Protocol::memory_bytes`] may reach for messages up to `largest` bytes: one
    /// channel per broadcast slot per communicator, plus the pre-posted slots.
    pub fn memory_bound(&self, largest: usize) -> usize {
        let comms = self.comms.iter().flatten().count();
        comms * (self.channels as usize * largest.max(1) + self.slots * self.mtu)
    }

    /// Adds a communicator this engine is a member of.
    pub fn create_comm(&mut self, spec: CommSpec) -> Result<CommHandle, StatusKind> {
        if spec.members.is_empty() || spec.my_rank >= spec.size() || spec.members.len() > u32::MAX as usize {
            return Err(StatusKind::BadRoot);
        }
        if self.comms.iter().flatten().any(|c| c.spec.cookie == spec.cookie) {
            return Err(StatusKind::BadDescriptor);
        }
        let slot = match self.comms.iter().position(Option::is_none) {
            Some(s) => s,
            None if self.comms.len() < self.max_comms => {
                // One more entry, not the 4 a growing Vec would reserve (384 bytes each).
                self.comms.reserve_exact(1);
                self.comms.push(None);
                self.comms.len() - 1
            }
            None => return Err(StatusKind::TooManyCommunicators),
        };
        let c = self.channels as usize;
        let max_frags = Geometry::new(self.max_message, self.payload).map_or(MAX_FRAGS, |g| g.count());
        let spare_bits = (0..c)
            .map(|_| FragBitmap::with_capacity(max_frags))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| StatusKind::BadLength)?;
        let spare_relayed = spare_bits.clone();
        self.comms[slot] = Some(Comm {
            seal: Seal { crc: self.crc, keys: CommKeys::new(&spec.key) },
            spec,
            next_bid: 0,
            ops: (0..c).map(|_| None).collect(),
            channels: (0..c).map(|_| Vec::new()).collect(),
            // Pre-posted slots grow to the frames they keep (at most `mtu` each) on first use:
            // a simulated rank of small broadcasts never pays for a full MTU per slot.
            early: (0..self.slots)
                .map(|_| Early { used: false, bid: 0, from: PeerId(0), len: 0, frame: Vec::new() })
                .collect(),
            spare_bits,
            spare_relayed,
            ready_seen: Vec::with_capacity(c),
            sync: Sync::default(),
            broken: false,
            closing: false,
            blocked_since: None,
            sync_heard: 0,
            probe_at: None,
            lag_ewma: 0,
            lag_factor: 4,
            mcast_dead_epochs: 0,
            failover_from: None,
            epoch_mcast: 0,
            epoch_total: 0,
        });
        Ok(CommHandle(slot as u32))
    }

    /// Removes a communicator; its operations still running fail with `CommunicatorBroken`.
    pub fn destroy_comm(&mut self, comm: CommHandle, env: &mut impl Env) -> bool {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::take) else { return false };
        for op in c.ops.into_iter().flatten().filter(|o| !o.over()) {
            // A root completed its host's request when its message was loaded; one still
            // loading has not.
            if op.root != c.spec.my_rank || op.state == State::Loading {
                env.complete(op.token, fail(StatusKind::CommunicatorBroken, op.counters));
            }
        }
        true
    }

    /// Every local member freed `comm`: no broadcast will be posted on it here again. Its last
    /// epoch, partial as it may be, synchronizes once its broadcasts are over here and at the
    /// sync children (every member posts the same broadcasts before freeing a communicator, and
    /// each engine closes it when its own members freed it), so the communicator becomes
    /// [`Protocol::is_quiescent`] a round trip after the last member closed it — not only when a
    /// full epoch of broadcasts was posted.
    pub fn close_comm(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        c.closing = true;
        self.maybe_sync_up(comm, now, env);
    }

    /// Broadcast ids posted so far on `comm` at this rank.
    pub fn posted(&self, comm: CommHandle) -> Option<u32> {
        self.comm(comm).map(|c| c.next_bid)
    }

    /// Nothing in progress and nothing left to synchronize: every operation over, and every
    /// posted broadcast id inside a synchronized epoch — or the communicator broken. A partial
    /// epoch never synchronizes (there is no timer-triggered synchronization), so an engine that
    /// wants to leave cleanly has its hosts fill the epoch first.
    pub fn quiescent(&self) -> bool {
        (0..self.comms.len()).all(|i| self.is_quiescent(CommHandle(i as u32)))
    }

    /// [`Protocol::quiescent`] for one communicator (`true` if unknown).
    pub fn is_quiescent(&self, comm: CommHandle) -> bool {
        self.comm(comm).is_none_or(|c| {
            c.broken
                || (c.ops.iter().flatten().all(Op::over)
                    && c.next_bid <= c.sync.done.saturating_mul(self.channels))
        })
    }

    /// The multicast group of `comm`.
    pub fn group(&self, comm: CommHandle) -> Option<GroupId> {
        self.comm(comm).map(|c| c.spec.group)
    }

    /// Whether any communicator of this engine is broken.
    pub fn any_broken(&self) -> bool {
        self.comms.iter().flatten().any(|c| c.broken)
    }

    /// Whether `comm` lost a member.
    pub fn is_broken(&self, comm: CommHandle) -> Option<bool> {
        self.comm(comm).map(|c| c.broken)
    }

    fn comm(&self, h: CommHandle) -> Option<&Comm> {
        self.comms.get(h.0 as usize)?.as_ref()
    }

    /// Posts this rank's part of the next broadcast on `post.comm`: `post.len` bytes at
    /// `post.buf` (read at the root, written elsewhere), completed through
    /// `env.complete(post.token, ..)`.
    pub fn post_bcast(&mut self, post: Post, now: Nanos, env: &mut impl Env) -> Result<(), PostError> {
        let Post { comm, root, buf, len, token } = post;
        let refuse = |s| Err(PostError::Refused(s));
        let (payload, max_message, channels) = (self.payload, self.max_message, self.channels);
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else {
            return refuse(StatusKind::UnknownCommunicator);
        };
        if c.broken {
            return refuse(StatusKind::CommunicatorBroken);
        }
        if c.closing {
            return refuse(StatusKind::UnknownCommunicator);
        }
        if root >= c.spec.size() {
            return refuse(StatusKind::BadRoot);
        }
        if len > max_message {
            return refuse(StatusKind::BadLength);
        }
        let Ok(geo) = Geometry::new(len, payload) else { return refuse(StatusKind::BadLength) };
        let bid = c.next_bid;
        let slot = (bid % channels) as usize;
        if c.ops[slot].is_some() {
            if c.blocked_since.is_none() {
                c.blocked_since = Some(now);
                c.sync_heard = now;
                c.probe_at.get_or_insert(now + self.repair_timeout);
            }
            return Err(PostError::WouldBlock);
        }
        c.blocked_since = None;
        // NOTE(unwrap-free): Geometry::new bounded the count by MAX_FRAGS, as FragBitmap needs.
        let (Some(mut bits), Some(mut relayed)) = (c.spare_bits.pop(), c.spare_relayed.pop()) else {
            return refuse(StatusKind::BadLength);
        };
        if bits.reset(geo.count()).is_err() || relayed.reset(geo.count()).is_err() {
            c.spare_bits.push(bits);
            c.spare_relayed.push(relayed);
            return refuse(StatusKind::BadLength);
        }
        let size = c.spec.size();
        let failed_over = c.failover_from.is_some_and(|b| bid >= b);
        let layout = c.spec.layout;
        let alg = self.choose(size, len, &layout, !failed_over);
        let shape = Shape { size, root, layout, count: geo.count() };
        // No repair request before the broadcast is overdue: twice what the cost model predicts
        // for it (a large scatter-allgather may leave a rank without a fragment for milliseconds
        // with nothing lost), and never sooner than the repair timeout.
        let predicted = self.selector.predict(alg, size, len as u64, &layout);
        let patience =
            self.repair_timeout.max((2.0 * predicted).min(self.peer_timeout as f64 / 4.0) as Nanos);
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else {
            return refuse(StatusKind::UnknownCommunicator);
        };
        let chan = &mut c.channels[slot];
        if chan.len() < len as usize {
            // Grows once to the largest message seen; never shrinks (no allocation later).
            chan.resize(len as usize, 0);
        }
        c.next_bid += 1;
        let next_bid = c.next_bid;
        c.ready_seen.retain(|&b| b >= next_bid);
        let me = c.spec.my_rank;
        let mut op = Op {
            bid,
            root,
            token,
            buf,
            geo,
            bits,
            relayed,
            alg,
            shape,
            selective: alg.uses_multicast() && len >= self.selective_bytes,
            state: State::Receiving,
            digest: None,
            counters: OpCounters::default(),
            hops: 0,
            posted: now,
            heard: now,
            nack_at: now + patience,
            patience,
            backoff: self.repair_timeout,
            fruitless: 0,
        };
        if me == root {
            // Fragments others forwarded for this broadcast are of no use to its root.
            for e in c.early.iter_mut().filter(|e| e.used && e.bid == bid) {
                e.used = false;
            }
            op.state = State::Loading;
            c.ops[slot] = Some(op);
            let token = DmaToken { comm, slot: slot as u32, bid };
            let job = DmaJob { token, dir: DmaDir::Load, buf, len: u64::from(len) };
            match env.dma(job, &mut c.channels[slot][..len as usize]) {
                DmaStatus::Done(ok) => self.loaded(token, ok, now, env),
                DmaStatus::Pending => {}
            }
            return Ok(());
        } else {
            let picks = matches!(self.root_delay, RootDelay::Random | RootDelay::Adaptive);
            if picks && picked_rank(c.spec.seed, bid, root, size) == me {
                let h = header(c, FrameKind::READY, bid, READY_FLAG_READY);
                let to = c.spec.members[root as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            }
            c.ops[slot] = Some(op);
            // Fragments that arrived before this post, out of the pre-posted slots.
            let mut buf = core::mem::take(&mut self.early_buf);
            while let Some(e) = self
                .comms
                .get_mut(comm.0 as usize)
                .and_then(Option::as_mut)
                .and_then(|c| c.early.iter_mut().find(|e| e.used && e.bid == bid))
            {
                e.used = false;
                let (from, len) = (e.from, e.len);
                if buf.len() < len {
                    buf.resize(len, 0); // grows once, up to the MTU
                }
                buf[..len].copy_from_slice(&e.frame[..len]);
                self.on_frame(from, &buf[..len], now, env);
            }
            self.early_buf = buf;
        }
        self.maybe_sync_up(comm, now, env);
        Ok(())
    }

    /// The protocol memory job `t` moves bytes into ([`DmaDir::Load`]) or out of
    /// ([`DmaDir::Store`]); `None` if the job is stale.
    pub fn staging(&mut self, t: DmaToken) -> Option<&mut [u8]> {
        let c = self.comms.get_mut(t.comm.0 as usize)?.as_mut()?;
        let op = c.ops.get(t.slot as usize)?.as_ref()?;
        if op.bid != t.bid || !matches!(op.state, State::Loading | State::Storing) {
            return None;
        }
        let len = op.geo.total as usize;
        c.channels.get_mut(t.slot as usize)?.get_mut(..len)
    }

    /// Job `t` is over (`ok`: every byte moved). A stale token is ignored.
    pub fn dma_done(&mut self, t: DmaToken, ok: bool, now: Nanos, env: &mut impl Env) {
        let state = self
            .comms
            .get(t.comm.0 as usize)
            .and_then(Option::as_ref)
            .and_then(|c| c.ops.get(t.slot as usize))
            .and_then(Option::as_ref)
            .filter(|op| op.bid == t.bid)
            .map(|op| op.state);
        match state {
            Some(State::Loading) => self.loaded(t, ok, now, env),
            Some(State::Storing) => {
                self.stored(t, ok, env);
                self.maybe_sync_up(t.comm, now, env);
            }
            _ => {}
        }
    }

    /// The root's message is in its channel (`ok`), or could not be read.
    fn loaded(&mut self, t: DmaToken, ok: bool, now: Nanos, env: &mut impl Env) {
        let (comm, slot, bid) = (t.comm, t.slot as usize, t.bid);
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops[slot].as_mut() else { return };
        let len = op.geo.total;
        if !ok {
            // The id is taken (every rank counts posts): abort the broadcast so the others
            // learn it on their first repair request instead of waiting for data.
            op.state = State::Aborted;
            env.complete(op.token, fail(StatusKind::OutOfBounds, op.counters));
            self.maybe_sync_up(comm, now, env);
            return;
        }
        op.digest = Some(c.seal.keys.message_mac(bid, &c.channels[slot][..len as usize]));
        op.bits.fill();
        // Yu et al.: the root's request is complete once the message is in its channel.
        env.complete(op.token, Outcome { status: StatusKind::Ok, bytes: len as u64, counters: op.counters });
        let ready =
            c.ready_seen.iter().position(|&b| b == bid).map(|i| c.ready_seen.swap_remove(i)).is_some();
        let size = c.spec.size();
        op.state = match self.root_delay {
            RootDelay::None => State::RootDelay { at: now, ready: true },
            RootDelay::Fixed(us) => State::RootDelay { at: now + us as Nanos * 1000, ready: true },
            RootDelay::Adaptive => {
                let d = (c.lag_ewma * c.lag_factor as Nanos / 4).min(self.root_delay_max);
                State::RootDelay { at: now + d, ready: true }
            }
            RootDelay::Random if size > 1 => State::RootDelay { at: now + READY_WAIT_MAX, ready },
            RootDelay::Random => State::RootDelay { at: now, ready: true },
        };
        self.advance_root(comm, slot, now, env);
        self.maybe_sync_up(comm, now, env);
    }

    /// A receiver's message is in its host buffer (`ok`), or could not be written.
    fn stored(&mut self, t: DmaToken, ok: bool, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(t.comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops[t.slot as usize].as_mut() else { return };
        if !ok {
            op.state = State::Failed;
            env.complete(op.token, fail(StatusKind::OutOfBounds, op.counters));
            return;
        }
        op.state = State::Done;
        let len = op.geo.total;
        env.complete(op.token, Outcome { status: StatusKind::Ok, bytes: len as u64, counters: op.counters });
        if op.selective {
            let (bid, root) = (op.bid, op.root);
            let n = children(Topology::Ring, c.spec.size(), root, c.spec.my_rank, &mut self.kids);
            let h = header(c, FrameKind::READY, bid, READY_FLAG_HAVE_ALL);
            for k in 0..n {
                let to = c.spec.members[self.kids[k] as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            }
        }
    }

    /// Starts the root's transmission once its delay is over.
    fn advance_root(&mut self, comm: CommHandle, slot: usize, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops[slot].as_mut() else { return };
        let State::RootDelay { at, ready } = op.state else { return };
        if !ready && now < at {
            return;
        }
        if ready && now < at {
            return;
        }
        op.state = State::Done;
        let (bid, count, alg, shape, selective) = (op.bid, op.geo.count(), op.alg, op.shape, op.selective);
        let me = c.spec.my_rank;
        if alg == Algorithm::Multicast {
            for seq in 0..count {
                let n = build_fragment(&mut self.scratch, c, slot, seq, FrameKind::DATA_MULTICAST, 0);
                self.counters.multicast += 1;
                env.multicast(&c.spec.group, &self.scratch[..n]);
            }
            if selective {
                // Selective ring repair: the successor asks for what the multicast missed.
                let n = children(Topology::Ring, c.spec.size(), me, me, &mut self.kids);
                for k in 0..n {
                    let to = c.spec.members[self.kids[k] as usize];
                    let h = header(c, FrameKind::READY, bid, READY_FLAG_HAVE_ALL);
                    send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                }
                self.maybe_sync_up(comm, now, env);
                return;
            }
        }
        let (scratch, counters) = (&mut self.scratch, &mut self.counters);
        if matches!(alg, Algorithm::Binomial | Algorithm::Linear) {
            // Child by child, largest subtree first: the textbook order, which starts the
            // deepest subtree earliest (its routing does not depend on the fragment).
            algo::forward(alg, &shape, me, 0, Phase::Scatter, true, &mut |hop: Hop| {
                for seq in 0..count {
                    send_repair(scratch, counters, env, c, slot, seq, hop, 1);
                }
            });
        } else {
            // Fragment by fragment: the pipeline starts at once on every lane and tree.
            for seq in 0..count {
                algo::forward(alg, &shape, me, seq, Phase::Scatter, true, &mut |hop: Hop| {
                    send_repair(scratch, counters, env, c, slot, seq, hop, 1)
                });
            }
        }
        self.maybe_sync_up(comm, now, env);
    }

    /// A datagram arrived from `from`. Anything malformed, foreign or stale is counted and
    /// dropped; nothing a peer sends can make this panic.
    pub fn on_frame(&mut self, from: PeerId, bytes: &[u8], now: Nanos, env: &mut impl Env) {
        let frame = match Frame::parse(bytes, self.crc) {
            Ok(f) => f,
            Err(reason) => return self.drop_frame(reason),
        };
        let h = frame.header();
        let Some(ci) =
            self.comms.iter().position(|c| c.as_ref().is_some_and(|c| c.spec.cookie == h.cookie.get()))
        else {
            return self.drop_frame(DropReason::ForeignCookie);
        };
        let comm = CommHandle(ci as u32);
        // NOTE(unwrap-free): `ci` was just found.
        let Some(c) = self.comms[ci].as_mut() else { return };
        // The cookie only names the communicator (anyone who sees its traffic knows it); the
        // keyed tag proves the frame comes from a holder of its secret.
        if !c.seal.keys.tag_ok(frame.tagged(), frame.tag()) {
            return self.drop_frame(DropReason::BadTag);
        }
        let src = match authenticate(&c.spec, h.src_rank.get(), from) {
            Ok(r) => r,
            Err(reason) => return self.drop_frame(reason),
        };
        let bid = h.bid.get();
        // Any valid frame from a neighbour this rank waits on proves that engine alive.
        if waits_on(c, src) {
            c.sync_heard = now;
        }
        match frame.kind() {
            FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR => {
                self.on_data(comm, from, bytes, &frame, now, env)
            }
            FrameKind::RETRANSMIT_REQUEST => self.on_request(comm, src, bid, &frame, env),
            FrameKind::READY => self.on_ready(comm, src, bid, h.flags.get(), now, env),
            FrameKind::SYNC_UP => self.on_sync_up(comm, src, &frame, now, env),
            FrameKind::SYNC_DOWN => self.on_sync_down(comm, src, &frame, now, env),
            _ => self.drop_frame(DropReason::UnknownKind),
        }
        // Whatever this frame ended (an operation completed, failed or was aborted), the epoch
        // may now be ready to synchronize.
        self.maybe_sync_up(comm, now, env);
    }

    fn drop_frame(&mut self, reason: DropReason) {
        self.counters.drops[reason as usize] += 1;
    }

    fn on_data(
        &mut self,
        comm: CommHandle,
        from: PeerId,
        bytes: &[u8],
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let h = frame.header();
        let bid = h.bid.get();
        let slot = match locate(c, bid, self.channels) {
            Located::Slot(s) => s,
            Located::Future => {
                // A broadcast not posted here yet: keep the fragment if a pre-posted slot is free.
                match c.early.iter_mut().find(|e| !e.used) {
                    Some(e) if bytes.len() <= self.mtu => {
                        if e.frame.len() < bytes.len() {
                            e.frame.resize(bytes.len(), 0); // once per slot, up to the MTU
                        }
                        e.frame[..bytes.len()].copy_from_slice(bytes);
                        *e = Early {
                            used: true,
                            bid,
                            from,
                            len: bytes.len(),
                            frame: core::mem::take(&mut e.frame),
                        };
                    }
                    _ => self.counters.drops[DropReason::NoSlot as usize] += 1,
                }
                return;
            }
            Located::Stale => return self.drop_frame(DropReason::BidOutOfWindow),
        };
        let flags = h.flags.get();
        let (hops, phase) = if h.kind == FrameKind::DATA_MULTICAST {
            (0, Phase::Tree)
        } else {
            (flags & HOPS_MASK, Phase::from_bits(flags >> PHASE_SHIFT))
        };
        let Some(op) = c.ops[slot].as_mut() else { return };
        let seq = h.frag_seq.get();
        if op.state != State::Receiving || op.bits.get(seq) {
            op.counters.duplicates += 1;
            if phase == Phase::Allgather
                && op.bits.get(seq)
                && op.state != State::Failed
                && op.relayed.set(seq)
            {
                // Scatter–allgather: this rank held the fragment (it passed here in the scatter,
                // came by repair, or this is the root) but the allgather still runs through it —
                // once: a second allgather copy (a duplicated datagram) is not relayed again.
                let (alg, shape, me) = (op.alg, op.shape, c.spec.my_rank);
                let (scratch, counters) = (&mut self.scratch, &mut self.counters);
                algo::forward(alg, &shape, me, seq, phase, false, &mut |hop: Hop| {
                    send_repair(scratch, counters, env, c, slot, seq, hop, hops.saturating_add(1))
                });
            }
            return;
        }
        if h.total_len.get() != op.geo.total {
            op.state = State::Failed;
            env.complete(op.token, fail(StatusKind::LengthMismatch, op.counters));
            return;
        }
        let last = op.geo.count() - 1;
        let Some((off, len)) = op.geo.range(seq) else { return self.drop_frame(DropReason::BadFragment) };
        if h.frag_count.get() != op.geo.count() || frame.payload().len() != len as usize {
            return self.drop_frame(DropReason::BadFragment);
        }
        op.heard = now;
        if !op.bits.set(seq) {
            op.counters.duplicates += 1;
            return;
        }
        c.channels[slot][off as usize..(off + len) as usize].copy_from_slice(frame.payload());
        if seq == last {
            op.digest = frame.digest();
        }
        if hops == 0 {
            op.counters.frags_multicast += 1;
            c.epoch_mcast += 1;
        } else {
            op.counters.frags_repair += 1;
            op.counters.penalty_rounds = op.counters.penalty_rounds.max(hops as u32);
        }
        c.epoch_total += 1;
        op.hops = op.hops.max(hops);
        // Progress: the repair clock restarts.
        op.fruitless = 0;
        op.backoff = self.repair_timeout;
        op.nack_at = (now + self.repair_timeout).max(op.posted + op.patience);
        if phase == Phase::Allgather {
            // Relayed below: a duplicate of this copy must not be.
            op.relayed.set(seq);
        }
        let (alg, shape, selective) = (op.alg, op.shape, op.selective);
        if !selective {
            let fwd_hops = hops.saturating_add(1);
            let me = c.spec.my_rank;
            let (scratch, counters) = (&mut self.scratch, &mut self.counters);
            algo::forward(alg, &shape, me, seq, phase, true, &mut |hop: Hop| {
                send_repair(scratch, counters, env, c, slot, seq, hop, fwd_hops)
            });
        }
        let Some(op) = c.ops[slot].as_ref() else { return };
        if op.bits.is_complete() {
            self.finish(comm, slot, now, env);
        } else if selective && hops == 0 && seq == last {
            // The multicast is over and fragments are missing: every header carries the count, so
            // this rank knows exactly what it lacks — ask the repair source now, no timer (its
            // have-all, once it completes, is the backstop).
            if let Some(src) = parent(Topology::Ring, shape.size, shape.root, c.spec.my_rank) {
                self.request(comm, slot, src, now, env);
            }
        }
    }

    /// All fragments are here: check the digest, deliver, tell the children (selective mode).
    fn finish(&mut self, comm: CommHandle, slot: usize, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops[slot].as_mut() else { return };
        let len = op.geo.total as usize;
        let data = &c.channels[slot][..len];
        if !op.digest.is_some_and(|mac| c.seal.keys.mac_ok(op.bid, data, &mac)) {
            op.state = State::Failed;
            env.complete(op.token, fail(StatusKind::DigestMismatch, op.counters));
            return;
        }
        op.state = State::Storing;
        let token = DmaToken { comm, slot: slot as u32, bid: op.bid };
        let job = DmaJob { token, dir: DmaDir::Store, buf: op.buf, len: len as u64 };
        match env.dma(job, &mut c.channels[slot][..len]) {
            DmaStatus::Done(ok) => self.stored(token, ok, env),
            DmaStatus::Pending => return,
        }
        self.maybe_sync_up(comm, now, env);
    }

    /// A rank asks for fragments it misses: send what we hold, or say we are alive.
    fn on_request(&mut self, comm: CommHandle, src: Rank, bid: u32, frame: &Frame<'_>, env: &mut impl Env) {
        // Answering changes nothing in the communicator: a shared borrow, no copy of the bitmap.
        let Some(c) = self.comms.get(comm.0 as usize).and_then(Option::as_ref) else { return };
        let to = c.spec.members[src as usize];
        let mut sent = 0;
        if let (Located::Slot(slot), Some((body, bitmap))) =
            (locate(c, bid, self.channels), frame.retransmit())
        {
            let (first, n) = (body.first_frag.get(), body.nfrags.get());
            // NOTE(unwrap-free): locate returned an occupied slot.
            let Some(op) = c.ops[slot].as_ref() else { return };
            let (held, hops, aborted) = (&op.bits, op.hops, op.state == State::Aborted);
            if aborted {
                let h = header(c, FrameKind::READY, bid, READY_FLAG_ABORTED);
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                return;
            }
            for k in 0..n {
                let seq = first.saturating_add(k);
                let missing = bitmap.get((k / 8) as usize).is_some_and(|b| b & (1 << (k % 8)) != 0);
                if missing && held.get(seq) && sent < MAX_REPAIR_PER_REQUEST {
                    // Phase::Tree: an answer is never forwarded as an allgather copy.
                    let hop = Hop { to: src, lane: LANE_ANY, phase: Phase::Tree };
                    let hops = hops.saturating_add(1);
                    send_repair(&mut self.scratch, &mut self.counters, env, c, slot, seq, hop, hops);
                    sent += 1;
                }
            }
        }
        if sent == 0 {
            // Nothing to give: say whether this rank is still part of the communicator.
            let flag = if c.broken { READY_FLAG_BROKEN } else { READY_FLAG_ALIVE };
            let h = header(c, FrameKind::READY, bid, flag);
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
        }
    }

    fn on_ready(
        &mut self,
        comm: CommHandle,
        src: Rank,
        bid: u32,
        flags: u16,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let channels = self.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        if flags == READY_FLAG_PROBE {
            // Any live engine answers, however slow its application.
            let flag = if c.broken { READY_FLAG_BROKEN } else { READY_FLAG_ALIVE };
            let h = header(c, FrameKind::READY, SYNC_PROBE_BID, flag);
            let to = c.spec.members[src as usize];
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
            return;
        }
        if bid == SYNC_PROBE_BID {
            // An answer to our synchronization probe.
            match flags {
                READY_FLAG_ALIVE if waits_on(c, src) => c.sync_heard = now,
                READY_FLAG_BROKEN => c.broken = true,
                _ => {}
            }
            return;
        }
        match (flags, locate(c, bid, self.channels)) {
            (READY_FLAG_READY, Located::Slot(slot)) => {
                let adaptive = self.root_delay == RootDelay::Adaptive;
                if let Some(op) = c.ops[slot].as_mut() {
                    if adaptive {
                        // A lag sample: how far the picked rank arrived behind the root.
                        let lag = now.saturating_sub(op.posted);
                        c.lag_ewma = (c.lag_ewma * 3 + lag) / 4;
                    } else if let State::RootDelay { .. } = op.state {
                        // Randomized synchronization: the picked rank is there, go now.
                        op.state = State::RootDelay { at: now, ready: true };
                    } else if op.state == State::Loading && c.ready_seen.len() < channels as usize {
                        // Here before the message is: the root's delay will find it.
                        c.ready_seen.push(bid);
                    }
                }
                self.advance_root(comm, slot, now, env);
            }
            (READY_FLAG_READY, Located::Future) => {
                if self.root_delay == RootDelay::Adaptive {
                    c.lag_ewma = c.lag_ewma * 3 / 4; // arrived before the root: lag 0
                } else if c.ready_seen.len() < channels as usize {
                    c.ready_seen.push(bid);
                }
            }
            (READY_FLAG_HAVE_ALL, Located::Slot(slot))
                if c.ops[slot].as_ref().is_some_and(|op| op.state == State::Receiving) =>
            {
                self.request(comm, slot, src, now, env);
            }
            (READY_FLAG_ALIVE, Located::Slot(slot)) => {
                if let Some(op) = c.ops[slot].as_mut() {
                    op.heard = now;
                }
            }
            (READY_FLAG_BROKEN, Located::Slot(slot)) => {
                // The rank we wait on left the communicator: so do we (only if we still needed it).
                if let Some(op) = c.ops[slot].as_mut().filter(|op| op.state == State::Receiving) {
                    c.broken = true;
                    op.state = State::Failed;
                    env.complete(op.token, fail(StatusKind::CommunicatorBroken, op.counters));
                }
            }
            (READY_FLAG_ABORTED, Located::Slot(slot)) => {
                if let Some(op) = c.ops[slot].as_mut().filter(|op| op.state == State::Receiving) {
                    op.state = State::Aborted;
                    env.complete(op.token, fail(StatusKind::RootFailed, op.counters));
                }
            }
            _ => {}
        }
    }

    /// Sends a repair request for `slot`'s missing fragments to rank `to`.
    fn request(&mut self, comm: CommHandle, slot: usize, to: Rank, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(op) = c.ops[slot].as_mut() else { return };
        let Some(first) = op.bits.missing().next() else { return };
        // As many fragments as one datagram's bitmap can name; the next request continues.
        let fit = ((self.mtu - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - 8) * 8) as u32;
        let n = (op.geo.count() - first).min(MAX_RETRANSMIT_FRAGS).min(fit);
        let mut bitmap = [0u8; (MAX_RETRANSMIT_FRAGS / 8) as usize];
        let nbytes = n.div_ceil(8) as usize;
        op.bits.write_missing(first, n, &mut bitmap[..nbytes]);
        op.counters.retransmits += 1;
        // Whatever triggered it (timer, have-all), the next request waits a full back-off: the
        // answer to this one is on its way.
        op.nack_at = now + op.backoff;
        let bid = op.bid;
        let body = RetransmitBody { first_frag: U32::new(first), nfrags: U32::new(n) };
        let h = header(c, FrameKind::RETRANSMIT_REQUEST, bid, 0);
        let peer = c.spec.members[to as usize];
        send(
            &mut self.scratch,
            &c.seal,
            &mut self.counters,
            env,
            peer,
            &h,
            &[body.as_bytes(), &bitmap[..nbytes]],
        );
    }

    /// When the next call to [`Protocol::on_timeout`] is due.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let mut next: Option<Nanos> = None;
        let mut at = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        for c in self.comms.iter().flatten() {
            for op in c.ops.iter().flatten() {
                match op.state {
                    State::RootDelay { at: t, .. } => at(t),
                    State::Receiving => {
                        at(op.nack_at);
                        at(op.heard + self.peer_timeout);
                    }
                    _ => {}
                }
            }
            if c.broken {
                continue; // a broken communicator synchronizes nothing more
            }
            if let Some(t) = c.sync.up_retry {
                at(t);
            }
            if let Some(t) = c.probe_at {
                at(t);
            }
            if let Some(since) = sync_wait_since(c) {
                at(since.max(c.sync_heard) + self.peer_timeout);
            }
        }
        next
    }

    /// Timers: root delays, repair requests, dead peers, synchronization retries.
    pub fn on_timeout(&mut self, now: Nanos, env: &mut impl Env) {
        for ci in 0..self.comms.len() {
            let comm = CommHandle(ci as u32);
            for slot in 0..self.channels as usize {
                let Some(c) = self.comms[ci].as_mut() else { break };
                let Some(op) = c.ops[slot].as_mut() else { continue };
                match op.state {
                    State::RootDelay { .. } => self.advance_root(comm, slot, now, env),
                    State::Receiving if now >= op.heard + self.peer_timeout => {
                        op.state = State::Failed;
                        c.broken = true;
                        env.complete(op.token, fail(StatusKind::PeerUnreachable, op.counters));
                    }
                    State::Receiving if now >= op.nack_at => {
                        // Ask the repair source; after `escalate_after` fruitless requests, the
                        // root (fail-over to point-to-point repair from the source of the data).
                        let first = op.bits.missing().next().unwrap_or(0);
                        let src = algo::source(op.alg, &op.shape, c.spec.my_rank, first).unwrap_or(op.root);
                        let to = if op.fruitless >= self.escalate_after { op.root } else { src };
                        op.fruitless += 1;
                        op.backoff = (op.backoff * 2).min(self.backoff_max);
                        self.request(comm, slot, to, now, env);
                    }
                    _ => {}
                }
            }
            let Some(c) = self.comms[ci].as_mut() else { continue };
            // Waiting on the synchronization (a blocked post, or an UP without its DOWN): probe
            // the neighbours waited on; only engines silent for `peer_timeout` break the
            // communicator — a slow application never does.
            if let Some(since) = sync_wait_since(c) {
                if now >= since.max(c.sync_heard) + self.peer_timeout {
                    c.broken = true;
                    c.blocked_since = None;
                    c.sync.up_retry = None;
                    c.sync.up_since = None;
                    c.probe_at = None;
                } else if c.probe_at.is_some_and(|t| now >= t) {
                    let me = c.spec.my_rank;
                    let h = header(c, FrameKind::READY, SYNC_PROBE_BID, READY_FLAG_PROBE);
                    // At most two children and a parent: no allocation on this timer path.
                    let waited = sync_children(c.spec.size(), me)
                        .enumerate()
                        .filter(|(i, _)| c.sync.heard & (1 << i) == 0)
                        .map(|(_, k)| k)
                        .chain(sync_parent(me).filter(|_| c.sync.up_since.is_some()));
                    for k in waited {
                        let to = c.spec.members[k as usize];
                        send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[]);
                    }
                    c.probe_at = Some(now + self.probe_every);
                }
            } else {
                c.probe_at = None;
            }
            // An operation may have ended in this pass (delay over, failure): the epoch may be
            // ready to synchronize.
            self.maybe_sync_up(comm, now, env);
            let Some(c) = self.comms[ci].as_mut() else { continue };
            if c.broken {
                c.sync.up_retry = None;
                c.probe_at = None;
                continue;
            }
            if c.sync.up_retry.is_some_and(|t| now >= t) {
                c.sync.up_retry = None;
                c.sync.up_backoff = (c.sync.up_backoff * 2).min(self.backoff_max);
                self.send_up(comm, now, env);
            }
        }
    }

    /// Sends SYNC_UP for the current epoch if this rank and its sync children are done with it
    /// (the manager sends SYNC_DOWN instead).
    fn maybe_sync_up(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        let channels = self.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        if c.sync.up_retry.is_some() || c.sync.up_since.is_some() || c.broken {
            return; // already sent (the timer repeats it), or given up
        }
        let epoch = c.sync.done;
        let end = (epoch + 1) * channels;
        // A closed communicator's last epoch ends at its last broadcast.
        let last = c.closing && c.next_bid > epoch * channels;
        if c.next_bid < end && !last {
            return; // not every broadcast of the epoch posted here yet
        }
        if c.ops.iter().flatten().any(|op| op.bid < end && !op.over()) {
            return;
        }
        let me = c.spec.my_rank;
        let want = sync_children(c.spec.size(), me).enumerate().fold(0u8, |m, (i, _)| m | 1 << i);
        if c.sync.heard & want != want {
            // Our part is done; a child's is not: wait for it, probing it (see on_timeout).
            if c.sync.ready_since.is_none() {
                c.sync.ready_since = Some(now);
                c.sync_heard = now;
                c.probe_at.get_or_insert(now + self.probe_every);
            }
            return;
        }
        c.sync.up_backoff = self.repair_timeout;
        self.send_up(comm, now, env);
    }

    fn send_up(&mut self, comm: CommHandle, now: Nanos, env: &mut impl Env) {
        let channels = self.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let epoch = c.sync.done;
        let base = epoch * channels;
        let (mut acked, mut nacked) = (c.sync.acked, c.sync.nacked);
        for op in c.ops.iter().flatten().filter(|op| op.bid >= base && op.bid < base + channels) {
            match op.state {
                State::Done | State::Aborted => acked |= 1 << (op.bid - base),
                _ => nacked |= 1 << (op.bid - base),
            }
        }
        let mine: u64 = if channels == 64 { u64::MAX } else { (1u64 << channels) - 1 };
        // A leaf's own view: everything it completed; combined with the children's ANDs.
        let acked = if c.sync.heard == 0 { acked } else { acked & (c.sync.acked | !mine) & mine };
        let body = SyncBody {
            epoch: U32::new(epoch),
            base_bid: U32::new(base),
            acked: U64::new(acked & mine),
            nacked: U64::new(nacked),
            mcast_frags: U32::new(c.sync.mcast.saturating_add(c.epoch_mcast)),
            total_frags: U32::new(c.sync.total.saturating_add(c.epoch_total)),
        };
        match sync_parent(c.spec.my_rank) {
            Some(p) => {
                let h = header(c, FrameKind::SYNC_UP, base, 0);
                let to = c.spec.members[p as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[body.as_bytes()]);
                c.sync.up_retry = Some(now + c.sync.up_backoff.max(self.repair_timeout));
                if c.sync.up_since.is_none() {
                    c.sync.up_since = Some(now);
                    c.sync_heard = now;
                    c.probe_at.get_or_insert(now + self.probe_every);
                }
            }
            None => {
                // The manager: the combined result goes down the tree.
                self.apply_down(comm, body, now, env);
            }
        }
    }

    fn on_sync_up(&mut self, comm: CommHandle, src: Rank, frame: &Frame<'_>, now: Nanos, env: &mut impl Env) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(body) = frame.sync() else { return };
        let me = c.spec.my_rank;
        let Some(idx) = sync_children(c.spec.size(), me).position(|k| k == src) else {
            return self.drop_frame(DropReason::BadRank);
        };
        let epoch = body.epoch.get();
        if epoch.checked_add(1) == Some(c.sync.done) {
            // The child missed our DOWN: repeat it.
            if let Some(down) = c.sync.last_down {
                let h = header(c, FrameKind::SYNC_DOWN, down.base_bid.get(), 0);
                let to = c.spec.members[src as usize];
                send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[down.as_bytes()]);
            }
            return;
        }
        if epoch != c.sync.done || c.sync.heard & (1 << idx) != 0 {
            return;
        }
        let first = c.sync.heard == 0;
        c.sync.heard |= 1 << idx;
        c.sync.acked = if first { body.acked.get() } else { c.sync.acked & body.acked.get() };
        c.sync.nacked |= body.nacked.get();
        c.sync.mcast = c.sync.mcast.saturating_add(body.mcast_frags.get());
        c.sync.total = c.sync.total.saturating_add(body.total_frags.get());
        self.maybe_sync_up(comm, now, env);
    }

    fn on_sync_down(
        &mut self,
        comm: CommHandle,
        src: Rank,
        frame: &Frame<'_>,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let Some(body) = frame.sync() else { return };
        if sync_parent(c.spec.my_rank) != Some(src) {
            return self.drop_frame(DropReason::BadRank);
        }
        if body.epoch.get() != c.sync.done {
            return; // an old DOWN repeated
        }
        if body.base_bid.get() != c.sync.done.wrapping_mul(self.channels) {
            return self.drop_frame(DropReason::BidOutOfWindow);
        }
        self.apply_down(comm, *body, now, env);
    }

    /// Epoch over everywhere: free its channels, learn the hit rate, pass the result down.
    fn apply_down(&mut self, comm: CommHandle, body: SyncBody, now: Nanos, env: &mut impl Env) {
        let channels = self.channels;
        let Some(c) = self.comms.get_mut(comm.0 as usize).and_then(Option::as_mut) else { return };
        let base = body.base_bid.get();
        for slot in c.ops.iter_mut() {
            if slot.as_ref().is_some_and(|op| op.bid >= base && op.bid < base + channels) {
                if let Some(op) = slot.take() {
                    c.spare_bits.push(op.bits);
                    c.spare_relayed.push(op.relayed);
                }
            }
        }
        if body.nacked.get() != 0 {
            c.broken = true;
        }
        let (m, t) = (body.mcast_frags.get() as u64, body.total_frags.get() as u64);
        // Fail-over (Yu et al.): two synchronized epochs in which nobody received a single
        // fragment by multicast — the multicast path is broken. Every rank applies the same
        // DOWN, and posting any broadcast id from `base + channels` on reuses a channel only
        // this DOWN frees, so every rank switches to the binomial point-to-point broadcast at
        // the same broadcast.
        if t > 0 && m == 0 {
            c.mcast_dead_epochs += 1;
            if c.mcast_dead_epochs >= 2 && c.failover_from.is_none() {
                c.failover_from = Some(base + channels);
            }
        } else if m > 0 {
            c.mcast_dead_epochs = 0;
        }
        // Adaptive root delay: the root waits the picked ranks' typical arrival lag (EWMA, per
        // broadcast) times a factor the multicast hit rate the synchronization measured tunes —
        // additive increase below 50 % hits (wait for more of the late ones), halving from 90 %
        // (a miss costs one penalty round, a delay costs every broadcast).
        if t > 0 {
            if m * 2 < t {
                c.lag_factor = (c.lag_factor + 1).min(8);
            } else if m * 10 >= t * 9 {
                c.lag_factor /= 2;
            }
        }
        c.sync = Sync { done: c.sync.done + 1, last_down: Some(body), ..Sync::default() };
        c.epoch_mcast = 0;
        c.epoch_total = 0;
        self.counters.syncs += 1;
        let me = c.spec.my_rank;
        let h = header(c, FrameKind::SYNC_DOWN, base, 0);
        for k in sync_children(c.spec.size(), me) {
            let to = c.spec.members[k as usize];
            send(&mut self.scratch, &c.seal, &mut self.counters, env, to, &h, &[body.as_bytes()]);
        }
        self.maybe_sync_up(comm, now, env);
    }

    /// One line per communicator and live operation, for replaying a failing seed.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.comms.iter().enumerate() {
            let Some(c) = c else { continue };
            out += &format!(
                "comm {i} cookie {:#x} rank {}/{} next_bid {} sync.done {} heard {:#b} up_since {:?} ready {:?} broken {} blocked {:?}\n",
                c.spec.cookie,
                c.spec.my_rank,
                c.spec.size(),
                c.next_bid,
                c.sync.done,
                c.sync.heard,
                c.sync.up_since,
                c.sync.ready_since,
                c.broken,
                c.blocked_since
            );
            for op in c.ops.iter().flatten() {
                out += &format!(
                    "  bid {} root {} {:?} {:?} held {}/{} alg {} sel {} nack_at {} heard {}\n",
                    op.bid,
                    op.root,
                    op.state,
                    op.counters,
                    op.bits.held(),
                    op.bits.count(),
                    op.alg,
                    op.selective,
                    op.nack_at,
                    op.heard
                );
            }
        }
        out
    }

    /// The broadcast id from which `comm` uses point-to-point instead of multicast, if it failed
    /// over.
    pub fn failed_over_from(&self, comm: CommHandle) -> Option<u32> {
        self.comm(comm).and_then(|c| c.failover_from)
    }

    /// The delay the adaptive root delay would choose now on `comm`, in nanoseconds.
    pub fn adaptive_delay(&self, comm: CommHandle) -> Option<Nanos> {
        self.comm(comm).map(|c| (c.lag_ewma * c.lag_factor as Nanos / 4).min(self.root_delay_max))
    }
}

/// Since when this rank waits on the synchronization — a post blocked on a channel, its part of
/// the epoch done but a child's UP missing, or an UP without its DOWN — if it does. A broken
/// communicator waits for nothing.
fn sync_wait_since(c: &Comm) -> Option<Nanos> {
    if c.broken {
        return None;
    }
    [c.blocked_since, c.sync.ready_since, c.sync.up_since].into_iter().flatten().min()
}

/// Whether this rank waits on `src` for the synchronization: its parent while an UP is
/// unanswered, a child whose UP is missing while this rank's own part is done.
fn waits_on(c: &Comm, src: Rank) -> bool {
    let me = c.spec.my_rank;
    if c.sync.up_since.is_some() && sync_parent(me) == Some(src) {
        return true;
    }
    (c.sync.ready_since.is_some() || c.blocked_since.is_some())
        && sync_children(c.spec.size(), me).enumerate().any(|(i, k)| k == src && c.sync.heard & (1 << i) == 0)
}

enum Located {
    Slot(usize),
    Future,
    Stale,
}

/// Where broadcast `bid` stands for this rank: a live slot, not posted yet (within the window),
/// or outside the window.
fn locate(c: &Comm, bid: u32, channels: u32) -> Located {
    let floor = c.sync.done * channels;
    if bid < floor {
        return Located::Stale;
    }
    if bid >= c.next_bid {
        return if bid < c.next_bid + channels { Located::Future } else { Located::Stale };
    }
    let slot = (bid % channels) as usize;
    match &c.ops[slot] {
        Some(op) if op.bid == bid => Located::Slot(slot),
        _ => Located::Stale,
    }
}

fn fail(status: StatusKind, counters: OpCounters) -> Outcome {
    Outcome { status, bytes: 0, counters }
}

/// The rank whose "ready" the root waits for in broadcast `bid` (randomized single-process
/// synchronization): drawn from the communicator's seed, never the root.
pub fn picked_rank(seed: u64, bid: u32, root: Rank, size: u32) -> Rank {
    // splitmix64 of (seed, bid): every member computes the same pick without communication.
    let mut z = seed ^ (bid as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let k = (z % (size.max(2) as u64 - 1)) as u32 + 1;
    (root + k) % size.max(1)
}

fn header(c: &Comm, kind: FrameKind, bid: u32, flags: u16) -> WireHeader {
    WireHeader {
        version: WIRE_VERSION,
        kind,
        flags: U16::new(flags),
        src_rank: U32::new(c.spec.my_rank),
        cookie: U64::new(c.spec.cookie),
        bid: U32::new(bid),
        frag_seq: U32::new(0),
        frag_count: U32::new(0),
        total_len: U32::new(0),
    }
}

/// Builds fragment `seq` of the broadcast in `slot` into `out`; returns the frame length.
fn build_fragment(out: &mut Vec<u8>, c: &Comm, slot: usize, seq: u32, kind: FrameKind, hops: u16) -> usize {
    let Some(op) = c.ops[slot].as_ref() else { return 0 };
    let Some((off, len)) = op.geo.range(seq) else { return 0 };
    let mut h = header(c, kind, op.bid, hops);
    h.frag_seq = U32::new(seq);
    h.frag_count = U32::new(op.geo.count());
    h.total_len = U32::new(op.geo.total);
    let data = &c.channels[slot][off as usize..(off + len) as usize];
    let digest = op.digest.unwrap_or([0; DIGEST_LEN]);
    let tail: &[u8] = if seq + 1 == op.geo.count() { &digest } else { &[] };
    grow(out, WIRE_HEADER_LEN + data.len() + tail.len() + WIRE_TRAILER_LEN);
    c.seal.emit(out, &h, &[data, tail]).unwrap_or(0)
}

/// The send buffer grows to the largest datagram sent (at most the MTU), once: an engine that
/// only ever sends small frames — a simulated rank among a million — never holds an MTU.
fn grow(out: &mut Vec<u8>, need: usize) {
    if out.len() < need {
        out.resize(need, 0);
    }
}

/// Sends fragment `seq` of the broadcast in `slot` along `hop` as a point-to-point datagram,
/// `hops` hops from the multicast (or the root), and counts it as repair traffic.
#[allow(clippy::too_many_arguments)]
fn send_repair(
    scratch: &mut Vec<u8>,
    counters: &mut ProtoCounters,
    env: &mut impl Env,
    c: &Comm,
    slot: usize,
    seq: u32,
    hop: Hop,
    hops: u16,
) {
    let flags = hops.min(HOPS_MASK) | (hop.phase as u16) << PHASE_SHIFT;
    let len = build_fragment(scratch, c, slot, seq, FrameKind::DATA_REPAIR, flags);
    if len > 0 {
        counters.sent += 1;
        counters.repair_frames += 1;
        counters.repair_bytes += len as u64;
        let Some(&to) = c.spec.members.get(hop.to as usize) else { return };
        env.send_on(to, &scratch[..len], hop.lane);
    }
}

/// A communicator's frame sealing: the CRC32C function and its keys.
#[derive(Debug)]
struct Seal {
    crc: Crc32c,
    keys: CommKeys,
}

impl Seal {
    /// Writes `h` + `body` + tag + CRC into `out`; returns the frame length.
    fn emit(
        &self,
        out: &mut [u8],
        h: &WireHeader,
        body: &[&[u8]],
    ) -> Result<usize, ringcast_abi::frame::BufferTooSmall> {
        emit(out, h, body, |span| self.keys.tag(span), self.crc)
    }
}

/// Emits `h` + `body` sealed with the communicator's `seal` and sends it to `to`.
fn send(
    scratch: &mut Vec<u8>,
    seal: &Seal,
    counters: &mut ProtoCounters,
    env: &mut impl Env,
    to: PeerId,
    h: &WireHeader,
    body: &[&[u8]],
) {
    grow(scratch, WIRE_HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>() + WIRE_TRAILER_LEN);
    if let Ok(n) = seal.emit(scratch, h, body) {
        counters.sent += 1;
        env.send(to, &scratch[..n]);
    }
}
