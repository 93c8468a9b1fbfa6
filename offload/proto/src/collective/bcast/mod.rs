//! The broadcast: its algorithms as per-fragment routing rules (`routes.rs`, re-exported here:
//! [`Algorithm`], [`forward`], [`source`]) and its data path on the reliable-transfer layer
//! (`run.rs`: post, load, multicast, forward, store; [`picked_rank`]).
mod routes;
mod run;

pub use routes::*;
pub use run::picked_rank;

#[cfg(test)]
mod tests;
