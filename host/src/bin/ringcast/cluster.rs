//! A local emulated cluster: `nodes` engines (one per emulated node) on one fabric, and one
//! program process per node attached to its engine; used by `ringcast run` and `ringcast
//! bench`.
//!
//! Daemon mode starts one `ringcast engine` process per node. Thread mode lets each program
//! start its node's engine as a polling thread ([`host_from_env`]). Every process gets its node
//! in `RINGCAST_NODE`, and the job, fabric and size in `RINGCAST_JOB` / `RINGCAST_FABRIC` /
//! `RINGCAST_NODES`; the engines derive the world communicator from the job.
//!
//! Teardown always runs: programs that outlive a failed sibling are killed, engines are
//! stopped (SIGTERM, then SIGKILL), and the job's shared-memory segments are unlinked, so
//! nothing is left behind, even after a crash.
use ringcast_host::{Config, Host};
use ringcast_offload::fabric::shm::cleanup;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How engines run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One `ringcast engine` daemon process per node (DPU emulation).
    Daemon,
    /// Each program runs its node's engine as a pinned polling thread.
    Thread,
}

/// Environment variable telling a program how to reach its engine.
pub const MODE_ENV: &str = "RINGCAST_RUN_MODE";

/// The host a program of a `ringcast run` cluster uses: its node's daemon, or an engine thread
/// it starts itself (thread mode), configured from the environment.
pub fn host_from_env() -> Result<Host, String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    if std::env::var(MODE_ENV).as_deref() == Ok("thread") {
        Host::spawn_local(config).map_err(|e| e.to_string())
    } else {
        Host::attach(&config.engine_name).map_err(|e| e.to_string())
    }
}

/// A job being run.
pub struct Cluster {
    /// Job name (engines, segments).
    pub job: String,
    engines: Vec<Child>,
    programs: Vec<Child>,
}

impl Cluster {
    /// Starts the engines (daemon mode) and `program` (`"self"`: this executable) once per node
    /// with `args` and `extra` environment. With `capture`, the programs' stdout is piped and
    /// returned by [`Cluster::wait`] (for short reports: it is read once the program exits).
    pub fn start(
        nodes: u32,
        mode: Mode,
        fabric: &str,
        program: &str,
        args: &[String],
        extra: &[(String, String)],
        capture: bool,
    ) -> Result<Cluster, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let job = format!("run-{}", std::process::id());
        let mut c = Cluster { job: job.clone(), engines: Vec::new(), programs: Vec::new() };
        let env = |node: u32| {
            vec![
                ("RINGCAST_FABRIC", fabric.to_string()),
                ("RINGCAST_JOB", job.clone()),
                ("RINGCAST_NODES", nodes.to_string()),
                ("RINGCAST_NODE", node.to_string()),
                ("RINGCAST_ENGINE", format!("{job}-{node}")),
                ("RINGCAST_POLL_MODE", "spin-yield".to_string()),
                (MODE_ENV, if mode == Mode::Thread { "thread" } else { "daemon" }.to_string()),
            ]
        };
        if mode == Mode::Daemon {
            for node in 0..nodes {
                let child = Command::new(&exe)
                    .args(["engine"])
                    .envs(env(node))
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("starting engine {node}: {e}"))?;
                c.engines.push(child);
            }
            for node in 0..nodes {
                let name = format!("{job}-{node}");
                Host::attach_wait(&name, Duration::from_secs(20))
                    .map_err(|e| format!("engine {name} did not come up: {e}"))?;
            }
        }
        for node in 0..nodes {
            let mut cmd = if program == "self" { Command::new(&exe) } else { Command::new(program) };
            let child = cmd
                .args(args)
                .envs(env(node))
                .envs(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdin(Stdio::null())
                .stdout(if capture { Stdio::piped() } else { Stdio::inherit() })
                .spawn()
                .map_err(|e| format!("starting program on node {node}: {e}"))?;
            c.programs.push(child);
        }
        Ok(c)
    }

    /// Waits for every program (at most `limit`); returns each one's status and stdout. A
    /// program still running at the limit, or after a sibling failed, is killed.
    pub fn wait(&mut self, limit: Duration) -> Vec<(Option<ExitStatus>, String)> {
        let deadline = Instant::now() + limit;
        let mut outs: Vec<Option<(Option<ExitStatus>, String)>> =
            self.programs.iter().map(|_| None).collect();
        let mut failed = false;
        while outs.iter().any(Option::is_none) {
            for (i, p) in self.programs.iter_mut().enumerate() {
                if outs[i].is_some() {
                    continue;
                }
                let status = match p.try_wait() {
                    Ok(Some(s)) => Some(s),
                    Ok(None) if failed || Instant::now() > deadline => {
                        let _ = p.kill();
                        let _ = p.wait();
                        None // killed: counts as a failure
                    }
                    Ok(None) => continue,
                    Err(_) => None,
                };
                failed |= !status.is_some_and(|s| s.success());
                let mut text = String::new();
                if let Some(mut o) = p.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut text);
                }
                outs[i] = Some((status, text));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        outs.into_iter().flatten().collect()
    }
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
