//! Where an engine's log lines go: stderr (the default, and always in thread mode), or a file
//! the daemon appends to (`RINGCAST_LOG_FILE`), each line stamped with UTC time and a level.
//! SIGHUP asks for the file to be reopened — after logrotate moved it — and the next line does
//! so: a signal handler only sets a flag, no allocation or I/O happens in it.
//!
//! One sink per process: the daemon is one engine per process; engine threads of a host process
//! (thread mode) never open a file, so their lines go to stderr as before.
//!
//! Kept by hand rather than `tracing` with `tracing-appender` (issue 39, item 9): that appender
//! rotates files itself by time and has no reopen on a signal (logrotate's contract, and
//! systemd's `ExecReload`), so the reopen above would still be ours to write, inside a
//! `MakeWriter`; its non-blocking writer drops lines when its queue is full, where an operator
//! needs every attach and refusal; and the engine logs a few lines per control event from one
//! thread, never on the data path, which a mutex and `write_all` serve. What this file does —
//! a timestamp, a level word, append, reopen on SIGHUP — is tested through the real daemon in
//! `offload/engine/tests/service.rs` (the file moved, SIGHUP, the next line in a new file).
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The open log file and its path.
struct FileSink {
    path: PathBuf,
    file: File,
}

/// The process's log file, once the daemon opened one.
static SINK: Mutex<Option<FileSink>> = Mutex::new(None);

/// Set by SIGHUP: reopen the file before the next line.
static REOPEN: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn append(path: &PathBuf) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Takes SIGHUP (`systemctl reload`): from now on it asks for the log file to be reopened —
/// and, without a log file, does nothing (rather than end the process, SIGHUP's default).
pub fn handle_sighup() -> std::io::Result<()> {
    let flag = REOPEN.get_or_init(|| Arc::new(AtomicBool::new(false))).clone();
    signal_hook::flag::register(signal_hook::consts::SIGHUP, flag)?;
    Ok(())
}

/// Sends the log to `path` (appending) from now on; [`handle_sighup`] reopens it.
pub fn to_file(path: &str) -> std::io::Result<()> {
    let path = PathBuf::from(path);
    let file = append(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("log file {}: {e}", path.display())))?;
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Some(FileSink { path, file });
    Ok(())
}

/// The word for a message of `level` (1: what an operator must see, 2: every attach and
/// registration, 3 and up: debugging).
fn level_name(level: u8) -> &'static str {
    match level {
        0 | 1 => "notice",
        2 => "info",
        _ => "debug",
    }
}

/// `days` since 1970-01-01 as (year, month, day) (Howard Hinnant's civil-from-days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn timestamp() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = t.as_secs() as i64;
    let (y, mo, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.subsec_millis()
    )
}

/// Writes one line from engine `name` at `level` (the caller checked the configured level).
pub fn line(name: &str, level: u8, msg: std::fmt::Arguments<'_>) {
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = sink.as_mut() else {
        eprintln!("ringcast-engine[{name}]: {msg}");
        return;
    };
    if REOPEN.get().is_some_and(|f| f.swap(false, Ordering::Relaxed)) {
        match append(&s.path) {
            Ok(f) => s.file = f,
            // Keep writing where we can; say so on stderr.
            Err(e) => eprintln!("ringcast-engine[{name}]: reopening {}: {e}", s.path.display()),
        }
    }
    let text = format!("{} ringcast-engine[{name}] {}: {msg}\n", timestamp(), level_name(level));
    if s.file.write_all(text.as_bytes()).is_err() {
        eprint!("{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_and_level_names() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(20_418), (2025, 11, 26));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(level_name(1), "notice");
        assert_eq!(level_name(2), "info");
        assert!(timestamp().ends_with('Z'));
    }
}
