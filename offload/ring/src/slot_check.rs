//! The check word of a multicast-log slot (`mcast_log.rs`): a hash of the slot's sequence,
//! meta word and payload words, computed in [`LANES`] independent chains as the payload is
//! copied word by word, so that a reader delivers only content written whole for the sequence
//! it expects (torn or stale slots are counted lost). It guards against races and crashed
//! writers, not against forgery: the protocol's CRC and tag are the integrity checks.
use crate::primitive::{AtomicU64, Ordering};

/// The check word's hash: folds one more word into `h` (multiply–xorshift; it guards against
/// torn and stale content, not against a writer that forges it on purpose — the protocol's CRC
/// and digest are the integrity checks).
fn mix(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 32)
}

/// Start of a slot's hash: its sequence.
fn check_seed(seq: u64) -> u64 {
    mix(0x243f_6a88_85a3_08d3, seq)
}

/// Independent hash chains of a slot's check: payload word `k` goes into chain `k % LANES`.
/// One chain is a multiply's latency per word; a 4 KiB datagram's 511 words hashed in one chain
/// were the largest cost of an 8-node multicast (`McastReader::recv`, 17 % of the samples, with
/// an out-of-line 8-byte `memcpy` per word: docs/performance.md).
pub(crate) const LANES: usize = 4;

/// A slot's check being computed: [`LANES`] chains, seeded apart from one another and from the
/// sequence and meta word, combined in order by [`Check::finish`] (so words swapped between
/// chains change it too).
pub(crate) struct Check([u64; LANES]);

impl Check {
    pub(crate) fn new(seq: u64, meta: u64) -> Check {
        let seed = mix(check_seed(seq), meta);
        Check(core::array::from_fn(|j| mix(seed, j as u64)))
    }

    /// Payload words `4i .. 4i + 4` (a partial last group: only its first words).
    #[inline(always)]
    pub(crate) fn group(&mut self, words: &[u64]) {
        for (lane, &w) in self.0.iter_mut().zip(words) {
            *lane = mix(*lane, w);
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0.iter().fold(0x1319_8a2e_0370_7344, |h, &lane| mix(h, lane))
    }
}

/// Copies a slot's payload `words` (`Relaxed` loads: the seqlock's data reads) into `out`, its
/// `out.len()` bytes, feeding `check` — whole 8-byte words in groups of [`LANES`], then the rest.
pub(crate) fn copy_out(words: &[AtomicU64], out: &mut [u8], check: &mut Check) {
    let whole = out.len() / (8 * LANES) * (8 * LANES);
    let (groups, rest) = out.split_at_mut(whole);
    let (group_words, rest_words) = words.split_at(whole / 8);
    for (group, src) in groups.chunks_exact_mut(8 * LANES).zip(group_words.chunks_exact(LANES)) {
        let w: [u64; LANES] = core::array::from_fn(|j| src[j].load(Ordering::Relaxed));
        check.group(&w);
        for (bytes, v) in group.chunks_exact_mut(8).zip(w) {
            bytes.copy_from_slice(&v.to_le_bytes());
        }
    }
    let mut w = [0u64; LANES];
    let tail = rest.len().div_ceil(8);
    for (v, src) in w[..tail].iter_mut().zip(rest_words) {
        *v = src.load(Ordering::Relaxed);
    }
    check.group(&w[..tail]);
    for (bytes, v) in rest.chunks_mut(8).zip(w) {
        bytes.copy_from_slice(&v.to_le_bytes()[..bytes.len()]);
    }
}
