//! The collectives' schedules: who sends what to whom, as pure functions of (algorithm, shape,
//! rank), shared by the reliable-transfer layer ([`crate::transfer`]) that carries them out, the
//! collectives ([`crate::collective`]) and the cost model ([`crate::model`]) that picks one.
pub mod bcast;

/// The largest power of two not above `n` (1 for 0 and 1).
pub fn power_below(n: u32) -> u32 {
    match n {
        0 | 1 => 1,
        n => 1 << (31 - n.leading_zeros()),
    }
}
