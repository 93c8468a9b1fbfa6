//! A simulated cluster of bare protocols: one real [`Protocol`] per node on the shared
//! [`Net`](super::net) (discrete events in virtual time, the [`Fabric`](super::fabric) faults).
//! Each node's host memory is a set of buffers keyed by segment handle, reached through the
//! protocol's `Env`: placed into at once (`Env::place`), and by DMA jobs the world answers as
//! every driver does, after the handler that handed them over (`HostDriver`), at the same
//! virtual time. The experiments and performance runs use it; the DST drives whole engines
//! instead ([`super::cluster`]).
//!
//! Two ways to price a datagram: the fault profile's latency and jitter alone, or a
//! performance model ([`World::set_model`]): LogGP per link class (intra-node, intra-site, WAN),
//! the sender's and receiver's per-datagram overhead `o` on their own CPU, each node's NIC lanes
//! (a send on one lane occupies it for `max(g, s·G)`, an aggregated send all lanes for
//! `s·G / lanes`), the receiving lane's serialization when several senders converge, a WAN pipe
//! per ordered pair of sites, and multicast replicated by the switch (the root's lane carries the
//! datagram once). Faults (loss, corruption, duplication, jitter) apply in both.
//!
//! Built for a million simulated ranks: an event is 32 bytes in a slot and a 16-byte key in a
//! 4-ary heap ([`super::net`]), a multicast datagram is one shared buffer for all receivers,
//! and a rank is its protocol plus a few words of fabric state.
//!
//! Deterministic: events at equal times run in insertion order, and every random decision
//! comes from the run's seed.
use super::fabric::Faults;
pub use super::mem::HostMem;
use super::net::{Ev, Net};
use ringcast_proto::comm::Layout;
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::fault::FaultConfig;
use ringcast_proto::intake::regions::Resolved;
use ringcast_proto::model::FabricModel;
use ringcast_proto::rng::SimRng;
use ringcast_proto::schedule::bcast::LANE_ANY;
use ringcast_proto::transfer::protocol::{Dest, DmaDir, DmaJob, Env, HostDriver, Outcome, Protocol};
use ringcast_proto::Nanos;
use std::collections::VecDeque;

/// A completion observed at a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Node.
    pub node: usize,
    /// Token of the post.
    pub token: u64,
    /// Outcome.
    pub outcome: Outcome,
    /// Virtual time.
    pub at: Nanos,
}

/// [`Node`]'s timer when none is armed (no protocol deadline is `Nanos::MAX`).
const NO_TIMER: Nanos = Nanos::MAX;

/// One simulated engine.
pub struct Node {
    /// The protocol under test.
    pub proto: Protocol,
    /// Host memory: segment handle → bytes.
    pub mem: HostMem,
    /// Crashed from this time on (stops processing anything); [`NO_TIMER`]'s `Nanos::MAX` if
    /// never (a word, not an `Option`'s two).
    crash_at: Nanos,
    /// The timer event armed for this node, [`NO_TIMER`] if none (a word, not an `Option`'s
    /// two: a million nodes hold one each).
    timer: Nanos,
}

impl Node {
    /// The timer event armed for this node (debugging).
    pub fn armed(&self) -> Option<Nanos> {
        (self.timer != NO_TIMER).then_some(self.timer)
    }

    /// Crashes the node from `at` on (it stops processing anything).
    pub fn crash(&mut self, at: Nanos) {
        self.crash_at = at;
    }

    /// When the node crashes, if it does.
    pub fn crash_at(&self) -> Option<Nanos> {
        (self.crash_at != NO_TIMER).then_some(self.crash_at)
    }

    /// Whether the node is dead at `now`.
    pub fn dead(&self, now: Nanos) -> bool {
        self.crash_at != NO_TIMER && now >= self.crash_at
    }
}

/// The `Env` a node's protocol acts through.
struct NodeEnv<'a> {
    me: usize,
    net: &'a mut Net,
    mem: &'a mut HostMem,
    done: &'a mut Vec<Done>,
    /// The world's one buffer frames are built in ([`Env::send_built`]).
    scratch: &'a mut Vec<u8>,
    /// The world's one queue of DMA jobs handed over ([`Env::dma`]), answered once the
    /// handler returns ([`HostDriver`]).
    jobs: &'a mut VecDeque<DmaJob>,
}

