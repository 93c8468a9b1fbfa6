//! The simulator: the real engine on a modelled fabric, in virtual time, deterministic from a
//! seed. [`net`] is the event queue and simulated network, [`fabric`] the fault model, [`world`]
//! a cluster of bare protocols (experiments, performance), [`cluster`] a cluster of whole
//! engines with their hosts and host memory ([`mem`]), [`dst`] the deterministic-simulation-
//! testing harness that drives [`cluster`] on seeded random scenarios and checks invariants,
//! [`experiments`] the protocol's paper claims, [`barrier_study`] the barrier's cost against
//! its former composition, [`perf`] performance runs on the LogGP fabric,
//! [`forge`] the insider forger of the DST. The state machine comes from `ringcast-proto`; the
//! checker in [`dst`] shares none of its code and reads only host memory, completions and
//! public counters.
pub mod barrier_study;
pub mod cluster;
pub mod collectives;
pub mod dst;
pub mod experiments;
pub mod fabric;
pub mod forge;
mod keyheap;
pub mod mem;
pub(crate) mod net;
pub mod perf;
pub mod reference;
pub mod world;
