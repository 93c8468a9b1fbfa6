//! Shared pieces of the engine's integration tests: a real `ringcast-engine` daemon process,
//! child host processes (this test binary re-executed in a role), and the host library's
//! self-test workload (COPY results checked byte for byte, every bad-descriptor case), and the
//! thread-mode engine thread of this process (`engine_tid`).
#![allow(dead_code)]
use ringcast_host::Host;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod tcp;

/// Environment variable naming the role a re-executed test binary plays.
pub const ROLE: &str = "RINGCAST_TEST_ROLE";
/// Environment variable naming the engine a child attaches to.
pub const ENGINE: &str = "RINGCAST_TEST_ENGINE";

/// A unique engine name for this test (process id + per-process counter).
pub fn unique_name(tag: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("test-{tag}-{}-{n}", std::process::id())
}

/// Open file descriptors and shared memory mappings of process `pid` (from /proc).
///
/// Shared mappings are what a host lends an engine (its ring segment and registered regions)
/// and what a leak of them would leave; private ones are the engine's own heap, whose count
/// moves with the allocator (a thread arena, a large buffer kept warm) and says nothing about
/// a host.
pub fn fds_and_maps(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    (fds, shared_maps(pid).len())
}

/// The shared mappings of `pid`, one `/proc/<pid>/maps` line each (for a failure's message).
pub fn shared_maps(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    // The permissions field is `rwxs` or `rwxp`: its fourth letter says shared or private.
    maps.lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|perms| perms.ends_with('s')))
        .map(str::to_owned)
        .collect()
}

/// A running `ringcast-engine` daemon; SIGTERMed and reaped on drop.
pub struct Daemon {
    pub child: Child,
    pub name: String,
}

impl Daemon {
    /// Starts the daemon binary and waits until a host can attach.
    pub fn start(name: &str) -> Daemon {
        Self::start_with(name, &[])
    }

    /// Like [`Daemon::start`] with extra `RINGCAST_*` settings in its environment.
    pub fn start_with(name: &str, env: &[(&str, String)]) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_ringcast-engine"))
            .args(["--name", name])
            .env("RINGCAST_LOG_LEVEL", "2")
            .env("RINGCAST_POLL_MODE", "spin-yield")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn ringcast-engine");
        let d = Daemon { child, name: name.to_string() };
        // Up once its control socket takes connections. Not by attaching a host: a probe host's
        // DETACH is fire-and-forget, and the test's own host, attaching next, could find the
        // probe still holding the node's only local rank (`NoRank`, seen under load).
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Err(e) = ringcast_offload::ctl::connect(name) {
            assert!(Instant::now() < deadline, "engine {name} did not come up: {e}");
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    /// SIGTERM and wait; returns whether it exited successfully.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    fn terminate(&mut self) -> bool {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        wait_with_timeout(&mut self.child, Duration::from_secs(20)).is_some_and(|s| s.success())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}

/// Waits for `child` up to `limit`, killing it if it overruns.
pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Re-executes this test binary as a child host in `role`, attaching to `engine`.
pub fn spawn_child(test_name: &str, role: &str, engine: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(ENGINE, engine)
        .env("RINGCAST_POLL_MODE", "spin-yield")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn child host")
}

/// Runs the library's self-test workload and asserts it passed with every bad-descriptor case
/// answered. Returns the COPYs done.
pub fn copy_workload(host: &mut Host, seed: u64, copies: usize) -> usize {
    let report =
        ringcast_host::selftest::copy_and_errors(host, seed, copies).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.copies, copies);
    assert_eq!(report.bad_cases.len(), 10, "{:?}", report.bad_cases);
    report.copies + report.batch
}

/// The engine thread of this process (named `ringcast-thread-…`, cut to 15 characters): the
/// thread-mode tests read its scheduler state and context switches from `/proc/self/task`.
pub fn engine_tid() -> u32 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.trim().starts_with("ringcast-thread"))
        })
        .expect("the engine thread")
}

/// Registers two `big`-byte buffers, posts a ring's worth of COPYs between them (at least
/// `min_posted` must go in) and aborts — a host dying without detaching, with most of those
/// copies still queued.
pub fn die_with_copies_in_flight(host: &mut Host, big: usize, min_posted: usize) -> ! {
    use ringcast_host::{Access, SharedBuf, SubmissionDescriptor};
    let src = SharedBuf::new(big).unwrap();
    let dst = SharedBuf::new(big).unwrap();
    let rs = host.register(&src, Access::READ).unwrap();
    let rd = host.register(&dst, Access::READ_WRITE).unwrap();
    let descs: Vec<_> = (0..host.ring_entries() as u64)
        .map(|i| SubmissionDescriptor::copy(i + 1, rd.at(0), rs.at(0), big as u64))
        .collect();
    let posted = host.post_batch(&descs);
    assert!(posted > min_posted, "posted only {posted}");
    std::process::abort();
}

/// With `host`'s engine killed: a descriptor posted now is never completed, and a wait on it
/// ends with `EngineGone` within 10 s instead of hanging; control requests say so too.
pub fn waits_end_when_the_engine_is_gone(host: &mut Host) {
    use ringcast_host::{Error, SubmissionDescriptor};
    // The rings are still there (mapped, or the host's own memory): posting succeeds.
    let _ = host.try_post(&SubmissionDescriptor::nop(77));
    let t = Instant::now();
    match host.wait() {
        Err(Error::EngineGone) => {}
        other => panic!("expected EngineGone, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(matches!(host.stats(), Err(Error::EngineGone)));
}
