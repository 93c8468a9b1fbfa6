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
//! afresh per scrape. An engine that is gone, or refuses, is named with the reason and the
//! command fails (exit 1) once nothing is left to show.
use clap::Args;
use ringcast_abi::counters::{CounterKind, ALL};
use ringcast_host::{AttachOptions, CommInfo, Config, Host};
use ringcast_offload::config::LocalRank;
use std::process::ExitCode;
use std::time::{Duration, Instant};

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
    /// Serve the Prometheus format over HTTP at ADDR (e.g. 127.0.0.1:9464; port 0: any, printed
    /// first), reading the engines afresh for every request; with --count N, stop after N.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["json", "watch"])]
    serve: Option<String>,
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

/// One engine being read.
struct Watched {
    name: String,
    host: Option<Host>,
    pid: u32,
    /// The last reading and when, and the one before (watch mode's rates).
    last: Option<(Instant, Vec<u64>)>,
    /// Its communicators at the last reading.
    comms: Vec<CommInfo>,
    prev: Option<(Instant, Vec<u64>)>,
    /// Why it cannot be read (gone, refused).
    error: Option<String>,
}

/// Attaches to engine `name` as an observer (no local rank).
pub fn attach(name: &str, config: &Config) -> Result<Host, String> {
    let mut config = config.clone();
    config.topology.local_rank = LocalRank::None;
    Host::attach_config(name, &config, AttachOptions::default()).map_err(|e| match e {
        ringcast_host::Error::Connect { .. } => format!("not running (nothing listens as {name:?})"),
        e => format!("refused: {e}"),
    })
}

/// `ringcast stats`.
pub fn run(a: StatsArgs, config: &Config) -> ExitCode {
    let names = if a.all {
        let found = local_engines();
        if found.is_empty() {
            eprintln!("ringcast stats: no engine is running on this machine");
            return ExitCode::FAILURE;
        }
        found
    } else if a.engine.is_empty() {
        vec![config.runner.engine_name.clone()]
    } else {
        a.engine.clone()
    };
    let mut engines: Vec<Watched> = names
        .into_iter()
        .map(|name| match attach(&name, config) {
            Ok(h) => Watched {
                pid: h.engine_pid(),
                name,
                host: Some(h),
                last: None,
                prev: None,
                comms: Vec::new(),
                error: None,
            },
            Err(e) => Watched {
                name,
                host: None,
                pid: 0,
                last: None,
                prev: None,
                comms: Vec::new(),
                error: Some(e),
            },
        })
        .collect();
    if let Some(addr) = &a.serve {
        return match serve(addr, a.count.unwrap_or(u64::MAX), &mut engines) {
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
        }
        for e in engines.iter_mut() {
            read(e);
        }
        print(&a, &engines, k);
        if engines.iter().all(|e| e.error.is_some()) {
            break;
        }
    }
    if engines.iter().any(|e| e.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Takes a new reading of `e`, keeping the previous one for rates.
fn read(e: &mut Watched) {
    let Some(host) = e.host.as_mut() else { return };
    match host.counters().and_then(|v| Ok((v, host.comm_list()?))) {
        Ok((v, comms)) => {
            e.prev = e.last.replace((Instant::now(), v));
            e.comms = comms;
        }
        Err(err) => {
            e.error = Some(format!("gone: {err}"));
            e.host = None;
        }
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

/// Answers `requests` HTTP requests at `addr` with the engines' counters in the Prometheus
/// format, read afresh each time (what a Prometheus server scrapes: `GET /metrics`; any other
/// path is 404). One request at a time: a scrape every few seconds needs no more.
fn serve(addr: &str, requests: u64, engines: &mut [Watched]) -> std::io::Result<()> {
    let listener = std::net::TcpListener::bind(addr)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let mut answered = 0;
    while answered < requests {
        // One bad client (gone, silent, malformed) costs its own request, never the server.
        let Ok((stream, _)) = listener.accept() else { continue };
        if answer(&stream, engines).is_ok() {
            answered += 1;
        }
    }
    Ok(())
}

/// Reads one request from `stream` (at most 8 KiB, within 5 s) and answers it.
fn answer(stream: &std::net::TcpStream, engines: &mut [Watched]) -> std::io::Result<()> {
    use std::io::{BufRead, BufReader, Read, Write};
    const LIMIT: u64 = 8 << 10;
    let deadline = Instant::now() + Duration::from_secs(5);
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.take(LIMIT));
    let mut head = Vec::new();
    // Up to the blank line ending the headers (nothing in them matters here).
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line == b"\r\n" || line == b"\n" => break,
            Ok(_) => head.extend_from_slice(&line),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
            }
            Err(e) => return Err(e),
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "request too slow"));
        }
    }
    let request = String::from_utf8_lossy(&head);
    let mut words = request.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = match (method, path) {
        ("GET", "/metrics" | "/") => {
            for e in engines.iter_mut() {
                read(e);
            }
            ("200 OK", prometheus(engines))
        }
        ("GET", _) => ("404 Not Found", "not found: ringcast serves /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// `s` as a Prometheus label value (backslash, quote and newline escaped).
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A per-communicator Prometheus series: its name, help and value.
type PerComm = (&'static str, &'static str, fn(&CommInfo) -> u64);

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

/// Every counter (and the per-communicator series) in the Prometheus text exposition format.
fn prometheus(engines: &[Watched]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (i, c) in ALL.iter().enumerate() {
        let _ = writeln!(out, "# HELP ringcast_{} {}", c.name, c.help);
        let kind = if c.kind == CounterKind::Total { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE ringcast_{} {kind}", c.name);
        for e in engines.iter().filter(|e| e.error.is_none()) {
            if let Some(v) = e.last.as_ref().and_then(|(_, v)| v.get(i)) {
                let _ = writeln!(out, "ringcast_{}{{engine=\"{}\"}} {v}", c.name, label(&e.name));
            }
        }
    }
    let per_comm: [PerComm; 3] = [
        ("comm_broadcasts_total", "broadcast ids posted on the communicator at this engine", |c| {
            u64::from(c.posted)
        }),
        ("comm_sync_epochs_total", "synchronization epochs the communicator completed", |c| {
            u64::from(c.synced_epochs)
        }),
        ("comm_broken", "1 if a member of the communicator was declared unreachable", |c| {
            u64::from(c.broken)
        }),
    ];
    for (name, help, value) in per_comm {
        let _ = writeln!(out, "# HELP ringcast_{name} {help}");
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE ringcast_{name} {kind}");
        for e in engines.iter().filter(|e| e.error.is_none()) {
            for c in &e.comms {
                let engine = label(&e.name);
                let _ = writeln!(
                    out,
                    "ringcast_{name}{{engine=\"{engine}\",comm=\"{:#x}\"}} {}",
                    c.handle,
                    value(c)
                );
            }
        }
    }
    let _ = writeln!(out, "# HELP ringcast_engine_up whether the engine answered");
    let _ = writeln!(out, "# TYPE ringcast_engine_up gauge");
    for e in engines {
        let _ = writeln!(
            out,
            "ringcast_engine_up{{engine=\"{}\"}} {}",
            label(&e.name),
            u8::from(e.error.is_none())
        );
    }
    out
}

fn print(a: &StatsArgs, engines: &[Watched], reading: u64) {
    if a.prometheus {
        print!("{}", prometheus(engines));
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
