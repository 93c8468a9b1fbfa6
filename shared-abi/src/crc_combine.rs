//! The CRC32C of a concatenation from the CRCs of its parts ([`crc32c_combine`]): what lets a
//! frame whose payload is gathered from where it lies (header, a slice of a channel, trailer)
//! be sealed without the parts ever being contiguous in memory, with the engine's one-shot
//! CRC function ([`crate::frame::Crc32c`]) and no other.
//!
//! The algorithm is zlib's `crc32_combine` (its GF(2) polynomial form, `multmodp` and
//! `x2nmodp`), with the Castagnoli polynomial: `crc(A ‖ B) = crc(A)·x^(8|B|) mod P ⊕ crc(B)`,
//! which holds for the standard CRC32C (initial value and final xor all ones) because both
//! cancel in the xor. Cost: at most 32 shift-and-xor steps per multiplication, and one
//! multiplication per set bit of `|B|`.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `a · b mod P` (reflected bit order: `1 << 31` is x⁰).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `x^(2^k) mod P` for k in 0..32.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p: u32 = 1 << 30; // x¹
    t[0] = p;
    let mut n = 1;
    while n < 32 {
        p = multmodp(p, p);
        t[n] = p;
        n += 1;
    }
    t
};

/// `x^(n·2^k) mod P`.
fn x2nmodp(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31; // x⁰
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC32C of `A ‖ B` from `crc1 = crc32c(A)`, `crc2 = crc32c(B)` and `len2 = |B|`.
pub fn crc32c_combine(crc1: u32, crc2: u32, len2: usize) -> u32 {
    multmodp(x2nmodp(len2 as u64, 3), crc1) ^ crc2
}

/// `p · x mod P` (reflected bit order), without a branch.
const fn times_x(p: u32) -> u32 {
    (p >> 1) ^ (POLY & 0u32.wrapping_sub(p & 1))
}

/// [`crc32c_combine`] with the operator for the last `len2` kept (`x^(8·len2) mod P`: a frame's
/// payloads are of one length but for a message's last), as its products with each power
/// `x^0..x^31`: a combine is then the xor of the products the bits of `crc1` select — 32
/// independent and-xors, where `multmodp` is a chain of 32 dependent shifts and a branch per
/// bit (~5-9 ns against ~20-30 per combine on this machine; the root pays one per fragment it
/// sends, docs/performance.md, issue 40's engine core). A new length costs `x2nmodp` and 32
/// shifts.
#[derive(Clone, Debug, Default)]
pub struct Combiner {
    /// The `len2` whose operator `products` holds.
    last: core::cell::Cell<Option<usize>>,
    /// `products[i]` = operator · x^(31 − i): the term bit `i` of `crc1` contributes.
    products: [core::cell::Cell<u32>; 32],
}

impl Combiner {
    /// See [`crc32c_combine`].
    pub fn combine(&self, crc1: u32, crc2: u32, len2: usize) -> u32 {
        if self.last.get() != Some(len2) {
            let mut p = x2nmodp(len2 as u64, 3);
            for product in self.products.iter().rev() {
                product.set(p);
                p = times_x(p);
            }
            self.last.set(Some(len2));
        }
        let mut sum = 0u32;
        for (i, product) in self.products.iter().enumerate() {
            sum ^= product.get() & 0u32.wrapping_sub((crc1 >> i) & 1);
        }
        sum ^ crc2
    }
}

/// The byte-at-a-time table of the reflected Castagnoli polynomial.
const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The CRC32C of `A ‖ bytes` from `crc = crc32c(A)`, a byte at a time: for a few bytes (a
/// frame's trailer) after a CRC computed fast over the rest.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    let mut state = !crc;
    for &b in bytes {
        state = TABLE[((state ^ u32::from(b)) & 0xff) as usize] ^ (state >> 8);
    }
    !state
}

#[cfg(test)]
mod tests {
    use super::crc32c_combine;

    /// Equal to the CRC of the concatenation, at every split of buffers up to past a jumbo
    /// datagram, empty parts included — combined, through a `Combiner` (its kept operator
    /// reused and replaced), and appended a byte at a time.
    #[test]
    fn combines_to_the_crc_of_the_concatenation() {
        use super::{crc32c_append, Combiner};
        let kept = Combiner::default();
        let bytes: [u8; 9100] =
            core::array::from_fn(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8);
        for total in [0usize, 1, 7, 64, 1472, 4088, 9100] {
            let whole = crc32c::crc32c(&bytes[..total]);
            for split in (0..=total).step_by(1 + total / 37) {
                let (a, b) = bytes[..total].split_at(split);
                let got = crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len());
                assert_eq!(got, whole, "{total} bytes split at {split}");
                for _ in 0..2 {
                    let got = kept.combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len());
                    assert_eq!(got, whole, "kept: {total} bytes split at {split}");
                }
                assert_eq!(crc32c_append(crc32c::crc32c(a), b), whole, "appended: {total} at {split}");
            }
        }
    }
}
