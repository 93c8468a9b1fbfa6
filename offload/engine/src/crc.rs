//! The CRC32C every frame is sealed and checked with (docs/design.md §3.1: a CRC per datagram), handed to
//! the state machine as a plain function (`Engine::new`; the simulator and the fuzz targets
//! hand it the `crc32c` crate's, which computes the same sums).
//!
//! Why this implementation: the `crc32c` crate interleaves three `crc32` instruction streams
//! over 768-byte blocks and finishes a datagram's last few hundred bytes one word at a time,
//! ~300 ns for a 4088-byte `shm` datagram on this machine; `crc-fast` folds with carry-less
//! multiplies (PCLMULQDQ / VPCLMULQDQ on x86-64, PMULL on aarch64, picked at run time), ~110-140
//! ns for the same datagram (docs/performance.md, issue 15's fourth step).

use crc_fast::{checksum, CrcAlgorithm};

/// CRC32C (Castagnoli, as iSCSI and RoCE's ICRC use it) of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    // A 32-bit CRC, returned in a u64 by the crate's common interface.
    checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

#[cfg(test)]
mod tests {
    /// The same sums as the reference implementation (the `crc32c` crate: what the simulator,
    /// the fuzz targets and engines built before this change use) at every length up to a
    /// jumbo datagram and at every alignment of the start.
    #[test]
    fn computes_the_crc32c_of_the_reference_crate() {
        let bytes: Vec<u8> = (0..9100u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for start in 0..16 {
            for len in (0..=9000).step_by(if start == 0 { 1 } else { 97 }) {
                let b = &bytes[start..start + len];
                assert_eq!(super::crc32c(b), crc32c::crc32c(b), "start {start}, {len} bytes");
            }
        }
        assert_eq!(super::crc32c(b"123456789"), 0xE306_9283, "the CRC-32C check value");
    }
}
