//! `ringcast dst`: deterministic simulation testing of the whole engine (`ringcast_sim::dst`)
//! from the command line. Runs the seeds `start, start + 1, …` (`--seeds` of them) on
//! `--jobs` threads (default: every CPU), prints each failing seed with the command that
//! replays it, and a summary; `--seed N` replays one seed and, if it fails, dumps every
//! simulated engine's protocol state. `--progress FILE` records the sweep as it goes and
//! resumes it where it stopped ([`crate::dst_progress`]).
//!
//! A check that cannot fail is refused: a range that would run past the last seed (`u64::MAX`)
//! is an error, as are `--seeds 0` and `--jobs 0`; every sweep says how many scenarios it ran,
//! and a sweep that ran fewer than it was asked to (none, at worst) fails.
use crate::dst_progress::{Progress, SeedResult, Totals};
use clap::Args;
use ringcast_sim::dst::{run, run_traced, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// `ringcast dst` options.
#[derive(Args)]
pub struct DstArgs {
    /// Scenarios to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Replay this one seed (verbose).
    #[arg(long)]
    seed: Option<u64>,
    /// Largest cluster a scenario may draw (at least 2).
    #[arg(long, default_value_t = 512)]
    max_ranks: usize,
    /// Threads running scenarios (default: this machine's CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Record the sweep's progress in FILE, and resume from it if it holds this sweep.
    #[arg(long, value_name = "FILE")]
    progress: Option<PathBuf>,
}

/// The sweep a command line asks for, checked: `Err` says why it is refused.
fn sweep_of(a: &DstArgs) -> Result<(u64, u64), String> {
    if a.seeds == 0 {
        return Err("--seeds 0: a sweep of no scenario checks nothing".into());
    }
    if a.max_ranks < 2 {
        return Err(format!("--max-ranks {}: a scenario has at least 2 ranks", a.max_ranks));
    }
    // The last seed is `start + seeds - 1`; past u64::MAX there is none.
    if a.start.checked_add(a.seeds - 1).is_none() {
        return Err(format!(
            "--start {} --seeds {}: the range runs past the last seed, {}; at most {} seeds start there",
            a.start,
            a.seeds,
            u64::MAX,
            u64::MAX - a.start + 1
        ));
    }
    Ok((a.start, a.seeds))
}

fn totals_of(r: &ringcast_sim::dst::Report) -> Totals {
    Totals {
        scenarios: 1,
        completions: r.completions as u64,
        ok: r.ok as u64,
        empty: r.empty as u64,
        delivered: r.delivered,
        dropped: r.dropped,
        penalty_sum: r.penalty_sum,
        penalty_n: r.penalty_n,
    }
}

/// Runs the command.
pub fn run_cmd(a: DstArgs) -> ExitCode {
    if let Some(seed) = a.seed {
        return replay(seed, a.max_ranks);
    }
    let (start, seeds) = match sweep_of(&a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ringcast dst: {e}");
            return ExitCode::from(2);
        }
    };
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 {
        eprintln!("ringcast dst: --jobs 0: no thread would run a scenario");
        return ExitCode::from(2);
    }
    let progress = match Progress::load(a.progress.as_deref(), start, seeds, a.max_ranks) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringcast dst: {e}");
            return ExitCode::from(2);
        }
    };
    let resumed = progress.done();
    if resumed > 0 {
        eprintln!(
            "  resuming: {resumed} of {seeds} seeds done ({} violated) in {:.1} s before",
            progress.saved().violations.len(),
            progress.saved().seconds
        );
    }
    // The scenario depends on the rank bound: the replay must repeat it.
    let bound = if a.max_ranks == 512 { String::new() } else { format!(" --max-ranks {}", a.max_ranks) };
    let next = AtomicU64::new(resumed);
    let progress = Mutex::new(progress);
    let write_error = Mutex::new(None);
    let t = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(usize::try_from(seeds - resumed).unwrap_or(usize::MAX)) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= seeds {
                    break;
                }
                let seed = start + index; // no overflow: checked by `sweep_of`
                let result = match run(&Scenario::generate(seed, a.max_ranks)) {
                    Ok(r) => SeedResult { totals: totals_of(&r), violation: None },
                    Err(v) => {
                        println!(
                            "seed {seed}: VIOLATION {v:?}   (replay: ringcast dst --seed {seed}{bound})"
                        );
                        SeedResult {
                            totals: Totals { scenarios: 1, ..Totals::default() },
                            violation: Some(format!("{v:?}")),
                        }
                    }
                };
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = p.finish(index, result) {
                    write_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                }
                let done = p.done();
                drop(p);
                if (index + 1).is_multiple_of(250) {
                    eprintln!("  {done} / {seeds} seeds ({:.1} s)", t.elapsed().as_secs_f64());
                }
            });
        }
    });
    let mut progress = progress.into_inner().unwrap_or_else(|e| e.into_inner());
    let written = progress.write();
    let s = progress.saved();
    let tot = s.totals;
    println!(
        "{} scenarios run of {seeds} seeds ({} this time{}), {:.1} s{}: {} violated an invariant; {} completions checked ({} ok, {} typed errors of which {} 0-byte BadLength), \
         {} datagrams delivered, {} dropped and counted, mean penalty rounds {:.2}",
        tot.scenarios,
        s.done - resumed,
        if resumed > 0 { format!(", {resumed} before") } else { String::new() },
        t.elapsed().as_secs_f64(),
        if resumed > 0 { format!(" ({:.1} s in all)", s.seconds) } else { String::new() },
        s.violations.len(),
        tot.completions,
        tot.ok,
        tot.completions - tot.ok,
        tot.empty,
        tot.delivered,
        tot.dropped,
        tot.penalty_sum as f64 / tot.penalty_n.max(1) as f64
    );
    if resumed > 0 && !s.violations.is_empty() {
        for (seed, v) in &s.violations {
            println!("seed {seed}: VIOLATION {v}   (replay: ringcast dst --seed {seed}{bound})");
        }
    }
    for e in
        [written.err(), write_error.into_inner().unwrap_or_else(|e| e.into_inner())].into_iter().flatten()
    {
        eprintln!("ringcast dst: {e}");
    }
    if tot.scenarios != seeds || s.done != seeds {
        // Never a pass for what did not run.
        eprintln!("ringcast dst: {} of {seeds} scenarios ran: the sweep is incomplete", tot.scenarios);
        return ExitCode::FAILURE;
    }
    if s.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--seed N`: one scenario, verbose.
fn replay(seed: u64, max_ranks: usize) -> ExitCode {
    let s = Scenario::generate(seed, max_ranks);
    println!("{s:#?}");
    let mut dump = Some(String::new());
    match run_traced(&s, &mut dump) {
        Ok(r) => {
            println!("seed {seed}: ok\n{r:#?}");
            ExitCode::SUCCESS
        }
        Err(v) => {
            println!("{}", dump.unwrap_or_default());
            println!("seed {seed}: VIOLATION {v:?}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(start: u64, seeds: u64, max_ranks: usize) -> DstArgs {
        DstArgs { seeds, start, seed: None, max_ranks, jobs: None, progress: None }
    }

    #[test]
    fn sweeps_that_cannot_run_are_refused() {
        assert_eq!(sweep_of(&args(u64::MAX - 1, 2, 512)), Ok((u64::MAX - 1, 2)), "the last two seeds");
        assert!(sweep_of(&args(u64::MAX - 1, 3, 512)).is_err(), "one past the last seed");
        assert!(sweep_of(&args(u64::MAX, u64::MAX, 512)).is_err());
        assert!(sweep_of(&args(0, 0, 512)).is_err(), "no seed");
        assert!(sweep_of(&args(0, 10, 1)).is_err(), "no room for two ranks");
        assert_eq!(sweep_of(&args(0, u64::MAX, 512)), Ok((0, u64::MAX)));
    }
}
