//! `ringcast demo`: the main job. Thousands of broadcasts from changing roots on an emulated
//! cluster — by default 8 nodes × 2 processes, one engine daemon per node on the `shm` fabric,
//! 2 % of multicast datagrams lost at the receivers and random arrival skew — with every byte
//! checked at every rank, then the same workload with the binomial tree on the same fabric.
//!
//! The engines choose the algorithm per call with the cost model fitted to this machine's `shm`
//! fabric (`fixtures/calibration/shm.toml`, written by `ringcast calibrate`), with multicast
//! allowed from 4 nodes, and keep up to 1024 fragments that arrive before their local
//! processes post (Hoefler's NIC had 5 pre-posted receives; an engine has the memory). The report: latency per size (median, p99, over every rank and
//! broadcast), completion spread across ranks (last minus first completion of one broadcast,
//! on the machine-wide monotonic clock), multicast hit rate, penalty rounds, repair requests
//! and repair datagrams, CRC and other drops, the algorithm chosen per size, and the binomial
//! run beside it with the ratio; a plot of both goes to `--out`.
//!
//! Exits non-zero if any rank saw a wrong byte or an error.
use crate::cluster::{Cluster, Mode, Spec};
use crate::report::plot::Chart;
use crate::report::table::Table;
use crate::workload::schedule;
use clap::Args;
use ringcast_host::Config;
use ringcast_proto::comm::Layout;
use ringcast_proto::model::compose::{self, Exchange};
use ringcast_proto::model::select::Selector;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The fitted LogGP parameters of the shm fabric (`ringcast calibrate --fabric shm`).
const SHM_CALIBRATION: &str = include_str!("../../../fixtures/calibration/shm.toml");

/// Pre-posted receive slots per engine: every fragment of a 1 MiB broadcast at the default MTU.
const PREPOSTED: u32 = 1024;

/// `ringcast demo` options (the defaults are the main job).
#[derive(Args)]
pub struct DemoArgs {
    /// Nodes (engines).
    #[arg(short = 'n', long, default_value_t = 8)]
    nodes: u32,
    /// Processes per node.
    #[arg(short = 'p', long = "procs-per-node", default_value_t = 2)]
    ppn: u32,
    /// Engines as daemons (DPU emulation) or polling threads in the programs.
    #[arg(long, value_enum, default_value_t = Mode::Daemon)]
    mode: Mode,
    /// Fabric: shm or udp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "udp"])]
    fabric: String,
    /// udp: one network namespace per node on a Linux bridge (root).
    #[arg(long)]
    netns: bool,
    /// Broadcasts per run.
    #[arg(long, default_value_t = 4000)]
    count: u32,
    /// Message sizes drawn from, in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [2u64, 64, 1024, 16384, 65536, 262144, 1048576])]
    sizes: Vec<u64>,
    /// Fraction of multicast datagrams each receiving engine drops.
    #[arg(long, default_value_t = 0.02)]
    loss: f64,
    /// Largest random arrival skew before each broadcast, per rank, in microseconds.
    #[arg(long, default_value_t = 100)]
    skew_us: u64,
    /// Seed of the schedule, the patterns and the faults.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Where the plot goes.
    #[arg(long, default_value = "target/ringcast-demo")]
    out: PathBuf,
}

/// One rank's record of one broadcast.
#[derive(Clone, Copy, Debug)]
struct Rec {
    k: u32,
    size: u64,
    root: u32,
    lat_ns: u64,
    done_ns: u64,
    mc: u64,
    rep: u64,
    pen: u64,
    retx: u64,
}

/// What one run produced.
#[derive(Debug, Default)]
struct RunResult {
    wall: Duration,
    /// Index = world rank.
    recs: Vec<Vec<Rec>>,
    /// Engine counters summed over nodes: syncs, overrun, crc, other drops, repair frames.
    net: [u64; 5],
    /// Allgather latencies (ns), every rank's, every block verified by the ranks.
    gathers: Vec<u64>,
    /// Allreduce latencies (ns), every result verified by the ranks.
    reduces: Vec<u64>,
    /// Barrier times (ns, from this rank's arrival), each checked against every arrival.
    barriers: Vec<u64>,
    /// Reduce latencies (ns), each result verified by its root.
    rooted: Vec<u64>,
    /// Alltoall latencies (ns), every block verified by its receiver.
    exchanges: Vec<u64>,
}

