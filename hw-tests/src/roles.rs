//! What a child process of a test or of the bench does (the `ringcast-hw` tool runs these as
//! subcommands, inside a node's namespace). Each speaks a line protocol: commands on stdin,
//! replies on stdout (`READY`, `BARRIER <name>`, `RESULT k=v ...`, `FAIL <why>`), so the parent
//! can act as a barrier and check results.
//!
//! * [`host`] — a broadcast host attached to its node's engine: `verify` runs a schedule of
//!   broadcasts with sizes from 2 B to 4 MiB and roots rotating over the nodes, filling the root's
//!   buffer with a pattern of `(broadcast, size)` and every other with poison, and checks every
//!   byte at every rank; `bench` times broadcasts (rotating root: one root's post to the next
//!   root's completion; back to back from root 0: osu_bcast's loop) and checks the last one.
//! * [`fabric`] — a fabric member using the fabric directly (no engine): `verify` sends numbered
//!   datagrams (multicast and unicast to every other member) whose bodies derive from their
//!   header, and checks each one received byte for byte — none lost, doubled, misattributed or
//!   damaged — and reports the fabric's counters; `flood` sends multicast datagrams as fast as
//!   the fabric takes them and `sink` counts them (frames per second).
use ringcast_host::{Access, Host, SharedBuf};
use ringcast_offload::config::Config;
use ringcast_offload::fabric::Fabric;
use ringcast_proto::comm::ident::CommIdentity;
use ringcast_proto::comm::{GroupId, PeerId};
use std::collections::HashSet;
use std::io::BufRead;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Reads stdin lines on a thread (a role polls its fabric while waiting for commands).
pub fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Prints `line` and flushes (the parent reads line by line).
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Waits for the command `want` (stdin closing is an error).
fn await_cmd(cmds: &mpsc::Receiver<String>, want: &str) -> Result<(), String> {
    loop {
        match cmds.recv() {
            Ok(l) if l == want => return Ok(()),
            Ok(_) => {}
            Err(_) => return Err(format!("stdin closed while waiting for {want}")),
        }
    }
}

/// `BARRIER name`, then wait for `GO`.
fn barrier(cmds: &mpsc::Receiver<String>, name: &str) -> Result<(), String> {
    say(&format!("BARRIER {name}"));
    await_cmd(cmds, "GO")
}

/// The bytes of broadcast `k` of `len` bytes: xorshift from `(k, len)`, never constant.
pub fn pattern(k: u64, len: usize) -> Vec<u8> {
    let mut x = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Arguments of a broadcast host.
#[derive(Clone, Debug)]
pub struct HostArgs {
    /// Engine to attach to.
    pub engine: String,
    /// This host's node (world rank; one host per node).
    pub node: u32,
    /// Nodes.
    pub nodes: u32,
    /// Message sizes (verify: each in turn; bench: each measured).
    pub sizes: Vec<usize>,
    /// Verify: passes over `sizes` (the first entry). Bench: broadcasts timed per size and
    /// pattern (index = size; the last entry serves the sizes beyond).
    pub counts: Vec<u32>,
}

impl HostArgs {
    /// The count for size number `i`.
    fn count(&self, i: usize) -> u32 {
        self.counts.get(i).or(self.counts.last()).copied().unwrap_or(1).max(1)
    }
}

fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or((got.len() != want.len()).then_some(got.len().min(want.len())))
}

