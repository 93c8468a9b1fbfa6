//! The C ABI's status codes: `RINGCAST_OK`, the engine's completion statuses negated
//! (`-1..-99`, one named constant each), the library's own (`-100` and below), the mapping of
//! host-library errors and completions to them, and `ringcast_strerror`.
use ringcast_host::{Completion, Error, StatusKind};
use std::ffi::{c_char, c_int, CString};
use std::sync::OnceLock;

/// Success.
pub const RINGCAST_OK: c_int = 0;
/// The descriptor's opcode is unknown to the engine (a library older than the engine's ABI). `-(StatusKind::UnknownOpcode)`.
pub const RINGCAST_ERR_UNKNOWN_OPCODE: c_int = -1;
/// A length is zero or exceeds the engine's limit (`RINGCAST_MAX_MESSAGE_BYTES`). `-(StatusKind::BadLength)`.
pub const RINGCAST_ERR_BAD_LENGTH: c_int = -2;
/// A buffer's region is not registered with the engine. `-(StatusKind::UnknownRegion)`.
pub const RINGCAST_ERR_UNKNOWN_REGION: c_int = -3;
/// An offset and length reach outside the registered buffer. `-(StatusKind::OutOfBounds)`.
pub const RINGCAST_ERR_OUT_OF_BOUNDS: c_int = -4;
/// The buffer lacks the access the operation needs (read or write). `-(StatusKind::AccessDenied)`.
pub const RINGCAST_ERR_ACCESS_DENIED: c_int = -5;
/// Reserved descriptor flags are set. `-(StatusKind::BadFlags)`.
pub const RINGCAST_ERR_BAD_FLAGS: c_int = -6;
/// The descriptor's fields do not fit its opcode (e.g. an unknown type or operation). `-(StatusKind::BadDescriptor)`.
pub const RINGCAST_ERR_BAD_DESCRIPTOR: c_int = -7;
/// The engine is shutting down: the operation was answered without running. `-(StatusKind::EngineShutdown)`.
pub const RINGCAST_ERR_ENGINE_SHUTDOWN: c_int = -8;
/// Send and receive ranges overlap without being in place. `-(StatusKind::Overlap)`.
pub const RINGCAST_ERR_OVERLAP: c_int = -9;
/// The communicator handle names no communicator of this process's engine (never created, or
/// freed). `-(StatusKind::UnknownCommunicator)`.
pub const RINGCAST_ERR_UNKNOWN_COMMUNICATOR: c_int = -10;
/// The root rank is outside the communicator. `-(StatusKind::BadRoot)`.
pub const RINGCAST_ERR_BAD_ROOT: c_int = -11;
/// The message length differs from the root's. `-(StatusKind::LengthMismatch)`.
pub const RINGCAST_ERR_LENGTH_MISMATCH: c_int = -12;
/// A rank stopped answering (dead process or engine): the operation failed within
/// `RINGCAST_PEER_TIMEOUT_MS`. `-(StatusKind::PeerUnreachable)`.
pub const RINGCAST_ERR_PEER_UNREACHABLE: c_int = -13;
/// The communicator is broken by an unreachable rank: create a new one. `-(StatusKind::CommunicatorBroken)`.
pub const RINGCAST_ERR_COMMUNICATOR_BROKEN: c_int = -14;
/// The reassembled message failed its end-to-end digest: altered on the way, or the ranks
/// posted different calls (count, type, operation or collective). `-(StatusKind::DigestMismatch)`.
pub const RINGCAST_ERR_DIGEST_MISMATCH: c_int = -15;
/// A rank's part could not be read (its buffer failed, or its call was refused for its
/// buffers): the collective was aborted. `-(StatusKind::RootFailed)`.
pub const RINGCAST_ERR_ROOT_FAILED: c_int = -16;
/// This process holds no rank in the communicator. `-(StatusKind::NoRank)`.
pub const RINGCAST_ERR_NO_RANK: c_int = -17;
/// `ringcast_comm_create` refused: the engine serves its maximum number of communicators
/// (`RINGCAST_MAX_COMMS`, the world included). Free one first; a freed communicator's slot
/// comes back once its broadcasts are settled (eight repair timeouts later at an engine that
/// synchronized others, a lost last `SYNC_DOWN` being asked for again meanwhile; at once if
/// nothing was broadcast on it). `-(StatusKind::TooManyCommunicators)`.
pub const RINGCAST_ERR_TOO_MANY_COMMUNICATORS: c_int = -18;
/// This process freed the communicator (`ringcast_comm_free`) while this collective was in
/// flight on it, or another local member did before posting it: it can never complete (no
/// rank was lost). `-(StatusKind::CommunicatorFreed)`.
pub const RINGCAST_ERR_COMMUNICATOR_FREED: c_int = -19;

