//! The engine's network side: the protocol and this node's communicators — the world (handle 0,
//! derived from the job) and those its local processes create — each with the sequencer of its
//! local members (docs/design.md §3.4, "one engine per node").
//!
//! The world communicator: every engine of a job derives the same identity — cookie, multicast
//! group, seed — from the job name ([`world_identity`]), so no bootstrap traffic is
//! needed; each later job a daemon serves gets a world of its own (`world_jobs.rs`). Its process ranks are numbered node by node ([`World`]: `node * ppn + local rank`,
//! or an uneven count per node); the protocol's members are the engines (one per node), and
//! the [`crate::engine::node::sequencer::Sequencer`] turns the posts of a node's processes into one broadcast and
//! delivers it into every local buffer. Communicators and local processes coming and going are
//! `lifecycle.rs`'s; the calls counted on each communicator, and the calls awaiting
//! their shape, `call_shapes.rs`'s; the calls checked for disagreeing once they wait,
//! `call_checks.rs`'s.
pub(crate) mod call_checks;
pub(crate) mod call_shapes;
pub(crate) mod calls;
pub(crate) mod comms;
pub(crate) mod lifecycle;
pub(crate) mod placement;
pub(crate) mod sequencer;
pub(crate) mod world;
pub(crate) mod world_jobs;
use crate::comm::links::LinkSet;
use crate::comm::{GroupId, PeerId, World};
use crate::config::EngineConfig;
use crate::engine::action::Outbox;
use crate::engine::ids::{ExchangeId, Seq, TransferId};
use crate::engine::links::Transfer;
use crate::engine::node::comms::LocalComm;
use crate::engine::node::placement::Placement;
use crate::engine::node::sequencer::{Delivery, Kind, Start};
pub use crate::engine::node::world::world_identity;
use crate::engine::node::world::WorldRecipe;
use crate::engine::participation::carries_on_in_step;
use crate::intake::regions::Resolved;
use crate::schedule::bcast::LANE_ANY;
use crate::timer::TimerKey;
use crate::transfer::protocol::{
    time_wait, ChannelRange, Dest, DmaJob, DmaToken, Env, HostPort, Outcome, Post, PostError, ProtoCounters,
    Protocol,
};
use crate::Nanos;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use ringcast_abi::frame::Crc32c;
use ringcast_abi::StatusKind;
use slotmap::SlotMap;

/// What a post handed to the reliable-transfer layer finishes ([`Node::transfers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Posted {
    /// Slot `seq` of the communicator in `comms[comm]` (a broadcast or a barrier).
    Slot { comm: usize, seq: Seq },
    /// A transfer on a pair communicator (`links.rs`) of an exchange the engine runs.
    Link(ExchangeId),
}

/// The communicators' life (`COMMS`): what a host reads to see that nothing accumulates as
/// communicators come and go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Communicators alive now, the world included (those waiting to settle after their last
    /// local member freed them too).
    pub alive: u32,
    /// Multicast groups the fabric has joined now (the driver's to fill in).
    pub groups: u32,
    /// Communicators created since start, the world included.
    pub created: u64,
    /// Communicators dropped since start (freed and settled, or overdue).
    pub dropped: u64,
    /// Of those alive, how many every local member freed (waiting for the protocol to settle).
    pub freeing: u64,
    /// Of those dropped, how many the protocol had not settled: dropped `peer_timeout_ms` after
    /// their last local member freed them, a peer never having answered (dead, or an
    /// application gap longer than the peer timeout).
    pub overdue: u64,
}

/// One communicator as `ringcast stats` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommInfo {
    /// Its handle (0: the world).
    pub handle: u64,
    /// Ranks in all, and of them on this engine.
    pub ranks: u32,
    /// See `ranks`.
    pub local_members: u32,
    /// The protocol's view (engines, broadcasts posted, epochs synchronized, closed, failed
    /// over).
    pub state: crate::transfer::protocol::CommState,
    /// Broken: a member unreachable, or a local process left mid-collective.
    pub broken: bool,
    /// Every local member freed it; it waits for the protocol to settle.
    pub freeing: bool,
    /// The engine let go of its protocol side (it broke here: a departing process, calls that
    /// disagree, a failed exchange): its key is gone, and a frame naming it is dropped for its
    /// cookie, as another job's would be.
    pub released: bool,
}

