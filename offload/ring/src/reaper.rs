//! A reaper for named segments: a small process that outlives the process that started it, and
//! removes the segments of its job that nobody maps any more once that process is gone —
//! however it went (SIGKILL, `abort`, `_exit`, a crash), without waiting for a later start.
//!
//! Contract:
//! * [`Reaper::spawn`] forks (twice: the reaper is reparented to init, or the nearest
//!   subreaper, which reaps it; the caller is never left with a child to wait for) a process in
//!   a session of its own (a terminal's or a launcher's signal to the caller's process group
//!   does not reach it). It keeps three descriptors — a pidfd of the caller, one end of a
//!   socket pair whose other end the [`Reaper`] holds, `/dev/shm` — and closes every other (the
//!   caller's sockets, pipes and segment files: an MPI launcher reading the caller's output
//!   sees its end, no `flock` of the caller's is held); standard input and output become
//!   `/dev/null`. It then gives back the caller's memory it shares copy-on-write (see below).
//! * Dropping the [`Reaper`] (the caller went on, or stopped cleanly after removing what it
//!   could) writes one byte: the reaper scans once more, for at most 300 ms, removing what
//!   nobody maps — what the caller's own clean-up removes, but a moment later, so that a lock
//!   another thread's freshly forked reaper held for an instant (a fork copies every open
//!   file description, `flock`s included, and the reaper closes them first thing) cannot leave
//!   a segment behind — then exits.
//! * When the caller is gone (its pidfd polls readable: every thread has exited, so the kernel
//!   has closed its files and released its `flock`s), the reaper removes every entry of
//!   `/dev/shm` whose name starts with the prefix and that `accept` accepts, *if nobody maps
//!   it* — the rule of [`crate::ShmSegment::unlink_if_unused`] (exclusive `flock` without
//!   waiting, the name still the file locked, unlinked under the lock). Segments that other,
//!   living members still map stay: the last member to die has a reaper too, and its scan
//!   finds them unused. It rescans every 100 ms for up to [`SCAN_FOR`] while some remain
//!   locked (a member dying at the same moment), then exits.
//! * The reaper runs only raw system calls (`rustix`'s Linux backend, `libc::syscall`; no
//!   other libc function once it discarded memory, not even `close`) and no allocation: it is a fork of a process that may have had other threads (an MPI rank, an
//!   engine thread), whose locks (the allocator's among them) may be held forever in the copy.
//!   For the same reason both forks are the raw `clone(SIGCHLD)` system call: the caller's
//!   `pthread_atfork` handlers (an MPI library's) are not run for a process that never returns
//!   to its code.
//! * It is named [`REAPER_NAME`] (`ps` shows it so; its command line and environment read as
//!   empty once it slimmed down).
//! * Memory: right after it starts, the reaper drops the caller's memory from its own address
//!   space — `MADV_DONTNEED` on every private writable mapping but its stack, `munmap` of every
//!   shared one — so the caller's later writes cost no copy-on-write copy and the caller's
//!   freed shared memory is not kept alive by the reaper. Named segments are mapped
//!   `MADV_DONTFORK` (see [`crate::ShmSegment`]), so a reaper never holds one's lock.
//! * Failure to start a reaper is an error for the caller to report; it changes nothing else
//!   (the last member out and the stale-job reclaim still remove segments).
use core::ffi::CStr;
use core::mem::MaybeUninit;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// How long a reaper keeps rescanning while some of its job's segments are still mapped.
pub const SCAN_FOR: Duration = Duration::from_secs(2);

/// Scan rounds (100 ms apart) of a dismissed reaper while some of its job's segments are
/// mapped: the other members of a job that goes on map theirs, so it does not wait long.
const DISMISSED_SCAN_ROUNDS: u32 = 3;

/// How long a reaper waits, after the caller's end of the socket pair closed, for the caller's
/// process to be gone (it is exiting: its descriptors are being closed).
const EXIT_WAIT_MS: i32 = 10_000;

/// A reaper's process name (`/proc/PID/comm`, what `ps` and `top` show).
pub const REAPER_NAME: &CStr = c"ringcast-reaper";

/// Longest prefix [`Reaper::spawn`] accepts.
pub const MAX_PREFIX: usize = 200;

/// The caller's handle on its reaper: dropping it dismisses the reaper (see the module
/// documentation).
#[derive(Debug)]
pub struct Reaper {
    /// Our end of the socket pair whose other end the reaper polls.
    dismiss: OwnedFd,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // A socket, not a pipe: if the reaper is already gone (killed by someone), `send` with
        // MSG_NOSIGNAL fails with EPIPE instead of raising SIGPIPE, which would end a C
        // program (an MPI rank) that keeps SIGPIPE's default action.
        let _ = rustix::net::send(&self.dismiss, b"x", rustix::net::SendFlags::NOSIGNAL);
    }
}

