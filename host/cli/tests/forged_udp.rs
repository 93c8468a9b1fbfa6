//! Forged datagrams on the real `udp` fabric (issue 13, defect 1): a machine on the job's
//! bridge that sees the traffic and spoofs members' addresses must not get a single forged byte
//! delivered.
//!
//! Three engine daemons (`ringcast engine`, the `udp` fabric, `RINGCAST_JOB_SECRET` set) run in
//! three network namespaces joined by a Linux bridge ([`Lab`]), one `ringcast workload-rank` per
//! node broadcasting with the multicast algorithm forced (so the data crosses the bridge as
//! multicast) and checking every byte. A fourth namespace on the same bridge — "any machine on
//! the same bridge" — runs the forger (this test binary re-executed, [`forger_process`]):
//!
//! * it **sniffs** with an `AF_PACKET` socket on its `eth0` (the bridge floods multicast to every
//!   port): every IPv4/UDP datagram that parses as a ringcast frame (valid CRC32C) teaches it the
//!   cookie, the multicast group and port, each member's address and rank (source address and
//!   `src_rank` of the roots' multicast), the highest broadcast id so far and the shapes of real
//!   fragments (`frag_seq`, `frag_count`, `total_len`, payload length) — nothing is told to it;
//! * it **forges**, every millisecond, data fragments for the next two broadcast ids in exactly
//!   those shapes, with the sniffed cookie, a valid CRC32C, a random payload, and a tag and
//!   message MAC keyed by a key of its own (it has no other), as multicast to the group and as
//!   repair copies to every member, each **spoofing a member's source address and port** (raw
//!   IPv4 socket, `IPPROTO_RAW`: the IP header is ours), and `src_rank` to match.
//!
//! [`forged_frames_on_the_bridge_are_dropped_and_every_broadcast_is_exact`] asserts that every
//! broadcast completes with the root's exact bytes at every rank, that the forger really saw the
//! job's traffic (the cookie it learned is the world communicator's), that its forgeries overlapped
//! the broadcasts, and that the engines received and dropped them (`NET_STATS` other drops
//! at least half of the forged datagrams the engines were sent). A forged frame with the right
//! cookie and a valid CRC passes every check before the tag, so those drops are `BadTag`; the
//! engines get enough pre-posted slots ([`SLOTS`]) that genuine frames are hardly ever dropped,
//! so the counter measures the forgeries (with `RINGCAST_FORGE_TEST_DRY=1` the forger sends
//! nothing and that assertion fails).
//!
//! [`a_forger_holding_the_key_breaks_the_broadcast`] runs the same forger with the job's secret
//! (what an unkeyed CRC digest amounted to before frames were authenticated): the workload must
//! then fail — wrong bytes or a typed error — which shows the frames reach the protocol in time
//! and the first test would notice a forgery getting through.
use ringcast_abi::frame::{emit, Frame, DIGEST_LEN};
use ringcast_abi::wire::{FrameKind, WireHeader, WIRE_HEADER_LEN, WIRE_TRAILER_LEN, WIRE_VERSION};
use ringcast_host::netns::{ip, Lab};
use ringcast_offload::config::JobSecret;
use ringcast_offload::entropy::new_identity;
use ringcast_proto::comm::auth::{CommKeys, Secret};
use ringcast_proto::engine::world_identity;
use rustix::net::{self as rnet, sockopt, AddressFamily, RecvFlags, SendFlags, SocketType};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};
use zerocopy::byteorder::little_endian::{U16, U32, U64};

/// Both tests load the 2-core machine fully: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Member nodes (engines); the forger is node `NODES` of the lab.
const NODES: usize = 3;
/// The members' unicast port (what `ringcast run --netns` uses).
const PORT: u16 = 7470;
/// Broadcasts of the workload; sizes: one fragment, two, and 48.
const COUNT: u32 = 300;
const SIZES: &str = "2,1500,70000";
const SKEW_US: u32 = 6000;
/// How long the forger forges once it has learned enough (the workload runs for seconds).
const FORGE_MS: u64 = 1000;
/// Broadcast ids ahead of the last one seen that the forger targets.
const AHEAD: u32 = 2;
/// Forged fragments per target broadcast id and millisecond.
const BURST: usize = 3;
/// Pre-posted slots: room for the fragments of a whole 70000-byte broadcast that arrive before
/// its post, so genuine frames are (almost) never dropped and the engines' drop counters
/// measure the forgeries (the default, 5, drops ~40 genuine fragments per late post).
const SLOTS: u32 = 200;
/// Test knob: the forger sniffs and counts but sends nothing (the drop assertion must then fail).
const ENV_DRY: &str = "RINGCAST_FORGE_TEST_DRY";

