//! Deterministic simulation testing (TigerBeetle's VOPR habit): a seed draws a whole scenario —
//! cluster size, communicators, broadcasts, configuration *and the fault rates themselves*
//! ("swarm") — runs the whole engine ([`super::cluster`]: intake, the node's communicator and
//! gather tables, the protocol, DMA jobs, in-order completions) on the simulated fabric, and
//! checks invariants:
//!
//! * no panic, whatever the faults;
//! * every broadcast every live rank posted ends exactly once — `Ok` or a typed error — within
//!   a bounded virtual time (no hang), and each host's completions come in the order of its
//!   descriptors;
//! * an `Ok` completion means the rank's buffer in simulated host memory holds exactly the
//!   root's bytes (no completion with wrong data) — read from host memory, not the engine;
//! * in a benign scenario (no crash, no sealed corruption, unicast loss below 50 %) every
//!   broadcast succeeds: loss alone, even 100 % multicast loss, never causes an error;
//! * the protocol's memory stays within what its configuration allows;
//! * foreign and malformed frames are counted and dropped;
//! * an insider who knows a communicator's cookie but not its secret ([`super::forge`]) gets
//!   every forged frame dropped — for its tag (`BadTag`) at a node that holds the
//!   communicator then, for its cookie before it created it or after it let it go — and
//!   forgeries neither deliver wrong bytes nor fail a broadcast (such scenarios stay benign).
//!
//! How a scenario maps onto engines ([`setup`]):
//! * a scenario rank is a host process: up to `layout.ppn` of them share one node's engine
//!   (block or cyclic placement per `layout.cyclic`), each attached with a fixed local rank;
//!   the engines' world holds exactly the ranks each node has — uneven whenever the rank count
//!   does not divide (`RINGCAST_NODE_RANKS`), world ranks numbered node by node;
//!   `layout.sites` has no engine counterpart (an engine gives created communicators a flat
//!   layout) and is not used;
//! * each rank's buffer of each broadcast is a segment of its node's simulated host memory,
//!   registered as a region of its own; broadcasts are `BCAST` descriptors through
//!   [`Engine::handle_descriptor`](ringcast_proto::engine::Engine::handle_descriptor), one at a
//!   time per rank (a process blocking on each) in one global order over the communicators
//!   (see `check::Lane`; several communicators' calls in flight at once, in different orders at
//!   different ranks, are `tests/comm_orders.rs`'s), completions read from the engine's
//!   `Complete` actions;
//! * communicators are created as a host creates them: a `COMM_CREATE` descriptor naming a
//!   creation record in registered host memory (the engine loads it by DMA and joins the group),
//!   back to back at start without arrival skew, and — when the seed says so and its
//!   application gaps stay under the peer timeout — freed with `COMM_FREE` after its last;
//! * about a fifth of the steps on communicators of up to 32 ranks are `ALLGATHER`s instead (half
//!   of them `ALLREDUCE`s of a drawn type and operation), in place or from a send block, drawn
//!   from a stream of their own; the checker computes every block and every reduction itself
//!   (`crate::reference`) and requires the same result bytes at every rank;
//! * a 0-byte broadcast is still posted: the ABI refuses it with `BadLength` at every rank
//!   (checked as exactly that, and reported apart as `empty`);
//! * an unreadable root buffer (an aborted broadcast) is a registered region whose host memory
//!   is gone: the engine's DMA load fails, the root ends with `OutOfBounds` and the others with
//!   `RootFailed`;
//! * a call refused at one rank (3 % of broadcasts, 15 % of composed collectives, from a stream
//!   of their own) names a key nobody registered, or — half of them — a descriptor field its
//!   schedule does not read (a reduction's operation that does not exist, a reserved word
//!   set): it runs in step on no memory; that rank must end `UnknownRegion` or `BadDescriptor`,
//!   every rank that needed its part not `Ok` (`RootFailed` in benign scenarios), and —
//!   benign — no communicator may break;
//! * a crashed rank crashes its node: the engine and every host process on it stop;
//! * DMA jobs are carried out at once or late, as the seed chooses ([`DmaTiming`]).
//!
//! `run(&Scenario::generate(seed, ..))` replays a seed exactly.
mod check;
mod disagree;
mod expect;
mod patterns;
mod report;
mod setup;

