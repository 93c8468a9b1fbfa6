//! A local emulated cluster: `nodes` engines (one per emulated node) on one fabric, and `ppn`
//! program processes per node attached to their node's engine; used by `ringcast run`,
//! `ringcast bench` and `ringcast demo`.
//!
//! Daemon mode starts one `ringcast engine` process per node. Thread mode lets each node's
//! local rank 0 start the node's engine as a polling thread and the node's other processes
//! attach to it ([`host_from_env`]). Every process gets its node, local rank and the node count
//! in `RINGCAST_NODE` / `RINGCAST_LOCAL_RANK` / `RINGCAST_NODES` / `RINGCAST_PPN`, its world
//! rank in `RINGCAST_RANK`, and the job and fabric in `RINGCAST_JOB` / `RINGCAST_FABRIC`; the
//! engines derive the world communicator from the job.
//!
//! The `udp` fabric runs on loopback (IPv4, one port per node), or with `netns` across one
//! network namespace per node joined by a Linux bridge ([`ringcast_host::netns`]): engines and programs
//! of node `i` run inside namespace `i`.
//!
//! DPU mode (`--mode dpu`) puts node `i`'s engine in namespace `i` and its programs in namespace
//! `nodes + i` of one lab: programs attach over TCP (`RINGCAST_ENGINE=tcp://…`, proving the job
//! secret), the engines serve `cma` only, and the `udp` fabric's members are the engines'
//! addresses on the bridge.
//!
//! Teardown always runs: programs that outlive a failed sibling are killed (unless
//! `keep_going`), engines are stopped (SIGTERM, then SIGKILL), the job's shared-memory segments
//! are unlinked and the namespaces deleted, so nothing is left behind, even after a crash.
//!
//! When the launcher itself dies without its teardown (SIGKILL, or any signal that kills it),
//! nothing of its job outlives it. Its children die with it: every child is started through
//! `ringcast child-guard` ([`guard_exec`]), which arms the parent-death signal
//! (`PR_SET_PDEATHSIG`) and then execs the engine or program — SIGTERM for engines, so they
//! stop cleanly and, the last one out, remove the job's segments; SIGKILL for programs. The
//! kernel sends it when the *thread* that forked the child exits, so [`Cluster::start`] must
//! be called from a thread that outlives the cluster (the CLI calls it from its main thread).
//! What engine threads killed with their programs leave in `/dev/shm` goes with the reapers
//! their `shm` fabrics start (`ringcast_ring::Reaper`). The namespaces of `--netns` and
//! `--mode dpu` go with the launcher's namespace reaper ([`crate::ns_reaper`]), started before
//! the first namespace is made; a launcher killed together with its reaper leaves them to the
//! next launcher's [`ringcast_host::netns::reclaim_stale`], as it leaves any segment a reaper
//! missed to [`ringcast_offload::fabric::shm::reclaim_stale`].
use crate::ns_reaper::NsReaper;
use ringcast_host::netns::Lab;
use ringcast_host::{Config, Host};
use ringcast_offload::config::NodeRanks;
use ringcast_offload::fabric::shm::{cleanup, reclaim_stale};
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The signal a guarded child gets when its launcher dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeathSignal {
    /// SIGTERM: engines, which then stop cleanly.
    Term,
    /// SIGKILL: programs.
    Kill,
}

/// `ringcast child-guard --parent PID --signal S -- PROGRAM ARGS...`: arms the parent-death
/// signal `signal`, checks that the launcher `parent` is still this process's parent (if it
/// died before the signal was armed, nothing would ever come), and execs `PROGRAM` in place —
/// same pid, environment and descriptors; the setting survives `execve`.
pub fn guard_exec(parent: u32, signal: DeathSignal, command: &[OsString]) -> ExitCode {
    let Some((program, args)) = command.split_first() else { return ExitCode::from(2) };
    let sig = match signal {
        DeathSignal::Term => rustix::process::Signal::TERM,
        DeathSignal::Kill => rustix::process::Signal::KILL,
    };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(sig)) {
        eprintln!("ringcast child-guard: PR_SET_PDEATHSIG: {e}");
        return ExitCode::FAILURE;
    }
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent) {
        // The launcher is already gone: do not start an orphan.
        return ExitCode::FAILURE;
    }
    let e = Command::new(program).args(args).exec();
    eprintln!("ringcast child-guard: {}: {e}", program.to_string_lossy());
    ExitCode::from(127)
}

