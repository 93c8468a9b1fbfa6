//! `ringcast sim`: the real engine core on the LogGP-priced simulated fabric, one scenario or a
//! sweep (algorithms × P × message sizes × loss, optionally × channels × placements).
//!
//! Prints a table (simulated latency beside the cost model's prediction, events per second),
//! writes it as CSV and JSON, and plots latency along the scenario's x axis and, when asked,
//! every rank's completion time at one P (the skew). Scenario files live in `fixtures/sim/`;
//! `docs/reproduction.md` is generated from them with `ringcast sim fixtures/sim/*.toml`.
mod scenario;

use crate::report::plot::Chart;
use crate::report::progress::Progress;
use crate::report::table::Table;
use clap::Args;
use ringcast_proto::comm::Layout;
use ringcast_proto::model::cost;
use ringcast_sim::perf::{run_point, Measured, Point, Setup};
use scenario::{Axis, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;

/// `ringcast sim` options.
#[derive(Args)]
pub struct SimArgs {
    /// Scenario files (TOML); none: one ad-hoc scenario from the defaults and `--set`.
    files: Vec<PathBuf>,
    /// Override a scenario key, TOML value syntax: `--set sweep.ranks=[16,1024]`,
    /// `--set fabric.lanes=2`, `--set engine.channels=8` (repeatable; applies to every file).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Directory for CSV, JSON and plots.
    #[arg(long, default_value = "target/sim")]
    out: PathBuf,
    /// Print the table only (no files).
    #[arg(long)]
    no_files: bool,
}

/// One measured point with the sweep values that made it.
struct Row {
    m: Measured,
    channels: u32,
    layout: Layout,
    layout_idx: usize,
    model_ns: f64,
}

/// Runs every scenario.
pub fn run(a: SimArgs) -> ExitCode {
    let mut inputs: Vec<(String, String)> = Vec::new();
    if a.files.is_empty() {
        inputs.push(("(command line)".into(), String::new()));
    }
    for f in &a.files {
        match std::fs::read_to_string(f) {
            Ok(t) => inputs.push((f.display().to_string(), t)),
            Err(e) => {
                eprintln!("ringcast sim: {}: {e}", f.display());
                return ExitCode::from(2);
            }
        }
    }
    let mut failed = false;
    for (origin, text) in inputs {
        let sc = match scenario::parse(&text, &a.sets) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("ringcast sim: {origin}: {e}");
                return ExitCode::from(2);
            }
        };
        failed |= !run_scenario(&sc, (!a.no_files).then_some(&a.out));
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn layouts_of(sc: &Scenario) -> Vec<Layout> {
    if sc.layouts.is_empty() {
        vec![sc.setup.layout]
    } else {
        sc.layouts.clone()
    }
}

fn channels_of(sc: &Scenario) -> Vec<u32> {
    if sc.channels.is_empty() {
        vec![sc.setup.config.protocol.channels]
    } else {
        sc.channels.clone()
    }
}

/// Runs one scenario; false if any broadcast failed.
fn run_scenario(sc: &Scenario, out: Option<&PathBuf>) -> bool {
    println!("\n== {} ({})", sc.title, sc.name);
    if let Some(c) = &sc.claim {
        println!("   paper: {c}");
    }
    let f = &sc.setup.fabric;
    println!(
        "   fabric: L {} ns, o {} ns, g {} ns, G {} ns/B per lane × {} lanes, switch {} ns; shm L {} ns; WAN L {} ns",
        f.intra_site.latency_ns,
        f.intra_site.overhead_ns,
        f.intra_site.gap_ns,
        f.intra_site.ns_per_byte,
        f.lanes,
        f.switch_ns,
        f.intra_node.latency_ns,
        f.wan.latency_ns
    );
    let (layouts, channels) = (layouts_of(sc), channels_of(sc));
    let total = (sc.algorithms.len()
        * sc.ranks.len()
        * sc.bytes.len()
        * sc.loss.len()
        * layouts.len()
        * channels.len()) as u64;
    let progress = Progress::new(total, &sc.name);
    let mut rows = Vec::new();
    for (li, &layout) in layouts.iter().enumerate() {
        for &ch in &channels {
            let mut setup: Setup = sc.setup.clone();
            setup.layout = layout;
            setup.config.protocol.channels = ch;
            for &alg in &sc.algorithms {
                for &p in &sc.ranks {
                    for &bytes in &sc.bytes {
                        for &loss in &sc.loss {
                            let point = Point { algorithm: alg, ranks: p, bytes, loss };
                            progress
                                .set_message(format!("{} P={p} {bytes} B", alg.map_or("auto", |a| a.name())));
                            let m = run_point(&setup, &point);
                            let payload = setup.config.protocol.mtu - 40;
                            let model_ns = cost::predict(
                                m.algorithm,
                                p,
                                bytes as u64,
                                &layout,
                                &setup.fabric,
                                payload,
                                ch,
                            );
                            rows.push(Row { m, channels: ch, layout, layout_idx: li, model_ns });
                            progress.inc(1);
                        }
                    }
                }
            }
        }
    }
    progress.finish();
    let table = results_table(&rows);
    print!("{}", table.render());
    let spread = sc.per_rank_at.map(|p| spread_table(sc, &rows, p));
    if let Some(t) = &spread {
        println!("   per-rank completion at P = {}:", sc.per_rank_at.unwrap_or(0));
        print!("{}", t.render());
    }
    if let Some(t) = crossover(sc, &rows) {
        print!("{}", t.render());
    }
    if let Some(big) = rows.iter().max_by_key(|r| r.m.point.ranks) {
        let rss = peak_rss_bytes();
        // The process's high-water mark: per rank only where the ranks dominate it.
        let per_rank = if big.m.point.ranks >= 100_000 {
            format!(" ≈ {} bytes per simulated rank", rss / big.m.point.ranks as u64)
        } else {
            String::new()
        };
        println!(
            "   largest run: P = {}, {} events in {:.2} s ({:.2} M events/s); peak RSS of the process {} MiB{per_rank}",
            big.m.point.ranks,
            big.m.events,
            big.m.wall_s,
            big.m.events_per_s() / 1e6,
            rss >> 20,
        );
    }
    if let Some(dir) = out {
        if let Err(e) = write_files(sc, &rows, &table, spread.as_ref(), dir) {
            eprintln!("ringcast sim: writing {}: {e}", dir.display());
            return false;
        }
    }
    let errors: usize = rows.iter().map(|r| r.m.errors).sum();
    if errors > 0 {
        eprintln!("ringcast sim: {errors} broadcasts failed");
    }
    errors == 0
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

fn layout_name(l: &Layout) -> String {
    let place = if l.cyclic { "cyclic" } else { "block" };
    if l.sites > 1 {
        format!("ppn{} {place} {} sites", l.ppn, l.sites)
    } else {
        format!("ppn{} {place}", l.ppn)
    }
}

fn results_table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "algorithm",
        "used",
        "P",
        "bytes",
        "loss",
        "channels",
        "layout",
        "sim_us",
        "model_us",
        "penalty",
        "repair_KiB",
        "errors",
        "events",
        "Mev_per_s",
    ]);
    for r in rows {
        let m = &r.m;
        t.push_row([
            m.point.algorithm.map_or("auto".into(), |a| a.name().to_string()),
            m.algorithm.name().to_string(),
            m.point.ranks.to_string(),
            m.point.bytes.to_string(),
            format!("{}", m.point.loss),
            r.channels.to_string(),
            layout_name(&r.layout),
            us(m.latency_ns),
            us(r.model_ns),
            format!("{:.2}", m.penalty_mean),
            format!("{:.1}", m.repair_bytes as f64 / 1024.0),
            m.errors.to_string(),
            m.events.to_string(),
            format!("{:.2}", m.events_per_s() / 1e6),
        ]);
    }
    t
}