pub use super::cluster::DmaTiming;
use super::fabric::Faults;
pub use disagree::{Call as DisagreeingCall, Disagreement};
pub use patterns::{block_pattern, pair_pattern, pattern};
pub use report::{Report, Violation};
use ringcast_abi::frame::DIGEST_LEN;
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_abi::{DataType, ReduceOp};
use ringcast_proto::comm::Layout;
use ringcast_proto::config::{
    AllgatherBetween, AllgatherParts, AlltoallBetween, Auth, Between, EngineConfig, RootDelay,
};
use ringcast_proto::fault::FaultConfig;
use ringcast_proto::rng::SimRng;
use ringcast_proto::schedule::bcast::Algorithm;
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
    /// Steps that are allgathers instead (`bcasts[k].1` is then the block each rank
    /// contributes; the root is not used): `Some(in_place)`.
    pub allgather: Vec<Option<bool>>,
    /// Allgather steps that are allreduces: the element type and operation (the block is a
    /// whole number of elements).
    pub allreduce: Vec<Option<(DataType, ReduceOp)>>,
    /// Allreduce steps that are reduces to their step's root (`bcasts[k].0`) instead.
    pub reduce: Vec<bool>,
    /// Allreduce steps that are prefix reductions instead: `Some(exclusive)` (an exscan, else a
    /// scan; never a reduce).
    pub scan: Vec<Option<bool>>,
    /// Steps that are alltoalls instead (`bcasts[k].1` is then the block per pair).
    pub alltoall: Vec<bool>,
    /// Steps that are barriers instead (`bcasts[k].1` is then the scratch: the communicator's
    /// size, or 0 for a refused one).
    pub barrier: Vec<bool>,
    /// Steps one rank of which (this rank of the communicator) names a buffer nobody
    /// registered: its call is refused for its buffers (`UnknownRegion`) and runs in step on no
    /// memory; whoever needs its part ends `RootFailed`, and the communicator stays usable.
    pub refused: Vec<Option<u32>>,
    /// Of those, the steps whose rank is refused instead for a descriptor field the call's
    /// schedule does not read (`BadDescriptor`: a reduction's operation that does not exist,
    /// or a reserved word set), which runs in step the same way.
    pub refused_field: Vec<bool>,
    /// Of those, the steps whose rank is refused instead for a field that *shapes* the call —
    /// a broadcast's or reduce's root outside the communicator (`BadRoot`), a barrier's flag no
    /// ABI defines (`BadFlags`), another collective's block of 0 bytes (`BadLength`): its
    /// engine learns the call's shape from the other ranks' (`engine/call_shapes.rs`) and runs
    /// it in step the same way.
    pub refused_shape: Vec<bool>,
    /// Steps one rank of which makes another call than the others (issue 38: the same
    /// collective across a boundary of the cost model's choice of exchange, or another
    /// collective): see `dst/disagree.rs`.
    pub disagree: Vec<Option<Disagreement>>,
}

impl CommPlan {
    /// A plan of broadcasts only.
    pub fn broadcasts(members: Vec<usize>, bcasts: Vec<(u32, u32)>, aborted: Vec<bool>) -> CommPlan {
        let allgather = vec![None; bcasts.len()];
        let allreduce = vec![None; bcasts.len()];
        let barrier = vec![false; bcasts.len()];
        let reduce = vec![false; bcasts.len()];
        let scan = vec![None; bcasts.len()];
        let alltoall = vec![false; bcasts.len()];
        let refused = vec![None; bcasts.len()];
        let refused_field = vec![false; bcasts.len()];
        let refused_shape = vec![false; bcasts.len()];
        let disagree = vec![None; bcasts.len()];
        CommPlan {
            members,
            bcasts,
            aborted,
            allgather,
            allreduce,
            reduce,
            scan,
            alltoall,
            barrier,
            refused,
            refused_field,
            refused_shape,
            disagree,
        }
    }
}

