//! `ringcast-proto`: the offload engine's state machine, sans-IO.
//!
//! Events in, actions out, time injected: nothing here reads a clock, a pid, the OS's randomness
//! or a lock, opens a socket or touches host memory. The same code runs on the polling thread,
//! in the DPU daemon, in the simulator and in the tests (`docs/architecture.md`).
//!
//! * [`engine`] — the engine: every part below behind one set of events (descriptor, frame,
//!   timeout, DMA done) and one queue of actions (send, multicast, DMA job, completion);
//! * [`intake`] — descriptors, registered regions and hosts: validation and planning;
//! * [`comm`] — communicators: members, topologies, placement, identity and keys;
//! * [`schedule`] — the collectives' schedules: who sends what to whom, as pure functions of
//!   (algorithm, shape, rank) — the broadcast's algorithms as per-fragment routing rules;
//! * [`transfer`] — the reliable-transfer layer: fragment bitmaps, and the protocol state
//!   machine (CRC and MAC, repair, channels and delayed synchronization, liveness, timers);
//! * [`collective`] — the collectives on that layer: the broadcast's data path;
//! * [`model`] — the LogGP cost model that picks an algorithm per call;
//! * [`config`] — the sections of the configuration the state machine runs on;
//! * [`ledger`] — the per-byte ledger: payload bytes copied, hashed and CRC'd per side;
//! * [`fault`] — the fault injector every fabric (and the simulator) is wrapped in;
//! * [`rng`] — the deterministic generator the fault injector and the simulator draw from;
//! * `timer` — the engine's one timer table, keyed by what each deadline times.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

/// What [`tunables!`] expands to from a `no_std` crate or a `std` one alike.
#[doc(hidden)]
pub mod __alloc {
    pub use alloc::{string, vec};
}

pub mod collective;
pub mod comm;
pub mod config;
pub mod engine;
pub mod fault;
pub mod intake;
pub mod ledger;
pub mod model;
pub mod rng;
pub mod schedule;
pub(crate) mod timer;
pub mod transfer;

/// Monotonic time in nanoseconds, supplied by whoever drives the state machine.
pub type Nanos = u64;
