//! `ringcast calibrate` on the real UDP fabric over loopback and the real shared-memory fabric:
//! it measures, prints every LogGP parameter, and writes a scenario that `ringcast sim` runs.
use std::process::Command;
use std::sync::Mutex;

/// The shm runs check `/dev/shm` for leftovers of any calibration: one at a time.
static SHM: Mutex<()> = Mutex::new(());

#[test]
fn udp_calibration_writes_a_runnable_scenario() {
    calibration_writes_a_runnable_scenario("udp");
}

#[test]
fn shm_calibration_writes_a_runnable_scenario_and_leaves_nothing() {
    let _one = SHM.lock().unwrap_or_else(|e| e.into_inner());
    calibration_writes_a_runnable_scenario("shm");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with("ringcast-calibrate-")), "{left:?}");
}

fn calibration_writes_a_runnable_scenario(fabric: &str) {
    let dir = std::env::temp_dir().join(format!("ringcast-calibrate-{fabric}-{}", std::process::id()));
    let file = dir.join(format!("{fabric}.toml"));
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["calibrate", "--fabric", fabric, "--count", "300", "--out"])
        .arg(&file)
        .output()
        .expect("run ringcast calibrate");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    for key in ["round trip", "o_send", "o_recv", "L ", "g ", "G "] {
        assert!(text.contains(key), "missing {key}: {text}");
    }
    let scenario = std::fs::read_to_string(&file).expect("scenario written");
    let rtt: f64 = text
        .split("round trip ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a round trip figure");
    assert!(rtt > 0.0, "{text}");
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .arg("sim")
        .arg(&file)
        .args(["--no-files", "--set", "sweep.broadcasts=1"])
        .env("RINGCAST_NO_PROGRESS", "1")
        .output()
        .expect("run ringcast sim");
    assert!(o.status.success(), "{scenario}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("sim_us"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--compare`: the simulator's predictions beside measured broadcasts at 2, 4 and 8 nodes,
/// written as a table with one row per (nodes, algorithm, size) and finite numbers throughout.
#[test]
fn compare_writes_the_fidelity_table() {
    let _one = SHM.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("ringcast-fidelity-{}", std::process::id()));
    let file = dir.join("shm.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["calibrate", "--fabric", "shm", "--count", "200", "--compare", "--out"])
        .arg(&file)
        .env("RINGCAST_LOG_LEVEL", "0")
        .output()
        .expect("run ringcast calibrate --compare");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("a wake-up adds"), "{text}");
    let csv = std::fs::read_to_string(dir.join("shm-fidelity.csv")).expect("fidelity table");
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 3 * 2 * 2, "{csv}");
    for r in &rows {
        let f: Vec<&str> = r.split(',').collect();
        assert_eq!(f.len(), 9, "{r}");
        for v in &f[4..7] {
            let x: f64 = v.parse().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
