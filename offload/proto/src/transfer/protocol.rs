//! The reliable broadcast protocol: one state machine per engine, sans-IO.
//!
//! Inputs (each with `now` and an [`Env`] to act through): [`Protocol::create_comm`],
//! [`Protocol::post_bcast`], [`Protocol::on_frame`], [`Protocol::on_timeout`]. Outputs go through
//! the `Env`: frames to send or multicast, DMA jobs on host memory (each answered later, after
//! the handler that handed it over, through [`Protocol::dma_done`]), completions. The caller asks [`Protocol::next_timeout`] when
//! to call `on_timeout` next. No clock, socket or thread. This file holds the entry points and
//! the communicators' lifecycle; the parts live beside it (`state.rs`, `repair.rs`, `sync.rs`,
//! `timers.rs`, `seal.rs`) and the broadcast's data path in `collective/bcast.rs`.
//!
//! **The broadcast** (Hoefler et al. made reliable and buffer-safe with Yu et al.):
//! * every rank keeps each broadcast's bytes in one of its communicator's `channels` (engine
//!   memory), so it can serve repairs after its host has the data back; a receiver stores it
//!   into the host buffer in parts as the message MAC covers them and completes once the
//!   message is verified and stored; the root completes its host's request as soon as the
//!   message is in its channel;
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
//!   message, checked before delivery (`DigestMismatch` instead of wrong bytes) — with
//!   `protocol.auth = tag` a keyed MAC of the call alone, no payload byte hashed (the wire's
//!   writers are the job's own user: `shm`);
//! * channels are freed by the delayed synchronization of Yu et al.: broadcast ids are grouped in
//!   epochs of `channels`; a rank that completed every broadcast of an epoch and heard from its
//!   sync-tree children sends `SYNC_UP` (combined ACK/NACK) to its parent; the manager (rank 0)
//!   answers down the tree with `SYNC_DOWN`, which frees the epoch's channels everywhere. A post
//!   that finds its channel still held waits (`PostError::WouldBlock`) — the only time a rank
//!   waits for the synchronization, so its cost is amortised over `channels` broadcasts.
use crate::comm::auth::CommKeys;
use crate::comm::{authenticate, CommShared, CommSpec, GroupId, PeerId, Rank};
use crate::config::EngineConfig;
use crate::schedule::bcast::Algorithm;
use crate::timer::{TimerKey, TimerTable};
use crate::transfer::barrier;
use crate::transfer::counts::LedgerSlot;
pub use crate::transfer::env::*;
pub use crate::transfer::host_driver::HostDriver;
use crate::transfer::state::{fail, locate, waits_on, Comm, Located, Op, Seal, Spec, State, Sync};
pub use crate::transfer::sync::{time_wait, TIME_WAIT_REPAIRS};
use crate::transfer::tunables::Tunables;
use crate::transfer::when::When;
use crate::Nanos;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use ringcast_abi::frame::{Crc32c, DropReason, Frame};
use ringcast_abi::wire::{FrameKind, READY_FLAG_READY, SYNC_PROBE_BID};
use ringcast_abi::StatusKind;

/// Largest ring fan-out the selective repair announces to (the ring has one successor).
pub(crate) const MAX_CHILDREN: usize = 4;

/// The broadcast protocol of one engine.
pub struct Protocol {
    /// The configuration it was built with, immutable and shared by its
    /// [`Protocol::sibling`]s (`transfer/tunables.rs`): one copy for a simulator's million
    /// ranks, one pointer each.
    pub(crate) cfg: Arc<Tunables>,
    /// Its communicators (the first inline: a simulated rank's one allocates no table).
    pub(crate) comms: smallvec::SmallVec<[Option<Comm>; 1]>,
    /// The next communicator's [`Comm::generation`].
    pub(crate) next_generation: u32,
    pub(crate) counters: crate::transfer::counts::Counts,
    pub(crate) scratch: Vec<u8>,
    pub(crate) early_buf: crate::transfer::boxed_vec::BoxedVec<u8>,
    /// A root's first hops of a tree broadcast (grows once to the widest fan-out).
    pub(crate) hops: crate::transfer::boxed_vec::BoxedVec<crate::schedule::bcast::Hop>,
    /// Algorithm every broadcast uses instead of the selection (`algorithm` tunable, tests,
    /// the simulator's sweeps).
    pub(crate) forced: Option<Algorithm>,
    /// The engine's one timer table (`timer.rs`): each communicator's earliest deadline
    /// ([`Protocol::next_timeout`] without a scan), and an engine's node's own keys.
    pub(crate) timers: TimerTable,
    /// The communicators due in one [`Protocol::on_timeout`] (kept to reuse its memory; inline
    /// up to two, a simulated rank's one).
    pub(crate) due: smallvec::SmallVec<[u32; 2]>,
    /// `CALL_SHAPE` frames for the node ([`Protocol::take_call_shapes`]).
    pub(crate) shapes_in: crate::transfer::boxed_vec::BoxedVec<crate::transfer::call_shape::ShapeIn>,
}

