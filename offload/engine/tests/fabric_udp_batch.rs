//! The `udp` fabric's batching on real sockets: several datagrams per system call each way
//! (`sendmmsg`/`recvmmsg`, counted in the fabric's stats), runs of one destination and size as
//! one UDP GSO send and received whole with GRO, the fallback when the kernel refuses GSO, a
//! batch the kernel takes only in part (nothing it reported sent is lost, nothing unsent is
//! counted sent), and the datagram size taken from the path's MTU — on `lo` (64 KiB) and on a
//! 1500-byte veth in a network namespace.
//!
//! The namespace tests re-run this binary inside a namespace (`ip netns exec`) with
//! [`ROLE`] set, the way `fabric_udp.rs` runs its members; without root or `ip` they print
//! `SKIP:` and check nothing.
mod udp_support;

use ringcast_offload::config::Config;
use ringcast_offload::entropy::new_identity;
use ringcast_offload::fabric::udp::{
    path_datagram, Interface, UdpFabric, UdpOffload, UdpOptions, GSO_MAX_SEGMENTS, MAX_BATCH,
};
use ringcast_offload::fabric::{Datagram, Dest, Fabric};
use ringcast_proto::comm::ident::IpFamily;
use ringcast_proto::comm::{GroupId, PeerId};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use udp_support::{ip, member_ip, unavailable, BridgedNamespaces};

// The 46-datagram GSO runs and the 64-datagram windows these tests count on.
const _: () = assert!(GSO_MAX_SEGMENTS >= 46 && MAX_BATCH >= 64);

/// Set in a re-run of this binary inside a namespace: which test body to run.
const ROLE: &str = "RINGCAST_UDP_BATCH_ROLE";

/// A test datagram: sequence number (u16 LE), then bytes derived from it, `len` in all.
fn datagram(seq: u16, len: usize) -> Vec<u8> {
    let mut d = seq.to_le_bytes().to_vec();
    let mut x = u32::from(seq).wrapping_mul(2_654_435_761) | 1;
    while d.len() < len.max(2) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        d.push(x as u8);
    }
    d
}

/// The sequence number of a datagram that is exactly what [`datagram`] builds, else `None`.
fn parse(d: &[u8]) -> Option<u16> {
    let seq = u16::from_le_bytes([*d.first()?, *d.get(1)?]);
    (datagram(seq, d.len()) == d).then_some(seq)
}

/// A port free on `ip` right now.
fn free_port(ip: IpAddr) -> u16 {
    // NOTE(unwrap): the loopback address always accepts a bind to port 0.
    UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap().local_addr().unwrap().port()
}

/// IPv4 on `lo`, 1472-byte datagrams, `offload`.
fn options(offload: UdpOffload) -> UdpOptions {
    let mut o = UdpOptions::new(free_port(IpAddr::V4(Ipv4Addr::LOCALHOST)), 1472, 8);
    o.family = IpFamily::V4;
    o.interface = Interface::Name("lo".into());
    o.rcvbuf = 1 << 20;
    o.sndbuf = 1 << 20;
    o.offload = offload;
    o
}

/// `n` fabrics on `lo`, member `i` built with `opts[i]`.
///
/// A port [`free_port`] found free can be taken by another test of this binary before the
/// fabric binds it (they run in parallel): on `AddrInUse` the whole set is made again on fresh
/// ports, a few times.
fn fabrics(opts: &[UdpOptions]) -> Vec<UdpFabric> {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut attempt = 0;
    loop {
        let addrs: Vec<SocketAddr> = opts.iter().map(|_| SocketAddr::new(lo, free_port(lo))).collect();
        // Members that shared a group port share its replacement.
        let mut ports = std::collections::HashMap::new();
        let made: Result<Vec<UdpFabric>, _> = opts
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut o = o.clone();
                if attempt > 0 {
                    o.mcast_port = *ports.entry(o.mcast_port).or_insert_with(|| free_port(lo));
                }
                UdpFabric::new(PeerId(i as u32), addrs.clone(), &o)
            })
            .collect();
        match made {
            Ok(f) => return f,
            Err(e) if attempt < 5 && format!("{e:?}").contains("AddrInUse") => attempt += 1,
            Err(e) => panic!("fabric: {e:?}"),
        }
    }
}

