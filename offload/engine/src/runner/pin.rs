//! Pinning the polling thread to a CPU (`pin_cpu` tunable).
//!
//! `auto` gives each engine of the machine a CPU of its own: an engine claims a CPU by binding
//! the abstract Unix socket `@ringcast.cpu.<n>` (highest allowed CPU first, hosts usually start
//! on low ones) and holds it as long as it runs. The kernel makes the bind exclusive and releases
//! it when the engine exits, however it exits — nothing is left behind, no file, no stale lock.
//! When every allowed CPU already has an engine, a further engine stays unpinned: pinned on top
//! of another poller, both would share one CPU while the scheduler could have moved either.
//! Abstract sockets belong to a network namespace: engines started in different namespaces
//! (the tests' fabrics) do not see each other's claims.
use crate::config::PinCpu;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

/// Where the calling thread was pinned, and the machine-wide claim on that CPU (held by
/// keeping this value alive for as long as the engine runs).
#[derive(Debug)]
pub struct Pinned {
    cpu: Option<usize>,
    _claim: Option<UnixListener>,
}

impl Pinned {
    /// The CPU the thread is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }
}

/// Claims CPU `cpu` for this engine, machine-wide (see the module doc); `None` if another
/// engine holds it.
fn claim(cpu: usize) -> Option<UnixListener> {
    let addr = SocketAddr::from_abstract_name(format!("ringcast.cpu.{cpu}")).ok()?;
    UnixListener::bind_addr(&addr).ok()
}

/// Pins the calling thread as `pin` says: a fixed CPU, none, or (`auto`) a CPU no other engine
/// of the machine holds.
pub fn pin_current_thread(pin: PinCpu) -> std::io::Result<Pinned> {
    let allowed = sched_getaffinity(None)?;
    let (cpu, claim) = match pin {
        PinCpu::None => return Ok(Pinned { cpu: None, _claim: None }),
        PinCpu::Cpu(n) => (n, None),
        PinCpu::Auto => {
            let mut free = (0..CpuSet::MAX_CPU).rev().filter(|&c| allowed.is_set(c));
            match free.find_map(|c| claim(c).map(|l| (c, l))) {
                Some((c, l)) => (c, Some(l)),
                None => return Ok(Pinned { cpu: None, _claim: None }),
            }
        }
    };
    if cpu >= CpuSet::MAX_CPU || !allowed.is_set(cpu) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is not in this process's affinity set"),
        ));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set)?;
    Ok(Pinned { cpu: Some(cpu), _claim: claim })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Engines claiming CPUs one after the other (here: threads of one process, as engine
    /// threads of one machine would) get distinct CPUs, and once every allowed CPU is taken
    /// the next one stays unpinned; a CPU given back is claimed again.
    #[test]
    fn auto_engines_get_distinct_cpus_and_stop_pinning_when_cpus_run_out() {
        let cpus = sched_getaffinity(None).map(|s| s.count() as usize).unwrap_or(1);
        // Each claim pins the thread that makes it: one thread per engine.
        let claim_in_thread =
            || std::thread::spawn(|| pin_current_thread(PinCpu::Auto).unwrap()).join().unwrap();
        let mut held = Vec::new();
        loop {
            let p = claim_in_thread();
            match p.cpu() {
                Some(c) => {
                    assert!(held.iter().all(|h: &Pinned| h.cpu() != Some(c)), "CPU {c} claimed twice");
                    held.push(p);
                }
                None => break,
            }
            assert!(held.len() <= cpus, "more engines pinned ({}) than CPUs ({cpus})", held.len());
        }
        // Other tests of this binary may hold some CPUs meanwhile, so fewer than `cpus` may
        // have been free; every one claimed here was distinct, and none is left now.
        assert!(claim_in_thread().cpu().is_none(), "an engine pinned on a CPU another engine holds");
        if let Some(p) = held.pop() {
            let freed = p.cpu();
            drop(p);
            assert_eq!(claim_in_thread().cpu(), freed, "a released CPU is claimed again");
        }
    }
}