/// Allgathers each rank runs after its broadcasts (4,000-byte blocks, alternately in place);
/// as many allreduces (4 KiB of 64-bit integers and doubles, checked bit for bit against the
/// rank's own reduction in the engine's order), barriers (each rank checking it left no earlier than
/// the last one arrived), reduces (2 KiB, the root moving round the ranks, checked by the root)
/// and alltoalls (512-byte blocks, every block checked) after them.
const ALLGATHERS: u32 = 8;

/// The settings both runs share, plus `algorithm`.
fn engine_env(a: &DemoArgs, algorithm: &str) -> Result<Vec<(String, String)>, String> {
    let cal: toml::Value = toml::from_str(SHM_CALIBRATION).map_err(|e| format!("calibration: {e}"))?;
    let site =
        cal.get("fabric").and_then(|f| f.get("intra_site")).ok_or("calibration: no [fabric.intra_site]")?;
    let num =
        |k: &str| site.get(k).and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64))).unwrap_or(0.0);
    Ok([
        ("RINGCAST_ALGORITHM", algorithm.to_string()),
        ("RINGCAST_SMALL_COMM", "4".to_string()),
        ("RINGCAST_MODEL_LATENCY_NS", num("latency_ns").to_string()),
        ("RINGCAST_MODEL_OVERHEAD_NS", num("overhead_ns").to_string()),
        ("RINGCAST_MODEL_NS_PER_BYTE", num("ns_per_byte").to_string()),
        ("RINGCAST_MODEL_SWITCH_NS", "0".to_string()),
        ("RINGCAST_FAULT_DROP", a.loss.to_string()),
        ("RINGCAST_FAULT_KINDS", "mcast".to_string()),
        ("RINGCAST_FAULT_DIRECTION", "rx".to_string()),
        ("RINGCAST_FAULT_SEED", a.seed.to_string()),
        // An engine keeps fragments that arrive before its local processes posted: Hoefler's
        // NIC had 5 pre-posted receives; an engine has the memory for a whole 1 MiB message.
        ("RINGCAST_PREPOSTED_SLOTS", PREPOSTED.to_string()),
        // Errors reach the report through the ranks; the engines' start/stop lines would bury it.
        ("RINGCAST_LOG_LEVEL", "0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect())
}

fn run_once(a: &DemoArgs, algorithm: &str) -> Result<RunResult, String> {
    let env = engine_env(a, algorithm)?;
    let args: Vec<String> = [
        "workload-rank".to_string(),
        "--count".into(),
        a.count.to_string(),
        "--sizes".into(),
        a.sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
        "--seed".into(),
        a.seed.to_string(),
        "--skew-us".into(),
        a.skew_us.to_string(),
        "--allgathers".into(),
        ALLGATHERS.to_string(),
        "--allgather-block".into(),
        "4000".into(),
        "--allreduces".into(),
        ALLGATHERS.to_string(),
        "--barriers".into(),
        ALLGATHERS.to_string(),
        "--reduces".into(),
        ALLGATHERS.to_string(),
        "--alltoalls".into(),
        ALLGATHERS.to_string(),
    ]
    .to_vec();
    let started = Instant::now();
    let spec = Spec {
        nodes: a.nodes,
        ppn: a.ppn,
        node_ranks: Vec::new(),
        mode: a.mode,
        fabric: a.fabric.clone(),
        netns: a.netns,
        keep_going: false,
    };
    let mut cluster = Cluster::start(&spec, "self", &args, &env, true)?;
    let results = cluster.wait(Duration::from_secs(900));
    drop(cluster);
    let mut run = RunResult { wall: started.elapsed(), ..Default::default() };
    for (rank, (status, out)) in results.iter().enumerate() {
        if !status.is_some_and(|s| s.success()) {
            return Err(format!("{algorithm}: rank {rank} failed (its error is above)"));
        }
        let mut recs = Vec::with_capacity(a.count as usize);
        for l in out.lines() {
            let f: Vec<u64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            match (l.as_bytes().first(), f.as_slice()) {
                (Some(b'B'), &[k, size, root, lat_ns, done_ns, mc, rep, pen, retx]) => recs.push(Rec {
                    k: k as u32,
                    size,
                    root: root as u32,
                    lat_ns,
                    done_ns,
                    mc,
                    rep,
                    pen,
                    retx,
                }),
                (Some(b'G'), &[_, _, _, lat_ns]) => run.gathers.push(lat_ns),
                (Some(b'R'), &[_, _, _, lat_ns]) => run.reduces.push(lat_ns),
                (Some(b'W'), &[_, _, lat_ns]) => run.barriers.push(lat_ns),
                (Some(b'D'), &[_, _, _, lat_ns]) => run.rooted.push(lat_ns),
                (Some(b'X'), &[_, _, _, lat_ns]) => run.exchanges.push(lat_ns),
                (Some(b'N'), &[syncs, overrun, crc, other, repair]) => {
                    for (t, v) in run.net.iter_mut().zip([syncs, overrun, crc, other, repair]) {
                        *t += v;
                    }
                }
                _ => {}
            }
        }
        for (kind, what) in [
            ("G ", "allgathers"),
            ("R ", "allreduces"),
            ("W ", "barriers"),
            ("D ", "reduces"),
            ("X ", "alltoalls"),
        ] {
            let n = out.lines().filter(|l| l.starts_with(kind)).count();
            if n != ALLGATHERS as usize {
                return Err(format!("{algorithm}: rank {rank} reported {n} of {ALLGATHERS} {what}"));
            }
        }
        if recs.len() != a.count as usize {
            return Err(format!(
                "{algorithm}: rank {rank} reported {} of {} broadcasts",
                recs.len(),
                a.count
            ));
        }
        run.recs.push(recs);
    }
    Ok(run)
}

fn quantile(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize] as f64
}

/// Per size: (median, p99 latency; median, p99 spread), in microseconds.
fn per_size(run: &RunResult) -> BTreeMap<u64, [f64; 4]> {
    let mut lat: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut spread: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let count = run.recs.first().map_or(0, Vec::len);
    for k in 0..count {
        let size = run.recs[0][k].size;
        let done = run.recs.iter().map(|r| r[k].done_ns);
        let (lo, hi) = done.fold((u64::MAX, 0), |(lo, hi), d| (lo.min(d), hi.max(d)));
        spread.entry(size).or_default().push(hi - lo);
        lat.entry(size).or_default().extend(run.recs.iter().map(|r| r[k].lat_ns));
    }
    lat.into_iter()
        .map(|(size, mut l)| {
            let s = spread.get_mut(&size).map(Vec::as_mut_slice).unwrap_or_default();
            let us = |x: f64| x / 1000.0;
            (
                size,
                [
                    us(quantile(&mut l, 0.5)),
                    us(quantile(&mut l, 0.99)),
                    us(quantile(s, 0.5)),
                    us(quantile(s, 0.99)),
                ],
            )
        })
        .collect()
}

fn human(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// `ringcast demo`.
pub fn run(a: DemoArgs) -> ExitCode {
    match demo(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringcast demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn demo(a: &DemoArgs) -> Result<(), String> {
    let c = a;
    if a.sizes.is_empty() || a.count == 0 {
        return Err("nothing to do: no sizes or no broadcasts".into());
    }
    let world = c.nodes * c.ppn;
    let mode = if c.mode == Mode::Daemon { "one engine daemon per node" } else { "engine threads" };
    println!("ringcast demo — verified broadcasts on an emulated cluster");
    println!(
        "  cluster : {} nodes x {} processes ({world} ranks), {mode}, {} fabric{}",
        c.nodes,
        c.ppn,
        c.fabric,
        if c.netns { " across network namespaces" } else { "" }
    );
    println!(
        "  faults  : {:.1} % of multicast datagrams dropped at each receiving engine; arrival skew up to {} us per rank",
        a.loss * 100.0,
        a.skew_us
    );
    println!(
        "  workload: {} broadcasts of {} from changing roots (seed {}), every byte checked at every rank",
        a.count,
        a.sizes.iter().map(|&s| human(s)).collect::<Vec<_>>().join(", "),
        a.seed
    );
    println!("  choice  : cost model fitted to this machine's shm fabric (fixtures/calibration/shm.toml), multicast from 4 nodes");
    println!("  engines : {PREPOSTED} pre-posted receive slots each (fragments that arrive before the local processes post)");
    println!();
    let mut runs = Vec::new();
    for alg in ["auto", "binomial"] {
        print!("  running {alg:<9}... ");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let r = run_once(a, alg)?;
        println!("{} broadcasts x {world} ranks verified in {:.1} s", a.count, r.wall.as_secs_f64());
        runs.push(r);
    }
    let (ours, base) = (&runs[0], &runs[1]);
    // The engines' choice per size, computed with their configuration.
    let env = engine_env(a, "auto")?;
    let lookup =
        |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).or_else(|| std::env::var(k).ok());
    let config = Config::from_lookup(lookup).map_err(|e| e.to_string())?;
    let selector = Selector::from_config(&config.engine());
    let a_stats = per_size(ours);
    let b_stats = per_size(base);
    let mut t = Table::new([
        "size",
        "algorithm",
        "n",
        "median us",
        "p99 us",
        "spread med us",
        "spread p99 us",
        "binomial med us",
        "binomial p99 us",
        "binomial/ours",
    ]);
    let mut curves = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for (&size, s) in &a_stats {
        let b = b_stats.get(&size).copied().unwrap_or_default();
        let n = (0..a.count).filter(|&k| schedule(a.seed, k, &a.sizes, world).0 == size).count();
        let alg = selector.choose(c.nodes, size, &Layout::FLAT, true);
        t.push_row([
            human(size),
            alg.to_string(),
            n.to_string(),
            format!("{:.1}", s[0]),
            format!("{:.1}", s[1]),
            format!("{:.1}", s[2]),
            format!("{:.1}", s[3]),
            format!("{:.1}", b[0]),
            format!("{:.1}", b[1]),
            format!("{:.2}x", b[0] / s[0].max(1e-9)),
        ]);
        curves[0].push((size as f64, s[0]));
        curves[1].push((size as f64, s[1]));
        curves[2].push((size as f64, b[0]));
        curves[3].push((size as f64, b[1]));
    }
    println!();
    println!(
        "latency per rank and broadcast (post to completion, arrival skew included) and completion spread:"
    );
    print!("{}", t.render());
    println!();
    for (name, r) in [("ours", ours), ("binomial", base)] {
        let receivers =
            r.recs.iter().enumerate().flat_map(|(rank, v)| v.iter().filter(move |x| x.root != rank as u32));
        let (mut mc, mut all, mut pen_sum, mut pen_n, mut pen_max, mut retx) = (0, 0, 0, 0, 0, 0);
        for x in receivers {
            mc += x.mc;
            all += x.mc + x.rep;
            if x.mc > 0 || x.pen > 0 {
                pen_sum += x.pen;
                pen_n += 1;
                pen_max = pen_max.max(x.pen);
            }
            retx += x.retx;
        }
        let [syncs, overrun, crc, other, repair] = r.net;
        // Penalty rounds (Hoefler): ring hops beyond the multicast; a tree has no multicast.
        let penalty = if name == "ours" {
            format!("penalty rounds {:.3} mean, {pen_max} max; ", pen_sum as f64 / pen_n.max(1) as f64)
        } else {
            String::new()
        };
        println!(
            "{name:>9}: multicast hit rate {:.1} % of fragments; {penalty}repair requests {retx}; repair datagrams {repair}; \
             CRC drops {crc}; other drops {other}; fabric overruns {overrun}; sync epochs {}",
            100.0 * mc as f64 / all.max(1) as f64,
            syncs / u64::from(c.nodes.max(1)),
        );
        let wrong = r.recs.iter().flatten().filter(|x| x.k >= a.count).count();
        if wrong > 0 {
            return Err(format!("{name}: {wrong} malformed records"));
        }
    }
    println!(
        "{:>9}: {:.1} s vs {:.1} s for the binomial tree ({:.2}x)",
        "wall",
        ours.wall.as_secs_f64(),
        base.wall.as_secs_f64(),
        base.wall.as_secs_f64() / ours.wall.as_secs_f64().max(1e-9)
    );
    let mut chart = Chart::new(
        format!(
            "ringcast demo: {} nodes x {} processes, {} fabric, {:.0} % multicast loss",
            c.nodes,
            c.ppn,
            c.fabric,
            a.loss * 100.0
        ),
        "message size (bytes)",
        "latency (us)",
    );
    chart.log_x = true;
    chart.log_y = true;
    let names = ["auto median", "auto p99", "binomial median", "binomial p99"];
    for (name, pts) in names.iter().zip(curves) {
        chart.add(*name, pts);
    }
    let files = chart.write(&a.out.join("latency"))?;
    println!();
    println!("plot: {}", files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    // How the engines exchange between them (`model/compose.rs`), with their configuration
    // (the shm fabric's MTU: a ring slot; the CPUs the launcher gave the engines' model).
    let mut engine = config.engine();
    if c.fabric == "shm" {
        engine.protocol.mtu = engine.protocol.mtu.max(4088);
    }
    engine.model.engine_cpus = crate::cluster::engine_cpus();
    let protocol = &engine.protocol;
    let gather_way = match compose::allgather(&engine, c.nodes, u64::from(c.ppn) * 4000) {
        Exchange::Doubling => "recursive doubling between the nodes' engines",
        Exchange::Ring => "round a ring of the nodes' engines",
        _ => "one broadcast per node",
    };
    let a2a_way = match compose::alltoall(&engine, c.nodes, world, c.ppn, 512) {
        Exchange::Pairwise if compose::pairwise_aggregates(protocol, world, c.ppn, 512) => {
            "pairwise between the engines, one transfer per pair, aggregated per node"
        }
        Exchange::Pairwise => "pairwise between the engines, one transfer per block",
        _ => "one multicast per node",
    };
    let mut g: Vec<u64> = ours.gathers.clone();
    println!(
        "allgather ({world} ranks x 4000 B, {gather_way}): {} per rank verified, median {:.0} us, p99 {:.0} us",
        ALLGATHERS,
        quantile(&mut g, 0.5) / 1e3,
        quantile(&mut g, 0.99) / 1e3
    );
    let mut r: Vec<u64> = ours.reduces.clone();
    println!(
        "allreduce ({world} ranks x 4096 B of i64 / f64 sums): {} per rank verified bit for bit, median {:.0} us, p99 {:.0} us",
        ALLGATHERS,
        quantile(&mut r, 0.5) / 1e3,
        quantile(&mut r, 0.99) / 1e3
    );
    let mut w: Vec<u64> = ours.barriers.clone();
    println!(
        "barrier ({world} ranks, on the engines' synchronization tree; each rank naps up to the skew first): {} per rank, none left before its last rank arrived, median {:.0} us, p99 {:.0} us",
        ALLGATHERS,
        quantile(&mut w, 0.5) / 1e3,
        quantile(&mut w, 0.99) / 1e3
    );
    let mut d: Vec<u64> = ours.rooted.clone();
    println!(
        "reduce ({world} ranks x 2048 B of i64 max / f64 sums, root moving): {} per rank, each verified bit for bit by its root, median {:.0} us, p99 {:.0} us",
        ALLGATHERS,
        quantile(&mut d, 0.5) / 1e3,
        quantile(&mut d, 0.99) / 1e3
    );
    let mut x: Vec<u64> = ours.exchanges.clone();
    println!(
        "alltoall ({world} ranks x 512 B blocks, {a2a_way}): {} per rank, every block verified, median {:.0} us, p99 {:.0} us",
        ALLGATHERS,
        quantile(&mut x, 0.5) / 1e3,
        quantile(&mut x, 0.99) / 1e3
    );
    let each = 2 * ALLGATHERS * world;
    println!(
        "every byte of {} broadcasts, {each} allgathers, {each} allreduces and {each} alltoalls verified at every rank, {each} reduces at their roots, {each} barriers checked",
        2 * a.count as u64 * u64::from(world),
    );
    Ok(())
}