const ROLE: &str = "RINGCAST_FORGE_TEST_ROLE";
const ENV_KEYED: &str = "RINGCAST_FORGE_TEST_KEYED";

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `key=value` field of a line.
fn field<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

// ------------------------------------------------------------------------------------------
// The forger (runs in the fourth namespace).

/// xorshift64*: the forger's payloads and choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The shape of a real data fragment.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Shape {
    seq: u32,
    count: u32,
    total: u32,
    payload: usize,
}

/// What the forger learned from the traffic.
#[derive(Default)]
struct Learned {
    /// Valid frames sniffed, by cookie.
    cookies: BTreeMap<u64, u64>,
    /// Of those, frames whose tag the real key verifies (keyed forger only).
    verified: u64,
    /// Multicast destination (group address and port).
    group: Option<SocketAddrV4>,
    /// Members: rank → address (source of their datagrams).
    members: BTreeMap<u32, SocketAddrV4>,
    /// Highest broadcast id of a data frame.
    max_bid: Option<u32>,
    /// Recent fragment shapes.
    shapes: Vec<Shape>,
}

impl Learned {
    fn cookie(&self) -> Option<u64> {
        self.cookies.iter().max_by_key(|(_, n)| **n).map(|(c, _)| *c)
    }
}

/// The UDP datagram in an IPv4 packet: (source, destination, payload).
fn udp_in_ipv4(p: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4, &[u8])> {
    let ihl = usize::from(*p.first()? & 0x0f) * 4;
    if p[0] >> 4 != 4 || ihl < 20 || *p.get(9)? != 17 {
        return None;
    }
    let ip4 = |at: usize| Some(Ipv4Addr::new(*p.get(at)?, *p.get(at + 1)?, *p.get(at + 2)?, *p.get(at + 3)?));
    let (src, dst) = (ip4(12)?, ip4(16)?);
    let udp = p.get(ihl..)?;
    let port = |at: usize| Some(u16::from_be_bytes([*udp.get(at)?, *udp.get(at + 1)?]));
    let len = usize::from(port(4)?);
    let payload = udp.get(8..len)?;
    Some((SocketAddrV4::new(src, port(0)?), SocketAddrV4::new(dst, port(2)?), payload))
}

/// One's-complement sum of 16-bit words.
fn csum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        for w in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet carrying `payload` from `src` to `dst` over UDP, checksums computed.
fn ipv4_udp(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let total = 20 + udp_len;
    let ttl = if dst.ip().is_multicast() { 1 } else { 64 };
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, ttl, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src.ip().octets());
    ip.extend_from_slice(&dst.ip().octets());
    let c = csum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut udp = Vec::with_capacity(8);
    udp.extend_from_slice(&src.port().to_be_bytes());
    udp.extend_from_slice(&dst.port().to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    let pseudo = [&ip[12..20], &[0, 17], &udp_len.to_be_bytes()[..]].concat();
    let c = match csum(&[&pseudo, &udp, payload]) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    [ip, udp, payload.to_vec()].concat()
}

