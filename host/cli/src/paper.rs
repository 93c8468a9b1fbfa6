//! `ringcast paper`: the broadcast protocol's claims, reproduced on the simulator with the real
//! protocol core (Hoefler et al.: penalty rounds, latency against P, completion spread; Yu et
//! al.: channels; ours: adaptive root delay, selective repair, the barrier on the sync tree). Latency-only fabric model:
//! times are in multiples of the link latency (2 µs here); the shapes are the claims.
//!
//! `ringcast paper --mamidala`: Mamidala et al.'s Figures 5–7 instead — allgather on 64 × 8
//! (block and cyclic), allreduce within one node (single reducer, shmem-parallel,
//! shmem-cyclic on a NUMA and a UMA node), alltoall (the HyperTransport schedules within a
//! node, pairwise with and without node aggregation on 64 × 8) — as schedule models
//! (`ringcast_sim::collectives`) on the fabric of `fixtures/sim/mamidala-leaders-64x8.toml`:
//! tables on stdout, SVG and PNG plots in `--out` (`docs/reproduction.md`).
use crate::report::plot::Chart;
use crate::report::table::Table;
use clap::Args;
use ringcast_offload::config::AlgorithmChoice;
use ringcast_proto::config::EngineConfig;
use ringcast_proto::model::cost::FRAME_OVERHEAD;
use ringcast_proto::model::{FabricModel, LogGp};
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_sim::barrier_study::{barrier_cost, Shape};
use ringcast_sim::collectives::allgather::{self, Allgather};
use ringcast_sim::collectives::allreduce::{self, Allreduce};
use ringcast_sim::collectives::alltoall::{self, Alltoall, NodeSchedule};
use ringcast_sim::collectives::node::NodeMemory;
use ringcast_sim::collectives::Machine;
use ringcast_sim::experiments as ex;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ringcast paper` options.
#[derive(Args)]
pub struct PaperArgs {
    /// Largest P of the latency sweep (16, 116, 1024 and 16384 by default).
    #[arg(long, default_value_t = 16384)]
    max_p: usize,
    /// Broadcasts per point.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mamidala et al.'s Figures 5–7 instead: allgather, allreduce and alltoall schedule models.
    #[arg(long)]
    mamidala: bool,
    /// With --mamidala: a reduced sweep (16 nodes, two sizes per figure), for tests.
    #[arg(long, requires = "mamidala")]
    quick: bool,
    /// With --mamidala: directory for the plots (SVG and PNG).
    #[arg(long, default_value = "docs/sim", requires = "mamidala")]
    out: PathBuf,
    /// With --mamidala: print the tables only.
    #[arg(long, requires = "mamidala")]
    no_files: bool,
    /// With --mamidala: the fabric (and MTU) of this `ringcast sim` scenario instead of
    /// fixtures/sim/mamidala-leaders-64x8.toml's.
    #[arg(long, value_name = "SCENARIO.toml", requires = "mamidala")]
    fabric: Option<PathBuf>,
}

const LATENCY: u64 = 2_000;

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

/// Runs every study and prints its table.
pub fn run(a: PaperArgs) -> ExitCode {
    if a.mamidala {
        return mamidala(&a);
    }
    println!("ringcast paper — link latency {} µs, seed {}\n", LATENCY / 1000, a.seed);

    println!("1. Penalty rounds of a 2-byte broadcast, 50 % multicast loss (Hoefler et al.: 1.0)");
    for p in [16, 116, 1024] {
        println!(
            "   P = {p:5}: mean penalty rounds {:.2}",
            ex::penalty_rounds(p, 0.5, a.trials.max(50), a.seed)
        );
    }

    println!("\n2. 2-byte broadcast latency against P (µs), multicast + ring repair vs binomial tree");
    println!("   {:>6} {:>12} {:>12} {:>12} {:>10}", "P", "mcast 0%", "mcast 50%", "binomial", "penalty");
    let ps: Vec<usize> = [16, 116, 1024, 16384].into_iter().filter(|&p| p <= a.max_p).collect();
    let clean = ex::latency_vs_p(&ps, 0.0, LATENCY, a.trials, a.seed);
    let lossy = ex::latency_vs_p(&ps, 0.5, LATENCY, a.trials, a.seed);
    for (c, l) in clean.iter().zip(&lossy) {
        println!(
            "   {:>6} {:>12} {:>12} {:>12} {:>10.2}",
            c.p,
            us(c.multicast_ns),
            us(l.multicast_ns),
            us(c.binomial_ns),
            l.penalty
        );
    }

    println!("\n3. Per-rank completion at P = 116 (µs after the root's post), 20 % multicast loss");
    let spread = |alg: Algorithm| {
        let cfg = ringcast_sim::experiments::paper_config()
            .with(|cfg| cfg.protocol.algorithm = AlgorithmChoice::Fixed(alg));
        let r = ex::run_sequence(
            116,
            2,
            1,
            0,
            &cfg,
            ex::fabric(LATENCY, 0.2),
            a.seed,
            ex::Pacing::Barrier,
            |_, _, _| 0,
        );
        let mut t: Vec<u64> =
            r.completion[0].iter().enumerate().filter(|(i, _)| *i != 0).map(|(_, &t)| t).collect();
        t.sort_unstable();
        let med = t[t.len() / 2] as f64;
        let dev = t.iter().map(|&x| (x as f64 - med).abs()).sum::<f64>() / t.len() as f64 / med.max(1.0);
        (t[0], med, *t.last().unwrap_or(&0), dev)
    };
    for (name, alg) in [("multicast", Algorithm::Multicast), ("binomial", Algorithm::Binomial)] {
        let (first, med, last, dev) = spread(alg);
        println!(
            "   {name:10} first {:>6} median {:>6} last {:>6}  mean deviation from median {:>5.1} %  first/last {:>5.1} %",
            us(first as f64),
            us(med),
            us(last as f64),
            dev * 100.0,
            first as f64 / last.max(1) as f64 * 100.0
        );
    }

    println!("\n4. Amortised time per 8-byte broadcast, 8 ranks, 1000 broadcasts (Yu et al.: 17.1 → 4.3 µs, 2 → 16 channels)");
    for (c, per, syncs) in ex::channels_sweep(8, &[2, 4, 8, 16], 1000, LATENCY, a.seed) {
        println!("   {c:2} channels: {:>6} µs per broadcast ({syncs} synchronizations)", us(per));
    }

    println!("\n5. Root delay: 32 ranks, 4 KiB, no pre-posted slots; receivers up to 50 µs after the root");
    println!("   (phase 1), then on time (phase 2); µs from the last rank's arrival to the last completion");
    println!("   {:>10} {:>16} {:>16} {:>10}", "mode", "phase 1", "phase 2", "hit rate");
    for (mode, p1, p2, hit) in ex::root_delay_study(32, 200, 50_000, LATENCY, a.seed) {
        println!("   {mode:>10} {:>16} {:>16} {:>9.0} %", us(p1), us(p2), hit * 100.0);
    }

    println!("\n6. Ring repair of a 1 MiB broadcast, 32 ranks, 1 % multicast loss: eager vs selective");
    for (mode, lat, bytes) in ex::repair_modes(32, 1 << 20, 0.01, 10, LATENCY, a.seed) {
        println!(
            "   {mode:10} latency {:>8} µs  repair traffic {:>10.0} KiB per broadcast",
            us(lat),
            bytes / 1024.0
        );
    }

    println!(
        "\n7. Barrier against engines: the synchronization tree vs one 1-byte broadcast per engine (the"
    );
    println!("   composition before), µs per barrier and datagrams received per barrier, no loss");
    println!(
        "   {:>6} {:>12} {:>12} {:>14} {:>14}",
        "E", "tree", "broadcasts", "tree frames", "bcast frames"
    );
    let es: Vec<usize> = [4, 16, 64, 256, 1024, 4096].into_iter().filter(|&e| e <= a.max_p).collect();
    for e in es {
        let t = barrier_cost(e, a.trials, Shape::Tree, LATENCY, a.seed);
        // E² datagrams per barrier: past 64 engines the old composition is only its formula.
        let b = (e <= 64).then(|| barrier_cost(e, a.trials, Shape::Broadcasts, LATENCY, a.seed));
        let (b_us, b_frames) = match b {
            Some(b) => (us(b.latency_ns), format!("{:.0}", b.frames)),
            None => ("—".into(), format!("≥ {}", e * (e - 1))),
        };
        let errors = t.errors + b.map_or(0, |b| b.errors);
        let note = if errors > 0 { format!("  ({errors} not Ok)") } else { String::new() };
        println!("   {e:>6} {:>12} {b_us:>12} {:>14.0} {b_frames:>14}{note}", us(t.latency_ns), t.frames);
    }
    ExitCode::SUCCESS
}

// ---- `--mamidala`: Figures 5–7 of Mamidala et al. as schedule models -------------------------

/// The scenario of the Figure 5(a,b) reproduction: its fabric is the machine of every figure here.
const MAMIDALA_SCENARIO: &str = include_str!("../../../fixtures/sim/mamidala-leaders-64x8.toml");

/// MPICH2's `MPIR_ALLGATHER_LONG_MSG`: below this many bytes in all (and `P` a power of two)
/// MPICH's allgather — and MVAPICH's of 2008 — is recursive doubling, from it the ring.
const MPICH_ALLGATHER_LONG: u64 = 524_288;

/// What one `--mamidala` run sweeps: nodes of 8 ranks, and bytes per figure.
struct Sweep {
    nodes: u32,
    allgather: &'static [u64],
    allreduce: &'static [u64],
    hypertransport: &'static [u64],
    alltoall: &'static [u64],
}

impl Sweep {
    fn new(quick: bool) -> Self {
        if quick {
            return Sweep {
                nodes: 16,
                allgather: &[1024, 65_536],
                allreduce: &[4096, 1 << 20],
                hypertransport: &[65_536, 1 << 20],
                alltoall: &[16, 65_536],
            };
        }
        Sweep {
            nodes: 64,
            allgather: &[256, 1024, 4096, 16_384, 65_536, 262_144],
            allreduce: &[256, 1024, 4096, 16_384, 65_536, 262_144, 1 << 20, 4 << 20],
            hypertransport: &[1024, 4096, 16_384, 65_536, 262_144, 1 << 20],
            alltoall: &[16, 256, 4096, 65_536],
        }
    }
}

/// Runs `--mamidala`: prints every figure's table, writes its plot.
fn mamidala(a: &PaperArgs) -> ExitCode {
    let (origin, text) = match &a.fabric {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => (p.display().to_string(), t),
            Err(e) => {
                eprintln!("ringcast paper: {}: {e}", p.display());
                return ExitCode::from(2);
            }
        },
        None => ("fixtures/sim/mamidala-leaders-64x8.toml".to_string(), MAMIDALA_SCENARIO.to_string()),
    };
    let (fabric, mtu) = match scenario_fabric(&text) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ringcast paper: {origin}: {e}");
            return ExitCode::from(2);
        }
    };
    let payload = mtu.saturating_sub(FRAME_OVERHEAD).max(1);
    let sweep = Sweep::new(a.quick);
    let (s, n) = (&fabric.intra_site, &fabric.intra_node);
    println!("ringcast paper --mamidala — Mamidala et al., Figures 5–7, as schedule models on the simulator");
    println!("   (virtual time; not the engine's own collectives: docs/reproduction.md)");
    println!(
        "   fabric of {origin}: L {} ns, o {} ns, g {} ns, G {} ns/B, switch {} ns, {} B per datagram; \
         shared memory L {} ns, o {} ns, G {} ns/B per core",
        s.latency_ns,
        s.overhead_ns,
        s.gap_ns,
        s.ns_per_byte,
        fabric.switch_ns,
        payload,
        n.latency_ns,
        n.overhead_ns,
        n.ns_per_byte
    );
    let charts = [
        allgather_figure(&fabric, payload, &sweep),
        allreduce_figure(&fabric, &sweep),
        hypertransport_figure(&fabric, &sweep),
        alltoall_figure(&fabric, payload, &sweep),
    ];
    println!(
        "\n== Figure 5(c): L2 cache sharing, socket-block against socket-cyclic placement within a node — \
         not modelled: the simulator has no caches (docs/reproduction.md)"
    );
    if !a.no_files {
        for (stem, chart) in &charts {
            match chart.write(&a.out.join(stem)) {
                Ok(w) => w.iter().for_each(|p| println!("   wrote {}", p.display())),
                Err(e) => {
                    eprintln!("ringcast paper: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}

/// The `[fabric]` section and `engine.mtu` of a `ringcast sim` scenario, over the same defaults
/// `ringcast sim` starts from (`gbps` is `ns_per_byte = 8 / gbps`).
fn scenario_fabric(text: &str) -> Result<(FabricModel, u32), String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
    let num =
        |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64)));
    let mut f = FabricModel::default_cluster();
    if let Some(fab) = doc.get("fabric").and_then(|v| v.as_table()) {
        f.switch_ns = num(fab, "switch_ns").unwrap_or(f.switch_ns);
        f.lanes = num(fab, "lanes").map_or(f.lanes, |l| l as u32).max(1);
        for (key, class) in [("intra_site", &mut f.intra_site), ("intra_node", &mut f.intra_node)] {
            let Some(t) = fab.get(key).and_then(|v| v.as_table()) else { continue };
            *class = LogGp {
                latency_ns: num(t, "latency_ns").unwrap_or(class.latency_ns),
                overhead_ns: num(t, "overhead_ns").unwrap_or(class.overhead_ns),
                gap_ns: num(t, "gap_ns").unwrap_or(class.gap_ns),
                ns_per_byte: num(t, "gbps")
                    .map(|g| 8.0 / g.max(1e-9))
                    .or(num(t, "ns_per_byte"))
                    .unwrap_or(class.ns_per_byte),
            };
        }
    }
    let mtu = doc.get("engine").and_then(|e| e.get("mtu")).and_then(|v| v.as_integer());
    let mtu = mtu.map_or(EngineConfig::default().protocol.mtu, |m| m.clamp(64, 65_000) as u32);
    Ok((f, mtu))
}

/// Microseconds with two decimals; "-" for a schedule that does not apply.
fn us2(ns: Option<f64>) -> String {
    ns.filter(|t| t.is_finite()).map_or("-".into(), |t| format!("{:.2}", t / 1000.0))
}

/// Named curves of one chart, filled point by point (x: bytes, y: µs), on log–log axes.
#[derive(Default)]
struct Lines(Vec<(String, Vec<(f64, f64)>)>);

impl Lines {
    fn point(&mut self, name: &str, bytes: u64, ns: Option<f64>) {
        let Some(ns) = ns.filter(|t| t.is_finite()) else { return };
        let p = (bytes as f64, ns / 1000.0);
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => v.push(p),
            None => self.0.push((name.to_string(), vec![p])),
        }
    }

    fn chart(self, title: String, x_label: &str) -> Chart {
        let mut c = Chart::new(title, x_label, "latency (µs)");
        c.log_x = true;
        c.log_y = true;
        for (name, pts) in self.0 {
            c.add(name, pts);
        }
        c
    }
}

/// Figure 7: allgather on `nodes` × 8, block and cyclic.
fn allgather_figure(fabric: &FabricModel, payload: u32, s: &Sweep) -> (String, Chart) {
    let machine = |cyclic| Machine { fabric: fabric.clone(), nodes: s.nodes, ppn: 8, cyclic, payload };
    let (block, cyclic) = (machine(false), machine(true));
    let p = block.ranks();
    println!(
        "\n== Figure 7: allgather, {} nodes × 8 ranks, µs (paper: leader-based up to 4× faster than MVAPICH's on 64×8)",
        s.nodes
    );
    let mut t = Table::new([
        "bytes",
        "ring_block_us",
        "ring_cyclic_us",
        "rd_block_us",
        "rd_cyclic_us",
        "leaders_us",
        "mcast_engine_us",
        "mcast_procs_us",
        "x_vs_mpich_block",
        "x_vs_mpich_cyclic",
    ]);
    let mut lines = Lines::default();
    let (mut best, mut moved) = ((0.0f64, 0.0f64), 0.0f64);
    for &b in s.allgather {
        let at = |alg, m: &Machine| allgather::time(alg, m, b);
        let ring = (at(Allgather::FlatRing, &block), at(Allgather::FlatRing, &cyclic));
        let rd =
            (at(Allgather::FlatRecursiveDoubling, &block), at(Allgather::FlatRecursiveDoubling, &cyclic));
        let leaders = at(Allgather::Leaders, &block);
        let engine = at(Allgather::MulticastEngineCopies, &block);
        let procs = at(Allgather::MulticastProcessCopies, &block);
        // Placement-aware schedules: block and cyclic must give the same time.
        for (alg, t0) in [
            (Allgather::Leaders, leaders),
            (Allgather::MulticastEngineCopies, engine),
            (Allgather::MulticastProcessCopies, procs),
        ] {
            let (x, y) = (t0.unwrap_or(0.0), at(alg, &cyclic).unwrap_or(0.0));
            moved = moved.max((x - y).abs() / x.max(1.0));
        }
        let mpich = |ring: Option<f64>, rd: Option<f64>| match rd {
            Some(rd) if (p as u64) * b < MPICH_ALLGATHER_LONG => rd,
            _ => ring.unwrap_or(f64::NAN),
        };
        let lead = leaders.unwrap_or(f64::NAN);
        let x = (mpich(ring.0, rd.0) / lead, mpich(ring.1, rd.1) / lead);
        best = (best.0.max(x.0), best.1.max(x.1));
        t.push_row([
            b.to_string(),
            us2(ring.0),
            us2(ring.1),
            us2(rd.0),
            us2(rd.1),
            us2(leaders),
            us2(engine),
            us2(procs),
            format!("{:.2}", x.0),
            format!("{:.2}", x.1),
        ]);
        for (name, v) in [
            ("flat ring, block", ring.0),
            ("flat ring, cyclic", ring.1),
            ("flat recursive doubling, block", rd.0),
            ("flat recursive doubling, cyclic", rd.1),
            ("leader-based (either placement)", leaders),
            ("ringcast multicast, engine copies", engine),
            ("ringcast multicast, process copies", procs),
        ] {
            lines.point(name, b, v);
        }
    }
    print!("{}", t.render());
    println!(
        "   leader-based against MVAPICH's choice (recursive doubling below {} KiB in all, else the ring): \
         up to {:.2}× (block), {:.2}× (cyclic); placement changes leader-based and ringcast by {:.3} % at most",
        MPICH_ALLGATHER_LONG >> 10,
        best.0,
        best.1,
        moved * 100.0
    );
    let title = format!("Allgather, {} nodes × 8 ranks (Mamidala et al. Figure 7)", s.nodes);
    (format!("mamidala-allgather-{}x8", s.nodes), lines.chart(title, "bytes per rank"))
}

/// Figure 6(a,b): allreduce within one node, NUMA Opteron and UMA Clovertown.
fn allreduce_figure(fabric: &FabricModel, s: &Sweep) -> (String, Chart) {
    let nodes =
        [("opteron", NodeMemory::opteron_2008(fabric)), ("clovertown", NodeMemory::clovertown_2008(fabric))];
    println!(
        "\n== Figure 6(a,b): allreduce within one 8-core node, µs (paper: shmem-cyclic best, 23 % (Opteron) and \
         32 % (Clovertown) better than the existing algorithm; parallel = cyclic on the Clovertown)"
    );
    for (_, n) in &nodes {
        let links = n.link_gbps.map_or("no links".into(), |l| format!("links {l} GB/s per direction"));
        println!(
            "   {}: {} sockets × {} cores, {} memory {} GB/s, per core copy {:.1} GB/s and reduce {} GB/s, {links}; \
             call {} ns, flag {} ns",
            n.name,
            n.sockets,
            n.cores_per_socket,
            if n.numa { "one memory per socket," } else { "one memory for all," },
            n.memory_gbps,
            n.copy_gbps,
            n.reduce_gbps,
            n.overhead_ns,
            n.latency_ns
        );
    }
    let mut head = vec!["bytes".to_string()];
    for (tag, _) in &nodes {
        head.extend(["single_us", "parallel_us", "cyclic_us"].map(|c| format!("{tag}_{c}")));
    }
    for (tag, _) in &nodes {
        head.extend(["cyclic_vs_single_pct", "cyclic_vs_parallel_pct"].map(|c| format!("{tag}_{c}")));
    }
    let mut t = Table::new(head);
    let mut lines = Lines::default();
    for &b in s.allreduce {
        let mut row = vec![b.to_string()];
        let mut gains = Vec::new();
        for (tag, n) in &nodes {
            let [single, parallel, cyclic] = Allreduce::ALL.map(|alg| allreduce::time(alg, n, b));
            row.extend([single, parallel, cyclic].map(|v| us2(Some(v))));
            gains.extend(
                [(1.0 - cyclic / single) * 100.0, (1.0 - cyclic / parallel) * 100.0]
                    .map(|g| format!("{g:.1}")),
            );
            for (alg, v) in Allreduce::ALL.into_iter().zip([single, parallel, cyclic]) {
                lines.point(&format!("{tag}: {}", alg.name()), b, Some(v));
            }
        }
        row.extend(gains);
        t.push_row(row);
    }
    print!("{}", t.render());
    let title = "Allreduce within one 8-core node (Mamidala et al. Figure 6(a,b))".to_string();
    ("mamidala-allreduce-node".to_string(), lines.chart(title, "bytes per core"))
}

/// Figure 6(c): pairwise alltoall over the Opteron's HyperTransport, both schedules.
fn hypertransport_figure(fabric: &FabricModel, s: &Sweep) -> (String, Chart) {
    let node = NodeMemory::opteron_2008(fabric);
    println!(
        "\n== Figure 6(c): alltoall within the {} node, pairwise over HyperTransport, µs (paper: the bidirectional \
         schedule about 15 % better)",
        node.name
    );
    let mut t = Table::new(["bytes", "one_direction_us", "bidirectional_us", "gain_pct"]);
    let mut lines = Lines::default();
    for &b in s.hypertransport {
        let [one, two] = NodeSchedule::ALL.map(|sch| alltoall::node_time(sch, &node, b));
        let gain = match (one, two) {
            (Some(o), Some(t)) => format!("{:.1}", (1.0 - t / o) * 100.0),
            _ => "-".into(),
        };
        t.push_row([b.to_string(), us2(one), us2(two), gain]);
        for (sch, v) in NodeSchedule::ALL.into_iter().zip([one, two]) {
            lines.point(sch.name(), b, v);
        }
    }
    print!("{}", t.render());
    let title = format!("Alltoall within one {} node (Mamidala et al. Figure 6(c))", node.name);
    ("mamidala-alltoall".to_string(), lines.chart(title, "bytes per pair"))
}

/// Alltoall across `nodes` × 8: pairwise (block, cyclic) and node-aggregated.
fn alltoall_figure(fabric: &FabricModel, payload: u32, s: &Sweep) -> (String, Chart) {
    let machine = |cyclic| Machine { fabric: fabric.clone(), nodes: s.nodes, ppn: 8, cyclic, payload };
    let (block, cyclic) = (machine(false), machine(true));
    println!(
        "\n== Alltoall, {} nodes × 8 ranks, µs (ours: node-level aggregation; no figure of the paper)",
        s.nodes
    );
    let mut t =
        Table::new(["bytes", "pairwise_block_us", "pairwise_cyclic_us", "aggregated_us", "x_aggregated"]);
    let mut lines = Lines::default();
    for &b in s.alltoall {
        let pair =
            (alltoall::time(Alltoall::Pairwise, &block, b), alltoall::time(Alltoall::Pairwise, &cyclic, b));
        let agg = alltoall::time(Alltoall::NodeAggregated, &block, b);
        t.push_row([
            b.to_string(),
            us2(Some(pair.0)),
            us2(Some(pair.1)),
            us2(Some(agg)),
            format!("{:.2}", pair.0.min(pair.1) / agg),
        ]);
        lines.point("pairwise, block", b, Some(pair.0));
        lines.point("pairwise, cyclic", b, Some(pair.1));
        lines.point("node-aggregated", b, Some(agg));
    }
    print!("{}", t.render());
    let title = format!("Alltoall, {} nodes × 8 ranks", s.nodes);
    (format!("mamidala-alltoall-{}x8", s.nodes), lines.chart(title, "bytes per pair of ranks"))
}
