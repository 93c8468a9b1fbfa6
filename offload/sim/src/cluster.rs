//! A simulated cluster of whole engines: one real [`Engine`] per node — intake, the node's
//! communicator and gather tables, the protocol — on the shared [`Net`](super::net), with the
//! node's host processes' memory ([`HostMem`]) beside it. The cluster is the engine's driver,
//! as a runner is on a real node: after every event it drains [`Engine::poll_action`] in order,
//! sends and multicasts frames through the simulated fabric (with its faults), joins and leaves
//! multicast groups, carries out DMA jobs against the simulated host memory, and publishes
//! completions ([`Published`], each host's in the order the engine gives them).
//!
//! DMA jobs ([`DmaTiming`]): carried out at once, inside the drain (the emulation runners), or
//! late — held and answered after a random delay, as a DPU's DMA engine does — or a mix; the
//! seed chooses. A job whose host memory is missing (a segment shorter than the region the host
//! registered: pages gone) fails, and the engine is told so.
//!
//! Hosts post either straight into the engine ([`Cluster::with_engine`]) or through their
//! submission queue ([`Cluster::submit`]): the cluster then takes a host's descriptors in as a
//! runner does, as many as the engine's admission rule ([`Engine::admits`]) lets in against a
//! completion ring of [`SIM_CQ_ENTRIES`] (published completions are reaped at once), after every
//! event at the node.
//!
//! A crashed node stops processing anything: frames, timers, held DMA jobs, submissions.
use super::fabric::Faults;
use super::mem::HostMem;
use super::net::{Ev, Net};
use ringcast_abi::{Completion, SubmissionDescriptor};
use ringcast_proto::comm::{PeerId, World};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::engine::{Action, Dma, Engine, JobId};
use ringcast_proto::fault::FaultConfig;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_proto::Nanos;
use std::collections::VecDeque;

/// Entries of a simulated host's completion ring (the default `limits.ring_entries`): how many
/// of its descriptors may be in flight at once.
pub const SIM_CQ_ENTRIES: usize = 256;

/// When the cluster carries out the DMA jobs its engines hand it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DmaTiming {
    /// At once, while draining the engine's actions.
    Now,
    /// Each job with probability `late` after a delay uniform in `1..=max_ns`, else at once.
    Late {
        /// Share of jobs held back (1.0: all).
        late: f64,
        /// Longest delay.
        max_ns: Nanos,
    },
}

/// A completion an engine published for one of its hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    /// Node (engine).
    pub node: usize,
    /// The host it is for.
    pub host: HostId,
    /// The completion entry.
    pub cqe: Completion,
    /// Virtual time.
    pub at: Nanos,
}

/// One simulated node: its engine and its host processes' memory.
pub struct Machine {
    /// The engine under test.
    pub engine: Engine,
    /// Host memory of the node's processes: segment handle → bytes.
    pub mem: HostMem,
    /// Crashed from this time on (stops processing anything).
    pub crash_at: Option<Nanos>,
    timer: Option<Nanos>,
    /// DMA jobs held back (late DMA), answered when their event falls due.
    held: Vec<(JobId, Dma)>,
    /// Each host's submission queue ([`Cluster::submit`]): descriptors posted, not taken in.
    sq: Vec<(HostId, VecDeque<SubmissionDescriptor>)>,
}

impl Machine {
    /// Whether the node is dead at `now`.
    pub fn dead(&self, now: Nanos) -> bool {
        self.crash_at.is_some_and(|t| now >= t)
    }

    /// The timer event armed for this node (debugging).
    pub fn armed(&self) -> Option<Nanos> {
        self.timer
    }
}

/// The simulated cluster of engines.
pub struct Cluster {
    /// The nodes (index = `PeerId`).
    pub nodes: Vec<Machine>,
    net: Net,
    dma: DmaTiming,
    /// Draws of the DMA timing (a stream of its own: the fabric's decisions stay as they are).
    dma_rng: SimRng,
    published: Vec<Published>,
}

/// One engine per node of `world`, each configured for job `job` and its node, then changed by
/// `tweak`: what a test of whole engines starts from.
pub fn world_engines(world: &World, job: &str, tweak: &dyn Fn(&mut EngineConfig)) -> Vec<Engine> {
    (0..world.nodes())
        .map(|n| {
            let config = EngineConfig::default().with(|c| {
                c.topology.job = job.into();
                c.topology.set_world(world);
                c.topology.node = n;
                tweak(c);
            });
            Engine::new(&config, crc32c::crc32c, true).expect("a valid engine configuration")
        })
        .collect()
}

impl Cluster {
    /// A cluster of `engines` (one per node) on a fabric with `faults`, fabric randomness from
    /// `rng`, DMA jobs carried out per `dma` with randomness from `dma_rng`. Each engine's world
    /// group is joined at once (a runner joins it before serving).
    pub fn new(
        engines: Vec<Engine>,
        faults: Faults,
        rng: SimRng,
        crc: fn(&[u8]) -> u32,
        dma: DmaTiming,
        dma_rng: SimRng,
    ) -> Cluster {
        let mut net = Net::new(engines.len(), faults, rng, crc);
        for (i, e) in engines.iter().enumerate() {
            if let Some(g) = e.world_group() {
                net.join(g, i);
            }
        }
        let nodes = engines
            .into_iter()
            .map(|engine| Machine {
                engine,
                mem: HostMem::default(),
                crash_at: None,
                timer: None,
                held: Vec::new(),
                sq: Vec::new(),
            })
            .collect();
        Cluster { nodes, net, dma, dma_rng, published: Vec::new() }
    }

