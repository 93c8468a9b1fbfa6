//! `ringcast bench --compare-mpi`: ringcast against the MPI library's own collective (broadcast,
//! allreduce, reduce, allgather, alltoall or barrier: `--collective`), on the same machine, in
//! the same run.
//!
//! Both sides use osu_bcast's method: per size, up to 10 untimed warm-up calls, then `iters`
//! calls (a tenth, at least 10, from 64 KiB), each after an untimed barrier, only the call
//! timed; each rank's mean, then the mean and the slowest rank over ranks. Ringcast runs as `ringcast bench --barrier` on the configured cluster (`-n` nodes ×
//! `-p` processes); Open MPI runs `host/mpi/bench/osu_bcast.c` (`mpi-osu-bcast`, next to this
//! executable or `--mpi-bench`) under `mpirun -np <nodes × ppn>` with the same collective, sizes
//! and iterations. The two alternate, round by round (`--rounds`), so that both see the same
//! machine; per size the median over rounds of the mean and of the slowest rank is reported for
//! each, and the ratio ringcast slowest / Open MPI slowest (below 1: ringcast is faster). The
//! exact commands are printed first, so a reader can rerun either side alone.
use crate::bench::{run_once, BenchArgs, SizeLine};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The MPI benchmark program's file name (built by `make bench-compare-build`).
pub const MPI_PROGRAM: &str = "mpi-osu-bcast";

/// Longest an MPI run may take before it is stopped.
const MPI_LIMIT: Duration = Duration::from_secs(600);

/// One size of the MPI program's output.
#[derive(Clone, Copy, Debug)]
struct MpiLine {
    size: u64,
    avg: f64,
    max: f64,
    iters: u32,
}

/// Median of `v` (mean of the middle two for an even count); `v` is not empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Whether `program` (a path, or a name looked up in `PATH`) is an existing file.
fn found(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The launcher words, checked: its program (the first word that is not `env` or `VAR=value`)
/// must exist.
fn launcher(cmd: &str) -> Result<Vec<String>, String> {
    let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
    let program = words
        .iter()
        .find(|w| *w != "env" && !w.contains('='))
        .ok_or_else(|| format!("--mpirun {cmd:?}: no program in it"))?;
    if !found(program) {
        return Err(format!(
            "{program} not found: install Open MPI (`make deps` installs it: scripts/deps.sh) or name \
             the launcher with --mpirun"
        ));
    }
    Ok(words)
}

/// The MPI benchmark program: `--mpi-bench`, else next to this executable.
fn mpi_program(a: &BenchArgs) -> Result<PathBuf, String> {
    let path = match &a.mpi.mpi_bench {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("this executable has no directory")?
            .join(MPI_PROGRAM),
    };
    if !path.is_file() {
        return Err(format!(
            "{}: no such file: `make bench-compare-build` builds it (host/mpi/bench/osu_bcast.c, \
             into target/release/), or name it with --mpi-bench",
            path.display()
        ));
    }
    Ok(path)
}

/// Runs `cmd` once, at most [`MPI_LIMIT`], and parses rank 0's lines.
fn run_mpi(cmd: &[String], sizes: &[u64]) -> Result<Vec<MpiLine>, String> {
    let (prog, args) = cmd.split_first().ok_or("empty MPI command")?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {prog}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + MPI_LIMIT;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(s) => break s,
            None if Instant::now() > deadline => {
                // SIGTERM first: mpirun then stops its ranks.
                let pid = rustix::process::Pid::from_child(&child);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                std::thread::sleep(Duration::from_secs(5));
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the MPI run took more than {MPI_LIMIT:?}: stopped"));
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("the MPI run failed ({status}):\n{out}"));
    }
    let mut lines = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["size", size, "avg_us", avg, "min_us", _, "max_us", max, "iters", it] = f.as_slice() {
            let p = |v: &str| v.parse::<f64>().map_err(|e| format!("MPI output {l:?}: {e}"));
            lines.push(MpiLine { size: p(size)? as u64, avg: p(avg)?, max: p(max)?, iters: p(it)? as u32 });
        }
    }
    if lines.iter().map(|l| l.size).ne(sizes.iter().copied()) {
        return Err(format!("the MPI run did not report every size {sizes:?}:\n{out}"));
    }
    Ok(lines)
}

/// One size of the comparison: medians over rounds.
struct Row {
    size: u64,
    alg: &'static str,
    iters: u32,
    rc_avg: f64,
    rc_max: f64,
    /// The slowest ringcast rank's engine time per call (median over rounds).
    rc_engine: f64,
    mpi_avg: f64,
    mpi_max: f64,
}

impl Row {
    /// Ringcast's slowest rank over Open MPI's: below 1, ringcast is faster.
    fn ratio(&self) -> f64 {
        self.rc_max / self.mpi_max
    }
}

/// `ringcast bench --compare-mpi` (with `a.barrier` set).
pub fn run(a: &BenchArgs) -> ExitCode {
    match compare(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringcast bench --compare-mpi: {e}");
            ExitCode::FAILURE
        }
    }
}

