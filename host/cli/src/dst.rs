//! `ringcast dst`: deterministic simulation testing of the whole engine (`ringcast_sim::dst`)
//! from the command line. Runs seeds `start..start+seeds` (on every core), prints each failing seed with the
//! command that replays it, and a summary; `--seed N` replays one seed and, if it fails, dumps
//! every simulated engine's protocol state.
use clap::Args;
use ringcast_sim::dst::{run, run_traced, Scenario};
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
    /// Largest cluster a scenario may draw.
    #[arg(long, default_value_t = 512)]
    max_ranks: usize,
}

/// Runs the command.
pub fn run_cmd(a: DstArgs) -> ExitCode {
    if let Some(seed) = a.seed {
        let s = Scenario::generate(seed, a.max_ranks);
        println!("{s:#?}");
        let mut dump = Some(String::new());
        return match run_traced(&s, &mut dump) {
            Ok(r) => {
                println!("seed {seed}: ok\n{r:#?}");
                ExitCode::SUCCESS
            }
            Err(v) => {
                println!("{}", dump.unwrap_or_default());
                println!("seed {seed}: VIOLATION {v:?}");
                ExitCode::FAILURE
            }
        };
    }
    let next = AtomicU64::new(a.start);
    let end = a.start + a.seeds;
    let failures = Mutex::new(Vec::new());
    let totals = Mutex::new((0usize, 0usize, 0u64, 0u64, 0u64, 0u64, 0usize));
    let t = std::time::Instant::now();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    break;
                }
                match run(&Scenario::generate(seed, a.max_ranks)) {
                    Ok(r) => {
                        let mut tot = totals.lock().unwrap_or_else(|e| e.into_inner());
                        tot.0 += r.completions;
                        tot.1 += r.ok;
                        tot.2 += r.delivered;
                        tot.3 += r.dropped;
                        tot.4 += r.penalty_sum;
                        tot.5 += r.penalty_n;
                        tot.6 += r.empty;
                    }
                    Err(v) => {
                        // The scenario depends on the rank bound: the replay must repeat it.
                        let bound = if a.max_ranks == 512 {
                            String::new()
                        } else {
                            format!(" --max-ranks {}", a.max_ranks)
                        };
                        println!(
                            "seed {seed}: VIOLATION {v:?}   (replay: ringcast dst --seed {seed}{bound})"
                        );
                        failures.lock().unwrap_or_else(|e| e.into_inner()).push(seed);
                    }
                }
                if (seed + 1 - a.start).is_multiple_of(250) {
                    eprintln!(
                        "  {} / {} seeds ({:.1} s)",
                        seed + 1 - a.start,
                        a.seeds,
                        t.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    let (completions, ok, delivered, dropped, psum, pn, empty) =
        *totals.lock().unwrap_or_else(|e| e.into_inner());
    let failed = failures.into_inner().unwrap_or_default();
    println!(
        "{} seeds in {:.1} s: {} violated an invariant; {completions} completions checked ({ok} ok, {} typed errors of which {empty} 0-byte BadLength), \
         {delivered} datagrams delivered, {dropped} dropped and counted, mean penalty rounds {:.2}",
        a.seeds,
        t.elapsed().as_secs_f64(),
        failed.len(),
        completions - ok,
        psum as f64 / pn.max(1) as f64
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
