//! `ringcast-dpdk`: safe wrappers over the DPDK bindings (`ringcast-dpdk-sys`, `dpdk_sys`) — the
//! only `unsafe` code of the `dpdk` fabric, in a crate of its own so that the engine
//! (`ringcast-offload`, `fabric::dpdk`) is `forbid(unsafe_code)`.
//!
//! What is here knows DPDK and Linux, not the protocol: no frames, no members, no configuration.
//!
//! * [`Eal`] — the EAL's life in this process: initialised once with the given arguments,
//!   shared, ended after its last user (its runtime directory removed; never `rte_eal_cleanup`,
//!   which unmaps memory under DPDK's still running interrupt thread) ([`eal`]);
//! * [`Port`] — one ethdev port with one receive and one transmit queue, its mbuf pool and mbuf
//!   ownership: frames queued into mbufs and sent in bursts, received frames lent to a closure
//!   and freed after it, multicast filter and receive modes, statistics ([`port`]);
//! * [`KernelGroups`] — multicast MACs on the kernel network device under a port (`net_af_xdp`)
//!   through a packet-socket membership ([`kernel_mc`]);
//! * [`DpdkError`] — every failure, naming the call and carrying DPDK's errno and message.
//!
//! MAC addresses are plain [`EtherAddr`] bytes; the engine's framing wraps them.
//!
//! # Where the unsafe code is
//!
//! In [`eal`], [`port`], `ffi` (DPDK's error conventions) and [`kernel_mc`] (one `setsockopt`),
//! each block with a `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is denied
//! workspace-wide). Every public function is safe.

pub mod eal;
mod ffi;
pub mod kernel_mc;
pub mod port;

pub use eal::Eal;
pub use kernel_mc::KernelGroups;
pub use port::{Port, PortSpec, PortStats, Queued, RX_BURST, TX_BURST};

/// An Ethernet (MAC) address, in wire order.
pub type EtherAddr = [u8; 6];

/// Bytes DPDK keeps free before the data of every mbuf (`RTE_PKTMBUF_HEADROOM`): part of the
/// data room a pool is created with.
pub const PKTMBUF_HEADROOM: u32 = dpdk_sys::RTE_PKTMBUF_HEADROOM;

/// Why a DPDK object could not be set up, or a DPDK call failed.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// The arguments, or the port, do not fit together.
    #[error("dpdk: {0}")]
    Invalid(String),
    /// A DPDK (or OS) call failed.
    #[error("dpdk: {op}: {msg} (errno {errno})")]
    Call {
        /// The failing call.
        op: &'static str,
        /// DPDK's (or the OS's) errno.
        errno: i32,
        /// DPDK's message for it.
        msg: String,
    },
    /// The EAL cannot be (re)initialised as asked.
    #[error("dpdk: EAL: {0}")]
    Eal(String),
}