fn compare(a: &BenchArgs) -> Result<(), String> {
    if a.mpi.rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    let program = mpi_program(a)?;
    let coll = a.collective.name();
    let run_sizes = a.collective.sizes(&a.sizes);
    let sizes: Vec<String> = run_sizes.iter().map(u64::to_string).collect();
    let sizes = sizes.join(",");
    // Every rank of the cluster, uneven ones (`--node-ranks`) included.
    let ranks = a.cluster.spec(false).world_size();
    let mut mpi_cmd = launcher(&a.mpi.mpirun)?;
    mpi_cmd.extend([
        "-np".into(),
        ranks.to_string(),
        program.display().to_string(),
        sizes.clone(),
        a.iters.to_string(),
        coll.to_string(),
    ]);
    let c = &a.cluster;
    let rc_cmd = format!(
        "ringcast bench --collective {coll} -n {} -p {}{} --mode {} --fabric {} --algorithm {} --sizes {sizes} --iters {} --barrier",
        c.nodes,
        c.ppn,
        match c.node_ranks.is_empty() {
            true => String::new(),
            false => format!(" --node-ranks {}", c.node_ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        },
        format!("{:?}", c.mode).to_lowercase(),
        c.fabric,
        a.algorithm,
        a.iters
    );
    let mut rc: Vec<Vec<SizeLine>> = Vec::new();
    let mut mpi: Vec<Vec<MpiLine>> = Vec::new();
    for round in 0..a.mpi.rounds {
        rc.push(run_once(a, &a.algorithm).map_err(|e| format!("round {round}, ringcast: {e}"))?);
        mpi.push(run_mpi(&mpi_cmd, &run_sizes).map_err(|e| format!("round {round}, Open MPI: {e}"))?);
    }
    let rows: Vec<Row> = run_sizes
        .iter()
        .enumerate()
        .map(|(k, &size)| Row {
            size,
            alg: rc[0][k].alg,
            iters: rc[0][k].iters,
            rc_avg: median(rc.iter().map(|r| r[k].avg).collect()),
            rc_max: median(rc.iter().map(|r| r[k].max).collect()),
            rc_engine: median(rc.iter().map(|r| r[k].engine).collect()),
            mpi_avg: median(mpi.iter().map(|r| r[k].avg).collect()),
            mpi_max: median(mpi.iter().map(|r| r[k].max).collect()),
        })
        .collect();
    if let Some((r, m)) = rows.iter().zip(&mpi[0]).find(|(r, m)| r.iters != m.iters) {
        return Err(format!(
            "{} B: ringcast ran {} iterations, the MPI program {}",
            r.size, r.iters, m.iters
        ));
    }
    let mpi_cmd = mpi_cmd.join(" ");
    if a.json {
        let results: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "size": r.size,
                    "algorithm": r.alg,
                    "iterations": r.iters,
                    "ringcast_avg_us": r.rc_avg,
                    "ringcast_max_us": r.rc_max,
                    "ringcast_slowest_engine_us": r.rc_engine,
                    "mpi_avg_us": r.mpi_avg,
                    "mpi_max_us": r.mpi_max,
                    "ratio": r.ratio(),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "collective": coll,
            "method": "osu_bcast: warm-up, untimed barrier before each timed call, per-rank mean; medians over rounds",
            "ratio": "ringcast max_us / mpi max_us (slowest rank vs slowest rank; below 1: ringcast is faster)",
            "nodes": c.nodes,
            "ppn": c.ppn,
            "ranks": ranks,
            "fabric": c.fabric,
            "mode": format!("{:?}", c.mode).to_lowercase(),
            "rounds": a.mpi.rounds,
            "ringcast_command": rc_cmd,
            "mpi_command": mpi_cmd,
            "results": results,
        });
        println!("{doc}");
        return Ok(());
    }
    println!(
        "# ringcast vs Open MPI's own {coll}, {ranks} ranks, osu_bcast's method (warm-up, untimed barrier"
    );
    println!(
        "# before each timed call, per-rank mean), interleaved rounds: {}, medians over rounds",
        a.mpi.rounds
    );
    println!("# ringcast: {rc_cmd}");
    println!("# Open MPI: {mpi_cmd}");
    println!(
        "# Ratio = ringcast max / Open MPI max (slowest rank vs slowest rank; below 1: ringcast faster)"
    );
    println!("# rc eng = the slowest ringcast rank's engine time per call (descriptor taken to completion)");
    println!(
        "{:<10}{:>12}{:>14}{:>14}{:>14}{:>14}{:>9}{:>8}{:>13}",
        "# Size",
        "Algorithm",
        "rc avg(us)",
        "rc max(us)",
        "MPI avg(us)",
        "MPI max(us)",
        "Ratio",
        "Iters",
        "rc eng(us)"
    );
    for r in &rows {
        println!(
            "{:<10}{:>12}{:>14.2}{:>14.2}{:>14.2}{:>14.2}{:>9.2}{:>8}{:>13.2}",
            r.size,
            r.alg,
            r.rc_avg,
            r.rc_max,
            r.mpi_avg,
            r.mpi_max,
            r.ratio(),
            r.iters,
            r.rc_engine
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
    }

    #[test]
    fn a_missing_launcher_is_named() {
        let e = launcher("env A=1 no-such-mpirun-here --x").unwrap_err();
        assert!(e.contains("no-such-mpirun-here not found"), "{e}");
        assert!(launcher("env A=1").is_err());
    }
}