/// What the reaper needs, prepared before the fork (no allocation after it). It lives on the
/// forking thread's stack, the one mapping the reaper keeps: nothing it holds may point into
/// the heap, which the reaper discards ([`slim_down`]).
struct Plan {
    prefix: [u8; MAX_PREFIX],
    prefix_len: usize,
    accept: fn(&[u8]) -> bool,
    pidfd: RawFd,
    dismiss: RawFd,
    dir: RawFd,
}

/// `fd` moved above the standard descriptors (a caller that closed its stdin would otherwise
/// get 0 back, and the reaper points 0..=2 at `/dev/null`).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

impl Reaper {
    /// Starts a reaper for the entries of `/dev/shm` whose names start with `prefix` and whose
    /// rest `accept` accepts (called with the name minus the prefix; it must not allocate or
    /// panic). `prefix` is a valid segment name ([`crate::check_segment_name`]).
    pub fn spawn(prefix: &str, accept: fn(&[u8]) -> bool) -> io::Result<Reaper> {
        crate::check_segment_name(prefix)?;
        if prefix.len() > MAX_PREFIX {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "reaper prefix too long"));
        }
        let me = rustix::process::getpid();
        let pidfd = above_stdio(rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty())?)?;
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        let theirs = above_stdio(theirs)?;
        let dir = above_stdio(rustix::fs::openat(
            rustix::fs::CWD,
            c"/dev/shm",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?)?;
        let mut plan = Plan {
            prefix: [0; MAX_PREFIX],
            prefix_len: prefix.len(),
            accept,
            pidfd: pidfd.as_raw_fd(),
            dismiss: theirs.as_raw_fd(),
            dir: dir.as_raw_fd(),
        };
        plan.prefix[..prefix.len()].copy_from_slice(prefix.as_bytes());
        // SAFETY: the child (`0`) runs only `intermediate`, which ends in `_exit` and calls
        // nothing that allocates, locks or depends on other threads (module documentation);
        // the parent continues normally.
        let child = unsafe { raw_fork() };
        let started = match child {
            -1 => Err(io::Error::last_os_error()),
            0 => intermediate(&plan),
            pid => match rustix::process::Pid::from_raw(pid as i32) {
                // The intermediate process exits as soon as it forked the reaper: 0 if it did.
                // ECHILD (a SIGCHLD handler of the program reaped it first): cannot tell, assume.
                Some(pid) => match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
                {
                    Ok(Some((_, status))) if status.exit_status() != Some(0) => {
                        Err(io::Error::other("the reaper could not be forked"))
                    }
                    _ => Ok(()),
                },
                None => Err(io::Error::other("clone returned no pid")),
            },
        };
        // Our copies of the reaper's descriptors close here; it keeps its own.
        drop((pidfd, theirs, dir));
        started.map(|()| Reaper { dismiss: ours })
    }
}

/// `fork()` as the bare system call: no `pthread_atfork` handlers, no libc bookkeeping.
///
/// # Safety
/// In the child, the caller must only make raw system calls and end in `_exit` (the child is a
/// copy of a possibly multi-threaded process: see the module documentation).
unsafe fn raw_fork() -> i64 {
    // SAFETY: `clone` with SIGCHLD and no new stack is `fork`; its arguments are plain values.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_clone,
            nix::libc::SIGCHLD as nix::libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    }
}

/// Ends this process at once (no `atexit` handlers, no destructors, no flushing): the bare
/// `exit_group` system call, which touches no libc state (the reaper may have discarded it).
fn exit_now(code: i32) -> ! {
    loop {
        // SAFETY: `exit_group` takes a plain integer and does not return.
        unsafe { nix::libc::syscall(nix::libc::SYS_exit_group, code) };
    }
}

/// The first child: a new session, then the reaper as its child, then gone.
fn intermediate(plan: &Plan) -> ! {
    let _ = rustix::process::setsid();
    // SAFETY: as in `Reaper::spawn`: the reaper child runs `reap` only.
    match unsafe { raw_fork() } {
        0 => reap(plan),
        -1 => exit_now(1),
        _ => exit_now(0),
    }
}