/// A forged data fragment of broadcast `bid` in shape `s`, claiming rank `from`, keyed by `keys`,
/// its bytes cut from `noise` at random (for a one-fragment message the MAC is the MAC of exactly
/// what it carries, so a forger with the real key forges a whole consistent message).
#[allow(clippy::too_many_arguments)]
fn forge(
    keys: &CommKeys,
    rng: &mut Rng,
    noise: &[u8],
    cookie: u64,
    bid: u32,
    from: u32,
    s: Shape,
    repair: bool,
) -> Vec<u8> {
    let h = WireHeader {
        version: WIRE_VERSION,
        kind: if repair { FrameKind::DATA_REPAIR } else { FrameKind::DATA_MULTICAST },
        flags: U16::new(u16::from(repair)), // a repair copy one hop from its root
        src_rank: U32::new(from),
        cookie: U64::new(cookie),
        bid: U32::new(bid),
        frag_seq: U32::new(s.seq),
        frag_count: U32::new(s.count),
        total_len: U32::new(s.total),
    };
    let mut cut = |n: usize| {
        let n = n.min(noise.len());
        let at = rng.below(noise.len() - n + 1);
        &noise[at..at + n]
    };
    let payload = cut(s.payload);
    let mac = if s.seq + 1 != s.count {
        Vec::new()
    } else if s.count == 1 {
        keys.message_mac(bid, 0, payload).to_vec()
    } else {
        keys.message_mac(bid, 0, cut(s.total as usize)).to_vec()
    };
    let mut out = vec![0u8; WIRE_HEADER_LEN + payload.len() + DIGEST_LEN + WIRE_TRAILER_LEN];
    let n = emit(&mut out, &h, &[payload, &mac], |span| keys.tag(span), crc32c::crc32c).expect("sized");
    out.truncate(n);
    out
}

/// Learns from one sniffed packet.
fn sniff(packet: &[u8], learned: &mut Learned, real: Option<&CommKeys>) {
    let Some((src, dst, payload)) = udp_in_ipv4(packet) else { return };
    let Ok(frame) = Frame::parse(payload, crc32c::crc32c) else { return };
    let h = frame.header();
    *learned.cookies.entry(h.cookie.get()).or_default() += 1;
    if real.is_some_and(|k| k.tag_ok(frame.tagged(), frame.tag())) {
        learned.verified += 1;
    }
    if dst.ip().is_multicast() {
        learned.group = Some(dst);
    }
    learned.members.insert(h.src_rank.get(), src);
    if matches!(frame.kind(), FrameKind::DATA_MULTICAST | FrameKind::DATA_REPAIR) {
        learned.max_bid = learned.max_bid.max(Some(h.bid.get()));
        let s = Shape {
            seq: h.frag_seq.get(),
            count: h.frag_count.get(),
            total: h.total_len.get(),
            payload: frame.payload().len(),
        };
        if !learned.shapes.contains(&s) {
            if learned.shapes.len() >= 64 {
                learned.shapes.remove(0);
            }
            learned.shapes.push(s);
        }
    }
}