impl Protocol {
    /// The channel bytes `r` names, while its broadcast still holds that channel
    /// ([`ChannelRange`]): `None` once the communicator is gone or the slot holds another
    /// broadcast.
    pub(crate) fn channel_range(&self, r: ChannelRange) -> Option<&[u8]> {
        let c = self.comms.get(r.comm.0 as usize)?.as_ref()?;
        let op = c.ops.get(r.slot as usize)?.as_ref()?;
        if c.generation != r.generation || op.bid != r.bid {
            return None;
        }
        let off = r.off as usize;
        c.channels.get(r.slot as usize)?.get(off..off.checked_add(r.len as usize)?)
    }

    /// A protocol sized from `config`; `crc` computes CRC32C (the engine passes the hardware
    /// accelerated `crc32c` crate).
    pub fn new(config: &EngineConfig, crc: Crc32c) -> Self {
        Protocol::with_tunables(
            Arc::new(Tunables::new(config, crc)),
            config.protocol.algorithm.forced(),
            true,
        )
    }

    fn with_tunables(cfg: Arc<Tunables>, forced: Option<Algorithm>, ledger: bool) -> Self {
        Protocol {
            cfg,
            // Grows to `max_comms` as communicators are created: a simulated rank of one
            // communicator holds one entry, not 64.
            comms: smallvec::SmallVec::new(),
            next_generation: 0,
            counters: crate::transfer::counts::Counts::with_ledger(ledger),
            scratch: Vec::new(),
            early_buf: Default::default(),
            hops: Default::default(),
            forced,
            timers: TimerTable::default(),
            due: smallvec::SmallVec::new(),
            shapes_in: Default::default(),
        }
    }

    /// The authentication setting its communicators run under (`protocol.auth`).
    pub fn auth(&self) -> crate::config::Auth {
        self.cfg.auth
    }

    /// The sum over the communicators of their next broadcast id and generation: moves with
    /// every post (and barrier, and communicator created or freed). What
    /// `Engine::keep_epoch` reports; computed, not kept (no state per simulated rank).
    pub(crate) fn post_epoch(&self) -> u64 {
        self.comms.iter().flatten().fold(0u64, |e, c| {
            e.wrapping_add(u64::from(c.next_bid)).wrapping_add(u64::from(c.generation) << 32)
        })
    }

    /// A protocol with no communicator, configured as this one is now (its forced algorithm
    /// included), sharing its immutable parts (the cost model): what a simulator of many ranks
    /// of one configuration builds, each rank then holding only its own state.
    pub fn sibling(&self) -> Self {
        Protocol::with_tunables(Arc::clone(&self.cfg), self.forced, self.counters.ledger.counts())
    }

    /// Counts no per-byte ledger from now on (its counters' `ledger` reads zeros), nor do its
    /// [`Protocol::sibling`]s: a simulator's ranks, whose simulated fabric copies nothing and
    /// which report no ledger, each hold a word for it, not 72 bytes (`transfer/counts.rs`).
    pub fn count_no_ledger(&mut self) {
        self.counters.ledger = LedgerSlot::none();
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
        self.cfg.selector.choose(size, len as u64, layout, multicast_ok)
    }

    /// Counters so far.
    pub fn counters(&self) -> ProtoCounters {
        self.counters.snapshot()
    }

    /// Bytes of protocol state held now: channel buffers, their summed loads' CRCs
    /// (`transfer::summed`) and pre-posted slots.
    pub fn memory_bytes(&self) -> usize {
        self.comms
            .iter()
            .flatten()
            .map(|c| {
                c.channels.iter().map(|ch| ch.len()).sum::<usize>()
                    + c.sums.iter().map(|s| s.len() * core::mem::size_of::<u32>()).sum::<usize>()
                    + c.early.iter().map(|e| e.frame.len()).sum::<usize>()
            })
            .sum()
    }

