//! The bytes every DST call carries, derived from the scenario's seed: a root's broadcast, a
//! rank's allgather block, a pair's alltoall block. The checker derives the expected results
//! from the same functions, so nothing is stored per rank.
/// The block rank `from` sends rank `to` in alltoall `k` of communicator `c`.
pub fn pair_pattern(seed: u64, c: usize, k: usize, from: u32, to: u32, len: u32) -> Vec<u8> {
    block_pattern(seed ^ (u64::from(to) + 7).wrapping_mul(0x2545_f491_4f6c_dd1d), c, k, from, len)
}

/// Rank `q`'s block of allgather `k` of communicator `c`.
pub fn block_pattern(seed: u64, c: usize, k: usize, q: u32, len: u32) -> Vec<u8> {
    pattern(seed ^ (u64::from(q) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15), c, k, len)
}

/// The root's bytes of broadcast `k` of communicator `c`: byte `i` is the low byte of the
/// `i + 1`-th draw of a [`SimRng`](ringcast_proto::rng::SimRng) seeded from `(seed, c, k)`.
pub fn pattern(seed: u64, c: usize, k: usize, len: u32) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    splitmix_low_bytes(seed ^ ((c as u64) << 40) ^ ((k as u64) << 20) ^ 0x5eed, &mut out);
    out
}

/// Fills `out` with the low bytes of `SimRng::new(state)`'s draws, in order, in place: the DST
/// derives every payload and every expected result this way, and building them a byte at a
/// time through an iterator cost a tenth of a sweep. A test holds it to `SimRng` itself.
fn splitmix_low_bytes(state: u64, out: &mut [u8]) {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut x = state;
    for b in out.iter_mut() {
        x = x.wrapping_add(GAMMA);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        *b = (z ^ (z >> 31)) as u8;
    }
}
