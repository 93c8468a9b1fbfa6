//! The collectives as operations on the reliable-transfer layer ([`crate::transfer`]): what a
//! post does, where its bytes come from and go, and when it is over. Their schedules — who sends
//! what to whom — are [`crate::schedule`]'s.
pub mod bcast;
mod loc;
pub mod reduce; // and its pair operations, `loc.rs`
