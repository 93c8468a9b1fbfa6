//! `ringcast stats`: every counter of running engines — what `ibstat` or `ucx_info` users reach
//! for first when something is slow.
//!
//! It attaches to each engine as an observer (`RINGCAST_LOCAL_RANK=none`: no rank taken from a
//! job, no ring used) and reads the whole counter table (`COUNTERS`,
//! `shared-abi/src/counters.rs`): hosts and descriptors, collectives with their multicast and
//! repair fragments (the multicast hit rate), the fabric's datagrams and overruns, frame drops
//! by reason, repairs, synchronization epochs, communicators and groups — and per communicator
//! (`COMM_LIST`): its ranks and engines, broadcasts posted, epochs synchronized, and whether it
//! is broken, closed, settling or failed over from multicast. Engines are named with
//! `--engine` (a local name, or `tcp://host:port` for one on a DPU) or found with `--all`: every
//! engine listening on this machine (their abstract control sockets, `@ringcast.NAME` in
//! `/proc/net/unix`). `--watch SECS` prints every SECS seconds with the rate of each total over
//! the interval; `--json` one JSON document per reading; `--prometheus` the text exposition
//! format (`ringcast_<counter>{engine="NAME"}`), for node_exporter's textfile collector; and
//! `--serve ADDR` answers a Prometheus server's `GET /metrics` itself, reading the engines
//! afresh per scrape (`serve.rs`: concurrent connections, each with its own deadlines;
//! `prometheus.rs`: the format). Every reading attaches again to an engine that came back or was
//! restarted under its name, and keeps waiting on one that was stopped (`engines.rs`). An
//! engine that is gone, or refuses, is named with the reason; a one-shot reading fails (exit 1)
//! when any engine could not be read. With `--all --watch`, an engine that exited between two
//! readings (no longer listening) is dropped from the table, not counted as a failure.
mod engines;
mod prometheus;
mod serve;

use clap::Args;
use engines::Watched;
use ringcast_abi::counters::{CounterKind, ALL};
use ringcast_host::{CommInfo, Config, Host};
use std::process::ExitCode;
use std::time::Duration;

/// Attaches to engine `name` as an observer (no local rank), with the configuration's
/// `ctl_timeout_ms` (`ringcast info`, `ringcast run`'s summary).
pub fn attach(name: &str, config: &Config) -> Result<Host, String> {
    engines::attach(name, config, None)
}

/// `ringcast stats` options.
#[derive(Args)]
pub struct StatsArgs {
    /// An engine to read (repeatable): its name, or tcp://HOST:PORT (default: RINGCAST_ENGINE,
    /// else "default").
    #[arg(long)]
    engine: Vec<String>,
    /// Every engine running on this machine.
    #[arg(long, conflicts_with = "engine")]
    all: bool,
    /// Read again every SECS seconds, with rates over the interval.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// Readings in watch mode before stopping (default: until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// JSON, one document per reading.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// The Prometheus text exposition format.
    #[arg(long)]
    prometheus: bool,
    /// Serve the Prometheus format over HTTP at ADDR: PORT (on 127.0.0.1) or IP:PORT (port 0:
    /// any, printed first; no ADDR: 127.0.0.1:9464; a wildcard address is warned about),
    /// reading the engines afresh for every request, side by side and each connection with its
    /// own deadlines; with --count N, stop after N.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "", conflicts_with_all = ["json", "watch"])]
    serve: Option<String>,
    /// Limit on each control request to an engine, in seconds (default: RINGCAST_CTL_TIMEOUT_MS);
    /// an engine that does not answer in time reads as down for that reading.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
}

/// The names of the engines listening on this machine, sorted: their abstract control sockets
/// `@ringcast.NAME` (the CPU-claim sockets `ringcast.cpu.N` are not engines).
pub fn local_engines() -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut names: Vec<String> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix("@ringcast."))
        .filter(|name| !name.starts_with("cpu."))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `ringcast stats`.