    /// Virtual time now.
    pub fn now(&self) -> Nanos {
        self.net.now
    }

    /// Datagrams delivered so far.
    pub fn delivered(&self) -> u64 {
        self.net.delivered
    }

    /// Completions published so far, in order.
    pub fn published(&self) -> &[Published] {
        &self.published
    }

    /// Gives every node a fault injector per `config` (see [`super::world::World::inject_faults`]).
    pub fn inject_faults(&mut self, config: &FaultConfig) {
        self.net.inject_faults(config);
    }

    /// Schedules a wake-up of node `i` at `at` (the driver posts then).
    pub fn wake(&mut self, i: usize, at: Nanos) {
        self.net.push(at, Ev::Wake { node: i as u32 });
    }

    /// Injects a raw datagram to node `to` at `at` (foreign, garbage or forged frames).
    pub fn inject(&mut self, to: usize, from: PeerId, at: Nanos, frame: Vec<u8>) {
        let (to, from) = (to as u32, from.0);
        let lane = ringcast_proto::schedule::bcast::LANE_ANY;
        self.net.push(at, Ev::Deliver { to, from, lane, admitted: true, frame: frame.into() });
    }

    /// Runs `f` on node `i`'s engine at the current virtual time (attaching hosts, registering
    /// memory, posting descriptors), then carries out what it asked for.
    pub fn with_engine<R>(&mut self, i: usize, f: impl FnOnce(&mut Engine, Nanos) -> R) -> R {
        let r = f(&mut self.nodes[i].engine, self.net.now);
        self.drain(i);
        r
    }

    /// Posts `desc` on the submission queue of `host` at node `i`: its engine takes it in when
    /// its admission rule lets it (at once, or after a later event at the node), as a runner
    /// takes descriptors from a host's submission ring.
    pub fn submit(&mut self, i: usize, host: HostId, desc: SubmissionDescriptor) {
        let m = &mut self.nodes[i];
        match m.sq.iter_mut().find(|(h, _)| *h == host) {
            Some((_, q)) => q.push_back(desc),
            None => m.sq.push((host, VecDeque::from([desc]))),
        }
        self.drain(i);
    }

    /// Descriptors posted at node `i` ([`Cluster::submit`]) and not taken in yet.
    pub fn unsubmitted(&self, i: usize) -> usize {
        self.nodes[i].sq.iter().map(|(_, q)| q.len()).sum()
    }

    /// Takes in what node `i`'s hosts posted, as far as the engine admits; true if any.
    fn admit(&mut self, i: usize) -> bool {
        let now = self.net.now;
        let m = &mut self.nodes[i];
        if m.dead(now) {
            return false;
        }
        let mut any = false;
        for (host, q) in m.sq.iter_mut() {
            // Room is counted once per pass, as a runner counts it per burst.
            let room = m.engine.admits(*host, SIM_CQ_ENTRIES).min(q.len());
            for desc in q.drain(..room) {
                m.engine.handle_descriptor(*host, &desc, now);
                any = true;
            }
        }
        any
    }

    /// Runs the next event; returns the node it concerned (for the driver), or `None` when the
    /// queue is empty.
    pub fn step(&mut self) -> Option<Option<usize>> {
        let ev = self.net.pop()?;
        let now = self.net.now;
        let node = match ev {
            Ev::Deliver { to, from, frame, .. } => {
                let to = to as usize;
                if to >= self.nodes.len() || self.nodes[to].dead(now) {
                    return Some(None);
                }
                self.net.delivered += 1;
                self.nodes[to].engine.handle_frame(PeerId(from), &frame, now);
                to
            }
            Ev::Timer { node, at } => {
                let i = node as usize;
                if self.nodes[i].timer != Some(at) || self.nodes[i].dead(now) {
                    return Some(None); // superseded, or dead
                }
                self.nodes[i].timer = None;
                self.nodes[i].engine.handle_timeout(now);
                i
            }
            Ev::Job { node, job } => {
                let i = node as usize;
                let m = &mut self.nodes[i];
                let Some(at) = m.held.iter().position(|(j, _)| *j == job) else { return Some(None) };
                let (job, dma) = m.held.swap_remove(at);
                if m.dead(now) {
                    return Some(None);
                }
                answer(m, job, dma, now);
                i
            }
            Ev::Wake { node } => {
                let i = node as usize;
                if self.nodes[i].dead(now) {
                    return Some(None);
                }
                i
            }
        };
        self.drain(node);
        Some(Some(node))
    }

