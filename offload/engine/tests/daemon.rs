//! The engine as a real daemon process (`ringcast-engine`) serving real host processes: two
//! hosts attach, register shared memory and get byte-exact COPY results and typed errors; a
//! host that dies with descriptors in flight is cleaned up while the others keep being served;
//! a daemon that dies makes waits fail with `EngineGone` instead of hanging.
mod common;
use common::*;
use ringcast_host::{Error, Host, SubmissionDescriptor};
use std::time::{Duration, Instant};

const CHILD_TEST: &str = "host_process_role";

/// Entry point of the child host processes. Run directly (no role set), it runs the same
/// workload against an in-process polling-thread engine: thread mode through the same path.
#[test]
fn host_process_role() {
    let role = std::env::var(ROLE).unwrap_or_default();
    let engine = std::env::var(ENGINE).unwrap_or_default();
    match role.as_str() {
        "copy" => {
            let mut host = Host::attach(&engine).expect("attach to daemon");
            assert_ne!(host.engine_pid(), std::process::id(), "daemon mode: the engine is another process");
            let done = copy_workload(&mut host, std::process::id() as u64, 150);
            assert!(done >= 150);
            full_ring_and_wrong_abi(&mut host, &engine);
        }
        "die-in-flight" => {
            let mut host = Host::attach(&engine).expect("attach to daemon");
            die_with_copies_in_flight(&mut host, 32 << 20, 32);
        }
        "pinned" => {
            // RINGCAST_HOST_PIN is set for this child: attaching pins this thread to the
            // engine's CPU, which the engine reported in ATTACH_OK.
            let host = Host::attach(&engine).expect("attach to daemon");
            let cpu = host.engine_cpu().expect("the daemon was started pinned");
            let set = rustix::thread::sched_getaffinity(None).unwrap();
            let mine: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
            assert_eq!(mine, [cpu], "the host thread runs where its engine does");
        }
        "pinned-thread" => {
            // Thread mode, RINGCAST_HOST_PIN and RINGCAST_PIN_CPU set for this child: the host
            // thread, which drives its engine's loop while it waits, is bound to the CPU its
            // engine thread was pinned to.
            let config = ringcast_host::Config::from_env().expect("config");
            let host = Host::spawn_local(config).expect("thread-mode engine");
            assert_eq!(host.engine_pid(), std::process::id(), "thread mode");
            let cpu = host.engine_cpu().expect("the engine thread was pinned");
            let set = rustix::thread::sched_getaffinity(None).unwrap();
            let mine: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
            assert_eq!(mine, [cpu], "the host thread runs where its engine thread does");
        }
        "" => {
            let mut host = Host::spawn_local(ringcast_host::Config::default()).unwrap();
            assert_eq!(host.engine_pid(), std::process::id(), "thread mode: the engine runs in this process");
            copy_workload(&mut host, 7, 100);
        }
        other => panic!("unknown role {other}"),
    }
}

/// The remaining bad-input cases against the daemon: a full ring is back-pressure, not loss;
/// an attach with another ABI version is refused with the engine's version.
fn full_ring_and_wrong_abi(host: &mut Host, engine: &str) {
    let n = host.ring_entries();
    for i in 0..n as u64 {
        host.try_post(&SubmissionDescriptor::nop(1_000_000 + i)).unwrap();
    }
    match host.try_post(&SubmissionDescriptor::nop(1)) {
        Err(Error::WouldBlock { in_flight }) => assert_eq!(in_flight, n),
        other => panic!("a full ring must say WouldBlock, got {other:?}"),
    }
    let mut cookies: Vec<u64> = (0..n).map(|_| host.wait().unwrap().cookie).collect();
    cookies.sort_unstable();
    assert_eq!(cookies, (1_000_000..1_000_000 + n as u64).collect::<Vec<_>>());

    use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
    let sock = ringcast_offload::ctl::connect(engine).unwrap();
    let mut req = CtlMsg::new(CtlKind::ATTACH);
    req.version = ringcast_abi::ABI_VERSION + 1;
    let timeout = Duration::from_secs(10);
    let (reply, fd) =
        ringcast_offload::ctl::call(std::os::fd::AsFd::as_fd(&sock), &req, None, timeout, &mut |_| {})
            .unwrap();
    assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::ABI_MISMATCH));
    assert_eq!(reply.b, ringcast_abi::ABI_VERSION);
    assert!(fd.is_none(), "no ring segment for a refused host");
    host.nop().unwrap();
}