/// A complete, replayable scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Ranks (host processes; `layout.ppn` of them per simulated node and engine).
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
    /// Ranks that crash, and when (each takes its node's engine and every rank on it along).
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
    /// Tests only, the planted bug the checker must catch: in every in-place allgather, rank
    /// 0's own block is left out of its receive buffer (as an engine skipping a sub-block
    /// would deliver it).
    pub plant_missing_block: bool,
    /// Tests only, a planted error in the record the checker must catch: rank 0's barrier
    /// posts are recorded a second later than they were made, so every other rank's barrier
    /// appears to have ended before rank 0 arrived.
    pub plant_late_arrival: bool,
    /// Tests only, a planted error the checker must catch: the last rank to finish never
    /// detaches (a process that hangs instead of finalizing), yet is counted as finalized — its
    /// communicators' last epochs cannot settle, which [`Violation::Unsettled`] must report.
    pub plant_no_detach: bool,
    /// The broadcast algorithm every engine uses (`None`: each chooses per call).
    pub algorithm: Option<Algorithm>,
    /// How many ranks share a node's engine (`ppn`), and whether they are placed on nodes
    /// block-wise or cyclically (`sites` is not used: see the module documentation).
    pub layout: Layout,
    /// When the engines' DMA jobs are carried out.
    pub dma: DmaTiming,
    /// Every rank frees each communicator (`COMM_FREE`) after its last broadcast on it.
    pub free_comms: bool,
    /// Collectives a rank keeps in flight (1: it blocks on each; more: non-blocking calls,
    /// completed in any order); creations and releases always run alone.
    pub window: u32,
}

/// Salt of the forger's generator (and of the communicators' secrets): streams of their own.
const FORGE_SALT: u64 = 0xf0f9_ed5e_c7e7_0001;
/// Salt of the engine-side draws (DMA timing, freeing communicators): a stream of its own, so
/// every draw of the scenario before them stays what it was.
const ENGINE_SALT: u64 = 0xe9_91e5_d3a0_0001;

