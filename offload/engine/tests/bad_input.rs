//! Bad input at the host↔engine boundary: a wrong ABI version, malformed and invalid control
//! requests, unsealed memory, too many hosts, a full ring, a host that corrupts its ring. Each
//! gets a typed error or back-pressure, and the engine keeps serving everyone else.
mod common;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, SubmissionDescriptor, ABI_VERSION};
use ringcast_host::{AttachOptions, Config, Error, Host, SharedBuf};
use ringcast_offload::ctl::{self, Received};
use ringcast_offload::runner::spawn_thread;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use zerocopy::IntoBytes;

fn engine(config: Config) -> ringcast_offload::runner::ThreadEngine {
    spawn_thread(config, false).unwrap()
}

fn raw_call(sock: &OwnedFd, msg: &CtlMsg, fd: Option<std::os::fd::BorrowedFd<'_>>) -> CtlMsg {
    ctl::call(sock.as_fd(), msg, fd).unwrap().0
}

#[test]
fn wrong_abi_version_is_refused_and_engine_keeps_serving() {
    let e = engine(Config::default());
    let sock = ctl::connect(e.name()).unwrap();
    let mut req = CtlMsg::new(CtlKind::ATTACH);
    req.version = ABI_VERSION + 41;
    let reply = raw_call(&sock, &req, None);
    assert_eq!(
        (reply.kind, reply.status, reply.b),
        (CtlKind::ERROR, CtlStatus::ABI_MISMATCH, ABI_VERSION)
    );
    let mut host = Host::attach(e.name()).unwrap();
    host.nop().unwrap();
}

#[test]
fn invalid_control_requests_get_typed_refusals() {
    let e = engine(Config::default());
    let mut host = Host::attach(e.name()).unwrap();
    // A second, raw connection speaking the protocol by hand.
    let sock = ctl::connect(e.name()).unwrap();
    let reply = raw_call(&sock, &CtlMsg::new(CtlKind::ATTACH), None);
    assert_eq!(reply.kind, CtlKind::ATTACH_OK);
    let refused =
        |msg: CtlMsg, fd: Option<std::os::fd::BorrowedFd<'_>>| raw_call(&sock, &msg, fd).status;

    let mut reg = CtlMsg::new(CtlKind::REGISTER);
    reg.a = Access::READ.0;
    reg.e = 100;
    assert_eq!(
        refused(reg, None),
        CtlStatus::BAD_REQUEST,
        "REGISTER without a memory fd"
    );

    // A memfd that is not sealed could be truncated under the engine: refused.
    let unsealed: OwnedFd =
        rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&unsealed, 4096).unwrap();
    assert_eq!(
        refused(reg, Some(unsealed.as_fd())),
        CtlStatus::MAP_FAILED,
        "unsealed memory"
    );

    let sealed = ringcast_ring::ShmSegment::create("t", 4096).unwrap();
    let mut past_end = reg;
    past_end.d = 4000;
    assert_eq!(
        refused(past_end, Some(sealed.fd())),
        CtlStatus::BAD_REQUEST,
        "range past the segment"
    );
    let mut zero = reg;
    zero.e = 0;
    assert_eq!(
        refused(zero, Some(sealed.fd())),
        CtlStatus::BAD_REQUEST,
        "zero length"
    );
    let mut bad_access = reg;
    bad_access.a = 0x10;
    assert_eq!(
        refused(bad_access, Some(sealed.fd())),
        CtlStatus::BAD_REQUEST,
        "undefined access bits"
    );
    let mut dereg = CtlMsg::new(CtlKind::DEREGISTER);
    dereg.a = 0x0001_0001;
    assert_eq!(refused(dereg, None), CtlStatus::UNKNOWN_REGION);
    assert_eq!(
        refused(CtlMsg::new(CtlKind(0x55)), None),
        CtlStatus::BAD_REQUEST,
        "unknown request kind"
    );

    // A message of the wrong size is answered, not trusted, and the connection stays usable.
    rustix::net::send(
        &sock,
        &CtlMsg::new(CtlKind::STATS).as_bytes()[..17],
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    match ctl::recv(sock.as_fd()).unwrap() {
        Received::Msg(m, _) => {
            assert_eq!((m.kind, m.status), (CtlKind::ERROR, CtlStatus::BAD_REQUEST))
        }
        other => panic!("{other:?}"),
    }
    let ok = raw_call(&sock, &reg, Some(sealed.fd()));
    assert_eq!(
        ok.kind,
        CtlKind::REGISTER_OK,
        "a valid request after all that works"
    );

    // The well-behaved host never noticed.
    host.nop().unwrap();
    assert!(host.stats().unwrap().hosts_attached >= 2);
}

