//! Deterministic simulation testing (TigerBeetle's VOPR habit): a seed draws a whole scenario —
//! cluster size, communicators, broadcasts, configuration *and the fault rates themselves*
//! ("swarm") — runs the real protocol core on the simulated fabric, and checks invariants:
//!
//! * no panic, whatever the faults;
//! * every broadcast every live rank posted ends exactly once — `Ok` or a typed error — within
//!   a bounded virtual time (no hang);
//! * an `Ok` completion carries exactly the root's bytes (no completion with wrong data);
//! * in a benign scenario (no crash, no sealed corruption, unicast loss below 50 %) every
//!   broadcast succeeds: loss alone, even 100 % multicast loss, never causes an error;
//! * the protocol's memory stays within what its configuration allows;
//! * foreign and malformed frames are counted and dropped;
//! * an insider who knows a communicator's cookie but not its secret ([`super::forge`]) gets
//!   every forged frame dropped (`BadTag`): forgeries neither deliver wrong bytes nor fail a
//!   broadcast (such scenarios stay benign).
//!
//! `run(&Scenario::generate(seed, ..))` replays a seed exactly.
use super::fabric::Faults;
use super::forge::{Forger, Target};
use super::world::World;
use ringcast_abi::frame::{DropReason, DIGEST_LEN};
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_abi::StatusKind;
use ringcast_proto::collective::bcast::Algorithm;
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::Layout;
use ringcast_proto::comm::{CommSpec, GroupId, PeerId};
use ringcast_proto::config::{EngineConfig, RootDelay};
use ringcast_proto::fault::FaultConfig;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::rng::SimRng;
use ringcast_proto::transfer::protocol::{CommHandle, Outcome, Post, PostError, Protocol};
use ringcast_proto::Nanos;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One communicator of a scenario.
#[derive(Clone, Debug)]
pub struct CommPlan {
    /// Node of each rank (rank order).
    pub members: Vec<usize>,
    /// Broadcasts in order: (root rank, length).
    pub bcasts: Vec<(u32, u32)>,
    /// Broadcasts whose root buffer is too short to read: the root aborts them.
    pub aborted: Vec<bool>,
}

/// A complete, replayable scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Simulated engines.
    pub ranks: usize,
    /// The state machine's configuration.
    pub config: EngineConfig,
    /// The release-build fault injector's tunables (`RINGCAST_FAULT_*`), as a user would set them.
    pub fault: FaultConfig,
    /// Fabric faults.
    pub faults: Faults,
    /// Communicators and their broadcasts.
    pub comms: Vec<CommPlan>,
    /// Largest delay between a rank's previous completion and its next post (arrival skew).
    pub skew: Nanos,
    /// Nodes that crash, and when.
    pub crashes: Vec<(usize, Nanos)>,
    /// Foreign-job and garbage datagrams injected.
    pub foreign: usize,
    /// Forged datagrams with a valid CRC and a member's cookie but arbitrary header fields and
    /// tag (an insider's garbage): every one is dropped, the scenario stays benign.
    pub hostile: usize,
    /// Whole messages (and control frames) an insider who knows the cookie forges for coming
    /// broadcasts ([`super::forge`]): every frame dropped for its tag.
    pub forged: usize,
    /// The forger holds the communicator's secret (tests only: the planted breach the checker
    /// must catch).
    pub forger_has_key: bool,
    /// The broadcast algorithm every engine uses (`None`: each chooses per call).
    pub algorithm: Option<Algorithm>,
    /// Where the ranks of every communicator sit (hierarchical and multi-site algorithms).
    pub layout: Layout,
}

