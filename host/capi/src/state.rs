//! The attachment of this process — one per process, in a process-wide slot behind one lock —
//! and the calls that make, query and end it: `ringcast_init`, `ringcast_finalize`,
//! `ringcast_rank`, `ringcast_size`, `ringcast_progress`, `ringcast_unlink_job`.
//!
//! Threads: every call of the C ABI runs its step on the attachment under the lock ([`with_state`]),
//! so calls from several threads are serialized step by step; no call holds it while it waits
//! for an operation (`requests.rs` waits in slices). Uncontended, the lock costs one atomic
//! exchange per call (docs/mpi.md has the measurement).
use crate::codes::{
    code, RINGCAST_ERR_INTERNAL, RINGCAST_ERR_INVALID, RINGCAST_ERR_IO, RINGCAST_ERR_NOT_INITIALIZED,
    RINGCAST_OK,
};
use ringcast_host::{Config, Host, StatusKind};
use ringcast_offload::config::LocalRank;
use std::ffi::c_int;
use std::sync::Mutex;
use std::time::Duration;

/// The attachment of this process.
pub(crate) struct State {
    pub(crate) host: Host,
    rank: u32,
    size: u32,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Runs `f` on the attachment under the lock, turning errors and panics into codes.
pub(crate) fn with_state(f: impl FnOnce(&mut State) -> Result<c_int, c_int>) -> c_int {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut slot = STATE.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            Some(s) => f(s).unwrap_or_else(|c| c),
            None => RINGCAST_ERR_NOT_INITIALIZED,
        }
    }));
    run.unwrap_or(RINGCAST_ERR_INTERNAL)
}

/// Attaches this process to its node's engine as the `RINGCAST_*` environment says.
#[no_mangle]
pub extern "C" fn ringcast_init() -> c_int {
    let run = std::panic::catch_unwind(|| {
        let mut slot = STATE.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return RINGCAST_ERR_NOT_INITIALIZED;
        }
        let config = match Config::from_env() {
            Ok(c) => c,
            Err(_) => return RINGCAST_ERR_INVALID,
        };
        let thread = std::env::var("RINGCAST_RUN_MODE").as_deref() == Ok("thread");
        let size = config.topology.world_size();
        let topology = config.topology.clone();
        let host = if thread && config.topology.local_rank == LocalRank::Fixed(0) {
            Host::spawn_named(config)
        } else {
            Host::attach_wait(&config.runner.engine_name, Duration::from_secs(30))
        };
        match host {
            Ok(host) => match host.local_rank().and_then(|l| topology.world_rank(l)) {
                Some(rank) => {
                    *slot = Some(State { host, rank, size });
                    RINGCAST_OK
                }
                None => -(StatusKind::NoRank as c_int),
            },
            Err(e) => code(&e),
        }
    });
    run.unwrap_or(RINGCAST_ERR_INTERNAL)
}

/// Detaches: `MPI_Finalize`'s part. Once every process of the node finalized, the engine
/// settles the world's last synchronization epoch with the other engines, however many
/// collectives were posted — nobody pads epochs (a thread-mode engine of this process lingers
/// until its node's other processes and its peers are done with it).
#[no_mangle]
pub extern "C" fn ringcast_finalize() -> c_int {
    let run = std::panic::catch_unwind(|| {
        let mut slot = STATE.lock().unwrap_or_else(|e| e.into_inner());
        match slot.take() {
            Some(s) => s.host.finalize().map_or_else(|e| code(&e), |()| RINGCAST_OK),
            None => RINGCAST_ERR_NOT_INITIALIZED,
        }
    });
    run.unwrap_or(RINGCAST_ERR_INTERNAL)
}

/// This process's rank in the job's world communicator (`node * ppn + local rank`), or a
/// negative code.
#[no_mangle]
pub extern "C" fn ringcast_rank() -> c_int {
    with_state(|s| Ok(s.rank as c_int))
}

/// The job's world size (`nodes * ppn`), or a negative code.
#[no_mangle]
pub extern "C" fn ringcast_size() -> c_int {
    with_state(|s| Ok(s.size as c_int))
}

/// Runs one pass of this process's engine when it lives here (thread mode), so that operations
/// keep moving while the application waits on something else — what an MPI library's progress
/// engine calls from its own waits (the interposer's `MPI_Barrier`). Nothing in daemon mode.
/// `RINGCAST_OK`, or `RINGCAST_ERR_NOT_INITIALIZED`.
#[no_mangle]
pub extern "C" fn ringcast_progress() -> c_int {
    with_state(|s| {
        s.host.progress();
        Ok(RINGCAST_OK)
    })
}

/// Unlinks every shared-memory segment of this process's job (`RINGCAST_JOB`): for launchers
/// that are not `ringcast run` (the PMPI layer calls it from one rank after every rank's engine
/// has finished). Mappings still in use stay valid.
#[no_mangle]
pub extern "C" fn ringcast_unlink_job() -> c_int {
    match Config::from_env() {
        Ok(c) => {
            ringcast_offload::fabric::shm::cleanup(&c.topology.job).map_or(RINGCAST_ERR_IO, |_| RINGCAST_OK)
        }
        Err(_) => RINGCAST_ERR_INVALID,
    }
}
