//! The collectives' schedules: who sends what to whom, as pure functions of (algorithm, shape,
//! rank). The reliable-transfer layer ([`crate::transfer`]) carries them out.
pub mod bcast;