/// The forger role: does nothing (and passes) unless started by the tests below. Prints `READY`
/// once its sockets are open, then `RESULT ...` when done.
#[test]
fn forger_process() {
    if std::env::var(ROLE).as_deref() != Ok("forger") {
        return;
    }
    // With the job's name and secret (keyed variant), the real keys; else a key of its own.
    let real = std::env::var(ENV_KEYED).ok().map(|_| {
        let job = std::env::var("RINGCAST_JOB").expect("RINGCAST_JOB");
        let secret: JobSecret =
            std::env::var("RINGCAST_JOB_SECRET").expect("secret").parse().expect("secret hex");
        CommKeys::new(&world_identity(&job, &secret).key)
    });
    let keys = real.clone().unwrap_or_else(|| CommKeys::new(&Secret(new_identity().key.0)));
    let mut rng = Rng(new_identity().seed | 1);
    let dry = std::env::var(ENV_DRY).is_ok();
    // Forged bytes are windows of this (fresh random bytes per frame cost the debug build too much).
    let noise: Vec<u8> = (0..1 << 17).map(|_| rng.next() as u8).collect();

    // Sniffer: every IPv4 packet the interface receives (not what this host sends).
    let sniffer =
        rnet::socket(AddressFamily::PACKET, SocketType::DGRAM, Some(rnet::eth::IP)).expect("AF_PACKET");
    sockopt::set_socket_timeout(&sniffer, sockopt::Timeout::Recv, Some(Duration::from_micros(500)))
        .expect("SO_RCVTIMEO");
    // Spoofer: IPPROTO_RAW implies IP_HDRINCL, the source address is whatever we write.
    let raw =
        rnet::socket(AddressFamily::INET, SocketType::RAW, Some(rnet::ipproto::RAW)).expect("raw socket");
    sockopt::set_ip_multicast_loop(&raw, false).expect("IP_MULTICAST_LOOP");
    println!("READY");
    let _ = std::io::stdout().flush();

    let started = Instant::now();
    let mut learned = Learned::default();
    let mut buf = vec![0u8; 65536];
    let (mut mcast_sent, mut ucast_sent, mut expected_rx, mut send_errors) = (0u64, 0u64, 0u64, 0u64);
    let (mut first_ns, mut last_ns) = (0u64, 0u64);
    let mut forging_since: Option<Instant> = None;
    let mut next_tick = Instant::now();
    // Bounded: forging lasts FORGE_MS; a forger that never learns enough gives up after 30 s.
    while forging_since.is_none_or(|t| t.elapsed() < Duration::from_millis(FORGE_MS))
        && started.elapsed() < Duration::from_secs(30)
    {
        if let Ok((n, _)) = rnet::recv(&sniffer, &mut buf[..], RecvFlags::empty()) {
            sniff(&buf[..n.min(buf.len())], &mut learned, real.as_ref());
        }
        if Instant::now() < next_tick {
            continue;
        }
        next_tick += Duration::from_millis(1);
        let (Some(cookie), Some(group), Some(max_bid)) = (learned.cookie(), learned.group, learned.max_bid)
        else {
            continue;
        };
        if learned.members.len() < 2 || learned.shapes.is_empty() {
            continue;
        }
        forging_since.get_or_insert_with(Instant::now);
        if first_ns == 0 {
            first_ns = monotonic_ns();
        }
        let members: Vec<(u32, SocketAddrV4)> = learned.members.iter().map(|(r, a)| (*r, *a)).collect();
        let mut totals: Vec<u32> = learned.shapes.iter().map(|s| s.total).collect();
        totals.sort_unstable();
        totals.dedup();
        for bid in (max_bid + 1..=max_bid + AHEAD).flat_map(|b| [b; BURST]) {
            let (rank, spoofed) = members[rng.below(members.len())];
            // A message length seen, then one of its fragments.
            let total = totals[rng.below(totals.len())];
            let shapes: Vec<Shape> = learned.shapes.iter().filter(|s| s.total == total).copied().collect();
            let shape = shapes[rng.below(shapes.len())];
            // Multicast from the claimed root to the group: every member but the spoofed one
            // hears it (a host drops datagrams claiming its own address).
            let frame = forge(&keys, &mut rng, &noise, cookie, bid, rank, shape, false);
            match if dry {
                Ok(0)
            } else {
                rnet::sendto(&raw, &ipv4_udp(spoofed, group, &frame), SendFlags::empty(), &group)
            } {
                Ok(_) => {
                    mcast_sent += 1;
                    expected_rx += members.len() as u64 - 1;
                }
                Err(_) => send_errors += 1,
            }
            // A repair copy from the claimed member to each other member.
            for &(_, to) in members.iter().filter(|(r, _)| *r != rank) {
                let frame = forge(&keys, &mut rng, &noise, cookie, bid, rank, shape, true);
                match if dry {
                    Ok(0)
                } else {
                    rnet::sendto(&raw, &ipv4_udp(spoofed, to, &frame), SendFlags::empty(), &to)
                } {
                    Ok(_) => {
                        ucast_sent += 1;
                        expected_rx += 1;
                    }
                    Err(_) => send_errors += 1,
                }
            }
        }
        last_ns = monotonic_ns();
    }
    let sniffed: u64 = learned.cookies.values().sum();
    println!(
        "RESULT sniffed={sniffed} cookie={} verified={} members={} max_bid={} shapes={} mcast_sent={mcast_sent} \
         ucast_sent={ucast_sent} expected_rx={expected_rx} send_errors={send_errors} first_ns={first_ns} \
         last_ns={last_ns}",
        learned.cookie().map_or("none".into(), |c| format!("{c:016x}")),
        learned.verified,
        learned.members.len(),
        learned.max_bid.map_or(-1, i64::from),
        learned.shapes.len(),
    );
}