/// What a passing run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Seed.
    pub seed: u64,
    /// Ranks.
    pub ranks: usize,
    /// Completions checked.
    pub completions: usize,
    /// Of which `Ok`.
    pub ok: usize,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Virtual time at the end.
    pub virtual_ns: Nanos,
    /// Frames dropped (all reasons, all nodes).
    pub dropped: u64,
    /// Fragments received by multicast / by repair, over all non-root completions.
    pub frags_multicast: u64,
    /// See `frags_multicast`.
    pub frags_repair: u64,
    /// Sum of penalty rounds over non-root `Ok` completions, and their count.
    pub penalty_sum: u64,
    /// See `penalty_sum`.
    pub penalty_n: u64,
    /// Whether the scenario counted as benign (every broadcast had to succeed).
    pub benign: bool,
}

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The core panicked.
    Panic(String),
    /// An `Ok` completion delivered bytes other than the root's.
    WrongBytes { node: usize, comm: usize, bcast: usize },
    /// A broadcast completed twice at one rank.
    DoubleCompletion { node: usize, comm: usize, bcast: usize },
    /// A broadcast never completed (hang), or the run exceeded its event/time budget.
    Hang { node: usize, comm: usize, bcast: usize, at: Nanos },
    /// A benign scenario produced an error.
    UnexpectedError { node: usize, comm: usize, bcast: usize, status: StatusKind },
    /// Protocol memory exceeded its configured bound.
    Memory { node: usize, bytes: usize, bound: usize },
    /// Injected foreign frames were not all counted as dropped.
    UncountedForeign { injected: usize, counted: u64 },
    /// Forged frames were not all dropped for their tag.
    UncountedForgery { injected: usize, counted: u64 },
}

/// Salt of the forger's generator (and of the communicators' secrets): streams of their own.
const FORGE_SALT: u64 = 0xf0f9_ed5e_c7e7_0001;

/// Largest `ranks × len × broadcasts` a generated scenario moves (keeps `make test` fast).
const BYTE_BUDGET: u64 = 8 << 20;
/// Event budget of one run.
const MAX_EVENTS: u64 = 20_000_000;

