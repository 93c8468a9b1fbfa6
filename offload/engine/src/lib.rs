//! `ringcast-offload`: the offload engine.
//!
//! * [`core`] — the sans-IO protocol core (no sockets, threads or clocks);
//! * [`config`] — every limit and knob, with `RINGCAST_*` overrides;
//! * [`ctl`] — the control-socket transport shared with the host library;
//! * [`fault`] — fault injection for every fabric, driven by `RINGCAST_FAULT_*` tunables;
//! * [`fabric`] — the fabrics that move datagrams between engines (shared memory, UDP, DPDK,
//!   verbs);
//! * [`proto`] — the reliable broadcast protocol (being built: fragment bitmaps and geometry);
//! * [`sim`] — the simulator and the deterministic simulation testing harness;
//! * [`runner`] — the polling loop that drives the core against real shared memory, run as a
//!   pinned thread inside a host process ([`runner::spawn_thread`]) or as the `ringcast-engine`
//!   daemon ([`runner::run_daemon`]): same core, two runners.
// `unsafe` lives only in the DPDK and verbs fabrics (`fabric::dpdk`, `fabric::verbs`, which allow it).
#![deny(unsafe_code)]
pub mod config;
pub mod core;
pub mod ctl;
pub mod fabric;
pub mod fault;
pub mod model;
pub mod proto;
pub mod runner;
pub mod sim;

pub use config::Config;
