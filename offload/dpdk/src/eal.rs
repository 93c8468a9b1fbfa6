//! The EAL's life in this process: DPDK initialises its environment abstraction layer at most
//! once per process and cannot initialise it again, so one process-wide guard owns it.
//!
//! Contract:
//! * [`Eal::acquire`] initialises the EAL with the given arguments on first use and returns a
//!   shared handle; asked again while a handle lives, it returns the same EAL if the arguments
//!   are identical, and [`DpdkError::Eal`] naming both argument lists if not. After the last
//!   handle is gone (the EAL ended) or after a failed initialisation, every request is refused
//!   with an error saying so: DPDK offers no second initialisation.
//! * Every DPDK object (pool, port) holds an `Arc<Eal>`, so the EAL ends only after the last of
//!   them was released — when the last handle drops. Ending removes the EAL's (empty) runtime
//!   directory, which DPDK creates even with `--no-shconf` and leaves behind.
//! * `rte_eal_cleanup` is never called: DPDK 22.11's unmaps the EAL's memory but does not stop
//!   the EAL's interrupt thread, which may at that moment still be walking its interrupt
//!   sources — in that memory — to rebuild its wait set after a registration changed (a port's
//!   close, the peer's hang-up). An engine on `net_memif` died of exactly that at exit (core:
//!   `eal-intr-thread` in `rte_intr_fd_get`, called from the interrupt thread's rebuild loop,
//!   while the main thread was in `munmap` under `rte_mem_unmap`), between one run of
//!   `hw-tests/tests/memif_bcast.rs` in thirty and one in a few hundred, by the machine's load;
//!   a 20 ms grace period before the cleanup made it rarer but could not close it — an
//!   interrupt thread preempted for longer outlasts any sleep. The EAL's memory is anonymous
//!   (`--no-huge`) or memfd-backed (`--in-memory`), with no shared configuration
//!   (`--no-shconf`): it goes with the process, whose exit stops every thread first; the
//!   process cannot initialise DPDK again anyway. Closed ports and a freed pool are all a
//!   process still running after its EAL ended needs.
//! * The calling thread's CPU affinity is the same after initialisation as before (the EAL
//!   pins its main thread to its main lcore's CPUs; the runner decides pinning).
//! * Each port is claimed by one fabric at a time ([`Eal::claim_port`]).
//! * Nothing here panics; a poisoned lock is recovered (its state is plain data).
use crate::ffi::{MinusOneErrno, ToResult};
use crate::DpdkError;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Where this process's EAL stands.
enum State {
    /// Not initialised yet.
    Never,
    /// Initialised with `args`; alive while a handle is.
    Live { args: Vec<String>, eal: Weak<Eal> },
    /// `rte_eal_init` failed; DPDK may not be retried reliably.
    Failed { args: Vec<String>, error: String },
    /// Ended after its last handle went.
    Ended { args: Vec<String> },
}

static STATE: Mutex<State> = Mutex::new(State::Never);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The initialised EAL (see the module doc).
pub struct Eal {
    args: Vec<String>,
    /// The C strings `rte_eal_init` was given: DPDK may hold on to pointers into its `argv`
    /// (device arguments), and the EAL is never cleaned up, so they are leaked when it ends.
    argv: Vec<CString>,
    runtime_dir: Option<PathBuf>,
    ports: Mutex<Vec<u16>>,
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal").field("args", &self.args).field("runtime_dir", &self.runtime_dir).finish()
    }
}

impl Eal {
    /// The EAL initialised with `args` (`args[0]` is the program name); see the module doc.
    pub fn acquire(args: Vec<String>) -> Result<Arc<Eal>, DpdkError> {
        let mut st = state();
        match &*st {
            State::Live { args: live, eal } => {
                if *live != args {
                    return Err(DpdkError::Eal(format!(
                        "the EAL is initialised once per process and already runs with {live:?}; asked for {args:?}"
                    )));
                }
                // Same arguments: share it (its last handle may be dropping right now, then
                // it is gone).
                return eal.upgrade().ok_or_else(|| {
                    DpdkError::Eal(
                        "the EAL is ending with its last user; DPDK cannot initialise it again in this process".into(),
                    )
                });
            }
            State::Failed { args: tried, error } => {
                return Err(DpdkError::Eal(format!(
                    "EAL initialisation with {tried:?} failed earlier in this process ({error}); DPDK cannot retry it"
                )));
            }
            State::Ended { args: ended } => {
                return Err(DpdkError::Eal(format!(
                    "the EAL (initialised with {ended:?}) ended with its last user; DPDK cannot initialise it again in this process"
                )));
            }
            State::Never => {}
        }
        match init(&args) {
            Ok((argv, runtime_dir)) => {
                let eal =
                    Arc::new(Eal { args: args.clone(), argv, runtime_dir, ports: Mutex::new(Vec::new()) });
                *st = State::Live { args, eal: Arc::downgrade(&eal) };
                Ok(eal)
            }
            Err(e) => {
                *st = State::Failed { args, error: e.to_string() };
                Err(e)
            }
        }
    }

