//! Processes of a test: the `ringcast-engine` binary ([`engine_binary`]: found next to the
//! running executable in `target/<profile>/`, after asking cargo to bring it up to date), engine
//! daemons ([`Engine`]) and line-protocol children ([`Child`]), each stopped by its guard's
//! `Drop` whatever happened.
//!
//! The engine binary belongs to another package (`ringcast-offload`), so cargo's
//! `CARGO_BIN_EXE_*` does not name it here. When run under cargo (`CARGO` is set), the first
//! call runs `cargo build -p ringcast-offload --bin ringcast-engine` for the same target
//! directory and profile — a no-op when `cargo test --workspace` built it already, and the
//! guarantee that a `cargo test -p ringcast-hw-tests` does not run a stale engine. Without cargo
//! the binary must already be there.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `target/<profile>` of the running executable (`target/<profile>/deps/<test>` or
/// `target/<profile>/<bin>`).
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe.parent().ok_or("the executable has no directory")?;
    Ok(if dir.file_name().is_some_and(|n| n == "deps") { dir.parent().unwrap_or(dir) } else { dir }
        .to_path_buf())
}

/// The `ringcast-engine` binary (see the module doc).
pub fn engine_binary() -> Result<PathBuf, String> {
    static ENGINE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ENGINE.get_or_init(|| find_engine(None)).clone()
}

/// The `ringcast-engine` binary cross-built for `target` (a Rust target triple, e.g.
/// `aarch64-unknown-linux-gnu`, the BlueField's ARM cores): built like [`engine_binary`], with
/// `--target` and without default features (the DPDK fabric links the build machine's libdpdk,
/// which exists only for its own architecture), into `target/<triple>/<profile>/`.
pub fn cross_engine_binary(target: &str) -> Result<PathBuf, String> {
    find_engine(Some(target))
}

fn find_engine(cross: Option<&str>) -> Result<PathBuf, String> {
    let dir = profile_dir()?;
    let target_dir = dir.parent().ok_or("the profile directory has no parent")?;
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug").to_string();
    if let Ok(cargo) = std::env::var("CARGO") {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let mut c = Command::new(cargo);
        c.args(["build", "--quiet", "-p", "ringcast-offload", "--bin", "ringcast-engine", "--manifest-path"])
            .arg(&workspace)
            .arg("--target-dir")
            .arg(target_dir);
        if let Some(triple) = cross {
            c.args(["--target", triple, "--no-default-features"]);
        }
        match profile.as_str() {
            "debug" => {}
            "release" => {
                c.arg("--release");
            }
            other => {
                c.args(["--profile", other]);
            }
        }
        let out = c.stdin(Stdio::null()).output().map_err(|e| format!("running cargo build: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build of ringcast-engine{} failed: {}",
                cross.map(|t| format!(" for {t}")).unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let bin = match cross {
        Some(triple) => target_dir.join(triple).join(&profile).join("ringcast-engine"),
        None => dir.join("ringcast-engine"),
    };
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("{} does not exist: build it with `cargo build -p ringcast-offload`", bin.display()))
    }
}

/// The machine an ELF file was built for (`e_machine`: 62 x86-64, 183 aarch64), read from its
/// header; `None` if `path` is not a 64-bit little-endian ELF file.
pub fn elf_machine(path: &Path) -> Option<u16> {
    let mut head = [0u8; 20];
    std::io::Read::read_exact(&mut std::fs::File::open(path).ok()?, &mut head).ok()?;
    // Magic, ELFCLASS64 (2), ELFDATA2LSB (1); e_machine at offset 18.
    (head[..4] == *b"\x7fELF" && head[4] == 2 && head[5] == 1)
        .then(|| u16::from_le_bytes([head[18], head[19]]))
}

/// `EM_AARCH64`.
pub const EM_AARCH64: u16 = 183;

/// Collects a pipe's text on a thread (a child must never block on a full pipe).
fn drain(pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let mut r = BufReader::new(pipe);
        let _ = std::io::Read::read_to_string(&mut r, &mut text);
        text
    })
}