// ------------------------------------------------------------------------------------------
// The harness.

/// Processes started in the lab: killed (engines: SIGTERM first) and reaped on drop, before the
/// lab's namespaces go.
struct Procs {
    programs: Vec<Child>,
    engines: Vec<Child>,
    job: String,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for p in &mut self.programs {
            let _ = p.kill();
            let _ = p.wait();
        }
        for e in &mut self.engines {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(e),
                rustix::process::Signal::TERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for e in &mut self.engines {
            while matches!(e.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = e.kill();
            let _ = e.wait();
        }
        let _ = ringcast_offload::fabric::shm::cleanup(&self.job);
    }
}

/// Output of a finished program: (success, stdout, stderr).
type Out = (bool, String, String);

/// Reads `child`'s stdout and stderr on threads (a program must never block on a full pipe).
fn drain(child: &mut Child) -> (mpsc::Receiver<String>, mpsc::Receiver<String>) {
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        if let Some(mut r) = r {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                let _ = tx.send(s);
            });
        }
        rx
    };
    let out = pipe(child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let err = pipe(child.stderr.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    (out, err)
}

/// What one run saw.
struct Run {
    programs: Vec<Out>,
    forger: String,
    job: String,
    secret: String,
    took: Duration,
}

/// Three engines and workload ranks in a lab, the forger on the lab's fourth node; returns
/// `None` (after printing `SKIP`) where namespaces cannot be made.
fn run(keyed: bool) -> Option<Run> {
    if !rustix::process::geteuid().is_root() {
        println!("SKIP: not root: network namespaces need CAP_SYS_ADMIN");
        return None;
    }
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        println!("SKIP: `ip` (iproute2) is not installed");
        return None;
    }
    let started = Instant::now();
    let lab = match Lab::create(if keyed { "fkey" } else { "forge" }, NODES + 1) {
        Ok(lab) => lab,
        Err(e) if e.contains("ermission") => {
            println!("SKIP: cannot create network namespaces: {e}");
            return None;
        }
        Err(e) => panic!("namespace setup: {e}"),
    };
    let prefix = lab.prefix.clone();
    // The forger's host routes multicast out of its one interface.
    ip(&["-n", &lab.nodes[NODES], "route", "add", "224.0.0.0/4", "dev", "eth0"]).expect("multicast route");
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_ringcast"));
    let job = format!("forge{}-{}", std::process::id(), u8::from(keyed));
    let secret = JobSecret::to_hex(&new_identity().key.0);
    let members =
        (0..NODES).map(|i| SocketAddrV4::new(Lab::ip(i), PORT).to_string()).collect::<Vec<_>>().join(",");
    // What `ringcast run` gives every engine and program (host/cli/src/cluster.rs),
    // more pollers than cores; the multicast algorithm forced.
    let env = |node: usize| {
        vec![
            ("RINGCAST_JOB_SECRET", secret.clone()),
            ("RINGCAST_IDLE_SPINS", "50".to_string()),
            ("RINGCAST_IDLE_YIELDS", "10".to_string()),
            ("RINGCAST_IDLE_SLEEP_US", "20".to_string()),
            ("RINGCAST_FABRIC", "udp".to_string()),
            ("RINGCAST_JOB", job.clone()),
            ("RINGCAST_NODES", NODES.to_string()),
            ("RINGCAST_NODE", node.to_string()),
            ("RINGCAST_PPN", "1".to_string()),
            ("RINGCAST_UDP_MEMBERS", members.clone()),
            ("RINGCAST_ENGINE", format!("{job}-{node}")),
            ("RINGCAST_POLL_MODE", "spin-yield".to_string()),
            ("RINGCAST_RUN_MODE", "daemon".to_string()),
            ("RINGCAST_ALGORITHM", "multicast".to_string()),
            ("RINGCAST_PREPOSTED_SLOTS", SLOTS.to_string()),
            ("RINGCAST_LOG_LEVEL", "0".to_string()),
        ]
    };
    let pid = std::process::id().to_string();
    // In node `i`, through `ringcast child-guard`: it dies with this test process.
    let guarded = |i: usize, signal: &str, args: &[&str]| {
        let mut c = lab.command(i, exe);
        c.args(["child-guard", "--parent", &pid, "--signal", signal, "--"]).arg(exe).args(args);
        c
    };
    let mut procs = Procs { programs: Vec::new(), engines: Vec::new(), job: job.clone() };
    for node in 0..NODES {
        let mut c = guarded(node, "term", &["engine"]);
        c.envs(env(node)).stdin(Stdio::null()).stdout(Stdio::null());
        procs.engines.push(c.spawn().expect("start engine"));
    }

    // The forger, on the bridge; it learns everything else from the traffic.
    let test_exe = std::env::current_exe().expect("test binary");
    let mut forger = lab.command(NODES, &test_exe);
    forger.args(["--exact", "forger_process", "--nocapture", "--test-threads=1"]).env(ROLE, "forger");
    if let Ok(v) = std::env::var(ENV_DRY) {
        forger.env(ENV_DRY, v);
    }
    if keyed {
        forger.env(ENV_KEYED, "1").env("RINGCAST_JOB", &job).env("RINGCAST_JOB_SECRET", &secret);
    }
    let mut forger = forger.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("start forger");
    let (flines_tx, flines) = mpsc::channel::<String>();
    let fout = forger.stdout.take().expect("forger stdout");
    std::thread::spawn(move || {
        for l in BufReader::new(fout).lines().map_while(Result::ok) {
            let _ = flines_tx.send(l);
        }
    });
    procs.programs.push(forger);
    let mut transcript = Vec::new();
    let mut await_line = |prefix: &str, limit: Duration| -> String {
        let deadline = Instant::now() + limit;
        loop {
            match flines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                // libtest prints `test forger_process ... ` before the role's first line.
                Ok(l) if l.contains(prefix) => return l[l.find(prefix).unwrap_or(0)..].to_string(),
                Ok(l) => transcript.push(l),
                Err(e) => panic!("forger: waiting for {prefix}: {e}\n{}", transcript.join("\n")),
            }
        }
    };
    await_line("READY", Duration::from_secs(20));

    // The workload: every rank checks every byte of every broadcast.
    let (count, skew) = (COUNT.to_string(), SKEW_US.to_string());
    let args = ["workload-rank", "--count", &count, "--sizes", SIZES, "--seed", "13", "--skew-us", &skew];
    let mut outputs = Vec::new();
    for node in 0..NODES {
        let mut c = guarded(node, "kill", &args);
        c.envs(env(node))
            .env("RINGCAST_LOCAL_RANK", "0")
            .env("RINGCAST_RANK", node.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("start workload rank");
        outputs.push(drain(&mut child));
        procs.programs.push(child);
    }
    // Wait for every rank (a failed one ends the run: the others are killed).
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut status: Vec<Option<bool>> = vec![None; NODES];
    while status.iter().any(Option::is_none) {
        let failed = status.contains(&Some(false));
        for (i, p) in procs.programs[1..].iter_mut().enumerate() {
            if status[i].is_some() {
                continue;
            }
            status[i] = match p.try_wait() {
                Ok(Some(s)) => Some(s.success()),
                Ok(None) if failed || Instant::now() > deadline => {
                    let _ = p.kill();
                    let _ = p.wait();
                    Some(false)
                }
                Ok(None) => None,
                Err(_) => Some(false),
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let programs: Vec<Out> = outputs
        .into_iter()
        .zip(&status)
        .map(|((out, err), ok)| {
            let get =
                |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
            (ok.unwrap_or(false), get(out), get(err))
        })
        .collect();
    // The forger ends on its own once its forging time is over.
    let forger = await_line("RESULT", Duration::from_secs(40));
    drop(procs);
    drop(lab);
    assert!(Lab::existing(&prefix).is_empty(), "namespaces left: {:?}", Lab::existing(&prefix));
    Some(Run { programs, forger, job, secret, took: started.elapsed() })
}

/// The forger's report, checked: it learned the world communicator's cookie from ≥ 1 frame.
fn check_sniffed(r: &Run) {
    let secret: JobSecret = r.secret.parse().expect("secret");
    let cookie = format!("{:016x}", world_identity(&r.job, &secret).cookie);
    let sniffed: u64 = field(&r.forger, "sniffed").unwrap_or(0);
    assert!(sniffed >= 1, "the forger saw no ringcast frame: {}", r.forger);
    assert_eq!(field::<String>(&r.forger, "cookie"), Some(cookie), "sniffed cookie: {}", r.forger);
    assert!(field::<usize>(&r.forger, "members").unwrap_or(0) >= 2, "members learned: {}", r.forger);
}

#[test]
fn forged_frames_on_the_bridge_are_dropped_and_every_broadcast_is_exact() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = run(false) else { return };
    let all = |p: &[Out]| {
        p.iter().map(|(ok, o, e)| format!("ok={ok}\n{o}\n{e}")).collect::<Vec<_>>().join("\n---\n")
    };
    println!("forger: {}", r.forger);
    for (i, (ok, out, err)) in r.programs.iter().enumerate() {
        assert!(ok, "rank {i} failed: {err}\n{}", all(&r.programs));
        let b = out.lines().filter(|l| l.starts_with("B ")).count();
        assert_eq!(b, COUNT as usize, "rank {i}: broadcasts verified\n{out}");
    }
    check_sniffed(&r);
    assert_eq!(field::<usize>(&r.forger, "members"), Some(NODES), "members learned: {}", r.forger);
    // The forgeries overlapped the broadcasts: the last broadcast completed after the last forgery.
    let last_done = r
        .programs
        .iter()
        .flat_map(|(_, o, _)| o.lines().filter(|l| l.starts_with("B ")))
        .filter_map(|l| l.split_whitespace().nth(5)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let (first, last): (u64, u64) =
        (field(&r.forger, "first_ns").unwrap_or(0), field(&r.forger, "last_ns").unwrap_or(0));
    assert!(
        first > 0 && last < last_done,
        "forging [{first}, {last}] ns, last broadcast done at {last_done} ns"
    );
    // N syncs overrun crc_drops other_drops repair_frames, one line per engine.
    let drops: Vec<(u64, u64, u64)> = r
        .programs
        .iter()
        .filter_map(|(_, o, _)| o.lines().find(|l| l.starts_with("N ")))
        .map(|l| {
            let f: Vec<u64> = l.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
            (f[1], f[2], f[3])
        })
        .collect();
    assert_eq!(drops.len(), NODES, "every engine's counters");
    let other: u64 = drops.iter().map(|d| d.2).sum();
    let expected: u64 = field(&r.forger, "expected_rx").unwrap_or(0);
    println!(
        "forged datagrams received by engines (expected) {expected}, dropped {other} \
         (per engine overrun/crc/other {drops:?}); {} broadcasts verified at each of {NODES} ranks; {:?}",
        COUNT, r.took
    );
    // Genuine frames are hardly ever dropped here (`SLOTS`: a run without forgeries drops
    // < 1 % of this); a forger that sends nothing (`RINGCAST_FORGE_TEST_DRY=1`) fails this.
    assert!(
        other * 4 >= expected * 3,
        "engines dropped {other} frames of {expected} forged ones sent to them: the forgeries did not reach them"
    );
}

#[test]
fn a_forger_holding_the_key_breaks_the_broadcast() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = run(true) else { return };
    println!("forger: {}", r.forger);
    check_sniffed(&r);
    assert!(field::<u64>(&r.forger, "verified").unwrap_or(0) >= 1, "genuine frames verified: {}", r.forger);
    let failures: Vec<String> = r
        .programs
        .iter()
        .enumerate()
        .filter(|(_, (ok, _, _))| !ok)
        .map(|(i, (_, _, err))| format!("rank {i}: {}", err.trim()))
        .collect();
    println!("with the key: {failures:#?} ({:?})", r.took);
    assert!(
        !failures.is_empty(),
        "a forger holding the key got nothing through: the test without it would prove nothing"
    );
}