    /// The arguments it was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The runtime directory DPDK created (removed when the EAL ends).
    pub fn runtime_dir(&self) -> Option<&std::path::Path> {
        self.runtime_dir.as_deref()
    }

    /// Marks `port` as used by one fabric; `Err` if another fabric of this process has it.
    pub fn claim_port(&self, port: u16) -> Result<(), DpdkError> {
        let mut ports = self.ports.lock().unwrap_or_else(PoisonError::into_inner);
        if ports.contains(&port) {
            return Err(DpdkError::Invalid(format!(
                "port {port} is already used by another fabric of this process"
            )));
        }
        ports.push(port);
        Ok(())
    }

    /// Releases a [`Eal::claim_port`].
    pub fn release_port(&self, port: u16) {
        self.ports.lock().unwrap_or_else(PoisonError::into_inner).retain(|&p| p != port);
    }
}

/// `rte_eal_init(args)`, keeping the calling thread's CPU affinity; returns the argument
/// storage and the runtime directory.
fn init(args: &[String]) -> Result<(Vec<CString>, Option<PathBuf>), DpdkError> {
    let argv: Vec<CString> = args
        .iter()
        .map(|a| {
            CString::new(a.as_str())
                .map_err(|_| DpdkError::Invalid(format!("EAL argument {a:?} contains NUL")))
        })
        .collect::<Result<_, _>>()?;
    // The EAL may permute the pointer array (getopt); the strings stay where they are.
    let mut ptrs: Vec<*mut c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    let argc = i32::try_from(ptrs.len()).map_err(|_| DpdkError::Invalid("too many EAL arguments".into()))?;
    let affinity = rustix::thread::sched_getaffinity(None).ok();
    // SAFETY: `ptrs` holds `argc` pointers to NUL-terminated strings owned by `argv`, which the
    // caller keeps alive for the rest of the process (leaked when the EAL ends); DPDK does not
    // write through them. This is the process's only call (the state guard, held by the
    // caller, ensures it).
    let parsed = unsafe { dpdk_sys::rte_eal_init(argc, ptrs.as_mut_ptr()) };
    if let Some(set) = &affinity {
        // Best effort: an EAL that could not change affinity left it as it was.
        let _ = rustix::thread::sched_setaffinity(None, set);
    }
    MinusOneErrno(parsed).to_result("rte_eal_init")?;
    // SAFETY: the EAL is initialised; the returned string is owned by the EAL and copied at once.
    let dir = unsafe { dpdk_sys::rte_eal_get_runtime_dir() };
    let runtime_dir = (!dir.is_null()).then(|| {
        // SAFETY: non-null, NUL-terminated, valid while the EAL is.
        PathBuf::from(unsafe { CStr::from_ptr(dir) }.to_string_lossy().into_owned())
    });
    Ok((argv, runtime_dir))
}

impl Drop for Eal {
    /// The EAL ends: its runtime directory goes and no second one can start. Not
    /// `rte_eal_cleanup` (module documentation): the memory stays mapped for DPDK's interrupt
    /// thread until the process exits.
    fn drop(&mut self) {
        let mut st = state();
        // DPDK may still point into them (see `argv`).
        std::mem::forget(std::mem::take(&mut self.argv));
        if let Some(dir) = &self.runtime_dir {
            // Empty with --no-shconf/--in-memory; a non-empty one (another configuration) stays.
            let _ = std::fs::remove_dir(dir);
        }
        *st = State::Ended { args: std::mem::take(&mut self.args) };
    }
}
