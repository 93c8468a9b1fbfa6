//! The Prometheus text exposition format (version 0.0.4) of the engines' counters: one family
//! per counter of `ringcast_abi::counters::ALL` (`ringcast_<name>{engine="NAME"}`, `_total`
//! ones typed `counter`, the others `gauge`), three per-communicator series, and
//! `ringcast_engine_up` — what `--prometheus` prints for node_exporter's textfile collector and
//! `--serve` answers a Prometheus server with.
//!
//! Written here rather than with the `prometheus-client` crate: that crate encodes OpenMetrics
//! only (a counter family is named without `_total`, its samples with it, and the text ends
//! with `# EOF`), which node_exporter's textfile collector — the documented reader of
//! `--prometheus` — does not take as the 0.0.4 format; and its model is metrics the process
//! itself updates, where these are snapshots read from other processes per scrape. What the
//! format asks of a writer is the escaping of label values and help texts, done and tested
//! below.
use super::engines::Watched;
use ringcast_abi::counters::{CounterKind, ALL};
use ringcast_host::CommInfo;

/// `s` as a Prometheus label value (backslash, quote and newline escaped).
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `s` as a `# HELP` text (backslash and newline escaped).
fn help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A per-communicator Prometheus series: its name, help and value.
type PerComm = (&'static str, &'static str, fn(&CommInfo) -> u64);

/// Every counter (and the per-communicator series) in the Prometheus text exposition format.
pub fn render(engines: &[Watched]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (i, c) in ALL.iter().enumerate() {
        let _ = writeln!(out, "# HELP ringcast_{} {}", c.name, help(c.help));
        let kind = if c.kind == CounterKind::Total { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE ringcast_{} {kind}", c.name);
        for e in engines.iter().filter(|e| e.error.is_none()) {
            if let Some(v) = e.last.as_ref().and_then(|(_, v)| v.get(i)) {
                let _ = writeln!(out, "ringcast_{}{{engine=\"{}\"}} {v}", c.name, label(&e.name));
            }
        }
    }
    let per_comm: [PerComm; 3] = [
        ("comm_broadcasts_total", "broadcast ids posted on the communicator at this engine", |c| {
            u64::from(c.posted)
        }),
        ("comm_sync_epochs_total", "synchronization epochs the communicator completed", |c| {
            u64::from(c.synced_epochs)
        }),
        ("comm_broken", "1 if a member of the communicator was declared unreachable", |c| {
            u64::from(c.broken)
        }),
    ];
    for (name, text, value) in per_comm {
        let _ = writeln!(out, "# HELP ringcast_{name} {}", help(text));
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE ringcast_{name} {kind}");
        for e in engines.iter().filter(|e| e.error.is_none()) {
            for c in &e.comms {
                let engine = label(&e.name);
                let _ = writeln!(
                    out,
                    "ringcast_{name}{{engine=\"{engine}\",comm=\"{:#x}\"}} {}",
                    c.handle,
                    value(c)
                );
            }
        }
    }
    let _ = writeln!(out, "# HELP ringcast_engine_up whether the engine answered");
    let _ = writeln!(out, "# TYPE ringcast_engine_up gauge");
    for e in engines {
        let _ = writeln!(
            out,
            "ringcast_engine_up{{engine=\"{}\"}} {}",
            label(&e.name),
            u8::from(e.error.is_none())
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_texts_are_escaped() {
        assert_eq!(label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(label("x\ny"), "x\\ny");
        assert_eq!(help("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");
    }

    #[test]
    fn every_family_has_help_and_type_and_an_engine_that_never_answered_is_down() {
        let mut gone = Watched::new("a\"b".to_string());
        gone.error = Some("not running".into());
        let text = render(&[gone]);
        for c in ALL {
            assert!(text.contains(&format!("# HELP ringcast_{} ", c.name)), "{}", c.name);
            assert!(text.contains(&format!("# TYPE ringcast_{} ", c.name)), "{}", c.name);
        }
        assert!(text.contains("ringcast_engine_up{engine=\"a\\\"b\"} 0\n"), "{text}");
        // No sample of an engine that was not read.
        assert!(!text.lines().any(|l| !l.starts_with('#') && !l.starts_with("ringcast_engine_up")), "{text}");
    }
}
