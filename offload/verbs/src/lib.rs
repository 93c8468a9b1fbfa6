//! `ringcast-verbs`: safe wrappers over the rdma-core bindings (`rdma-core-sys`) — the only
//! `unsafe` code of the `verbs` fabric, in a crate of its own so that the engine
//! (`ringcast-offload`, `fabric::verbs`) is `forbid(unsafe_code)`.
//!
//! What is here knows libibverbs and librdmacm, not the protocol: no frames, no members, no
//! discovery, no configuration.
//!
//! * [`device`] — the resources, each owned by a struct whose `Drop` releases it and holding an
//!   `Arc` of its parent (the rust-ibverbs pattern): [`Context`], [`Pd`], [`Cq`], [`Mr`],
//!   [`Ah`], [`Qp`], [`Attachment`]; what a failed destroy would free is leaked instead;
//! * [`ud`] — [`UdQueue`]: one UD queue pair, its completion queue and the registered region of
//!   receive slots and send buffers it owns, with the data path as safe calls: a receive slot's
//!   bytes are lent only while it is not posted, a send buffer is written only while no send in
//!   flight uses it, and an address handle lives while a send in flight names it;
//! * [`rc`] — [`RcQueue`]: a reliable-connected queue pair with a registered local buffer,
//!   posting RDMA READ and WRITE (the engine's `rdma` DMA backend), and [`Responder`] /
//!   [`ExposedMr`]: a host's passive end and its memory registered for remote access;
//! * [`cm`] — rdmacm multicast joins ([`McastJoin`]) on an event channel ([`EventChannel`]);
//! * [`VerbsError`] — every failure, naming the verb and carrying its errno.
//!
//! The bindings are re-exported as [`sys`] for their plain data types (work completions, port
//! states, address attributes); calling their functions takes `unsafe`, which only this crate
//! does.
//!
//! # Where the unsafe code is
//!
//! In [`device`], [`cm`], [`ud`], [`rc`] and `ffi` (rdma-core's error conventions), each block with a
//! `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is denied workspace-wide). Every
//! public function is safe.

pub mod cm;
pub mod device;
mod ffi;
mod keep;
pub mod rc;
pub mod ud;

pub use cm::{EventChannel, JoinReply, McastJoin};
pub use device::{
    device_names, leak_all, leaked_resources, Ah, Attachment, Context, Cq, DeviceCaps, Mr, Pd, PortAttr, Qp,
    QpSpec,
};
pub use ffi::{event_str, wc_status_str};
pub use rc::{ExposedMr, PostError, RcAddress, RcQueue, RdmaRequest, Responder};
pub use rdma_core_sys as sys;
pub use ud::{PostRecvError, Regions, SendRequest, UdQueue, SEND_BIT};

/// The message of [`VerbsError::NoDevice`].
pub const NO_DEVICE: &str = "no RDMA device (ibv_get_device_list returned 0)";

/// Why a verbs resource could not be made, or a verb failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// `ibv_get_device_list` found no device (or the kernel has no RDMA support: `ENOSYS`).
    #[error("no RDMA device (ibv_get_device_list returned 0)")]
    NoDevice,
    /// The arguments, the device or the port do not fit together.
    #[error("verbs: {0}")]
    Invalid(String),
    /// A verb (or rdmacm call) failed.
    #[error("verbs: {op}: {msg} (errno {errno})")]
    Call {
        /// The failing verb.
        op: &'static str,
        /// The OS error number it reported.
        errno: i32,
        /// The OS's message for it.
        msg: String,
    },
    /// A multicast join did not complete: rdmacm reported an error event, or none in time.
    #[error("verbs: joining {group}: {reason}")]
    Join {
        /// The IP group (or MGID) joined.
        group: String,
        /// What happened.
        reason: String,
    },
}

impl VerbsError {
    /// The error of verb `op` failing with `errno`.
    pub fn call(op: &'static str, errno: i32) -> VerbsError {
        VerbsError::Call { op, errno, msg: std::io::Error::from_raw_os_error(errno).to_string() }
    }
}
