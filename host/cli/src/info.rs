//! `ringcast info`: the tunables table, the broadcast algorithm the cost model chooses with
//! them, how the collectives beyond broadcast are composed and exchanged between the node
//! leaders, and optionally a running engine's counters.
use ringcast_host::Config;
use ringcast_proto::comm::Layout;
use ringcast_proto::config::AllgatherParts;
use ringcast_proto::model::compose;
use ringcast_proto::model::select::Selector;
use std::process::ExitCode;

/// Prints every tunable (default, current, meaning, variable), the algorithm decision table for
/// one rank per node on one site (the layout `ringcast info` can know nothing better about) and,
/// with `engine`, its counters.
pub fn run(config: &Config, engine: Option<&str>) -> ExitCode {
    println!("ringcast {} (ABI version {})", env!("CARGO_PKG_VERSION"), ringcast_abi::ABI_VERSION);
    println!();
    let rows = config.describe();
    let w_name = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(7);
    let w_def = rows.iter().map(|r| r.default.len()).max().unwrap_or(0).max(7);
    let w_cur = rows.iter().map(|r| r.current.len()).max().unwrap_or(0).max(7);
    println!(
        "{:w_name$}  {:w_def$}  {:w_cur$}   meaning [environment variable]",
        "tunable", "default", "current"
    );
    for r in &rows {
        let mark = if r.default != r.current { '*' } else { ' ' };
        println!(
            "{:w_name$}  {:w_def$}  {:w_cur$}{mark}  {} [{}]",
            r.name, r.default, r.current, r.meaning, r.env
        );
    }
    println!("\n* = set by the environment");
    println!();
    print!("{}", Selector::from_config(&config.engine()).table(&Layout::FLAT));
    print!("{}", compositions(config.engine().protocol.allgather_parts));
    print!("{}", compose::table(&config.engine()));
    if std::env::var_os("RINGCAST_MODEL_ENGINE_CPUS").is_none() {
        let cpus = crate::cluster::engine_cpus();
        println!(
            "(ringcast run and ringcast bench start every engine on this machine and set model.engine_cpus = {cpus}: RINGCAST_MODEL_ENGINE_CPUS={cpus} ringcast info shows their choices)"
        );
    }
    if let Some(name) = engine {
        // As an observer: no local rank taken from a job starting beside it.
        match crate::stats::attach(name, config).map_err(|e| e.to_string()).and_then(|mut h| h.stats().map_err(|e| e.to_string())) {
            Ok(s) => println!(
                "\nengine {name:?}: {} hosts attached (this query included), {} lost, {} descriptors ok, {} failed, {} dropped in flight",
                s.hosts_attached, s.hosts_lost, s.completed_ok, s.completed_err, s.dropped_in_flight
            ),
            Err(e) => {
                eprintln!("ringcast info: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// How the engine composes each collective beyond broadcast from its broadcasts, with the
/// configured `protocol.allgather_parts`; each part's broadcast algorithm is then the table
/// above's for its length.
fn compositions(parts: AllgatherParts) -> String {
    use std::fmt::Write as _;
    let leader = parts.leader_based();
    let way = match leader {
        true => "leader-based: one part per engine, rooted at its first rank",
        false => "per rank: one part per rank",
    };
    let mut t = format!("\ncollectives (protocol.allgather_parts = {parts}):\n");
    let reduction = match leader {
        true => "the node's result, reduced by its engine from its ranks' contributions; then exchanged between the leaders (below)",
        false => "the rank's contribution; then the parts reduced in rank order",
    };
    let allgather = match leader {
        true => "the engine's ranks' blocks side by side, exchanged between the leaders (below)",
        false => "the rank's block",
    };
    let alltoall = match leader {
        true => "where the exchange below is multicast: the engine's ranks' whole send buffers side by side (aggregated per node while the node parts go eagerly, else per rank)",
        false => "the rank's whole send buffer (the multicast alltoall)",
    };
    let rows = [
        ("ALLREDUCE, REDUCE", way, reduction),
        ("ALLGATHER", way, allgather),
        ("ALLTOALL", way, alltoall),
        (
            "BARRIER",
            "the synchronization tree",
            "no bytes: an epoch cut short once every local process arrived, over at its SYNC_DOWN",
        ),
    ];
    for (what, how, carries) in rows {
        let _ = writeln!(t, "  {what:18} {how:60} {carries}");
    }
    t.push_str("  (leader-based only where every engine's ranks are consecutive in the communicator; else per rank)\n");
    t
}

/// The tunables page of the docs, generated from the same declarations the engine runs on.
pub fn markdown() -> ExitCode {
    println!("# Tunables\n");
    println!("Every engine limit and knob belongs to one section, named before the dot: `limits`,");
    println!("`protocol`, `model` and `topology` (what the state machine runs on, `ringcast-proto`),");
    println!("`fault` (the injector around every fabric), `runner` (the polling loop and control sockets)");
    println!("and one per fabric (`udp`, `dpdk`, `verbs`). Each section is declared once with its defaults,");
    println!("meanings and environment variables and checks its own values; `ringcast_offload::Config`");
    println!("(`offload/engine/src/config/`) composes them and alone reads the `RINGCAST_*` variables.");
    println!("`ringcast info` prints this table with the values in force, marking those set by the");
    println!("environment; the engine daemon, the polling thread and the host library read the same");
    println!("variables. Values are checked at start (`Config::validate`): a bad value is an error naming");
    println!("the variable, never a silent default. Capacities are fixed when an engine starts: its tables");
    println!("and buffers are sized from these values once and never grow.\n");
    println!(
        "Regenerate with `ringcast info --markdown > docs/tunables.md` (a test checks it is current).\n"
    );
    println!("| tunable | variable | default | meaning |");
    println!("|---|---|---|---|");
    for r in Config::default().describe() {
        println!("| `{}` | `{}` | `{}` | {} |", r.name, r.env, r.default, r.meaning);
    }
    ExitCode::SUCCESS
}