/// The reaper: keeps its descriptors, gives back memory, waits, scans, exits.
fn reap(plan: &Plan) -> ! {
    // Its name in `ps` (its command line and environment read as zeros once it slimmed down:
    // they live on the caller's main stack).
    let _ = rustix::thread::set_name(REAPER_NAME);
    let _ = rustix::process::chdir(c"/");
    keep_only(&[plan.pidfd, plan.dismiss, plan.dir]);
    slim_down();
    // SAFETY: the three descriptors are open (kept above) and owned by nobody else in this
    // process; they stay open until `_exit`.
    let (pidfd, dismiss, dir) = unsafe {
        (
            BorrowedFd::borrow_raw(plan.pidfd),
            BorrowedFd::borrow_raw(plan.dismiss),
            BorrowedFd::borrow_raw(plan.dir),
        )
    };
    // Dismissed or not, it scans: the caller's own clean-up removed what nobody mapped when it
    // looked, but a lock may have been held for a moment by a descriptor another thread's
    // freshly forked reaper had not closed yet (a reaper closes what it inherits first thing,
    // yet a fork copies every open file description, `flock`s included). The scan removes only
    // what nobody maps, as the caller's clean-up does; a dismissed reaper gives up sooner.
    let dismissed = !wait_for_end(pidfd, dismiss);
    let deadline = if dismissed { DISMISSED_SCAN_ROUNDS } else { SCAN_FOR.as_millis() as u32 / 100 };
    for round in 0..=deadline {
        if scan(dir, &plan.prefix[..plan.prefix_len], plan.accept) == 0 {
            break;
        }
        if round < deadline {
            let _ = rustix::thread::nanosleep(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 100_000_000 });
        }
    }
    exit_now(0)
}

/// A descriptor the reaper closes with the bare system call. `OwnedFd`'s `Drop` calls libc's
/// `close`, a cancellation point that reads the thread's control block — which, for a reaper
/// forked from the caller's main thread, lies in memory [`slim_down`] discarded.
struct RawOwned(RawFd);

impl RawOwned {
    fn new(fd: OwnedFd) -> RawOwned {
        RawOwned(std::os::fd::IntoRawFd::into_raw_fd(fd))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `self.0` is open until `drop`.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for RawOwned {
    fn drop(&mut self) {
        // SAFETY: `self.0` is ours and closed exactly once, here.
        unsafe { rustix::io::close(self.0) };
    }
}

/// Stdin, stdout and stderr onto `/dev/null`; every descriptor but `keep` closed.
fn keep_only(keep: &[RawFd; 3]) {
    if let Ok(null) =
        rustix::fs::openat(rustix::fs::CWD, c"/dev/null", rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty())
    {
        let null = RawOwned::new(null);
        for target in 0..3 {
            // SAFETY: `dup2` on two descriptor numbers; `null` is open.
            unsafe { nix::libc::dup2(null.0, target) };
        }
        // `null` closes here (if it is not 0..=2 itself, which `dup2` made a copy of anyway).
        if null.0 <= 2 {
            core::mem::forget(null);
        }
    }
    let mut sorted = *keep;
    sorted.sort_unstable();
    let mut from: u32 = 3;
    for &k in &sorted {
        let k = k as u32;
        if k > from {
            close_range(from, k - 1);
        }
        from = from.max(k + 1);
    }
    close_range(from, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: `close_range` takes plain integers; closing descriptors this process (the
    // reaper) does not use is the point.
    unsafe { nix::libc::syscall(nix::libc::SYS_close_range, first, last, 0u32) };
}

/// Waits until the caller is gone (`true`) or dismisses the reaper (`false`).
fn wait_for_end(pidfd: BorrowedFd<'_>, dismiss: BorrowedFd<'_>) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN), PollFd::new(&dismiss, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return true, // cannot wait: act as if the caller were gone (scan is safe)
        }
        if !fds[0].revents().is_empty() {
            return true;
        }
        if !fds[1].revents().is_empty() {
            let mut byte = [0u8; 1];
            return match rustix::io::read(dismiss, &mut byte) {
                Ok(1) => false,
                // End of file: the caller closed its end without a word — it is exiting (its
                // descriptors are being closed). Wait for the rest of its exit.
                _ => {
                    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
                    let t = rustix::time::Timespec { tv_sec: i64::from(EXIT_WAIT_MS / 1000), tv_nsec: 0 };
                    let _ = poll(&mut fds, Some(&t));
                    true
                }
            };
        }
    }
}

/// Removes the unused entries of `dir` named `prefix` + something `accept`s; returns how many
/// such entries remain (in use).
fn scan(dir: BorrowedFd<'_>, prefix: &[u8], accept: fn(&[u8]) -> bool) -> usize {
    if rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).is_err() {
        return 0;
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = rustix::fs::RawDir::new(dir, &mut buf);
    let mut in_use = 0;
    while let Some(entry) = entries.next() {
        let Ok(entry) = entry else { break };
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes.len() <= prefix.len() || &bytes[..prefix.len()] != prefix || !accept(&bytes[prefix.len()..])
        {
            continue;
        }
        if !unlink_if_unused_at(dir, name) {
            in_use += 1;
        }
    }
    in_use
}

/// [`crate::ShmSegment::unlink_if_unused`] by descriptor and without allocation; `false` only
/// when the entry is still there and mapped by someone.
fn unlink_if_unused_at(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    use rustix::fs::{flock, fstat, openat, statat, unlinkat, AtFlags, FlockOperation, Mode, OFlags};
    let Ok(file) = openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return true; // gone, or not a file we may judge
    };
    let file = RawOwned::new(file);
    let Ok(held) = fstat(file.fd()) else { return true };
    if rustix::fs::FileType::from_raw_mode(held.st_mode) != rustix::fs::FileType::RegularFile {
        return true;
    }
    if flock(file.fd(), FlockOperation::NonBlockingLockExclusive).is_err() {
        return false;
    }
    // The name may have been unlinked (and made again) since it was opened.
    if let Ok(now) = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        if now.st_dev == held.st_dev && now.st_ino == held.st_ino {
            let _ = unlinkat(dir, name, AtFlags::empty());
        }
    }
    true // `file` closes here (a plain `close`), releasing the lock
}