    /// Carries out node `i`'s actions in order until its engine has nothing more to say, then
    /// re-arms its timer.
    fn drain(&mut self, i: usize) {
        let now = self.net.now;
        loop {
            // What the hosts posted and the engine now admits (completions make room).
            self.admit(i);
            // Jobs answered at once and joins: answered after the drain (the engine is
            // borrowed by the frames it lends while being polled).
            let mut now_jobs: Vec<(JobId, Dma)> = Vec::new();
            let mut joins: Vec<JobId> = Vec::new();
            // A frame lent in parts (a fragment around its channel's bytes) is gathered here, as
            // a fabric gathers it into the wire.
            let mut gathered: Vec<u8> = Vec::new();
            let m = &mut self.nodes[i];
            while let Some(a) = m.engine.poll_action() {
                match a {
                    Action::Send { to, lane, frame } => {
                        self.net.send(i, to.0 as usize, contiguous(&frame, &mut gathered), lane)
                    }
                    Action::Multicast { group, frame } => {
                        self.net.multicast(i, &group, contiguous(&frame, &mut gathered))
                    }
                    Action::Join { job, group } => {
                        self.net.join(group, i);
                        joins.push(job);
                    }
                    Action::Leave { group } => self.net.leave(group, i),
                    Action::Dma { job, dma } => match self.dma {
                        DmaTiming::Late { late, max_ns } if self.dma_rng.chance(late) => {
                            let at = now + 1 + self.dma_rng.below(max_ns.max(1));
                            m.held.push((job, dma));
                            self.net.push(at, Ev::Job { node: i as u32, job });
                        }
                        _ => now_jobs.push((job, dma)),
                    },
                    Action::Complete { host, cqe, .. } => {
                        self.published.push(Published { node: i, host, cqe, at: now })
                    }
                }
            }
            if now_jobs.is_empty() && joins.is_empty() {
                if m.sq.iter().any(|(_, q)| !q.is_empty()) && self.admit(i) {
                    continue;
                }
                break;
            }
            for (job, dma) in now_jobs {
                answer(m, job, dma, now);
            }
            for job in joins {
                m.engine.handle_join_done(job, true, now);
            }
        }
        let m = &mut self.nodes[i];
        let next = m.engine.poll_timeout();
        if next != m.timer {
            m.timer = next;
            if let Some(at) = next {
                self.net.push(at.max(now), Ev::Timer { node: i as u32, at });
            }
        }
    }
}

/// Carries out `job` for node `m` and answers its engine: a root's load summed as it is
/// copied, each fragment's payload CRC computed as its bytes land (`Engine::staging_summed`,
/// as the runner's `mapped` backend does, so that every simulated run seals its roots' frames
/// from the driver's sums), any other job copied ([`carry_out`]).
fn answer(m: &mut Machine, job: JobId, dma: Dma, now: Nanos) {
    if let Dma::Load { src, len } = dma {
        let (mem, engine) = (&mut m.mem, &mut m.engine);
        if let Some(load) = engine.staging_summed(job) {
            let ok = load.bytes.len() as u64 == len
                && mem.range(src.segment.0, src.offset, len).is_some_and(|h| {
                    load.fill(crc32c::crc32c, |off, into| {
                        into.copy_from_slice(&h[off..off + into.len()]);
                        true
                    })
                });
            if ok {
                engine.handle_dma_summed(job, now);
            } else {
                engine.handle_dma_done(job, false, now);
            }
            return;
        }
    }
    let ok = carry_out(m, job, dma);
    m.engine.handle_dma_done(job, ok, now);
}

/// Moves the bytes of `job` between node `m`'s host memory and its engine's staging; `false`
/// when any byte is missing (the job fails).
fn carry_out(m: &mut Machine, job: JobId, dma: Dma) -> bool {
    match dma {
        Dma::Copy { src, dst, len, .. } => {
            let Some(bytes) = m.mem.range(src.segment.0, src.offset, len).map(|s| s.to_vec()) else {
                return false;
            };
            m.mem.range(dst.segment.0, dst.offset, len).map(|d| d.copy_from_slice(&bytes)).is_some()
        }
        Dma::Load { src, len } => {
            let (mem, engine) = (&mut m.mem, &mut m.engine);
            match (mem.range(src.segment.0, src.offset, len), engine.staging(job)) {
                (Some(h), Some(s)) if s.len() as u64 == len => {
                    s.copy_from_slice(h);
                    true
                }
                _ => false,
            }
        }
        Dma::Store { dst, len } => {
            let (mem, engine) = (&mut m.mem, &mut m.engine);
            match (mem.range(dst.segment.0, dst.offset, len), engine.staging(job)) {
                (Some(h), Some(s)) if s.len() as u64 == len => {
                    h.copy_from_slice(s);
                    true
                }
                _ => false,
            }
        }
    }
}

/// `frame`'s bytes in one slice: its one part, or its parts gathered into `buf`.
fn contiguous<'a>(frame: &ringcast_proto::engine::Gather<'a>, buf: &'a mut Vec<u8>) -> &'a [u8] {
    match frame.parts {
        [whole, [], []] => whole,
        _ => {
            buf.clear();
            frame.extend_into(buf);
            buf
        }
    }
}