    /// The most [`Protocol::memory_bytes`] may reach for messages up to `largest` bytes: one
    /// channel per broadcast slot per communicator (with a CRC per fragment of a summed load),
    /// plus the pre-posted slots.
    pub fn memory_bound(&self, largest: usize) -> usize {
        let comms = self.comms.iter().flatten().count();
        let sums = largest.div_ceil(self.cfg.payload.max(1) as usize).max(1) * core::mem::size_of::<u32>();
        comms * (self.cfg.channels as usize * (largest.max(1) + sums) + self.cfg.slots * self.cfg.mtu)
    }

    /// Adds a communicator this engine is a member of.
    pub fn create_comm(&mut self, spec: CommSpec) -> Result<CommHandle, StatusKind> {
        let keys = Arc::new(CommKeys::new(&spec.key));
        self.create_comm_sharing(spec, &keys)
    }

    /// [`Protocol::create_comm`] with the keys of `spec.key` derived once elsewhere and shared
    /// (the simulator's million ranks of one communicator hold one copy, and derive it once);
    /// keys of another secret are not taken — this communicator's are derived here.
    pub fn create_comm_sharing(
        &mut self,
        spec: CommSpec,
        keys: &Arc<CommKeys>,
    ) -> Result<CommHandle, StatusKind> {
        let (shared, my_rank) = spec.split();
        self.create_comm_shared(&Arc::new(shared), my_rank, keys)
    }

    /// [`Protocol::create_comm_sharing`] with what every member knows alike shared too: the
    /// simulator's ranks of one communicator hold one [`CommShared`], each only its rank.
    pub fn create_comm_shared(
        &mut self,
        shared: &Arc<CommShared>,
        my_rank: Rank,
        keys: &Arc<CommKeys>,
    ) -> Result<CommHandle, StatusKind> {
        let spec = Spec { shared: Arc::clone(shared), my_rank };
        if spec.members.is_empty() || spec.my_rank >= spec.size() || spec.members.len() > u32::MAX as usize {
            return Err(StatusKind::BadRoot);
        }
        if self.comms.iter().flatten().any(|c| c.spec.cookie == spec.cookie) {
            return Err(StatusKind::BadDescriptor);
        }
        let slot = match self.comms.iter().position(Option::is_none) {
            Some(s) => s,
            None if self.comms.len() < self.cfg.max_comms => {
                // One more entry, not the 4 a growing Vec would reserve (384 bytes each).
                self.comms.reserve_exact(1);
                self.comms.push(None);
                // Room for every communicator to fall due at once: `on_timeout` never allocates.
                self.due.reserve_exact(self.comms.len().saturating_sub(self.due.len()));
                self.comms.len() - 1
            }
            None => return Err(StatusKind::TooManyCommunicators),
        };
        self.next_generation = self.next_generation.wrapping_add(1);
        self.comms[slot] = Some(Comm {
            generation: self.next_generation,
            handle: slot as u32,
            seal: Seal {
                crc: self.cfg.crc,
                keys: if keys.derived_from(&spec.key, self.cfg.auth) {
                    Arc::clone(keys)
                } else {
                    Arc::new(CommKeys::with_auth(&spec.key, self.cfg.auth))
                },
                combiner: Default::default(),
            },
            spec,
            next_bid: 0,
            // Grown as channels are first used (`state::open_slot`).
            ops: Default::default(),
            channels: Default::default(),
            sums: Default::default(),
            // The pre-posted slots are made when a fragment first needs one, and each grows to
            // the frames it keeps (at most `mtu`): a simulated rank that posts before its data
            // comes never holds them, one of small broadcasts never a full MTU per slot.
            early: Default::default(),
            spare_bits: Default::default(),
            spare_macs: Default::default(),
            ready_seen: Default::default(),
            sync: Sync::default(),
            broken: false,
            closing: false,
            down_after_wait: false,
            blocked_since: When::NONE,
            barriers: Default::default(),
            sync_heard: 0,
            probe_at: When::NONE,
            lag_ewma: 0,
            lag_factor: 4,
            failover_from: None,
            epoch_mcast: 0,
            epoch_total: 0,
        });
        Ok(CommHandle(slot as u32))
    }

    /// Removes a communicator; its operations still running fail with `CommunicatorBroken`.
    pub fn destroy_comm(&mut self, comm: CommHandle, env: &mut impl Env) -> bool {
        let Some(mut c) = self.comms.get_mut(comm.0 as usize).and_then(Option::take) else { return false };
        self.timers.set(TimerKey::Comm(comm), None);
        barrier::abandon(&mut c, env);
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
        self.rearm(comm);
    }

    /// Broadcast ids posted so far on `comm` at this rank.
    pub fn posted(&self, comm: CommHandle) -> Option<u32> {
        self.comm(comm).map(|c| c.next_bid)
    }

