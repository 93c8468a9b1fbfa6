//! Experiments on the simulator that reproduce the claims of Hoefler et al. and Yu et al. with
//! the real protocol core: penalty rounds under 50 % multicast loss, latency against cluster
//! size, per-rank completion spread against a binomial tree, the amortised cost of the delayed
//! synchronization against the number of channels, adaptive against fixed root delay, and the
//! repair traffic of eager against selective ring repair.
//!
//! The fabric model here is latency-only (every datagram takes the link latency, plus jitter
//! where stated); the LogGP model with per-message overheads arrives with the simulator issue.
//! Absolute times are therefore in units of the link latency; the shapes are the claims.
use super::fabric::Faults;
use super::world::World;
use ringcast_abi::StatusKind;
use ringcast_proto::comm::auth::{CommKeys, Secret};
use ringcast_proto::comm::Layout;
use ringcast_proto::comm::{CommShared, GroupId, PeerId};
use ringcast_proto::config::{AlgorithmChoice, EngineConfig, RootDelay};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::model::FabricModel;
use ringcast_proto::rng::SimRng;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{CommHandle, Outcome, Post, PostError, Protocol};
use ringcast_proto::Nanos;
use std::sync::Arc;

/// What a sequence of broadcasts measured.
#[derive(Clone, Debug)]
pub struct SeqResult {
    /// `done[k][r] - post[k][root]`: completion of broadcast `k` at rank `r`, from the root's post.
    pub completion: Vec<Vec<Nanos>>,
    /// For each broadcast, the last rank's completion after the last rank's arrival: what the
    /// protocol adds beyond the application's own lateness.
    pub after_last_arrival: Vec<Nanos>,
    /// Virtual time when the last rank finished the last broadcast.
    pub end: Nanos,
    /// Mean penalty rounds over non-root completions.
    pub penalty_mean: f64,
    /// Fragments received by multicast / all fragments received, over non-root completions.
    pub hit_rate: f64,
    /// Repair datagrams and bytes sent, all ranks.
    pub repair_frames: u64,
    /// See `repair_frames`.
    pub repair_bytes: u64,
    /// Synchronizations completed at the root.
    pub syncs: u64,
    /// Completions that were not `Ok` (must be 0 in these experiments).
    pub errors: usize,
    /// Broadcast id from which the communicator failed over to point-to-point, at the root.
    pub failover_from: Option<u32>,
    /// Events the simulator processed.
    pub events: u64,
    /// The algorithm the root's engine used for the first broadcast.
    pub algorithm: Algorithm,
}

impl SeqResult {
    /// Latency of broadcast `k`: the last rank's completion after the root posted.
    pub fn latency(&self, k: usize) -> Nanos {
        self.completion[k].iter().copied().max().unwrap_or(0)
    }

    /// Mean of [`SeqResult::latency`] over broadcasts `from..to`.
    pub fn mean_latency(&self, from: usize, to: usize) -> f64 {
        (from..to).map(|k| self.latency(k) as f64).sum::<f64>() / (to - from).max(1) as f64
    }
}

/// How ranks move from one broadcast to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Rank `r` posts broadcast `k` once it has completed `k - 1`, after `delay(k, r)`: a
    /// loop of blocking `MPI_Bcast`s (the root, done at once, runs ahead).
    Pipelined,
    /// Everybody posts broadcast `k` after all ranks completed `k - 1` (a barrier), each after
    /// `delay(k, r)`: the paper's "ranks arrive at random within a window".
    Barrier,
}

/// Runs `n` broadcasts of `len` bytes from `root` on one communicator of `p` ranks, paced as
/// `pacing` says with the arrival pattern `delay(k, r)`, on the latency-only fabric.
#[allow(clippy::too_many_arguments)]
pub fn run_sequence(
    p: usize,
    len: u32,
    n: usize,
    root: u32,
    config: &EngineConfig,
    faults: Faults,
    seed: u64,
    pacing: Pacing,
    delay: impl FnMut(usize, usize, &mut SimRng) -> Nanos,
) -> SeqResult {
    run_sequence_on(p, len, n, root, config, faults, seed, pacing, delay, None)
}

/// The performance model of a run: the fabric's LogGP parameters and lanes, where the ranks
/// sit, and the algorithm every engine is forced to (`None`: the engine's own choice).
#[derive(Clone, Debug, PartialEq)]
pub struct PerfModel {
    /// Link classes, lanes, switch.
    pub fabric: FabricModel,
    /// Placement of the ranks (nodes of `ppn`, block or cyclic, sites).
    pub layout: Layout,
    /// Forced algorithm.
    pub algorithm: Option<Algorithm>,
}

