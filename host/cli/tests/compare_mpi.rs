//! `ringcast bench --compare-mpi`: ringcast and Open MPI's own MPI_Bcast on the same machine in
//! one run. Checks what the report must hold, never a speed: both sides measured every size
//! (positive times), the ratio is ringcast's slowest rank over Open MPI's, the commands are
//! there to rerun, and nothing is left in `/dev/shm`. Needs `mpirun.openmpi` and the MPI program
//! (`make bench-compare-build` or `make test-mpi` put it in target/release/); without them it
//! prints `SKIP: <reason>` and returns.
use std::path::PathBuf;
use std::process::Command;

/// The MPI program in target/release/ (the tests' CLI is in target/debug/ or target/release/).
fn mpi_program() -> PathBuf {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_ringcast"));
    cli.parent().and_then(|d| d.parent()).map(|t| t.join("release/mpi-osu-bcast")).unwrap_or_default()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn barrier_segments() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("ringcast-run-") && n.contains("barrier"))
        .collect()
}

#[test]
fn compare_mpi_reports_both_sides_and_the_ratio_of_the_slowest_ranks() {
    let program = mpi_program();
    if !on_path("mpirun.openmpi") {
        println!("SKIP: mpirun.openmpi is not installed");
        return;
    }
    if !program.is_file() {
        println!("SKIP: {} not built (make bench-compare-build)", program.display());
        return;
    }
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["bench", "--compare-mpi", "-n", "2", "--mode", "thread", "--sizes", "2,4096"])
        .args(["--iters", "20", "--rounds", "1", "--json", "--mpi-bench"])
        .arg(&program)
        .env("RINGCAST_LOG_LEVEL", "0")
        .output()
        .expect("run ringcast");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(doc["ranks"], 2, "{doc}");
    assert!(doc["mpi_command"].as_str().unwrap().contains("-np 2 "), "{doc}");
    assert!(doc["ringcast_command"].as_str().unwrap().contains("--barrier"), "{doc}");
    let results = doc["results"].as_array().expect("results");
    let sizes: Vec<u64> = results.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [2, 4096], "{doc}");
    for r in results {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
        for k in [
            "ringcast_avg_us",
            "ringcast_max_us",
            "ringcast_slowest_engine_us",
            "mpi_avg_us",
            "mpi_max_us",
            "ratio",
        ] {
            assert!(f(k) > 0.0 && f(k).is_finite(), "{k}: {r}");
        }
        // The slowest rank's engine time lies inside its calls (1 ns of rounding allowed).
        assert!(f("ringcast_slowest_engine_us") <= f("ringcast_max_us") + 0.002, "{r}");
        assert!(f("ringcast_max_us") >= f("ringcast_avg_us") && f("mpi_max_us") >= f("mpi_avg_us"), "{r}");
        let ratio = f("ringcast_max_us") / f("mpi_max_us");
        assert!((f("ratio") - ratio).abs() <= 1e-9 * ratio, "ratio is max/max: {r}");
        assert_eq!(r["iterations"], 20, "{r}");
    }
    assert!(barrier_segments().is_empty(), "{:?}", barrier_segments());
}

#[test]
fn compare_mpi_names_the_make_target_when_the_program_is_missing() {
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["bench", "--compare-mpi", "-n", "2", "--mpi-bench", "/nonexistent/mpi-osu-bcast"])
        .output()
        .expect("run ringcast");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("make bench-compare-build"), "{err}");
}