/// The `verify` host: see the module doc. Prints `READY`, waits for `GO`, prints
/// `RESULT broadcasts=N bytes=B bcast_us=T slowest=K:LENB:USus net=...` (time spent in the
/// broadcast calls, the slowest one, the engine's network counters) or fails with the first
/// wrong byte.
pub fn host_verify(a: &HostArgs) -> Result<(), String> {
    let cmds = stdin_lines();
    let mut host = Host::attach_wait(&a.engine, Duration::from_secs(30))
        .map_err(|e| format!("attach {}: {e}", a.engine))?;
    let max = a.sizes.iter().copied().max().unwrap_or(1).max(1);
    let buf = SharedBuf::new(max).map_err(|e| e.to_string())?;
    let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
    say("READY");
    await_cmd(&cmds, "GO")?;
    let mut k = 0u64;
    let mut bytes = 0u64;
    let mut got = vec![0u8; max];
    // (broadcast, size, µs) of the slowest broadcast, and the time spent in broadcasts.
    let mut slowest = (0u64, 0usize, 0u128);
    let mut total_us = 0u128;
    for _ in 0..a.count(0) {
        for &len in &a.sizes {
            let root = (k % u64::from(a.nodes)) as u32;
            let want = pattern(k, len);
            if a.node == root {
                buf.write_at(0, &want).map_err(|e| e.to_string())?;
            } else {
                buf.write_at(0, &vec![0xEE; len]).map_err(|e| e.to_string())?;
            }
            let t = Instant::now();
            host.bcast(0, root, region.at(0), len as u64)
                .map_err(|e| format!("node {} broadcast {k} ({len} B from {root}): {e}", a.node))?;
            let us = t.elapsed().as_micros();
            if us > slowest.2 {
                slowest = (k, len, us);
            }
            total_us += us;
            let got = &mut got[..len];
            buf.read_at(0, got).map_err(|e| e.to_string())?;
            if let Some(at) = first_difference(got, &want) {
                return Err(format!(
                    "node {} broadcast {k} ({len} B from {root}): byte {at} is {:#04x}, want {:#04x}",
                    a.node, got[at], want[at]
                ));
            }
            k += 1;
            bytes += len as u64;
        }
    }
    let net = host.net_stats().map(|s| format!("{s:?}")).unwrap_or_default();
    let (sk, slen, sus) = slowest;
    say(&format!(
        "RESULT broadcasts={k} bytes={bytes} bcast_us={total_us} slowest={sk}:{slen}B:{sus}us net={net}"
    ));
    Ok(())
}

/// The `bench` host: see the module doc. Per size, after a barrier each: `count` broadcasts
/// with a rotating root, `count` from root 0, one checked; prints
/// `RESULT size=S rot_ns=R b2b_ns=B` per size (nanoseconds per broadcast at this rank).
pub fn host_bench(a: &HostArgs) -> Result<(), String> {
    let cmds = stdin_lines();
    let mut host = Host::attach_wait(&a.engine, Duration::from_secs(30))
        .map_err(|e| format!("attach {}: {e}", a.engine))?;
    let max = a.sizes.iter().copied().max().unwrap_or(1).max(1);
    let buf = SharedBuf::new(max).map_err(|e| e.to_string())?;
    let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
    say("READY");
    await_cmd(&cmds, "GO")?;
    let n = u64::from(a.nodes);
    for (i, &len) in a.sizes.iter().enumerate() {
        let count = a.count(i);
        let warm = (count / 10).max(2);
        barrier(&cmds, &format!("warm-{len}"))?;
        for k in 0..u64::from(warm) {
            host.bcast(0, (k % n) as u32, region.at(0), len as u64).map_err(|e| format!("warm-up: {e}"))?;
        }
        barrier(&cmds, &format!("rot-{len}"))?;
        let t = Instant::now();
        for k in 0..u64::from(count) {
            host.bcast(0, (k % n) as u32, region.at(0), len as u64).map_err(|e| format!("rotating: {e}"))?;
        }
        let rot = t.elapsed().as_nanos() / u128::from(count);
        barrier(&cmds, &format!("b2b-{len}"))?;
        let t = Instant::now();
        for _ in 0..count {
            host.bcast(0, 0, region.at(0), len as u64).map_err(|e| format!("back to back: {e}"))?;
        }
        let b2b = t.elapsed().as_nanos() / u128::from(count);
        barrier(&cmds, &format!("check-{len}"))?;
        let want = pattern(u64::from(count), len);
        buf.write_at(0, &if a.node == 0 { want.clone() } else { vec![0xEE; len] })
            .map_err(|e| e.to_string())?;
        host.bcast(0, 0, region.at(0), len as u64).map_err(|e| format!("check: {e}"))?;
        let mut got = vec![0; len];
        buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
        if let Some(at) = first_difference(&got, &want) {
            return Err(format!("node {}: checked broadcast of {len} B wrong at byte {at}", a.node));
        }
        say(&format!("RESULT size={len} rot_ns={rot} b2b_ns={b2b}"));
    }
    Ok(())
}

/// Which fabric a [`fabric`] member uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The DPDK fabric on `vdev`; members by MAC.
    Dpdk,
    /// The kernel UDP fabric on IPv4; members by address.
    Udp,
}