/// [`run_sequence`] on the fabric `model` prices (the latency-only fabric when `None`).
#[allow(clippy::too_many_arguments)]
pub fn run_sequence_on(
    p: usize,
    len: u32,
    n: usize,
    root: u32,
    config: &EngineConfig,
    faults: Faults,
    seed: u64,
    pacing: Pacing,
    mut delay: impl FnMut(usize, usize, &mut SimRng) -> Nanos,
    model: Option<&PerfModel>,
) -> SeqResult {
    let mut rng = SimRng::new(seed);
    let forced = model.and_then(|m| m.algorithm);
    let layout = model.map(|m| m.layout).unwrap_or_default();
    // One configuration for every rank: its cost model is held once (`Protocol::sibling`).
    let mut first = Protocol::new(config, crc32c::crc32c);
    first.force_algorithm(forced);
    // The simulated fabric copies nothing real, and no experiment reports the per-byte ledger.
    first.count_no_ledger();
    let protos = (0..p).map(|_| first.sibling());
    let mut world = World::new(protos, faults, rng.fork(), crc32c::crc32c);
    if let Some(m) = model {
        world.set_model(m.fabric.clone(), m.layout);
    }
    let handles = one_comm(&mut world, 0xc0ffee, seed, layout);
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
    for r in 0..p {
        // One buffer per rank, reused by every broadcast (the root's holds the message).
        world.nodes[r].mem.insert(1, if r as u32 == root { data.clone() } else { vec![0; len as usize] });
    }
    // Per broadcast: the root's post and the last post (not every rank's: 8 bytes a rank).
    let mut root_post = vec![Nanos::MAX; n];
    let mut last_post = vec![None::<Nanos>; n];
    let mut done = vec![vec![Nanos::MAX; p]; n];
    // Per rank: twice the broadcast it posts next, plus 1 once it has posted it.
    let mut stage = vec![0u32; p];
    let mut due = vec![0 as Nanos; p];
    // Outcomes are folded as they come (a million-rank run keeps no list of them).
    let (mut pen, mut pen_n, mut mc, mut tot, mut errors) = (0u64, 0u64, 0u64, 0u64, 0usize);
    let mut fold = |o: &Outcome| {
        if o.status != StatusKind::Ok {
            errors += 1;
            return;
        }
        // The root's own completion carries no fragment counts.
        let got = o.counters.frags_multicast as u64 + o.counters.frags_repair as u64;
        if got > 0 {
            pen += o.counters.penalty_rounds as u64;
            pen_n += 1;
            mc += o.counters.frags_multicast as u64;
            tot += got;
        }
    };
    for (r, due_r) in due.iter_mut().enumerate() {
        *due_r = delay(0, r, &mut rng);
        world.wake(r, *due_r);
    }
    let mut cursor = 0;
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    let try_post = |world: &mut World,
                    r: usize,
                    due: &[Nanos],
                    stage: &mut [u32],
                    root_post: &mut [Nanos],
                    last_post: &mut [Option<Nanos>]| {
        let k = (stage[r] / 2) as usize;
        if k >= n || world.now() < due[r] || stage[r] % 2 == 1 {
            return;
        }
        let h = handles[r];
        let res = world.with_node(r, |proto, now, env| {
            let mut env = env;
            proto.post_bcast(Post::plain(h, root, buf, len, k as u64), now, &mut env)
        });
        if let Ok(()) | Err(PostError::Refused(_)) = res {
            let now = world.now();
            stage[r] |= 1;
            if r as u32 == root {
                root_post[k] = now;
            }
            last_post[k] = Some(last_post[k].map_or(now, |t| t.max(now)));
        }
    };
    let mut steps = 0u64;
    while let Some(step) = world.step() {
        steps += 1;
        if let Some(r) = step {
            try_post(&mut world, r, &due, &mut stage, &mut root_post, &mut last_post);
        }
        while cursor < world.done().len() {
            let d = world.done()[cursor];
            cursor += 1;
            let k = d.token as usize;
            done[k][d.node] = d.at;
            fold(&d.outcome);
            stage[d.node] = 2 * (k as u32 + 1);
            if pacing == Pacing::Barrier {
                due[d.node] = Nanos::MAX; // held until everybody is done with `k`
            }
            if k + 1 < n {
                match pacing {
                    Pacing::Pipelined => {
                        due[d.node] = d.at + delay(k + 1, d.node, &mut rng);
                        world.wake(d.node, due[d.node]);
                        try_post(&mut world, d.node, &due, &mut stage, &mut root_post, &mut last_post);
                    }
                    Pacing::Barrier if done[k].iter().all(|&t| t != Nanos::MAX) => {
                        for (r, due_r) in due.iter_mut().enumerate() {
                            *due_r = d.at + delay(k + 1, r, &mut rng);
                            world.wake(r, *due_r);
                        }
                    }
                    Pacing::Barrier => {}
                }
            }
        }
        if cursor > 0 {
            world.forget_done();
            cursor = 0;
        }
    }
    let mut res = SeqResult {
        events: steps,
        algorithm: world.nodes[root as usize].proto.choose(p as u32, len, &layout, true),
        end: done.iter().flatten().copied().filter(|&t| t != Nanos::MAX).max().unwrap_or(0),
        completion: Vec::new(),
        after_last_arrival: Vec::new(),
        penalty_mean: 0.0,
        hit_rate: 0.0,
        repair_frames: 0,
        repair_bytes: 0,
        syncs: 0,
        errors: 0,
        failover_from: None,
    };
    res.after_last_arrival = (0..n)
        .map(|k| {
            let last_post = last_post[k].unwrap_or(0);
            let last_done = done[k].iter().copied().filter(|&t| t != Nanos::MAX).max().unwrap_or(0);
            last_done.saturating_sub(last_post)
        })
        .collect();
    // The completion times become the rows in place (a million-rank run allocates no second
    // vector of them at its end).
    for (row, &from) in done.iter_mut().zip(&root_post) {
        row.iter_mut().for_each(|t| *t = t.saturating_sub(from));
    }
    res.completion = done;
    res.errors = errors;
    res.penalty_mean = pen as f64 / pen_n.max(1) as f64;
    res.hit_rate = mc as f64 / tot.max(1) as f64;
    for node in &world.nodes {
        let c = node.proto.counters();
        res.repair_frames += c.repair_frames;
        res.repair_bytes += c.repair_bytes;
    }
    res.syncs = world.nodes[root as usize].proto.counters().syncs;
    res.failover_from = world.nodes[root as usize].proto.failed_over_from(handles[root as usize]);
    res
}

