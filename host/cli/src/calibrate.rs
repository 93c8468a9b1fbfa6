//! `ringcast calibrate`: measures the LogGP parameters of a real fabric on this machine (the
//! simulator fidelity work of docs/design.md §6) and writes them as a `ringcast sim` scenario
//! (`fixtures/calibration/<fabric>.toml`), so the simulator and the cost model can be run with
//! what the fabric really costs.
//!
//! Two members of the fabric, each on its own thread:
//! * `o_s`: time per `send` call in a burst (the sender's per-datagram cost);
//! * `o_r`: time per datagram inside `poll` when datagrams are waiting (the receiver's cost);
//! * `L`: half a small-datagram round trip, minus `o_s + o_r`;
//! * `g`: the receiver's inter-arrival time in a stream of small datagrams;
//! * `G`: the extra time per byte in a stream of full-MTU datagrams over the small stream.
//!
//! The round trip is a median; the streams are one run each. The machine has 2 cores, so the two
//! members can share a core with other work, and every figure is an upper bound of the fabric's
//! own cost. On loopback the kernel delivers a datagram inside the sender's system call, so the
//! trip shows up in `o_send` and `L` comes out near 0; the stream rate is bounded by the
//! per-datagram cost, not by bytes, so `G` is near 0 too. Both are what this fabric costs here.
use crate::fidelity::Measured;
use clap::{Args, ValueEnum};
use ringcast_offload::fabric::shm::{cleanup, ShmFabric};
use ringcast_offload::fabric::udp::{Interface, UdpFabric, UdpOptions};
use ringcast_offload::fabric::{faulty, Fabric};
use ringcast_offload::Config;
use ringcast_proto::comm::ident::IpFamily;
use ringcast_proto::comm::PeerId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Fabrics that can be calibrated here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// Kernel UDP over loopback.
    Udp,
    /// The shared-memory emulation NIC.
    Shm,
}

/// `ringcast calibrate` options.
#[derive(Args)]
pub struct CalibrateArgs {
    /// Fabric to measure.
    #[arg(long, value_enum, default_value_t = Which::Udp)]
    fabric: Which,
    /// Round trips / stream datagrams per repetition.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// Write the scenario here (default: fixtures/calibration/<fabric>.toml); `-` prints only.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Then compare the simulator's predictions with broadcasts measured on a local cluster of
    /// this fabric at 2, 4 and 8 nodes (writes fixtures/calibration/<fabric>-fidelity.csv).
    #[arg(long)]
    compare: bool,
}

const SMALL: usize = 64;
const DEADLINE: Duration = Duration::from_secs(20);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Polls until one datagram arrives (or the deadline); returns its length.
fn recv_one(f: &mut dyn Fabric, until: Instant) -> Option<usize> {
    let mut got = None;
    while got.is_none() && Instant::now() < until {
        f.poll(1, &mut |_, d| got = Some(d.len()));
    }
    got
}

/// The echo member: answers every datagram of the ping phase, then counts the streams and
/// reports (per stream) the time from its first to its last datagram and what `poll` cost.
fn echo(mut f: Member, count: usize, report: mpsc::Sender<(f64, f64, f64)>) {
    let until = Instant::now() + DEADLINE;
    let peer = PeerId(0);
    let mut buf = vec![0u8; f.mtu()];
    for _ in 0..count {
        let mut len = None;
        while len.is_none() && Instant::now() < until {
            f.poll(1, &mut |_, d| {
                buf[..d.len()].copy_from_slice(d);
                len = Some(d.len());
            });
        }
        let Some(n) = len else { return };
        f.send(peer, &buf[..n]);
    }
    // Two streams: small, then full-size datagrams. Each ends with a 1-byte marker.
    for _ in 0..2 {
        let (mut first, mut last, mut n, mut in_poll) = (None, Instant::now(), 0usize, Duration::ZERO);
        let mut done = false;
        while !done && Instant::now() < until {
            let t = Instant::now();
            let k = f.poll(64, &mut |_, d| {
                if d.len() == 1 {
                    done = true;
                } else {
                    n += 1;
                }
            });
            if k > 0 {
                in_poll += t.elapsed();
                last = Instant::now();
                first.get_or_insert(t);
            }
        }
        let span = first.map_or(0.0, |f| (last - f).as_nanos() as f64);
        let _ = report.send((span / n.max(1) as f64, in_poll.as_nanos() as f64 / n.max(1) as f64, n as f64));
        f.send(peer, &[0]);
    }
}

