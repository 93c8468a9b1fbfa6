//! Shared-memory segments: a memfd mapped `MAP_SHARED`, which another process maps from the same
//! file descriptor (passed over a Unix socket or inherited).
//!
//! Contract:
//! * [`ShmSegment::create`] makes a zero-filled memfd of the given length, sealed against
//!   shrinking and growing (so a peer cannot truncate it under us and make our accesses fault),
//!   and maps it; [`ShmSegment::from_fd`] maps the whole of a received fd (size from `fstat`;
//!   size 0 refused).
//! * The mapping is written concurrently by another process, so this module never creates a
//!   `&[u8]`/`&mut [u8]` over it: [`ShmSegment::read_at`], [`ShmSegment::write_at`],
//!   [`ShmSegment::fill`] and [`copy_between`] are bounds-checked raw-pointer copies that return
//!   [`OutOfBounds`] instead of panicking. Rings inside a segment are attached with
//!   [`crate::Producer::attach`]/[`crate::Consumer::attach`] on [`ShmSegment::as_non_null`],
//!   passing an `Arc<ShmSegment>` as the owner.
//! * Bytes copied out of a segment the peer is writing at the same time may be torn; callers
//!   treat them as untrusted input and validate them (the ring's indices are the synchronisation).
use core::ptr::NonNull;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use memmap2::{MmapOptions, MmapRaw};

/// A byte range outside a segment was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

impl core::fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("byte range outside the shared-memory segment")
    }
}

impl std::error::Error for OutOfBounds {}

/// A memfd-backed shared mapping (see the module documentation).
pub struct ShmSegment {
    map: MmapRaw,
    fd: OwnedFd,
}

// SAFETY (auto traits, no `unsafe impl` needed): `ShmSegment` is `Send + Sync` because its
// fields are (`MmapRaw` and `OwnedFd`), and that is sound: it hands out only raw pointers and
// does its own copies with raw-pointer operations on memory that another *process* may write at
// any moment anyway, so a second thread of ours adds no hazard the design does not already
// accept; the mapping stays valid until the `ShmSegment` is dropped, regardless of thread.
static_assertions::assert_impl_all!(ShmSegment: Send, Sync);