/// The name of a row's series: the swept values other than the x axis.
fn series_name(sc: &Scenario, r: &Row) -> String {
    let mut parts = Vec::new();
    if sc.algorithms.len() > 1 || sc.algorithms[0].is_none() {
        parts.push(r.m.point.algorithm.map_or(format!("auto→{}", r.m.algorithm), |a| a.name().to_string()));
    }
    if sc.x != Axis::Ranks && sc.ranks.len() > 1 {
        parts.push(format!("P={}", r.m.point.ranks));
    }
    if sc.x != Axis::Bytes && sc.bytes.len() > 1 {
        parts.push(format!("{} B", r.m.point.bytes));
    }
    if sc.x != Axis::Loss && sc.loss.len() > 1 {
        parts.push(format!("loss {}%", r.m.point.loss * 100.0));
    }
    if sc.x != Axis::Channels && sc.channels.len() > 1 {
        parts.push(format!("{} ch", r.channels));
    }
    if sc.x != Axis::Layout && sc.layouts.len() > 1 {
        parts.push(layout_name(&r.layout));
    }
    if parts.is_empty() {
        r.m.algorithm.name().to_string()
    } else {
        parts.join(" ")
    }
}

fn x_of(sc: &Scenario, r: &Row) -> f64 {
    match sc.x {
        Axis::Ranks => r.m.point.ranks as f64,
        Axis::Bytes => r.m.point.bytes.max(1) as f64,
        Axis::Loss => r.m.point.loss * 100.0,
        Axis::Channels => r.channels as f64,
        Axis::Layout => r.layout_idx as f64,
    }
}

