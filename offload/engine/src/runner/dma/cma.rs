//! The `cma` DMA backend: host memory reached with `process_vm_readv`/`process_vm_writev`
//! (cross-memory attach), the way a DPU reaches it by RDMA — the engine maps nothing of its
//! hosts. A host registers any range of its own memory by address (an MPI user buffer in
//! place); every job is checked against the registered ranges before it is issued
//! (`ranges.rs`), and the kernel checks it again against the host's mappings (an unmapped page
//! fails the job, it never faults the engine).
//!
//! Where the system calls are missing (`qemu-user` does not emulate them: the aarch64 engine of
//! the DPU emulation), the same access goes through `/proc/<pid>/mem` (`pread`/`pwrite`).
//!
//! The kernel copies with `rep movsb`: a copy is not single-copy atomic, and two copies are
//! ordered only where the CPU keeps them so ([`Process::keeps_order`]) or with a fence between
//! them ([`Process::write_in_order`]). The ring code builds on exactly that (`rings.rs`).
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;

/// Most parts one job takes (the ring code's largest: completions in two parts, the tail and
/// its mirror, the submission head and its mirror).
pub const MAX_PARTS: usize = 8;

/// Whether this kernel (or emulator) has `process_vm_readv`: `qemu-user` answers `ENOSYS`, so
/// an aarch64 engine under `qemu-aarch64` reaches its hosts through `/proc/<pid>/mem` instead —
/// the same kernel path (`access_remote_vm`), the same permission check, nothing mapped.
fn vm_rw_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut b = [0u8; 1];
        let probe = [RemoteIoVec { base: b.as_ptr() as usize, len: 1 }];
        process_vm_readv(Pid::this(), &mut [IoSliceMut::new(&mut b)], &probe)
            != Err(nix::errno::Errno::ENOSYS)
    })
}

/// A host process the engine reaches by cross-memory attach.
#[derive(Clone, Debug)]
pub struct Process {
    pid: Pid,
    /// `/proc/<pid>/mem`, where `process_vm_readv` is not implemented.
    mem: Option<Arc<std::fs::File>>,
}

impl Process {
    /// Process `pid` (opens `/proc/<pid>/mem` only where the system calls are missing).
    pub fn open(pid: Pid) -> std::io::Result<Process> {
        let mem = if vm_rw_available() {
            None
        } else {
            let f = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem"))?;
            Some(Arc::new(f))
        };
        Ok(Process { pid, mem })
    }

    /// Process `pid` through `/proc/<pid>/mem` whatever the system offers (what an engine under
    /// `qemu-user` uses; tests compare the two paths).
    pub fn via_proc_mem(pid: Pid) -> std::io::Result<Process> {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/{pid}/mem"))?;
        Ok(Process { pid, mem: Some(Arc::new(f)) })
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// How this process is reached (for logs).
    pub fn path(&self) -> &'static str {
        if self.mem.is_some() {
            "/proc/<pid>/mem"
        } else {
            "process_vm_readv/writev"
        }
    }

    /// Whether the parts of one [`Process::write_many`] (and of one [`Process::read_many`]) are
    /// carried out in order: one system call copies them one after the other on this CPU, and
    /// x86-64 keeps a CPU's stores (and its loads) in program order between two copies — the
    /// stores *inside* one `rep movsb` may appear out of order, never across two. Elsewhere
    /// (aarch64, or `/proc/<pid>/mem` with one call per part) the ring code issues ordered parts
    /// as separate jobs with a fence between them.
    pub fn keeps_order(&self) -> bool {
        cfg!(target_arch = "x86_64") && self.mem.is_none()
    }

    /// Writes `parts` so that each is visible before the next begins: one job where
    /// [`Process::keeps_order`], else one per part with a fence between; false unless every
    /// byte was written.
    pub fn write_in_order(&self, parts: &[(u64, &[u8])]) -> bool {
        if self.keeps_order() {
            return self.write_many(parts);
        }
        parts.iter().enumerate().all(|(i, part)| {
            if i > 0 {
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            }
            self.write(part.0, part.1)
        })
    }

    /// Reads `parts` so that each is read after the one before is complete: one job where
    /// [`Process::keeps_order`] (x86-64 does not reorder a CPU's loads), else one per part with
    /// an Acquire fence between (on arm64 the kernel's loads of a later call could otherwise be
    /// satisfied before an earlier one's); false unless every byte arrived.
    pub fn read_in_order(&self, parts: &mut [(u64, &mut [u8])]) -> bool {
        if self.keeps_order() {
            return self.read_many(parts);
        }
        parts.iter_mut().enumerate().all(|(i, part)| {
            if i > 0 {
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            }
            self.read(part.0, part.1)
        })
    }

