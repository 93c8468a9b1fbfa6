//! `ringcast`: the command-line front end.
//!
//! * `ringcast info` — every tunable with its default, current value (after `RINGCAST_*`
//!   overrides) and meaning, like `ompi_info`; `--engine NAME` adds a running engine's counters.
//! * `ringcast stats [--engine NAME | --all] [--watch SECS] [--json | --prometheus]` — every
//!   counter of running engines, with rates in watch mode.
//! * `ringcast engine [--name NAME]` — runs the engine daemon in the foreground (the same code as
//!   the `ringcast-engine` binary).
//! * `ringcast dst [--seeds N] [--start S] [--max-ranks R] [--jobs J] [--progress FILE] | --seed S`
//!   — deterministic simulation testing of the whole engine on every CPU; prints failing seeds,
//!   resumes a stopped sweep from its progress file, replays one seed exactly.
//! * `ringcast sim [FILES] [--set k=v]` — broadcasts on the LogGP-priced simulated fabric: sweeps,
//!   tables, CSV/JSON, plots (`fixtures/sim/*.toml`, `docs/reproduction.md`).
//! * `ringcast calibrate [--fabric udp|shm]` — LogGP parameters of a real fabric, measured, written
//!   as a `ringcast sim` scenario under `fixtures/calibration/`.
//! * `ringcast run -n N [--mode daemon|thread|dpu] [--json] -- PROGRAM` — a program on a local
//!   emulated cluster (a failed job ends with one summary: who ended first and how, what every
//!   rank got, the engines' counters); `ringcast bench -n N [--collective C] [--algorithm A] [--compare] [--barrier]
//!   [--json]` — osu-style, any offloaded collective; `--compare-mpi` runs Open MPI's own
//!   collective beside it, interleaved.
//! * `ringcast demo` — the main job: thousands of verified broadcasts from changing roots on an
//!   emulated cluster (engines and processes on the `shm` fabric, injected multicast loss and
//!   arrival skew), reported per size beside the binomial tree on the same fabric, with a plot.
//! * `ringcast substrate-demo` — a daemon engine, host processes, verified COPYs, every bad-input
//!   case, a host killed with work in flight, latency and bandwidth in both run modes.
//! * `ringcast workload-rank` — one rank of the demo's workload (under `ringcast run`).
mod barrier;
mod bench;
mod bench_rank;
mod calibrate;
mod cluster;
mod compare;
mod demo;
mod dst;
mod dst_progress;
mod fidelity;
mod info;
mod ns_reaper;
mod outcome;
mod paper;
mod report;
mod sim;
mod stats;
mod substrate;
mod workload;

use clap::{Parser, Subcommand};
use ringcast_host::Config;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "ringcast", version, about = "ringcast: NIC-offloaded reliable multicast collectives")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show every tunable: default, current value and meaning.
    Info {
        /// Also attach to this running engine and show its counters.
        #[arg(long)]
        engine: Option<String>,
        /// Print docs/tunables.md (the defaults table in Markdown) instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Every counter of running engines (one, several, or --all of this machine's), once or
    /// --watch with rates; --json or --prometheus.
    Stats(stats::StatsArgs),
    /// Run the offload engine daemon in the foreground (DPU-emulation mode).
    Engine {
        /// Name hosts attach with (default: RINGCAST_ENGINE, else "default").
        #[arg(long)]
        name: Option<String>,
    },
    /// The main job: verified broadcasts on an emulated cluster with loss and skew, with a report.
    Demo(demo::DemoArgs),
    /// The offload substrate: engine daemon + host processes, verified COPYs, every bad-input case.
    SubstrateDemo(substrate::DemoArgs),
    /// Deterministic simulation testing of the whole engine (seeded, replayable).
    Dst(dst::DstArgs),
    /// The protocol's paper claims reproduced on the simulator (tables).
    Paper(paper::PaperArgs),
    /// Run a program on a local emulated cluster (engines on a fabric, one process per node).
    Run(bench::RunArgs),
    /// osu-style benchmark of a collective (default: broadcast) on a local emulated cluster.
    Bench(bench::BenchArgs),
    /// One rank of `ringcast bench` (started by it).
    #[command(hide = true)]
    BenchRank(bench_rank::RankArgs),
    /// Measure a real fabric's LogGP parameters and write them as a simulator scenario.
    Calibrate(calibrate::CalibrateArgs),
    /// Simulate broadcasts on a LogGP-priced fabric: one scenario or a sweep, tables, CSV/JSON, plots.
    Sim(sim::SimArgs),
    /// One rank of a verified broadcast workload (started by `ringcast demo`, or by hand under
    /// `ringcast run`).
    WorkloadRank(workload::WorkloadArgs),
    /// One demo host process (started by `ringcast demo`).
    #[command(hide = true)]
    DemoHost(substrate::HostArgs),
    /// Run a command that dies with its launcher (started by `ringcast run` for every engine
    /// and program: parent-death signal, then exec).
    #[command(hide = true)]
    ChildGuard {
        /// The launcher's pid.
        #[arg(long)]
        parent: u32,
        /// Signal when the launcher dies.
        #[arg(long, value_enum)]
        signal: cluster::DeathSignal,
        /// The command.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Delete a launcher's network namespaces once it is gone (started by `ringcast run`,
    /// `bench` and `demo` before they make any: host/cli/src/ns_reaper.rs).
    #[command(hide = true)]
    NamespaceReaper {
        /// The launcher's pid.
        #[arg(long)]
        parent: u32,
        /// Its namespaces' prefix, `rch<pid>-`.
        #[arg(long)]
        prefix: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::ChildGuard { parent, signal, command } = &cli.cmd {
        // Before reading the configuration: the guarded command's environment is its own.
        return cluster::guard_exec(*parent, *signal, command);
    }
    if let Cmd::NamespaceReaper { parent, prefix } = &cli.cmd {
        return ns_reaper::run(*parent, prefix);
    }
    let mut config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringcast: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.cmd {
        Cmd::Info { markdown: true, .. } => info::markdown(),
        Cmd::Info { engine, .. } => info::run(&config, engine.as_deref()),
        Cmd::Engine { name } => {
            if let Some(n) = name {
                config.runner.engine_name = n;
            }
            if let Err(e) = config.validate() {
                eprintln!("ringcast: {e}");
                return ExitCode::from(2);
            }
            match ringcast_offload::runner::run_daemon(config) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ringcast engine: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Stats(args) => stats::run(args, &config),
        Cmd::Demo(args) => demo::run(args),
        Cmd::Dst(args) => dst::run_cmd(args),
        Cmd::Paper(args) => paper::run(args),
        Cmd::Sim(args) => sim::run(args),
        Cmd::Calibrate(args) => calibrate::run(args, &config),
        Cmd::Run(args) => bench::run(args),
        // The same method as the MPI side (osu_bcast's): barrier-separated broadcasts.
        Cmd::Bench(mut args) if args.mpi.compare_mpi => {
            args.barrier = true;
            compare::run(&args)
        }
        Cmd::Bench(args) => bench::bench(args),
        Cmd::BenchRank(args) => bench_rank::rank(args),
        Cmd::DemoHost(args) => substrate::host(args),
        Cmd::SubstrateDemo(args) => substrate::run(args),
        Cmd::WorkloadRank(args) => workload::rank(args),
        Cmd::ChildGuard { .. } | Cmd::NamespaceReaper { .. } => ExitCode::FAILURE, // handled above
    }
}
