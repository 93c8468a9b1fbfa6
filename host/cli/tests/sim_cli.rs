//! `ringcast sim` end to end: every scenario in `fixtures/sim/` parses and runs (shrunk with
//! `--set` where the full sweep belongs to `make reproduce`), writes its table as CSV and JSON
//! and its plots as SVG and PNG, and the million-rank run completes every rank. And
//! `ringcast paper --mamidala --quick`: Mamidala et al.'s Figures 5–7 as schedule models, every
//! table printed with the paper's orderings holding, every plot written.
use std::collections::HashMap;
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

/// The rows of the table printed under the first line containing `title`: per row, each
/// numeric cell by its column name.
fn printed_table(text: &str, title: &str) -> Vec<HashMap<String, f64>> {
    let at = text.find(title).unwrap_or_else(|| panic!("no {title:?} in:\n{text}"));
    let mut lines = text[at..].lines().skip(1).skip_while(|l| !l.trim_start().starts_with("bytes"));
    let header: Vec<String> =
        lines.next().unwrap_or_default().split_whitespace().map(str::to_string).collect();
    lines
        .skip(1) // the rule
        .take_while(|l| l.split_whitespace().next().is_some_and(|c| c.parse::<u64>().is_ok()))
        .map(|l| {
            let cells = l.split_whitespace().map(|c| c.parse::<f64>().ok());
            header.iter().cloned().zip(cells).filter_map(|(h, v)| Some((h, v?))).collect()
        })
        .collect()
}

fn row(table: &[HashMap<String, f64>], bytes: f64) -> &HashMap<String, f64> {
    table.iter().find(|r| r["bytes"] == bytes).unwrap_or_else(|| panic!("no row for {bytes} bytes"))
}

#[test]
fn paper_mamidala_prints_figures_5_to_7_with_the_papers_orderings() {
    let out = std::env::temp_dir().join(format!("ringcast-mamidala-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["paper", "--mamidala", "--quick", "--out"])
        .arg(&out)
        .current_dir(root())
        .output()
        .expect("run ringcast paper --mamidala");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));

    // Figure 7: on 16 × 8 (the quick sweep), leader-based beats the flat ring in both placements.
    let ag = printed_table(&text, "Figure 7");
    assert_eq!(ag.len(), 2, "{text}");
    let r = row(&ag, 65536.0);
    assert!(r["leaders_us"] * 4.0 < r["ring_cyclic_us"], "{r:?}");
    assert!(r["leaders_us"] < r["ring_block_us"], "{r:?}");
    assert!(r["x_vs_mpich_cyclic"] > 1.0 && r["x_vs_mpich_block"] > 1.0, "{r:?}");
    assert!(r["mcast_procs_us"] < r["mcast_engine_us"], "{r:?}");

    // Figure 6(a,b): cyclic ≤ parallel < single reducer at 1 MiB on both nodes, and cyclic
    // strictly better than parallel on the NUMA one only.
    let ar = printed_table(&text, "Figure 6(a,b)");
    let r = row(&ar, 1048576.0);
    for node in ["opteron", "clovertown"] {
        let col = |c: &str| r[&format!("{node}_{c}_us")];
        assert!(col("cyclic") <= col("parallel") * 1.001 && col("parallel") < col("single"), "{node}: {r:?}");
    }
    assert!(r["opteron_cyclic_vs_parallel_pct"] > 10.0, "{r:?}");
    assert!(r["clovertown_cyclic_vs_parallel_pct"].abs() < 1.0, "{r:?}");

    // Figure 6(c): the bidirectional schedule wins.
    let ht = printed_table(&text, "Figure 6(c)");
    let r = row(&ht, 1048576.0);
    assert!(r["bidirectional_us"] < r["one_direction_us"] && r["gain_pct"] > 5.0, "{r:?}");

    // Alltoall across nodes: aggregation pays off for tiny messages.
    let a2a = printed_table(&text, "== Alltoall");
    let r = row(&a2a, 16.0);
    assert!(
        r["aggregated_us"] < r["pairwise_block_us"] && r["aggregated_us"] < r["pairwise_cyclic_us"],
        "{r:?}"
    );

    assert!(text.contains("Figure 5(c)") && text.contains("not modelled"), "{text}");
    for stem in
        ["mamidala-allgather-16x8", "mamidala-allreduce-node", "mamidala-alltoall", "mamidala-alltoall-16x8"]
    {
        let svg = out.join(format!("{stem}.svg"));
        let bytes = std::fs::read(&svg).unwrap_or_else(|e| panic!("{}: {e}", svg.display()));
        assert!(bytes.len() > 1000, "{} is empty", svg.display());
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn paper_mamidala_options_need_the_flag() {
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["paper", "--quick"])
        .output()
        .expect("run ringcast paper --quick");
    assert_eq!(o.status.code(), Some(2), "--quick alone must be refused");
}