/// Measures `a` (member 0) against `b` (member 1).
pub fn measure(mut a: Member, b: Member, count: usize) -> Option<Measured> {
    let (tx, rx) = mpsc::channel();
    let echo = std::thread::spawn(move || echo(b, count, tx));
    let until = Instant::now() + DEADLINE;
    let peer = PeerId(1);
    let small = vec![0x5au8; SMALL];
    // Ping-pong.
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        a.send(peer, &small);
        recv_one(a.as_mut(), until)?;
        rtts.push(t.elapsed().as_nanos() as f64);
    }
    // Streams: the send cost per call, the receiver's gap and poll cost.
    let big = vec![0xa5u8; a.mtu()];
    let mut per = Vec::new();
    let mut o_send = Vec::new();
    // Streams shorter than the smallest receive queue (the shm fabric's rings hold 256), so the
    // end marker is never the datagram a full queue drops.
    let stream = count.min(200);
    for frame in [&small[..], &big[..]] {
        let t = Instant::now();
        for _ in 0..stream {
            a.send(peer, frame);
        }
        o_send.push(t.elapsed().as_nanos() as f64 / stream as f64);
        a.send(peer, &[0]);
        let (gap, o_recv, n) = rx.recv_timeout(DEADLINE).ok()?;
        recv_one(a.as_mut(), until)?;
        per.push((gap, o_recv, n));
    }
    let _ = echo.join();
    let rtt = median(rtts);
    let (o_s, o_r) = (o_send[0], per[0].1);
    let gap = per[0].0;
    let bytes = (big.len() - SMALL) as f64;
    Some(Measured {
        o_send: o_s,
        o_recv: o_r,
        latency: (rtt / 2.0 - o_s - o_r).max(0.0),
        gap,
        ns_per_byte: ((per[1].0 - per[0].0) / bytes).max(0.0),
        rtt,
    })
}

fn free_port() -> Option<u16> {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).ok()?.local_addr().ok().map(|a| a.port())
}

/// One member of the measured fabric, owned by its thread.
type Member = Box<dyn Fabric + Send>;

fn udp_pair(config: &Config) -> Result<(Member, Member), String> {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let port = |_| free_port().ok_or("no free UDP port on loopback");
    let members: Vec<SocketAddr> =
        (0..2).map(|i| port(i).map(|p| SocketAddr::new(lo, p))).collect::<Result<_, _>>()?;
    let mut opts =
        UdpOptions::new(free_port().ok_or("no free UDP port")?, config.protocol.mtu, config.limits.max_comms);
    opts.family = IpFamily::V4;
    opts.interface = Interface::Name("lo".into());
    let make = |i: u32| {
        UdpFabric::new(PeerId(i), members.clone(), &opts)
            .map(|f| with_faults(Box::new(f), config))
            .map_err(|e| e.to_string())
    };
    Ok((make(0)?, make(1)?))
}

fn shm_pair(job: &str, config: &Config) -> Result<(Member, Member), String> {
    let mtu = (config.protocol.mtu as usize).min(4088);
    let make = |i: u32| ShmFabric::new(job, PeerId(i), 2, mtu).map_err(|e| format!("shm fabric: {e}"));
    let (mut a, mut b) = (make(0)?, make(1)?);
    if !a.connect(PeerId(1)) || !b.connect(PeerId(0)) {
        return Err("shm fabric: members cannot reach each other's rings".into());
    }
    Ok((with_faults(Box::new(a), config), with_faults(Box::new(b), config)))
}

