//! A host reached by DMA across the boundary, whichever remote backend reaches it: `cma`
//! (cross-memory attach into its process) or `rdma` (RDMA READ/WRITE on its queue pair). The
//! range table (`ranges.rs`) and host-owned rings (`rings.rs`) are written once, against this.
use super::cma::Process;
use super::rdma::{LinkFault, RdmaLink};
use std::sync::{Arc, Mutex};

/// How the engine reaches one host's memory by DMA.
#[derive(Clone, Debug)]
pub enum Remote {
    /// Cross-memory attach into the host's process.
    Cma(Process),
    /// The host's RDMA connection (shared by its rings and its ranges; the engine loop is the
    /// only thread using it, so the lock is never contended).
    Rdma(Arc<Mutex<RdmaLink>>),
}

impl Remote {
    /// A link for a new host.
    pub fn rdma(link: RdmaLink) -> Remote {
        Remote::Rdma(Arc::new(Mutex::new(link)))
    }

    fn link(link: &Mutex<RdmaLink>) -> Option<std::sync::MutexGuard<'_, RdmaLink>> {
        link.lock().ok()
    }

    /// Records that an `rdma` host exposed `len` bytes at `addr` under `rkey` (a `cma` host
    /// exposes its whole process: nothing to record); false when the link refuses it.
    pub fn expose(&self, addr: u64, len: u64, rkey: u32) -> bool {
        match self {
            Remote::Cma(_) => true,
            Remote::Rdma(l) => Self::link(l).is_some_and(|mut l| l.expose(addr, len, rkey)),
        }
    }

    /// Forgets the exposure of that region under `rkey` (`rdma`).
    pub fn withdraw(&self, addr: u64, len: u64, rkey: u32) {
        if let Remote::Rdma(l) = self {
            if let Some(mut l) = Self::link(l) {
                l.withdraw(addr, len, rkey);
            }
        }
    }

    /// How this host is reached (for logs).
    pub fn path(&self) -> String {
        match self {
            Remote::Cma(p) => format!("cma ({})", p.path()),
            Remote::Rdma(l) => Self::link(l).map_or("rdma".into(), |l| format!("rdma ({})", l.describe())),
        }
    }

    /// Why the host cannot be reached any more, if that is known (`rdma`: its link faulted;
    /// `cma` learns it from the failing job only).
    pub fn fault(&self) -> Option<LinkFault> {
        match self {
            Remote::Cma(_) => None,
            Remote::Rdma(l) => Self::link(l).and_then(|l| l.fault()),
        }
    }

    /// Whether `other` reaches the same memory (one process; one connection).
    pub fn same_memory(&self, other: &Remote) -> bool {
        match (self, other) {
            (Remote::Cma(a), Remote::Cma(b)) => a.pid() == b.pid(),
            (Remote::Rdma(a), Remote::Rdma(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether the parts of one job are carried out in order (see `Process::keeps_order`); an
    /// RDMA WRITE's placement is not ordered with the next one's until it completed: never.
    pub fn keeps_order(&self) -> bool {
        match self {
            Remote::Cma(p) => p.keeps_order(),
            Remote::Rdma(_) => false,
        }
    }

    /// Reads `out.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        self.read_many(&mut [(addr, out)])
    }

    /// Writes `data` at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> bool {
        self.write_many(&[(addr, data)])
    }

    /// Reads several ranges in one job; false unless every byte arrived.
    pub fn read_many(&self, parts: &mut [(u64, &mut [u8])]) -> bool {
        match self {
            Remote::Cma(p) => p.read_many(parts),
            Remote::Rdma(l) => Self::link(l).is_some_and(|mut l| l.read_many(parts)),
        }
    }

    /// Writes several ranges in one job, in no promised order; false unless every byte was
    /// written.
    pub fn write_many(&self, parts: &[(u64, &[u8])]) -> bool {
        match self {
            Remote::Cma(p) => p.write_many(parts),
            Remote::Rdma(l) => Self::link(l).is_some_and(|mut l| l.write_many(parts, false)),
        }
    }

    /// Writes `parts`, each visible before the next begins.
    pub fn write_in_order(&self, parts: &[(u64, &[u8])]) -> bool {
        match self {
            Remote::Cma(p) => p.write_in_order(parts),
            Remote::Rdma(l) => Self::link(l).is_some_and(|mut l| l.write_many(parts, true)),
        }
    }

    /// Reads `parts`, each after the one before is complete.
    pub fn read_in_order(&self, parts: &mut [(u64, &mut [u8])]) -> bool {
        match self {
            Remote::Cma(p) => p.read_in_order(parts),
            Remote::Rdma(l) => Self::link(l)
                .is_some_and(|mut l| parts.iter_mut().all(|p| l.read_many(std::slice::from_mut(p)))),
        }
    }
}