/// Every engine status with its named code (the test checks it covers every status).
#[cfg(test)]
const STATUS_CODES: [(c_int, StatusKind); 19] = [
    (RINGCAST_ERR_UNKNOWN_OPCODE, StatusKind::UnknownOpcode),
    (RINGCAST_ERR_BAD_LENGTH, StatusKind::BadLength),
    (RINGCAST_ERR_UNKNOWN_REGION, StatusKind::UnknownRegion),
    (RINGCAST_ERR_OUT_OF_BOUNDS, StatusKind::OutOfBounds),
    (RINGCAST_ERR_ACCESS_DENIED, StatusKind::AccessDenied),
    (RINGCAST_ERR_BAD_FLAGS, StatusKind::BadFlags),
    (RINGCAST_ERR_BAD_DESCRIPTOR, StatusKind::BadDescriptor),
    (RINGCAST_ERR_ENGINE_SHUTDOWN, StatusKind::EngineShutdown),
    (RINGCAST_ERR_OVERLAP, StatusKind::Overlap),
    (RINGCAST_ERR_UNKNOWN_COMMUNICATOR, StatusKind::UnknownCommunicator),
    (RINGCAST_ERR_BAD_ROOT, StatusKind::BadRoot),
    (RINGCAST_ERR_LENGTH_MISMATCH, StatusKind::LengthMismatch),
    (RINGCAST_ERR_PEER_UNREACHABLE, StatusKind::PeerUnreachable),
    (RINGCAST_ERR_COMMUNICATOR_BROKEN, StatusKind::CommunicatorBroken),
    (RINGCAST_ERR_DIGEST_MISMATCH, StatusKind::DigestMismatch),
    (RINGCAST_ERR_ROOT_FAILED, StatusKind::RootFailed),
    (RINGCAST_ERR_NO_RANK, StatusKind::NoRank),
    (RINGCAST_ERR_TOO_MANY_COMMUNICATORS, StatusKind::TooManyCommunicators),
    (RINGCAST_ERR_COMMUNICATOR_FREED, StatusKind::CommunicatorFreed),
];

/// The engine went away.
pub const RINGCAST_ERR_ENGINE_GONE: c_int = -100;
/// A control request or a wait timed out.
pub const RINGCAST_ERR_TIMEOUT: c_int = -101;
/// The submission ring is full.
pub const RINGCAST_ERR_WOULD_BLOCK: c_int = -102;
/// Nothing of that request is outstanding.
pub const RINGCAST_ERR_NO_REQUEST: c_int = -103;
/// The operating system refused something (mapping, socket, ...).
pub const RINGCAST_ERR_IO: c_int = -104;
/// `ringcast_init` has not run (or failed), or ran twice.
pub const RINGCAST_ERR_NOT_INITIALIZED: c_int = -105;
/// A pointer or length argument is invalid.
pub const RINGCAST_ERR_INVALID: c_int = -106;
/// The engine refused an attach or a registration, or another library error.
pub const RINGCAST_ERR_REFUSED: c_int = -107;
/// A bug inside the library (a panic, caught).
pub const RINGCAST_ERR_INTERNAL: c_int = -108;

