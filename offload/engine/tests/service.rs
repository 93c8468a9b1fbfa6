//! The engine daemon started the way its systemd unit starts it (`packaging/systemd/`:
//! `Type=notify`, a log file, SIGHUP to reload, SIGTERM to stop), without systemd: the test
//! plays the service manager. Readiness comes as `READY=1` on `NOTIFY_SOCKET` only once a host
//! can attach; SIGHUP after the log file was moved (logrotate) makes the next line land in a
//! new file; SIGTERM with descriptors queued says `STOPPING=1`, answers every one of them (done
//! or `EngineShutdown`, none lost) and exits 0 once its host is gone.
mod common;
use common::*;
use ringcast_host::{Host, StatusKind, SubmissionDescriptor};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Receives one notification, at most `limit` from now.
fn notification(sock: &UnixDatagram, limit: Duration) -> Option<String> {
    sock.set_read_timeout(Some(limit)).ok()?;
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn signal(child: &std::process::Child, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(child), sig).expect("signal the engine");
}

#[test]
fn the_daemon_as_a_service_notifies_reopens_its_log_and_drains() {
    let name = unique_name("service");
    let dir = std::env::temp_dir().join(format!("ringcast-service-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("engine.log");
    // The service manager's end of the notification socket (abstract, as systemd's often is).
    let notify_name = format!("ringcast-test-notify-{}", std::process::id());
    let manager = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(notify_name.as_bytes()).unwrap())
        .expect("bind the notification socket");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringcast-engine"))
        .args(["--name", &name])
        .env("NOTIFY_SOCKET", format!("@{notify_name}"))
        .env("RINGCAST_LOG_FILE", &log)
        .env("RINGCAST_LOG_LEVEL", "2")
        .env("RINGCAST_POLL_MODE", "spin-yield")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn ringcast-engine");

    // Ready means ready: the first attach after READY=1 succeeds, no retry.
    let ready = notification(&manager, Duration::from_secs(20)).expect("READY=1 within 20 s");
    assert!(ready.contains("READY=1"), "{ready:?}");
    assert!(ready.contains(&format!("MAINPID={}", child.id())), "{ready:?}");
    let mut host = Host::attach(&name).expect("a host attaches as soon as the engine said READY=1");
    let first = std::fs::read_to_string(&log).expect("the log file");
    assert!(
        first.contains(&format!("ringcast-engine[{name}] notice: listening on @ringcast.{name}")),
        "{first}"
    );
    assert!(first.lines().all(|l| l.len() > 24 && l.as_bytes()[10] == b'T'), "stamped lines: {first}");

    // logrotate moves the file and sends SIGHUP: the next line goes to a new file.
    let rotated = dir.join("engine.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    signal(&child, rustix::process::Signal::HUP);
    let second = Host::attach(&name).expect("a second host");
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("attached")) {
        assert!(Instant::now() < deadline, "no line in the reopened log");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(std::fs::read_to_string(&rotated).unwrap().contains("listening on"));

    // SIGTERM with work queued: every descriptor is answered, none lost.
    let n = host.ring_entries() as u64;
    for cookie in 1..=n {
        host.try_post(&SubmissionDescriptor::nop(cookie)).expect("room in the ring");
    }
    signal(&child, rustix::process::Signal::TERM);
    let stopping = notification(&manager, Duration::from_secs(20)).expect("STOPPING=1");
    assert!(stopping.contains("STOPPING=1"), "{stopping:?}");
    let mut answered: Vec<u64> = Vec::new();
    while answered.len() < n as usize {
        match host.wait_timeout(Duration::from_secs(20)) {
            Ok(Some(c)) => {
                let status = StatusKind::try_from(c.status).ok();
                assert!(
                    matches!(status, Some(StatusKind::Ok | StatusKind::EngineShutdown)),
                    "cookie {}: {status:?}",
                    c.cookie
                );
                answered.push(c.cookie);
            }
            other => panic!("{} of {n} answered, then {other:?}", answered.len()),
        }
    }
    answered.sort_unstable();
    assert_eq!(answered, (1..=n).collect::<Vec<_>>(), "every queued descriptor answered once");
    drop(host);
    let status =
        wait_with_timeout(&mut child, Duration::from_secs(20)).expect("the engine exits after draining");
    assert!(status.success(), "{status}");
    let last = std::fs::read_to_string(&log).unwrap();
    assert!(last.contains("notice: stopping: draining"), "{last}");
    assert!(last.contains("notice: stopped;"), "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}