/// Sends SIGTERM to `child`, waits up to `grace`, then SIGKILLs it; returns its status (None:
/// killed or lost).
fn terminate(child: &mut std::process::Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(s)) = child.try_wait() {
        return Some(s);
    }
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// The child's status if it exits within `limit`.
fn wait_briefly(child: &mut std::process::Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// A running engine daemon; its stderr is collected. SIGTERMed (then killed) on drop.
pub struct Engine {
    /// Its name (hosts attach to it).
    pub name: String,
    child: std::process::Child,
    log: Option<std::thread::JoinHandle<String>>,
}

impl Engine {
    /// Starts `cmd` (an engine command line) as engine `name`.
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Engine, String> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting engine {name}: {e}"))?;
        let log = child.stderr.take().map(drain);
        Ok(Engine { name: name.to_string(), child, log })
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its process id (`ip netns exec` execs the engine in place: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs it — a crash, with nothing undone by the engine itself — and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (an engine lingers up to its peer timeout while the protocol still owes
    /// its peers something: signal every engine first, then [`Engine::stop`] each).
    pub fn signal_stop(&mut self) {
        if self.running() {
            let pid = rustix::process::Pid::from_child(&self.child);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }

    /// SIGTERM, wait (up to 20 s) and collect: its exit status (None if it had to be killed) and
    /// everything it wrote to stderr.
    pub fn stop(mut self) -> (Option<ExitStatus>, String) {
        let status = terminate(&mut self.child, Duration::from_secs(20));
        let log = self.log.take().and_then(|h| h.join().ok()).unwrap_or_default();
        (status, log)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }
}

/// A child speaking a line protocol: commands on its stdin, replies on its stdout (other
/// lines are kept as its log); stderr is collected. Killed on drop if still running.
pub struct Child {
    /// What it is (for messages).
    pub name: String,
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Lines read so far that no `expect` asked for.
    pub log: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Child {
    /// Starts `cmd` as child `name`.
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Child, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = child.stderr.take().map(drain);
        let stdin = child.stdin.take();
        Ok(Child { name: name.to_string(), child, stdin, lines, log: Vec::new(), stderr })
    }

    /// The next line that starts with `prefix` (the rest of it), within `timeout`; lines before
    /// it go to [`Child::log`]. A line starting with `FAIL` is an error at once.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> Result<String, String> {
        self.try_expect(prefix, timeout)?.ok_or_else(|| {
            format!("{}: no {prefix:?} line within {timeout:?}; log {:?}", self.name, self.log)
        })
    }

    /// Like [`Child::expect`], but `Ok(None)` when `timeout` passes first.
    pub fn try_expect(&mut self, prefix: &str, timeout: Duration) -> Result<Option<String>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(Some(rest.trim().to_string()));
                    }
                    if line.starts_with("FAIL") {
                        let status = wait_briefly(&mut self.child, Duration::from_secs(2));
                        let err = self.stderr_so_far();
                        return Err(format!("{} ({status:?}): {line}\n{err}", self.name));
                    }
                    self.log.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = wait_briefly(&mut self.child, Duration::from_secs(2));
                    let err = self.stderr_so_far();
                    return Err(format!(
                        "{}: exited ({status:?}) before a {prefix:?} line; log {:?}\n{err}",
                        self.name, self.log
                    ));
                }
            }
        }
    }

    /// SIGKILLs it — a crash — and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or_else(|| format!("{}: stdin closed", self.name))?;
        writeln!(stdin, "{line}").and_then(|_| stdin.flush()).map_err(|e| format!("{}: {e}", self.name))
    }

    /// Closes stdin and waits for the exit (up to `timeout`, then kills): the status (None if
    /// killed) and stderr.
    pub fn finish(mut self, timeout: Duration) -> (Option<ExitStatus>, String) {
        self.stdin = None;
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                _ => {
                    // Did not end on its own: stopped, and reported as killed.
                    terminate(&mut self.child, Duration::from_secs(2));
                    break None;
                }
            }
        };
        let err = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        (status, err)
    }

    /// Stderr collected so far: only available once the child exited (else empty).
    fn stderr_so_far(&mut self) -> String {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
        } else {
            String::new()
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stdin = None;
        terminate(&mut self.child, Duration::from_secs(2));
    }
}

/// Runs `step` on every child in turn: the usual "wait until all said X" barrier.
pub fn all<T>(
    children: &mut [Child],
    mut step: impl FnMut(&mut Child) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    children.iter_mut().map(&mut step).collect()
}

/// DPDK runtime directories of `job`'s engines that exist now (`/var/run/dpdk/rc-<job>-*`;
/// an engine removes its own at a clean exit).
pub fn dpdk_leftovers(job: &str) -> Vec<PathBuf> {
    let prefix = ringcast_offload::fabric::dpdk::eal_args::file_prefix(job, 0, 0);
    let stem = prefix.trim_end_matches("-0-0").to_string() + "-";
    ["/var/run/dpdk", "/run/dpdk"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&stem)))
        .collect()
}

/// Removes what [`dpdk_leftovers`] finds (empty directories only); for guards.
pub fn remove_dpdk_leftovers(job: &str) {
    for d in dpdk_leftovers(job) {
        let _ = std::fs::remove_dir(d);
    }
}
