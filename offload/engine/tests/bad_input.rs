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
    ctl::call(sock.as_fd(), msg, fd, Duration::from_secs(10), &mut |_| {}).unwrap().0
}

#[test]
fn wrong_abi_version_is_refused_and_engine_keeps_serving() {
    let e = engine(Config::default());
    let sock = ctl::connect(e.name()).unwrap();
    let mut req = CtlMsg::new(CtlKind::ATTACH);
    req.version = ABI_VERSION + 41;
    let reply = raw_call(&sock, &req, None);
    assert_eq!((reply.kind, reply.status, reply.b), (CtlKind::ERROR, CtlStatus::ABI_MISMATCH, ABI_VERSION));
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
    let refused = |msg: CtlMsg, fd: Option<std::os::fd::BorrowedFd<'_>>| raw_call(&sock, &msg, fd).status;

    let mut reg = CtlMsg::new(CtlKind::REGISTER);
    reg.a = Access::READ.0;
    reg.e = 100;
    assert_eq!(refused(reg, None), CtlStatus::BAD_REQUEST, "REGISTER without a memory fd");

    // A memfd that is not sealed could be truncated under the engine: refused.
    let unsealed: OwnedFd = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&unsealed, 4096).unwrap();
    assert_eq!(refused(reg, Some(unsealed.as_fd())), CtlStatus::MAP_FAILED, "unsealed memory");

    let sealed = ringcast_ring::ShmSegment::create("t", 4096).unwrap();
    let mut past_end = reg;
    past_end.d = 4000;
    assert_eq!(refused(past_end, Some(sealed.fd())), CtlStatus::BAD_REQUEST, "range past the segment");
    let mut zero = reg;
    zero.e = 0;
    assert_eq!(refused(zero, Some(sealed.fd())), CtlStatus::BAD_REQUEST, "zero length");
    let mut bad_access = reg;
    bad_access.a = 0x10;
    assert_eq!(refused(bad_access, Some(sealed.fd())), CtlStatus::BAD_REQUEST, "undefined access bits");
    let mut dereg = CtlMsg::new(CtlKind::DEREGISTER);
    dereg.a = 0x0001_0001;
    assert_eq!(refused(dereg, None), CtlStatus::UNKNOWN_REGION);
    assert_eq!(refused(CtlMsg::new(CtlKind(0x55)), None), CtlStatus::BAD_REQUEST, "unknown request kind");

    // A message of the wrong size is answered, not trusted, and the connection stays usable.
    rustix::net::send(&sock, &CtlMsg::new(CtlKind::STATS).as_bytes()[..17], rustix::net::SendFlags::empty())
        .unwrap();
    match ctl::recv(sock.as_fd(), &mut Vec::new()).unwrap() {
        Received::Msg(m, _) => {
            assert_eq!((m.kind, m.status), (CtlKind::ERROR, CtlStatus::BAD_REQUEST))
        }
        other => panic!("{other:?}"),
    }
    let ok = raw_call(&sock, &reg, Some(sealed.fd()));
    assert_eq!(ok.kind, CtlKind::REGISTER_OK, "a valid request after all that works");

    // The well-behaved host never noticed.
    host.nop().unwrap();
    assert!(host.stats().unwrap().hosts_attached >= 2);
}

/// Issue 13 (minor): a control message of another ABI version, or with its reserved field set,
/// is refused as `CtlMsg` documents — before attach and after, whatever its kind — and the
/// connection stays usable.
#[test]
fn control_messages_of_another_version_or_with_reserved_bits_are_refused() {
    let e = engine(Config::default());
    let mut reserved_attach = CtlMsg::new(CtlKind::ATTACH);
    reserved_attach.mac = 1;
    let sock = ctl::connect(e.name()).unwrap();
    let reply = raw_call(&sock, &reserved_attach, None);
    assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::BAD_REQUEST), "ATTACH, reserved set");

    let sock = ctl::connect(e.name()).unwrap();
    assert_eq!(raw_call(&sock, &CtlMsg::new(CtlKind::ATTACH), None).kind, CtlKind::ATTACH_OK);
    let mut seq = 0;
    let mut call = |mut msg: CtlMsg| {
        seq += 1;
        msg.seq = seq;
        let reply = raw_call(&sock, &msg, None);
        assert_eq!(reply.seq, seq);
        reply
    };
    for kind in [CtlKind::STATS, CtlKind::DETACH, CtlKind::DEREGISTER] {
        let mut foreign = CtlMsg::new(kind);
        foreign.version = ABI_VERSION + 1;
        let reply = call(foreign);
        assert_eq!(
            (reply.kind, reply.status, reply.b),
            (CtlKind::ERROR, CtlStatus::ABI_MISMATCH, ABI_VERSION),
            "{kind:?} of another version"
        );
        let mut reserved = CtlMsg::new(kind);
        reserved.mac = 0x8000_0000_0000_0000;
        let reply = call(reserved);
        assert_eq!(
            (reply.kind, reply.status),
            (CtlKind::ERROR, CtlStatus::BAD_REQUEST),
            "{kind:?}, reserved set"
        );
    }
    // Neither was acted on (the DETACHes did not detach): a valid request is answered.
    assert_eq!(call(CtlMsg::new(CtlKind::STATS)).kind, CtlKind::STATS_OK);
}