fn grouped<'a>(sc: &Scenario, rows: &'a [Row]) -> Vec<(String, Vec<&'a Row>)> {
    let mut groups: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows {
        let name = series_name(sc, r);
        match groups.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(r),
            None => groups.push((name, vec![r])),
        }
    }
    groups
}

/// Per series at P: median, earliest, latest completion; the largest deviation from the median
/// and how much earlier the first rank finished than the last (Hoefler's two spread figures).
fn spread_table(sc: &Scenario, rows: &[Row], p: u32) -> Table {
    let mut t = Table::new([
        "series",
        "median_us",
        "first_us",
        "last_us",
        "max_dev_from_median_pct",
        "first_vs_last_pct",
    ]);
    for (name, group) in grouped(sc, rows) {
        for r in group.iter().filter(|r| r.m.point.ranks == p) {
            let (med, lo, hi) = r.m.spread(sc.setup.root);
            let dev = (hi.abs_diff(med)).max(med.abs_diff(lo)) as f64 / med.max(1) as f64 * 100.0;
            let early = (hi - lo) as f64 / hi.max(1) as f64 * 100.0;
            t.push_row([
                name.clone(),
                us(med as f64),
                us(lo as f64),
                us(hi as f64),
                format!("{dev:.1}"),
                format!("{early:.1}"),
            ]);
        }
    }
    t
}

/// For two algorithms swept over P: the smallest P from which the first is faster.
fn crossover(sc: &Scenario, rows: &[Row]) -> Option<Table> {
    if sc.x != Axis::Ranks || sc.algorithms.len() != 2 || sc.ranks.len() < 2 {
        return None;
    }
    let (a, b) = (sc.algorithms[0]?, sc.algorithms[1]?);
    let mut t = Table::new(["bytes", "loss", "faster", "from_P", "saving_at_largest_P_pct"]);
    for &bytes in &sc.bytes {
        for &loss in &sc.loss {
            let at = |alg, p| {
                rows.iter()
                    .find(|r| {
                        r.m.point.algorithm == Some(alg)
                            && r.m.point.ranks == p
                            && r.m.point.bytes == bytes
                            && r.m.point.loss == loss
                    })
                    .map(|r| r.m.latency_ns)
            };
            let from = sc
                .ranks
                .iter()
                .copied()
                .find(|&p| matches!((at(a, p), at(b, p)), (Some(x), Some(y)) if x < y));
            let last = sc.ranks.iter().copied().max().unwrap_or(0);
            let saving = match (at(a, last), at(b, last)) {
                (Some(x), Some(y)) if y > 0.0 => format!("{:.1}", (1.0 - x / y) * 100.0),
                _ => "-".into(),
            };
            t.push_row([
                bytes.to_string(),
                loss.to_string(),
                a.name().to_string(),
                from.map_or("never".into(), |p| p.to_string()),
                saving,
            ]);
        }
    }
    Some(t)
}

fn write_files(
    sc: &Scenario,
    rows: &[Row],
    table: &Table,
    spread: Option<&Table>,
    dir: &PathBuf,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut written = table.write(&dir.join(&sc.name))?;
    if let Some(s) = spread {
        written.extend(s.write(&dir.join(format!("{}-spread", sc.name)))?);
    }
    let (x_label, y_label) = (
        match sc.x {
            Axis::Ranks => "ranks (P)",
            Axis::Bytes => "message bytes",
            Axis::Loss => "multicast loss (%)",
            Axis::Channels => "channels",
            Axis::Layout => "placement (index, see table)",
        },
        "latency (µs)",
    );
    let mut chart = Chart::new(&sc.title, x_label, y_label);
    chart.log_x = sc.log_x;
    chart.log_y = sc.log_y;
    for (name, group) in grouped(sc, rows) {
        let mut pts: Vec<(f64, f64)> = group.iter().map(|r| (x_of(sc, r), r.m.latency_ns / 1000.0)).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.add(name, pts);
    }
    written.extend(chart.write(&dir.join(format!("{}-latency", sc.name)))?);
    if let Some(p) = sc.per_rank_at {
        let mut ranks = Chart::per_rank(
            format!("{}: per-rank completion, P = {p}", sc.name),
            "completion after root post (µs)",
        );
        for (name, group) in grouped(sc, rows) {
            for r in group.iter().filter(|r| r.m.point.ranks == p) {
                let pts =
                    r.m.per_rank_ns.iter().enumerate().map(|(i, &t)| (i as f64, t as f64 / 1000.0)).collect();
                ranks.add(name.clone(), pts);
            }
        }
        written.extend(ranks.write(&dir.join(format!("{}-per-rank", sc.name)))?);
    }
    for w in written {
        println!("   wrote {}", w.display());
    }
    Ok(())
}

/// Peak resident set of this process (Linux `VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()))
        })
        .map_or(0, |kb| kb * 1024)
}
