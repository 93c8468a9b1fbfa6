//! The seeds the state machine is handed: it never reads the clock, the pid or the OS's
//! randomness itself (`ringcast-proto` is sans-IO), so they are gathered here.
//!
//! Communicator identities (docs/design.md §3.1, Hoefler et al. §3.1) come from one process-wide
//! [`IdentityGenerator`], keyed on first use with SHA-256 over every entropy source the paper
//! names — time, host identity, process identity, an intra-node unique value (for processes
//! sharing a node) — and OS entropy, so a weak or repeated OS source alone cannot make two jobs
//! collide.
use rand_core::{OsRng, RngCore};
use ringcast_proto::comm::ident::{CommIdentity, IdentityGenerator};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The process-wide generator, keyed on first use.
static GENERATOR: Mutex<Option<IdentityGenerator>> = Mutex::new(None);

/// 32 bytes from every source of this process and machine.
pub fn gather() -> [u8; 32] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = Sha256::new();
    let mut os = [0u8; 32];
    // OS entropy; if the OS refuses, the other sources still differ between jobs.
    let _ = OsRng.try_fill_bytes(&mut os);
    h.update(os);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.update(now.as_nanos().to_le_bytes());
    h.update(rustix::system::uname().nodename().to_bytes());
    h.update(std::process::id().to_le_bytes());
    // Intra-node uniqueness (the paper's `tmpnam`): a per-process counter and an address of
    // this process's stack, which differ between processes on one node.
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let marker = 0u8;
    h.update((std::ptr::addr_of!(marker) as usize).to_le_bytes());
    h.finalize().into()
}

/// Draws a fresh communicator identity.
pub fn new_identity() -> CommIdentity {
    let mut guard = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(|| IdentityGenerator::from_seed(gather())).next_identity()
}

/// A seed for a fault injector whose `fault.seed` is 0: differs between the processes of a
/// machine, so their injected faults do.
pub fn fault_seed() -> u64 {
    std::process::id() as u64 ^ 0x0066_6175_6c74
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn gathered_seeds_differ_between_draws() {
        assert_ne!(gather(), gather(), "time and the counter alone make seeds differ");
    }

    #[test]
    fn identities_are_distinct() {
        let ids: Vec<CommIdentity> = (0..10_000).map(|_| new_identity()).collect();
        assert_eq!(ids.iter().map(|i| i.group).collect::<HashSet<_>>().len(), ids.len());
        assert_eq!(ids.iter().map(|i| i.key).collect::<HashSet<_>>().len(), ids.len());
    }
}