/// Polls `f` with `budget` until `want` datagrams came or 3 s passed, then 50 ms more; returns
/// them (sender, sequence) in order, panicking on a damaged one or a poll over budget.
fn receive(f: &mut UdpFabric, want: usize, budget: usize) -> Vec<(u32, u16)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut settle = None;
    loop {
        let n = f.poll(budget, &mut |from, d| {
            let seq =
                parse(d).unwrap_or_else(|| panic!("damaged datagram of {} bytes from {from:?}", d.len()));
            got.push((from.0, seq));
        });
        assert!(n <= budget, "poll delivered {n} for a budget of {budget}");
        let now = Instant::now();
        match settle {
            Some(t) if now >= t => return got,
            None if got.len() >= want || now >= deadline => settle = Some(now + Duration::from_millis(50)),
            _ => {}
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// `lens[i]`-byte datagrams with sequence numbers `0..`, sent to `dest` in one batch.
fn send_run(f: &mut UdpFabric, dest: Dest, lens: &[usize]) {
    let frames: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| datagram(i as u16, l)).collect();
    f.send_batch(&mut frames.iter().map(|d| Datagram::whole(dest, d)));
}

/// 64 datagrams of mixed sizes to one member go in one `sendmmsg` and come out of one
/// `recvmmsg`; with a batch of 1 each takes its own call (the fabric before batching).
#[test]
fn a_batch_takes_one_system_call_each_way() {
    let mut f = fabrics(&[options(UdpOffload::Off), options(UdpOffload::Off)]);
    let lens: Vec<usize> = (0..64).map(|i| 40 + (i * 97) % 1400).collect();
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
    let s = f[0].stats();
    assert_eq!((s.tx_calls, s.tx_datagrams, s.tx_dropped, s.tx_errors), (1, 64, 0, 0), "{s:?}");
    assert_eq!(f[0].counters().tx_calls, 1);
    // All 64 wait in the receive queue (lo delivers at once; a moment's grace all the same):
    // one poll of budget 64 takes them in one `recvmmsg`.
    std::thread::sleep(Duration::from_millis(20));
    let mut first = Vec::new();
    let n = f[1].poll(64, &mut |from, d| first.push((from.0, parse(d).expect("intact"))));
    let r = f[1].stats();
    assert_eq!((n, r.rx_calls), (64, 1), "64 datagrams in {} recvmmsg calls", r.rx_calls);
    assert_eq!(first, (0..64).map(|s| (0, s)).collect::<Vec<_>>(), "every datagram once, in order, intact");
    assert_eq!(f[1].counters().rx_calls, r.rx_calls);
    assert!(receive(&mut f[1], 0, 64).is_empty(), "and nothing more");

    let one = UdpOptions { batch: 1, ..options(UdpOffload::Off) };
    let mut f = fabrics(&[one.clone(), one]);
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
    assert_eq!(f[0].stats().tx_calls, 64, "batch 1: a call per datagram");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(f[1].poll(64, &mut |_, _| {}), 64);
    assert_eq!(f[1].stats().rx_calls, 64, "batch 1: a call per datagram received");
}

/// A run of 64 same-size datagrams (the last shorter) to one member goes as GSO sends of at
/// most one IP packet's worth; a GRO receiver gets it in a few buffers, a receiver without
/// GRO datagram by datagram — both intact, in order. A poll budget that ends inside a GRO
/// buffer leaves the rest for the next poll.
#[test]
fn gso_sends_a_run_in_few_calls_and_gro_receives_it_whole() {
    let mut f = fabrics(&[options(UdpOffload::Auto), options(UdpOffload::Auto), options(UdpOffload::Off)]);
    let (gso, _) = f[0].offloads();
    let (_, gro) = f[1].offloads();
    let mut lens = vec![1400; 63];
    lens.push(700);
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
    send_run(&mut f[0], Dest::Peer(PeerId(2)), &lens);
    let s = f[0].stats();
    assert_eq!((s.tx_datagrams, s.tx_dropped, s.tx_errors, s.gso_refused), (128, 0, 0, 0), "{s:?}");
    if gso {
        // 46 datagrams of 1400 bytes fill one IPv4 packet (65,507 bytes): 46 + 18, twice.
        assert_eq!((s.gso_sends, s.tx_calls), (4, 4), "{s:?}");
    } else {
        println!("SKIP (GSO half): this kernel has no UDP_SEGMENT; sent by sendmmsg");
        assert_eq!(s.tx_calls, 2, "{s:?}");
    }
    let want: Vec<(u32, u16)> = (0..64).map(|s| (0, s)).collect();
    assert_eq!(receive(&mut f[1], 64, 10), want, "GRO receiver, budget 10");
    assert_eq!(receive(&mut f[2], 64, 64), want, "receiver without GRO");
    let (r1, r2) = (f[1].stats(), f[2].stats());
    if gso && gro {
        assert!(r1.gro_buffers >= 2, "the runs arrived coalesced: {r1:?}");
    }
    assert_eq!(r2.gro_buffers, 0, "{r2:?}");
    assert_eq!((f[1].counters().received, f[2].counters().received), (64, 64));
}

/// Multicast: the root sends each fragment once whatever the number of receivers — one GSO
/// run for the group — and every member (GRO or not) gets all of it; the sender's own
/// looped-back copy is discarded whole.
#[test]
fn a_multicast_run_is_sent_once_for_every_receiver() {
    let opts = [
        options(UdpOffload::Auto),
        options(UdpOffload::Auto),
        options(UdpOffload::Off),
        options(UdpOffload::Auto),
    ];
    let port = opts[0].mcast_port;
    let opts: Vec<UdpOptions> = opts.into_iter().map(|o| UdpOptions { mcast_port: port, ..o }).collect();
    let mut f = fabrics(&opts);
    let group: GroupId = new_identity().group;
    for m in f.iter_mut() {
        m.join(&group).expect("join");
    }
    let lens = vec![1200; 40];
    send_run(&mut f[0], Dest::Group(group), &lens);
    let s = f[0].stats();
    assert_eq!(s.tx_datagrams, 40, "{s:?}");
    assert_eq!(f[0].counters().multicast, 40);
    if f[0].offloads().0 {
        assert_eq!((s.gso_sends, s.tx_calls), (1, 1), "one send for three receivers: {s:?}");
    }
    for (m, member) in f.iter_mut().enumerate().skip(1) {
        let got = receive(member, 40, 64);
        assert_eq!(got, (0..40).map(|s| (0, s)).collect::<Vec<_>>(), "member {m}");
    }
    assert!(receive(&mut f[0], 0, 64).is_empty());
    assert_eq!(f[0].stats().own, 40, "the sender's own copy, discarded datagram by datagram");
}

/// The datagram size comes from the route: loopback's MTU less the IP and UDP headers, and an
/// engine's configuration takes it (capped at the protocol's 65,000) when `RINGCAST_MTU` is
/// not set.
#[test]
fn the_datagram_size_is_the_loopback_mtu() {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mtu: usize = std::fs::read_to_string("/sys/class/net/lo/mtu")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .expect("lo's MTU");
    let members = [SocketAddr::new(lo, 4001), SocketAddr::new(lo, 4002)];
    let size = path_datagram(IpFamily::V4, &Interface::Addr(lo), members[0], &members).expect("probe");
    assert_eq!(size, mtu.min(65_535) - 28, "lo's MTU {mtu} less 20 + 8");
    let env = |k: &str| match k {
        "RINGCAST_FABRIC" => Some("udp".to_string()),
        "RINGCAST_NODES" => Some("2".to_string()),
        "RINGCAST_UDP_MEMBERS" => Some("127.0.0.1:4001,127.0.0.1:4002".to_string()),
        _ => None,
    };
    let c = Config::from_lookup(env).expect("config");
    assert_eq!(c.protocol.mtu as usize, size.min(65_000));
    let set = Config::from_lookup(|k| if k == "RINGCAST_MTU" { Some("1472".into()) } else { env(k) });
    assert_eq!(set.expect("config").protocol.mtu, 1472, "RINGCAST_MTU wins");
}

/// A namespace deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Result<Netns, String> {
        let name = format!("rcb{}-{tag}", std::process::id());
        ip(&["netns", "add", &name])?;
        Ok(Netns(name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.0]) {
            eprintln!("cleanup: {e}");
        }
    }
}

