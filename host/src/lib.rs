//! `ringcast-host`: the host side of the ringcast offload engine.
//!
//! A [`Host`] attaches to an engine — a daemon by name ([`Host::attach`]) or a polling thread it
//! starts in this process ([`Host::spawn_local`]) — and gets a submission ring and a completion
//! ring in shared memory. It registers memory allocated with [`SharedBuf`] (the only memory an
//! engine can reach: see "the registration rule" below), posts descriptors that name that memory
//! by (region key, offset, length), and reaps one completion per descriptor, non-blocking
//! ([`Host::try_post`], [`Host::poll`]) or blocking ([`Host::post`], [`Host::wait`]).
//!
//! **The registration rule.** An engine only ever touches memory a host registered, and only
//! within the registered range and access rights. Registered memory must be *shared*: it is a
//! [`SharedBuf`] — a memfd sealed against shrinking, mapped by both the host and the engine. This
//! is required in daemon mode (the engine is another process; on a DPU it reaches host memory by
//! DMA, never by pointer) and used in thread mode too, so a program runs unchanged in both modes.
//! The seal matters: without it a host could truncate the file under the engine's DMA.
//!
//! **Back-pressure.** Every descriptor produces exactly one completion. The host keeps at most
//! as many descriptors in flight as its completion ring holds (`WouldBlock` otherwise), and the
//! engine never takes a descriptor it has no completion slot for, so no completion is dropped.
mod error;
mod handshake;
mod host;
pub mod netns;
pub mod selftest;
mod shared_buf;

pub use error::{Error, Result};
pub use host::{AttachOptions, CommStats, EngineStats, Host, NetStats, Region};
pub use ringcast_abi::{Access, Completion, RegionKey, RegionRef, Status, StatusKind, SubmissionDescriptor};
pub use ringcast_offload::Config;
pub use shared_buf::SharedBuf;
