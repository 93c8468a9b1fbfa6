//! `ringcast paper`: the broadcast protocol's claims, reproduced on the simulator with the real
//! protocol core (Hoefler et al.: penalty rounds, latency against P, completion spread; Yu et
//! al.: channels; ours: adaptive root delay, selective repair). Latency-only fabric model:
//! times are in multiples of the link latency (2 µs here); the shapes are the claims.
use clap::Args;
use ringcast_offload::config::AlgorithmChoice;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_sim::experiments as ex;
use std::process::ExitCode;

/// `ringcast paper` options.
#[derive(Args)]
pub struct PaperArgs {
    /// Largest P of the latency sweep (16, 116, 1024 and 16384 by default).
    #[arg(long, default_value_t = 16384)]
    max_p: usize,
    /// Broadcasts per point.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const LATENCY: u64 = 2_000;

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

/// Runs every study and prints its table.
pub fn run(a: PaperArgs) -> ExitCode {
    println!("ringcast paper — link latency {} µs, seed {}\n", LATENCY / 1000, a.seed);

    println!("1. Penalty rounds of a 2-byte broadcast, 50 % multicast loss (Hoefler et al.: 1.0)");
    for p in [16, 116, 1024] {
        println!(
            "   P = {p:5}: mean penalty rounds {:.2}",
            ex::penalty_rounds(p, 0.5, a.trials.max(50), a.seed)
        );
    }

    println!("\n2. 2-byte broadcast latency against P (µs), multicast + ring repair vs binomial tree");
    println!("   {:>6} {:>12} {:>12} {:>12} {:>10}", "P", "mcast 0%", "mcast 50%", "binomial", "penalty");
    let ps: Vec<usize> = [16, 116, 1024, 16384].into_iter().filter(|&p| p <= a.max_p).collect();
    let clean = ex::latency_vs_p(&ps, 0.0, LATENCY, a.trials, a.seed);
    let lossy = ex::latency_vs_p(&ps, 0.5, LATENCY, a.trials, a.seed);
    for (c, l) in clean.iter().zip(&lossy) {
        println!(
            "   {:>6} {:>12} {:>12} {:>12} {:>10.2}",
            c.p,
            us(c.multicast_ns),
            us(l.multicast_ns),
            us(c.binomial_ns),
            l.penalty
        );
    }

    println!("\n3. Per-rank completion at P = 116 (µs after the root's post), 20 % multicast loss");
    let spread = |alg: Algorithm| {
        let cfg = ringcast_sim::experiments::paper_config()
            .with(|cfg| cfg.protocol.algorithm = AlgorithmChoice::Fixed(alg));
        let r = ex::run_sequence(
            116,
            2,
            1,
            0,
            &cfg,
            ex::fabric(LATENCY, 0.2),
            a.seed,
            ex::Pacing::Barrier,
            |_, _, _| 0,
        );
        let mut t: Vec<u64> =
            r.completion[0].iter().enumerate().filter(|(i, _)| *i != 0).map(|(_, &t)| t).collect();
        t.sort_unstable();
        let med = t[t.len() / 2] as f64;
        let dev = t.iter().map(|&x| (x as f64 - med).abs()).sum::<f64>() / t.len() as f64 / med.max(1.0);
        (t[0], med, *t.last().unwrap_or(&0), dev)
    };
    for (name, alg) in [("multicast", Algorithm::Multicast), ("binomial", Algorithm::Binomial)] {
        let (first, med, last, dev) = spread(alg);
        println!(
            "   {name:10} first {:>6} median {:>6} last {:>6}  mean deviation from median {:>5.1} %  first/last {:>5.1} %",
            us(first as f64),
            us(med),
            us(last as f64),
            dev * 100.0,
            first as f64 / last.max(1) as f64 * 100.0
        );
    }

    println!("\n4. Amortised time per 8-byte broadcast, 8 ranks, 1000 broadcasts (Yu et al.: 17.1 → 4.3 µs, 2 → 16 channels)");
    for (c, per, syncs) in ex::channels_sweep(8, &[2, 4, 8, 16], 1000, LATENCY, a.seed) {
        println!("   {c:2} channels: {:>6} µs per broadcast ({syncs} synchronizations)", us(per));
    }

    println!("\n5. Root delay: 32 ranks, 4 KiB, no pre-posted slots; receivers up to 50 µs after the root");
    println!("   (phase 1), then on time (phase 2); µs from the last rank's arrival to the last completion");
    println!("   {:>10} {:>16} {:>16} {:>10}", "mode", "phase 1", "phase 2", "hit rate");
    for (mode, p1, p2, hit) in ex::root_delay_study(32, 200, 50_000, LATENCY, a.seed) {
        println!("   {mode:>10} {:>16} {:>16} {:>9.0} %", us(p1), us(p2), hit * 100.0);
    }

    println!("\n6. Ring repair of a 1 MiB broadcast, 32 ranks, 1 % multicast loss: eager vs selective");
    for (mode, lat, bytes) in ex::repair_modes(32, 1 << 20, 0.01, 10, LATENCY, a.seed) {
        println!(
            "   {mode:10} latency {:>8} µs  repair traffic {:>10.0} KiB per broadcast",
            us(lat),
            bytes / 1024.0
        );
    }
    ExitCode::SUCCESS
}
