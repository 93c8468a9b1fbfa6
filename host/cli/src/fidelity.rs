//! `ringcast calibrate --compare`: the simulator's predictions beside measured broadcasts
//! (docs/design.md §6, simulator fidelity) at 2, 4 and 8 nodes, 2 B and 1 MiB, multicast and binomial.
//!
//! The measurement is `ringcast bench` (engine daemons, one process per node, back-to-back
//! broadcasts from rank 0: time per broadcast). The prediction is the real engine core on the
//! simulated fabric with the same pacing, priced twice:
//! * **spin** — the LogGP parameters `ringcast calibrate` measured with both ends polling;
//! * **wake** — the same, with `L` raised by the one-way cost of waking a sleeping engine,
//!   measured here by a ping-pong whose two ends sleep between datagrams as engines do when
//!   pollers outnumber cores (doorbells on `shm`, naps on `udp`). On a machine with a core per
//!   poller this term is 0 and the two agree.
//!
//! Writes the table to `fixtures/calibration/<fabric>-fidelity.csv`.
use crate::bench::{run_once, BenchArgs, ClusterArgs};
use crate::cluster::Mode;
use ringcast_offload::fabric::Fabric;
use ringcast_offload::Config;
use ringcast_proto::comm::PeerId;
use ringcast_proto::model::{FabricModel, LogGp};
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_sim::experiments::Pacing;
use ringcast_sim::perf::{run_point, Point, Setup};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Measured LogGP parameters, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measured {
    /// Sender cost per datagram.
    pub o_send: f64,
    /// Receiver cost per datagram.
    pub o_recv: f64,
    /// Latency beyond the overheads.
    pub latency: f64,
    /// Inter-arrival time of small datagrams.
    pub gap: f64,
    /// Time per byte.
    pub ns_per_byte: f64,
    /// The round trip the latency came from.
    pub rtt: f64,
}

/// Node counts compared.
const NODES: [u32; 3] = [2, 4, 8];
/// Message sizes compared.
const SIZES: [u64; 2] = [2, 1 << 20];
/// Longest sleep between two polls of the wake-up ping-pong.
const NAP: Duration = Duration::from_micros(20);

/// Polls `f` until a datagram arrives, sleeping between polls the way an idle engine does:
/// on the fabric's doorbell when it has one, else a nap. Returns whether one arrived.
fn recv_sleeping(f: &mut dyn Fabric, until: Instant) -> bool {
    let mut got = false;
    while !got && Instant::now() < until {
        f.poll(1, &mut |_, _| got = true);
        if got {
            break;
        }
        match f.arm() {
            Some(seen) => {
                f.poll(1, &mut |_, _| got = true);
                if !got {
                    if let Some(bell) = f.bell() {
                        ringcast_ring::doorbell::wait(bell, seen, Duration::from_millis(2));
                    }
                }
                f.disarm();
            }
            None => std::thread::sleep(NAP),
        }
    }
    got
}

/// Median round trip between `a` and `b` when both sleep between datagrams, in ns.
pub fn sleeping_rtt(
    mut a: Box<dyn Fabric + Send>,
    mut b: Box<dyn Fabric + Send>,
    count: usize,
) -> Option<f64> {
    let until = Instant::now() + Duration::from_secs(20);
    let echo = std::thread::spawn(move || {
        for _ in 0..count {
            if !recv_sleeping(b.as_mut(), until) {
                return;
            }
            b.send(PeerId(0), &[1; 64]);
        }
    });
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        // Give the echo side time to fall asleep: the trip then includes its wake-up.
        std::thread::sleep(Duration::from_micros(200));
        let t = Instant::now();
        a.send(PeerId(1), &[2; 64]);
        if !recv_sleeping(a.as_mut(), until) {
            return None;
        }
        rtts.push(t.elapsed().as_nanos() as f64);
    }
    let _ = echo.join();
    rtts.sort_by(f64::total_cmp);
    rtts.get(rtts.len() / 2).copied()
}