/// Re-runs test `name` of this binary in namespace `ns` with [`ROLE`] = `name`; panics with
/// its output if it fails, returns its stdout.
fn rerun_in(ns: &str, name: &str) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ROLE, name)
        .stdin(Stdio::null())
        .output()
        .expect("run in namespace");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} in {ns}: {}\n{text}", out.status);
    text
}

/// Whether this process is the re-run of `name` (the body runs here), else the caller sets up.
fn in_role(name: &str) -> bool {
    std::env::var(ROLE).as_deref() == Ok(name)
}

/// Why namespace tests cannot run here (also: `tc` missing, when `tc` is needed).
fn skip(need_tc: bool) -> Option<String> {
    unavailable().or_else(|| {
        let tc = Command::new("tc").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
        (need_tc && tc.is_err()).then(|| "`tc` (iproute2) is not installed".to_string())
    })
}

/// On a path whose MTU is below the GSO segment (a namespace's `lo` at 1200 bytes) the kernel
/// refuses the segmented send (`EMSGSIZE`): the fabric turns GSO off, sends the run datagram by
/// datagram (the kernel fragments each), and loses nothing; later runs do not try GSO again.
#[test]
fn a_refused_gso_send_falls_back_to_sendmmsg() {
    const NAME: &str = "a_refused_gso_send_falls_back_to_sendmmsg";
    if in_role(NAME) {
        let mut f = fabrics(&[options(UdpOffload::Auto), options(UdpOffload::Off)]);
        if !f[0].offloads().0 {
            println!("SKIP: this kernel has no UDP_SEGMENT");
            return;
        }
        let lens = vec![1400; 20];
        send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
        let s = f[0].stats();
        assert_eq!(
            (s.gso_refused, s.gso_sends, s.tx_datagrams, s.tx_dropped, s.tx_errors),
            (1, 0, 20, 0, 0),
            "{s:?}"
        );
        assert!(!f[0].offloads().0, "GSO is off after the refusal");
        assert_eq!(receive(&mut f[1], 20, 64), (0..20).map(|s| (0, s)).collect::<Vec<_>>());
        send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
        assert_eq!(f[0].stats().gso_refused, 1, "not tried again");
        assert_eq!(receive(&mut f[1], 20, 64).len(), 20);
        println!("RESULT fallback ok");
        return;
    }
    if let Some(why) = skip(false) {
        println!("SKIP: {why}");
        return;
    }
    let ns = Netns::new("gso").expect("namespace");
    ip(&["-n", &ns.0, "link", "set", "lo", "mtu", "1200", "up"]).expect("lo");
    let out = rerun_in(&ns.0, NAME);
    assert!(out.contains("RESULT fallback ok") || out.contains("SKIP"), "{out}");
    println!("{out}");
}

