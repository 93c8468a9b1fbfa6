//! `ringcast dst` from the command line (issue 38, items 3 and 9): no sweep passes that ran
//! nothing — a seed range past the last seed is refused, the last two seeds run, `--seeds 0`
//! fails, and the summary says how many scenarios ran — and a sweep stopped mid-way (SIGKILL)
//! resumes from its progress file to exactly the totals of a sweep that was never stopped.
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn dst(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ringcast")).arg("dst").args(args).output().expect("run ringcast dst")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The summary line's numbers from "violated" on (the same for the same seeds, however run).
fn verdict(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("scenarios run of"))
        .unwrap_or_else(|| panic!("no summary: {}", text(o)));
    line[line.find(" violated").expect("a verdict")..].to_string()
}

#[test]
fn a_sweep_that_would_run_nothing_fails() {
    // The last two seeds there are: both run (they did not before: the range wrapped to empty
    // and the sweep passed, "0 completions checked").
    let o = dst(&["--seeds", "2", "--start", "18446744073709551614", "--max-ranks", "16"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("2 scenarios run of 2 seeds"), "{}", text(&o));
    // One more is past the last seed: refused, with the reason.
    let o = dst(&["--seeds", "3", "--start", "18446744073709551614"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("runs past the last seed"), "{}", text(&o));
    let o = dst(&["--seeds", "1", "--start", "18446744073709551615", "--max-ranks", "16"]);
    assert!(o.status.success(), "the very last seed runs: {}", text(&o));
    for bad in
        [&["--seeds", "0"][..], &["--seeds", "5", "--jobs", "0"], &["--seeds", "5", "--max-ranks", "1"]]
    {
        let o = dst(bad);
        assert!(!o.status.success(), "{bad:?} passed: {}", text(&o));
        assert!(!text(&o).contains("scenarios run of"), "{bad:?} ran: {}", text(&o));
    }
}

#[test]
fn a_stopped_sweep_resumes_where_it_stopped() {
    let dir = std::env::temp_dir().join(format!("ringcast-dst-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("progress.json");
    let sweep = ["--seeds", "120", "--start", "424242", "--max-ranks", "24", "--jobs", "2"];
    let whole = dst(&sweep);
    assert!(whole.status.success(), "{}", text(&whole));

    // The same sweep, killed once its file says some seeds but not all are done.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .arg("dst")
        .args(sweep)
        .arg("--progress")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let done = |f: &Path| -> u64 {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["done"].as_u64())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut killed_at = None;
    while Instant::now() < deadline {
        let d = done(&file);
        if child.try_wait().unwrap().is_some() {
            break; // finished before it could be stopped: the resume below runs nothing
        }
        if d > 0 {
            child.kill().unwrap();
            child.wait().unwrap();
            killed_at = Some(done(&file));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Not stopped within the bound: stop it now (the resume below then finishes it).
    let _ = child.kill();
    let _ = child.wait();
    let resumed = dst(&[&sweep[..], &["--progress", file.to_str().unwrap()]].concat());
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(verdict(&resumed), verdict(&whole), "the resumed sweep's totals differ from the whole one's");
    let out = String::from_utf8_lossy(&resumed.stdout);
    assert!(out.starts_with("120 scenarios run of 120 seeds"), "{out}");
    if let Some(k) = killed_at.filter(|&k| k < 120) {
        assert!(out.contains(&format!(", {k} before)")), "resumed from {k}: {out}");
    }
    eprintln!("killed with {killed_at:?} seeds done; resumed: {}", out.lines().next().unwrap_or(""));
    // A file of another sweep is refused.
    let other = dst(&[
        "--seeds",
        "121",
        "--start",
        "424242",
        "--max-ranks",
        "24",
        "--progress",
        file.to_str().unwrap(),
    ]);
    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    std::fs::remove_dir_all(&dir).unwrap();
}
