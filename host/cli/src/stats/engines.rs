//! The engines `ringcast stats` reads, and how it keeps reading them: each reading attaches to
//! an engine it holds no connection to (one that was not running, one that went away and was
//! restarted under its name), keeps the connection of an engine that did not answer in time (a
//! stopped engine answers again once continued), and drops one the engine closed, attaching
//! anew in the same reading. Every control request, the connect included, is bounded by the
//! reader's timeout, and the engines are read side by side: a reading takes as long as its
//! slowest engine, never the sum.
use ringcast_host::{AttachOptions, CommInfo, Config, Error, Host};
use ringcast_offload::config::LocalRank;
use std::time::{Duration, Instant};

/// A reading: when, and every counter in the order of `ringcast_abi::counters::ALL`.
pub type Reading = (Instant, Vec<u64>);

/// One engine being read.
pub struct Watched {
    /// Its name (or `tcp://` address).
    pub name: String,
    host: Option<Host>,
    /// The engine's pid at the last attach (0: never attached).
    pub pid: u32,
    /// The last reading, and the one before (watch mode's rates; none across a restart).
    pub last: Option<Reading>,
    /// The reading before the last.
    pub prev: Option<Reading>,
    /// Its communicators at the last reading.
    pub comms: Vec<CommInfo>,
    /// Why the last reading failed (not running, refused, not answering, gone).
    pub error: Option<String>,
}

/// Attaches to engine `name` as an observer (no local rank), every control request (the
/// connect included) bounded by `timeout`.
pub fn attach(name: &str, config: &Config, timeout: Option<Duration>) -> Result<Host, String> {
    let mut config = config.clone();
    config.topology.local_rank = LocalRank::None;
    let opts = AttachOptions { ctl_timeout: timeout, ..AttachOptions::default() };
    Host::attach_config(name, &config, opts).map_err(|e| describe(name, &e))
}

/// `e` in the words `ringcast stats` shows.
fn describe(name: &str, e: &Error) -> String {
    match e {
        Error::Connect { source, .. } if source.kind() == std::io::ErrorKind::TimedOut => {
            "not answering (does not accept connections: stopped?)".to_string()
        }
        Error::Connect { .. } => format!("not running (nothing listens as {name:?})"),
        Error::Timeout { timeout, .. } => format!("not answering within {timeout:?} (stopped?)"),
        Error::EngineGone => "gone: the engine went away".to_string(),
        e => format!("refused: {e}"),
    }
}

impl Watched {
    /// An engine not read yet.
    pub fn new(name: String) -> Self {
        Watched { name, host: None, pid: 0, last: None, prev: None, comms: Vec::new(), error: None }
    }

    /// Takes a new reading, keeping the previous one for rates (see the module doc for what
    /// happens to the connection on each kind of failure).
    pub fn read(&mut self, config: &Config, timeout: Option<Duration>) {
        // At most two tries: the connection held, then (if the engine closed it) a fresh one.
        for _ in 0..2 {
            if self.host.is_none() {
                match attach(&self.name, config, timeout) {
                    Ok(h) => {
                        if h.engine_pid() != self.pid {
                            // Another engine process (restarted): its counters start anew.
                            (self.last, self.prev) = (None, None);
                        }
                        self.pid = h.engine_pid();
                        self.host = Some(h);
                    }
                    Err(e) => {
                        self.error = Some(e);
                        return;
                    }
                }
            }
            let Some(host) = self.host.as_mut() else { return };
            match host.counters().and_then(|v| Ok((v, host.comm_list()?))) {
                Ok((v, comms)) => {
                    self.prev = self.last.replace((Instant::now(), v));
                    self.comms = comms;
                    self.error = None;
                    return;
                }
                // Stopped (SIGSTOP), or too busy: the connection is kept for the next reading.
                Err(e @ Error::Timeout { .. }) => {
                    self.error = Some(describe(&self.name, &e));
                    return;
                }
                Err(e) => {
                    self.error = Some(describe(&self.name, &e));
                    self.host = None;
                }
            }
        }
    }
}

/// Reads every engine, side by side (one thread each: a reading lasts as long as the slowest
/// engine's, bounded by the timeout per request).
pub fn read_all(engines: &mut [Watched], config: &Config, timeout: Option<Duration>) {
    std::thread::scope(|s| {
        for e in engines.iter_mut() {
            s.spawn(move || e.read(config, timeout));
        }
    });
}

/// With `--all`, after a reading: an engine whose reading failed and that no longer listens on
/// this machine has exited (a job ended between two readings) — it is dropped, not reported as
/// a failure; one stopped or too busy still listens and stays, named with its reason.
pub fn forget_departed(engines: &mut Vec<Watched>, listed: &[String]) {
    engines.retain(|e| e.error.is_none() || listed.contains(&e.name));
}

/// With `--all`: engines that appeared on this machine are added, and those gone (neither
/// listed nor attached) dropped; named engines are kept whatever happens to them.
pub fn rediscover(engines: &mut Vec<Watched>, listed: &[String]) {
    engines.retain(|e| e.host.is_some() || listed.contains(&e.name));
    for name in listed {
        if !engines.iter().any(|e| &e.name == name) {
            engines.push(Watched::new(name.clone()));
        }
    }
    engines.sort_by(|a, b| a.name.cmp(&b.name));
}
