//! The namespace reaper of a launcher (`ringcast run --netns`, `--mode dpu`, and `ringcast
//! bench` or `demo` with them): network namespaces outlive every process, so a launcher that
//! dies without its teardown (SIGTERM, SIGHUP, SIGINT, SIGKILL — any signal that ends it) would
//! leave its lab for good. Before it makes any namespace, the launcher starts
//! `ringcast namespace-reaper --parent PID --prefix rch<PID>-` ([`NsReaper::spawn`]), a process
//! in a process group of its own (a terminal's SIGINT or SIGHUP to the launcher's group does not
//! reach it) that waits on a pidfd of the launcher and on its standard input, a pipe from it:
//! * a line on the pipe — the launcher deleted its lab itself and dismisses the reaper
//!   ([`NsReaper`]'s `Drop`, after the lab's): it exits and deletes nothing;
//! * the launcher gone (pidfd readable) or the pipe at its end without a line: it deletes every
//!   namespace named with the prefix — `ip netns del`, which detaches and removes the name;
//!   the namespace itself goes when the last process in it (engines and programs, killed by
//!   their parent-death signal) is gone — and rescans until two scans a second apart find
//!   none (an `ip netns add` the launcher started just before it died may finish after the
//!   first).
//!
//! What the reaper cannot outlive — being killed itself — is covered by the stale reclaim
//! every launcher runs as it starts ([`ringcast_host::netns::reclaim_stale`]).
use std::io::Write;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::Duration;

/// The launcher's handle on its reaper; dropping it dismisses the reaper (the lab must be
/// deleted by then: declare it after the lab).
pub struct NsReaper {
    child: Child,
    dismiss: Option<ChildStdin>,
}

impl NsReaper {
    /// Starts the reaper of this process's labs (`rch<pid>-…`, [`ringcast_host::netns::Lab`]).
    pub fn spawn() -> Result<NsReaper, String> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let me = std::process::id();
        let mut child = Command::new(exe)
            .args(["namespace-reaper", "--parent", &me.to_string(), "--prefix", &format!("rch{me}-")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting the namespace reaper: {e}"))?;
        let dismiss = child.stdin.take();
        Ok(NsReaper { child, dismiss })
    }
}

impl Drop for NsReaper {
    fn drop(&mut self) {
        if let Some(mut w) = self.dismiss.take() {
            let _ = w.write_all(b"done\n");
        }
        // It exits as soon as it reads the line.
        let _ = self.child.wait();
    }
}

/// Whether `prefix` is a lab prefix of one process: `rch<digits>-`.
fn lab_prefix_ok(prefix: &str) -> bool {
    prefix
        .strip_prefix("rch")
        .and_then(|r| r.strip_suffix('-'))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `ringcast namespace-reaper --parent PID --prefix PREFIX` (see the module documentation).
pub fn run(parent: u32, prefix: &str) -> ExitCode {
    use rustix::event::{poll, PollFd, PollFlags};
    if !lab_prefix_ok(prefix) {
        eprintln!("ringcast namespace-reaper: {prefix:?} is not a lab prefix (rch<pid>-)");
        return ExitCode::from(2);
    }
    let pidfd = rustix::process::Pid::from_raw(parent as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let ours = rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) == Some(parent);
    // A launcher that died before the pidfd was opened (or another process with its pid by
    // now): it is gone either way.
    if let (Some(pidfd), true) = (&pidfd, ours) {
        let stdin = std::io::stdin();
        loop {
            let mut fds = [PollFd::new(pidfd, PollFlags::IN), PollFd::new(&stdin, PollFlags::IN)];
            match poll(&mut fds, None) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
                Ok(_) => {}
            }
            if !fds[0].revents().is_empty() {
                break; // the launcher is gone
            }
            if !fds[1].revents().is_empty() {
                let mut line = String::new();
                if std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                    return ExitCode::SUCCESS; // dismissed: the launcher deleted its lab
                }
                break; // its end of the pipe closed without a word: it is exiting
            }
        }
    }
    delete_labs(prefix);
    ExitCode::SUCCESS
}

/// Deletes every namespace named with `prefix` until two scans a second apart find none
/// (at most 10 rounds).
fn delete_labs(prefix: &str) {
    let mut quiet = 0;
    for _ in 0..10 {
        let found: Vec<String> =
            ringcast_host::netns::namespaces().into_iter().filter(|n| n.starts_with(prefix)).collect();
        if found.is_empty() {
            quiet += 1;
            if quiet == 2 {
                return;
            }
        } else {
            quiet = 0;
            for ns in found {
                if let Err(e) = ringcast_host::netns::ip(&["netns", "del", &ns]) {
                    eprintln!("ringcast namespace-reaper: {e}");
                }
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lab_prefixes_are_reaped() {
        assert!(lab_prefix_ok("rch123-"));
        assert!(!lab_prefix_ok("rch-"));
        assert!(!lab_prefix_ok("rch12"));
        assert!(!lab_prefix_ok("rch1a-"));
        assert!(!lab_prefix_ok(""));
        assert!(!lab_prefix_ok("x123-"));
    }
}
