//! The BlueField contract on one machine: an engine daemon that reaches its hosts only by DMA
//! (`cma`: `process_vm_readv`/`writev`, nothing of theirs mapped) and hears from them only over
//! a TCP control connection that proves the job's secret. Real host processes attach over TCP,
//! get byte-exact COPY results and every typed error; the daemon's `/proc/<pid>/maps` holds no
//! host memory; every bad control connection is refused with a typed status while the daemon
//! keeps serving; a host that dies mid-work leaves nothing behind.
mod common;
use common::tcp::*;
use common::*;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_host::{Access, Host, SharedBuf, SubmissionDescriptor};
use ringcast_offload::ctl::{self, CtlSock, Received};
use std::time::{Duration, Instant};

const CHILD_TEST: &str = "host_process_role";
const TIMEOUT: Duration = Duration::from_secs(10);

/// Host memory of `pid` the engine has mapped: memfds of the host library (its buffers and
/// rings are `memfd:ringcast-*`; the engine's own are never mapped by a `cma` engine either).
fn host_memory_mapped(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("memfd:ringcast"))
        .map(str::to_string)
        .collect()
}

/// This test binary re-executed as a host process in `role`, attaching over TCP to `addr` with
/// the job's secret.
fn spawn_tcp_child(role: &str, addr: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("RINGCAST_ENGINE", addr)
        .env(ENGINE, addr)
        .env("RINGCAST_JOB_SECRET", SECRET)
        .env("RINGCAST_POLL_MODE", "spin-yield")
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Entry point of the child host processes.
#[test]
fn host_process_role() {
    let role = std::env::var(ROLE).unwrap_or_default();
    let engine = std::env::var(ENGINE).unwrap_or_default();
    match role.as_str() {
        "copy" => {
            let mut host = Host::attach(&engine).expect("attach over TCP");
            assert_ne!(host.engine_pid(), std::process::id());
            copy_workload(&mut host, std::process::id() as u64, 120);
        }
        "die-in-flight" => {
            let mut host = Host::attach(&engine).expect("attach over TCP");
            die_with_copies_in_flight(&mut host, 16 << 20, 16);
        }
        "" => {}
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn hosts_over_tcp_get_byte_exact_results_with_none_of_their_memory_mapped() {
    let (daemon, addr) = cma_daemon("tcp-cma");
    let engine_pid = daemon.child.id();
    let mut kids: Vec<_> = (0..2).map(|_| spawn_tcp_child("copy", &addr)).collect();
    // While they work, the engine maps none of their memory.
    let mut seen_clean = 0;
    while kids.iter_mut().any(|k| matches!(k.try_wait(), Ok(None))) {
        assert_eq!(host_memory_mapped(engine_pid), Vec::<String>::new(), "the engine mapped host memory");
        seen_clean += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    for k in &mut kids {
        let status = wait_with_timeout(k, Duration::from_secs(120)).expect("child host hung");
        assert!(status.success(), "child host failed: {status}");
    }
    assert!(seen_clean > 0);
    let mut probe = tcp_host(&addr);
    let s = probe.stats().unwrap();
    assert_eq!(s.hosts_lost, 0, "both children detached cleanly: {s:?}");
    assert!(s.completed_ok >= 2 * 120, "{s:?}");
    assert!(s.completed_err >= 2 * 10, "every bad-input case was answered: {s:?}");
    drop(probe);
    assert!(daemon.stop());
}

#[test]
fn a_cma_host_on_the_unix_socket_registers_in_place_and_a_mapped_one_is_refused() {
    let (daemon, _) = cma_daemon("unix-cma");
    // A mapped attach: the engine serves cma only.
    match Host::attach_config(&daemon.name, &ringcast_host::Config::default(), Default::default()) {
        Err(ringcast_host::Error::Refused { request: "attach", status }) => {
            assert_eq!(status, CtlStatus::BACKEND)
        }
        other => panic!("a mapped attach to a cma-only engine must be refused, got {other:?}"),
    }
    let config =
        ringcast_host::Config::default().with(|c| c.runner.dma = ringcast_offload::config::DmaMode::Cma);
    let mut host = Host::attach_config(&daemon.name, &config, Default::default()).unwrap();
    assert!(host.registers_in_place());
    copy_workload(&mut host, 5, 40);
    // Two registrations of one buffer that overlap have handles of their own: a COPY between
    // them would read bytes it had written. Refused whole, nothing moved.
    let buf = SharedBuf::new(8192).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    buf.write_at(0, &pattern).unwrap();
    let a = host.register_range(&buf, 0, 6144, Access::READ_WRITE).unwrap();
    let b = host.register_range(&buf, 2048, 6144, Access::READ_WRITE).unwrap();
    assert!(host.copy(b.at(0), a.at(0), 6144).is_err(), "an overlapping copy must fail");
    let mut after = vec![0u8; 8192];
    buf.read_at(0, &mut after).unwrap();
    assert_eq!(after, pattern, "a refused copy moved nothing");
    // Disjoint parts of the same registrations copy fine.
    host.copy(b.at(4096), a.at(0), 2048).unwrap();
    buf.read_at(0, &mut after).unwrap();
    assert_eq!(after[6144..8192], pattern[..2048]);
    assert_eq!(host_memory_mapped(daemon.child.id()), Vec::<String>::new());
    drop(host);
    assert!(daemon.stop());
}

/// Sends `msgs` on a fresh TCP connection and returns the replies until the engine closes it or
/// goes quiet.
fn exchange(addr: &str, msgs: &[CtlMsg]) -> Vec<CtlMsg> {
    let mut sock = CtlSock::connect(addr).unwrap();
    let mut replies = Vec::new();
    let mut stray = Vec::new();
    for m in msgs {
        if sock.send(m, None).is_err() {
            break;
        }
        if !ctl::readable_within(sock.fd(), TIMEOUT) {
            break;
        }
        match sock.recv(&mut stray).unwrap() {
            Received::Msg(r, _) => replies.push(r),
            _ => break,
        }
    }
    replies
}

fn msg(kind: CtlKind, seq: u64) -> CtlMsg {
    let mut m = CtlMsg::new(kind);
    m.seq = seq;
    m
}

#[test]
fn every_bad_control_connection_gets_a_typed_refusal_and_the_engine_serves_on() {
    let (daemon, addr) = cma_daemon("tcp-bad");
    let tcp = addr.strip_prefix("tcp://").unwrap().to_string();
    let mut good = tcp_host(&addr);
    good.nop().unwrap();

    // ATTACH without AUTH.
    let r = exchange(&addr, &[msg(CtlKind::ATTACH, 1)]);
    assert_eq!((r[0].kind, r[0].status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED));
    // AUTH before HELLO (no nonce asked for).
    let r = exchange(&addr, &[msg(CtlKind::AUTH, 1)]);
    assert_eq!((r[0].kind, r[0].status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED));
    // A wrong secret: another job's host.
    let r = exchange(&addr, &[msg(CtlKind::HELLO, 1)]);
    assert_eq!(r[0].kind, CtlKind::HELLO_OK);
    let mut sock = CtlSock::connect(&addr).unwrap();
    let transcript = hello(&mut sock);
    let mut other_job = secret();
    other_job[0] ^= 1;
    let (reply, _) = sock.call(&auth(&other_job, &transcript), None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED));
    // The right secret over another connection's hellos (a replayed AUTH) fails too.
    let mut sock = CtlSock::connect(&addr).unwrap();
    let fresh = hello(&mut sock);
    assert_ne!(fresh.1.c, transcript.1.c, "a nonce per connection");
    let (reply, _) = sock.call(&auth(&secret(), &transcript), None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(reply.status, CtlStatus::UNAUTHORIZED);
    // Authenticated, but a mapped ATTACH (no descriptor can cross TCP).
    let mut sock = authed(&addr);
    let (reply, _) = sock.call(&msg(CtlKind::ATTACH, 3), None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(reply.status, CtlStatus::BACKEND);
    // Authenticated, host-owned rings named in another process's memory: the nonce is not there.
    let mut cat = std::process::Command::new("cat").stdin(std::process::Stdio::piped()).spawn().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", cat.id())).unwrap();
    let stack = maps.lines().find(|l| l.ends_with("[stack]")).unwrap();
    let lo = u64::from_str_radix(stack.split('-').next().unwrap(), 16).unwrap();
    let mut sock = authed(&addr);
    let mut attach = msg(CtlKind::ATTACH, 3);
    (attach.a, attach.b, attach.d) = (cat.id(), 256, lo);
    attach.e = ringcast_ring::attach::layout(256, 256).2;
    let (reply, _) = sock.call(&attach, None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(reply.kind, CtlKind::ERROR);
    assert!(matches!(reply.status, CtlStatus::UNAUTHORIZED | CtlStatus::BACKEND), "{:?}", reply.status);
    cat.kill().unwrap();
    cat.wait().unwrap();
    // Garbage: 64 bytes that are not a control message.
    let raw = ctl::connect_tcp(&tcp).unwrap();
    rustix::net::send(&raw, &[0xA5; 64], rustix::net::SendFlags::empty()).unwrap();
    let mut sock = CtlSock::tcp(raw);
    assert!(ctl::readable_within(sock.fd(), TIMEOUT));
    match sock.recv(&mut Vec::new()).unwrap() {
        Received::Msg(r, _) => assert_eq!((r.kind, r.status), (CtlKind::ERROR, CtlStatus::BAD_REQUEST)),
        other => panic!("garbage must be refused, got {other:?}"),
    }
    // Oversized: a HELLO with 40 more bytes behind it — the tail cuts the next message wrong.
    let raw = ctl::connect_tcp(&tcp).unwrap();
    let mut bytes = zerocopy::IntoBytes::as_bytes(&msg(CtlKind::HELLO, 1)).to_vec();
    bytes.extend([0x11; 40]);
    rustix::net::send(&raw, &bytes, rustix::net::SendFlags::empty()).unwrap();
    rustix::net::send(&raw, &[0x22; 24], rustix::net::SendFlags::empty()).unwrap();
    let mut sock = CtlSock::tcp(raw);
    let mut kinds = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        match sock.recv(&mut Vec::new()) {
            Ok(Received::Msg(r, _)) => kinds.push((r.kind, r.status)),
            Ok(Received::Closed) | Err(_) => break,
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    assert_eq!(kinds, [(CtlKind::HELLO_OK, CtlStatus::OK), (CtlKind::ERROR, CtlStatus::BAD_REQUEST)]);
    // Truncated: half a message, then the connection closes.
    let raw = ctl::connect_tcp(&tcp).unwrap();
    rustix::net::send(&raw, &[0x52; 30], rustix::net::SendFlags::empty()).unwrap();
    drop(raw);
    // A flood of idle connections: more than the engine keeps pending. Those pushed out are
    // told why (IDLE) before they are closed.
    let idle: Vec<_> = (0..300).filter_map(|_| ctl::connect_tcp(&tcp).ok()).collect();
    assert!(idle.len() > 256);
    let mut late = tcp_host(&addr);
    late.nop().unwrap();
    let mut first = CtlSock::tcp(idle.into_iter().next().unwrap());
    assert!(ctl::readable_within(first.fd(), TIMEOUT));
    match first.recv(&mut Vec::new()).unwrap() {
        Received::Msg(r, _) => assert_eq!((r.kind, r.status), (CtlKind::ERROR, CtlStatus::IDLE)),
        other => panic!("the oldest idle connection must be told why, got {other:?}"),
    }
    // Through all of it the first host was served.
    copy_workload(&mut good, 11, 20);
    let s = good.stats().unwrap();
    assert_eq!(s.hosts_lost, 0, "{s:?}");
    drop((good, late));
    assert!(daemon.stop());
}

#[test]
fn a_tcp_host_that_dies_mid_copy_leaves_the_engine_serving_and_holding_nothing() {
    let (daemon, addr) = cma_daemon("tcp-die");
    let mut survivor = tcp_host(&addr);
    survivor.nop().unwrap();
    let before = fds_and_maps(daemon.child.id());
    let mut kid = spawn_tcp_child("die-in-flight", &addr);
    let status = wait_with_timeout(&mut kid, Duration::from_secs(60)).expect("child hung");
    assert!(!status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = survivor.stats().unwrap();
        if s.hosts_lost == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "engine never noticed the dead host: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        fds_and_maps(daemon.child.id()),
        before,
        "engine fds/shared mappings back to their counts; mapped now: {:#?}",
        shared_maps(daemon.child.id())
    );
    copy_workload(&mut survivor, 3, 30);
    drop(survivor);
    assert!(daemon.stop());
}

#[test]
fn a_tcp_host_waiting_on_an_engine_that_dies_gets_engine_gone() {
    let (mut daemon, addr) = cma_daemon("tcp-engine-dies");
    let mut host = tcp_host(&addr);
    host.nop().unwrap();
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    // A TCP peer's end shows as RDHUP, never HUP: the wait must notice it all the same.
    waits_end_when_the_engine_is_gone(&mut host);
}

#[test]
fn host_owned_rings_wrap_many_times_over_tcp() {
    let (daemon, addr) = cma_daemon("tcp-wrap");
    let mut host = tcp_host(&addr);
    // Many times the ring's 256 entries, one at a time and in batches. Each wrap makes the
    // host re-read the engine's `head`, mirrored, possibly mid-store: `post` must wait for it,
    // never say WouldBlock with nothing in flight (seen once in ~500,000 NOPs of the bench).
    for i in 0..50_000 {
        host.nop().unwrap_or_else(|e| panic!("nop {i}: {e}"));
    }
    let descs: Vec<_> = (0..64).map(|_| SubmissionDescriptor::nop(0)).collect();
    for _ in 0..40 {
        let mut posted = 0;
        while posted < descs.len() {
            let batch: Vec<_> = descs[posted..]
                .iter()
                .map(|d| SubmissionDescriptor::nop(host.next_cookie() + d.cookie))
                .collect();
            posted += host.post_batch(&batch);
            while host.poll().unwrap().is_some() {}
        }
        while host.in_flight() > 0 {
            host.wait().unwrap();
        }
    }
    drop(host);
    assert!(daemon.stop());
}

/// Whether this machine has an RDMA device (sysfs): where it has none, an engine's
/// `RDMA_CONNECT` cannot be served and must be refused with `BACKEND`.
fn rdma_device_present() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// A plausible RC queue pair address (RoCE-like GID, MTU 1024).
fn qp_address() -> ctl::QpAddress {
    ctl::QpAddress { qpn: 0x11, psn: 0x2222, lid: 0, gid: [0xfe; 16], mtu: 3 }
}

#[test]
fn rdma_requests_the_engine_cannot_serve_get_typed_refusals_and_it_serves_on() {
    // An engine serving only `cma`: RDMA_CONNECT is a backend it does not serve.
    let (daemon, addr) = cma_daemon("rdma-cma");
    let mut good = tcp_host(&addr);
    let mut sock = authed(&addr);
    let mut req = msg(CtlKind::RDMA_CONNECT, 3);
    qp_address().put(&mut req);
    let (reply, _) = sock.call(&req, None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::BACKEND));
    // Over TCP without AUTH.
    let r = exchange(&addr, &[req]);
    assert_eq!((r[0].kind, r[0].status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED));
    copy_workload(&mut good, 3, 10);
    drop(good);
    assert!(daemon.stop());

    // An engine serving every backend: malformed addresses are BAD_REQUEST; a well-formed one
    // needs a device — none here: BACKEND, said in the log, and the engine serves on.
    let name = unique_name("rdma-auto");
    let port = free_port();
    let daemon = Daemon::start_with(
        &name,
        &[
            ("RINGCAST_LISTEN_TCP", format!("127.0.0.1:{port}")),
            ("RINGCAST_JOB_SECRET", SECRET.to_string()),
            ("RINGCAST_DMA", "auto".to_string()),
        ],
    );
    let addr = format!("tcp://127.0.0.1:{port}");
    let mut good = tcp_host(&addr);
    for bad_e in [0u64, 7 << 24 | 3 << 16, 6 << 16] {
        let mut sock = authed(&addr);
        let mut req = msg(CtlKind::RDMA_CONNECT, 3);
        qp_address().put(&mut req);
        req.e = bad_e;
        let (reply, _) = sock.call(&req, None, TIMEOUT, &mut |_| {}).unwrap();
        assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::BAD_REQUEST), "e = {bad_e:#x}");
    }
    let mut sock = CtlSock::connect(&addr).unwrap();
    let (reply, _) = sock.call(&req, None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(reply.status, CtlStatus::UNAUTHORIZED, "RDMA_CONNECT over TCP before AUTH");
    if !rdma_device_present() {
        let mut sock = authed(&addr);
        let (reply, _) = sock.call(&req, None, TIMEOUT, &mut |_| {}).unwrap();
        assert_eq!((reply.kind, reply.status), (CtlKind::ERROR, CtlStatus::BACKEND), "no RDMA device here");
    }
    // A host asking for `rdma` without a device (or the feature) is told so on its own side,
    // before the engine is asked anything.
    if !rdma_device_present() {
        let config = ringcast_host::Config::default().with(|c| {
            c.topology.job_secret.0 = Some(secret());
            c.runner.dma = ringcast_offload::config::DmaMode::Rdma;
        });
        match Host::attach_config(&addr, &config, Default::default()) {
            Err(ringcast_host::Error::Rdma(why)) => assert!(!why.is_empty()),
            Err(other) => panic!("expected an rdma error, got {other}"),
            Ok(_) => panic!("attached by rdma without a device"),
        }
    }
    copy_workload(&mut good, 4, 10);
    let s = good.stats().unwrap();
    assert_eq!(s.hosts_lost, 0, "{s:?}");
    drop(good);
    assert!(daemon.stop());
}

#[test]
fn a_host_whose_rings_break_the_protocol_is_told_why_and_detached_and_the_engine_serves_on() {
    let (daemon, addr) = cma_daemon("ring-broken");
    let mut good = tcp_host(&addr);
    // A host of its own making: authenticated, host-owned rings in this process.
    let mut sock = authed(&addr);
    let (hello, _) = sock.call(&msg(CtlKind::HELLO, 3), None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(hello.kind, CtlKind::ERROR, "one nonce per connection");
    let (mut sock, nonce) = authed_nonce(&addr);
    let mut rings = ringcast_ring::attach::create_host_owned(64, nonce).unwrap();
    rings.sq.set_mirrored();
    rings.cq.set_mirrored();
    let mut attach = msg(CtlKind::ATTACH, 3);
    (attach.a, attach.b) = (std::process::id(), 64);
    (attach.d, attach.e) = (rings.segment.as_non_null().as_ptr() as u64, rings.header.total_len);
    let (reply, _) = sock.call(&attach, None, TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(reply.kind, CtlKind::ATTACH_OK, "{:?}", reply.status);
    // Its submission tail (and mirror) jumps past a ring's worth: an impossible state.
    let sq = rings.header.sq_offset;
    for at in [sq + 144, sq + 128] {
        rings.segment.write_at(at, &1000u64.to_le_bytes()).unwrap();
    }
    let deadline = Instant::now() + TIMEOUT;
    let mut told = None;
    while Instant::now() < deadline {
        match sock.recv(&mut Vec::new()) {
            Ok(Received::Msg(m, _)) if m.kind == CtlKind::ERROR && m.seq == 0 => told = Some(m.status),
            Ok(Received::Closed) | Err(_) => break,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert_eq!(told, Some(CtlStatus::BAD_REQUEST), "told why before the connection closed");
    copy_workload(&mut good, 5, 10);
    let s = good.stats().unwrap();
    assert_eq!((s.hosts_lost, s.hosts_attached), (1, 1), "{s:?}");
    drop(good);
    assert!(daemon.stop());
}