    /// Nothing in progress and nothing left to synchronize: every operation over, and every
    /// posted broadcast id inside a synchronized epoch — or the communicator broken. A partial
    /// epoch synchronizes only once the communicator is closed ([`Protocol::close_comm`]: freed,
    /// or the world finalized by every local process); there is no timer-triggered
    /// synchronization.
    pub fn quiescent(&self) -> bool {
        (0..self.comms.len()).all(|i| self.is_quiescent(CommHandle(i as u32)))
    }

    /// [`Protocol::quiescent`] for one communicator (`true` if unknown).
    pub fn is_quiescent(&self, comm: CommHandle) -> bool {
        self.comm(comm).is_none_or(|c| {
            c.broken
                || (c.ops.iter().flatten().all(Op::over)
                    && c.next_bid <= c.sync.done.saturating_mul(self.cfg.channels))
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

    /// What `ringcast stats` shows of `comm`: broadcast ids posted here, synchronization epochs
    /// completed, and whether it is broken, closed, or failed over from multicast.
    pub fn comm_state(&self, comm: CommHandle) -> Option<CommState> {
        self.comm(comm).map(|c| CommState {
            engines: c.spec.size(),
            posted: c.next_bid,
            synced_epochs: c.sync.done,
            broken: c.broken,
            closing: c.closing,
            failed_over: c.failover_from.is_some(),
        })
    }

    /// How long `comm`, settled, keeps answering a child that missed its last `SYNC_DOWN`:
    /// `default` (the node's TIME-WAIT), or 64 of the backed-off repeats of a child that waited
    /// long for that DOWN (`sync::UP_FAST_REPAIRS`).
    pub fn time_wait_of(&self, comm: CommHandle, default: Nanos) -> Nanos {
        match self.comm(comm) {
            Some(c) if c.down_after_wait => {
                default.max(64 * self.cfg.backoff_max.max(2 * self.cfg.repair_timeout))
            }
            _ => default,
        }
    }

    /// Whether this rank answers synchronization children on `comm` (their `SYNC_UP`s come
    /// here, and a lost `SYNC_DOWN` is asked for here again).
    pub fn has_sync_children(&self, comm: CommHandle) -> bool {
        self.comm(comm)
            .is_some_and(|c| crate::comm::sync_children(c.spec.size(), c.spec.my_rank).next().is_some())
    }

    /// Whether `comm` lost a member.
    pub fn is_broken(&self, comm: CommHandle) -> Option<bool> {
        self.comm(comm).map(|c| c.broken)
    }

    pub(crate) fn comm(&self, h: CommHandle) -> Option<&Comm> {
        self.comms.get(h.0 as usize)?.as_ref()
    }

    /// The protocol memory job `t` moves bytes into ([`DmaDir::Load`]) or out of
    /// ([`DmaDir::Store`]); `None` if the job is stale.
    pub fn staging(&mut self, t: DmaToken) -> Option<&mut [u8]> {
        let c = self.comms.get_mut(t.comm.0 as usize)?.as_mut().filter(|c| c.generation == t.generation)?;
        let op = c.ops.get(t.slot as usize)?.as_ref()?;
        // A receiver's parts are stored while it still receives: fragments are never rewritten
        // once held, so a late job reads what the MAC covered. Failed or over: nothing to move.
        if op.bid != t.bid || !matches!(op.state, State::Loading | State::Receiving | State::Storing) {
            return None;
        }
        let (off, end) = (t.off as usize, t.off as usize + t.len as usize);
        if end > op.geo.total as usize {
            return None;
        }
        c.channels.get_mut(t.slot as usize)?.get_mut(off..end)
    }

    /// Job `t` is over (`ok`: every byte moved). A stale token is ignored.
    pub fn dma_done(&mut self, t: DmaToken, ok: bool, now: Nanos, env: &mut impl Env) {
        let state = self
            .comms
            .get(t.comm.0 as usize)
            .and_then(Option::as_ref)
            .filter(|c| c.generation == t.generation)
            .and_then(|c| c.ops.get(t.slot as usize))
            .and_then(Option::as_ref)
            .filter(|op| op.bid == t.bid)
            .map(|op| op.state);
        match state {
            Some(State::Loading) => self.loaded(t, ok, now, env),
            Some(State::Receiving | State::Storing) => {
                self.stored(t, ok, env);
                self.maybe_sync_up(t.comm, now, env);
            }
            _ => {}
        }
        self.rearm(t.comm);
    }

    /// A datagram arrived from `from`. Anything malformed, foreign or stale is counted and
    /// dropped; nothing a peer sends can make this panic.
    pub fn on_frame(&mut self, from: PeerId, bytes: &[u8], now: Nanos, env: &mut impl Env) {
        // Parsing checks the CRC32C over the whole datagram.
        self.counters.ledger.crcd(crate::ledger::Side::Receive, bytes.len() as u64);
        let frame = match Frame::parse_as(bytes, self.cfg.crc, self.cfg.auth.wire_version()) {
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
        // keyed tag proves the frame comes from a holder of its secret. A data frame's tag under
        // `protocol.auth = tag` binds its call too (`CommKeys::data_tag`): its header's half is
        // checked here, its call's against the broadcast posted here — for one not posted yet,
        // when its pre-posted slot is replayed at the post.
        let bid = h.bid.get();
        let data = matches!(frame.kind(), FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR);
        let bound = data && !self.cfg.auth.payload_mac();
        let authentic = if bound {
            let binding = match locate(c, bid, self.cfg.channels) {
                Located::Slot(s) => c.ops.get(s).and_then(Option::as_ref).and_then(Op::binding),
                Located::Future | Located::Stale => None,
            };
            c.seal.keys.data_tag_verified(frame.tagged(), binding.as_ref(), frame.tag())
        } else {
            c.seal.keys.tag_ok(frame.tagged(), frame.tag())
        };
        if !authentic {
            return self.drop_frame(DropReason::BadTag);
        }
        let src = match authenticate(&c.spec.members, h.src_rank.get(), from) {
            Ok(r) => r,
            Err(reason) => return self.drop_frame(reason),
        };
        // Any valid frame from a neighbour this rank waits on proves that engine alive.
        if waits_on(c, src) {
            c.sync_heard = now;
        }
        // A broadcast id a barrier here skipped: the ranks disagree on the call.
        let answer = match frame.kind() {
            FrameKind::RETRANSMIT_REQUEST => true,
            FrameKind::READY => h.flags.get() == READY_FLAG_READY,
            _ => false,
        };
        let about_bid =
            !matches!(frame.kind(), FrameKind::SYNC_UP | FrameKind::SYNC_DOWN | FrameKind::CALL_SHAPE);
        let spent = about_bid && bid != SYNC_PROBE_BID && self.against_barrier(comm, src, bid, answer, env);
        match frame.kind() {
            _ if spent => {}
            FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR => {
                self.on_data(comm, from, bytes, &frame, now, env)
            }
            FrameKind::RETRANSMIT_REQUEST => self.on_request(comm, src, bid, &frame, now, env),
            FrameKind::READY => self.on_ready(comm, src, bid, h.flags.get(), now, env),
            FrameKind::SYNC_UP => self.on_sync_up(comm, src, &frame, now, env),
            FrameKind::SYNC_DOWN => self.on_sync_down(comm, src, &frame, now, env),
            FrameKind::CALL_SHAPE => self.on_call_shape(comm, src, &frame),
            _ => self.drop_frame(DropReason::UnknownKind),
        }
        // Whatever this frame ended (an operation completed, failed or was aborted), the epoch
        // may now be ready to synchronize; a barrier may be over, or its communicator broken.
        self.maybe_sync_up(comm, now, env);
        self.settle_barriers(comm, env);
        self.rearm(comm);
    }

    pub(crate) fn drop_frame(&mut self, reason: DropReason) {
        self.counters.dropped(reason);
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
                c.sync.r().heard,
                c.sync.r().up_since,
                c.sync.r().ready_since,
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
        self.comm(comm).and_then(|c| c.failover_from).map(core::num::NonZeroU32::get)
    }

    /// The delay the adaptive root delay would choose now on `comm`, in nanoseconds.
    pub fn adaptive_delay(&self, comm: CommHandle) -> Option<Nanos> {
        self.comm(comm).map(|c| (c.lag_ewma * c.lag_factor as Nanos / 4).min(self.cfg.root_delay_max))
    }
}

/// A protocol communicator's state ([`Protocol::comm_state`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommState {
    /// Engines (protocol ranks) it spans.
    pub engines: u32,
    /// Broadcast ids posted here (its parts included).
    pub posted: u32,
    /// Synchronization epochs completed.
    pub synced_epochs: u32,
    /// A member was declared unreachable.
    pub broken: bool,
    /// Closed: freed (or the world finalized) here; its last epoch settles.
    pub closing: bool,
    /// Multicast failed over to point-to-point (two epochs without a multicast hit).
    pub failed_over: bool,
}