impl Scenario {
    /// Draws a scenario from `seed` with at most `max_ranks` ranks. One seed in twenty draws a
    /// large cluster: 257 up to `max_ranks` ranks when that is above 512, else up to 512 (capped
    /// at `max_ranks`), so every bound up to 512 draws what it always did.
    pub fn generate(seed: u64, max_ranks: usize) -> Scenario {
        let mut r = SimRng::new(seed);
        let ranks = match r.below(100) {
            0..=59 => r.range(2, 16),
            60..=84 => r.range(17, 64),
            85..=94 => r.range(65, 256),
            _ => r.range(257, max_ranks.max(512) as u64),
        }
        .min(max_ranks.max(2) as u64) as usize;

        // Field by field, in the order the seed's draws have always been taken.
        let mut config = EngineConfig::default();
        let p = &mut config.protocol;
        p.channels = [1, 2, 4, 16, 16][r.below(5) as usize];
        p.mtu = [256, 1472, 1472, 9000][r.below(4) as usize];
        p.preposted_slots = [0, 5, 5, 64][r.below(4) as usize];
        p.small_comm = [20, 20, 4, 1000][r.below(4) as usize];
        p.selective_repair_bytes = [65536, 65536, 1024, u32::MAX][r.below(4) as usize];
        p.repair_timeout_us = r.range(20, 200) as u32;
        p.repair_backoff_max_us = 5_000;
        p.escalate_after = r.range(1, 4) as u32;
        p.peer_timeout_ms = 200;
        config.protocol.root_delay = match r.below(5) {
            0 => RootDelay::Fixed(r.range(1, 50) as u32),
            1 => RootDelay::Random,
            2 => RootDelay::Adaptive,
            _ => RootDelay::None,
        };

        // Swarm: the fault rates themselves come from the seed.
        let mut faults = Faults::clean();
        faults.latency = r.range(500, 5_000);
        let profile = r.below(10);
        match profile {
            0 | 1 => {}
            2 => faults.mcast_loss = 1.0,
            3 => {
                faults.mcast_loss = r.below(101) as f64 / 100.0;
                faults.ucast_loss = r.below(31) as f64 / 100.0;
            }
            4 => {
                faults.mcast_loss = 0.3;
                faults.ucast_loss = 0.1;
                faults.burst_enter = 0.05;
                faults.burst_leave = 0.3;
            }
            5 => {
                faults.corrupt = r.below(20) as f64 / 100.0;
                faults.duplicate = r.below(20) as f64 / 100.0;
                faults.jitter = r.range(0, 20_000);
            }
            6 => faults.ucast_loss = 1.0,
            _ => {
                faults.mcast_loss = r.below(101) as f64 / 100.0;
                faults.ucast_loss = r.below(11) as f64 / 100.0;
                faults.corrupt = r.below(5) as f64 / 100.0;
                faults.duplicate = r.below(5) as f64 / 100.0;
                faults.jitter = r.range(0, 10_000);
            }
        }
        // The release-build fault injector (`RINGCAST_FAULT_*`), as a user would switch it on.
        let mut fault = FaultConfig::default();
        if r.chance(0.1) {
            fault.drop = r.below(15) as f64 / 100.0;
            fault.corrupt = r.below(5) as f64 / 100.0;
            fault.duplicate = r.below(5) as f64 / 100.0;
            fault.reorder = r.below(10) as f64 / 100.0;
            fault.delay_us = r.below(20) as u32;
            fault.kinds = ["all", "mcast", "repair,ready", "sync,retransmit"][r.below(4) as usize]
                .parse()
                .unwrap_or(ringcast_proto::fault::FrameKinds::ALL);
            fault.direction = ["tx", "rx", "both"][r.below(3) as usize]
                .parse()
                .unwrap_or(ringcast_proto::fault::FaultDirection::Both);
            fault.seed = r.next_u64() | 1;
        }
        // A valid configuration: the largest message must fit the fragment bitmap.
        let payload = config.protocol.mtu - (WIRE_HEADER_LEN + WIRE_TRAILER_LEN + DIGEST_LEN) as u32;
        config.protocol.max_message_bytes =
            config.protocol.max_message_bytes.min(payload * ringcast_proto::transfer::bitmap::MAX_FRAGS);
        if r.chance(0.08) {
            faults.sealed_corrupt = r.below(5) as f64 / 100.0 + 0.01;
        }

        let ncomms = r.range(1, 3) as usize;
        let mut comms = Vec::with_capacity(ncomms);
        for _ in 0..ncomms {
            let size = if r.chance(0.7) { ranks } else { r.range(1, ranks as u64) as usize };
            let mut nodes: Vec<usize> = (0..ranks).collect();
            for i in (1..nodes.len()).rev() {
                nodes.swap(i, r.below(i as u64 + 1) as usize);
            }
            nodes.truncate(size);
            let nb = r.range(1, if size > 64 { 3 } else { 6 }) as usize;
            let budget = BYTE_BUDGET / (size as u64 * nb as u64).max(1);
            let cap = budget.min(config.protocol.max_message_bytes as u64);
            let bcasts: Vec<(u32, u32)> = (0..nb)
                .map(|_| {
                    let len = match r.below(6) {
                        0 => 0,
                        1 => r.range(1, 64),
                        2 => r.range(65, 4096),
                        3 => r.range(4097, 65536),
                        4 => r.range(65537, 1 << 20),
                        _ => r.range(1, 4 << 20),
                    }
                    .min(cap) as u32;
                    (r.below(size as u64) as u32, len)
                })
                .collect();
            let aborted = bcasts.iter().map(|&(_, len)| len > 0 && r.chance(0.03)).collect();
            comms.push(CommPlan { members: nodes, bcasts, aborted });
        }
        let crashes = if r.chance(0.1) {
            (0..r.range(1, 2)).map(|_| (r.below(ranks as u64) as usize, r.range(0, 2_000_000))).collect()
        } else {
            Vec::new()
        };
        Scenario {
            seed,
            ranks,
            config,
            fault,
            faults,
            comms,
            // Arrival skew; sometimes an application gap far longer than the peer timeout, which
            // a live engine must survive (slow is not dead).
            skew: match r.below(10) {
                0..=3 => r.range(0, 200_000),
                4 => r.range(300_000_000, 600_000_000),
                _ => 0,
            },
            crashes,
            foreign: r.below(20) as usize,
            hostile: if r.chance(0.05) { r.range(1, 40) as usize } else { 0 },
            algorithm: r.chance(0.5).then(|| Algorithm::ALL[r.below(Algorithm::ALL.len() as u64) as usize]),
            layout: Layout { ppn: r.range(1, 8) as u32, cyclic: r.chance(0.5), sites: r.range(1, 3) as u32 },
            // Drawn from a generator of its own, so every earlier draw (and so every seed's
            // scenario from before the forger existed) stays what it was.
            forged: {
                let mut f = SimRng::new(seed ^ FORGE_SALT);
                if f.chance(0.08) {
                    f.range(1, 40) as usize
                } else {
                    0
                }
            },
            forger_has_key: false,
        }
    }

