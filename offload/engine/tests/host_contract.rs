//! The host library against a scripted engine (this test plays the engine over the real control
//! socket and a real attach segment, and misbehaves on purpose), and against a real one for the
//! waiting rules: no wait can hang, a late reply is never taken for the next request's, and
//! completions that arrive out of turn are kept, in order.
mod common;
use ringcast_abi::ctl::{CtlKind, CtlMsg};
use ringcast_abi::SubmissionDescriptor;
use ringcast_host::{AttachOptions, Config, Error, Host};
use ringcast_offload::ctl::{self, Received};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Plays an engine that accepts one host, hands it real rings, and then runs `script` on the
/// control socket (never touching the rings).
fn fake_engine(name: &str, script: impl FnOnce(OwnedFd) + Send + 'static) -> std::thread::JoinHandle<()> {
    let listener = ctl::listen(name).unwrap();
    std::thread::spawn(move || {
        let sock = loop {
            if let Some(s) = ctl::accept(listener.as_fd()).unwrap() {
                break s;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        rustix::io::ioctl_fionbio(&sock, false).unwrap();
        let Received::Msg(req, _) = ctl::recv(sock.as_fd(), &mut Vec::new()).unwrap() else {
            panic!("no ATTACH")
        };
        let rings = ringcast_ring::attach::create(0, 8).unwrap();
        ctl::send(sock.as_fd(), &CtlMsg::reply(&req, CtlKind::ATTACH_OK), Some(rings.segment.fd())).unwrap();
        script(sock);
        drop(rings);
    })
}

fn recv_blocking(sock: &OwnedFd) -> CtlMsg {
    match ctl::recv(sock.as_fd(), &mut Vec::new()).unwrap() {
        Received::Msg(m, _) => m,
        other => panic!("{other:?}"),
    }
}

#[test]
fn silent_engine_times_out_and_late_replies_are_discarded() {
    let name = common::unique_name("fake-late");
    let engine = fake_engine(&name, |sock| {
        // First STATS: answer only after the host gave up.
        let first = recv_blocking(&sock);
        std::thread::sleep(Duration::from_millis(300));
        let mut late = CtlMsg::reply(&first, CtlKind::STATS_OK);
        late.a = 111;
        ctl::send(sock.as_fd(), &late, None).unwrap();
        // Second STATS: answer at once.
        let second = recv_blocking(&sock);
        let mut fresh = CtlMsg::reply(&second, CtlKind::STATS_OK);
        fresh.a = 222;
        ctl::send(sock.as_fd(), &fresh, None).unwrap();
        // Then go away.
        let _ = recv_blocking(&sock);
    });
    let opts = AttachOptions { ctl_timeout: Some(Duration::from_millis(100)), ..Default::default() };
    let mut host = Host::attach_with(&name, opts).unwrap();
    let t = Instant::now();
    assert!(matches!(host.stats(), Err(Error::Timeout { request: "stats", .. })));
    assert!(t.elapsed() < Duration::from_secs(5), "the timeout bounds the wait");
    std::thread::sleep(Duration::from_millis(400)); // the late reply is now queued
    assert_eq!(host.stats().unwrap().hosts_attached, 222, "the late reply was not taken for this one");

    // Nobody serves the rings: a timed wait returns, an untimed one ends when the engine does.
    host.try_post(&SubmissionDescriptor::nop(5)).unwrap();
    let t = Instant::now();
    assert!(host.wait_timeout(Duration::from_millis(50)).unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(5), "wait_timeout overran: {:?}", t.elapsed());
    // This request wakes the script's last receive; it then drops the socket unanswered.
    assert!(host.stats().is_err());
    engine.join().unwrap();
    assert!(matches!(host.wait(), Err(Error::EngineGone)));
}

#[test]
fn waits_out_of_turn_keep_completions_and_never_hang() {
    let mut host = Host::spawn_local(Config::default()).unwrap();
    assert!(matches!(host.wait(), Err(Error::NothingInFlight { cookie: None })));
    assert!(matches!(host.wait_timeout(Duration::from_secs(1)), Err(Error::NothingInFlight { .. })));
    for c in [1, 2, 3] {
        host.try_post(&SubmissionDescriptor::nop(c)).unwrap();
    }
    assert_eq!(host.wait_cookie(3).unwrap().cookie, 3, "waiting for the last one first");
    assert_eq!(host.in_flight(), 2, "1 and 2 are still owed to the caller");
    assert_eq!(host.wait().unwrap().cookie, 1, "kept in arrival order");
    assert_eq!(host.poll().unwrap().unwrap().cookie, 2);
    assert!(matches!(host.wait_cookie(99), Err(Error::NothingInFlight { cookie: Some(99) })));
    assert_eq!(host.in_flight(), 0);

    // Completions kept while `post` waits for room count against the credits: with all of them
    // completed and kept, `post` cannot make room and says so instead of spinning.
    let n = host.ring_entries();
    for i in 0..n as u64 {
        host.post(&SubmissionDescriptor::nop(100 + i)).unwrap();
    }
    match host.post(&SubmissionDescriptor::nop(999)) {
        Err(Error::WouldBlock { in_flight }) => assert_eq!(in_flight, n),
        other => panic!("expected WouldBlock with every slot owed to the caller, got {other:?}"),
    }
    let got: Vec<u64> = (0..n).map(|_| host.wait().unwrap().cookie).collect();
    assert_eq!(got, (100..100 + n as u64).collect::<Vec<_>>());
}

#[test]
fn a_register_that_times_out_but_succeeds_late_is_deregistered() {
    let name = common::unique_name("fake-late-register");
    let engine = fake_engine(&name, |sock| {
        let reg = recv_blocking(&sock);
        assert_eq!(reg.kind, CtlKind::REGISTER);
        std::thread::sleep(Duration::from_millis(300));
        let mut late = CtlMsg::reply(&reg, CtlKind::REGISTER_OK);
        late.a = 0x1234;
        ctl::send(sock.as_fd(), &late, None).unwrap();
        let stats = recv_blocking(&sock);
        ctl::send(sock.as_fd(), &CtlMsg::reply(&stats, CtlKind::STATS_OK), None).unwrap();
        // The host gives back the region it never learned about.
        let dereg = recv_blocking(&sock);
        assert_eq!((dereg.kind, dereg.a), (CtlKind::DEREGISTER, 0x1234));
        ctl::send(sock.as_fd(), &CtlMsg::reply(&dereg, CtlKind::DEREGISTER_OK), None).unwrap();
    });
    let opts = AttachOptions { ctl_timeout: Some(Duration::from_millis(100)), ..Default::default() };
    let mut host = Host::attach_with(&name, opts).unwrap();
    let buf = ringcast_host::SharedBuf::new(4096).unwrap();
    assert!(matches!(host.register(&buf, ringcast_host::Access::READ), Err(Error::Timeout { .. })));
    std::thread::sleep(Duration::from_millis(400));
    host.stats().unwrap();
    engine.join().unwrap();
}