impl NodeEnv<'_> {
    /// `len` bytes of host memory at `offset` into `buf`, if they exist.
    fn range(&mut self, buf: Resolved, offset: u64, len: usize) -> Option<&mut [u8]> {
        self.mem.range(buf.segment.0, buf.offset.checked_add(offset)?, len as u64)
    }
}

impl Env for NodeEnv<'_> {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        Env::send_on(self, to, frame, LANE_ANY)
    }

    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        self.net.send(self.me, to.0 as usize, frame, lane)
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.net.multicast(self.me, group, frame)
    }

    /// Built in the world's buffer, not the protocol's own: a million simulated ranks hold no
    /// send buffer each (the fabric copies each frame into a shared allocation anyway).
    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        _scratch: &mut Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        if self.scratch.len() < len {
            self.scratch.resize(len, 0);
        }
        let n = build(&mut self.scratch[..len]);
        let frame = &self.scratch[..n];
        match to {
            _ if n == 0 => {}
            Dest::Peer(p, lane) => self.net.send(self.me, p.0 as usize, frame, lane),
            Dest::Group(g) => self.net.multicast(self.me, g, frame),
        }
    }

    fn dma(&mut self, job: DmaJob) {
        self.jobs.push_back(job);
    }

    fn reaches(&self, _buf: Resolved) -> bool {
        // Simulated host memory is reached at once, as the `mapped` backend reaches a host's:
        // receivers that serve no repairs place their payload straight into it.
        true
    }

    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        let Some(host) = self.range(buf, 0, bytes.len()) else { return false };
        host.copy_from_slice(bytes);
        true
    }

    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let Some(host) = self.range(buf, 0, len) else { return false };
        f(host);
        true
    }

    fn complete(&mut self, token: u64, outcome: Outcome) {
        self.done.push(Done { node: self.me, token, outcome, at: self.net.now });
    }
}

/// A DMA job is carried out once the handler that handed it over returns, at the same virtual
/// time (a DMA engine's latency is not modelled): no event of its own, so a run counts the
/// events it did when jobs were answered inside the handler.
impl HostDriver for NodeEnv<'_> {
    fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
        self.jobs
    }

    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
        let Some(host) = self.range(job.buf, 0, stage.len()) else { return false };
        match job.dir {
            DmaDir::Load => stage.copy_from_slice(host),
            DmaDir::Store => host.copy_from_slice(stage),
        }
        true
    }
}

/// The simulated cluster.
pub struct World {
    /// The nodes (index = `PeerId`).
    pub nodes: Vec<Node>,
    net: Net,
    done: Vec<Done>,
    /// Where every node's frames are built.
    scratch: Vec<u8>,
    /// The DMA jobs the node being handled has handed over (empty between events).
    jobs: VecDeque<DmaJob>,
}

impl World {
    /// A world of `protos` (one per node) on a fabric with `faults`, randomness from `rng`.
    pub fn new(
        protos: impl IntoIterator<Item = Protocol>,
        faults: Faults,
        rng: SimRng,
        crc: fn(&[u8]) -> u32,
    ) -> Self {
        // Straight into the nodes (no second vector of a million protocols at the peak).
        let nodes: Vec<Node> = protos
            .into_iter()
            .map(|proto| Node { proto, mem: HostMem::default(), crash_at: NO_TIMER, timer: NO_TIMER })
            .collect();
        let n = nodes.len();
        World {
            nodes,
            net: Net::new(n, faults, rng, crc),
            done: Vec::new(),
            scratch: Vec::new(),
            jobs: VecDeque::new(),
        }
    }

    /// Prices every datagram with `fabric` from now on, node `i` being rank `i` of a
    /// communicator placed as `layout` over all the world's nodes.
    pub fn set_model(&mut self, fabric: FabricModel, layout: Layout) {
        let ranks = self.nodes.len() as u32;
        self.net.set_model(fabric, layout, ranks);
    }

    /// Virtual time now.
    pub fn now(&self) -> Nanos {
        self.net.now
    }