/// One communicator (`cookie`) over every node of `world`, each its own rank, its multicast
/// group joined: the handle at each node.
pub fn one_comm(world: &mut World, cookie: u64, seed: u64, layout: Layout) -> Vec<CommHandle> {
    let p = world.nodes.len();
    let group: GroupId = [7; 14];
    let members: Arc<[PeerId]> = (0..p as u32).map(PeerId).collect();
    world.join(group, (0..p as u32).collect());
    let key = Secret([0x5e; 32]);
    // Its keys derived once, under the ranks' authentication setting, and shared by every rank.
    let auth = world.nodes.first().map_or(Default::default(), |n| n.proto.auth());
    let keys = Arc::new(CommKeys::with_auth(&key, auth));
    // What every rank knows alike, held once: each rank holds a pointer and its own rank.
    let shared = Arc::new(CommShared { cookie, group, members, seed, key, layout });
    (0..p)
        .map(|r| {
            // NOTE(unwrap): one communicator per fresh protocol always fits.
            world.nodes[r].proto.create_comm_shared(&shared, r as u32, &keys).unwrap()
        })
        .collect()
}

/// The paper-like defaults of these experiments: multicast for every size (no small-communicator
/// shortcut), 1500-byte MTU, a quick repair timer.
pub fn paper_config() -> EngineConfig {
    EngineConfig::default().with(|cfg| {
        cfg.protocol.small_comm = 2;
        cfg.protocol.algorithm = AlgorithmChoice::Fixed(Algorithm::Multicast);
        cfg.protocol.repair_timeout_us = 20;
        cfg.protocol.repair_backoff_max_us = 2_000;
    })
}

/// A fabric with link latency `latency` and multicast loss `loss`.
pub fn fabric(latency: Nanos, loss: f64) -> Faults {
    Faults { latency, mcast_loss: loss, ..Faults::clean() }
}

/// Hoefler et al.: mean penalty rounds of a 2-byte broadcast under multicast loss `loss`
/// (paper: 1.0 at 50 %), over `trials` broadcasts at `p` ranks.
pub fn penalty_rounds(p: usize, loss: f64, trials: usize, seed: u64) -> f64 {
    let r = run_sequence(
        p,
        2,
        trials,
        0,
        &paper_config(),
        fabric(2_000, loss),
        seed,
        Pacing::Barrier,
        |_, _, _| 0,
    );
    r.penalty_mean
}