#[test]
fn daemon_serves_two_host_processes() {
    let name = unique_name("two-hosts");
    let daemon = Daemon::start(&name);
    let mut kids = [spawn_child(CHILD_TEST, "copy", &name), spawn_child(CHILD_TEST, "copy", &name)];
    for k in &mut kids {
        let status = wait_with_timeout(k, Duration::from_secs(120)).expect("child host hung");
        assert!(status.success(), "child host failed: {status}");
    }
    let mut probe = Host::attach(&name).unwrap();
    let s = probe.stats().unwrap();
    assert_eq!(s.hosts_lost, 0, "both children detached cleanly");
    assert!(s.completed_ok >= 2 * 150, "{s:?}");
    assert!(s.completed_err >= 2 * 10, "every bad-input case was answered: {s:?}");
    drop(probe);
    assert!(daemon.stop(), "daemon exits cleanly on SIGTERM");
    // Nothing is left behind: the abstract socket went with the process.
    assert!(matches!(Host::attach(&name), Err(Error::Connect { .. })));
}

#[test]
fn host_dying_with_descriptors_in_flight_leaves_others_served() {
    let name = unique_name("die");
    let daemon = Daemon::start(&name);
    let mut survivor = Host::attach(&name).unwrap();
    survivor.nop().unwrap();
    let engine_pid = survivor.engine_pid();
    let before = fds_and_maps(engine_pid);
    let mut kid = spawn_child(CHILD_TEST, "die-in-flight", &name);
    let status = wait_with_timeout(&mut kid, Duration::from_secs(60)).expect("child hung");
    assert!(!status.success(), "the child aborts");
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let s = survivor.stats().unwrap();
        if s.hosts_lost == 1 {
            break s;
        }
        assert!(Instant::now() < deadline, "engine never noticed the dead host: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(stats.dropped_in_flight > 0, "the dead host's queued descriptors were dropped: {stats:?}");
    assert_eq!(stats.hosts_attached, 1, "only the survivor is still attached");
    // Everything the dead host held — its socket, ring segment and two 32 MiB regions — is gone.
    assert_eq!(
        fds_and_maps(engine_pid),
        before,
        "engine fds/shared mappings back to their counts; mapped now: {:#?}",
        shared_maps(engine_pid)
    );
    copy_workload(&mut survivor, 99, 40);
    drop(survivor);
    assert!(daemon.stop());
}

#[test]
fn engine_death_fails_waits_instead_of_hanging() {
    let name = unique_name("engine-dies");
    let mut daemon = Daemon::start(&name);
    let mut host = Host::attach(&name).unwrap();
    host.nop().unwrap();
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    waits_end_when_the_engine_is_gone(&mut host);
}

/// This test's segments in /dev/shm (`ringcast-<job>-*`).
fn segments_of(job: &str) -> Vec<String> {
    let mut v = ringcast_ring::ShmSegment::list_named(&format!("ringcast-{job}-")).unwrap();
    v.sort();
    v
}

/// Unlinks a job's segments when dropped, so a failing assertion leaves nothing behind either.
struct ShmJob(String);

impl Drop for ShmJob {
    fn drop(&mut self) {
        let _ = ringcast_offload::fabric::shm::cleanup(&self.0);
    }
}

/// Issue 13, defect 7: a standalone daemon on the `shm` fabric stopped with SIGTERM removes
/// everything it created in /dev/shm (its bell board, its world group's log, its rings). With
/// two engines of one job, the first to stop leaves what the other still maps — the second
/// keeps working — and the last one out leaves nothing.
#[test]
fn shm_daemons_stopped_cleanly_leave_nothing_in_dev_shm() {
    // One engine alone.
    let name = unique_name("shm-stop");
    let _guard = ShmJob(name.clone());
    let env = [("RINGCAST_FABRIC", "shm".to_string()), ("RINGCAST_JOB", name.clone())];
    let daemon = Daemon::start_with(&name, &env);
    let mut host = Host::attach(&name).unwrap();
    host.nop().unwrap();
    let made = segments_of(&name);
    assert!(made.contains(&format!("ringcast-{name}-bells")), "the engine made its bells: {made:?}");
    assert!(made.iter().any(|n| n.contains("-g")), "and its world group's log: {made:?}");
    drop(host);
    assert!(daemon.stop(), "the daemon exits cleanly on SIGTERM");
    assert_eq!(segments_of(&name), Vec::<String>::new(), "a clean stop removes everything it made");

    // Two engines of one job: the last one out removes everything, not the first.
    let job = unique_name("shm-pair");
    let _guard2 = ShmJob(job.clone());
    let names = [format!("{job}-0"), format!("{job}-1")];
    let env = |node: u32| {
        [
            ("RINGCAST_FABRIC", "shm".to_string()),
            ("RINGCAST_JOB", job.clone()),
            ("RINGCAST_NODES", "2".to_string()),
            ("RINGCAST_NODE", node.to_string()),
        ]
    };
    let d0 = Daemon::start_with(&names[0], &env(0));
    let d1 = Daemon::start_with(&names[1], &env(1));
    assert!(d0.stop());
    let left = segments_of(&job);
    assert!(left.contains(&format!("ringcast-{job}-bells")), "engine 1 still maps the bells: {left:?}");
    assert!(left.contains(&format!("ringcast-{job}-0-1")), "and its inbound ring: {left:?}");
    let mut host = Host::attach(&names[1]).unwrap();
    host.nop().unwrap();
    drop(host);
    assert!(d1.stop());
    assert_eq!(segments_of(&job), Vec::<String>::new(), "the last one out leaves nothing");
}

/// Bytes of `names` in /dev/shm (apparent sizes).
fn bytes_of(names: &[String]) -> u64 {
    names.iter().filter_map(|n| std::fs::metadata(format!("/dev/shm/{n}")).ok()).map(|m| m.len()).sum()
}

/// Waits (at most 10 s: the reaper acts as soon as the engine is gone) until `job` has no
/// segment left; returns what is left then.
fn segments_after_reaping(job: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !segments_of(job).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    segments_of(job)
}

/// Issue 38, item 4: a standalone `shm` daemon killed by SIGKILL (no teardown runs) leaves
/// nothing in /dev/shm once it is gone — its reaper removes what nobody maps — without a later
/// daemon of its job starting. Of two engines of one job, killing the first leaves what the
/// survivor maps (and the survivor serves on); killing the survivor then leaves nothing.
#[test]
fn shm_daemons_killed_leave_nothing_in_dev_shm() {
    let name = unique_name("shm-kill");
    let _guard = ShmJob(name.clone());
    let env = [("RINGCAST_FABRIC", "shm".to_string()), ("RINGCAST_JOB", name.clone())];
    let mut daemon = Daemon::start_with(&name, &env);
    let mut host = Host::attach(&name).unwrap();
    host.nop().unwrap();
    let made = segments_of(&name);
    assert!(made.len() >= 2, "the engine made its segments: {made:?}");
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    let left = segments_after_reaping(&name);
    eprintln!(
        "a SIGKILLed daemon: {} segments ({} bytes) at the kill, {} ({} bytes) after it",
        made.len(),
        bytes_of(&made),
        left.len(),
        bytes_of(&left)
    );
    assert_eq!(left, Vec::<String>::new(), "a SIGKILLed daemon's segments outlived it (made {made:?})");
    drop(host);

    let job = unique_name("shm-kill-pair");
    let _guard2 = ShmJob(job.clone());
    let names = [format!("{job}-0"), format!("{job}-1")];
    let env = |node: u32| {
        [
            ("RINGCAST_FABRIC", "shm".to_string()),
            ("RINGCAST_JOB", job.clone()),
            ("RINGCAST_NODES", "2".to_string()),
            ("RINGCAST_NODE", node.to_string()),
        ]
    };
    let mut d0 = Daemon::start_with(&names[0], &env(0));
    let mut d1 = Daemon::start_with(&names[1], &env(1));
    let mut host = Host::attach(&names[1]).unwrap();
    host.nop().unwrap();
    d0.child.kill().unwrap();
    d0.child.wait().unwrap();
    // The reaper of engine 0 scans for `REAPER_SCAN_FOR`; what engine 1 maps stays throughout.
    std::thread::sleep(ringcast_ring::REAPER_SCAN_FOR + Duration::from_millis(500));
    let left = segments_of(&job);
    assert!(left.contains(&format!("ringcast-{job}-bells")), "engine 1 still maps the bells: {left:?}");
    assert!(left.contains(&format!("ringcast-{job}-0-1")), "and its inbound ring: {left:?}");
    host.nop().unwrap();
    drop(host);
    d1.child.kill().unwrap();
    d1.child.wait().unwrap();
    assert_eq!(segments_after_reaping(&job), Vec::<String>::new(), "the last engine killed leaves nothing");
}

/// Room for 4,096 descriptors in this process if the hard limit allows (the flood test holds
/// 1,000 client ends).
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|c| c < 4096) {
        limit.current = Some(limit.maximum.map_or(4096, |m| m.min(4096)));
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Issue 13, defect 6: a flood of idle control connections — 1,000, never saying ATTACH — delays
/// a legitimate host by at most `attach_timeout_ms` (here: not noticeably), holds at most
/// `max_pending_conns` of the engine's descriptors, and every one of them is closed on time;
/// the engine keeps serving.
#[test]
fn a_flood_of_idle_connections_delays_no_host() {
    const IDLE: usize = 1000;
    let attach_timeout = Duration::from_millis(2000); // the default
    let max_pending = 256; // the default
    raise_descriptor_limit();
    let name = unique_name("idle-flood");
    let daemon = Daemon::start_with(&name, &[("RINGCAST_LOG_LEVEL", "1".to_string())]);
    let pid = daemon.child.id();
    let (fds_before, _) = fds_and_maps(pid);
    // Connected from a thread: an engine that stops accepting leaves connects blocked in the
    // listen backlog.
    let opened = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = name.clone();
    std::thread::spawn(move || {
        let socks: Vec<_> = (0..IDLE).map(|_| ringcast_offload::ctl::connect(&engine)).collect();
        let _ = tx.send(socks);
    });
    let socks = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the engine stopped accepting: 1,000 connects did not go through in 10 s");
    let socks: Vec<_> = socks.into_iter().collect::<Result<_, _>>().expect("connect");
    let connected = opened.elapsed();
    let (fds_flooded, _) = fds_and_maps(pid);
    assert!(
        fds_flooded <= fds_before + max_pending + 8,
        "the engine holds {fds_flooded} descriptors under the flood ({fds_before} before)"
    );
    // A legitimate host, while every idle connection is still open on our side.
    let t = Instant::now();
    let mut host = Host::attach(&name).expect("a host attaches under the flood");
    let latency = t.elapsed();
    eprintln!("{IDLE} idle connections opened in {connected:?}; a host attached in {latency:?}");
    assert!(latency < attach_timeout + Duration::from_secs(1), "attach took {latency:?}");
    assert!(copy_workload(&mut host, 13, 50) >= 50);
    // Every idle connection is closed by the engine on time (the oldest ones at once, to make
    // room; the rest `attach_timeout_ms` after they were accepted).
    let deadline = opened + connected + attach_timeout + Duration::from_secs(3);
    for sock in &socks {
        rustix::io::ioctl_fionbio(sock, true).unwrap();
        let mut told = false;
        loop {
            match ringcast_offload::ctl::recv(std::os::fd::AsFd::as_fd(sock), &mut Vec::new()).unwrap() {
                // Told why first (IDLE), when its socket buffer had room for it.
                ringcast_offload::ctl::Received::Msg(m, _) if !told => {
                    assert_eq!(m.status, ringcast_abi::ctl::CtlStatus::IDLE);
                    told = true;
                }
                ringcast_offload::ctl::Received::Closed => break,
                ringcast_offload::ctl::Received::Empty => {
                    assert!(Instant::now() < deadline, "an idle connection outlived its attach timeout")
                }
                other => panic!("{other:?}"),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Still serving, and a second host gets in at once too.
    let t = Instant::now();
    let mut second = Host::attach(&name).expect("second host");
    assert!(t.elapsed() < attach_timeout, "attach took {:?}", t.elapsed());
    second.nop().unwrap();
    host.nop().unwrap();
    drop((host, second, socks));
    assert!(daemon.stop(), "daemon exits cleanly on SIGTERM");
}

/// `pin_cpu = auto` across processes: engine daemons of one machine never share a CPU, and once
/// every allowed CPU has an engine the next one stays unpinned (issue 15: every engine used to
/// pin itself to the same, highest CPU). Each daemon says where it is pinned in its banner,
/// printed once it is pinned.
#[test]
fn auto_pinned_daemons_take_distinct_cpus_and_stop_pinning_when_cpus_run_out() {
    use std::io::{BufRead, BufReader};
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut daemons = Vec::new();
    let mut pins: Vec<Option<usize>> = Vec::new();
    for i in 0..=cpus {
        let name = unique_name(&format!("pin{i}"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ringcast-engine"))
            .args(["--name", &name])
            .env("RINGCAST_LOG_LEVEL", "1")
            .env("RINGCAST_POLL_MODE", "spin-yield")
            .env("RINGCAST_PIN_CPU", "auto")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn ringcast-engine");
        let mut banner = String::new();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        while !banner.contains("listening on") {
            banner.clear();
            assert!(err.read_line(&mut banner).unwrap() > 0, "daemon {name} exited before its banner");
        }
        let cpu = banner.split(", cpu ").nth(1).and_then(|r| r.split(',').next()).expect("cpu in the banner");
        pins.push(cpu.parse().ok());
        daemons.push(Daemon { child, name });
        // Keep reading its stderr so the daemon never blocks on a full pipe.
        std::thread::spawn(move || for _ in err.lines() {});
    }
    let pinned: Vec<usize> = pins.iter().flatten().copied().collect();
    let mut distinct = pinned.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), pinned.len(), "two engines pinned to one CPU: {pins:?}");
    assert!(pinned.len() <= cpus, "{} engines pinned on {cpus} CPUs: {pins:?}", pinned.len());
    assert!(pins.iter().any(Option::is_none), "{} engines on {cpus} CPUs, all pinned: {pins:?}", cpus + 1);
    for d in daemons {
        assert!(d.stop(), "daemon exits cleanly on SIGTERM");
    }
}

/// `runner.host_pin` (what `ringcast run`/`bench` set for daemons that each have a CPU): a host
/// learns its engine's CPU at attach and pins its attaching thread there; without the option
/// nothing is pinned.
#[test]
fn a_host_with_host_pin_runs_on_its_engines_cpu() {
    let name = unique_name("hostpin");
    // A fixed CPU, not `auto`: another test here may hold every claim at the moment.
    let daemon = Daemon::start_with(&name, &[("RINGCAST_PIN_CPU", "0".to_string())]);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, "pinned")
        .env(ENGINE, &name)
        .env("RINGCAST_HOST_PIN", "true")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn child host");
    let status = wait_with_timeout(&mut child, Duration::from_secs(60)).expect("child host finished");
    assert!(status.success(), "pinned child host failed: {status:?}");
    // This process attaches without the option: its affinity is left alone.
    let before = rustix::thread::sched_getaffinity(None).unwrap();
    let host = Host::attach(&name).expect("attach");
    assert!(host.engine_cpu().is_some(), "the engine reports its CPU");
    let after = rustix::thread::sched_getaffinity(None).unwrap();
    let cpus =
        |s: &rustix::thread::CpuSet| (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| s.is_set(c)).count();
    assert_eq!(cpus(&before), cpus(&after), "no host_pin, no pinning");
    drop(host);
    assert!(daemon.stop(), "daemon exits cleanly on SIGTERM");
}

/// `runner.host_pin` in thread mode (what `ringcast bench` sets when every engine thread has a
/// CPU, issue 40 item 4): the host thread is bound to its engine thread's CPU, as an MPI
/// library binds rank i to core i. Seen failing when only a daemon's hosts were pinned.
#[test]
fn a_thread_mode_host_with_host_pin_runs_on_its_engine_threads_cpu() {
    // A binding to one CPU of several is what is checked: the highest this process may use.
    let allowed = rustix::thread::sched_getaffinity(None).unwrap();
    let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| allowed.is_set(c)).collect();
    let Some(&cpu) = cpus.last().filter(|_| cpus.len() >= 2) else {
        println!("SKIP: host_pin binds to one CPU of several; this process may use {}", cpus.len());
        return;
    };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, "pinned-thread")
        .env("RINGCAST_HOST_PIN", "true")
        // A fixed CPU, not `auto`: another test here may hold every claim at the moment.
        .env("RINGCAST_PIN_CPU", cpu.to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn child host");
    let status = wait_with_timeout(&mut child, Duration::from_secs(60)).expect("child host finished");
    assert!(status.success(), "pinned thread-mode child host failed: {status:?}");
}

/// Key material is never printed (issue 38, item 6): the daemon refuses a job secret that is
/// nearly a key — `0x` before it, a digit short or over, a non-hex letter — naming the variable,
/// and neither stderr, stdout nor its log file holds 12 digits in a row of the value.
/// (`host/cli/tests/secret_never_printed.rs` checks the CLI and the C ABI the same way.)
#[test]
fn a_bad_job_secret_is_refused_without_being_printed() {
    const KEY: &str = "c4e2a09f7b3d5e1f8a6c4b2d0e9f7a5c3b1d8e6f4a2c0b9d7e5f3a1c8b6d4e2f";
    let dir = std::env::temp_dir().join(format!("ringcast-secret-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("engine.log");
    for value in [format!("0x{KEY}"), KEY[..63].to_string(), format!("{KEY}0"), format!("{}z", &KEY[..63])] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ringcast-engine"))
            .args(["--name", &unique_name("secret")])
            .env("RINGCAST_JOB_SECRET", &value)
            .env("RINGCAST_LOG_FILE", &log)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(!o.status.success(), "the daemon took {value:?}");
        assert!(text.contains("RINGCAST_JOB_SECRET"), "the refusal names the variable: {text}");
        let digits = value.strip_prefix("0x").unwrap_or(&value).to_ascii_lowercase();
        for i in 0..=digits.len() - 12 {
            assert!(!text.to_ascii_lowercase().contains(&digits[i..i + 12]), "{value:?} printed: {text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