#[test]
fn library_side_checks_and_refusals_are_typed() {
    let e = engine(Config::default().with(|cfg| cfg.limits.max_regions = 2));
    let mut host = Host::attach(e.name()).unwrap();
    let buf = SharedBuf::new(1024).unwrap();
    assert!(matches!(host.register_range(&buf, 1000, 100, Access::READ), Err(Error::OutOfBounds { .. })));
    assert!(matches!(SharedBuf::new(0), Err(Error::OutOfBounds { .. })));
    assert!(matches!(buf.write_at(1020, &[0; 8]), Err(Error::OutOfBounds { .. })));
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
    assert!(matches!(Host::attach("no-such-engine-anywhere"), Err(Error::Connect { .. })));
}

#[test]
fn too_many_hosts_is_a_typed_refusal() {
    let mut host = Host::spawn_local(Config::default().with(|cfg| cfg.limits.max_hosts = 1)).unwrap();
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
    let e = engine(Config::default().with(|cfg| cfg.limits.ring_entries = N as u32));

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
    let mut greedy =
        Host::attach_with(e.name(), AttachOptions { max_in_flight: Some(usize::MAX), ..Default::default() })
            .unwrap();
    let descs: Vec<_> = (0..4 * N as u64).map(|i| SubmissionDescriptor::nop(1000 + i)).collect();
    let mut posted = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && posted < descs.len() {
        posted += greedy.post_batch(&descs[posted..]);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(posted, 2 * N, "N completions fill the completion ring, N more wait in the submission ring");
    let mut cookies = Vec::new();
    while cookies.len() < descs.len() {
        posted += greedy.post_batch(&descs[posted..]);
        if let Some(c) = greedy.wait_timeout(Duration::from_secs(5)).unwrap() {
            cookies.push(c.cookie);
        } else {
            panic!("stalled after {} completions", cookies.len());
        }
    }
    assert_eq!(cookies, descs.iter().map(|d| d.cookie).collect::<Vec<_>>(), "all, once, in order");
}

#[test]
fn a_host_that_corrupts_its_ring_is_detached_alone() {
    let e = engine(Config::default());
    let mut good = Host::attach(e.name()).unwrap();
    let sock = ctl::connect(e.name()).unwrap();
    ctl::send(sock.as_fd(), &CtlMsg::new(CtlKind::ATTACH), None).unwrap();
    let Received::Msg(reply, Some(fd)) = ctl::recv(sock.as_fd(), &mut Vec::new()).unwrap() else {
        panic!("attach failed")
    };
    assert_eq!(reply.kind, CtlKind::ATTACH_OK);
    let rings = ringcast_ring::attach::open(fd).unwrap();
    rustix::io::ioctl_fionbio(&sock, true).unwrap();
    // Scribble an impossible producer index (tail far beyond head + capacity) into the SQ.
    let tail_at = rings.header.sq_offset + 128;
    rings.segment.write_at(tail_at, &(1u64 << 40).to_le_bytes()).unwrap();
    // The engine hangs up on that host …
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctl::recv(sock.as_fd(), &mut Vec::new()) {
            Ok(Received::Closed) => break,
            Ok(Received::Empty) | Ok(Received::Msg(..)) => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "engine kept a host with a corrupt ring");
        std::thread::sleep(Duration::from_millis(5));
    }
    // … and serves the other one as before.
    assert_eq!(good.stats().unwrap().hosts_lost, 1);
    good.nop().unwrap();
}

#[test]
fn attach_with_a_bad_ring_size_is_refused() {
    let e = engine(Config::default().with(|cfg| cfg.limits.max_ring_entries = 1024));
    for (entries, why) in [(100, "not a power of two"), (4096, "above max_ring_entries")] {
        let sock = ctl::connect(e.name()).unwrap();
        let mut req = CtlMsg::new(CtlKind::ATTACH);
        req.b = entries;
        let reply = raw_call(&sock, &req, None);
        assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::LIMIT), "{why}");
        assert_eq!(reply.b, 1024, "the refusal names the limit");
    }
    let opts = AttachOptions { ring_entries: 64, ..Default::default() };
    assert_eq!(Host::attach_with(e.name(), opts).unwrap().ring_entries(), 64);
}

