//! `ringcast run` and `ringcast bench`: programs on a local emulated cluster, and an
//! osu_bcast-style broadcast benchmark on it.
//!
//! `ringcast bench` starts `-n` nodes (engines on the chosen fabric, daemon or thread mode) with
//! `-p` benchmark processes each. Every rank runs, per message size, `iters` broadcasts from
//! rank 0 (after up to 10 untimed warm-up ones) and reports its mean time per broadcast and its
//! process CPU time per broadcast; the last broadcast's bytes are checked at every rank. By
//! default the broadcasts run back to back (as IMB and a loop of blocking `MPI_Bcast` do; no
//! barrier between them). With `--barrier`, osu_bcast's method: an untimed barrier before each
//! broadcast and only the broadcast timed (the barrier is the harness's own, in shared memory:
//! [`crate::barrier`]). The launcher prints, per size, the mean over ranks and the fastest and
//! slowest rank (osu_bcast's avg/min/max), or JSON. `--compare` runs the binomial tree on the
//! same cluster setup in the same invocation and prints the ratio; `--compare-mpi` runs Open
//! MPI's own `MPI_Bcast` on the same machine, interleaved round by round, and prints the ratio
//! of the slowest ranks ([`crate::compare`]).
use crate::barrier::{Barrier, BarrierSegment, BARRIER_ENV};
use crate::cluster::{host_from_env, Cluster, Mode, Spec};
use clap::Args;
use ringcast_host::{Access, SharedBuf};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The cluster both commands start.
#[derive(Args, Clone)]
pub struct ClusterArgs {
    /// Nodes (engines).
    #[arg(short = 'n', long, default_value_t = 4)]
    pub nodes: u32,
    /// Program processes per node.
    #[arg(short = 'p', long = "procs-per-node", default_value_t = 1)]
    pub ppn: u32,
    /// An uneven job: processes on each node, comma-separated (e.g. 2,1: three ranks on two
    /// nodes); overrides --nodes and --procs-per-node.
    #[arg(long, value_delimiter = ',')]
    pub node_ranks: Vec<u32>,
    /// Engines as daemons (DPU emulation) or polling threads in the programs.
    #[arg(long, value_enum, default_value_t = Mode::Daemon)]
    pub mode: Mode,
    /// Fabric: shm or udp.
    #[arg(long, default_value = "shm", value_parser = ["shm", "udp"])]
    pub fabric: String,
    /// udp: one network namespace per node on a Linux bridge instead of loopback (root).
    #[arg(long)]
    pub netns: bool,
}

impl ClusterArgs {
    /// The launcher's description of this cluster.
    pub fn spec(&self, keep_going: bool) -> Spec {
        Spec {
            nodes: if self.node_ranks.is_empty() { self.nodes } else { self.node_ranks.len() as u32 },
            ppn: self.ppn,
            node_ranks: self.node_ranks.clone(),
            mode: self.mode,
            fabric: self.fabric.clone(),
            netns: self.netns,
            keep_going,
        }
    }
}

/// `ringcast run` options.
#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Seconds before the programs are killed.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// When a program fails, let the others end on their own instead of killing them (they
    /// must not hang: the engines fail their operations with typed errors).
    #[arg(long)]
    keep_going: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true)]
    program: Vec<String>,
}

/// `ringcast run`: starts the cluster, runs the program on every node, tears everything down.
pub fn run(a: RunArgs) -> ExitCode {
    let Some((prog, args)) = a.program.split_first() else { return ExitCode::from(2) };
    let mut cluster = match Cluster::start(&a.cluster.spec(a.keep_going), prog, args, &[], false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringcast run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let results = cluster.wait(Duration::from_secs(a.timeout));
    let failed: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, (s, _))| !s.is_some_and(|s| s.success()))
        .map(|(i, _)| i)
        .collect();
    drop(cluster);
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("ringcast run: node(s) {failed:?} failed");
        ExitCode::FAILURE
    }
}

