//! The collectives' schedules: who sends what to whom, as pure functions of (algorithm, shape,
//! rank), shared by the reliable-transfer layer ([`crate::transfer`]) that carries them out, the
//! collectives ([`crate::collective`]) and the cost model ([`crate::model`]) that picks one.
pub mod bcast;