    /// Datagrams delivered so far.
    pub fn delivered(&self) -> u64 {
        self.net.delivered
    }

    /// Gives every node a fault injector per `config` (none when every rate is zero), each with
    /// a seed of its own derived from `config.seed` (never from the process: replays are exact).
    pub fn inject_faults(&mut self, config: &FaultConfig) {
        self.net.inject_faults(config);
    }

    /// Makes `members` the receivers of multicast group `group`.
    pub fn join(&mut self, group: GroupId, members: Vec<u32>) {
        self.net.groups.insert(group, members.into());
    }

    /// Completions so far, in order (since the last [`World::forget_done`]).
    pub fn done(&self) -> &[Done] {
        &self.done
    }

    /// Drops the completions seen so far: a run that has read them keeps no list of a
    /// million (56 bytes a rank).
    pub fn forget_done(&mut self) {
        self.done.clear();
    }

    /// Runs `f` on node `i`'s protocol with its `Env` at the current virtual time (posting,
    /// creating communicators), then re-arms the node's timer.
    pub fn with_node<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Protocol, Nanos, &mut dyn DynEnv) -> R,
    ) -> R {
        let now = self.net.now;
        let node = &mut self.nodes[i];
        let mut env = NodeEnv {
            me: i,
            net: &mut self.net,
            mem: &mut node.mem,
            done: &mut self.done,
            scratch: &mut self.scratch,
            jobs: &mut self.jobs,
        };
        let r = f(&mut node.proto, now, &mut env);
        node.proto.answer_jobs(now, &mut env);
        self.rearm(i);
        r
    }

    /// Schedules a wake-up of node `i` at `at` (the driver posts then).
    pub fn wake(&mut self, i: usize, at: Nanos) {
        self.net.push(at, Ev::Wake { node: i as u32 });
    }

    /// Injects a raw datagram to node `to` at `at` (foreign or garbage frames).
    pub fn inject(&mut self, to: usize, from: PeerId, at: Nanos, frame: Vec<u8>) {
        let (to, from) = (to as u32, from.0);
        self.net.push(at, Ev::Deliver { to, from, lane: LANE_ANY, admitted: true, frame: frame.into() });
    }

    fn rearm(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let next = node.proto.next_timeout();
        if next != node.armed() {
            node.timer = next.unwrap_or(NO_TIMER);
            if let Some(at) = next {
                self.net.push(at.max(self.net.now), Ev::Timer { node: i as u32, at });
            }
        }
    }

    /// Runs the next event; returns the node it concerned (for the driver), or `None` when the
    /// queue is empty.
    pub fn step(&mut self) -> Option<Option<usize>> {
        let ev = self.net.pop()?;
        let now = self.net.now;
        let node = match ev {
            Ev::Deliver { to, from, lane, admitted, frame } => {
                let to = to as usize;
                if to >= self.nodes.len() || self.nodes[to].dead(now) {
                    return Some(None);
                }
                if !admitted && self.net.perf.is_some() {
                    // The receiving lane and the receiver's engine: handled when both are free.
                    let ready = self.net.charge_receive(from as usize, to, frame.len(), lane);
                    if ready > now {
                        self.net
                            .push(ready, Ev::Deliver { to: to as u32, from, lane, admitted: true, frame });
                        return Some(None);
                    }
                }
                self.net.delivered += 1;
                let node = &mut self.nodes[to];
                let mut env = NodeEnv {
                    me: to,
                    net: &mut self.net,
                    mem: &mut node.mem,
                    done: &mut self.done,
                    scratch: &mut self.scratch,
                    jobs: &mut self.jobs,
                };
                node.proto.on_frame(PeerId(from), &frame, now, &mut env);
                node.proto.answer_jobs(now, &mut env);
                to
            }
            Ev::Timer { node: i, at } => {
                let i = i as usize;
                if self.nodes[i].armed() != Some(at) || self.nodes[i].dead(now) {
                    return Some(None); // superseded, or dead
                }
                self.nodes[i].timer = NO_TIMER;
                let node = &mut self.nodes[i];
                let mut env = NodeEnv {
                    me: i,
                    net: &mut self.net,
                    mem: &mut node.mem,
                    done: &mut self.done,
                    scratch: &mut self.scratch,
                    jobs: &mut self.jobs,
                };
                node.proto.on_timeout(now, &mut env);
                node.proto.answer_jobs(now, &mut env);
                i
            }
            // Only the engine cluster holds DMA jobs back.
            Ev::Job { .. } => return Some(None),
            Ev::Wake { node: i } => {
                let i = i as usize;
                if self.nodes[i].dead(now) {
                    return Some(None);
                }
                i
            }
        };
        self.rearm(node);
        Some(Some(node))
    }
}