/// `ringcast bench` options.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Algorithm: auto (the engine's choice) or any `ringcast info` lists.
    #[arg(long, default_value = "auto")]
    pub algorithm: String,
    /// Message sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [2u64, 64, 1024, 16384, 65536, 1 << 20])]
    pub sizes: Vec<u64>,
    /// Broadcasts per size (fewer for sizes from 64 KiB: a tenth).
    #[arg(long, default_value_t = 1000)]
    pub iters: u32,
    /// Also run the binomial tree and print the ratio.
    #[arg(long)]
    pub compare: bool,
    /// osu_bcast's method: an untimed barrier before each timed broadcast (default: back to back).
    #[arg(long)]
    pub barrier: bool,
    #[command(flatten)]
    pub mpi: CompareArgs,
    /// JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The default launcher: Open MPI's, as root if need be, more ranks than cores allowed, shared
/// memory between the ranks (the Makefile's `OMPI_RUN`).
pub const DEFAULT_MPIRUN: &str = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                                  mpirun.openmpi --oversubscribe --mca btl self,vader";

/// `--compare-mpi` and its options (part of `ringcast bench`).
#[derive(Args, Clone)]
pub struct CompareArgs {
    /// Also run Open MPI's own MPI_Bcast (osu_bcast's method, same sizes and ranks),
    /// interleaved round by round, and print the ratio of the slowest ranks; implies --barrier.
    #[arg(long)]
    pub compare_mpi: bool,
    /// --compare-mpi: rounds of (ringcast, Open MPI); medians over rounds are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// --compare-mpi: the MPI benchmark program (default: mpi-osu-bcast next to this executable).
    #[arg(long)]
    pub mpi_bench: Option<PathBuf>,
    /// --compare-mpi: the launcher command, split at spaces; `-np N PROGRAM SIZES ITERS` is
    /// appended.
    #[arg(long, default_value = DEFAULT_MPIRUN)]
    pub mpirun: String,
}

impl Default for CompareArgs {
    /// Off, with the command line's defaults.
    fn default() -> Self {
        CompareArgs { compare_mpi: false, rounds: 3, mpi_bench: None, mpirun: DEFAULT_MPIRUN.to_string() }
    }
}

/// One rank's figures for one size.
#[derive(Clone, Copy, Debug, Default)]
struct RankLine {
    alg: &'static str,
    size: u64,
    avg_us: f64,
    cpu_us: f64,
    iters: u32,
}

/// One size over all ranks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SizeLine {
    pub alg: &'static str,
    pub size: u64,
    /// Mean over ranks of each rank's mean time per broadcast, µs.
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    /// Host process CPU time per broadcast, µs.
    pub cpu: f64,
    pub iters: u32,
}

/// Timed broadcasts per size (`host/mpi/bench/osu_bcast.c` uses the same rule).
pub fn iters_for(iters: u32, size: u64) -> u32 {
    if size >= 65536 {
        (iters / 10).max(10)
    } else {
        iters.max(1)
    }
}

/// Runs the benchmark once with `algorithm` on a fresh cluster.
pub fn run_once(a: &BenchArgs, algorithm: &str) -> Result<Vec<SizeLine>, String> {
    let sizes: Vec<String> = a.sizes.iter().map(u64::to_string).collect();
    let mut args = vec![
        "bench-rank".to_string(),
        "--sizes".into(),
        sizes.join(","),
        "--iters".into(),
        a.iters.to_string(),
    ];
    let mut env = vec![("RINGCAST_ALGORITHM".to_string(), algorithm.to_string())];
    // Removed when this function returns, after the cluster is torn down (declared first).
    let barrier = if a.barrier {
        let seg = BarrierSegment::create(a.cluster.spec(false).world_size())?;
        args.push("--barrier".into());
        env.push((BARRIER_ENV.to_string(), seg.name.clone()));
        Some(seg)
    } else {
        None
    };
    let mut cluster = Cluster::start(&a.cluster.spec(false), "self", &args, &env, true)?;
    let results = cluster.wait(Duration::from_secs(600));
    drop(cluster);
    drop(barrier);
    let mut lines: Vec<Vec<RankLine>> = Vec::new();
    for (node, (status, out)) in results.iter().enumerate() {
        if !status.is_some_and(|s| s.success()) {
            return Err(format!("node {node} failed:\n{out}"));
        }
        let mut mine = Vec::new();
        for l in out.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if let ["size", size, "avg_us", avg, "cpu_us", cpu, "iters", it, "algorithm", alg] = f.as_slice()
            {
                let p = |v: &str| v.parse::<f64>().map_err(|e| format!("node {node}: {l}: {e}"));
                let alg =
                    ringcast_proto::schedule::bcast::Algorithm::from_name(alg).map_or("?", |a| a.name());
                mine.push(RankLine {
                    alg,
                    size: p(size)? as u64,
                    avg_us: p(avg)?,
                    cpu_us: p(cpu)?,
                    iters: p(it)? as u32,
                });
            }
        }
        lines.push(mine);
    }
    let mut out = Vec::new();
    for (k, &size) in a.sizes.iter().enumerate() {
        let per: Vec<RankLine> =
            lines.iter().filter_map(|l| l.get(k).copied()).filter(|l| l.size == size).collect();
        if per.len() != lines.len() {
            return Err(format!("size {size}: {} of {} ranks reported", per.len(), lines.len()));
        }
        let n = per.len().max(1) as f64;
        out.push(SizeLine {
            alg: per[0].alg,
            size,
            avg: per.iter().map(|l| l.avg_us).sum::<f64>() / n,
            min: per.iter().map(|l| l.avg_us).fold(f64::INFINITY, f64::min),
            max: per.iter().map(|l| l.avg_us).fold(0.0, f64::max),
            cpu: per.iter().map(|l| l.cpu_us).sum::<f64>() / n,
            iters: per[0].iters,
        });
    }
    Ok(out)
}