fn nix_err(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl ShmSegment {
    /// Creates a zero-filled segment of `len` bytes. `name` is the memfd's name (for
    /// `/proc/PID/fd`, debugging only; an interior NUL is an error). The fd is `O_CLOEXEC`.
    pub fn create(name: &str, len: usize) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty shared-memory segment"));
        }
        let size = i64::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in segment name"))?;
        let fd = memfd_create(&cname, MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING)
            .map_err(nix_err)?;
        // A new memfd reads as zeros once extended.
        nix::unistd::ftruncate(&fd, size).map_err(nix_err)?;
        // Fix the size: a peer holding the fd can no longer shrink it (which would turn our
        // accesses into SIGBUS) or grow it.
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(nix_err)?;
        Self::map(fd, len)
    }

    /// Maps the whole file behind `fd` (its `fstat` size) shared and writable. Refuses an empty
    /// file. If the fd is not sealed against shrinking, whoever else holds it can make accesses
    /// fault by truncating it; segments from [`ShmSegment::create`] are sealed.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        let stat = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(nix_err)?;
        let len = usize::try_from(stat.st_size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative file size"))?;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty shared-memory segment"));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Self> {
        Self::map_with(fd, len, false)
    }

    /// [`ShmSegment::map`]; `populate`: every page faulted in now (`MAP_POPULATE`), not at its
    /// first touch.
    fn map_with(fd: OwnedFd, len: usize, populate: bool) -> io::Result<Self> {
        // `map_raw` is MAP_SHARED, read-write.
        let mut options = MmapOptions::new();
        options.len(len);
        if populate {
            options.populate();
        }
        let map = options.map_raw(&fd)?;
        if map.len() != len || map.as_mut_ptr().is_null() {
            return Err(io::Error::other("unexpected mapping"));
        }
        Ok(ShmSegment { map, fd })
    }

    /// Like [`ShmSegment::from_fd`], but only for a memfd sealed against shrinking — the rule
    /// for memory an engine maps on a host's behalf: an unsealed file could be truncated under
    /// the engine, and its next access to the missing pages would be a SIGBUS, not an error.
    pub fn from_sealed_fd(fd: OwnedFd) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        let seals = fcntl(fd.as_raw_fd(), FcntlArg::F_GET_SEALS).map_err(nix_err)?;
        if !SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "segment is not sealed against shrinking",
            ));
        }
        Self::from_fd(fd)
    }

    /// `(pointer, len)` of the sub-range `offset..offset + len`, if it lies inside the mapping
    /// (for attaching rings that live inside a segment).
    pub fn sub_range(&self, offset: u64, len: u64) -> Option<(NonNull<u8>, usize)> {
        let p = self.range(offset, len).ok()?;
        Some((NonNull::new(p)?, len as usize))
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always `false` (empty segments are refused); for API completeness.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Start of the mapping (page-aligned, so 128-aligned for a ring at offset 0).
    pub fn as_non_null(&self) -> NonNull<u8> {
        // NOTE: `map` checked the pointer is non-null; a dangling fallback is never produced.
        NonNull::new(self.map.as_mut_ptr()).unwrap_or(NonNull::dangling())
    }

    /// The memfd, e.g. to pass to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Pointer to `offset` after checking `offset + len <= self.len()`.
    fn range(&self, offset: u64, len: u64) -> Result<*mut u8, OutOfBounds> {
        let end = offset.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len() as u64 {
            return Err(OutOfBounds);
        }
        // SAFETY: `offset <= end <= len` of the mapping, so the result is inside it or one
        // past its end.
        Ok(unsafe { self.map.as_mut_ptr().add(offset as usize) })
    }

    /// Copies `out.len()` bytes starting at `offset` into `out`.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), OutOfBounds> {
        let src = self.range(offset, out.len() as u64)?;
        // SAFETY: `src..src+out.len()` is inside the live mapping (checked); `out` is valid for
        // writes. `ptr::copy` also tolerates overlap, should a caller have built `out` over the
        // mapping by unsafe means.
        unsafe { core::ptr::copy(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into the segment at `offset`.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, data.len() as u64)?;
        // SAFETY: destination inside the live, writable mapping (checked); `data` valid for
        // reads; overlap tolerated.
        unsafe { core::ptr::copy(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Hands `f` the `len` bytes at `offset` in place, for reading (the engine hashes a
    /// receiver's delivered bytes where it placed them, in the host's buffer, instead of
    /// keeping a copy to hash).
    ///
    /// The bytes belong to whichever process shares the segment: one that writes them while
    /// `f` reads (a host rewriting a receive buffer its call has not returned, which the MPI
    /// standard makes erroneous) only changes what `f` sees — the message MAC computed over
    /// them then fails, and the broadcast completes with an error. Callers use the slice for
    /// one read pass and draw no conclusion from reading a byte twice.
    pub fn with_bytes<R>(&self, offset: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R, OutOfBounds> {
        let src = self.range(offset, len)?;
        // SAFETY: `src..src+len` is inside the live mapping (checked), which outlives `&self`
        // and so the call; the slice does not escape `f`. Nothing in this process writes the
        // range during `f` (the engine places into it only between calls); another process
        // may (see above): the same race `read_at`'s raw copy has, read here by `f` instead.
        let bytes = unsafe { core::slice::from_raw_parts(src, len as usize) };
        Ok(f(bytes))
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: u64, len: u64, byte: u8) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, len)?;
        // SAFETY: `dst..dst+len` is inside the live, writable mapping (checked), and `len`
        // fits in usize because it is at most the mapping's length.
        unsafe { core::ptr::write_bytes(dst, byte, len as usize) };
        Ok(())
    }
}

/// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off` — the engine's "DMA".
/// Both ranges are bounds-checked; they may be the same segment and may overlap.
pub fn copy_between(
    src: &ShmSegment,
    src_off: u64,
    dst: &ShmSegment,
    dst_off: u64,
    len: u64,
) -> Result<(), OutOfBounds> {
    let s = src.range(src_off, len)?;
    let d = dst.range(dst_off, len)?;
    // SAFETY: both ranges are inside live mappings (checked; `len` fits in usize as it is at
    // most a mapping's length); `ptr::copy` handles overlap within one segment.
    unsafe { core::ptr::copy(s, d, len as usize) };
    Ok(())
}

/// Directory where named segments live (POSIX shared memory on Linux is a tmpfs here).
pub const SHM_DIR: &str = "/dev/shm";

/// Longest name [`ShmSegment::create_named`] and friends accept. Leaves room under the 255-byte
/// file-name limit for the temporary suffix [`ShmSegment::create_or_open_named`] appends.
pub const MAX_SEGMENT_NAME: usize = 200;

/// Checks a segment name: 1..=[`MAX_SEGMENT_NAME`] bytes of `[A-Za-z0-9._-]`, not starting with
/// `.` and without `..` — so a name can only ever denote a plain file directly in [`SHM_DIR`]
/// (no `/`, no parent directory, no hidden file, no NUL).
pub fn check_segment_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SEGMENT_NAME
        && !name.starts_with('.')
        && !name.contains("..")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad shared-memory segment name {name:?}")))
    }
}

fn named_path(name: &str) -> io::Result<std::path::PathBuf> {
    check_segment_name(name)?;
    Ok(std::path::Path::new(SHM_DIR).join(name))
}

/// Takes a shared `flock` on `file` (blocking: an exclusive holder is a reclaimer, which holds
/// it only to unlink the name) and checks the file still has a name: a reclaimer that unlinked
/// it while we waited leaves it with none, and it must not be used (`NotFound`, retried by
/// [`ShmSegment::create_or_open_named`]).
fn hold_shared(file: &std::fs::File) -> io::Result<()> {
    use rustix::fs::{flock, fstat, FlockOperation};
    flock(file, FlockOperation::LockShared)?;
    if fstat(file)?.st_nlink == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, "named segment was reclaimed while opening it"));
    }
    Ok(())
}

