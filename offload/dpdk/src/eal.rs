//! The EAL's life in this process: DPDK initialises its environment abstraction layer at most
//! once per process and cannot initialise it again after `rte_eal_cleanup`, so one process-wide
//! guard owns it.
//!
//! Contract:
//! * [`Eal::acquire`] initialises the EAL with the given arguments on first use and returns a
//!   shared handle; asked again while a handle lives, it returns the same EAL if the arguments
//!   are identical, and [`DpdkError::Eal`] naming both argument lists if not. After the last
//!   handle is gone (cleanup done) or after a failed initialisation, every request is refused
//!   with an error saying so: DPDK offers no second initialisation.
//! * Every DPDK object (pool, port) holds an `Arc<Eal>`, so `rte_eal_cleanup` runs only after
//!   the last of them was released — when the last handle drops. Cleanup then removes the
//!   EAL's (empty) runtime directory, which DPDK creates even with `--no-shconf` and leaves
//!   behind.
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
    /// Cleaned up after its last handle went.
    Ended { args: Vec<String> },
}

static STATE: Mutex<State> = Mutex::new(State::Never);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The initialised EAL (see the module doc).
pub struct Eal {
    args: Vec<String>,
    /// The C strings `rte_eal_init` was given: kept until after `rte_eal_cleanup`, since DPDK
    /// may hold on to pointers into its `argv` (device arguments).
    _argv: Vec<CString>,
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
                        "the EAL is being cleaned up; DPDK cannot initialise it again in this process".into(),
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
                    "the EAL (initialised with {ended:?}) was cleaned up; DPDK cannot initialise it again in this process"
                )));
            }
            State::Never => {}
        }
        match init(&args) {
            Ok((argv, runtime_dir)) => {
                let eal = Arc::new(Eal {
                    args: args.clone(),
                    _argv: argv,
                    runtime_dir,
                    ports: Mutex::new(Vec::new()),
                });
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

    /// The runtime directory DPDK created (removed at cleanup).
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
    // caller keeps alive until after `rte_eal_cleanup`; DPDK does not write through them. This
    // is the process's only call (the state guard, held by the caller, ensures it).
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
    fn drop(&mut self) {
        // Held across the wait below too: nobody starts an EAL while this one is ending.
        let mut st = state();
        // Let the EAL's interrupt thread finish what it started before the memory goes: a
        // driver's control callback may still run there for a port already closed (memif's
        // control channel, on the peer's hang-up, defers its own unregistration), and
        // `rte_eal_cleanup` unmaps the memory it works on under it — an engine then died of
        // SIGSEGV at exit in ~1 of 25 memif runs (hw-tests/tests/memif_bcast.rs; core: memif's
        // handler on `eal-intr-thread` while the main thread was in `rte_mem_unmap`). Closed
        // ports have no descriptor left in the interrupt thread's epoll set, so nothing new can
        // start; 20 ms covers one that already had. Once per process.
        std::thread::sleep(std::time::Duration::from_millis(20));
        // SAFETY: this was the last handle: every port (closed) and pool (freed) held one, so no
        // DPDK object of this process is in use; the EAL was initialised and is cleaned up once.
        let r = unsafe { dpdk_sys::rte_eal_cleanup() };
        if r != 0 {
            // Never panic in Drop; say it.
            eprintln!("dpdk fabric: rte_eal_cleanup: {}", crate::ffi::strerror(r.saturating_neg()));
        }
        if let Some(dir) = &self.runtime_dir {
            // Empty with --no-shconf/--in-memory; a non-empty one (another configuration) stays.
            let _ = std::fs::remove_dir(dir);
        }
        *st = State::Ended { args: std::mem::take(&mut self.args) };
    }
}
