//! `ringcast-host`: the host side of the ringcast offload engine.
//!
//! A [`Host`] attaches to an engine — a daemon by name or across the PCIe boundary by
//! `tcp://ip:port` ([`Host::attach`]), or a polling thread it starts in this process
//! ([`Host::spawn_local`]) — and gets a submission ring and a completion ring: in shared memory
//! the engine built (DMA backend `mapped`), or in this process's own memory, which the engine
//! reaches only by DMA (`cma`: over TCP always, else with `RINGCAST_DMA=cma`). It registers
//! memory (see "the registration rule" below), posts descriptors that name that memory by
//! (region key, offset, length), and reaps one completion per descriptor, non-blocking
//! ([`Host::try_post`], [`Host::poll`]) or blocking ([`Host::post`], [`Host::wait`]).
//!
//! **The registration rule.** An engine only ever touches memory a host registered, and only
//! within the registered range and access rights. With `mapped`, registered memory must be
//! *shared*: a [`SharedBuf`] — a memfd sealed against shrinking, mapped by both the host and the
//! engine (the seal matters: without it a host could truncate the file under the engine's
//! copy). With `cma`, a [`SharedBuf`] registers by address, and so does any memory of this
//! process ([`Host::register_memory`]: an MPI user buffer in place), which the engine reaches by
//! cross-memory attach, as a DPU reaches host memory by RDMA — never by pointer. A program using
//! [`SharedBuf`]s runs unchanged on both.
//!
//! **Back-pressure.** Every descriptor produces exactly one completion. The host keeps at most
//! as many descriptors in flight as its completion ring holds (`WouldBlock` otherwise), and the
//! engine never takes a descriptor it has no completion slot for, so no completion is dropped.
mod collectives;
mod error;
mod handshake;
mod host;
pub mod netns;
mod queries;
mod rdma;
mod regions;
pub mod selftest;
mod shared_buf;

pub use error::{Error, Result};
pub use handshake::AttachOptions;
pub use host::Host;
pub use queries::{CommInfo, CommStats, EngineStats, NetStats};
pub use regions::Region;
pub use ringcast_abi::{
    Access, Completion, DataType, ReduceOp, RegionKey, RegionRef, Status, StatusKind, SubmissionDescriptor,
};
pub use ringcast_offload::Config;
pub use shared_buf::SharedBuf;