/// A batch the kernel takes only in part — the send queue fills mid-batch (`EAGAIN`) because a
/// slow qdisc holds what was sent — counts exactly what was sent and what was dropped, and the
/// receiver gets every datagram reported sent, intact, and no other. Both ways of sending:
/// `sendmmsg` (offloads off) and GSO runs.
#[test]
fn a_batch_cut_short_by_a_full_queue_loses_nothing_it_reported_sent() {
    const NAME: &str = "a_batch_cut_short_by_a_full_queue_loses_nothing_it_reported_sent";
    if in_role(NAME) {
        for offload in [UdpOffload::Off, UdpOffload::Auto] {
            let small = UdpOptions { sndbuf: 4096, ..options(offload) };
            let mut f = fabrics(&[small, options(UdpOffload::Off)]);
            // Without GSO a datagram per message of one `sendmmsg`; with it, runs of 46 (one
            // IP packet's worth), the second refused.
            let lens = vec![1400; 64];
            send_run(&mut f[0], Dest::Peer(PeerId(1)), &lens);
            let s = f[0].stats();
            assert_eq!(s.tx_datagrams + s.tx_dropped, 64, "{offload}: every datagram counted once: {s:?}");
            assert!(s.tx_dropped > 0 && s.tx_datagrams > 0, "{offload}: the queue filled mid-batch: {s:?}");
            assert_eq!(s.tx_errors, 0, "{s:?}");
            let sent = s.tx_datagrams as u16;
            let got = receive(&mut f[1], usize::from(sent), 64);
            assert_eq!(got, (0..sent).map(|s| (0, s)).collect::<Vec<_>>(), "{offload}: {s:?}");
            println!("RESULT {offload} sent {sent} dropped {} calls {}", s.tx_dropped, s.tx_calls);
        }
        return;
    }
    if let Some(why) = skip(true) {
        println!("SKIP: {why}");
        return;
    }
    let ns = Netns::new("eagain").expect("namespace");
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]).expect("lo");
    // 1 Mbit/s: what the socket sent waits in the qdisc, charged to its send buffer.
    let tc = Command::new("tc")
        .args([
            "-n", &ns.0, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst", "1600",
            "limit", "1000000",
        ])
        .status()
        .expect("tc");
    assert!(tc.success(), "tc qdisc add: {tc}");
    let out = rerun_in(&ns.0, NAME);
    assert!(out.contains("RESULT off") && out.contains("RESULT auto"), "{out}");
    println!("{out}");
}

