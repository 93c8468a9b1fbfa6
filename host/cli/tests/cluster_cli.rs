//! `ringcast run` and `ringcast bench` on a local emulated cluster (real engine daemons or
//! engine threads, the shared-memory fabric, real processes): results for every size, byte
//! checks inside the ranks, the binomial comparison, and nothing left behind.
use std::process::Command;
use std::sync::Mutex;

/// The tests below check that nothing is left in `/dev/shm`: one cluster at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn ringcast(args: &[&str]) -> (bool, String, String) {
    ringcast_env(args, &[])
}

fn ringcast_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(args)
        .env("RINGCAST_LOG_LEVEL", "0")
        .envs(env.iter().copied())
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
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

/// Every collective `ringcast bench --collective` runs, on `shm` and `udp`, with multicast loss
/// injected at the receivers: every rank checks the last result of every size (a wrong byte
/// fails the run), and the engines had to repair.
#[test]
fn every_collective_benches_verified_under_loss() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let loss = [
        ("RINGCAST_FAULT_DROP", "0.05"),
        ("RINGCAST_FAULT_KINDS", "mcast"),
        ("RINGCAST_FAULT_DIRECTION", "rx"),
    ];
    for fabric in ["shm", "udp"] {
        let mut repairs = 0u64;
        for coll in ["bcast", "allreduce", "reduce", "allgather", "alltoall", "barrier"] {
            let (ok, out, err) = ringcast_env(
                &[
                    "bench",
                    "--collective",
                    coll,
                    "-n",
                    "3",
                    "--node-ranks",
                    "2,1,2",
                    "--fabric",
                    fabric,
                    "--algorithm",
                    "multicast",
                    "--iters",
                    "15",
                    "--sizes",
                    "8,3000",
                    "--json",
                ],
                &loss,
            );
            assert!(ok, "{fabric} {coll}: {out}\n{err}");
            let doc: serde_json::Value = serde_json::from_str(out.trim()).expect("bench --json");
            assert_eq!(doc["collective"], coll);
            let rows = doc["results"].as_array().expect("results");
            let want: &[u64] = match coll {
                "barrier" => &[0],
                _ => &[8, 3000],
            };
            assert_eq!(rows.iter().map(|r| r["size"].as_u64().unwrap()).collect::<Vec<_>>(), want, "{out}");
            repairs += rows.iter().map(|r| r["repair_frames"].as_u64().unwrap()).sum::<u64>();
        }
        assert!(repairs > 0, "{fabric}: 5 % multicast loss, yet no repair frame");
    }
}

/// Part of `bench_and_run_on_a_local_cluster`: both check that nothing is left in `/dev/shm`, so they run in turn.
fn run_starts_programs_on_every_node_and_reports_failures() {
    let (ok, _, err) = ringcast(&["run", "-n", "2", "--", "/bin/sh", "-c", "test -n \"$RINGCAST_NODE\""]);
    assert!(ok, "{err}");
    let (ok, _, err) = ringcast(&["run", "-n", "2", "--", "/bin/sh", "-c", "test \"$RINGCAST_NODE\" = 0"]);
    assert!(!ok, "node 1 fails its test: the run must fail");
    assert!(err.contains("failed"), "{err}");
    assert!(shm_left().is_empty(), "{:?}", shm_left());
}