/// What the protocol acts through: the outbox for frames, and the lists of host-memory jobs it
/// asked for and broadcasts it ended (taken after each call).
pub(crate) struct NodeEnv<'a> {
    pub(crate) out: &'a mut Outbox,
    pub(crate) jobs: &'a mut Vec<DmaJob>,
    pub(crate) done: &'a mut Vec<(u64, Outcome)>,
    /// The driver's direct reach into host memory, lent while a frame is handled
    /// ([`crate::engine::Engine::handle_frame_placing`]).
    pub(crate) port: Option<&'a mut dyn HostPort>,
    /// Set while a frame its fabric can keep is offered ([`Node::offer_frame`]): a fragment the
    /// protocol has no pre-posted slot for is declined here instead of dropped.
    pub(crate) keep: Option<&'a mut bool>,
}

impl Env for NodeEnv<'_> {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.out.send(to, LANE_ANY, frame);
    }

    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        self.out.send(to, lane, frame);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.out.multicast(*group, frame);
    }

    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        _scratch: &mut Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        // Sealed where it waits to be polled: no copy from a scratch buffer.
        match to {
            Dest::Peer(p, lane) => self.out.send_with(p, lane, len, build),
            Dest::Group(g) => self.out.multicast_with(*g, len, build),
        }
    }

    fn send_around(
        &mut self,
        to: Dest<'_>,
        range: ChannelRange,
        _data: &[u8],
        _scratch: &mut Vec<u8>,
        _whole_len: usize,
        _whole: &mut dyn FnMut(&mut [u8]) -> usize,
        around_len: usize,
        around: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> (usize, bool) {
        // Header and trailer queued around the channel's bytes, gathered into the wire by the
        // driver: the payload is not copied here.
        let n = self.out.send_around(to, range, around_len, around);
        (n, false)
    }

    fn dma(&mut self, job: DmaJob) {
        // The driver moves the bytes (on a DPU, its DMA engine), then answers.
        self.jobs.push(job);
    }

    fn reaches(&self, buf: Resolved) -> bool {
        self.port.as_ref().is_some_and(|p| p.reaches(buf))
    }

    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        self.port.as_mut().is_some_and(|p| p.place(buf, bytes))
    }

    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        self.port.as_ref().is_some_and(|p| p.view(buf, len, f))
    }

    fn keep_back(&mut self) -> bool {
        self.keep.as_mut().map(|k| **k = true).is_some()
    }

    fn complete(&mut self, token: u64, outcome: Outcome) {
        self.done.push((token, outcome));
    }

    fn backlog(&self) -> usize {
        self.out.queued()
    }
}

