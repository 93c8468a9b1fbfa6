//! What goes wrong in the verbs fabric: [`VerbsError`] (the failing verb and its errno, or why
//! the fabric could not be built), its I/O-error form, and [`devices`], which the
//! hardware-in-the-loop tests ask whether they can run at all.
/// The message of [`VerbsError::NoDevice`], which `hw-tests` prints after `SKIP: `.
pub const NO_DEVICE: &str = "no RDMA device (ibv_get_device_list returned 0)";

/// Why the verbs fabric could not be built, or a verb failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// `ibv_get_device_list` found no device (or the kernel has no RDMA support: `ENOSYS`).
    #[error("no RDMA device (ibv_get_device_list returned 0)")]
    NoDevice,
    /// The configuration, the device or the port do not fit together.
    #[error("verbs fabric: {0}")]
    Invalid(String),
    /// A verb (or rdmacm call) failed.
    #[error("verbs fabric: {op}: {msg} (errno {errno})")]
    Call {
        /// The failing verb.
        op: &'static str,
        /// The OS error number it reported.
        errno: i32,
        /// The OS's message for it.
        msg: String,
    },
    /// A multicast join did not complete: rdmacm reported an error event, or none in time.
    #[error("verbs fabric: joining {group}: {reason}")]
    Join {
        /// The IP group (or MGID) joined.
        group: String,
        /// What happened.
        reason: String,
    },
    /// This engine was built without the `verbs` cargo feature.
    #[error("verbs fabric: this engine was built without the `verbs` feature")]
    NotBuilt,
}

impl VerbsError {
    /// The error of verb `op` failing with `errno`.
    pub fn call(op: &'static str, errno: i32) -> VerbsError {
        VerbsError::Call { op, errno, msg: std::io::Error::from_raw_os_error(errno).to_string() }
    }
}

/// The device crate's errors, variant for variant (its messages under this crate's prefix).
#[cfg(feature = "verbs")]
impl From<ringcast_verbs::VerbsError> for VerbsError {
    fn from(e: ringcast_verbs::VerbsError) -> VerbsError {
        match e {
            ringcast_verbs::VerbsError::NoDevice => VerbsError::NoDevice,
            ringcast_verbs::VerbsError::Invalid(m) => VerbsError::Invalid(m),
            ringcast_verbs::VerbsError::Call { op, errno, msg } => VerbsError::Call { op, errno, msg },
            ringcast_verbs::VerbsError::Join { group, reason } => VerbsError::Join { group, reason },
        }
    }
}

impl From<VerbsError> for std::io::Error {
    fn from(e: VerbsError) -> std::io::Error {
        let kind = match &e {
            VerbsError::NoDevice => std::io::ErrorKind::NotFound,
            VerbsError::Invalid(_) => std::io::ErrorKind::InvalidInput,
            VerbsError::Call { errno, .. } => std::io::Error::from_raw_os_error(*errno).kind(),
            VerbsError::Join { .. } => std::io::ErrorKind::TimedOut,
            VerbsError::NotBuilt => std::io::ErrorKind::Unsupported,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

/// The RDMA devices on this machine, by name: [`VerbsError::NoDevice`] when there is none,
/// [`VerbsError::NotBuilt`] without the `verbs` feature. Safe to call anywhere (the
/// hardware-in-the-loop tests decide with it whether they can run).
pub fn devices() -> Result<Vec<String>, VerbsError> {
    #[cfg(feature = "verbs")]
    {
        ringcast_verbs::device_names().map_err(VerbsError::from)
    }
    #[cfg(not(feature = "verbs"))]
    {
        Err(VerbsError::NotBuilt)
    }
}