    /// Like [`Scenario::generate`], with every engine forced to broadcast with `alg`.
    pub fn with_algorithm(seed: u64, max_ranks: usize, alg: Algorithm) -> Scenario {
        Scenario { algorithm: Some(alg), ..Scenario::generate(seed, max_ranks) }
    }

    /// Every broadcast must succeed: no crash, no sealed corruption, unicast mostly working.
    pub fn benign(&self) -> bool {
        !self.forger_has_key
            && self.crashes.is_empty()
            && self.faults.sealed_corrupt == 0.0
            && self.faults.ucast_loss + self.fault.drop < 0.5
    }
}

/// The root's bytes of broadcast `k` of communicator `c`.
pub fn pattern(seed: u64, c: usize, k: usize, len: u32) -> Vec<u8> {
    let mut r = SimRng::new(seed ^ ((c as u64) << 40) ^ ((k as u64) << 20) ^ 0x5eed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

fn token(c: usize, k: usize) -> u64 {
    ((c as u64) << 32) | k as u64
}

fn segment(c: usize, k: usize) -> u64 {
    token(c, k) + 1
}

/// Per (node, communicator) driver state: blocking broadcasts, one after the other.
#[derive(Clone, Debug)]
struct Lane {
    comm: usize,
    handle: CommHandle,
    next: usize,
    busy: bool,
    ready_at: Nanos,
}

/// Runs a scenario and checks every invariant.
pub fn run(s: &Scenario) -> Result<Report, Violation> {
    run_traced(s, &mut None)
}

/// Like [`run`]; with `dump` set to `Some`, it receives every node's protocol state at the end
/// (for replaying a failing seed).
pub fn run_traced(s: &Scenario, dump: &mut Option<String>) -> Result<Report, Violation> {
    match catch_unwind(AssertUnwindSafe(|| run_inner(s, dump))) {
        Ok(r) => r,
        Err(p) => Err(Violation::Panic(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        )),
    }
}

fn run_inner(s: &Scenario, dump: &mut Option<String>) -> Result<Report, Violation> {
    let mut rng = SimRng::new(s.seed ^ 0xfab);
    let protos: Vec<Protocol> = (0..s.ranks)
        .map(|_| {
            let mut p = Protocol::new(&s.config, crc32c::crc32c);
            p.force_algorithm(s.algorithm);
            p
        })
        .collect();
    let mut world = World::new(protos, s.faults.clone(), rng.fork(), crc32c::crc32c);
    for &(n, at) in &s.crashes {
        world.nodes[n].crash_at = Some(at);
    }
    world.inject_faults(&s.fault);

    // Communicators, buffers, lanes.
    let mut lanes: Vec<Vec<Lane>> = vec![Vec::new(); s.ranks];
    let mut cookies = Vec::with_capacity(s.comms.len());
    let mut secrets = Vec::with_capacity(s.comms.len());
    let mut frng = SimRng::new(s.seed ^ FORGE_SALT ^ 0x5ec);
    for (c, plan) in s.comms.iter().enumerate() {
        let cookie = rng.next_u64() | 1;
        cookies.push(cookie);
        let mut group: GroupId = [0; 14];
        group.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let seed = rng.next_u64();
        let mut key = [0u8; 32];
        key.iter_mut().for_each(|b| *b = frng.next_u64() as u8);
        let key = Secret(key);
        secrets.push(key);
        let members: std::sync::Arc<[PeerId]> = plan.members.iter().map(|&n| PeerId(n as u32)).collect();
        world.join(group, plan.members.clone());
        for (rank, &node) in plan.members.iter().enumerate() {
            let spec = CommSpec {
                cookie,
                group,
                members: members.clone(),
                my_rank: rank as u32,
                seed,
                key,
                layout: s.layout,
            };
            let handle = world.nodes[node]
                .proto
                .create_comm(spec)
                .map_err(|st| Violation::UnexpectedError { node, comm: c, bcast: 0, status: st })?;
            for (k, &(root, len)) in plan.bcasts.iter().enumerate() {
                let mut bytes =
                    if root as usize == rank { pattern(s.seed, c, k, len) } else { vec![0; len as usize] };
                if root as usize == rank && plan.aborted[k] {
                    bytes.clear(); // unreadable root buffer
                }
                world.nodes[node].mem.insert(segment(c, k), bytes);
            }
            lanes[node].push(Lane { comm: c, handle, next: 0, busy: false, ready_at: 0 });
        }
    }
    for _ in 0..s.foreign {
        let to = rng.below(s.ranks as u64) as usize;
        let at = rng.below(1_000_000);
        let len = rng.range(0, 120) as usize;
        let frame: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        world.inject(to, PeerId(rng.below(s.ranks as u64) as u32), at, frame);
    }
    for _ in 0..s.hostile {
        let len = rng.range(40, 200) as usize;
        let mut f: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        f[0] = ringcast_abi::wire::WIRE_VERSION;
        f[1] = rng.range(1, 6) as u8;
        f[8..16].copy_from_slice(&cookies[rng.below(cookies.len() as u64) as usize].to_le_bytes());
        let n = f.len() - 4;
        let sum = crc32c::crc32c(&f[..n]).to_le_bytes();
        f[n..].copy_from_slice(&sum);
        let to = rng.below(s.ranks as u64) as usize;
        world.inject(to, PeerId(rng.below(s.ranks as u64) as u32), rng.below(2_000_000), f);
    }
    let payload = s.config.protocol.mtu - (WIRE_HEADER_LEN + WIRE_TRAILER_LEN + DIGEST_LEN) as u32;
    let forger =
        if s.forger_has_key { Forger::with_real_key(payload) } else { Forger::new(&mut frng, payload) };
    let mut forged_frames = 0;
    for _ in 0..s.forged {
        let c = frng.below(s.comms.len() as u64) as usize;
        let plan = &s.comms[c];
        let t =
            Target { cookie: cookies[c], members: &plan.members, bcasts: &plan.bcasts, secret: secrets[c] };
        // Early (before or while the broadcasts run) and spread out.
        let at = frng.below(3_000_000);
        for f in forger.forge(&mut frng, &t) {
            forged_frames += 1;
            world.inject(f.to, PeerId(f.from as u32), at + frng.below(50_000), f.frame);
        }
    }
    for n in 0..s.ranks {
        world.wake(n, 0);
    }

    // completions[node][comm][bcast]
    let mut seen: Vec<Vec<Vec<Option<Outcome>>>> =
        (0..s.ranks).map(|_| s.comms.iter().map(|p| vec![None; p.bcasts.len()]).collect()).collect();
    let mut cursor = 0;
    let mut events = 0u64;
    let time_limit: Nanos = 60_000_000_000;
    while let Some(step) = world.step() {
        events += 1;
        if events > MAX_EVENTS || world.now() > time_limit {
            if let Some(d) = dump.as_mut() {
                d.push_str(&dump_world(&world));
            }
            return Err(first_missing(&seen, &world, &lanes).unwrap_or(Violation::Hang {
                node: 0,
                comm: 0,
                bcast: 0,
                at: world.now(),
            }));
        }
        drain(s, &mut world, &mut lanes, &mut seen, &mut cursor, &mut rng)?;
        if let Some(n) = step {
            post_ready(s, &mut world, &mut lanes[n], n, &mut seen);
            // A root completes inside its post: free its lane now, or the last post of a run
            // would never be seen.
            drain(s, &mut world, &mut lanes, &mut seen, &mut cursor, &mut rng)?;
        }
    }
    if let Some(d) = dump.as_mut() {
        d.push_str(&dump_world(&world));
    }
    if let Some(v) = first_missing(&seen, &world, &lanes) {
        return Err(v);
    }
    check(s, &seen, &world, forged_frames)
}

/// Every node's protocol state, for replaying a failing seed.
fn dump_world(world: &World) -> String {
    let mut d = String::new();
    for (i, n) in world.nodes.iter().enumerate() {
        d.push_str(&format!(
            "node {i} drops {:?} armed {:?} next {:?} fired {} handled {}\n{}",
            n.proto.counters().drops,
            n.armed(),
            n.proto.next_timeout(),
            n.fired,
            n.handled,
            n.proto.describe()
        ));
    }
    d
}

type Seen = Vec<Vec<Vec<Option<Outcome>>>>;

/// Records new completions (each must be the first for its broadcast at its node) and frees
/// their lanes: the next post of that lane is due after a random arrival skew.
fn drain(
    s: &Scenario,
    world: &mut World,
    lanes: &mut [Vec<Lane>],
    seen: &mut Seen,
    cursor: &mut usize,
    rng: &mut SimRng,
) -> Result<(), Violation> {
    while *cursor < world.done().len() {
        let d = world.done()[*cursor];
        *cursor += 1;
        let (c, k) = ((d.token >> 32) as usize, (d.token & 0xffff_ffff) as usize);
        if seen[d.node][c][k].replace(d.outcome).is_some() {
            return Err(Violation::DoubleCompletion { node: d.node, comm: c, bcast: k });
        }
        if let Some(l) = lanes[d.node].iter_mut().find(|l| l.comm == c) {
            l.busy = false;
            l.ready_at = d.at + if s.skew > 0 { rng.below(s.skew + 1) } else { 0 };
            world.wake(d.node, l.ready_at);
        }
    }
    Ok(())
}

/// Posts every lane of node `n` whose previous broadcast completed and whose time has come.
fn post_ready(
    s: &Scenario,
    world: &mut World,
    lanes: &mut [Lane],
    n: usize,
    seen: &mut [Vec<Vec<Option<Outcome>>>],
) {
    let now = world.now();
    for l in lanes.iter_mut() {
        let plan = &s.comms[l.comm];
        while !l.busy && l.next < plan.bcasts.len() && now >= l.ready_at {
            let (root, len) = plan.bcasts[l.next];
            let (c, k) = (l.comm, l.next);
            let buf = Resolved { segment: SegmentHandle(segment(c, k)), offset: 0 };
            let handle = l.handle;
            let r = world.with_node(n, |p, now, env| {
                let mut env = env;
                p.post_bcast(Post { comm: handle, root, buf, len, token: token(c, k) }, now, &mut env)
            });
            match r {
                Ok(()) => {
                    // Busy until its completion is drained (a root's is already in).
                    l.next += 1;
                    l.busy = true;
                }
                Err(PostError::WouldBlock) => break,
                Err(PostError::Refused(status)) => {
                    seen[n][c][k] = Some(Outcome { status, bytes: 0, counters: Default::default() });
                    l.next += 1;
                }
            }
        }
        if !l.busy && l.next < plan.bcasts.len() && now < l.ready_at {
            world.wake(n, l.ready_at);
        }
    }
}

/// The first broadcast a live node posted or had to post that never completed.
fn first_missing(
    seen: &[Vec<Vec<Option<Outcome>>>],
    world: &World,
    lanes: &[Vec<Lane>],
) -> Option<Violation> {
    for (node, ls) in lanes.iter().enumerate() {
        if world.nodes[node].crash_at.is_some() {
            continue;
        }
        for l in ls {
            if let Some(k) = seen[node][l.comm].iter().position(Option::is_none) {
                return Some(Violation::Hang { node, comm: l.comm, bcast: k, at: world.now() });
            }
        }
    }
    None
}

fn check(
    s: &Scenario,
    seen: &[Vec<Vec<Option<Outcome>>>],
    world: &World,
    forged_frames: u64,
) -> Result<Report, Violation> {
    let benign = s.benign();
    let mut rep =
        Report { seed: s.seed, ranks: s.ranks, benign, virtual_ns: world.now(), ..Report::default() };
    rep.delivered = world.delivered();
    let largest = s.comms.iter().flat_map(|p| p.bcasts.iter().map(|b| b.1)).max().unwrap_or(0) as usize;
    for (node, per_comm) in seen.iter().enumerate() {
        let n = &world.nodes[node];
        // Benign: nothing may leave a communicator broken (a slow rank is not a dead one).
        if benign && n.proto.any_broken() {
            return Err(Violation::UnexpectedError {
                node,
                comm: 0,
                bcast: 0,
                status: StatusKind::CommunicatorBroken,
            });
        }
        let bound = n.proto.memory_bound(largest);
        let bytes = n.proto.memory_bytes();
        if bytes > bound {
            return Err(Violation::Memory { node, bytes, bound });
        }
        rep.dropped += n.proto.counters().drops.iter().sum::<u64>();
        for (c, outs) in per_comm.iter().enumerate() {
            let Some(rank) = s.comms[c].members.iter().position(|&m| m == node) else { continue };
            for (k, out) in outs.iter().enumerate() {
                let Some(o) = out else { continue };
                rep.completions += 1;
                let (root, len) = s.comms[c].bcasts[k];
                let aborted = s.comms[c].aborted[k];
                if aborted && o.status == StatusKind::Ok {
                    return Err(Violation::WrongBytes { node, comm: c, bcast: k });
                }
                let expected_abort =
                    aborted && matches!(o.status, StatusKind::RootFailed | StatusKind::OutOfBounds);
                if o.status != StatusKind::Ok {
                    if benign && !expected_abort {
                        return Err(Violation::UnexpectedError { node, comm: c, bcast: k, status: o.status });
                    }
                    continue;
                }
                rep.ok += 1;
                let want = pattern(s.seed, c, k, len);
                if n.mem.get(&segment(c, k)).map(Vec::as_slice) != Some(&want[..]) {
                    return Err(Violation::WrongBytes { node, comm: c, bcast: k });
                }
                if root as usize != rank {
                    rep.frags_multicast += o.counters.frags_multicast as u64;
                    rep.frags_repair += o.counters.frags_repair as u64;
                    rep.penalty_sum += o.counters.penalty_rounds as u64;
                    rep.penalty_n += 1;
                }
            }
        }
    }
    // Every injected frame that reached a live node is counted under some drop reason.
    let counted: u64 = world
        .nodes
        .iter()
        .map(|n| {
            let d = n.proto.counters().drops;
            [DropReason::TooShort, DropReason::BadCrc, DropReason::BadVersion, DropReason::UnknownKind]
                .iter()
                .map(|r| d[*r as usize])
                .sum::<u64>()
        })
        .sum();
    if s.crashes.is_empty() && s.faults.corrupt == 0.0 && counted < s.foreign as u64 * 9 / 10 {
        return Err(Violation::UncountedForeign { injected: s.foreign, counted });
    }
    // Every forged frame that reached a live node unaltered was dropped for its tag (the
    // release-build injector may drop or corrupt it on receipt; a crash may swallow it).
    let bad_tags: u64 =
        world.nodes.iter().map(|n| n.proto.counters().drops[DropReason::BadTag as usize]).sum();
    let untouched = s.fault.drop == 0.0 && s.fault.corrupt == 0.0;
    if !s.forger_has_key && s.crashes.is_empty() && untouched && bad_tags < forged_frames {
        return Err(Violation::UncountedForgery { injected: forged_frames as usize, counted: bad_tags });
    }
    Ok(rep)
}