/// Salt of the allgather draws: a stream of their own.
const ALLGATHER_SALT: u64 = 0xa11_6a7e_0001;
/// Salt of the reduce draws: a stream of their own.
const REDUCE_SALT: u64 = 0x4ed0_ce00_0001;
/// Salt of the scan draws: a stream of their own.
const SCAN_SALT: u64 = 0x5ca7_0e5c_0001;
/// Salt of the alltoall draws: a stream of their own.
const ALLTOALL_SALT: u64 = 0xa77_0a77_0001;
/// Salt of the barrier draws: a stream of their own.
const BARRIER_SALT: u64 = 0xba77_1e70_0001;
/// Salt of the stream that turns some allreduces into `MAXLOC`/`MINLOC` on a pair type or a
/// `LOR` into `LXOR` (a stream of its own: the draws of the other streams stay as they were).
const PAIR_SALT: u64 = 0x9a14_10c0_0001;
/// Salt of the draws of calls refused for their buffers: a stream of their own.
const REFUSED_SALT: u64 = 0x4ef0_5ed0_0001;

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
        p.mtu = [256, 1472, 4088, 9000][r.below(4) as usize];
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
            let mut aborted: Vec<bool> = bcasts.iter().map(|&(_, len)| len > 0 && r.chance(0.03)).collect();
            // Allgathers, from a stream of their own (every earlier draw of a seed stays what it
            // was): on communicators of at most 32 ranks (each is one broadcast per rank), with
            // a block of the drawn length spread over the ranks, so the byte budget holds.
            let mut g = SimRng::new(seed ^ ALLGATHER_SALT ^ comms.len() as u64);
            let mut bcasts = bcasts;
            let allgather: Vec<Option<bool>> = (0..bcasts.len())
                .map(|k| {
                    if size > 32 || !g.chance(0.2) {
                        return None;
                    }
                    let len = bcasts[k].1;
                    bcasts[k].1 = if len == 0 { 0 } else { (len / size as u32).max(1) };
                    aborted[k] = false;
                    Some(g.chance(0.5))
                })
                .collect();
            // Half the allgathers are allreduces, of a type and operation drawn from the same
            // stream, on whole elements.
            let mut pairs = SimRng::new(seed ^ PAIR_SALT ^ comms.len() as u64);
            let allreduce: Vec<Option<(DataType, ReduceOp)>> = (0..bcasts.len())
                .map(|k| {
                    allgather[k]?;
                    if !g.chance(0.5) {
                        return None;
                    }
                    let dtype = DataType(g.range(1, 10) as u8);
                    let op = loop {
                        let op = ReduceOp(g.range(1, 9) as u8);
                        if op.supports(dtype) {
                            break op;
                        }
                    };
                    // A quarter become MAXLOC/MINLOC on a pair type; LOR sometimes LXOR.
                    let (dtype, op) = if pairs.chance(0.25) {
                        let max = pairs.chance(0.5);
                        (
                            DataType(pairs.range(11, 16) as u8),
                            if max { ReduceOp::MAXLOC } else { ReduceOp::MINLOC },
                        )
                    } else if op == ReduceOp::LOR && pairs.chance(0.5) {
                        (dtype, ReduceOp::LXOR)
                    } else {
                        (dtype, op)
                    };
                    let size = dtype.size().unwrap_or(1) as u32;
                    bcasts[k].1 -= bcasts[k].1 % size;
                    Some((dtype, op))
                })
                .collect();
            // Barriers, from a stream of their own: on any communicator, in place of some of the
            // remaining broadcasts, with one scratch byte per rank (none: refused, as a 0-byte
            // broadcast is).
            let mut b = SimRng::new(seed ^ BARRIER_SALT ^ comms.len() as u64);
            let barrier: Vec<bool> = (0..bcasts.len())
                .map(|k| {
                    if allgather[k].is_some() || !b.chance(0.1) {
                        return false;
                    }
                    bcasts[k].1 = if bcasts[k].1 == 0 { 0 } else { size as u32 };
                    aborted[k] = false;
                    true
                })
                .collect();
            // Some allreduces are reduces to the step's root, from a stream of their own.
            let mut q = SimRng::new(seed ^ REDUCE_SALT ^ comms.len() as u64);
            let reduce: Vec<bool> = allreduce.iter().map(|a| a.is_some() && q.chance(0.4)).collect();
            // Some of the other allreduces are scans or exscans, from a stream of their own.
            let mut p = SimRng::new(seed ^ SCAN_SALT ^ comms.len() as u64);
            let scan: Vec<Option<bool>> = (0..bcasts.len())
                .map(|k| (allreduce[k].is_some() && !reduce[k] && p.chance(0.3)).then(|| p.chance(0.5)))
                .collect();
            // Alltoalls, from a stream of their own: on communicators of at most 16 ranks, in place
            // of some remaining broadcasts, the block spread so `size²` blocks keep the budget
            // (and a whole send buffer the message limit).
            let mut t = SimRng::new(seed ^ ALLTOALL_SALT ^ comms.len() as u64);
            let alltoall: Vec<bool> = (0..bcasts.len())
                .map(|k| {
                    if size > 16 || allgather[k].is_some() || barrier[k] || !t.chance(0.1) {
                        return false;
                    }
                    let len = bcasts[k].1;
                    let sq = (size * size) as u32;
                    bcasts[k].1 = if len == 0 { 0 } else { (len / sq).clamp(1, (4 << 20) / size as u32 / 2) };
                    aborted[k] = false;
                    true
                })
                .collect();
            // Calls refused at one rank, from a stream of their own: any step
            // of bytes whose root buffer is readable — a composed collective's more often, its
            // exchanges being where a refused rank's partners could be left waiting.
            let mut f = SimRng::new(seed ^ REFUSED_SALT ^ comms.len() as u64);
            // Half of them for a descriptor field instead (`CommPlan::refused_field`).
            let (refused, refused_field): (Vec<Option<u32>>, Vec<bool>) = (0..bcasts.len())
                .map(|k| {
                    let composed = allgather[k].is_some() || alltoall[k];
                    let (rank, often, rarely) = (f.below(size as u64) as u32, f.chance(0.15), f.chance(0.03));
                    let drawn = if composed { often } else { rarely };
                    let rank = (drawn && bcasts[k].1 > 0 && !aborted[k]).then_some(rank);
                    (rank, rank.is_some() && f.chance(0.5))
                })
                .unzip();
            // Of the others, half for a field that shapes the call (`CommPlan::refused_shape`).
            let refused_shape = refused
                .iter()
                .zip(&refused_field)
                .map(|(r, &field)| r.is_some() && !field && f.chance(0.5))
                .collect();
            let disagree = vec![None; bcasts.len()];
            comms.push(CommPlan {
                members: nodes,
                bcasts,
                aborted,
                allgather,
                allreduce,
                reduce,
                scan,
                alltoall,
                barrier,
                refused,
                refused_field,
                refused_shape,
                disagree,
            });
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
            plant_missing_block: false,
            plant_late_arrival: false,
            plant_no_detach: false,
            dma: {
                let mut e = SimRng::new(seed ^ ENGINE_SALT);
                match e.below(4) {
                    0 => DmaTiming::Now,
                    1 => DmaTiming::Late { late: 1.0, max_ns: e.range(100, 20_000) },
                    _ => DmaTiming::Late { late: 0.5, max_ns: e.range(100, 5_000) },
                }
            },
            free_comms: false,
            window: 1,
        }
        .with_free_draw()
        .with_composition_draw()
        .with_auth_draw()
        .with_disagreement_draw()
        .with_window_draw()
    }

    /// Draws the collectives a rank keeps in flight: a third of the scenarios post 2–5
    /// non-blocking calls ahead, from a stream of their own (every other draw of a seed stays
    /// what it was).
    fn with_window_draw(mut self) -> Scenario {
        let mut w = SimRng::new(self.seed ^ ENGINE_SALT ^ 4);
        if w.chance(1.0 / 3.0) {
            self.window = w.range(2, 5) as u32;
        }
        self
    }

    /// `self` with every rank blocking on each call (`window` 1): the scenario a seed drew
    /// before windows were drawn, as the regression tests of that time replay it.
    pub fn blocking(mut self) -> Scenario {
        self.window = 1;
        self
    }

    /// Draws the calls that disagree (`dst/disagree.rs`), from a stream of their own, once the
    /// configuration (whose exchanges' boundaries they cross) is drawn.
    fn with_disagreement_draw(mut self) -> Scenario {
        for (c, steps) in disagree::draw(&self).into_iter().enumerate() {
            self.comms[c].disagree = steps;
        }
        self
    }

    /// Draws `protocol.auth` (half the scenarios each, from a stream of its own, so every other
    /// draw of a seed stays what it was). `tag` presumes nobody but the job's own user writes
    /// the wire, so its scenarios have no sealed corruption (a payload byte changed and the
    /// CRC recomputed: an on-path writer, whom only `mac` stops); every other fault, the
    /// forger (dropped for its tag in both settings) and the planted breaches run in both.
    fn with_auth_draw(mut self) -> Scenario {
        if SimRng::new(self.seed ^ ENGINE_SALT ^ 3).chance(0.5) {
            self.config.protocol.auth = Auth::Tag;
            self.faults.sealed_corrupt = 0.0;
        }
        self
    }

    /// `self` with every engine authenticating by `auth` (`tag`: without sealed corruption,
    /// see [`Scenario::with_auth_draw`]).
    pub fn with_auth(mut self, auth: Auth) -> Scenario {
        self.config.protocol.auth = auth;
        if auth == Auth::Tag {
            self.faults.sealed_corrupt = 0.0;
        }
        self
    }

    /// Draws how the engines compose allgathers and reductions (one part per rank, or
    /// leader-based: one per engine where the ranks allow it), from a stream of its own.
    /// Half the scenarios also reduce in rounds of a small staging (`limits.reduce_staging_bytes`
    /// of 64 bytes to 4 KiB: reductions of many slices, under every fault), half combine the
    /// node results of leader-based allreduces between the leaders over pair communicators
    /// (`protocol.allreduce_between`), half by multicast, half halve blocks from 64 bytes to
    /// 2 KiB on (Rabenseifner's schedule, `protocol.allreduce_halving_bytes`), a quarter exchange
    /// leader-based allgathers' node parts by recursive doubling and a quarter round a ring of
    /// the engines (`protocol.allgather_between`),
    /// and half run alltoalls pairwise between the engines (`protocol.alltoall_between`; half of
    /// those at every block length, `alltoall_pairwise_bytes` 0; half aggregated per node where
    /// engines hold several ranks, `alltoall_aggregate`). Last, a quarter each leave the
    /// allreduce's, the allgather's and the alltoall's exchange to the cost model (`auto`,
    /// `model/exchange.rs`; so the splits above hold for the other three quarters), and half of
    /// all scenarios price engines that share two CPUs (`model.engine_cpus`).
    fn with_composition_draw(mut self) -> Scenario {
        let mut g = SimRng::new(self.seed ^ ENGINE_SALT ^ 2);
        let nodes = g.chance(0.5);
        self.config.protocol.allgather_parts =
            if nodes { AllgatherParts::Nodes } else { AllgatherParts::Ranks };
        if g.chance(0.5) {
            self.config.limits.reduce_staging_bytes = g.range(64, 4096);
        }
        self.config.protocol.allreduce_between =
            if g.chance(0.5) { Between::Doubling } else { Between::Multicast };
        if g.chance(0.5) {
            // Rabenseifner's schedule between the leaders for blocks this short.
            self.config.protocol.allreduce_halving_bytes = g.range(64, 2048) as u32;
        }
        self.config.protocol.allgather_between = match g.below(4) {
            0 => AllgatherBetween::Doubling,
            1 => AllgatherBetween::Ring,
            _ => AllgatherBetween::Multicast,
        };
        self.config.protocol.alltoall_between =
            if g.chance(0.5) { AlltoallBetween::Pairwise } else { AlltoallBetween::Multicast };
        if g.chance(0.5) {
            // Pairwise with several ranks per engine too, at the DST's short blocks.
            self.config.protocol.alltoall_pairwise_bytes = 0;
        }
        self.config.protocol.alltoall_aggregate = g.chance(0.5);
        // Drawn after the others, so the scenarios of a seed without `auto` stay as they were.
        if g.chance(0.25) {
            self.config.protocol.allreduce_between = Between::Auto;
        }
        if g.chance(0.25) {
            self.config.protocol.allgather_between = AllgatherBetween::Auto;
        }
        if g.chance(0.25) {
            self.config.protocol.alltoall_between = AlltoallBetween::Auto;
        }
        if g.chance(0.5) {
            self.config.model.engine_cpus = 2;
        }
        self
    }

    /// Draws whether the ranks free their communicators. Not when an application gap may exceed
    /// the peer timeout: an engine whose every local member freed a communicator waits at most
    /// `peer_timeout_ms` for the other engines to settle it, so a receiver that posts its last
    /// broadcast later than that finds the root's engine gone (`PeerUnreachable`) — the
    /// engine's documented bound, not a fault this scenario means to test.
    fn with_free_draw(mut self) -> Scenario {
        let peer_timeout = self.config.protocol.peer_timeout_ms as Nanos * 1_000_000;
        self.free_comms = SimRng::new(self.seed ^ ENGINE_SALT ^ 1).chance(0.5) && self.skew < peer_timeout;
        self
    }

    /// Like [`Scenario::generate`], with every engine forced to broadcast with `alg`.
    pub fn with_algorithm(seed: u64, max_ranks: usize, alg: Algorithm) -> Scenario {
        Scenario { algorithm: Some(alg), ..Scenario::generate(seed, max_ranks) }
    }

    /// Every broadcast must succeed: no crash, no sealed corruption, unicast mostly working.
    pub fn benign(&self) -> bool {
        self.comms.iter().all(|c| c.disagree.iter().all(Option::is_none))
            && !self.forger_has_key
            && !self.plant_missing_block
            && self.crashes.is_empty()
            && self.faults.sealed_corrupt == 0.0
            && self.faults.ucast_loss + self.fault.drop < 0.5
    }
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
    let setup::Built { mut cluster, procs, handles, forged } = setup::build(s, &mut rng);
    let mut ledger = check::Ledger::new(s, procs, handles, &forged);
    let time_limit: Nanos = 60_000_000_000;
    let mut events = 0u64;
    while let Some(step) = cluster.step() {
        events += 1;
        if events > MAX_EVENTS || cluster.now() > time_limit {
            if let Some(d) = dump.as_mut() {
                d.push_str(&check::dump(&cluster));
            }
            return Err(ledger.first_missing(&cluster).unwrap_or(Violation::Hang {
                rank: 0,
                comm: 0,
                bcast: 0,
                at: cluster.now(),
            }));
        }
        ledger.drain(s, &mut cluster, &mut rng)?;
        if let Some(n) = step {
            ledger.post_ready(s, &mut cluster, n);
            // A post may complete at once (a refused descriptor): free its lane now, or the
            // last post of a run would never be seen.
            ledger.drain(s, &mut cluster, &mut rng)?;
            ledger.watch_release(&cluster, n);
        }
    }
    if let Some(d) = dump.as_mut() {
        d.push_str(&check::dump(&cluster));
    }
    if let Some(v) = ledger.first_missing(&cluster) {
        return Err(v);
    }
    let uneven = {
        let (nodes, at) = setup::placement(s);
        !setup::world(nodes, &at).is_uniform()
    };
    ledger.check(s, &cluster, &forged).map(|r| Report { forged: forged.len() as u64, uneven, ..r })
}