#[test]
fn idle_connections_cannot_lock_hosts_out() {
    let e = engine(Config::default().with(|cfg| {
        cfg.limits.max_hosts = 2;
        cfg.runner.attach_timeout_ms = 300;
    }));
    // Fill every pending slot with connections that never say ATTACH.
    let idle: Vec<OwnedFd> = (0..2).map(|_| ctl::connect(e.name()).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let mut host = Host::attach(e.name()).expect("a real host gets in past idle connections");
    host.nop().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    // The idle ones are told why (IDLE) and closed by the engine once their time is up.
    for sock in &idle {
        rustix::io::ioctl_fionbio(sock, true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut told = false;
        loop {
            match ctl::recv(sock.as_fd(), &mut Vec::new()).unwrap() {
                Received::Msg(m, _) if m.kind == ringcast_abi::ctl::CtlKind::ERROR && !told => {
                    assert_eq!(m.status, ringcast_abi::ctl::CtlStatus::IDLE);
                    told = true;
                }
                Received::Closed => {
                    assert!(told, "closed without a word");
                    break;
                }
                Received::Empty => {
                    assert!(Instant::now() < deadline, "idle connection never closed")
                }
                other => panic!("{other:?}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn mapped_memory_is_budgeted_per_host_and_shared_per_buffer() {
    let e = engine(Config::default().with(|cfg| cfg.limits.max_host_bytes = 1 << 20));
    let mut host = Host::attach(e.name()).unwrap();
    let too_big = SharedBuf::new(2 << 20).unwrap();
    // Registering 4 KiB of a 2 MiB segment still maps 2 MiB: over budget.
    match host.register_range(&too_big, 0, 4096, Access::READ) {
        Err(Error::Refused { status, .. }) => assert_eq!(status, CtlStatus::LIMIT),
        other => panic!("{other:?}"),
    }
    let a = SharedBuf::new(768 << 10).unwrap();
    let b = SharedBuf::new(768 << 10).unwrap();
    let ra = host.register(&a, Access::READ_WRITE).unwrap();
    // The same buffer again shares its mapping and costs nothing more…
    let ra2 = host.register(&a, Access::READ_WRITE).unwrap();
    // … a second buffer would pass the budget.
    match host.register(&b, Access::READ) {
        Err(Error::Refused { status, .. }) => assert_eq!(status, CtlStatus::LIMIT),
        other => panic!("{other:?}"),
    }
    // Two registrations of one buffer are the same bytes: an overlapping COPY between them is
    // refused, a disjoint one works.
    match host.copy(ra2.at(4096), ra.at(0), 64 << 10) {
        Err(e) => assert_eq!(e.status(), Some(ringcast_abi::StatusKind::Overlap)),
        Ok(c) => panic!("overlapping copy through two registrations completed: {c:?}"),
    }
    a.write_at(0, &[7u8; 4096]).unwrap();
    host.copy(ra2.at(500 << 10), ra.at(0), 4096).unwrap();
    assert_eq!(a.to_vec(500 << 10, 4096).unwrap(), vec![7u8; 4096]);
    // Releasing both registrations returns the budget.
    host.deregister(ra).unwrap();
    host.deregister(ra2).unwrap();
    host.register(&b, Access::READ).unwrap();
}

#[test]
fn a_huge_copy_does_not_stall_other_hosts() {
    const BIG: usize = 512 << 20;
    // 131072 passes of 4 KiB: the copy takes far longer than a round trip, whatever the load.
    let e = engine(Config::default().with(|cfg| cfg.limits.dma_pass_bytes = 4096));
    let mut a = Host::attach(e.name()).unwrap();
    let mut b = Host::attach(e.name()).unwrap();
    let src = SharedBuf::new(BIG).unwrap();
    let dst = SharedBuf::new(BIG).unwrap();
    src.write_at(BIG as u64 - 4, b"tail").unwrap();
    let rs = a.register(&src, Access::READ).unwrap();
    let rd = a.register(&dst, Access::READ_WRITE).unwrap();
    a.try_post(&SubmissionDescriptor::copy(1, rd.at(0), rs.at(0), BIG as u64)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.unclaimed() > 0 {
        assert!(Instant::now() < deadline, "engine never took the COPY");
        std::hint::spin_loop();
    }
    // The engine is moving A's copy: B's round trips are served meanwhile.
    for _ in 0..10 {
        b.nop().unwrap();
    }
    assert!(a.poll().unwrap().is_none(), "host B waited for host A's whole copy");
    let copy = a.wait().unwrap();
    assert!(copy.status.is_ok());
    assert_eq!(dst.to_vec(BIG as u64 - 4, 4).unwrap(), b"tail");
}

#[test]
fn engine_shutdown_answers_queued_descriptors() {
    let e = engine(Config::default().with(|cfg| cfg.limits.dma_pass_bytes = 4096));
    let mut host = Host::attach(e.name()).unwrap();
    let src = SharedBuf::new(64 << 20).unwrap();
    let dst = SharedBuf::new(64 << 20).unwrap();
    let rs = host.register(&src, Access::READ).unwrap();
    let rd = host.register(&dst, Access::READ_WRITE).unwrap();
    src.write_at(0, b"head").unwrap();
    host.try_post(&SubmissionDescriptor::copy(1, rd.at(0), rs.at(0), 64 << 20)).unwrap();
    // Once the engine holds the COPY (16384 passes to go), it takes nothing more from this host
    // until the COPY is done: the NOPs stay in the ring.
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.unclaimed() > 0 {
        assert!(Instant::now() < deadline, "engine never took the COPY");
        std::hint::spin_loop();
    }
    for c in 2..12 {
        host.try_post(&SubmissionDescriptor::nop(c)).unwrap();
    }
    e.stop();
    let mut got = Vec::new();
    while let Ok(c) = host.wait() {
        got.push(c);
    }
    assert_eq!(got.len(), 11, "every posted descriptor was answered: {got:?}");
    let shutdown = ringcast_abi::Status::from(ringcast_abi::StatusKind::EngineShutdown);
    assert!(got[0].status.is_ok(), "a COPY the engine took is finished: {:?}", got[0]);
    assert_eq!(dst.to_vec(0, 4).unwrap(), b"head");
    assert!(got[1..].iter().all(|c| c.status == shutdown), "descriptors still in the ring: {got:?}");
}

/// A TCP socket with unsent data and a long `SO_LINGER`: closing it blocks for the linger time.
fn lingering_socket(linger_secs: u32) -> (OwnedFd, std::net::TcpListener) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client.set_nonblocking(true).unwrap();
    // Never accepted or read: fill the peer's window so data stays unsent in our buffer.
    let chunk = [0u8; 65536];
    let mut total = 0usize;
    while total < 64 << 20 {
        match std::io::Write::write(&mut &client, &chunk) {
            Ok(n) => total += n,
            Err(_) => break,
        }
    }
    rustix::net::sockopt::set_socket_linger(&client, Some(Duration::from_secs(linger_secs as u64))).unwrap();
    (OwnedFd::from(client), listener)
}

#[test]
fn a_descriptor_that_blocks_on_close_does_not_stall_the_engine() {
    let e = engine(Config::default());
    let mut victim = Host::attach(e.name()).unwrap();
    victim.nop().unwrap();
    let sock = ctl::connect(e.name()).unwrap();
    assert_eq!(raw_call(&sock, &CtlMsg::new(CtlKind::ATTACH), None).kind, CtlKind::ATTACH_OK);
    let (tcp, _keep) = lingering_socket(20);
    // Passed with a request that takes no descriptor, and with a REGISTER (not a memfd).
    let stats = raw_call(&sock, &CtlMsg::new(CtlKind::STATS), Some(tcp.as_fd()));
    assert_eq!(stats.kind, CtlKind::STATS_OK);
    let mut reg = CtlMsg::new(CtlKind::REGISTER);
    reg.a = Access::READ.0;
    reg.e = 16;
    assert_eq!(raw_call(&sock, &reg, Some(tcp.as_fd())).status, CtlStatus::MAP_FAILED);
    drop(tcp);
    // The engine closes its copies off the polling loop: other hosts are served at once.
    let t = Instant::now();
    for _ in 0..100 {
        victim.nop().unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(5), "engine stalled for {:?}", t.elapsed());
}

#[test]
fn deregistering_fails_an_in_flight_copy_even_through_a_second_registration() {
    const LEN: u64 = 64 << 20;
    let e = engine(Config::default().with(|cfg| cfg.limits.dma_pass_bytes = 4096));
    let mut host = Host::attach(e.name()).unwrap();
    let buf = SharedBuf::new(2 * LEN as usize).unwrap();
    let src = host.register(&buf, Access::READ).unwrap();
    let dst = host.register(&buf, Access::READ_WRITE).unwrap(); // same memfd, same mapping
    host.try_post(&SubmissionDescriptor::copy(1, dst.at(LEN), src.at(0), LEN)).unwrap();
    // Once the engine holds the COPY (16384 passes of 4 KiB to go), take the destination back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.unclaimed() > 0 {
        assert!(Instant::now() < deadline, "engine never took the descriptor");
        std::hint::spin_loop();
    }
    host.deregister(dst).unwrap();
    let c = host.wait().unwrap();
    assert_eq!(
        ringcast_abi::StatusKind::try_from(c.status),
        Ok(ringcast_abi::StatusKind::OutOfBounds),
        "the copy must stop when its destination is deregistered: {c:?}"
    );
    assert_eq!(c.bytes, 0);
}
