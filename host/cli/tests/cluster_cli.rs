//! `ringcast run` and `ringcast bench` on a local emulated cluster (real engine daemons or
//! engine threads, the shared-memory fabric, real processes): results for every size, byte
//! checks inside the ranks, the binomial comparison, and nothing left behind.
use std::process::Command;

fn ringcast(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(args)
        .env("RINGCAST_LOG_LEVEL", "0")
        .output()
        .expect("run ringcast");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn shm_left() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("ringcast-run-"))
        .collect()
}

#[test]
fn bench_and_run_on_a_local_cluster() {
    for mode in ["daemon", "thread"] {
        let (ok, out, err) = ringcast(&[
            "bench",
            "-n",
            "3",
            "--mode",
            mode,
            "--iters",
            "20",
            "--sizes",
            "2,70000",
            "--compare",
            "--json",
        ]);
        assert!(ok, "{mode}: {out}\n{err}");
        for key in ["\"size\":2,", "\"size\":70000,", "\"speedup\":", "\"avg_us\":", "\"cpu_us\":"] {
            assert!(out.contains(key), "{mode}: {key} missing from {out}");
        }
    }
    run_starts_programs_on_every_node_and_reports_failures();
}

/// Part of the test above: both check that nothing is left in `/dev/shm`, so they run in turn.
fn run_starts_programs_on_every_node_and_reports_failures() {
    let (ok, _, err) = ringcast(&["run", "-n", "2", "--", "/bin/sh", "-c", "test -n \"$RINGCAST_NODE\""]);
    assert!(ok, "{err}");
    let (ok, _, err) = ringcast(&["run", "-n", "2", "--", "/bin/sh", "-c", "test \"$RINGCAST_NODE\" = 0"]);
    assert!(!ok, "node 1 fails its test: the run must fail");
    assert!(err.contains("failed"), "{err}");
    assert!(shm_left().is_empty(), "{:?}", shm_left());
}
