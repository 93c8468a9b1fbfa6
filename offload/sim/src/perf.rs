//! Performance runs of the real engine core on the LogGP-priced simulated fabric: one
//! [`Point`] (algorithm × ranks × message size × loss) under one [`Setup`] (fabric, placement,
//! configuration), measured as a sequence of broadcasts, and set beside the cost model's
//! prediction. `ringcast sim` sweeps these; `docs/reproduction.md` is made of them.
use super::experiments::{run_sequence_on, Pacing, PerfModel};
use super::fabric::Faults;
use ringcast_proto::comm::Layout;
use ringcast_proto::config::EngineConfig;
use ringcast_proto::model::FabricModel;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::Nanos;
use std::time::Instant;

/// What stays fixed across a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Link classes, lanes, switch.
    pub fabric: FabricModel,
    /// Placement of the ranks.
    pub layout: Layout,
    /// Engine configuration (channels, MTU, timers…).
    pub config: EngineConfig,
    /// Broadcasts per point (latency is their mean).
    pub broadcasts: usize,
    /// Root rank.
    pub root: u32,
    /// Each rank posts each broadcast up to this late after the previous one ended everywhere
    /// (uniform; 0 = all at once).
    pub skew_ns: Nanos,
    /// Faults besides the point's multicast loss: unicast loss, bursts (Gilbert–Elliott),
    /// corruption, duplication, jitter. The fabric's LogGP model prices the trip; `latency` here
    /// is ignored.
    pub faults: Faults,
    /// Seed of the run.
    pub seed: u64,
    /// Broadcasts one after the other with a barrier between them (latency of one broadcast),
    /// or back to back as a benchmark loop runs them (IMB: time per broadcast).
    pub pacing: Pacing,
}

impl Setup {
    /// One broadcast at a time on the default cluster, flat placement.
    pub fn new(fabric: FabricModel, config: EngineConfig) -> Self {
        Setup {
            fabric,
            layout: Layout::FLAT,
            config,
            broadcasts: 4,
            root: 0,
            skew_ns: 0,
            faults: Faults::clean(),
            seed: 1,
            pacing: Pacing::Barrier,
        }
    }
}

/// One simulated configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Forced algorithm (`None`: the engine's choice).
    pub algorithm: Option<Algorithm>,
    /// Communicator size.
    pub ranks: u32,
    /// Message bytes.
    pub bytes: u32,
    /// Multicast loss probability per receiver.
    pub loss: f64,
}

/// What one point measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The point.
    pub point: Point,
    /// The algorithm the engines used.
    pub algorithm: Algorithm,
    /// Barrier pacing: mean over the broadcasts of the last rank's completion after the root's
    /// post. Loop pacing: the whole loop's time divided by the broadcasts.
    pub latency_ns: f64,
    /// Per rank, completion of the last broadcast after the root's post.
    pub per_rank_ns: Vec<Nanos>,
    /// Mean penalty rounds (ring hops beyond the multicast) per non-root completion.
    pub penalty_mean: f64,
    /// Repair (point-to-point data) bytes over all ranks.
    pub repair_bytes: u64,
    /// Completions that were not `Ok`.
    pub errors: usize,
    /// Events the simulator processed.
    pub events: u64,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

impl Measured {
    /// Simulator events per wall-clock second.
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.wall_s.max(1e-9)
    }

    /// Median, earliest and latest non-root completion of the last broadcast.
    pub fn spread(&self, root: u32) -> (Nanos, Nanos, Nanos) {
        let mut v: Vec<Nanos> =
            self.per_rank_ns.iter().enumerate().filter(|&(r, _)| r as u32 != root).map(|(_, &t)| t).collect();
        v.sort_unstable();
        match (v.first(), v.last()) {
            (Some(&lo), Some(&hi)) => (v[v.len() / 2], lo, hi),
            _ => (0, 0, 0),
        }
    }
}

/// Runs one point.
pub fn run_point(setup: &Setup, point: &Point) -> Measured {
    let model = PerfModel { fabric: setup.fabric.clone(), layout: setup.layout, algorithm: point.algorithm };
    let faults = Faults { latency: 0, mcast_loss: point.loss, ..setup.faults.clone() };
    let skew = setup.skew_ns;
    let t0 = Instant::now();
    let r = run_sequence_on(
        point.ranks.max(1) as usize,
        point.bytes,
        setup.broadcasts.max(1),
        setup.root.min(point.ranks.saturating_sub(1)),
        &setup.config,
        faults,
        setup.seed,
        setup.pacing,
        |_, _, rng| if skew == 0 { 0 } else { rng.below(skew + 1) },
        Some(&model),
    );
    let wall_s = t0.elapsed().as_secs_f64();
    let n = r.completion.len();
    Measured {
        point: *point,
        algorithm: r.algorithm,
        latency_ns: match setup.pacing {
            Pacing::Barrier => r.mean_latency(0, n),
            Pacing::Pipelined => r.end as f64 / n.max(1) as f64,
        },
        per_rank_ns: r.completion.last().cloned().unwrap_or_default(),
        penalty_mean: r.penalty_mean,
        repair_bytes: r.repair_bytes,
        errors: r.errors,
        events: r.events,
        wall_s,
    }
}

/// The configuration a simulated rank runs with: the engine's defaults but one communicator,
/// channels and messages as the study needs — a million ranks of the default (64
/// communicators, 4 MiB messages) would be a million engines' worth of tables.
pub fn sim_config(channels: u32, max_message_bytes: u32) -> EngineConfig {
    EngineConfig::default().with(|cfg| {
        cfg.limits.max_comms = 1;
        cfg.protocol.channels = channels;
        cfg.protocol.max_message_bytes = max_message_bytes;
        cfg.protocol.preposted_slots = 2;
        cfg.protocol.repair_timeout_us = 2_000;
        cfg.protocol.repair_backoff_max_us = 5_000;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup { broadcasts: 2, ..Setup::new(FabricModel::default_cluster(), sim_config(4, 1 << 20)) }
    }

    #[test]
    fn multicast_is_flat_in_p_and_binomial_grows() {
        let s = setup();
        let at = |alg, p| {
            let m = run_point(&s, &Point { algorithm: Some(alg), ranks: p, bytes: 8, loss: 0.0 });
            assert_eq!(m.errors, 0);
            m.latency_ns
        };
        let (m16, m1024) = (at(Algorithm::Multicast, 16), at(Algorithm::Multicast, 1024));
        let (b16, b1024) = (at(Algorithm::Binomial, 16), at(Algorithm::Binomial, 1024));
        assert!(m1024 < m16 * 1.5, "multicast {m16} → {m1024}");
        assert!(b1024 > b16 * 2.0, "binomial {b16} → {b1024}");
    }

    #[test]
    fn large_messages_order_as_chiba_table_1() {
        let mut s = setup();
        s.fabric.lanes = 2;
        let at = |alg| {
            let m = run_point(&s, &Point { algorithm: Some(alg), ranks: 31, bytes: 1 << 20, loss: 0.0 });
            assert_eq!(m.errors, 0);
            m.latency_ns
        };
        let (dual, binary, binomial) =
            (at(Algorithm::DualTree), at(Algorithm::BinaryTree), at(Algorithm::Binomial));
        assert!(dual < binary && binary < binomial, "dual {dual} binary {binary} binomial {binomial}");
        assert!(binary / dual > 1.5, "binary ≈ 2× multi-lane: {}", binary / dual);
    }
}