/// One row of a latency-against-size sweep.
#[derive(Clone, Debug)]
pub struct LatencyRow {
    /// Ranks.
    pub p: usize,
    /// Mean latency of the multicast broadcast (ring repair), ns.
    pub multicast_ns: f64,
    /// Mean latency of the binomial point-to-point broadcast, ns.
    pub binomial_ns: f64,
    /// Mean penalty rounds of the multicast broadcast.
    pub penalty: f64,
}

/// Hoefler et al.: latency of a 2-byte broadcast against `p`, multicast vs binomial, with
/// multicast loss `loss` and link latency `latency`.
pub fn latency_vs_p(ps: &[usize], loss: f64, latency: Nanos, trials: usize, seed: u64) -> Vec<LatencyRow> {
    ps.iter()
        .map(|&p| {
            let m = run_sequence(
                p,
                2,
                trials,
                0,
                &paper_config(),
                fabric(latency, loss),
                seed,
                Pacing::Barrier,
                |_, _, _| 0,
            );
            let bin_cfg = paper_config()
                .with(|cfg| cfg.protocol.algorithm = AlgorithmChoice::Fixed(Algorithm::Binomial));
            let b = run_sequence(
                p,
                2,
                trials,
                0,
                &bin_cfg,
                fabric(latency, loss),
                seed,
                Pacing::Barrier,
                |_, _, _| 0,
            );
            LatencyRow {
                p,
                multicast_ns: m.mean_latency(0, trials),
                binomial_ns: b.mean_latency(0, trials),
                penalty: m.penalty_mean,
            }
        })
        .collect()
}

/// Yu et al.: amortised time per 8-byte broadcast over `n` back-to-back broadcasts on `p` ranks,
/// for each number of channels (paper, 8 nodes: 17.1 µs with 2 channels, 4.3 µs with 16).
pub fn channels_sweep(
    p: usize,
    channels: &[u32],
    n: usize,
    latency: Nanos,
    seed: u64,
) -> Vec<(u32, f64, u64)> {
    channels
        .iter()
        .map(|&c| {
            let cfg = paper_config().with(|cfg| cfg.protocol.channels = c);
            let r =
                run_sequence(p, 8, n, 0, &cfg, fabric(latency, 0.0), seed, Pacing::Pipelined, |_, _, _| 0);
            (c, r.end as f64 / n as f64, r.syncs)
        })
        .collect()
}

/// Root delay modes against two arrival phases: receivers up to `late` ns after the root for the
/// first half of `n` broadcasts, then all on time. Returns (mode, mean time from the last rank's
/// arrival to the last completion in phase 1, the same in phase 2, multicast hit rate).
pub fn root_delay_study(
    p: usize,
    n: usize,
    late: Nanos,
    latency: Nanos,
    seed: u64,
) -> Vec<(String, f64, f64, f64)> {
    let modes =
        [RootDelay::None, RootDelay::Fixed((late / 1000) as u32), RootDelay::Random, RootDelay::Adaptive];
    modes
        .iter()
        .map(|&mode| {
            let cfg = paper_config().with(|cfg| {
                cfg.protocol.root_delay = mode;
                cfg.protocol.preposted_slots = 0;
            });
            let r = run_sequence(
                p,
                4096,
                n,
                0,
                &cfg,
                fabric(latency, 0.0),
                seed,
                Pacing::Barrier,
                |k, r, rng| {
                    if r == 0 || k >= n / 2 {
                        0
                    } else {
                        rng.below(late + 1)
                    }
                },
            );
            let mean = |a: usize, b: usize| {
                r.after_last_arrival[a..b].iter().sum::<Nanos>() as f64 / (b - a).max(1) as f64
            };
            (mode.to_string(), mean(0, n / 2), mean(n / 2, n), r.hit_rate)
        })
        .collect()
}

/// Eager against selective ring repair for a `len`-byte message with multicast loss `loss`:
/// (mode, mean latency, repair bytes per broadcast).
pub fn repair_modes(
    p: usize,
    len: u32,
    loss: f64,
    n: usize,
    latency: Nanos,
    seed: u64,
) -> Vec<(&'static str, f64, f64)> {
    [("eager", u32::MAX), ("selective", 0)]
        .iter()
        .map(|&(name, threshold)| {
            let cfg = paper_config().with(|cfg| cfg.protocol.selective_repair_bytes = threshold);
            let r =
                run_sequence(p, len, n, 0, &cfg, fabric(latency, loss), seed, Pacing::Barrier, |_, _, _| 0);
            (name, r.mean_latency(0, n), r.repair_bytes as f64 / n as f64)
        })
        .collect()
}