fn model(m: &Measured, extra_latency: f64) -> FabricModel {
    FabricModel {
        intra_site: LogGp {
            latency_ns: m.latency + extra_latency,
            overhead_ns: (m.o_send + m.o_recv) / 2.0,
            gap_ns: m.gap,
            ns_per_byte: m.ns_per_byte,
        },
        lanes: 1,
        switch_ns: 0.0,
        ..FabricModel::default_cluster()
    }
}

fn predict(fabric: FabricModel, alg: Algorithm, nodes: u32, bytes: u64) -> f64 {
    let config = Config::default().with(|cfg| cfg.limits.max_comms = 1);
    let mut setup = Setup::new(fabric, config.engine());
    setup.pacing = Pacing::Pipelined;
    setup.broadcasts = if bytes > 65536 { 8 } else { 64 };
    let point = Point { algorithm: Some(alg), ranks: nodes, bytes: bytes as u32, loss: 0.0 };
    run_point(&setup, &point).latency_ns / 1000.0
}

/// Runs the comparison for `fabric` (`shm` or `udp`) with the LogGP parameters `m` and the
/// sleeping round trip `wake_rtt`; prints the table and returns it as CSV.
pub fn compare(fabric: &str, m: &Measured, wake_rtt: f64) -> Result<String, String> {
    // One-way wake-up cost beyond what the spinning calibration already counts.
    let wake = (wake_rtt / 2.0 - m.rtt / 2.0).max(0.0);
    println!(
        "{fabric}: round trip {:.1} us polling, {:.1} us sleeping: a wake-up adds {:.1} us per hop",
        m.rtt / 1000.0,
        wake_rtt / 1000.0,
        wake / 1000.0
    );
    let (spin, woken) = (model(m, 0.0), model(m, wake));
    let mut csv = String::from("fabric,nodes,algorithm,bytes,measured_us,spin_model_us,wake_model_us,spin_error_pct,wake_error_pct\n");
    println!(
        "{:>6} {:>10} {:>8} {:>13} {:>13} {:>13} {:>10} {:>10}",
        "nodes", "algorithm", "bytes", "measured us", "spin model", "wake model", "spin err", "wake err"
    );
    for &nodes in &NODES {
        for alg in [Algorithm::Multicast, Algorithm::Binomial] {
            let args = BenchArgs {
                cluster: ClusterArgs {
                    nodes,
                    ppn: 1,
                    node_ranks: Vec::new(),
                    mode: Mode::Daemon,
                    fabric: fabric.to_string(),
                    netns: false,
                },
                collective: crate::bench::Collective::Bcast,
                algorithm: alg.name().to_string(),
                sizes: SIZES.to_vec(),
                iters: 200,
                compare: false,
                barrier: false,
                mpi: Default::default(),
                json: false,
            };
            let measured = run_once(&args, alg.name())?;
            for line in measured {
                let p_spin = predict(spin.clone(), alg, nodes, line.size);
                let p_wake = predict(woken.clone(), alg, nodes, line.size);
                let err = |p: f64| 100.0 * (p - line.avg) / line.avg.max(1e-9);
                println!(
                    "{nodes:>6} {:>10} {:>8} {:>13.1} {:>13.1} {:>13.1} {:>9.0}% {:>9.0}%",
                    alg.name(),
                    line.size,
                    line.avg,
                    p_spin,
                    p_wake,
                    err(p_spin),
                    err(p_wake)
                );
                let _ = writeln!(
                    csv,
                    "{fabric},{nodes},{},{},{:.1},{:.1},{:.1},{:.0},{:.0}",
                    alg.name(),
                    line.size,
                    line.avg,
                    p_spin,
                    p_wake,
                    err(p_spin),
                    err(p_wake)
                );
            }
        }
    }
    Ok(csv)
}