/// `cmd` started through [`guard_exec`]: same program, arguments and environment.
fn guarded(exe: &std::path::Path, signal: &str, cmd: Command) -> Command {
    let mut g = Command::new(exe);
    g.args(["child-guard", "--parent", &std::process::id().to_string(), "--signal", signal, "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => g.env(k, v),
            None => g.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        g.current_dir(dir);
    }
    g
}

/// How engines run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `ringcast engine` daemon process per node (DPU emulation).
    Daemon,
    /// Each program runs its node's engine as a pinned polling thread.
    Thread,
    /// The BlueField contract: one daemon per node in a network namespace of its own (the
    /// "DPU"), its programs in another, reaching it only over TCP with the job's secret; the
    /// engine reaches their memory only by DMA (`RINGCAST_DMA=cma`); the `udp` fabric runs on
    /// the bridge between the DPUs (`shm` works too). Needs root (namespaces).
    Dpu,
}

/// The TCP port a DPU-mode engine listens on for its programs.
const DPU_CONTROL_PORT: u16 = 7471;

/// Environment variable telling a program how to reach its engine.
pub const MODE_ENV: &str = "RINGCAST_RUN_MODE";

/// How long a program waits for its node's engine to listen.
const ENGINE_WAIT: Duration = Duration::from_secs(30);

/// The host a program of a `ringcast run` cluster uses: its node's daemon, or in thread mode
/// the engine thread local rank 0 starts (the others attach to it), configured from the
/// environment.
pub fn host_from_env() -> Result<Host, String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let starts_engine = std::env::var(MODE_ENV).as_deref() == Ok("thread")
        && config.topology.local_rank == ringcast_offload::config::LocalRank::Fixed(0);
    if starts_engine {
        Host::spawn_named(config).map_err(|e| e.to_string())
    } else {
        Host::attach_wait(&config.runner.engine_name, ENGINE_WAIT).map_err(|e| e.to_string())
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Emulated nodes (engines).
    pub nodes: u32,
    /// Program processes per node.
    pub ppn: u32,
    /// An uneven world: program processes on each node (overrides `nodes` and `ppn`; empty:
    /// `ppn` on each of `nodes`).
    pub node_ranks: Vec<u32>,
    /// How engines run.
    pub mode: Mode,
    /// `shm` or `udp`.
    pub fabric: String,
    /// `udp` only: one network namespace per node on a bridge instead of loopback.
    pub netns: bool,
    /// Do not kill the other programs when one fails (they must end on their own).
    pub keep_going: bool,
}

impl Spec {
    /// Program processes on node `node`.
    pub fn count(&self, node: u32) -> u32 {
        self.node_ranks.get(node as usize).copied().unwrap_or(if self.node_ranks.is_empty() {
            self.ppn
        } else {
            0
        })
    }

    /// Node `node`'s first world rank (ranks are numbered node by node).
    pub fn start(&self, node: u32) -> u32 {
        (0..node).map(|n| self.count(n)).sum()
    }

    /// Program processes in all.
    pub fn world_size(&self) -> u32 {
        self.start(self.nodes)
    }
}

/// A job being run.
pub struct Cluster {
    /// Job name (engines, segments).
    pub job: String,
    keep_going: bool,
    engines: Vec<Child>,
    programs: Vec<Child>,
    /// Readers of the programs' captured stdout (index = world rank).
    readers: Vec<Option<std::thread::JoinHandle<String>>>,
    /// Forwarders of the programs' stderr, each returning the last line (index = world rank).
    err_readers: Vec<Option<std::thread::JoinHandle<Option<String>>>>,
    /// Node of each program (index = world rank).
    rank_nodes: Vec<u32>,
    /// When the job started, and when each engine was seen ending (daemon modes).
    started: Instant,
    engine_ends: Vec<Option<(ExitStatus, Duration)>>,
    /// Engines this process can attach to as an observer (daemons outside namespaces).
    observable: bool,
    // Dropped last: processes inside the namespaces are gone by then.
    netns: Option<Lab>,
    /// Dismissed after the lab is deleted (declared after it, so dropped after it); deletes
    /// the lab if this process dies without dropping it (`ns_reaper`).
    _ns_reaper: Option<NsReaper>,
}