#[test]
fn library_side_checks_and_refusals_are_typed() {
    let e = engine(Config {
        max_regions: 2,
        ..Config::default()
    });
    let mut host = Host::attach(e.name()).unwrap();
    let buf = SharedBuf::new(1024).unwrap();
    assert!(matches!(
        host.register_range(&buf, 1000, 100, Access::READ),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(SharedBuf::new(0), Err(Error::OutOfBounds { .. })));
    assert!(matches!(
        buf.write_at(1020, &[0; 8]),
        Err(Error::OutOfBounds { .. })
    ));
    let _a = host.register(&buf, Access::READ).unwrap();
    let _b = host.register(&buf, Access::READ).unwrap();
    match host.register(&buf, Access::READ) {
        Err(Error::Refused { status, .. }) => assert_eq!(status, CtlStatus::TOO_MANY_REGIONS),
        other => panic!("{other:?}"),
    }
    match host.deregister_key(ringcast_abi::RegionKey(12345)) {
        Err(Error::Refused { status, .. }) => assert_eq!(status, CtlStatus::UNKNOWN_REGION),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Host::attach("no-such-engine-anywhere"),
        Err(Error::Connect { .. })
    ));
}

#[test]
fn too_many_hosts_is_a_typed_refusal() {
    let mut host = Host::spawn_local(Config {
        max_hosts: 1,
        ..Config::default()
    })
    .unwrap();
    let name = host.local_engine().unwrap().to_string();
    match Host::attach(&name) {
        Err(Error::Refused { status, .. }) => assert_eq!(status, CtlStatus::TOO_MANY_HOSTS),
        other => panic!("{other:?}"),
    }
    host.nop().unwrap();
}

#[test]
fn full_rings_apply_back_pressure_and_lose_nothing() {
    const N: usize = 8;
    let e = engine(Config {
        ring_entries: N as u32,
        ..Config::default()
    });

    // Host-side credits: at most N in flight, then WouldBlock, never a lost completion.
    let mut host = Host::attach(e.name()).unwrap();
    for i in 0..N as u64 {
        host.try_post(&SubmissionDescriptor::nop(100 + i)).unwrap();
    }
    assert!(matches!(
        host.try_post(&SubmissionDescriptor::nop(999)),
        Err(Error::WouldBlock { in_flight: N })
    ));
    let mut got: Vec<u64> = (0..N).map(|_| host.wait().unwrap().cookie).collect();
    got.sort_unstable();
    assert_eq!(got, (100..100 + N as u64).collect::<Vec<_>>());

    // Engine-side: a host that ignores credits fills both rings; the engine stops taking
    // descriptors while the completion ring is full, so nothing is dropped.
    let mut greedy = Host::attach_with(
        e.name(),
        AttachOptions {
            max_in_flight: Some(usize::MAX),
            ..Default::default()
        },
    )
    .unwrap();
    let descs: Vec<_> = (0..4 * N as u64)
        .map(|i| SubmissionDescriptor::nop(1000 + i))
        .collect();
    let mut posted = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && posted < descs.len() {
        posted += greedy.post_batch(&descs[posted..]);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        posted,
        2 * N,
        "N completions fill the completion ring, N more wait in the submission ring"
    );
    let mut cookies = Vec::new();
    while cookies.len() < descs.len() {
        posted += greedy.post_batch(&descs[posted..]);
        if let Some(c) = greedy.wait_timeout(Duration::from_secs(5)).unwrap() {
            cookies.push(c.cookie);
        } else {
            panic!("stalled after {} completions", cookies.len());
        }
    }
    assert_eq!(
        cookies,
        descs.iter().map(|d| d.cookie).collect::<Vec<_>>(),
        "all, once, in order"
    );
}

#[test]
fn a_host_that_corrupts_its_ring_is_detached_alone() {
    let e = engine(Config::default());
    let mut good = Host::attach(e.name()).unwrap();
    let sock = ctl::connect(e.name()).unwrap();
    ctl::send(sock.as_fd(), &CtlMsg::new(CtlKind::ATTACH), None).unwrap();
    let Received::Msg(reply, Some(fd)) = ctl::recv(sock.as_fd()).unwrap() else {
        panic!("attach failed")
    };
    assert_eq!(reply.kind, CtlKind::ATTACH_OK);
    let rings = ringcast_ring::attach::open(fd).unwrap();
    rustix::io::ioctl_fionbio(&sock, true).unwrap();
    // Scribble an impossible producer index (tail far beyond head + capacity) into the SQ.
    let tail_at = rings.header.sq_offset + 128;
    rings
        .segment
        .write_at(tail_at, &(1u64 << 40).to_le_bytes())
        .unwrap();
    // The engine hangs up on that host …
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctl::recv(sock.as_fd()) {
            Ok(Received::Closed) => break,
            Ok(Received::Empty) | Ok(Received::Msg(..)) => {}
            other => panic!("{other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "engine kept a host with a corrupt ring"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // … and serves the other one as before.
    assert_eq!(good.stats().unwrap().hosts_lost, 1);
    good.nop().unwrap();
}