    /// Reads `out.len()` bytes at `addr`; false unless every byte arrived.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        self.read_many(&mut [(addr, out)])
    }

    /// Reads several ranges in one job, in order; false unless every byte arrived.
    pub fn read_many(&self, parts: &mut [(u64, &mut [u8])]) -> bool {
        if let Some(mem) = &self.mem {
            use std::os::unix::fs::FileExt;
            return parts
                .iter_mut()
                .all(|(addr, buf)| buf.is_empty() || mem.read_exact_at(buf, *addr).is_ok());
        }
        let mut remote: heapless::Vec<RemoteIoVec, MAX_PARTS> = heapless::Vec::new();
        let mut total = 0;
        for (addr, buf) in parts.iter().filter(|(_, b)| !b.is_empty()) {
            if remote.push(RemoteIoVec { base: *addr as usize, len: buf.len() }).is_err() {
                return false;
            }
            total += buf.len();
        }
        if total == 0 {
            return true;
        }
        let mut local: heapless::Vec<IoSliceMut<'_>, MAX_PARTS> = heapless::Vec::new();
        for (_, buf) in parts.iter_mut().filter(|(_, b)| !b.is_empty()) {
            let _ = local.push(IoSliceMut::new(buf));
        }
        process_vm_readv(self.pid, &mut local, &remote).is_ok_and(|n| n == total)
    }

    /// Writes `data` at `addr`; false unless every byte was written.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        self.write_many(&[(addr, data)])
    }

    /// Writes several ranges in one job; false unless every byte was written. The parts are
    /// in order only where [`Process::keeps_order`] says so; [`Process::write_in_order`] is
    /// the call for parts that must be.
    pub fn write_many(&self, parts: &[(u64, &[u8])]) -> bool {
        if let Some(mem) = &self.mem {
            use std::os::unix::fs::FileExt;
            return parts.iter().all(|(addr, buf)| buf.is_empty() || mem.write_all_at(buf, *addr).is_ok());
        }
        let mut remote: heapless::Vec<RemoteIoVec, MAX_PARTS> = heapless::Vec::new();
        let mut local: heapless::Vec<IoSlice<'_>, MAX_PARTS> = heapless::Vec::new();
        let mut total = 0;
        for (addr, buf) in parts.iter().filter(|(_, b)| !b.is_empty()) {
            if remote.push(RemoteIoVec { base: *addr as usize, len: buf.len() }).is_err() {
                return false;
            }
            let _ = local.push(IoSlice::new(buf));
            total += buf.len();
        }
        if total == 0 {
            return true;
        }
        process_vm_writev(self.pid, &local, &remote).is_ok_and(|n| n == total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_reach_another_process_and_end_with_it() {
        // A real other process: `cat` waiting on its stdin. The low end of its stack mapping is
        // memory it does not use; this process reaches it only by cma.
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let raw = Pid::from_raw(child.id() as i32);
        // Both ways in: the system calls, and /proc/<pid>/mem (qemu-user's).
        for pid in [Process::open(raw).unwrap(), Process::via_proc_mem(raw).unwrap()] {
            reach(&pid, &child, raw);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let pid = Process::open(raw).unwrap();
        let mut back = [0u8; 4];
        assert!(!pid.read(0x1000, &mut back), "a dead process's memory is gone");
    }

    fn reach(pid: &Process, child: &std::process::Child, raw: Pid) {
        assert_eq!(pid.pid(), raw);
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
        let stack = maps.lines().find(|l| l.ends_with("[stack]")).expect("child has a stack mapping");
        let lo = u64::from_str_radix(stack.split('-').next().unwrap(), 16).unwrap();
        // Another pattern per way in, so each pass reads back what it wrote itself.
        let salt = pid.path().len() as u8;
        let pattern: Vec<u8> = (0..=255u8).map(|b| b ^ salt).collect();
        assert!(pid.write(lo, &pattern));
        let mut back = vec![0u8; 256];
        assert!(pid.read(lo, &mut back));
        assert_eq!(back, pattern);
        // Two parts in one call, in order.
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        assert!(pid.read_many(&mut [(lo + 10, &mut a[..]), (lo + 200, &mut b[..])]));
        assert_eq!(
            (a, b),
            ([10 ^ salt, 11 ^ salt, 12 ^ salt, 13 ^ salt], [200 ^ salt, 201 ^ salt, 202 ^ salt, 203 ^ salt])
        );
        // Outside anything mapped: refused by the kernel, never a fault here.
        assert!(!pid.read(8, &mut back));
        assert!(!pid.write(8, &pattern));
    }
}