/// The protocol and the communicators of one engine.
pub(crate) struct Node {
    pub(crate) proto: Protocol,
    /// This engine's communicators, by slot (slot 0: the world).
    pub(crate) comms: Vec<Option<LocalComm>>,
    pub(crate) max_comms: usize,
    pub(crate) node: u32,
    /// The world's shape: which node serves which world rank.
    pub(crate) world: World,
    /// Slots of each communicator's gather, reserved once.
    pub(crate) window: usize,
    /// After the last local member freed a communicator, how long it may wait for the
    /// protocol to settle it with the other engines.
    pub(crate) free_linger: Nanos,
    /// How long a settled freed communicator stays (TCP's TIME-WAIT; longer after a
    /// synchronization that waited: `Protocol::time_wait_of`): [`crate::transfer::protocol::TIME_WAIT_REPAIRS`]
    /// repair timeouts, for a member whose last `SYNC_DOWN` was lost to ask again.
    pub(crate) time_wait: Nanos,
    /// The pair communicators each communicator derives.
    pub(crate) link_set: LinkSet,
    /// How the world is built, and its generation (the jobs served before the current one):
    /// `world_jobs.rs`.
    pub(crate) recipe: WorldRecipe,
    /// What every post handed to the protocol finishes, until it is over: the protocol
    /// carries the key as its token.
    pub(crate) transfers: SlotMap<TransferId, Posted>,
    /// Posts the protocol finished: (token, outcome).
    pub(crate) finished: Vec<(u64, Outcome)>,
    /// Host-memory jobs the protocol asked for.
    pub(crate) jobs: Vec<DmaJob>,
    /// Shape queries answered or given up (`call_shapes.rs`), for the engine to take.
    pub(crate) resolved: Vec<crate::engine::node::calls::Resolved>,
    /// `CALL_SHAPE` frames being handled (kept to reuse its memory).
    pub(crate) shapes_in: Vec<crate::transfer::call_shape::ShapeIn>,
    /// A shape query's first repetition (`repair_timeout_us`; it doubles).
    pub(crate) shape_retry: Nanos,
    /// How long a call waits before it is checked against the manager's (`call_checks.rs`):
    /// the synchronization's probe interval, `peer_timeout_ms / 64`.
    pub(crate) check_after: Nanos,
    /// The timer keys due in one [`Node::on_timeout`], with their deadlines (kept to reuse
    /// its memory).
    pub(crate) due: Vec<(TimerKey, Nanos)>,
    /// Calls found to disagree, for the engine to fail and break: (communicator, call).
    pub(crate) disagreed: Vec<(u64, u64)>,
    /// Pair transfers that ended, of every communicator's pairs (`links.rs`).
    pub(crate) link_done: Vec<(TransferId, Outcome)>,
    /// Slots the engine carries out itself ([`Kind::local`]) that started: (communicator, slot).
    pub(crate) local_started: Vec<(u64, Start)>,
    /// Communicators created and dropped since start (see [`CommStats`]).
    pub(crate) created: u64,
    pub(crate) dropped: u64,
    /// Of those, dropped unsettled (see [`CommStats::overdue`]).
    pub(crate) overdue: u64,
}

impl Node {
    pub(crate) fn new(config: &EngineConfig, crc: Crc32c) -> Result<Node, StatusKind> {
        let t = &config.topology;
        let mut proto = Protocol::new(config, crc);
        let world_shape = t.world();
        let link_set = LinkSet::of(&config.protocol);
        let window = config.protocol.channels as usize * 2;
        let max_comms = config.limits.max_comms as usize;
        let mut comms = Vec::with_capacity(max_comms);
        let recipe = WorldRecipe {
            job: t.job.clone(),
            secret: t.job_secret,
            node: t.node,
            world: world_shape.clone(),
            link_set,
            window,
            generation: 0,
        };
        comms.push(Some(recipe.build(&mut proto)?));
        Ok(Node {
            proto,
            comms,
            max_comms,
            node: t.node,
            world: world_shape,
            window,
            free_linger: config.protocol.peer_timeout_ms as Nanos * 1_000_000,
            time_wait: time_wait(&config.protocol),
            link_set,
            recipe,
            transfers: SlotMap::with_key(),
            finished: Vec::with_capacity(window),
            jobs: Vec::new(),
            resolved: Vec::new(),
            shapes_in: Vec::new(),
            shape_retry: config.protocol.repair_timeout_us as Nanos * 1000,
            check_after: (config.protocol.peer_timeout_ms as Nanos * 1_000_000 / 64)
                .max(config.protocol.repair_timeout_us as Nanos * 1000),
            due: Vec::new(),
            disagreed: Vec::new(),
            link_done: Vec::new(),
            local_started: Vec::new(),
            created: 1,
            dropped: 0,
            overdue: 0,
        })
    }