/// `n` distinct free UDP ports on loopback (bound together, then released).
fn free_ports(n: u32) -> Result<Vec<u16>, String> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("finding free ports: {e}"))?;
    socks.iter().map(|s| s.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

impl Cluster {
    /// Starts the engines (daemon mode) and `program` (`"self"`: this executable) `ppn` times
    /// per node with `args` and `extra` environment. With `capture`, the programs' stdout is
    /// piped and returned by [`Cluster::wait`] (index = world rank; read once the program
    /// exits, so keep it short).
    pub fn start(
        spec: &Spec,
        program: &str,
        args: &[String],
        extra: &[(String, String)],
        capture: bool,
    ) -> Result<Cluster, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let job = format!("run-{}", std::process::id());
        // What killed jobs before this one left (their launchers are gone, nobody maps it).
        let _ = reclaim_stale();
        let udp = spec.fabric == "udp";
        let dpu = spec.mode == Mode::Dpu;
        if spec.netns && !udp {
            return Err("--netns needs --fabric udp".into());
        }
        if (spec.netns && spec.nodes > 200) || (dpu && spec.nodes > 100) {
            return Err("--netns supports up to 200 nodes, --mode dpu up to 100".into());
        }
        // Namespaces are made only once a reaper watches for this process's death.
        let ns_reaper = if dpu || spec.netns {
            let _ = ringcast_host::netns::reclaim_stale();
            Some(NsReaper::spawn()?)
        } else {
            None
        };
        let netns = if dpu {
            Some(Lab::create("dpu", 2 * spec.nodes as usize)?)
        } else if spec.netns {
            Some(Lab::create("run", spec.nodes as usize)?)
        } else {
            None
        };
        let members: Vec<SocketAddr> = match &netns {
            _ if !udp => Vec::new(),
            Some(_) => (0..spec.nodes).map(|i| SocketAddr::new(Lab::ip(i as usize).into(), 7470)).collect(),
            None => free_ports(spec.nodes)?
                .into_iter()
                .map(|p| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), p))
                .collect(),
        };
        let members = members.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
        let mut c = Cluster {
            job: job.clone(),
            keep_going: spec.keep_going,
            engines: Vec::new(),
            programs: Vec::new(),
            readers: Vec::new(),
            err_readers: Vec::new(),
            rank_nodes: Vec::new(),
            started: Instant::now(),
            engine_ends: Vec::new(),
            observable: spec.mode == Mode::Daemon && netns.is_none(),
            netns,
            _ns_reaper: ns_reaper,
        };
        // More pollers (engines and programs) than cores: back off to sleeping after a few empty
        // passes, or the process a poller waits for never gets the CPU it spins on. Daemons
        // that each have a CPU (they claim distinct ones) are the exception for `ringcast
        // bench`: each of its ranks is pinned to its engine's CPU (`host_pin`) and the two take
        // turns there by sched_yield — the rank yields 50 times, then sleeps on its doorbell;
        // the engine yields long before it sleeps. Waking a sleeper on another CPU of this VM costs ~40 µs a hop:
        // measured (2 nodes, 2 B back to back) 55 → 11 µs, the program's CPU at 1 MiB 1.4 →
        // 3.4 % of the broadcast (docs/performance.md).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let pollers = spec.world_size() + spec.nodes * u32::from(spec.mode != Mode::Thread);
        // Only for the benchmark's own ranks (`program == "self"`: one thread each — the pin is
        // inherited by every thread a program starts after attaching), one per node (with
        // more, they would crowd one CPU while others idle), and not in namespaces (CPU claims
        // are per network namespace: every engine would claim the same CPU).
        let paired = spec.mode == Mode::Daemon
            && pollers > cpus
            && spec.nodes <= cpus
            && spec.world_size() == spec.nodes
            && !spec.netns
            && program == "self";
        // `paired` is for daemons beside their programs; a DPU is across the boundary.
        let idle = |spins: u32, yields: u32, sleep_us: u32| {
            [
                ("RINGCAST_IDLE_SPINS", spins.to_string()),
                ("RINGCAST_IDLE_YIELDS", yields.to_string()),
                ("RINGCAST_IDLE_SLEEP_US", sleep_us.to_string()),
            ]
        };
        let (engine_idle, program_idle) = if paired {
            (idle(0, 200_000, 50), idle(0, 50, 20))
        } else if pollers > cpus {
            (idle(50, 10, 20), idle(50, 10, 20))
        } else {
            (idle(2000, 20000, 50), idle(2000, 20000, 50))
        };
        // Thread mode with a CPU per engine (engine threads claim distinct CPUs): each rank's
        // host thread, which drives its engine's loop while it waits, is bound to that engine's
        // CPU, as Open MPI binds rank i to core i. Unbound, the scheduler put both ranks'
        // pollers on one CPU beside a busy process on the other, and each 2 B broadcast waited
        // for a turn on it (issue 40, item 4; docs/performance.md). Same conditions as `paired`.
        let bound = spec.mode == Mode::Thread
            && pollers <= cpus
            && spec.world_size() == spec.nodes
            && !spec.netns
            && program == "self";
        let host_pin = ("RINGCAST_HOST_PIN", (paired || bound).to_string());
        // The job's secret keys the world communicator's frames (docs/protocol.md): drawn here
        // from the CSPRNG unless the caller set one, handed to every engine and program.
        let secret =
            std::env::var("RINGCAST_JOB_SECRET").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| {
                ringcast_offload::config::JobSecret::to_hex(&ringcast_offload::entropy::new_identity().key.0)
            });
        let engine_cpus = engine_cpus();
        let env = |node: u32| {
            vec![
                ("RINGCAST_JOB_SECRET", secret.clone()),
                // Every engine runs on this machine: the cost model prices the exchanges
                // between them on its CPUs (`model/exchange.rs`).
                ("RINGCAST_MODEL_ENGINE_CPUS", engine_cpus.to_string()),
                ("RINGCAST_FABRIC", spec.fabric.clone()),
                ("RINGCAST_JOB", job.clone()),
                ("RINGCAST_NODES", spec.nodes.to_string()),
                ("RINGCAST_NODE", node.to_string()),
                ("RINGCAST_PPN", if spec.node_ranks.is_empty() { spec.ppn } else { 1 }.to_string()),
                ("RINGCAST_NODE_RANKS", NodeRanks(spec.node_ranks.clone()).to_string()),
                ("RINGCAST_UDP_MEMBERS", members.clone()),
                ("RINGCAST_ENGINE", format!("{job}-{node}")),
                ("RINGCAST_POLL_MODE", "spin-yield".to_string()),
                (
                    MODE_ENV,
                    match spec.mode {
                        Mode::Thread => "thread",
                        Mode::Daemon => "daemon",
                        Mode::Dpu => "dpu",
                    }
                    .to_string(),
                ),
            ]
        };
        // DPU mode: the engine's side of the boundary, and where its programs reach it.
        let dpu_engine = |node: u32| {
            let ip = Lab::ip(node as usize);
            vec![
                ("RINGCAST_LISTEN_TCP", format!("{ip}:{DPU_CONTROL_PORT}")),
                ("RINGCAST_DMA", "cma".to_string()),
                // CPU claims are per network namespace: every DPU would claim the same CPU.
                ("RINGCAST_PIN_CPU", "none".to_string()),
            ]
        };
        let dpu_program = |node: u32| {
            let ip = Lab::ip(node as usize);
            vec![
                ("RINGCAST_ENGINE", format!("tcp://{ip}:{DPU_CONTROL_PORT}")),
                ("RINGCAST_DMA", "cma".to_string()),
            ]
        };
        // Programs of node `i` live in namespace `i`, or `nodes + i` beside a DPU.
        let program_ns = |node: u32| if dpu { spec.nodes + node } else { node };
        let in_node = |c: &Cluster, node: u32, cmd: Command| match &c.netns {
            Some(ns) => ns.wrap(node as usize, cmd),
            None => cmd,
        };
        if spec.mode != Mode::Thread {
            for node in 0..spec.nodes {
                let mut cmd = Command::new(&exe);
                cmd.args(["engine"])
                    .envs(env(node))
                    .envs(if dpu { dpu_engine(node) } else { Vec::new() })
                    .envs(engine_idle.clone())
                    .envs(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                let child = guarded(&exe, "term", in_node(&c, node, cmd))
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("starting engine {node}: {e}"))?;
                c.engines.push(child);
            }
        }
        for node in 0..spec.nodes {
            for local in 0..spec.count(node) {
                let mut cmd = if program == "self" { Command::new(&exe) } else { Command::new(program) };
                cmd.args(args)
                    .envs(env(node))
                    .envs(program_idle.clone())
                    .envs([host_pin.clone()])
                    .env("RINGCAST_LOCAL_RANK", local.to_string())
                    .env("RINGCAST_RANK", (spec.start(node) + local).to_string())
                    .envs(if dpu { dpu_program(node) } else { Vec::new() })
                    .envs(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                let child = guarded(&exe, "kill", in_node(&c, program_ns(node), cmd))
                    .stdin(Stdio::null())
                    .stdout(if capture { Stdio::piped() } else { Stdio::inherit() })
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("starting program {local} on node {node}: {e}"))?;
                c.programs.push(child);
                c.rank_nodes.push(node);
            }
        }
        c.engine_ends = c.engines.iter().map(|_| None).collect();
        // Every program's stderr goes on to ours as it comes, line by line; the last line is
        // kept for the failure summary (a rank's typed error).
        for p in &mut c.programs {
            c.err_readers.push(p.stderr.take().map(|e| {
                std::thread::spawn(move || {
                    use std::io::{BufRead, Write};
                    // Bytes as they come (a line that is not UTF-8 is forwarded as it is: the
                    // pipe stays read to its end, so the program never gets SIGPIPE).
                    let mut last = None;
                    let mut reader = std::io::BufReader::new(e);
                    let mut line = Vec::new();
                    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                        let _ = std::io::stderr().lock().write_all(&line);
                        let text = String::from_utf8_lossy(&line).trim().to_string();
                        if !text.is_empty() {
                            last = Some(text);
                        }
                        line.clear();
                    }
                    last
                })
            }));
        }
        // Captured output is drained as it comes: a program must never block on a full pipe.
        for p in &mut c.programs {
            c.readers.push(p.stdout.take().map(|mut o| {
                std::thread::spawn(move || {
                    let mut text = String::new();
                    let _ = std::io::Read::read_to_string(&mut o, &mut text);
                    text
                })
            }));
        }
        Ok(c)
    }

    /// Waits for every program (at most `limit`); returns each one's status and stdout. A
    /// program still running at the limit, or after a sibling failed, is killed.
    pub fn wait(&mut self, limit: Duration) -> Vec<(Option<ExitStatus>, String)> {
        self.wait_ended(limit).into_iter().map(|r| (r.status, r.stdout)).collect()
    }

    /// [`Cluster::wait`], with when each program ended and its last line on stderr; engines
    /// that end meanwhile are noted too (for [`Cluster::outcome`]).
    pub fn wait_ended(&mut self, limit: Duration) -> Vec<RankEnd> {
        let deadline = Instant::now() + limit;
        let mut outs: Vec<Option<RankEnd>> = self.programs.iter().map(|_| None).collect();
        let mut failed = false;
        while outs.iter().any(Option::is_none) {
            for (i, p) in self.programs.iter_mut().enumerate() {
                if outs[i].is_some() {
                    continue;
                }
                let status = match p.try_wait() {
                    Ok(Some(s)) => Some(s),
                    Ok(None) if (failed && !self.keep_going) || Instant::now() > deadline => {
                        let _ = p.kill();
                        let _ = p.wait();
                        None // killed: counts as a failure
                    }
                    Ok(None) => continue,
                    Err(_) => None,
                };
                let at = self.started.elapsed();
                failed |= !status.is_some_and(|s| s.success());
                let stdout = self.readers[i].take().and_then(|r| r.join().ok()).unwrap_or_default();
                // A child of the program may hold its stderr open past its exit: wait a little
                // for the last line, never for the child.
                let said = self.err_readers.get_mut(i).and_then(Option::take).and_then(|r| {
                    let until = Instant::now() + Duration::from_millis(500);
                    while !r.is_finished() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    r.is_finished().then(|| r.join().ok()).flatten().flatten()
                });
                outs[i] = Some(RankEnd { status, stdout, at, said });
            }
            self.note_engine_ends();
            std::thread::sleep(Duration::from_millis(2));
        }
        outs.into_iter().flatten().collect()
    }

    /// Records the engines that ended since the last look.
    fn note_engine_ends(&mut self) {
        let at = self.started.elapsed();
        for (e, end) in self.engines.iter_mut().zip(self.engine_ends.iter_mut()) {
            if end.is_none() {
                if let Ok(Some(s)) = e.try_wait() {
                    *end = Some((s, at));
                }
            }
        }
    }

    /// The job's end as [`crate::outcome::Outcome`]: every rank (from `ranks`, what
    /// [`Cluster::wait_ended`] returned), every engine (daemon modes), and the counters of the
    /// engines still running (read as an observer; daemons outside namespaces only).
    pub fn outcome(&mut self, ranks: &[RankEnd]) -> crate::outcome::Outcome {
        use crate::outcome::{End, Ended, Outcome};
        self.note_engine_ends();
        let ranks = ranks
            .iter()
            .enumerate()
            .map(|(r, e)| Ended {
                who: format!("rank {r} (node {})", self.rank_nodes.get(r).copied().unwrap_or(0)),
                end: End::of(e.status),
                at: Some(e.at),
                said: e.said.clone(),
            })
            .collect();
        let engines = self
            .engine_ends
            .iter()
            .enumerate()
            .map(|(n, end)| Ended {
                who: format!("engine {n} ({}-{n})", self.job),
                end: end.map_or(End::Running, |(s, _)| End::of(Some(s))),
                at: end.map(|(_, at)| at),
                said: None,
            })
            .collect();
        let config = Config::from_env().unwrap_or_default();
        let counters = (0..self.engines.len())
            .filter(|&n| self.observable && self.engine_ends[n].is_none())
            .filter_map(|n| {
                let name = format!("{}-{n}", self.job);
                let mut host = crate::stats::attach(&name, &config).ok()?;
                Some((name, host.counters().ok()?))
            })
            .collect();
        Outcome { ranks, engines, counters }
    }
}

/// How one program of a job ended.
#[derive(Debug)]
pub struct RankEnd {
    /// `None`: killed by the launcher.
    pub status: Option<ExitStatus>,
    /// Its captured stdout (empty unless captured).
    pub stdout: String,
    /// Since the job started, when the launcher saw it end.
    pub at: Duration,
    /// Its last line on stderr.
    pub said: Option<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.programs {
            if matches!(p.try_wait(), Ok(None)) {
                let _ = p.kill();
                let _ = p.wait();
            }
        }
        for e in &mut self.engines {
            let pid = rustix::process::Pid::from_child(e);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for e in &mut self.engines {
            while matches!(e.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if matches!(e.try_wait(), Ok(None)) {
                let _ = e.kill();
                let _ = e.wait();
            }
        }
        let _ = cleanup(&self.job);
    }
}

/// The CPUs a job's engines share when they all run on this machine (`model.engine_cpus`): the
/// caller's `RINGCAST_MODEL_ENGINE_CPUS` if set, else this machine's CPU count.
pub fn engine_cpus() -> u32 {
    std::env::var("RINGCAST_MODEL_ENGINE_CPUS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
}
