//! The progress of a `ringcast dst` sweep, so that a sweep stopped (Ctrl-C, a reboot, a job's
//! time limit) resumes where it stopped: `--progress FILE`.
//!
//! Contract:
//! * A sweep is the seeds `start + i` for `i` in `0..seeds` at one `--max-ranks`; the file
//!   records those three and is refused ([`Progress::load`]) for a sweep that differs in any.
//! * Workers take seeds in order but finish them out of order. The file records a *watermark*
//!   `done`: every seed index below it has finished, and the totals and violations in the file
//!   are exactly those of the seeds below it ([`Progress::finish`] holds the results of seeds
//!   above it until the watermark passes them). Resuming reruns the indices from `done` on —
//!   at most the few that were in flight or finished above the watermark when the sweep
//!   stopped; a seed's result does not depend on when it runs, so nothing is counted twice
//!   and nothing is lost.
//! * The file is written at most once a second while the sweep runs and once at its end, each
//!   time whole to `FILE.tmp` and then renamed over `FILE`, so a sweep killed at any moment
//!   leaves either the previous or the new version, never a torn one.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the scenarios of a sweep add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Scenarios run to their end (violated or not).
    pub scenarios: u64,
    /// Broadcast completions checked.
    pub completions: u64,
    /// Of which `Ok`.
    pub ok: u64,
    /// Of which 0-byte broadcasts refused with `BadLength`.
    pub empty: u64,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Datagrams dropped and counted.
    pub dropped: u64,
    /// Sum and count of penalty rounds.
    pub penalty_sum: u64,
    /// (see `penalty_sum`)
    pub penalty_n: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.scenarios += o.scenarios;
        self.completions += o.completions;
        self.ok += o.ok;
        self.empty += o.empty;
        self.delivered += o.delivered;
        self.dropped += o.dropped;
        self.penalty_sum += o.penalty_sum;
        self.penalty_n += o.penalty_n;
    }
}

/// One seed's outcome: its totals, and the violation if it violated an invariant.
#[derive(Clone, Debug)]
pub struct SeedResult {
    /// What it adds.
    pub totals: Totals,
    /// `Some(text)`: it violated an invariant.
    pub violation: Option<String>,
}

/// What the file holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    /// First seed.
    pub start: u64,
    /// Seeds in the sweep.
    pub seeds: u64,
    /// Largest cluster a scenario may draw.
    pub max_ranks: usize,
    /// Seed indices `0..done` have finished.
    pub done: u64,
    /// Their totals.
    pub totals: Totals,
    /// Their violations: seed and what it violated.
    pub violations: Vec<(u64, String)>,
    /// Seconds the sweep has run for, over all its runs up to `done`'s last write.
    pub seconds: f64,
}

/// A sweep's progress, shared by its workers behind a lock.
pub struct Progress {
    saved: Saved,
    /// Finished seed indices at or above the watermark, waiting for it.
    ahead: BTreeMap<u64, SeedResult>,
    file: Option<PathBuf>,
    last_write: Instant,
    /// Seconds of earlier runs (from the file).
    earlier: f64,
    started: Instant,
}

impl Progress {
    /// A fresh sweep, or the one `file` holds if it exists (which must be the same sweep).
    pub fn load(file: Option<&Path>, start: u64, seeds: u64, max_ranks: usize) -> Result<Progress, String> {
        let fresh = Saved { start, seeds, max_ranks, ..Saved::default() };
        let saved = match file {
            Some(f) if f.exists() => {
                let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
                let s: Saved = serde_json::from_str(&text)
                    .map_err(|e| format!("{}: not a progress file: {e}", f.display()))?;
                if (s.start, s.seeds, s.max_ranks) != (start, seeds, max_ranks) {
                    return Err(format!(
                        "{} is the progress of --start {} --seeds {} --max-ranks {}, not of --start {start} --seeds {seeds} --max-ranks {max_ranks}",
                        f.display(),
                        s.start,
                        s.seeds,
                        s.max_ranks
                    ));
                }
                if s.done > s.seeds {
                    return Err(format!("{}: {} seeds done of {}", f.display(), s.done, s.seeds));
                }
                s
            }
            _ => fresh,
        };
        Ok(Progress {
            earlier: saved.seconds,
            saved,
            ahead: BTreeMap::new(),
            file: file.map(Path::to_path_buf),
            last_write: Instant::now(),
            started: Instant::now(),
        })
    }

    /// The first seed index not known to have finished.
    pub fn done(&self) -> u64 {
        self.saved.done
    }

    /// What is known (seeds below the watermark).
    pub fn saved(&self) -> &Saved {
        &self.saved
    }

    /// Records seed index `index`'s result; advances the watermark over every contiguous
    /// finished index and writes the file if a second passed since it last did.
    pub fn finish(&mut self, index: u64, result: SeedResult) -> Result<(), String> {
        self.ahead.insert(index, result);
        while let Some(r) = self.ahead.remove(&self.saved.done) {
            self.saved.totals.add(&r.totals);
            if let Some(v) = r.violation {
                self.saved.violations.push((self.saved.start.wrapping_add(self.saved.done), v));
            }
            self.saved.done += 1;
        }
        if self.last_write.elapsed() >= Duration::from_secs(1) {
            self.write()?;
        }
        Ok(())
    }

    /// Writes the file now (if there is one): whole, to `FILE.tmp`, then renamed over it.
    pub fn write(&mut self) -> Result<(), String> {
        self.last_write = Instant::now();
        self.saved.seconds = self.earlier + self.started.elapsed().as_secs_f64();
        let Some(f) = &self.file else { return Ok(()) };
        let tmp = f.with_extension("tmp");
        let text = serde_json::to_string_pretty(&self.saved).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, text + "\n")
            .and_then(|()| std::fs::rename(&tmp, f))
            .map_err(|e| format!("writing {}: {e}", f.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: Option<&str>) -> SeedResult {
        SeedResult {
            totals: Totals { scenarios: 1, completions: 2, ok: 2, ..Totals::default() },
            violation: v.map(str::to_string),
        }
    }

    #[test]
    fn the_watermark_passes_only_contiguous_seeds() {
        let mut p = Progress::load(None, 100, 5, 64).unwrap();
        p.finish(1, one(None)).unwrap();
        p.finish(2, one(Some("x"))).unwrap();
        assert_eq!(p.done(), 0, "seed 0 is still running");
        assert_eq!(p.saved().totals, Totals::default());
        p.finish(0, one(None)).unwrap();
        assert_eq!(p.done(), 3);
        assert_eq!(p.saved().totals.scenarios, 3);
        assert_eq!(p.saved().violations, vec![(102, "x".to_string())]);
    }

    #[test]
    fn a_file_resumes_its_own_sweep_only() {
        let dir = std::env::temp_dir().join(format!("ringcast-dst-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.json");
        let mut p = Progress::load(Some(&f), 7, 4, 64).unwrap();
        p.finish(0, one(None)).unwrap();
        p.finish(1, one(Some("hang"))).unwrap();
        p.write().unwrap();
        let q = Progress::load(Some(&f), 7, 4, 64).unwrap();
        assert_eq!(q.done(), 2);
        assert_eq!(q.saved().violations, vec![(8, "hang".to_string())]);
        assert!(Progress::load(Some(&f), 7, 5, 64).is_err(), "another sweep");
        assert!(Progress::load(Some(&f), 7, 4, 128).is_err(), "another rank bound");
        std::fs::write(&f, "garbage").unwrap();
        assert!(Progress::load(Some(&f), 7, 4, 64).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