/// `fabric` as the engine runs it: behind the one fault injector when `RINGCAST_FAULT_*` asks
/// for faults (a rehearsal of loss measures the lossy fabric), itself otherwise.
fn with_faults(fabric: Member, config: &Config) -> Member {
    faulty::wrap(fabric, &config.fault, ringcast_offload::entropy::fault_seed())
}

/// The scenario file the measurement becomes.
pub fn scenario(which: &str, m: &Measured) -> String {
    format!(
        "# LogGP parameters of the `{which}` fabric measured on this machine by `ringcast calibrate --fabric {which}`\n\
         # (round trip {rtt:.0} ns; o = mean of send {os:.0} ns and receive {or:.0} ns).\n\
         # Run it as a scenario: the simulator's predicted broadcast latency on this fabric.\n\
         name = \"calibrated-{which}\"\n\
         title = \"Broadcast on the measured {which} fabric\"\n\n\
         [fabric]\nlanes = 1\nswitch_ns = 0\n\
         [fabric.intra_site]\nlatency_ns = {l:.0}\noverhead_ns = {o:.0}\ngap_ns = {g:.0}\nns_per_byte = {gb:.4}\n\n\
         [sweep]\nalgorithms = [\"multicast\", \"binomial\"]\nranks = [2, 4, 8]\nbytes = [2, 1048576]\nbroadcasts = 8\n",
        rtt = m.rtt,
        os = m.o_send,
        or = m.o_recv,
        l = m.latency,
        o = (m.o_send + m.o_recv) / 2.0,
        g = m.gap,
        gb = m.ns_per_byte,
    )
}

/// Runs the calibration.
pub fn run(a: CalibrateArgs, config: &Config) -> ExitCode {
    let name = match a.fabric {
        Which::Udp => "udp",
        Which::Shm => "shm",
    };
    let job = format!("calibrate-{}", std::process::id());
    let pair = match a.fabric {
        Which::Udp => udp_pair(config),
        Which::Shm => shm_pair(&job, config),
    };
    let (x, y) = match pair {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ringcast calibrate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let m = measure(x, y, a.count.max(10));
    // The sleeping round trip (engines that share cores sleep between datagrams), on a fresh
    // pair: only `--compare` needs it.
    let wake_rtt = match a.compare {
        true => {
            let pair = match a.fabric {
                Which::Udp => udp_pair(config),
                Which::Shm => shm_pair(&format!("{job}-w"), config),
            };
            pair.ok().and_then(|(x, y)| crate::fidelity::sleeping_rtt(x, y, 200))
        }
        false => None,
    };
    if a.fabric == Which::Shm {
        // Nothing of either job is left in /dev/shm.
        let _ = cleanup(&job);
        let _ = cleanup(&format!("{job}-w"));
    }
    let Some(m) = m else {
        eprintln!("ringcast calibrate: the {name} fabric lost the measurement traffic (no answer within {DEADLINE:?})");
        return ExitCode::FAILURE;
    };
    println!(
        "{name}: round trip {:.0} ns, o_send {:.0} ns, o_recv {:.0} ns, L {:.0} ns, g {:.0} ns, G {:.4} ns/B",
        m.rtt, m.o_send, m.o_recv, m.latency, m.gap, m.ns_per_byte
    );
    let text = scenario(name, &m);
    let out = a.out.unwrap_or_else(|| PathBuf::from(format!("fixtures/calibration/{name}.toml")));
    if out.as_os_str() == "-" {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("ringcast calibrate: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("wrote {}", out.display());
    if !a.compare {
        return ExitCode::SUCCESS;
    }
    let Some(wake_rtt) = wake_rtt else {
        eprintln!("ringcast calibrate: the sleeping round trip on {name} got no answer");
        return ExitCode::FAILURE;
    };
    match crate::fidelity::compare(name, &m, wake_rtt) {
        Ok(csv) => {
            let path = out.with_file_name(format!("{name}-fidelity.csv"));
            match std::fs::write(&path, csv) {
                Ok(()) => {
                    println!("wrote {}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ringcast calibrate: {}: {e}", path.display());
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("ringcast calibrate: compare: {e}");
            ExitCode::FAILURE
        }
    }
}
