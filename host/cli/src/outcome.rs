//! What a `ringcast run` job ended with, said once: which process or engine ended first and
//! how (exit code or signal), what every other rank got (the last line it wrote to stderr — for
//! a program on the host library or the C ABI, its typed error and the operation), and the
//! engines' counters. Printed when the job failed, or as JSON with `ringcast run --json`.
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

/// How one process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Exited with this code.
    Exit(i32),
    /// Killed by this signal (not by the launcher).
    Signal(i32),
    /// Killed by the launcher: a sibling failed, or the time limit passed.
    Stopped,
    /// Still running when the job ended (an engine).
    Running,
}

impl End {
    pub fn of(status: Option<ExitStatus>) -> End {
        match status {
            None => End::Stopped,
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => End::Exit(c),
                (None, Some(sig)) => End::Signal(sig),
                (None, None) => End::Stopped,
            },
        }
    }

    pub fn failed(self) -> bool {
        !matches!(self, End::Exit(0) | End::Running)
    }

    fn text(self) -> String {
        match self {
            End::Exit(c) => format!("exit {c}"),
            End::Signal(s) => format!("killed by signal {s} ({})", signal_name(s)),
            End::Stopped => "stopped by ringcast run".to_string(),
            End::Running => "running".to_string(),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// One rank's or engine's end.
#[derive(Clone, Debug)]
pub struct Ended {
    /// `rank R (node N)` or `engine N`.
    pub who: String,
    pub end: End,
    /// Since the job started, when the launcher saw it end.
    pub at: Option<Duration>,
    /// Its last line on stderr.
    pub said: Option<String>,
}

impl Ended {
    fn json(&self) -> serde_json::Value {
        json!({
            "who": self.who,
            "end": self.end.text(),
            "at_s": self.at.map(|d| d.as_secs_f64()),
            "said": self.said,
        })
    }

    fn line(&self) -> String {
        let at = self.at.map_or(String::new(), |d| format!(" at +{:.2} s", d.as_secs_f64()));
        let said = self.said.as_ref().map_or(String::new(), |s| format!(": {s}"));
        format!("{}: {}{at}{said}", self.who, self.end.text())
    }
}

/// The job's end: its ranks, its engines (daemon modes), and the counters of the engines that
/// could still be read.
pub struct Outcome {
    pub ranks: Vec<Ended>,
    pub engines: Vec<Ended>,
    /// Engine name and its counters (`ringcast_abi::counters::ALL` order).
    pub counters: Vec<(String, Vec<u64>)>,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        self.ranks.iter().chain(&self.engines).any(|e| e.end.failed())
    }

    /// The failure that came first: the earliest rank or engine that ended badly on its own
    /// (one the launcher stopped is a consequence).
    pub fn first(&self) -> Option<&Ended> {
        let own = |e: &&Ended| e.end.failed() && e.end != End::Stopped;
        self.ranks
            .iter()
            .chain(&self.engines)
            .filter(own)
            .min_by_key(|e| e.at.unwrap_or(Duration::MAX))
            .or_else(|| self.ranks.iter().find(|e| e.end.failed()))
    }

    /// The counters worth a line in a failure report, by name.
    const SHOWN: [&'static str; 8] = [
        "descriptors_ok_total",
        "descriptors_failed_total",
        "hosts_lost_total",
        "collectives_total",
        "repair_frames_total",
        "sync_epochs_total",
        "drops_bad_tag_total",
        "drops_foreign_cookie_total",
    ];

    pub fn text(&self) -> String {
        let mut out = String::from("ringcast run: the job failed\n");
        if let Some(f) = self.first() {
            out += &format!("  first: {}\n", f.line());
        }
        for e in self.ranks.iter().chain(&self.engines) {
            out += &format!("  {}\n", e.line());
        }
        for (name, v) in &self.counters {
            let shown: Vec<String> = Self::SHOWN
                .iter()
                .filter_map(|n| {
                    let i = ringcast_abi::counters::index_of(n)?;
                    Some(format!("{} {}", n.trim_end_matches("_total"), v.get(i)?))
                })
                .collect();
            out += &format!("  engine {name}: {}\n", shown.join(", "));
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let counters: Vec<serde_json::Value> = self
            .counters
            .iter()
            .map(|(name, v)| {
                let named: serde_json::Map<String, serde_json::Value> = ringcast_abi::counters::ALL
                    .iter()
                    .zip(v)
                    .map(|(c, v)| (c.name.to_string(), json!(v)))
                    .collect();
                json!({ "engine": name, "counters": named })
            })
            .collect();
        json!({
            "ok": !self.failed(),
            "first_failure": self.first().map(Ended::json),
            "ranks": self.ranks.iter().map(Ended::json).collect::<Vec<_>>(),
            "engines": self.engines.iter().map(Ended::json).collect::<Vec<_>>(),
            "engine_counters": counters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(who: &str, end: End, at_ms: u64) -> Ended {
        Ended { who: who.into(), end, at: Some(Duration::from_millis(at_ms)), said: None }
    }

    #[test]
    fn the_first_failure_is_the_earliest_one_not_caused_by_the_launcher() {
        let o = Outcome {
            ranks: vec![
                ended("rank 0 (node 0)", End::Exit(1), 900),
                ended("rank 1 (node 0)", End::Stopped, 950),
                ended("rank 2 (node 1)", End::Signal(9), 300),
            ],
            engines: vec![ended("engine 0", End::Running, 0)],
            counters: Vec::new(),
        };
        assert!(o.failed());
        assert_eq!(o.first().map(|e| e.who.as_str()), Some("rank 2 (node 1)"));
        let text = o.text();
        assert!(text.contains("first: rank 2 (node 1): killed by signal 9 (SIGKILL) at +0.30 s"), "{text}");
        assert!(text.contains("rank 1 (node 0): stopped by ringcast run"), "{text}");
        let ok = Outcome { ranks: vec![ended("rank 0", End::Exit(0), 1)], engines: vec![], counters: vec![] };
        assert!(!ok.failed());
        assert_eq!(ok.json()["ok"], true);
    }
}