/// The code of a host-library error.
pub(crate) fn code(e: &Error) -> c_int {
    match e {
        Error::Op { status, .. } => -c_int::from(status.0.min(99)),
        Error::TooManyCommunicators { .. } => RINGCAST_ERR_TOO_MANY_COMMUNICATORS,
        Error::EngineGone | Error::Detached { .. } => RINGCAST_ERR_ENGINE_GONE,
        Error::Timeout { .. } => RINGCAST_ERR_TIMEOUT,
        Error::WouldBlock { .. } => RINGCAST_ERR_WOULD_BLOCK,
        Error::NothingInFlight { .. } => RINGCAST_ERR_NO_REQUEST,
        Error::Io(_) => RINGCAST_ERR_IO,
        _ => RINGCAST_ERR_REFUSED,
    }
}

/// The code of a completion's status.
pub(crate) fn completion_code(c: &Completion) -> c_int {
    match StatusKind::try_from(c.status) {
        Ok(StatusKind::Ok) => RINGCAST_OK,
        _ => -c_int::from(c.status.0.min(99)),
    }
}

/// The message of `code` (a static string; never NULL).
#[no_mangle]
pub extern "C" fn ringcast_strerror(code: c_int) -> *const c_char {
    static MESSAGES: OnceLock<Vec<(c_int, CString)>> = OnceLock::new();
    let table = MESSAGES.get_or_init(|| {
        let own: [(c_int, &str); 10] = [
            (RINGCAST_OK, "ok"),
            (RINGCAST_ERR_ENGINE_GONE, "the engine went away"),
            (RINGCAST_ERR_TIMEOUT, "the engine did not answer in time"),
            (RINGCAST_ERR_WOULD_BLOCK, "the submission ring is full"),
            (RINGCAST_ERR_NO_REQUEST, "no such request outstanding"),
            (RINGCAST_ERR_IO, "an operating-system call failed"),
            (RINGCAST_ERR_NOT_INITIALIZED, "ringcast_init has not run (or ran twice)"),
            (RINGCAST_ERR_INVALID, "invalid argument (NULL pointer, length or range)"),
            (RINGCAST_ERR_REFUSED, "the engine refused the request"),
            (RINGCAST_ERR_INTERNAL, "internal error in libringcast"),
        ];
        let statuses = StatusKind::ALL.iter().map(|&k| (-(k as c_int), k.message()));
        own.into_iter().chain(statuses).filter_map(|(c, m)| CString::new(m).ok().map(|m| (c, m))).collect()
    });
    table
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"unknown ringcast error code".as_ptr(), |(_, m)| m.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_named_code_and_a_message() {
        for k in StatusKind::ALL.iter().copied().filter(|&k| k != StatusKind::Ok) {
            let named = STATUS_CODES.iter().find(|(_, s)| *s == k);
            assert_eq!(named.map(|(c, _)| *c), Some(-(k as c_int)), "{k:?} has no RINGCAST_ERR_ constant");
            // SAFETY: `ringcast_strerror` returns a pointer to a static NUL-terminated string.
            let msg = unsafe { std::ffi::CStr::from_ptr(ringcast_strerror(-(k as c_int))) };
            assert_eq!(msg.to_str(), Ok(k.message()));
        }
        for own in -108..=-100 {
            // SAFETY: as above.
            let msg = unsafe { std::ffi::CStr::from_ptr(ringcast_strerror(own)) };
            assert_ne!(msg.to_str(), Ok("unknown ringcast error code"), "{own}");
        }
    }

    #[test]
    fn named_status_codes_are_the_negated_statuses() {
        assert_eq!(RINGCAST_ERR_UNKNOWN_COMMUNICATOR, -(StatusKind::UnknownCommunicator as c_int));
        assert_eq!(RINGCAST_ERR_TOO_MANY_COMMUNICATORS, -(StatusKind::TooManyCommunicators as c_int));
        let e = Error::TooManyCommunicators { handle: 7 };
        assert_eq!(code(&e), RINGCAST_ERR_TOO_MANY_COMMUNICATORS);
        // SAFETY: `ringcast_strerror` returns a pointer to a static NUL-terminated string.
        let msg = unsafe { std::ffi::CStr::from_ptr(ringcast_strerror(RINGCAST_ERR_TOO_MANY_COMMUNICATORS)) };
        assert_eq!(msg.to_str(), Ok(StatusKind::TooManyCommunicators.message()));
    }
}
