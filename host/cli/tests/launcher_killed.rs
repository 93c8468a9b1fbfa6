//! Issue 13, defect 3: `ringcast run` SIGKILLed mid-job. Its engine daemons and programs must
//! die with it (parent-death signal), and nothing of the job may stay in `/dev/shm`: daemons
//! stop cleanly and remove the job's segments; what engine threads killed with their programs
//! leave is named after the dead launcher and removed by the next run. Only this test's own
//! job is looked at (processes by their `RINGCAST_JOB`, segments by the job's name), so other
//! jobs running on the machine at the same time neither disturb it nor are disturbed.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_secs(30);

/// Live processes whose environment says they belong to `job`.
fn processes_of(job: &str) -> Vec<u32> {
    let needle = format!("RINGCAST_JOB={job}");
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // Unreadable (another user's, or gone): not ours. A zombie's environment reads empty.
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

fn segments_of(job: &str) -> Vec<String> {
    let mut v = ringcast_ring::ShmSegment::list_named(&format!("ringcast-{job}-")).unwrap();
    v.sort();
    v
}

/// Kills whatever of `job` is still running and unlinks its segments when dropped, so that a
/// failing run (today's orphans) does not stay behind.
struct Reaper(String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in processes_of(&self.0) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = ringcast_offload::fabric::shm::cleanup(&self.0);
    }
}

fn kill_launcher_mid_job(mode: &str) {
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["run", "-n", "2", "-p", "2", "--fabric", "shm", "--mode", mode, "--timeout", "600", "--"])
        .arg(env!("CARGO_BIN_EXE_ringcast"))
        .args(["workload-rank", "--count", "200000", "--sizes", "2,1500", "--seed", "3"])
        .env("RINGCAST_LOG_LEVEL", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start ringcast run");
    let job = format!("run-{}", launcher.id());
    let _reaper = Reaper(job.clone());
    // Mid-job: every process up (4 programs, plus 2 daemons) and the engines' segments there.
    let expected = if mode == "daemon" { 6 } else { 4 };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (procs, segs) = (processes_of(&job), segments_of(&job));
        if procs.len() >= expected && segs.iter().any(|s| s.ends_with("-bells")) {
            break;
        }
        assert!(launcher.try_wait().unwrap().is_none(), "{mode}: the run ended early");
        assert!(Instant::now() < deadline, "{mode}: job never came up: {procs:?} {segs:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500)); // broadcasts under way
    launcher.kill().unwrap(); // SIGKILL: no teardown runs
    launcher.wait().unwrap();

    // Every engine and program of the job dies, within a generous bound.
    let deadline = Instant::now() + BOUND;
    while !processes_of(&job).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survivors = processes_of(&job);
    assert!(
        survivors.is_empty(),
        "{mode}: processes of {job} outlived their launcher by {BOUND:?}: {survivors:?}"
    );

    // The next run reclaims what the dead job left (if the engines did not already).
    let left_by_job = segments_of(&job);
    let o = Command::new(env!("CARGO_BIN_EXE_ringcast"))
        .args(["run", "-n", "1", "-p", "1", "--fabric", "shm", "--", "/bin/true"])
        .env("RINGCAST_LOG_LEVEL", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{mode}: the next run failed: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        segments_of(&job),
        Vec::<String>::new(),
        "{mode}: segments of the killed job {job} survived the next run (left at the kill: {left_by_job:?})"
    );
    eprintln!("{mode}: {} segments of {job} left at the kill, none after the next run", left_by_job.len());
}

#[test]
fn killing_the_launcher_kills_its_daemons_and_leaves_no_segments() {
    kill_launcher_mid_job("daemon");
}

#[test]
fn killing_the_launcher_kills_its_engine_threads_and_leaves_no_segments() {
    kill_launcher_mid_job("thread");
}