pub fn run(a: StatsArgs, config: &Config) -> ExitCode {
    let names = if a.all {
        let found = local_engines();
        if found.is_empty() && a.serve.is_none() {
            eprintln!("ringcast stats: no engine is running on this machine");
            return ExitCode::FAILURE;
        }
        found
    } else if a.engine.is_empty() {
        vec![config.runner.engine_name.clone()]
    } else {
        a.engine.clone()
    };
    let mut engines: Vec<Watched> = names.into_iter().map(Watched::new).collect();
    let timeout =
        a.timeout.filter(|t| t.is_finite() && *t > 0.0).map(|t| Duration::from_secs_f64(t.min(3600.0)));
    if let Some(spec) = &a.serve {
        let addr = match serve::bind_address(spec) {
            Ok(addr) => addr,
            Err(e) => {
                eprintln!("ringcast stats --serve: {e}");
                return ExitCode::from(2);
            }
        };
        let collector = serve::Collector { engines, all: a.all, config: config.clone(), timeout };
        return match serve::serve(addr, a.count.unwrap_or(u64::MAX), collector) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ringcast stats --serve {addr}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let readings = if a.watch.is_some() { a.count.unwrap_or(u64::MAX) } else { 1 };
    let secs = a.watch.filter(|w| w.is_finite()).unwrap_or(1.0).clamp(0.01, 86_400.0);
    let interval = Duration::from_secs_f64(secs);
    for k in 0..readings {
        if k > 0 {
            std::thread::sleep(interval);
            if a.all {
                engines::rediscover(&mut engines, &local_engines());
            }
        }
        engines::read_all(&mut engines, config, timeout);
        if a.all {
            engines::forget_departed(&mut engines, &local_engines());
        }
        print(&a, &engines, k);
        // Once: nothing more to show when nothing answered.
        if a.watch.is_none() && engines.iter().all(|e| e.error.is_some()) {
            break;
        }
    }
    if engines.iter().any(|e| e.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Per-second rate of each total between the previous reading and the last one.
fn rates(e: &Watched) -> Option<Vec<Option<f64>>> {
    let ((t1, v1), (t0, v0)) = (e.last.as_ref()?, e.prev.as_ref()?);
    let dt = t1.duration_since(*t0).as_secs_f64().max(1e-9);
    Some(
        ALL.iter()
            .zip(v1.iter().zip(v0))
            .map(|(c, (b, a))| (c.kind == CounterKind::Total).then(|| b.saturating_sub(*a) as f64 / dt))
            .collect(),
    )
}

/// A communicator's state in words.
fn comm_state(c: &CommInfo) -> String {
    let words: Vec<&str> = [
        (c.broken, "broken"),
        (c.closing, "closed"),
        (c.freeing, "freed, settling"),
        (c.failed_over, "multicast failed over"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, w)| *w)
    .collect();
    if words.is_empty() {
        "open".to_string()
    } else {
        words.join(", ")
    }
}

fn comm_json(c: &CommInfo) -> serde_json::Value {
    serde_json::json!({
        "handle": c.handle,
        "ranks": c.ranks,
        "engines": c.engines,
        "local_members": c.local_members,
        "broadcasts": c.posted,
        "sync_epochs": c.synced_epochs,
        "broken": c.broken,
        "closed": c.closing,
        "freeing": c.freeing,
        "multicast_failed_over": c.failed_over,
    })
}

/// The multicast hit rate over everything the engine received: multicast fragments over all.
fn hit_rate(v: &[u64]) -> Option<f64> {
    let at = |n| ringcast_abi::counters::index_of(n).and_then(|i| v.get(i).copied()).unwrap_or(0);
    let (m, r) = (at("fragments_multicast_total"), at("fragments_repair_total"));
    (m + r > 0).then(|| m as f64 / (m + r) as f64)
}

/// The per-byte ledger per side (`send`, `receive`): payload copies, MAC and CRC passes per
/// delivered byte (`None` for a side that delivered nothing yet).
fn per_byte(v: &[u64]) -> [(&'static str, Option<[f64; 3]>); 2] {
    let at = |n: String| ringcast_abi::counters::index_of(&n).and_then(|i| v.get(i).copied()).unwrap_or(0);
    ["send", "receive"].map(|side| {
        let d = at(format!("ledger_{side}_delivered_bytes_total"));
        let r = |what: &str| at(format!("ledger_{side}_{what}_bytes_total")) as f64 / d as f64;
        (side, (d > 0).then(|| [r("copied"), r("hashed"), r("crc")]))
    })
}

fn print(a: &StatsArgs, engines: &[Watched], reading: u64) {
    if a.prometheus {
        print!("{}", prometheus::render(engines));
        return;
    }
    if a.json {
        let list: Vec<serde_json::Value> = engines
            .iter()
            .map(|e| {
                let mut doc = serde_json::json!({ "engine": e.name, "pid": e.pid });
                match (&e.error, &e.last) {
                    (Some(err), _) => doc["error"] = serde_json::json!(err),
                    (None, Some((_, v))) => {
                        let counters: serde_json::Map<String, serde_json::Value> = ALL
                            .iter()
                            .zip(v)
                            .map(|(c, v)| (c.name.to_string(), serde_json::json!(v)))
                            .collect();
                        doc["counters"] = serde_json::Value::Object(counters);
                        doc["multicast_hit_rate"] = serde_json::json!(hit_rate(v));
                        for (side, p) in per_byte(v) {
                            doc[format!("{side}_per_delivered_byte")] = serde_json::json!(
                                p.map(|[c, h, k]| serde_json::json!({ "copies": c, "mac": h, "crc": k }))
                            );
                        }
                        doc["communicators"] = e.comms.iter().map(comm_json).collect();
                        if let Some(r) = rates(e) {
                            let per_sec: serde_json::Map<String, serde_json::Value> = ALL
                                .iter()
                                .zip(r)
                                .filter_map(|(c, r)| Some((c.name.to_string(), serde_json::json!(r?))))
                                .collect();
                            doc["per_second"] = serde_json::Value::Object(per_sec);
                        }
                    }
                    (None, None) => {}
                }
                doc
            })
            .collect();
        println!("{}", serde_json::json!({ "reading": reading, "engines": list }));
        return;
    }
    for e in engines {
        if let Some(err) = &e.error {
            println!("engine {:?}: {err}", e.name);
            continue;
        }
        let Some((_, v)) = &e.last else { continue };
        let r = rates(e);
        println!(
            "engine {:?} (pid {}){}",
            e.name,
            e.pid,
            if r.is_some() { ", rates per second" } else { "" }
        );
        for (i, c) in ALL.iter().enumerate() {
            let value = v.get(i).copied().unwrap_or(0);
            let rate = r.as_ref().and_then(|r| r.get(i).copied().flatten());
            let rate = rate.map_or(String::new(), |x| format!("{x:>12.1}/s"));
            println!("  {:<32}{value:>16}{rate:>14}  {}", c.name, c.help);
        }
        match hit_rate(v) {
            Some(h) => println!(
                "  {:<32}{:>15.1}%  fragments received by multicast, of all received",
                "multicast_hit_rate",
                h * 100.0
            ),
            None => println!("  {:<32}{:>16}  no fragment received yet", "multicast_hit_rate", "-"),
        }
        for (side, p) in per_byte(v) {
            let name = format!("{side}_per_delivered_byte");
            match p {
                Some([c, h, k]) => println!(
                    "  {name:<32}{c:>16.3}  payload copies ({h:.3} MAC passes, {k:.3} CRC passes) per byte delivered on the {side} side"
                ),
                None => println!("  {name:<32}{:>16}  nothing delivered on the {side} side yet", "-"),
            }
        }
        println!(
            "  {:<20}{:>8}{:>9}{:>7}{:>12}{:>9}  state",
            "communicator", "ranks", "engines", "here", "broadcasts", "epochs"
        );
        for c in &e.comms {
            let handle = if c.handle == 0 { "world".to_string() } else { format!("{:#x}", c.handle) };
            println!(
                "  {handle:<20}{:>8}{:>9}{:>7}{:>12}{:>9}  {}",
                c.ranks,
                c.engines,
                c.local_members,
                c.posted,
                c.synced_epochs,
                comm_state(c)
            );
        }
    }
}
