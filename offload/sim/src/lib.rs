//! The simulator: the real protocol core on a modelled fabric, in virtual time, deterministic
//! from a seed. [`world`] is the cluster and event loop, [`fabric`] the fault model, [`dst`] the
//! deterministic-simulation-testing harness that checks invariants on seeded random scenarios,
//! [`experiments`] the protocol's paper claims, [`perf`] performance runs on the LogGP fabric,
//! [`forge`] the insider forger of the DST. The state machine comes from `ringcast-proto`; the
//! checker in [`dst`] shares none of its code.
pub mod dst;
pub mod experiments;
pub mod fabric;
pub mod forge;
pub mod perf;
pub mod world;
