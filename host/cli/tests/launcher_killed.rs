//! Issues 13 (defect 3) and 38 (item 4): a launcher — `ringcast run`, `ringcast bench` — ended
//! mid-job by a signal (SIGKILL: no teardown runs; SIGTERM, SIGHUP: their default action ends
//! it just as abruptly). Its engine daemons and programs must die with it (parent-death
//! signal), and nothing of the job may outlive it, without waiting for a later start:
//! * `/dev/shm`: daemons stop cleanly and remove the job's segments; engine threads killed with
//!   their programs leave them to their reapers (`offload/ring/src/reaper.rs`);
//! * network namespaces (`--netns`, `--mode dpu`): deleted by the launcher's namespace reaper
//!   (`host/cli/src/ns_reaper.rs`).
//!
//! Only this test's own jobs are looked at (processes by their `RINGCAST_JOB`, segments by the
//! job's name, namespaces by the launcher's pid), so other jobs running on the machine at the
//! same time neither disturb it nor are disturbed.
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the job's processes may take to die, and its segments and namespaces to go.
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

fn bytes_of(names: &[String]) -> u64 {
    names.iter().filter_map(|n| std::fs::metadata(format!("/dev/shm/{n}")).ok()).map(|m| m.len()).sum()
}

/// The network namespaces of launcher `pid`'s labs.
fn namespaces_of(pid: u32) -> Vec<String> {
    ringcast_host::netns::Lab::existing(&format!("rch{pid}-"))
}

/// Kills whatever of `job` is still running, unlinks its segments and deletes its launcher's
/// namespaces when dropped, so that a failing run does not stay behind.
struct Reaper(String, u32);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in processes_of(&self.0) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = ringcast_offload::fabric::shm::cleanup(&self.0);
        for ns in namespaces_of(self.1) {
            let _ = ringcast_host::netns::ip(&["netns", "del", &ns]);
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill -{sig}");
}

/// Waits (at most [`BOUND`]) until `done`; whether it came.
fn within_bound(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + BOUND;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// What one launcher left once it and its job were gone.
struct Left {
    segments: Vec<String>,
    bytes: u64,
    namespaces: Vec<String>,
    survivors: Vec<u32>,
}

/// Starts `launcher`, waits until `up` says the job is under way, ends it with `sig`, waits
/// for it, then (within [`BOUND`]) for its job's processes, segments and namespaces to go.
fn end_mid_job(what: &str, mut launcher: Command, sig: &str, up: impl Fn(&str, u32) -> bool) -> Left {
    let mut launcher =
        launcher.stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("start the launcher");
    let pid = launcher.id();
    let job = format!("run-{pid}");
    let _reaper = Reaper(job.clone(), pid);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !up(&job, pid) {
        assert!(launcher.try_wait().unwrap().is_none(), "{what}: the launcher ended early");
        assert!(Instant::now() < deadline, "{what}: the job never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500)); // under way
    signal(&launcher, sig);
    launcher.wait().unwrap();
    within_bound(|| processes_of(&job).is_empty());
    within_bound(|| segments_of(&job).is_empty() && namespaces_of(pid).is_empty());
    let segments = segments_of(&job);
    let left = Left {
        bytes: bytes_of(&segments),
        segments,
        namespaces: namespaces_of(pid),
        survivors: processes_of(&job),
    };
    eprintln!(
        "{what}, SIG{sig}: {} processes, {} segments ({} bytes), {} namespaces left",
        left.survivors.len(),
        left.segments.len(),
        left.bytes,
        left.namespaces.len()
    );
    left
}

fn assert_nothing_left(what: &str, left: Left) {
    assert!(
        left.survivors.is_empty(),
        "{what}: processes outlived their launcher by {BOUND:?}: {:?}",
        left.survivors
    );
    assert!(
        left.segments.is_empty(),
        "{what}: {} segments ({} bytes) outlived the job by {BOUND:?}: {:?}",
        left.segments.len(),
        left.bytes,
        left.segments
    );
    assert!(
        left.namespaces.is_empty(),
        "{what}: namespaces outlived the job by {BOUND:?}: {:?}",
        left.namespaces
    );
}

/// The launcher, with the signals this test sends at their default handling: a launcher
/// inherits ignored signals (a suite started under `nohup` ignores SIGHUP, one started in the
/// background of a script SIGINT), and rightly keeps ignoring them — which would make the
/// SIGHUP case wait for the job's 600 s instead of testing the launcher's handler. `env`
/// resets them and executes the launcher in its place (same pid).
fn ringcast() -> Command {
    let mut c = Command::new("env");
    c.args(["--default-signal=HUP,INT,TERM", env!("CARGO_BIN_EXE_ringcast")]);
    c.env("RINGCAST_LOG_LEVEL", "0");
    c
}

fn shm_job_ended_by(mode: &str, sig: &str) {
    let mut launcher = ringcast();
    launcher
        .args(["run", "-n", "2", "-p", "2", "--fabric", "shm", "--mode", mode, "--timeout", "600", "--"])
        .arg(env!("CARGO_BIN_EXE_ringcast"))
        .args(["workload-rank", "--count", "200000", "--sizes", "2,1500", "--seed", "3"]);
    // Mid-job: every process up (4 programs, plus 2 daemons) and the engines' segments there.
    let expected = if mode == "daemon" { 6 } else { 4 };
    let what = format!("run --fabric shm --mode {mode}");
    let left = end_mid_job(&what, launcher, sig, |job, _| {
        processes_of(job).len() >= expected && segments_of(job).iter().any(|s| s.ends_with("-bells"))
    });
    assert_nothing_left(&what, left);
}

#[test]
fn ending_the_launcher_kills_its_daemons_and_leaves_no_segments() {
    for sig in ["KILL", "TERM", "HUP"] {
        shm_job_ended_by("daemon", sig);
    }
}

#[test]
fn ending_the_launcher_kills_its_engine_threads_and_leaves_no_segments() {
    for sig in ["KILL", "TERM", "HUP"] {
        shm_job_ended_by("thread", sig);
    }
}

/// Namespaces need root (`ip netns add`).
fn can_make_namespaces() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    println!("SKIP: network namespaces need root");
    false
}

/// `args` (a launcher with `namespaces` namespaces) ended mid-job by each signal.
fn namespaced_job_ended(args: &[&str], namespaces: usize) {
    for sig in ["TERM", "HUP", "KILL"] {
        let mut launcher = ringcast();
        launcher.args(args);
        let what = format!("ringcast {}", args.join(" "));
        let left = end_mid_job(&what, launcher, sig, |job, pid| {
            namespaces_of(pid).len() == namespaces && !processes_of(job).is_empty()
        });
        assert_nothing_left(&what, left);
    }
}

#[test]
fn ending_a_launcher_in_namespaces_leaves_no_namespace() {
    if !can_make_namespaces() {
        return;
    }
    namespaced_job_ended(
        &["run", "-n", "2", "-p", "1", "--fabric", "udp", "--netns", "--", "/bin/sleep", "600"],
        3,
    );
    namespaced_job_ended(
        &["run", "-n", "2", "-p", "1", "--fabric", "udp", "--mode", "dpu", "--", "/bin/sleep", "600"],
        5,
    );
    namespaced_job_ended(&["bench", "-n", "3", "--fabric", "udp", "--mode", "dpu", "--iters", "100000"], 7);
}