/// Gives back the memory this process shares with the caller (see the module documentation):
/// reads `/proc/self/maps` a line at a time into a fixed buffer.
fn slim_down() {
    let Ok(maps) = rustix::fs::openat(
        rustix::fs::CWD,
        c"/proc/self/maps",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return;
    };
    let maps = RawOwned::new(maps);
    let here = 0u8;
    let sp = core::ptr::addr_of!(here) as usize;
    let mut chunk = [0u8; 4096];
    let mut line = [0u8; 128];
    let mut len = 0usize;
    loop {
        let n = match rustix::io::read(maps.fd(), &mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                if let Some(m) = parse_maps_line(&line[..len]) {
                    give_back(m, sp);
                }
                len = 0;
            } else if len < line.len() {
                line[len] = b;
                len += 1;
            }
        }
    }
}

/// One mapping of `/proc/self/maps`: `start`, `end`, writable, shared.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    write: bool,
    shared: bool,
}

/// Parses `start-end perms ...` (hex addresses); `None` for anything else.
fn parse_maps_line(line: &[u8]) -> Option<Mapping> {
    let hex = |s: &[u8]| -> Option<usize> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0usize, |acc, &c| Some(acc << 4 | (c as char).to_digit(16)? as usize))
    };
    let dash = line.iter().position(|&b| b == b'-')?;
    let space = line.iter().position(|&b| b == b' ')?;
    if space <= dash || line.len() < space + 5 {
        return None;
    }
    let perms = &line[space + 1..space + 5];
    Some(Mapping {
        start: hex(&line[..dash])?,
        end: hex(&line[dash + 1..space])?,
        write: perms[1] == b'w',
        shared: perms[3] == b's',
    })
}

fn give_back(m: Mapping, sp: usize) {
    if m.end <= m.start || (m.start..m.end).contains(&sp) {
        return; // this process's own stack: the reaper runs on it
    }
    let (addr, len) = (m.start as *mut core::ffi::c_void, m.end - m.start);
    if m.shared {
        // SAFETY: the reaper never touches the caller's shared mappings (it uses only its
        // stack and the code); unmapping them in this process changes nothing for others.
        let _ = unsafe { rustix::mm::munmap(addr, len) };
    } else if m.write {
        // SAFETY: as above for private writable memory (heap, other threads' stacks, data):
        // the reaper's code reads no heap or writable static; discarding its copy-on-write
        // references leaves the caller the only owner of those pages.
        let _ = unsafe { rustix::mm::madvise(addr, len, rustix::mm::Advice::LinuxDontNeed) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        assert_eq!(
            parse_maps_line(b"7f12a000-7f12b000 rw-p 00000000 00:00 0   [heap]"),
            Some(Mapping { start: 0x7f12a000, end: 0x7f12b000, write: true, shared: false })
        );
        assert_eq!(
            parse_maps_line(b"55d0-55e0 rw-s 00000000 00:05 12 /dev/shm/x"),
            Some(Mapping { start: 0x55d0, end: 0x55e0, write: true, shared: true })
        );
        assert_eq!(
            parse_maps_line(b"ffffffffff600000-ffffffffff601000 --xp 0 0 0 [vsyscall]").map(|m| m.write),
            Some(false)
        );
        assert_eq!(parse_maps_line(b"garbage"), None);
        assert_eq!(parse_maps_line(b"12-zz rw-p"), None);
    }
}
