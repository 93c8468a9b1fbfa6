//! The reaper of named segments (issue 38, item 4): a process that maps named segments and dies
//! however it dies — SIGKILL, `abort`, `_exit` — leaves none of them once nobody maps them,
//! without any later start; a segment a survivor still maps stays until the survivor dies; a
//! dismissed reaper removes only what nobody maps, and exits; the reaper holds none of its caller's descriptors (a
//! reader of the caller's output sees its end) and none of its memory (its resident size stays
//! small beside a caller that holds 256 MiB).
//!
//! The holders are this test binary re-run as `holder` (environment says what to map and how
//! to end), so each is a real process with a real reaper.
#![cfg(all(not(miri), not(loom)))]

use ringcast_ring::{Reaper, ShmSegment, REAPER_NAME, REAPER_SCAN_FOR};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "RINGCAST_REAPER_TEST_ROLE";
const PREFIX: &str = "RINGCAST_REAPER_TEST_PREFIX";
const NAMES: &str = "RINGCAST_REAPER_TEST_NAMES";
const BALLAST: &str = "RINGCAST_REAPER_TEST_BALLAST_MIB";
/// How long after its caller's death a reaper may take (it scans at once; this is slack for a
/// loaded machine).
const BOUND: Duration = Duration::from_secs(10);

fn accept_all(_: &[u8]) -> bool {
    true
}

/// The holder role: maps `NAMES` (1 MiB each) under `PREFIX`, starts a reaper, optionally
/// dirties `BALLAST` MiB of private memory first, says `ready`, closes its stdout, then ends
/// as `ROLE` says.
#[test]
fn holder() {
    let Ok(how) = std::env::var(ROLE) else { return };
    let prefix = std::env::var(PREFIX).unwrap();
    let mib: usize = std::env::var(BALLAST).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let ballast: Vec<u8> = vec![7u8; mib << 20];
    let segments: Vec<ShmSegment> = std::env::var(NAMES)
        .unwrap()
        .split(',')
        .map(|n| ShmSegment::create_or_open_named(&format!("{prefix}{n}"), 1 << 20, |_| Ok(())).unwrap().0)
        .collect();
    let reaper = Reaper::spawn(&prefix, accept_all).unwrap();
    println!("ready {}", std::process::id());
    // Our stdout goes away: the test's reader must see its end although the reaper lives.
    let null = std::fs::File::open("/dev/null").unwrap();
    nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1).unwrap();
    if how != "kill" {
        // Until the test found our reaper (it looks for its pidfd of us).
        let mut go = String::new();
        let _ = std::io::stdin().read_line(&mut go);
    }
    match how.as_str() {
        "abort" => std::process::abort(),
        // SAFETY: `_exit` ends the process at once; nothing is dropped, as in a crash.
        "exit" => unsafe { nix::libc::_exit(3) },
        "dismiss" => {
            drop(reaper);
            drop(segments); // unmapped, not unlinked: what nobody maps is the reaper's last scan's
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: as above.
            unsafe { nix::libc::_exit(0) }
        }
        _ => loop {
            std::hint::black_box(&ballast);
            std::thread::sleep(Duration::from_secs(1));
        },
    }
}

fn unique_prefix(tag: &str) -> String {
    format!("ringcast-reapertest-{}-{tag}-", std::process::id())
}

/// A holder and its reaper's pid.
fn start(prefix: &str, names: &str, how: &str, ballast_mib: usize) -> (Child, u32) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder", "--nocapture", "--test-threads=1"])
        .env(ROLE, how)
        .env(PREFIX, prefix)
        .env(NAMES, names)
        .env(BALLAST, ballast_mib.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // The harness prints "running 1 test" and "test holder ... " first.
    while !line.contains("ready ") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "holder {how} ended before it was ready");
    }
    // Its stdout (the write end our reader waits on) must close although the reaper lives on.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = out.read_to_end(&mut rest);
        let _ = tx.send(());
    });
    let holder = child.id();
    let mut reaper = Vec::new();
    wait_until("the holder's reaper found", || {
        reaper = reapers_of(holder);
        !reaper.is_empty()
    });
    assert!(reaper.len() <= 1, "{how}: more than one reaper: {reaper:?}");
    if how == "kill" {
        assert!(
            rx.recv_timeout(Duration::from_secs(20)).is_ok(),
            "the holder's stdout stayed open: its reaper holds the holder's descriptors"
        );
    }
    // Holders that end by themselves do so now.
    drop(child.stdin.take());
    (child, reaper[0])
}

