//! DPDK's error conventions turned into `Result`, in one place ([`ToResult`]): a negative
//! errno returned by an ethdev call, or `-1`/NULL with the reason in `rte_errno`
//! (`rte_eal_init`, `rte_pktmbuf_pool_create`). Every `dpdk_sys` call of the fabric that can
//! fail goes through it, so an error always names the failing call and carries DPDK's errno and
//! message.
use crate::DpdkError;
use std::ffi::CStr;
use std::ptr::NonNull;

/// The errno of the calling thread's last DPDK failure.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local integer; valid on any thread, before or after the EAL.
    unsafe { dpdk_sys::rc_rte_errno() }
}

/// DPDK's message for `errno` (its own codes above `__ELASTERROR` included).
pub fn strerror(errno: i32) -> String {
    // SAFETY: `rte_strerror` returns a pointer to a static string or to a thread-local buffer
    // that stays valid until this thread's next call; it is copied out at once.
    let msg = unsafe { dpdk_sys::rte_strerror(errno) };
    if msg.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: non-null, NUL-terminated (see above).
    unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
}

/// The error for call `op` failing with `errno`.
pub fn call_error(op: &'static str, errno: i32) -> DpdkError {
    DpdkError::Call { op, errno, msg: strerror(errno) }
}

/// A DPDK return value that says whether the call failed.
pub trait ToResult {
    /// What success carries.
    type Ok;
    /// `Ok` on success, else the error of call `op`.
    fn to_result(self, op: &'static str) -> Result<Self::Ok, DpdkError>;
}

/// Negative errno on failure, a non-negative count or zero on success (ethdev).
impl ToResult for i32 {
    type Ok = u32;
    fn to_result(self, op: &'static str) -> Result<u32, DpdkError> {
        u32::try_from(self).map_err(|_| call_error(op, self.saturating_neg()))
    }
}

/// `-1` (or any negative value) on failure with the reason in `rte_errno` (`rte_eal_init`).
#[derive(Clone, Copy, Debug)]
pub struct MinusOneErrno(pub i32);

impl ToResult for MinusOneErrno {
    type Ok = u32;
    fn to_result(self, op: &'static str) -> Result<u32, DpdkError> {
        u32::try_from(self.0).map_err(|_| call_error(op, rte_errno()))
    }
}

/// NULL on failure with the reason in `rte_errno` (constructors).
impl<T> ToResult for *mut T {
    type Ok = NonNull<T>;
    fn to_result(self, op: &'static str) -> Result<NonNull<T>, DpdkError> {
        NonNull::new(self).ok_or_else(|| call_error(op, rte_errno()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_map_to_results() {
        assert_eq!(0i32.to_result("x").ok(), Some(0));
        assert_eq!(7i32.to_result("x").ok(), Some(7));
        match (-95i32).to_result("rte_eth_dev_set_mc_addr_list") {
            Err(DpdkError::Call { op, errno, msg }) => {
                assert_eq!((op, errno), ("rte_eth_dev_set_mc_addr_list", 95));
                assert!(!msg.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(i32::MIN.to_result("x"), Err(DpdkError::Call { errno: i32::MAX, .. })));
        assert!(MinusOneErrno(-1).to_result("rte_eal_init").is_err());
        assert_eq!(MinusOneErrno(5).to_result("rte_eal_init").ok(), Some(5));
        let null: *mut u8 = std::ptr::null_mut();
        assert!(null.to_result("rte_pktmbuf_pool_create").is_err());
        let mut x = 1u8;
        assert_eq!((&mut x as *mut u8).to_result("x").ok(), NonNull::new(&mut x as *mut u8));
        // DPDK's messages: libc's for ordinary codes.
        assert!(strerror(17).to_lowercase().contains("exists"), "{}", strerror(17));
    }
}
