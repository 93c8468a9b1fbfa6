//! `ringcast sim` end to end: every scenario in `fixtures/sim/` parses and runs (shrunk with
//! `--set` where the full sweep belongs to `make reproduce`), writes its table as CSV and JSON
//! and its plots as SVG and PNG, and the million-rank run completes every rank.
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sim(args: &[&str], out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .arg("sim")
        .args(args)
        .arg("--out")
        .arg(out)
        .env("RINGCAST_NO_PROGRESS", "1")
        .current_dir(root())
        .output()
        .expect("run ringcast sim");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "ringcast sim {args:?} failed:\n{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn every_fixture_runs_and_writes_tables_and_plots() {
    let out = std::env::temp_dir().join(format!("ringcast-sim-test-{}", std::process::id()));
    let dir = root().join("fixtures/sim");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).expect("fixtures/sim") {
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "toml") && !path.ends_with("million.toml") {
            names.push(path);
        }
    }
    names.sort();
    assert!(names.len() >= 7, "the reproduction scenarios are in fixtures/sim");
    for path in &names {
        // Smaller sweeps than the reproduction: the same code paths in seconds.
        let quick =
            ["--set", "sweep.broadcasts=2", "--set", "sweep.ranks=[8,20]", "--set", "sweep.bytes=[2,20000]"];
        let text = sim(
            &[path.to_str().unwrap_or_default(), quick[0], quick[1], quick[2], quick[3], quick[4], quick[5]],
            &out,
        );
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        assert!(text.contains("sim_us"), "{name}: no table printed:\n{text}");
        for ext in ["csv", "json"] {
            assert!(out.join(format!("{name}.{ext}")).exists(), "{name}.{ext} not written");
        }
        for ext in ["svg", "png"] {
            let plot = out.join(format!("{name}-latency.{ext}"));
            let bytes = std::fs::read(&plot).unwrap_or_else(|e| panic!("{}: {e}", plot.display()));
            assert!(bytes.len() > 1000, "{} is empty", plot.display());
        }
        let rows = csv_rows(&out.join(format!("{name}.csv")));
        let err = rows[0].iter().position(|h| h == "errors").expect("errors column");
        assert!(rows.len() > 1);
        assert!(rows[1..].iter().all(|r| r[err].trim() == "0"), "{name}: a broadcast failed");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_million_rank_multicast_completes_every_rank() {
    let out = std::env::temp_dir().join(format!("ringcast-sim-million-{}", std::process::id()));
    let text = sim(&["fixtures/sim/million.toml"], &out);
    let rows = csv_rows(&out.join("million.csv"));
    let h = &rows[0];
    let col = |n: &str| h.iter().position(|x| x == n).unwrap_or_else(|| panic!("column {n}"));
    assert_eq!(rows[1][col("P")], "1000000");
    assert_eq!(rows[1][col("errors")], "0");
    // Every rank completed: the simulated latency is a real number, and it is the multicast's
    // (a few microseconds), not a tree's.
    let sim_us: f64 = rows[1][col("sim_us")].parse().expect("sim_us");
    assert!(sim_us > 0.5 && sim_us < 50.0, "{sim_us}");
    assert!(text.contains("bytes per simulated rank"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_scenarios_are_clear_errors() {
    let out = std::env::temp_dir().join("ringcast-sim-bad");
    for bad in [
        ["--set", "sweep.algorithms=[\"quantum\"]"],
        ["--set", "sweep.rnks=[4]"],
        ["--set", "fabric.lanes=0"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
            .args(["sim", bad[0], bad[1], "--no-files"])
            .arg("--out")
            .arg(&out)
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{bad:?} must be refused");
        assert!(!o.stderr.is_empty());
    }
}