/// `ringcast bench`.
pub fn bench(a: BenchArgs) -> ExitCode {
    let main = match run_once(&a, &a.algorithm) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ringcast bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let base = if a.compare {
        match run_once(&a, "binomial") {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("ringcast bench: binomial baseline: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    if a.json {
        let rows: Vec<String> = main
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let b = base.as_ref().and_then(|b| b.get(i));
                format!(
                    "{{\"size\":{},\"algorithm\":\"{}\",\"avg_us\":{:.3},\"min_us\":{:.3},\"max_us\":{:.3},\"cpu_us\":{:.3},\"iterations\":{}{}}}",
                    l.size,
                    l.alg,
                    l.avg,
                    l.min,
                    l.max,
                    l.cpu,
                    l.iters,
                    b.map_or(String::new(), |b| format!(",\"binomial_avg_us\":{:.3},\"speedup\":{:.3}", b.avg, b.avg / l.avg.max(1e-9)))
                )
            })
            .collect();
        println!(
            "{{\"nodes\":{},\"fabric\":\"{}\",\"mode\":\"{:?}\",\"algorithm\":\"{}\",\"results\":[{}]}}",
            a.cluster.nodes,
            a.cluster.fabric,
            a.cluster.mode,
            a.algorithm,
            rows.join(",")
        );
        return ExitCode::SUCCESS;
    }
    let spec = a.cluster.spec(false);
    println!(
        "# ringcast bench: {} nodes, {} ranks, {} fabric, {:?} mode, algorithm {}",
        spec.nodes,
        spec.world_size(),
        a.cluster.fabric,
        a.cluster.mode,
        a.algorithm
    );
    println!(
        "# {} broadcasts from rank 0; per-rank mean, then over ranks; CPU = the host process's",
        if a.barrier { "barrier-separated (osu_bcast)" } else { "back-to-back" }
    );
    let extra = if base.is_some() { format!("{:>16}{:>9}", "Binomial(us)", "Ratio") } else { String::new() };
    println!(
        "{:<10}{:>19}{:>17}{:>17}{:>17}{:>13}{:>12}{extra}",
        "# Size",
        "Algorithm",
        "Avg Latency(us)",
        "Min Latency(us)",
        "Max Latency(us)",
        "CPU(us)",
        "Iterations"
    );
    for (i, l) in main.iter().enumerate() {
        let extra = base
            .as_ref()
            .and_then(|b| b.get(i))
            .map_or(String::new(), |b| format!("{:>16.2}{:>8.2}x", b.avg, b.avg / l.avg.max(1e-9)));
        println!(
            "{:<10}{:>19}{:>17.2}{:>17.2}{:>17.2}{:>13.2}{:>12}{extra}",
            l.size, l.alg, l.avg, l.min, l.max, l.cpu, l.iters
        );
    }
    ExitCode::SUCCESS
}

/// `ringcast bench-rank` options (one rank of `ringcast bench`).
#[derive(Args)]
pub struct RankArgs {
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    #[arg(long, default_value_t = 1000)]
    iters: u32,
    /// An untimed barrier (the segment named by RINGCAST_BENCH_BARRIER) before each timed
    /// broadcast.
    #[arg(long)]
    barrier: bool,
}

