//! What a verbs resource holds that must outlive it, and what happens when a destroy verb fails
//! (see `device.rs`, "A destroy that fails"): [`Keep`] releases it after a successful destroy
//! and leaks it — counted ([`leaked_resources`]) and reported on stderr — after a failed one;
//! [`leak_all`] does the same for what a caller still holds. Nothing here is `unsafe`.
use crate::ffi::errno;
use std::io::Write;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Resources left allocated because a destroy verb failed (see the module doc).
static LEAKED: AtomicU64 = AtomicU64::new(0);

/// How many resources (memory, parents, address handles) were leaked because a destroy verb
/// failed, in this process so far.
pub fn leaked_resources() -> u64 {
    // Relaxed: a counter read for reporting, ordering nothing else.
    LEAKED.load(Ordering::Relaxed)
}

/// Writes a message of the fabric to stderr, ignoring a failure to write (for `Drop`).
pub(crate) fn report(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "verbs fabric: {msg}");
}

/// The error of a destroy verb that returned `r`: 0 is success; a positive value is the errno;
/// a negative one (librdmacm's -1, or a provider's) leaves it in `errno`.
pub(crate) fn destroy_error(r: c_int) -> Option<i32> {
    match r {
        0 => None,
        e if e > 0 => Some(e),
        _ => Some(errno()),
    }
}

/// Forgets `items` (never dropping them), counting them as leaked; `what` names them for the
/// message.
pub fn leak_all<T>(items: impl IntoIterator<Item = T>, what: &str) {
    let n = items.into_iter().map(std::mem::forget).count();
    if n > 0 {
        // Relaxed: a counter.
        LEAKED.fetch_add(n as u64, Ordering::Relaxed);
        report(format_args!("{n} {what} kept (leaked): the queue pair that may use them is still there"));
    }
}

/// What a resource holds that must outlive it (see the module doc): released after its
/// destroy verb succeeded, leaked when it failed.
pub(crate) struct Keep<T>(Option<T>);

impl<T> Keep<T> {
    pub(crate) fn new(t: T) -> Keep<T> {
        Keep(Some(t))
    }

    /// The owner's destroy verb `op` returned `r`: on success what is kept is dropped now; on
    /// failure it is leaked, counted and reported. Whether the destroy succeeded.
    pub(crate) fn settle(&mut self, op: &str, r: c_int) -> bool {
        match destroy_error(r) {
            None => {
                drop(self.0.take());
                true
            }
            Some(e) => {
                if let Some(t) = self.0.take() {
                    std::mem::forget(t);
                    // Relaxed: a counter.
                    LEAKED.fetch_add(1, Ordering::Relaxed);
                }
                report(format_args!(
                    "{op}: {}; what it holds (parents, memory) is leaked, not freed",
                    std::io::Error::from_raw_os_error(e)
                ));
                false
            }
        }
    }
}