/// `Env` as a trait object.
pub trait DynEnv {
    /// See [`Env::send`].
    fn send(&mut self, to: PeerId, frame: &[u8]);
    /// See [`Env::send_on`].
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8);
    /// See [`Env::multicast`].
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// See [`Env::send_built`].
    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        scratch: &mut Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    );
    /// See [`Env::dma`].
    fn dma(&mut self, job: DmaJob);
    /// See [`Env::reaches`].
    fn reaches(&self, buf: Resolved) -> bool;
    /// See [`Env::place`].
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool;
    /// See [`Env::view`].
    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool;
    /// See [`Env::complete`].
    fn complete(&mut self, token: u64, outcome: Outcome);
}

impl<T: Env> DynEnv for T {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        Env::send(self, to, frame)
    }
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        Env::send_on(self, to, frame, lane)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        Env::multicast(self, group, frame)
    }
    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        scratch: &mut Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        Env::send_built(self, to, len, scratch, build)
    }
    fn dma(&mut self, job: DmaJob) {
        Env::dma(self, job)
    }
    fn reaches(&self, buf: Resolved) -> bool {
        Env::reaches(self, buf)
    }
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        Env::place(self, buf, bytes)
    }
    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        Env::view(self, buf, len, f)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        Env::complete(self, token, outcome)
    }
}

impl Env for &mut dyn DynEnv {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        (**self).send(to, frame)
    }
    fn send_on(&mut self, to: PeerId, frame: &[u8], lane: u8) {
        (**self).send_on(to, frame, lane)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        (**self).multicast(group, frame)
    }
    fn send_built(
        &mut self,
        to: Dest<'_>,
        len: usize,
        scratch: &mut Vec<u8>,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        (**self).send_built(to, len, scratch, build)
    }
    fn dma(&mut self, job: DmaJob) {
        (**self).dma(job)
    }
    fn reaches(&self, buf: Resolved) -> bool {
        (**self).reaches(buf)
    }
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        (**self).place(buf, bytes)
    }
    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        (**self).view(buf, len, f)
    }
    fn complete(&mut self, token: u64, outcome: Outcome) {
        (**self).complete(token, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::Node;
    use crate::mem::HostMem;

    /// Bytes of a node beyond its protocol (which `ringcast-proto`'s footprint test holds to
    /// its own budget): host memory with one small buffer inline, the crash time, the armed
    /// timer. A million-rank run holds a million of them (docs/performance.md, "Simulator");
    /// 88 before issue 40's item 5, 72 before its crash time became a word and its two debugging
    /// counts (read by nothing) went.
    #[test]
    fn a_nodes_own_state_stays_within_its_budget() {
        const NODE_BUDGET: usize = 56;
        let own = core::mem::size_of::<Node>()
            - core::mem::size_of::<ringcast_proto::transfer::protocol::Protocol>();
        eprintln!("Node: {own} B beyond its protocol, HostMem {} B", core::mem::size_of::<HostMem>());
        assert!(
            own <= NODE_BUDGET,
            "a node holds {own} bytes beyond its protocol, over its budget of {NODE_BUDGET}"
        );
        let mut m = HostMem::default();
        m.insert(1, vec![1, 2]);
        assert_eq!(m.get(&1), Some(&[1u8, 2][..]), "a small buffer kept inline reads back");
        m.insert(2, vec![7; 1000]);
        assert_eq!(m.range(2, 990, 10).map(|r| r.to_vec()), Some(vec![7; 10]), "a large one too");
    }
}
