//! `ringcast-offload`: the offload engine around its state machine.
//!
//! The state machine itself — intake, communicators, the reliable-transfer layer, the
//! collectives, the cost model — is `ringcast-proto` (sans-IO); the simulator is `ringcast-sim`.
//! This crate carries them out against real memory and real fabrics:
//!
//! * [`config`] — the composition root of the configuration: every section, `RINGCAST_*`
//!   overrides read here and only here;
//! * [`entropy`] — the seeds the state machine is handed (OS randomness, time, host, process);
//! * [`ctl`] — the control-socket transport shared with the host library;
//! * [`fabric`] — the fabrics that move datagrams between engines (shared memory, UDP, DPDK,
//!   verbs), each built from its own section and a [`fabric::FabricSetup`] (never the whole
//!   [`Config`]) and wrapped in the one fault injector when faults are asked for;
//! * [`runner`] — the polling loop that drives the state machine against real shared memory, run
//!   as a pinned thread inside a host process ([`runner::spawn_thread`]) or as the
//!   `ringcast-engine` daemon ([`runner::run_daemon`]): same loop, two runners.
// No `unsafe` here: the device code of the DPDK and verbs fabrics is in `ringcast-dpdk` and
// `ringcast-verbs` (offload/dpdk, offload/verbs).
#![forbid(unsafe_code)]
pub mod config;
pub mod crc;
pub mod ctl;
pub mod entropy;
pub mod fabric;
pub mod runner;

pub use config::Config;