/// Arguments of a fabric member.
#[derive(Clone, Debug)]
pub struct FabricArgs {
    /// Fabric.
    pub kind: Kind,
    /// This member.
    pub node: u32,
    /// The member list (`dpdk_members` or `udp_members` syntax).
    pub members: String,
    /// DPDK: the port's vdev.
    pub vdev: String,
    /// `verify`, `flood` or `sink`.
    pub mode: String,
    /// Datagrams: per destination (verify), or sent (flood/sink).
    pub count: u32,
    /// Datagram length (flood/sink; verify varies it up to this).
    pub len: usize,
    /// Job name (the DPDK file prefix).
    pub job: String,
}

/// The group every fabric member joins.
pub const GROUP: GroupId = *b"ringcast-hw-gp";

/// Kind byte of a multicast test datagram (offset 1, where the fault injector looks).
const MCAST: u8 = 1;
/// Kind byte of a unicast test datagram.
const UNICAST: u8 = 2;
/// Destination byte of a multicast datagram.
const ALL: u8 = 0xff;

/// A test datagram: magic, kind, sender, destination, sequence (u16 LE), body derived from them.
pub fn datagram(kind: u8, from: u8, to: u8, seq: u16, len: usize) -> Vec<u8> {
    let mut d = vec![0xA5, kind, from, to];
    d.extend_from_slice(&seq.to_le_bytes());
    let body = pattern(u64::from(seq) << 24 | u64::from(from) << 8 | u64::from(kind), len.saturating_sub(6));
    d.extend_from_slice(&body);
    d
}

/// `(kind, from, to, seq)` of a datagram that is exactly what [`datagram`] builds.
pub fn parse(d: &[u8]) -> Option<(u8, u8, u8, u16)> {
    let (&[0xA5, kind, from, to, s0, s1], _) = d.split_first_chunk::<6>()? else { return None };
    let seq = u16::from_le_bytes([s0, s1]);
    (datagram(kind, from, to, seq, d.len()) == d).then_some((kind, from, to, seq))
}

/// A member's fabric, by kind (the fabric-specific counters need the concrete type).
pub enum Built {
    /// The DPDK fabric.
    Dpdk(Box<ringcast_offload::fabric::dpdk::DpdkFabric>),
    /// The UDP fabric.
    Udp(Box<ringcast_offload::fabric::udp::UdpFabric>),
}

impl Built {
    /// As a fabric.
    pub fn fabric(&mut self) -> &mut dyn Fabric {
        match self {
            Built::Dpdk(f) => f.as_mut(),
            Built::Udp(f) => f.as_mut(),
        }
    }

    /// Fabric-specific state and counters as `k=v` words.
    pub fn details(&self) -> String {
        match self {
            Built::Dpdk(f) => {
                let s = f.stats();
                let (promisc, allmulti) = f.port_modes();
                let (free, size) = f.pool_usage();
                let names = ["short", "ethertype", "length", "oversize", "notours", "own", "foreign"];
                let rejected: Vec<String> =
                    names.iter().zip(s.rejected).map(|(n, v)| format!("{n}={v}")).collect();
                format!(
                    "mac={} driver={} mode={:?} promisc={promisc} allmulti={allmulti} pool_free={free} pool_size={size} \
                     {} chained={} tx_refused={} tx_nombuf={} tx_full={} filter_errors={} ipackets={} opackets={} imissed={} rx_nombuf={}",
                    f.mac(),
                    f.driver(),
                    f.mcast_mode(),
                    rejected.join(" "),
                    s.chained,
                    s.tx_refused,
                    s.tx_nombuf,
                    s.tx_full,
                    s.filter_errors,
                    s.port.ipackets,
                    s.port.opackets,
                    s.port.imissed,
                    s.port.rx_nombuf
                )
            }
            Built::Udp(f) => {
                let s = f.stats();
                format!(
                    "foreign={} tx_dropped={} tx_errors={} rx_errors={}",
                    s.foreign, s.tx_dropped, s.tx_errors, s.rx_errors
                )
            }
        }
    }

    /// The DPDK runtime directory (None for UDP).
    pub fn runtime_dir(&self) -> Option<std::path::PathBuf> {
        match self {
            Built::Dpdk(f) => f.eal().1.map(std::path::Path::to_path_buf),
            Built::Udp(_) => None,
        }
    }
}