    pub(crate) fn world_group(&self) -> GroupId {
        self.comms.first().and_then(Option::as_ref).map_or([0; 14], |c| c.group)
    }

    /// The slot of communicator `handle`.
    pub(crate) fn slot(&self, handle: u64) -> Option<usize> {
        self.comms.iter().position(|c| c.as_ref().is_some_and(|c| c.handle == handle))
    }

    /// The rank in communicator `comm` of the host holding engine-local rank `local`.
    pub(crate) fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32> {
        let c = self.comms[self.slot(comm)?].as_ref()?;
        *c.rank_of_local.get(local? as usize)?
    }

    /// Ranks in communicator `comm`.
    pub(crate) fn size(&self, comm: u64) -> Option<u32> {
        let c = self.comms[self.slot(comm)?].as_ref()?;
        Some(match c.sequencer.placement() {
            Placement::World { world, .. } => world.size(),
            Placement::Table { node_of, .. } => node_of.len() as u32,
        })
    }

    /// Each engine's consecutive ranks in communicator `comm` (first, count), in protocol-rank
    /// order, and this engine's index among them — `None` if some engine's are not consecutive.
    pub(crate) fn ranges(&self, comm: u64) -> Option<(&[(u32, u32)], u32)> {
        let c = self.comms[self.slot(comm)?].as_ref()?;
        Some((c.sequencer.ranges()?, c.sequencer.placement().me()))
    }

    /// Communicator `comm`'s ranks grouped by engine, and this engine's protocol rank: what the
    /// pairwise alltoall needs, for any placement.
    pub(crate) fn members(&self, comm: u64) -> Option<(&Arc<crate::engine::node::placement::Members>, u32)> {
        let c = self.comms[self.slot(comm)?].as_ref()?;
        Some((c.sequencer.members()?, c.sequencer.placement().me()))
    }

    /// Whether communicator `comm` is here and not broken.
    pub(crate) fn usable(&self, comm: u64) -> bool {
        self.slot(comm).and_then(|s| self.comms[s].as_ref()).is_some_and(|c| !c.sequencer.is_broken())
    }

    /// Local members of communicator `comm` on this engine.
    pub(crate) fn locals(&self, comm: u64) -> Option<u32> {
        Some(self.comms[self.slot(comm)?].as_ref()?.sequencer.locals())
    }

    /// The engine assembled the local blocks of slot `seq` of communicator `comm` into its
    /// root's buffer (`fault` `None`), or could not: a block it could not read
    /// ([`crate::engine::participation::carries_on_in_step`]) puts the slot in step, which still
    /// runs on no memory ([`crate::engine::node::sequencer::Sequencer::in_step`]); local processes
    /// in different calls (any other fault) break the communicator (its node part would carry
    /// wrong bytes; the other engines learn it within the peer timeout).
    pub(crate) fn assembled(&mut self, comm: u64, seq: Seq, fault: Option<StatusKind>, out: &mut Outbox) {
        let Some(slot) = self.slot(comm) else { return };
        let Some(c) = self.comms[slot].as_mut() else { return };
        match fault {
            None => c.sequencer.assembled(seq),
            Some(f) if carries_on_in_step(f) => c.sequencer.in_step(seq),
            Some(_) => {
                c.sequencer.fail();
                self.drop_proto(slot, out);
            }
        }
    }

    /// Breaks communicator `comm`: every unfinished operation fails (those with an outcome
    /// already keep it) and the protocol lets go of it and of its pairs, so the other engines
    /// stop hearing from it and fail theirs within the peer timeout.
    pub(crate) fn break_comm(&mut self, comm: u64, out: &mut Outbox) {
        let Some(slot) = self.slot(comm) else { return };
        if let Some(c) = self.comms[slot].as_mut() {
            c.sequencer.fail();
        }
        self.drop_proto(slot, out);
    }