/// On a 1500-byte veth the datagram is 1472 bytes over IPv4 and 1452 over IPv6 (the default
/// the fabric had before it asked the path), and an engine's configuration takes it.
#[test]
fn the_datagram_size_is_the_veth_mtu() {
    const NAME: &str = "the_datagram_size_is_the_veth_mtu";
    if in_role(NAME) {
        for v6 in [false, true] {
            let members: Vec<SocketAddr> = (0..2).map(|i| SocketAddr::new(member_ip(v6, i), 4001)).collect();
            let family = if v6 { IpFamily::V6 } else { IpFamily::V4 };
            let size = path_datagram(family, &Interface::Addr(members[0].ip()), members[0], &members)
                .expect("probe");
            assert_eq!(size, if v6 { 1452 } else { 1472 });
            let list = members.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
            let c = Config::from_lookup(|k| match k {
                "RINGCAST_FABRIC" => Some("udp".to_string()),
                "RINGCAST_NODES" => Some("2".to_string()),
                "RINGCAST_UDP_MEMBERS" => Some(list.clone()),
                _ => None,
            })
            .expect("config");
            assert_eq!(c.protocol.mtu as usize, size);
            println!("RESULT v6={v6} {size}");
        }
        return;
    }
    if let Some(why) = skip(false) {
        println!("SKIP: {why}");
        return;
    }
    let net = BridgedNamespaces::create("mtu", 2, true).expect("namespaces");
    // The IPv4 addresses beside the IPv6 ones BridgedNamespaces gave.
    for (i, ns) in net.members.iter().enumerate() {
        ip(&["-n", ns, "addr", "add", &format!("{}/24", member_ip(false, i)), "dev", "eth0"]).expect("v4");
    }
    let out = rerun_in(&net.members[0], NAME);
    assert!(out.contains("RESULT v6=false 1472") && out.contains("RESULT v6=true 1452"), "{out}");
    println!("{out}");
}