/// How long a rank waits at the barrier for the others before failing.
const BARRIER_LIMIT: Duration = Duration::from_secs(120);

/// CPU time of this process so far (every thread: in thread mode that includes the engine's).
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// One benchmark rank: prints `size S avg_us A cpu_us C iters I algorithm X` per size.
pub fn rank(a: RankArgs) -> ExitCode {
    match rank_inner(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringcast bench-rank: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rank_inner(a: &RankArgs) -> Result<(), String> {
    let config = ringcast_host::Config::from_env().map_err(|e| e.to_string())?;
    // The engine's choice per size, computed the same way (same configuration, same model).
    let selector = ringcast_proto::model::select::Selector::from_config(&config.engine());
    let flat = ringcast_proto::comm::Layout::FLAT;
    let mut host = host_from_env()?;
    let local = host.local_rank().ok_or("no local rank on the engine")?;
    let me = config.topology.world_rank(local).ok_or("local rank outside this node's share of the world")?;
    let largest = a.sizes.iter().copied().max().unwrap_or(1).max(1) as usize;
    let buf = SharedBuf::new(largest).map_err(|e| e.to_string())?;
    let barrier = if a.barrier {
        let name = std::env::var(BARRIER_ENV).map_err(|_| format!("--barrier needs {BARRIER_ENV}"))?;
        Some(Barrier::open(&name, config.topology.world_size())?)
    } else {
        None
    };
    // A rank that died leaves the others at the barrier: they fail instead of hanging. The
    // barrier progresses this rank's engine as it waits (an MPI barrier runs its progress
    // engine too): in thread mode a root, done at once, still owes its broadcast's sending.
    let sync = |what: &str, host: &mut ringcast_host::Host| match &barrier {
        Some(b) => b.wait(BARRIER_LIMIT, || host.progress()).map_err(|e| format!("{what}: {e}")),
        None => Ok(()),
    };
    let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let mut posted = 0u64;
    for &size in &a.sizes {
        let size = size.max(1);
        let want: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(size as u8)).collect();
        buf.write_at(0, &if me == 0 { want.clone() } else { vec![0; size as usize] })
            .map_err(|e| e.to_string())?;
        let iters = iters_for(a.iters, size);
        for _ in 0..iters.min(10) {
            sync("warm-up", &mut host)?;
            host.bcast(0, 0, region.at(0), size).map_err(|e| e.to_string())?; // warm-up
            posted += 1;
        }
        let (dt, dc) = if barrier.is_some() {
            // osu_bcast: barrier untimed, only the broadcast timed (and its CPU time counted).
            let (mut dt, mut dc) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                sync("timed loop", &mut host)?;
                let c0 = cpu_time();
                let t0 = Instant::now();
                host.bcast(0, 0, region.at(0), size).map_err(|e| format!("{size} B: {e}"))?;
                dt += t0.elapsed();
                dc += cpu_time().saturating_sub(c0);
            }
            (dt, dc)
        } else {
            let (t0, c0) = (Instant::now(), cpu_time());
            for _ in 0..iters {
                host.bcast(0, 0, region.at(0), size).map_err(|e| format!("{size} B: {e}"))?;
            }
            (t0.elapsed(), cpu_time().saturating_sub(c0))
        };
        posted += iters as u64;
        let mut got = vec![0; size as usize];
        buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("node {me}: {size} B broadcast delivered wrong bytes"));
        }
        let algorithm = selector.choose(config.topology.nodes, size, &flat, true);
        println!(
            "size {size} avg_us {:.3} cpu_us {:.3} iters {iters} algorithm {algorithm}",
            dt.as_secs_f64() * 1e6 / iters as f64,
            dc.as_secs_f64() * 1e6 / iters as f64
        );
    }
    // Fill the last synchronization epoch with tiny broadcasts: the engine (in thread mode, in
    // this process) lingers at exit until its epochs are synchronized, which needs every rank
    // to have finished every broadcast — MPI_Finalize's barrier, done by the protocol.
    let channels = config.protocol.channels as u64;
    for _ in 0..(channels - posted % channels) % channels {
        host.bcast(0, 0, region.at(0), 1).map_err(|e| format!("final epoch: {e}"))?;
    }
    Ok(())
}