/// Builds the member's fabric from the same `RINGCAST_*` settings an engine would get.
pub fn build(a: &FabricArgs) -> Result<Built, String> {
    let node = a.node.to_string();
    let nodes = a.members.split(',').filter(|m| !m.trim().is_empty()).count().to_string();
    let fabric = match a.kind {
        Kind::Dpdk => "dpdk",
        Kind::Udp => "udp",
    };
    let vars = [
        ("RINGCAST_FABRIC", fabric.to_string()),
        ("RINGCAST_JOB", a.job.clone()),
        ("RINGCAST_NODE", node),
        ("RINGCAST_NODES", nodes),
        ("RINGCAST_DPDK_VDEV", a.vdev.clone()),
        ("RINGCAST_DPDK_MEMBERS", a.members.clone()),
        ("RINGCAST_UDP_MEMBERS", a.members.clone()),
        ("RINGCAST_LOG_LEVEL", "0".to_string()),
    ];
    let config = Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
        .map_err(|e| e.to_string())?;
    match a.kind {
        Kind::Dpdk => {
            let f = ringcast_offload::fabric::dpdk::open(&config.fabric_setup(), &config.dpdk)
                .map_err(|e| e.to_string())?;
            Ok(Built::Dpdk(Box::new(f)))
        }
        Kind::Udp => {
            use ringcast_offload::fabric::udp::{Interface, UdpFabric, UdpOptions};
            use ringcast_proto::comm::ident::IpFamily;
            let members = config.udp.member_addrs().map_err(|e| e.to_string())?;
            let mut opts = UdpOptions::new(7480, config.protocol.mtu, config.limits.max_comms);
            opts.family = IpFamily::V4;
            opts.interface = Interface::Name("eth0".into());
            let f = UdpFabric::new(PeerId(a.node), members, &opts).map_err(|e| e.to_string())?;
            Ok(Built::Udp(Box::new(f)))
        }
    }
}

/// What a `verify` member received.
#[derive(Default)]
struct Inbox {
    seen: HashSet<(u8, u8, u16)>,
    dup: u64,
    bad: u64,
    misaddressed: u64,
}

/// Runs a fabric member; see the module doc and [`FabricArgs`]. Prints `READY <details>`;
/// after `EXIT`, drops the fabric and prints `CLOSED runtime_dir_removed=<bool>`.
pub fn fabric_member(a: &FabricArgs) -> Result<(), String> {
    let cmds = stdin_lines();
    let mut built = build(a)?;
    built.fabric().join(&GROUP).map_err(|e| format!("join: {e}"))?;
    let me = u8::try_from(a.node).map_err(|_| "node above 255")?;
    let members = a.members.split(',').filter(|m| !m.trim().is_empty()).count();
    say(&format!("READY mtu={} {}", built.fabric().mtu(), built.details()));
    match a.mode.as_str() {
        "verify" => member_verify(a, &mut built, &cmds, me, members),
        "flood" => member_flood(a, &mut built, &cmds, me),
        "sink" => member_sink(a, &mut built, &cmds),
        m => Err(format!("unknown mode {m:?}")),
    }?;
    // EXIT: drop the fabric (DPDK: port closed, pool freed, EAL ended) and report.
    let dir = built.runtime_dir();
    drop(built);
    say(&format!("CLOSED runtime_dir_removed={}", dir.is_none_or(|d| !d.exists())));
    Ok(())
}