/// Named segments: plain files in [`SHM_DIR`] mapped `MAP_SHARED`, so that processes that
/// agree on a name (and nothing else) share memory. Unlike memfds they cannot be sealed, so a
/// process of the same user could truncate one under us; the files are created mode 0600, i.e.
/// only processes of the same user — the job's own members — can.
///
/// Liveness: every process that maps a named segment holds a shared `flock(2)` on it for as
/// long as it keeps the mapping (the lock belongs to the segment's open file, which the
/// [`ShmSegment`] keeps, and the kernel drops it when the process dies, however it dies). A
/// segment whose exclusive lock can be taken is therefore mapped by nobody:
/// [`ShmSegment::unlink_if_unused`] removes only such a segment, so it never pulls a name from
/// under a live user. An opener that raced with it sees the file without a name once it holds
/// its lock, and starts over.
impl ShmSegment {
    /// Creates the named segment `name` of `len` zero bytes; fails with `AlreadyExists` if a
    /// segment of that name exists (`O_CREAT | O_EXCL`, mode 0600, `O_CLOEXEC`, `O_NOFOLLOW`).
    pub fn create_named(name: &str, len: usize) -> io::Result<Self> {
        Self::create_at(&named_path(name)?, len)
    }

    fn create_at(path: &std::path::Path, len: usize) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty shared-memory segment"));
        }
        let size = u64::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)?;
        // Hold it before anything else: between `open` and here a reclaimer could take the file
        // for abandoned; then it has no name any more and `hold_shared` says so.
        hold_shared(&file)?;
        // tmpfs extends with zeros; no page is allocated until touched.
        if let Err(e) = file.set_len(size) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        Self::map_named(OwnedFd::from(file), len)
    }

    /// [`ShmSegment::map`], and the mapping left out of forked children (`MADV_DONTFORK`): a
    /// child holding a copy of it would keep the segment's open file — and with it this
    /// process's `flock` — alive after this process lets go, and the segment would look used
    /// for as long as the child lives ([`crate::Reaper`] is such a child).
    ///
    /// Its pages are faulted in at the mapping (`MAP_POPULATE`), as a NIC driver's rings are
    /// allocated and pinned before the first packet: a named segment is a ring, a multicast log
    /// or a doorbell board, mapped when first used and then written slot after slot, and a
    /// page fault at each of a fresh ring's 1,024 slots made a job's first ~1,000 broadcasts of
    /// 2 B cost 5.8–7 µs where the later ones took 2.2–2.8 µs (docs/performance.md, "A ring's
    /// pages faulted in when it is mapped").
    fn map_named(fd: OwnedFd, len: usize) -> io::Result<Self> {
        let seg = Self::map_with(fd, len, true)?;
        seg.map.advise(memmap2::Advice::DontFork)?;
        Ok(seg)
    }

    /// Opens and maps the whole of the existing named segment `name`. Refuses anything but a
    /// non-empty regular file (no symlinks: `O_NOFOLLOW`). The caller validates the layout
    /// inside (a ring or a log checks its header and that the length covers it).
    pub fn open_named(name: &str) -> io::Result<Self> {
        Self::open_at(&named_path(name)?)
    }

    fn open_at(path: &std::path::Path) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)?;
        hold_shared(&file)?;
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "named segment is not a regular file"));
        }
        let len = usize::try_from(meta.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "named segment too large"))?;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty shared-memory segment"));
        }
        Self::map_named(OwnedFd::from(file), len)
    }

    /// Opens the named segment `name`, or — if there is none — creates it with `len` bytes and
    /// runs `init` on it *before* anyone else can open it; returns the segment and whether this
    /// call created it.
    ///
    /// Race-free between processes: the segment is created and initialised under a private
    /// temporary name (`<name>.tmp.<pid>.<n>`) and then published with `link(2)`, which fails
    /// if `name` exists; the loser of a race discards its copy and opens the winner's. So an
    /// opener never sees a half-initialised or zero-length segment. A process that dies between
    /// creating and unlinking the temporary leaves it behind; it shares `name`'s prefix, so a
    /// prefix cleanup removes it, and it carries its creator's pid, so a reclaim can tell it is
    /// abandoned. The temporary is locked (see above) before it is published, so the name is
    /// never unlocked while its creator lives. A segment reclaimed between being found and being
    /// locked is not used: the whole open-or-create starts over (a few times at most).
    pub fn create_or_open_named(
        name: &str,
        len: usize,
        mut init: impl FnMut(&ShmSegment) -> io::Result<()>,
    ) -> io::Result<(Self, bool)> {
        let path = named_path(name)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_create_or_open(name, &path, len, &mut init) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < 8 => continue,
                other => return other,
            }
        }
    }

    fn try_create_or_open(
        name: &str,
        path: &std::path::Path,
        len: usize,
        init: &mut impl FnMut(&ShmSegment) -> io::Result<()>,
    ) -> io::Result<(Self, bool)> {
        static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        match Self::open_at(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other.map(|s| (s, false)),
        }
        // Relaxed: only uniqueness of the number matters.
        let n = TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = std::path::Path::new(SHM_DIR).join(format!("{name}.tmp.{}.{n}", std::process::id()));
        let seg = Self::create_at(&tmp, len)?;
        let published = init(&seg).and_then(|()| std::fs::hard_link(&tmp, path));
        // The temporary name has served its purpose either way; the mapping stays valid.
        let _ = std::fs::remove_file(&tmp);
        match published {
            Ok(()) => Ok((seg, true)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Lost the race: the winner published a fully initialised segment.
                Self::open_at(path).map(|s| (s, false))
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the named segment `name` (mappings stay valid until unmapped).
    pub fn unlink_named(name: &str) -> io::Result<()> {
        std::fs::remove_file(named_path(name)?)
    }

    /// Removes the named segment `name` if no process maps it (see the liveness rule above):
    /// takes its exclusive lock without waiting, checks the name still denotes the file locked,
    /// and unlinks it while holding the lock. `Ok(false)`: in use (or already gone, or not a
    /// regular file), left alone.
    pub fn unlink_if_unused(name: &str) -> io::Result<bool> {
        use rustix::fs::{flock, fstat, lstat, FlockOperation};
        use std::os::unix::fs::OpenOptionsExt;
        let path = named_path(name)?;
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            // A symlink (O_NOFOLLOW) or anything else odd: not ours to judge.
            Err(_) => return Ok(false),
        };
        let held = fstat(&file)?;
        if held.st_mode & nix::libc::S_IFMT != nix::libc::S_IFREG {
            return Ok(false);
        }
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        // The name may have been unlinked (and even made again) since we opened it.
        match lstat(&path) {
            Ok(now) if now.st_dev == held.st_dev && now.st_ino == held.st_ino => {}
            _ => return Ok(false),
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
        // `file` closes here, releasing the lock; a waiting opener then finds no name.
    }

    /// Names of the segments in [`SHM_DIR`] starting with `prefix` (which must itself be a
    /// valid name), temporaries included.
    pub fn list_named(prefix: &str) -> io::Result<Vec<String>> {
        check_segment_name(prefix)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(SHM_DIR)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                if name.starts_with(prefix) {
                    names.push(name.to_string());
                }
            }
        }
        names.sort_unstable();
        Ok(names)
    }
}