/// The reapers watching `holder`: processes named `ringcast-reaper` holding a pidfd of it.
fn reapers_of(holder: u32) -> Vec<u32> {
    let name = REAPER_NAME.to_str().unwrap();
    let pidfd = format!("Pid:\t{holder}\n");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name))
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fdinfo")).is_ok_and(|d| {
                d.flatten().any(|f| std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains(&pidfd)))
            })
        })
        .collect()
}

/// Whether process `pid` is gone (or a zombie).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z') || r.starts_with('X')))
}

fn segments(prefix: &str) -> Vec<String> {
    ShmSegment::list_named(prefix).unwrap()
}

/// Holders started from this test for `prefix`.
fn processes(prefix: &str) -> Vec<u32> {
    let needle = format!("{PREFIX}={prefix}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "{what} not within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Unlinks whatever a failing test leaves.
struct Sweep(String);
impl Drop for Sweep {
    fn drop(&mut self) {
        for name in segments(&self.0) {
            let _ = ShmSegment::unlink_named(&name);
        }
        for pid in processes(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[test]
fn a_holder_that_dies_leaves_nothing_without_a_later_start() {
    for how in ["kill", "abort", "exit"] {
        let prefix = unique_prefix(how);
        let _sweep = Sweep(prefix.clone());
        let (mut child, reaper) = start(&prefix, "ring,log,bells", how, 0);
        assert_eq!(segments(&prefix).len(), 3);
        if how == "kill" {
            kill(&mut child);
        } else {
            let status = child.wait().unwrap();
            assert!(!status.success(), "{how}: {status}");
        }
        wait_until(&format!("{how}: the segments removed"), || segments(&prefix).is_empty());
        wait_until(&format!("{how}: the reaper gone"), || gone(reaper));
    }
}

#[test]
fn a_segment_a_survivor_maps_stays_until_the_survivor_dies() {
    let prefix = unique_prefix("survivor");
    let _sweep = Sweep(prefix.clone());
    let (mut a, reaper_a) = start(&prefix, "shared,a", "kill", 0);
    let (mut b, reaper_b) = start(&prefix, "shared,b", "kill", 0);
    kill(&mut a);
    // `a`'s own segment goes; the one `b` maps stays through `a`'s reaper's whole scan.
    wait_until("the first holder's own segment removed", || {
        !segments(&prefix).iter().any(|n| n.ends_with("-a"))
    });
    std::thread::sleep(REAPER_SCAN_FOR + Duration::from_millis(500));
    let mut left = segments(&prefix);
    left.sort();
    assert_eq!(left, vec![format!("{prefix}b"), format!("{prefix}shared")]);
    kill(&mut b);
    wait_until("the survivor's segments removed after it died", || segments(&prefix).is_empty());
    wait_until("both reapers gone", || gone(reaper_a) && gone(reaper_b));
}

#[test]
fn a_dismissed_reaper_removes_only_what_nobody_maps_and_exits() {
    let prefix = unique_prefix("dismiss");
    let _sweep = Sweep(prefix.clone());
    // This process maps `kept` all along (a member of the job that goes on); the holder maps it
    // too and `mine`, dismisses its reaper and exits without unlinking either.
    let (kept, _) = ShmSegment::create_or_open_named(&format!("{prefix}kept"), 1 << 20, |_| Ok(())).unwrap();
    let (mut child, reaper) = start(&prefix, "kept,mine", "dismiss", 0);
    assert!(child.wait().unwrap().success());
    wait_until("the dismissed reaper gone", || gone(reaper));
    assert_eq!(
        segments(&prefix),
        vec![format!("{prefix}kept")],
        "a dismissed reaper removes what nobody maps and nothing a living member maps"
    );
    drop(kept);
}

/// Resident set of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
}

#[test]
fn the_reaper_gives_back_its_callers_memory() {
    let prefix = unique_prefix("slim");
    let _sweep = Sweep(prefix.clone());
    let (mut child, reaper) = start(&prefix, "s", "kill", 256);
    let holder_rss = rss_kib(child.id()).unwrap();
    assert!(holder_rss > 200 << 10, "the holder holds {holder_rss} KiB, not its 256 MiB ballast");
    let mut reaper_rss = u64::MAX;
    // The reaper drops the copy of the holder's memory right after it starts.
    wait_until("the reaper's resident size below 32 MiB", || {
        reaper_rss = rss_kib(reaper).unwrap_or(u64::MAX);
        reaper_rss < 32 << 10
    });
    eprintln!("holder {holder_rss} KiB resident, its reaper {reaper_rss} KiB");
    kill(&mut child);
    wait_until("the segment removed", || segments(&prefix).is_empty());
}