fn member_verify(
    a: &FabricArgs,
    built: &mut Built,
    cmds: &mpsc::Receiver<String>,
    me: u8,
    members: usize,
) -> Result<(), String> {
    let mut inbox = Inbox::default();
    let record = |inbox: &mut Inbox, from: PeerId, d: &[u8]| match parse(d) {
        Some((kind, f, to, seq)) if u32::from(f) == from.0 => {
            if (kind == MCAST && to != ALL) || (kind == UNICAST && to != me) {
                inbox.misaddressed += 1;
            } else if !inbox.seen.insert((kind, f, seq)) {
                inbox.dup += 1;
            }
        }
        _ => inbox.bad += 1,
    };
    // Senders: every member except a stranger (the last one when `members` > real members is
    // the caller's business: it only sends).
    let others: Vec<u8> = (0..members as u8).filter(|&p| p != me).collect();
    let mut next: u32 = 0;
    let mut sending = false;
    let started = Instant::now();
    loop {
        built.fabric().poll(64, &mut |from, d| record(&mut inbox, from, d));
        match cmds.try_recv() {
            Ok(c) if c == "GO" => sending = true,
            Ok(c) if c == "REPORT" => {
                let c = built.fabric().counters();
                say(&format!(
                    "RESULT unique={} dup={} bad={} misaddressed={} sent={} multicast={} received={} overrun={} refused={} {}",
                    inbox.seen.len(),
                    inbox.dup,
                    inbox.bad,
                    inbox.misaddressed,
                    c.sent,
                    c.multicast,
                    c.received,
                    c.overrun,
                    c.refused,
                    built.details()
                ));
            }
            Ok(c) if c == "LEAVE" => {
                built.fabric().leave(&GROUP);
                say(&format!("LEFT {}", built.details()));
            }
            Ok(c) if c == "EXIT" => return Ok(()),
            Ok(_) => {}
            Err(mpsc::TryRecvError::Empty) => {}
            Err(mpsc::TryRecvError::Disconnected) => return Err("stdin closed".into()),
        }
        if sending && next < a.count {
            // Paced: one multicast and one unicast to each other member, then a flush.
            let seq = next as u16;
            let len = 6 + (next as usize * 37) % a.len.saturating_sub(6).max(1);
            let fabric = built.fabric();
            fabric.multicast(&GROUP, &datagram(MCAST, me, ALL, seq, len));
            for &p in &others {
                fabric.send(PeerId(u32::from(p)), &datagram(UNICAST, me, p, seq, len));
            }
            fabric.flush();
            next += 1;
            if next == a.count {
                say("SENT");
            }
            std::thread::sleep(Duration::from_micros(200));
        } else if started.elapsed() > Duration::from_secs(120) {
            return Err("no EXIT within 120 s".into());
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn member_flood(
    a: &FabricArgs,
    built: &mut Built,
    cmds: &mpsc::Receiver<String>,
    me: u8,
) -> Result<(), String> {
    let frames: Vec<Vec<u8>> = (0..64u16).map(|s| datagram(MCAST, me, ALL, s, a.len)).collect();
    loop {
        match cmds.recv() {
            Ok(c) if c == "GO" => {
                let fabric = built.fabric();
                let t = Instant::now();
                for i in 0..a.count as usize {
                    fabric.multicast(&GROUP, &frames[i % frames.len()]);
                    if i % 32 == 31 {
                        fabric.flush();
                        fabric.poll(64, &mut |_, _| {});
                    }
                }
                fabric.flush();
                let ns = t.elapsed().as_nanos();
                let c = fabric.counters();
                say(&format!(
                    "RESULT sent={} elapsed_ns={ns} multicast={} {}",
                    a.count,
                    c.multicast,
                    built.details()
                ));
            }
            Ok(c) if c == "EXIT" => return Ok(()),
            Ok(_) => {}
            Err(_) => return Err("stdin closed".into()),
        }
    }
}

fn member_sink(a: &FabricArgs, built: &mut Built, cmds: &mpsc::Receiver<String>) -> Result<(), String> {
    loop {
        match cmds.recv() {
            Ok(c) if c == "GO" => {
                let mut got = 0u64;
                let mut first = None;
                let mut last = Instant::now();
                let start = Instant::now();
                let mut bad = 0u64;
                let fabric = built.fabric();
                loop {
                    let n = fabric.poll(64, &mut |from, d| {
                        if from.0 == 0 && d.len() == a.len {
                            got += 1;
                        } else {
                            bad += 1;
                        }
                    });
                    let now = Instant::now();
                    if n > 0 {
                        first.get_or_insert(now);
                        last = now;
                    }
                    let idle = first.is_some() && now.duration_since(last) > Duration::from_millis(500);
                    if got >= u64::from(a.count) || idle || start.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
                let span = first.map_or(0, |f| last.duration_since(f).as_nanos());
                let c = fabric.counters();
                say(&format!(
                    "RESULT received={got} bad={bad} span_ns={span} overrun={} {}",
                    c.overrun,
                    built.details()
                ));
            }
            Ok(c) if c == "EXIT" => return Ok(()),
            Ok(_) => {}
            Err(_) => return Err("stdin closed".into()),
        }
    }
}

/// The value of `key=value` in a reply line, parsed.
pub fn field<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))?.parse().ok()
}

/// Arguments of a communicator-lifecycle host.
#[derive(Clone, Debug)]
pub struct LifecycleArgs {
    /// Engine to attach to.
    pub engine: String,
    /// This host's node (world rank; one host per node).
    pub node: u32,
    /// Nodes.
    pub nodes: u32,
    /// Communicators created and freed, one after the other.
    pub cycles: u32,
    /// Every this many cycles, the communicator carries broadcasts and the parent looks at the
    /// group while it exists (barrier `joined-<cycle>`).
    pub check_every: u32,
    /// Communicators created at the end and never freed (the parent then kills a process).
    pub leak: u32,
    /// Names the communicators' identities (the same at every host).
    pub job: String,
    /// Broadcasts of a synchronization epoch (the engines' `channels`): a checked communicator
    /// carries that many, so the protocol settles it and its engine can drop it at once.
    pub epoch: u32,
}

/// The identity — handle, multicast group, seed — of communicator `i` of `job`, the same at
/// every host without a bootstrap exchange.
pub fn lifecycle_identity(job: &str, i: u32) -> CommIdentity {
    ringcast_proto::comm::ident::derived_identity(&format!("{job} lifecycle communicator {i}"), None)
}

/// How long a host waits for its engine to drop the freed communicators.
const SETTLE: Duration = Duration::from_secs(60);

/// The `lifecycle` host: `READY`, `GO`, then `cycles` times: create communicator `i` (every
/// node a member), and every `check_every` cycles broadcast an epoch on it (the last one
/// checked byte for byte) and pass barrier `joined-<i>`; free it. Then wait until the engine
/// holds only the world (`COMMS`), print `RESULT cycles=N alive=A groups=G created=C
/// dropped=D freeing=F` (the engine's counters after the cycles) and, with `leak`, wait for
/// `GO`, create that many communicators more, pass barrier `leaked`, and wait for `EXIT` (the
/// parent kills this process or its engine first).
pub fn host_lifecycle(a: &LifecycleArgs) -> Result<(), String> {
    let cmds = stdin_lines();
    let mut host = Host::attach_wait(&a.engine, Duration::from_secs(30))
        .map_err(|e| format!("attach {}: {e}", a.engine))?;
    let buf = SharedBuf::new(64).map_err(|e| e.to_string())?;
    let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let members: Vec<u32> = (0..a.nodes).collect();
    say("READY");
    await_cmd(&cmds, "GO")?;
    for i in 0..a.cycles {
        let id = lifecycle_identity(&a.job, i);
        let handle = id.cookie;
        host.comm_create(&id, a.node, &members)
            .map_err(|e| format!("node {} cycle {i}: create: {e}", a.node))?;
        if a.check_every > 0 && i % a.check_every == 0 {
            for k in 0..a.epoch.max(1) {
                let root = k % a.nodes;
                let want = pattern(u64::from(i) << 8 | u64::from(k), 64);
                buf.write_at(0, &if a.node == root { want.clone() } else { vec![0xEE; 64] })
                    .map_err(|e| e.to_string())?;
                host.bcast(handle, root, region.at(0), 64)
                    .map_err(|e| format!("node {} cycle {i}: broadcast {k}: {e}", a.node))?;
                let mut got = [0u8; 64];
                buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
                if got[..] != want[..] {
                    return Err(format!("node {} cycle {i}: broadcast {k} delivered wrong bytes", a.node));
                }
            }
            barrier(&cmds, &format!("joined-{i}"))?;
        }
        host.comm_free(handle).map_err(|e| format!("node {} cycle {i}: free: {e}", a.node))?;
    }
    let deadline = Instant::now() + SETTLE;
    let stats = loop {
        let s = host.comm_stats().map_err(|e| e.to_string())?;
        if s.alive == 1 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    say(&format!(
        "RESULT cycles={} alive={} groups={} created={} dropped={} freeing={}",
        a.cycles, stats.alive, stats.groups, stats.created, stats.dropped, stats.freeing
    ));
    if a.leak > 0 {
        await_cmd(&cmds, "GO")?;
        for j in 0..a.leak {
            let id = lifecycle_identity(&a.job, a.cycles + j);
            host.comm_create(&id, a.node, &members)
                .map_err(|e| format!("node {} leaked communicator {j}: {e}", a.node))?;
        }
        barrier(&cmds, "leaked")?;
    }
    await_cmd(&cmds, "EXIT")
}