    /// Files local process `local`'s next broadcast on communicator `comm` (root: a rank of
    /// it); its outcome comes back as a delivery for host operation `op`; `kind` says what
    /// part of a composed collective it is ([`Kind`]). The sequencer's slot sequence number; `Err`
    /// when refused at once.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post(
        &mut self,
        local: u32,
        comm: u64,
        root: u32,
        buf: Option<Resolved>,
        len: u64,
        part: crate::engine::ids::CallId,
        kind: Kind,
    ) -> Result<Seq, StatusKind> {
        let slot = self.slot(comm).ok_or(StatusKind::UnknownCommunicator)?;
        let c = self.comms[slot].as_mut().ok_or(StatusKind::UnknownCommunicator)?;
        let index = c.index_of_local(local).ok_or(StatusKind::UnknownCommunicator)?;
        if c.sequencer.placement().node(root) == u32::MAX {
            return Err(StatusKind::BadRoot);
        }
        let len = u32::try_from(len).map_err(|_| StatusKind::BadLength)?;
        c.sequencer.post_with(index, root, buf, len, part, kind)
    }

    /// Slots the engine carries out itself that started since the last call: (communicator,
    /// slot), moved into `out`.
    pub(crate) fn take_local_started(&mut self, out: &mut Vec<(u64, Start)>) {
        out.append(&mut self.local_started);
    }

    /// Pair transfers that ended since the last call: (exchange, outcome), into `out`.
    pub(crate) fn take_link_done(&mut self, out: &mut Vec<(ExchangeId, Outcome)>) {
        let Node { transfers, link_done, comms, .. } = self;
        let lists = core::iter::once(link_done).chain(comms.iter_mut().flatten().map(|c| &mut c.links.done));
        for list in lists {
            for (id, outcome) in list.drain(..) {
                if let Some(Posted::Link(x)) = transfers.remove(id) {
                    out.push((x, outcome));
                }
            }
        }
    }

    /// The engine finished slot `seq` of communicator `comm`, one it carries out itself.
    pub(crate) fn finish_local(&mut self, comm: u64, seq: Seq, outcome: Outcome) {
        if let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) {
            c.sequencer.done(seq, outcome);
        }
    }

    /// Posts transfer `t` on the pair communicator of communicator `comm` it names
    /// (`links.rs`); its outcome comes back from [`Node::take_link_done`].
    pub(crate) fn link_post(&mut self, comm: u64, t: Transfer, now: Nanos, out: &mut Outbox) {
        let id = self.transfers.insert(Posted::Link(t.owner));
        let Some(slot) = self.slot(comm) else {
            let failed =
                Outcome { status: StatusKind::UnknownCommunicator, bytes: 0, counters: Default::default() };
            return self.link_done.push((id, failed));
        };
        let Node { proto, finished, jobs, comms, .. } = self;
        let Some(c) = comms[slot].as_mut() else { return };
        // Completions the protocol gives at once (a refusal) go through `settle`.
        c.links.post(proto, t, id, now, &mut NodeEnv { out, jobs, done: finished, port: None, keep: None });
    }

    /// Engine-local rank `local` made a call on communicator `comm` that posted nothing
    /// ([`crate::engine::node::sequencer::Sequencer::posted_nothing`]); nothing if it is not a member here.
    pub(crate) fn posted_nothing(&mut self, local: u32, comm: u64) {
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) else { return };
        if let Some(index) = c.index_of_local(local) {
            c.sequencer.posted_nothing(index);
        }
    }

    /// Engine-local rank `local` made a leader-based call on `comm` exchanged by multicast
    /// ([`crate::engine::node::sequencer::Sequencer::multicast_exchange`]); nothing if it is not a member here.
    pub(crate) fn multicast_exchange(&mut self, local: u32, comm: u64) {
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_mut()) else { return };
        if let Some(index) = c.index_of_local(local) {
            c.sequencer.multicast_exchange(index);
        }
    }

    /// The context engine-local rank `local`'s next post on `comm` with call context `context`
    /// carries ([`crate::engine::node::sequencer::Sequencer::context_of`]).
    pub(crate) fn context_of(&self, local: u32, comm: u64, context: u64) -> u64 {
        let Some(c) = self.slot(comm).and_then(|s| self.comms[s].as_ref()) else { return context };
        c.index_of_local(local).map_or(context, |index| c.sequencer.context_of(index, context))
    }

    /// Hands the protocol every slot of communicator `slot` that can start, in order, until one
    /// waits (for its root process, a local process, or a channel).
    fn start_ready(&mut self, slot: usize, now: Nanos, out: &mut Outbox) {
        loop {
            let Some(c) = self.comms[slot].as_mut() else { return };
            let Some(s) = c.sequencer.next_start() else { return };
            if s.local {
                // The engine carries it out (`Node::take_local_started`).
                c.sequencer.started();
                self.local_started.push((c.handle, s));
                continue;
            }
            let Some(comm) = c.proto else {
                c.sequencer.refused(StatusKind::CommunicatorBroken);
                continue;
            };
            let root = c.sequencer.placement().node(s.root);
            let id = self.transfers.insert(Posted::Slot { comm: slot, seq: s.seq });
            let token = id.token();
            let Node { proto, finished, jobs, .. } = self;
            let env = &mut NodeEnv { out, jobs, done: finished, port: None, keep: None };
            let result = if s.barrier {
                // The barrier's identity, which every engine's `SYNC_UP` must agree on: its call
                // and its place in the communicator's sequence of slots. Without the place, a
                // rank whose call disagreed ahead of a barrier (an exchange, which takes no
                // broadcast id) met the others' earlier barrier with its own later one, and
                // theirs ended `Ok` (DST seed 139 with non-blocking calls, `EarlyBarrier`).
                proto.post_barrier(comm, token, barrier_identity(s.context, s.seq), now, env)
            } else {
                let post = Post {
                    comm,
                    root,
                    rank_root: s.root,
                    slot: s.seq.0,
                    buf: s.buf,
                    len: s.len,
                    token,
                    context: s.context,
                    window: s.window,
                };
                proto.post_bcast(post, now, env)
            };
            if result.is_err() {
                self.transfers.remove(id); // not taken: nothing will finish it
            }
            let Some(c) = self.comms[slot].as_mut() else { return };
            match result {
                Ok(()) => c.sequencer.started(),
                Err(PostError::WouldBlock) => return, // its channel is still held
                Err(PostError::Refused(status)) => c.sequencer.refused(status),
            }
        }
    }

    /// Turns what the protocol finished into deliveries to local processes.
    pub(crate) fn settle(&mut self, deliveries: &mut Vec<Delivery>) {
        for (token, outcome) in self.finished.drain(..) {
            let id = TransferId::of_token(token);
            match self.transfers.get(id) {
                // Taken with the other pair transfers' ends (`take_link_done`).
                Some(Posted::Link(_)) => self.link_done.push((id, outcome)),
                Some(&Posted::Slot { comm, seq }) => {
                    self.transfers.remove(id);
                    if let Some(c) = self.comms.get_mut(comm).and_then(Option::as_mut) {
                        c.sequencer.done(seq, outcome);
                    }
                }
                None => {}
            }
        }
        for c in self.comms.iter_mut().flatten() {
            c.sequencer.take_finished(deliveries);
        }
    }

    /// After an event: slots that can start, what the protocol finished, communicators that
    /// settled; the protocol's host-memory jobs into `jobs`, local deliveries into `deliveries`.
    pub(crate) fn step(
        &mut self,
        now: Nanos,
        out: &mut Outbox,
        jobs: &mut Vec<DmaJob>,
        deliveries: &mut Vec<Delivery>,
    ) {
        for slot in 0..self.comms.len() {
            self.start_ready(slot, now, out);
        }
        {
            let Node { proto, finished, jobs: j, comms, .. } = self;
            let mut env = NodeEnv { out, jobs: j, done: finished, port: None, keep: None };
            for c in comms.iter_mut().flatten() {
                c.links.retry(proto, now, &mut env);
            }
        }
        self.settle(deliveries);
        self.reap_freed(now, out, deliveries);
        jobs.append(&mut self.jobs);
    }

    /// A frame from engine `from`.
    pub(crate) fn on_frame(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: Nanos,
        out: &mut Outbox,
        port: Option<&mut dyn HostPort>,
    ) {
        self.offer_frame(from, bytes, now, out, port, None);
    }

    /// [`Node::on_frame`], for a frame its fabric can keep where it lies when `keep` is given:
    /// a fragment of a broadcast not posted here with no pre-posted slot free is then declined
    /// (`*keep` set, nothing done or counted) rather than dropped.
    pub(crate) fn offer_frame(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: Nanos,
        out: &mut Outbox,
        port: Option<&mut dyn HostPort>,
        keep: Option<&mut bool>,
    ) {
        let Node { proto, finished, jobs, .. } = self;
        // (Reborrowed for this call: the port's own lifetime is the driver's.)
        let port = port.map(|p| &mut *p as &mut dyn HostPort);
        proto.on_frame(from, bytes, now, &mut NodeEnv { out, jobs, done: finished, port, keep });
        self.on_call_shapes(now, out);
    }

    /// The timers due at `now`, taken from the one table in [`TimerKey`] order: the protocol's
    /// communicators (slot order), then the shape queries, then the call checks — each of those
    /// two as its key stands when its turn comes (the one before may have moved it).
    /// A freed communicator's key needs nothing here: [`Node::reap_freed`] runs after every
    /// event, and [`Node::rearm_freeing`] arms what is left; the drain's is the engine's
    /// (`drain.rs`). Returns whether a key other than the drain's was due.
    pub(crate) fn on_timeout(&mut self, now: Nanos, out: &mut Outbox) -> bool {
        let mut due = core::mem::take(&mut self.due);
        due.clear();
        while let Some(entry) = self.proto.timers.pop_due(now) {
            due.push(entry);
        }
        // In slot order, as a sweep of the table would visit them: which of several
        // simultaneously due communicators sends first is arbitrary, and this keeps it
        // independent of the heap's history.
        due.sort_unstable();
        // The shape queries' and the checks' keys stay armed until their handlers re-arm them.
        for &(key, at) in &due {
            if matches!(key, TimerKey::ShapeQueries | TimerKey::CallChecks) {
                self.proto.timers.set(key, Some(at));
            }
        }
        for &(key, _) in &due {
            if let TimerKey::Comm(comm) = key {
                let Node { proto, finished, jobs, .. } = self;
                proto.comm_due(comm, now, &mut NodeEnv { out, jobs, done: finished, port: None, keep: None });
            }
        }
        if self.proto.timers.due(TimerKey::ShapeQueries, now) {
            self.on_shape_timers(now, out);
        }
        if self.proto.timers.due(TimerKey::CallChecks, now) {
            self.on_check_timers(now, out);
        }
        let fired = due.iter().any(|&(k, _)| k != TimerKey::Linger);
        self.due = due;
        fired
    }

    /// A host-memory job of the protocol is over.
    pub(crate) fn dma_done(&mut self, token: DmaToken, ok: bool, now: Nanos, out: &mut Outbox) {
        let Node { proto, finished, jobs, .. } = self;
        proto.dma_done(token, ok, now, &mut NodeEnv { out, jobs, done: finished, port: None, keep: None });
    }

    /// The protocol memory of a job.
    pub(crate) fn staging(&mut self, token: DmaToken) -> Option<&mut [u8]> {
        self.proto.staging(token)
    }

    /// When a timer is next due: the one table's earliest key (`timer.rs`) — the protocol's
    /// communicators, a freed communicator that has not been dropped ([`Node::rearm_freeing`]),
    /// the shape queries' next (`call_shapes.rs`), the waiting calls' checks
    /// (`call_checks.rs`) and the engine's drain.
    pub(crate) fn next_timeout(&self) -> Option<Nanos> {
        // The freed communicators' keys must say what a scan of them says (the protocol checks
        // its own): debug builds check it on each call, as the protocol does its keys.
        debug_assert!(self.freeing_armed(), "a freed communicator's deadline was not re-armed");
        self.proto.next_timeout()
    }

    /// Nothing owed to peers or local processes: no broadcast in progress here, and every
    /// broadcast this engine took part in synchronized (or the communicator is broken).
    pub(crate) fn quiescent(&self) -> bool {
        self.comms.iter().flatten().all(|c| c.sequencer.idle()) && self.proto.quiescent()
    }

    /// See [`crate::engine::Engine::time_wait`].
    pub(crate) fn time_wait_now(&self, default: Nanos) -> Nanos {
        self.comms
            .iter()
            .flatten()
            .map(|c| lifecycle::time_wait_of(&self.proto, c, default))
            .fold(default, Nanos::max)
    }

    /// See [`crate::engine::Engine::answers_sync_children`].
    pub(crate) fn answers_sync_children(&self) -> bool {
        self.comms.iter().flatten().filter_map(|c| c.proto).any(|h| {
            self.proto.has_sync_children(h) && self.proto.comm_state(h).is_some_and(|s| s.posted > 0)
        })
    }

    /// Every communicator alive here, in table order (the world first), for `ringcast stats`.
    pub(crate) fn comm_list(&self) -> Vec<CommInfo> {
        self.comms
            .iter()
            .flatten()
            .map(|c| {
                let state = c.proto.and_then(|h| self.proto.comm_state(h)).unwrap_or_default();
                let ranks = match c.sequencer.placement() {
                    crate::engine::node::placement::Placement::World { world, .. } => world.size(),
                    crate::engine::node::placement::Placement::Table { node_of, .. } => node_of.len() as u32,
                };
                CommInfo {
                    handle: c.handle,
                    ranks,
                    local_members: c.sequencer.locals(),
                    state,
                    broken: state.broken || c.proto.is_none(),
                    freeing: c.freeing_since.is_some(),
                    released: c.proto.is_none(),
                }
            })
            .collect()
    }

    /// The communicators' life (`COMMS`), `groups` left at 0 for the driver.
    pub(crate) fn comm_stats(&self) -> CommStats {
        let alive = self.comms.iter().flatten();
        CommStats {
            alive: alive.clone().count() as u32,
            groups: 0,
            created: self.created,
            dropped: self.dropped,
            freeing: alive.filter(|c| c.freeing_since.is_some()).count() as u64,
            overdue: self.overdue,
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.proto.memory_bytes()
    }

    pub(crate) fn memory_bound(&self, largest: usize) -> usize {
        self.proto.memory_bound(largest)
    }

    pub(crate) fn any_broken(&self) -> bool {
        self.proto.any_broken()
    }

    pub(crate) fn proto_counters(&self) -> ProtoCounters {
        self.proto.counters()
    }

    pub(crate) fn describe(&self) -> String {
        self.proto.describe()
    }
}

impl core::fmt::Debug for Node {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Node").field("node", &self.node).field("comms", &self.comms.len()).finish()
    }
}

impl crate::intake::Ranks for Node {
    fn rank(&self, local: Option<u32>, comm: u64) -> Option<u32> {
        Node::rank(self, local, comm)
    }

    fn size(&self, comm: u64) -> Option<u32> {
        Node::size(self, comm)
    }
}

/// What a barrier's `SYNC_UP` carries for the engines to compare (`transfer/barrier.rs`): its
/// call context mixed with its slot's place in the communicator's sequence (a SplitMix64 of the
/// sequence number, so that two different barriers agree only by a 2⁻⁶⁴ accident).
fn barrier_identity(context: u64, seq: crate::engine::ids::Seq) -> u64 {
    let mut z = seq.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    context ^ z ^ (z >> 31)
}
