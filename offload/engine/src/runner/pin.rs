//! Pinning the polling thread to a CPU (`pin_cpu` tunable).
use crate::config::PinCpu;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// Pins the calling thread as `pin` says; returns the CPU it is pinned to, if any.
pub fn pin_current_thread(pin: PinCpu) -> std::io::Result<Option<usize>> {
    let allowed = sched_getaffinity(None)?;
    let cpu = match pin {
        PinCpu::None => return Ok(None),
        PinCpu::Cpu(n) => n,
        PinCpu::Auto => match (0..CpuSet::MAX_CPU).rev().find(|&c| allowed.is_set(c)) {
            Some(c) => c,
            None => return Ok(None),
        },
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
    Ok(Some(cpu))
}
