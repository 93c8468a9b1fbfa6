//! Requests: how a collective is posted (`start`, a fresh cookie — the request — for the
//! descriptor a collective builds) and how it is finished (`ringcast_wait`, `ringcast_test`,
//! and the blocking calls' wait, [`wait_request`]).
//!
//! A wait never holds the attachment's lock while nothing happens: it waits in slices of
//! [`WAIT_SLICE`] (the host parks on the completion doorbell within one), letting go of the lock
//! between them, so other threads of the process post, poll and wait meanwhile — their
//! collectives on other communicators may be what this one waits for at another rank.
use crate::codes::{code, completion_code, RINGCAST_ERR_INVALID, RINGCAST_OK};
use crate::state::{with_state, State};
use ringcast_host::SubmissionDescriptor;
use std::ffi::c_int;
use std::time::Duration;

/// Longest time a waiting thread holds the attachment's lock at once.
const WAIT_SLICE: Duration = Duration::from_millis(1);

/// Posts the descriptor `make` builds for a fresh cookie and stores that cookie — the request —
/// in `*request`.
///
/// # Safety
/// `request` is NULL or valid for a write; `make` upholds its own buffers' contracts.
pub(crate) unsafe fn start(
    request: *mut u64,
    make: impl FnOnce(&mut State, u64) -> Result<SubmissionDescriptor, c_int>,
) -> c_int {
    if request.is_null() {
        return RINGCAST_ERR_INVALID;
    }
    with_state(|s| {
        let cookie = s.host.next_cookie();
        let d = make(s, cookie)?;
        s.host.post(&d).map_err(|e| code(&e))?;
        // SAFETY: non-null (checked) and writable (the caller's contract).
        unsafe { request.write(d.cookie) };
        Ok(RINGCAST_OK)
    })
}

/// Posts what `make` builds and waits for it: the blocking calls.
///
/// # Safety
/// As for [`start`] (without the request).
pub(crate) unsafe fn run(make: impl FnOnce(&mut State, u64) -> Result<SubmissionDescriptor, c_int>) -> c_int {
    let mut request = 0u64;
    // SAFETY: `request` is a local, valid for a write.
    match unsafe { start(&mut request, make) } {
        RINGCAST_OK => wait_request(request),
        failed => failed,
    }
}

/// Waits for `request` in slices (see the module doc); its status.
pub(crate) fn wait_request(request: u64) -> c_int {
    loop {
        let mut done = false;
        let rc = with_state(|s| match s.host.wait_cookie_timeout(request, WAIT_SLICE) {
            Ok(Some(c)) => {
                done = true;
                Ok(completion_code(&c))
            }
            Ok(None) => Ok(RINGCAST_OK),
            Err(e) => Err(code(&e)),
        });
        if done || rc != RINGCAST_OK {
            return rc;
        }
        std::thread::yield_now(); // another thread may be waiting for the lock
    }
}

/// Waits for request `request` (from any `ringcast_i*` call, from any thread); its status.
#[no_mangle]
pub extern "C" fn ringcast_wait(request: u64) -> c_int {
    wait_request(request)
}

/// Whether request `request` is complete (`*done` = 1, the return value its status) or not yet
/// (`*done` = 0, `RINGCAST_OK`). Any thread may test any request.
///
/// # Safety
/// `done` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ringcast_test(request: u64, done: *mut c_int) -> c_int {
    if done.is_null() {
        return RINGCAST_ERR_INVALID;
    }
    with_state(|s| {
        let c = s.host.test_cookie(request).map_err(|e| code(&e))?;
        // SAFETY: non-null (checked) and writable (caller).
        unsafe { done.write(c_int::from(c.is_some())) };
        Ok(c.map_or(RINGCAST_OK, |c| completion_code(&c)))
    })
}