/// A sleeping engine is woken by the fabric's doorbell when a datagram arrives — and only a
/// sleeping one, once per sleep: datagrams that arrive while it is awake ring nothing, a burst
/// during one sleep rings once.
#[test]
fn the_doorbell_rings_once_per_sleep_not_per_datagram() {
    let mut f = fabrics(&[options(UdpOffload::Off), options(UdpOffload::Off)]);
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &[100; 100]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(f[1].stats().rings, 0, "an awake engine's datagrams wake nothing");
    assert_eq!(receive(&mut f[1], 100, 64).len(), 100);

    // Asleep (armed) while a burst arrives: one ring.
    let seen = f[1].arm().expect("udp has a doorbell");
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &[100; 100]);
    let bell = f[1].bell().expect("bell");
    let start = Instant::now();
    ringcast_ring::doorbell::wait(bell, seen, Duration::from_secs(5));
    assert!(start.elapsed() < Duration::from_secs(2), "woken, not timed out");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(f[1].stats().rings, 1, "one ring for a burst of 100");
    f[1].disarm();
    assert_eq!(receive(&mut f[1], 100, 64).len(), 100);

    // A real sleep, ended by a datagram sent later from another thread.
    let mut sender = f.remove(0);
    let seen = f[0].arm().expect("doorbell");
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        send_run(&mut sender, Dest::Peer(PeerId(1)), &[64]);
        sender
    });
    let start = Instant::now();
    ringcast_ring::doorbell::wait(f[0].bell().expect("bell"), seen, Duration::from_secs(5));
    let slept = start.elapsed();
    f[0].disarm();
    t.join().expect("sender");
    assert!(slept >= Duration::from_millis(20) && slept < Duration::from_secs(2), "slept {slept:?}");
    assert_eq!(f[0].stats().rings, 2);
    assert_eq!(receive(&mut f[0], 1, 64), [(0, 0)]);
}

/// A poll reads only the sockets that hold something (the readiness set): an idle member with
/// its unicast socket and two groups answers polls without a single `recvmmsg` (it made one
/// per socket and poll before: three here), and a datagram waiting on one of them costs one
/// call, on that socket — and still arrives, as does one on each of the others.
#[test]
fn a_poll_reads_only_the_sockets_that_hold_datagrams() {
    let o = options(UdpOffload::Off);
    let mut f = fabrics(&[o.clone(), o]);
    let groups: Vec<GroupId> = (0..2).map(|_| new_identity().group).collect();
    for g in &groups {
        f[1].join(g).expect("join");
    }
    for _ in 0..10 {
        assert_eq!(f[1].poll(64, &mut |_, _| panic!("nothing was sent")), 0);
    }
    assert_eq!(f[1].stats().rx_calls, 0, "idle polls made receive calls: {:?}", f[1].stats());

    send_run(&mut f[0], Dest::Peer(PeerId(1)), &[100]);
    std::thread::sleep(Duration::from_millis(20));
    let mut got = Vec::new();
    assert_eq!(f[1].poll(64, &mut |from, d| got.push((from.0, parse(d).expect("intact")))), 1);
    assert_eq!(got, [(0, 0)]);
    assert_eq!(f[1].stats().rx_calls, 1, "one call, on the socket that held the datagram");

    // One datagram on each socket: all three come, one call each (each socket drained by a
    // call that returns fewer than asked for).
    send_run(&mut f[0], Dest::Peer(PeerId(1)), &[100]);
    for g in &groups {
        send_run(&mut f[0], Dest::Group(*g), &[100]);
    }
    let got = receive(&mut f[1], 3, 64);
    assert_eq!(got, [(0, 0), (0, 0), (0, 0)], "every socket read");
    assert_eq!(f[1].counters().received, 4);
}
