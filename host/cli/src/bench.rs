//! `ringcast run` and `ringcast bench`: programs on a local emulated cluster, and an
//! osu-style collective benchmark on it.
//!
//! `ringcast bench` starts `-n` nodes (engines on the chosen fabric, daemon or thread mode) with
//! `-p` benchmark processes each. Every rank runs, per message size, `iters` calls of the
//! `--collective` (broadcasts from rank 0 by default; allreduce, reduce, allgather, alltoall,
//! barrier: [`crate::bench_rank`]) after up to 10 untimed warm-up ones, and reports its mean time
//! per call and its process CPU time per call; the last call's result is checked at every rank,
//! and the engines' repair frames are counted per size (set `RINGCAST_FAULT_DROP` to inject
//! loss). By default the calls run back to back (as IMB and a loop of blocking `MPI_Bcast` do;
//! no barrier between them). With `--barrier`, osu_bcast's method: an untimed barrier before
//! each call and only the call timed (the barrier is the harness's own, in shared memory:
//! [`crate::barrier`]). The launcher prints, per size, the mean over ranks and the fastest and
//! slowest rank (osu_bcast's avg/min/max), or JSON. `--compare` runs the binomial tree on the
//! same cluster setup in the same invocation and prints the ratio; `--compare-mpi` runs Open
//! MPI's own collective on the same machine, interleaved round by round, and prints the ratio
//! of the slowest ranks ([`crate::compare`]).
use crate::barrier::{BarrierSegment, BARRIER_ENV};
pub use crate::bench_rank::Collective;
use crate::cluster::{Cluster, Mode, Spec};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Print how the job ended (every rank and engine, the engines' counters) as JSON on
    /// stdout, failed or not.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (after `--`).
    #[arg(trailing_var_arg = true, required = true)]
    program: Vec<String>,
}

/// `ringcast run`: starts the cluster, runs the program on every node, tears everything down;
/// a failed job ends with one summary ([`crate::outcome`]).
pub fn run(a: RunArgs) -> ExitCode {
    let Some((prog, args)) = a.program.split_first() else { return ExitCode::from(2) };
    let mut cluster = match Cluster::start(&a.cluster.spec(a.keep_going), prog, args, &[], false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringcast run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ranks = cluster.wait_ended(Duration::from_secs(a.timeout));
    // Read before the teardown: the engines still running answer for their counters.
    let outcome = cluster.outcome(&ranks);
    drop(cluster);
    if a.json {
        println!("{}", outcome.json());
    }
    if outcome.failed() {
        // One summary, after everything the programs said.
        eprint!("{}", outcome.text());
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `ringcast bench` options.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The collective: bcast, allreduce, reduce, allgather, alltoall or barrier (sizes are
    /// then each rank's contribution or block; a barrier ignores them).
    #[arg(long, value_enum, default_value_t = Collective::Bcast)]
    pub collective: Collective,
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
    /// Also run Open MPI's own collective (osu_bcast's method, same collective, sizes and ranks),
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
    repairs: u64,
    engine_us: f64,
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
    /// Repair frames the engines sent during this size (warm-up included).
    pub repairs: u64,
    /// The slowest rank's (`max`'s) mean engine time per call, µs: the part of its calls
    /// between its engine taking the descriptor and publishing the completion — the rest of
    /// `max` is the host's post and wake-up, and waiting for the other ranks.
    pub engine: f64,
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
        "--collective".into(),
        a.collective.name().into(),
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
            if let ["size", size, "avg_us", avg, "cpu_us", cpu, "iters", it, "algorithm", alg, "repairs", rep, "engine_us", eng] =
                f.as_slice()
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
                    repairs: p(rep)? as u64,
                    engine_us: p(eng)?,
                });
            }
        }
        lines.push(mine);
    }
    let mut out = Vec::new();
    for (k, &size) in a.collective.sizes(&a.sizes).iter().enumerate() {
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
            repairs: per.iter().map(|l| l.repairs).sum(),
            engine: per.iter().max_by(|a, b| a.avg_us.total_cmp(&b.avg_us)).map_or(0.0, |l| l.engine_us),
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
                    "{{\"size\":{},\"algorithm\":\"{}\",\"avg_us\":{:.3},\"min_us\":{:.3},\"max_us\":{:.3},\"cpu_us\":{:.3},\"iterations\":{},\"repair_frames\":{},\"slowest_engine_us\":{:.3}{}}}",
                    l.size,
                    l.alg,
                    l.avg,
                    l.min,
                    l.max,
                    l.cpu,
                    l.iters,
                    l.repairs,
                    l.engine,
                    b.map_or(String::new(), |b| format!(",\"binomial_avg_us\":{:.3},\"speedup\":{:.3}", b.avg, b.avg / l.avg.max(1e-9)))
                )
            })
            .collect();
        println!(
            "{{\"collective\":\"{}\",\"nodes\":{},\"fabric\":\"{}\",\"mode\":\"{:?}\",\"algorithm\":\"{}\",\"results\":[{}]}}",
            a.collective.name(),
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
        "# ringcast bench: {}, {} nodes, {} ranks, {} fabric, {:?} mode, algorithm {}",
        a.collective.name(),
        spec.nodes,
        spec.world_size(),
        a.cluster.fabric,
        a.cluster.mode,
        a.algorithm
    );
    let what = match a.collective {
        Collective::Bcast => "broadcasts from rank 0 (size: the message)",
        Collective::Allreduce => "allreduces, u64 sums (size: each rank's vector)",
        Collective::Reduce => "reduces to rank 0, u64 sums (size: each rank's vector)",
        Collective::Allgather => "allgathers (size: each rank's block)",
        Collective::Alltoall => "alltoalls (size: each pair's block)",
        Collective::Barrier => "barriers",
    };
    println!(
        "# {} {what}; the last result checked at every rank; per-rank mean, then over ranks;",
        if a.barrier { "barrier-separated (osu)" } else { "back-to-back" }
    );
    println!("# CPU = the host process's; Repairs = repair frames the engines sent (warm-up included);");
    println!("# Engine = the slowest rank's engine time per call (descriptor taken to completion published)");
    let extra = if base.is_some() { format!("{:>16}{:>9}", "Binomial(us)", "Ratio") } else { String::new() };
    println!(
        "{:<10}{:>19}{:>17}{:>17}{:>17}{:>13}{:>12}{:>9}{:>12}{extra}",
        "# Size",
        "Algorithm",
        "Avg Latency(us)",
        "Min Latency(us)",
        "Max Latency(us)",
        "CPU(us)",
        "Iterations",
        "Repairs",
        "Engine(us)"
    );
    for (i, l) in main.iter().enumerate() {
        let extra = base
            .as_ref()
            .and_then(|b| b.get(i))
            .map_or(String::new(), |b| format!("{:>16.2}{:>8.2}x", b.avg, b.avg / l.avg.max(1e-9)));
        println!(
            "{:<10}{:>19}{:>17.2}{:>17.2}{:>17.2}{:>13.2}{:>12}{:>9}{:>12.2}{extra}",
            l.size, l.alg, l.avg, l.min, l.max, l.cpu, l.iters, l.repairs, l.engine
        );
    }
    ExitCode::SUCCESS
}
