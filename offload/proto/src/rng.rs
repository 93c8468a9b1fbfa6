//! The simulator's only source of randomness: a seeded splitmix64. A seed (and the commit)
//! replays a run exactly.

/// Deterministic PRNG.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// A child generator (a decision stream of its own, stable when others change).
    pub fn fork(&mut self) -> SimRng {
        SimRng(self.next_u64())
    }
}
