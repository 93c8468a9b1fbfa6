//! rdma-core's error conventions turned into `Result`, in one place ([`ToResult`]):
//! * most verbs return 0 or an errno value ([`Status`]; some providers return -1 and set
//!   `errno` instead, which is handled too);
//! * librdmacm returns 0 or -1 with `errno` set ([`MinusOne`]);
//! * constructors return a pointer, NULL with `errno` set on failure.
//!
//! Every call of the fabric that can fail goes through it, so an error always names the failing
//! verb and carries the OS errno ([`VerbsError::Call`]). Also the messages of completion
//! statuses and rdmacm events.
use crate::VerbsError;
use rdma_core_sys as sys;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::NonNull;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A return value that says whether a call failed.
pub trait ToResult {
    /// What success carries.
    type Ok;
    /// `Ok` on success, else the error of verb `op`.
    fn to_result(self, op: &'static str) -> Result<Self::Ok, VerbsError>;
}

/// 0 on success, else an errno value (or -1 with `errno` set).
#[derive(Clone, Copy, Debug)]
pub struct Status(pub c_int);

impl ToResult for Status {
    type Ok = ();
    fn to_result(self, op: &'static str) -> Result<(), VerbsError> {
        match self.0 {
            0 => Ok(()),
            e if e > 0 => Err(VerbsError::call(op, e)),
            _ => Err(VerbsError::call(op, errno())),
        }
    }
}

/// 0 on success, -1 with `errno` set on failure (librdmacm).
#[derive(Clone, Copy, Debug)]
pub struct MinusOne(pub c_int);

impl ToResult for MinusOne {
    type Ok = ();
    fn to_result(self, op: &'static str) -> Result<(), VerbsError> {
        if self.0 == 0 {
            Ok(())
        } else {
            Err(VerbsError::call(op, errno()))
        }
    }
}

/// NULL on failure with `errno` set (constructors).
impl<T> ToResult for *mut T {
    type Ok = NonNull<T>;
    fn to_result(self, op: &'static str) -> Result<NonNull<T>, VerbsError> {
        NonNull::new(self).ok_or_else(|| VerbsError::call(op, errno()))
    }
}

/// libibverbs' message for a completion status.
pub fn wc_status_str(status: sys::ibv_wc_status) -> String {
    // SAFETY: returns a pointer to a static NUL-terminated string for any value ("unknown" for
    // values it does not know); checked for NULL anyway.
    let p = unsafe { sys::ibv_wc_status_str(status) };
    if p.is_null() {
        return format!("status {}", status.0);
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// librdmacm's name of an event.
pub fn event_str(event: sys::rdma_cm_event_type) -> String {
    // SAFETY: as for `ibv_wc_status_str`: a static string for any value.
    let p = unsafe { sys::rdma_event_str(event) };
    if p.is_null() {
        return format!("event {}", event.0);
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_map_to_results() {
        assert!(Status(0).to_result("ibv_modify_qp").is_ok());
        match Status(22).to_result("ibv_modify_qp") {
            Err(VerbsError::Call { op, errno, msg }) => {
                assert_eq!((op, errno), ("ibv_modify_qp", 22));
                assert!(msg.to_lowercase().contains("invalid"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        assert!(Status(-1).to_result("x").is_err());
        assert!(MinusOne(0).to_result("rdma_bind_addr").is_ok());
        assert!(matches!(
            MinusOne(-1).to_result("rdma_bind_addr"),
            Err(VerbsError::Call { op: "rdma_bind_addr", .. })
        ));
        let null: *mut u8 = std::ptr::null_mut();
        assert!(null.to_result("ibv_alloc_pd").is_err());
        let mut x = 0u8;
        assert!((&mut x as *mut u8).to_result("x").is_ok());
        let e = VerbsError::call("ibv_reg_mr", 12).to_string();
        assert!(e.contains("ibv_reg_mr") && e.contains("errno 12"), "{e}");
    }

    #[test]
    fn messages() {
        assert_eq!(wc_status_str(sys::ibv_wc_status::IBV_WC_SUCCESS), "success");
        assert_eq!(
            event_str(sys::rdma_cm_event_type::RDMA_CM_EVENT_MULTICAST_ERROR),
            "RDMA_CM_EVENT_MULTICAST_ERROR"
        );
    }
}
