//! `MAXLOC` and `MINLOC` on the ABI's pair types (`ringcast_abi::reduce`): elements of a
//! value and a little-endian `i32` index, packed (`MPI_Pack`'s layout, no padding).
//!
//! The rule is the one the MPI libraries' own operators apply, `inout ← in ⊕ inout`: the
//! incoming pair replaces the accumulated one when its value compares larger (`MAXLOC`) or
//! smaller (`MINLOC`) as C's `>`/`<` compare it; on equal values (`==`) the lower index stays
//! with the accumulated value; unordered values (a NaN) leave the accumulated pair as it is.
//! Without NaNs the result is the extreme value with the lowest index among its equals, whatever
//! the order of the contributions — the standard's definition.
//!
//! An x87 value (`PAIR_X87_I32`, `long double` on x86-64) is compared in software from its
//! bits, as the FPU compares it: ±0 equal, denormals and pseudo-denormals by value, a NaN, a
//! pseudo-NaN, a pseudo-infinity or an unnormal unordered (the FPU refuses those as invalid
//! operands). Its 6 bytes after the 10 of the value are carried with the pair, never read.
use core::cmp::Ordering;
use ringcast_abi::DataType;

/// Bytes of a pair's index (after the value).
const INDEX: usize = 4;

/// `acc ← acc ⊕ x` for every pair of `dtype` (a pair type, checked by the caller) in `acc` and
/// `x` (equal lengths, whole elements: checked by the caller); `max` for `MAXLOC`, else
/// `MINLOC`.
pub(super) fn reduce_pairs(dtype: DataType, max: bool, acc: &mut [u8], x: &[u8]) {
    let size = dtype.size().unwrap_or(INDEX + 1);
    let value = size - INDEX;
    for (a, b) in acc.chunks_exact_mut(size).zip(x.chunks_exact(size)) {
        let ord = compare(dtype, &b[..value], &a[..value]);
        match ord {
            Some(Ordering::Greater) if max => a.copy_from_slice(b),
            Some(Ordering::Less) if !max => a.copy_from_slice(b),
            Some(Ordering::Equal) if index(&b[value..]) < index(&a[value..]) => {
                a[value..].copy_from_slice(&b[value..])
            }
            _ => {}
        }
    }
}

/// A pair's index.
fn index(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// How value `p` compares with value `q` (both of `dtype`'s value type), `None` if unordered.
fn compare(dtype: DataType, p: &[u8], q: &[u8]) -> Option<Ordering> {
    let bytes = |v: &[u8]| -> [u8; 8] {
        let mut w = [0; 8];
        let n = v.len().min(8);
        w[..n].copy_from_slice(&v[..n]);
        w
    };
    match dtype {
        DataType::PAIR_F32_I32 => {
            let f = |v: &[u8]| f32::from_le_bytes([v[0], v[1], v[2], v[3]]);
            f(p).partial_cmp(&f(q))
        }
        DataType::PAIR_F64_I32 => f64::from_le_bytes(bytes(p)).partial_cmp(&f64::from_le_bytes(bytes(q))),
        DataType::PAIR_I64_I32 => Some(i64::from_le_bytes(bytes(p)).cmp(&i64::from_le_bytes(bytes(q)))),
        DataType::PAIR_I32_I32 => Some(index(p).cmp(&index(q))),
        DataType::PAIR_I16_I32 => {
            Some(i16::from_le_bytes([p[0], p[1]]).cmp(&i16::from_le_bytes([q[0], q[1]])))
        }
        _ => compare_x87(p, q), // PAIR_X87_I32 (the only other pair type)
    }
}

/// The magnitude key of a zero: exponent field 0 read as 1 (see [`x87`]), significand 0.
const X87_ZERO: u128 = 1 << 64;

/// An x87 extended value (8 bytes of significand with the explicit integer bit 63, then the
/// sign and the 15-bit biased exponent) as its sign and a key that orders magnitudes as the
/// values' absolute values do, or `None` for what the FPU does not order (NaN, and the
/// encodings it refuses as invalid operands).
fn x87(v: &[u8]) -> Option<(bool, u128)> {
    if v.len() < 10 {
        return None;
    }
    let m = u64::from_le_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]]);
    let se = u16::from_le_bytes([v[8], v[9]]);
    let (negative, e, integer) = (se & 0x8000 != 0, se & 0x7fff, m >> 63 == 1);
    match e {
        // Infinity (integer bit set, fraction zero) above every finite value; NaNs, pseudo-NaNs
        // and pseudo-infinities unordered.
        0x7fff => (integer && m << 1 == 0).then_some((negative, u128::MAX)),
        // Zero, denormals and pseudo-denormals: the significand times 2^(1 - bias - 63), the
        // scale of exponent 1 — so a pseudo-denormal equals the normal of the same bits.
        0 => Some((negative, X87_ZERO | u128::from(m))),
        // An unnormal (no integer bit): refused by the FPU.
        _ if !integer => None,
        _ => Some((negative, u128::from(e) << 64 | u128::from(m))),
    }
}

/// How x87 value `p` compares with `q` as the FPU's comparison says.
fn compare_x87(p: &[u8], q: &[u8]) -> Option<Ordering> {
    let ((np, kp), (nq, kq)) = (x87(p)?, x87(q)?);
    if kp == X87_ZERO && kq == X87_ZERO {
        return Some(Ordering::Equal); // +0 == -0
    }
    Some(match (np, nq) {
        (false, false) => kp.cmp(&kq),
        (true, true) => kq.cmp(&kp),
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    /// `v` as an x87 extended value (exact: binary64 fits), in its 10 bytes.
    fn to_x87(v: f64) -> [u8; 10] {
        let bits = v.to_bits();
        let negative = bits >> 63 == 1;
        let e = ((bits >> 52) & 0x7ff) as i32;
        let f = bits & ((1 << 52) - 1);
        let (e, m) = match e {
            0 if f == 0 => (0, 0u64),
            0 => {
                // A binary64 denormal: f × 2^-1074, normal in x87.
                let lz = f.leading_zeros() as i32;
                (-1074 + 63 - lz + 16383, f << lz)
            }
            0x7ff => (0x7fff, if f == 0 { 1 << 63 } else { 1 << 63 | 1 << 62 }),
            _ => (e - 1023 + 16383, 1 << 63 | f << 11),
        };
        let se = (e as u16) | if negative { 0x8000 } else { 0 };
        let mut out = [0u8; 10];
        out[..8].copy_from_slice(&m.to_le_bytes());
        out[8..].copy_from_slice(&se.to_le_bytes());
        out
    }

    fn pairs(t: DataType, vals: &[(f64, i32)]) -> Vec<u8> {
        vals.iter()
            .flat_map(|&(v, i)| {
                let mut e: Vec<u8> = match t {
                    DataType::PAIR_F32_I32 => (v as f32).to_le_bytes().to_vec(),
                    DataType::PAIR_F64_I32 => v.to_le_bytes().to_vec(),
                    DataType::PAIR_I64_I32 => (v as i64).to_le_bytes().to_vec(),
                    DataType::PAIR_I32_I32 => (v as i32).to_le_bytes().to_vec(),
                    DataType::PAIR_I16_I32 => (v as i16).to_le_bytes().to_vec(),
                    _ => {
                        let mut w = to_x87(v).to_vec();
                        w.extend_from_slice(&[0xA5; 6]); // never read
                        w
                    }
                };
                e.extend_from_slice(&i.to_le_bytes());
                e
            })
            .collect()
    }

    const PAIRS: [DataType; 6] = [
        DataType::PAIR_F32_I32,
        DataType::PAIR_F64_I32,
        DataType::PAIR_I64_I32,
        DataType::PAIR_I32_I32,
        DataType::PAIR_I16_I32,
        DataType::PAIR_X87_I32,
    ];

    #[test]
    fn ties_go_to_the_lowest_index_and_the_extreme_wins() {
        for t in PAIRS {
            // Contributions of 4 ranks, 3 elements each: a clear maximum, a tie, all equal.
            let ranks = [
                [(3.0, 0), (5.0, 0), (-2.0, 0)],
                [(9.0, 1), (7.0, 1), (-2.0, 1)],
                [(1.0, 2), (7.0, 2), (-2.0, 2)],
                [(9.0, 3), (-4.0, 3), (-2.0, 3)],
            ];
            for (max, want) in
                [(true, [(9.0, 1), (7.0, 1), (-2.0, 0)]), (false, [(1.0, 2), (-4.0, 3), (-2.0, 0)])]
            {
                // Every order of the ranks: the same result.
                for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]] {
                    let mut acc = pairs(t, &ranks[order[0]]);
                    for &r in &order[1..] {
                        reduce_pairs(t, max, &mut acc, &pairs(t, &ranks[r]));
                    }
                    assert_eq!(acc, pairs(t, &want), "{t:?} max {max} order {order:?}");
                }
            }
        }
    }

    #[test]
    fn x87_orders_as_the_fpu_does() {
        let cmp = |a: f64, b: f64| compare_x87(&to_x87(a), &to_x87(b));
        for (a, b) in [
            (1.0, 2.0),
            (-1.0, 1.0),
            (-2.0, -1.0),
            (0.0, 5e-324),
            (1e300, f64::INFINITY),
            (f64::NEG_INFINITY, -1e300),
        ] {
            assert_eq!(cmp(a, b), Some(Ordering::Less), "{a} < {b}");
            assert_eq!(cmp(b, a), Some(Ordering::Greater), "{b} > {a}");
        }
        assert_eq!(cmp(0.0, -0.0), Some(Ordering::Equal));
        assert_eq!(cmp(f64::NAN, 1.0), None);
        // Values binary64 cannot tell apart: the last significand bit.
        let (mut a, b) = (to_x87(1.0), to_x87(1.0));
        a[0] = 1;
        assert_eq!(compare_x87(&a, &b), Some(Ordering::Greater));
        // A pseudo-denormal (exponent 0, integer bit set) equals the normal of the same bits.
        let mut pseudo = to_x87(0.0);
        pseudo[7] = 0x80;
        let mut normal = pseudo;
        normal[8] = 1;
        assert_eq!(compare_x87(&pseudo, &normal), Some(Ordering::Equal));
        // An unnormal and a pseudo-infinity: unordered.
        let mut unnormal = to_x87(1.0);
        unnormal[7] = 0;
        assert_eq!(compare_x87(&unnormal, &to_x87(1.0)), None);
        let mut pseudo_inf = to_x87(f64::INFINITY);
        pseudo_inf[7] = 0;
        assert_eq!(compare_x87(&pseudo_inf, &to_x87(1.0)), None);
    }

    #[test]
    fn an_unordered_value_never_replaces_the_accumulated_pair() {
        for t in [DataType::PAIR_F32_I32, DataType::PAIR_F64_I32, DataType::PAIR_X87_I32] {
            let mut acc = pairs(t, &[(1.0, 5)]);
            reduce_pairs(t, true, &mut acc, &pairs(t, &[(f64::NAN, 0)]));
            assert_eq!(acc, pairs(t, &[(1.0, 5)]), "{t:?}");
        }
    }

    proptest! {
        /// Without NaNs: the extreme value and the lowest index among its equals, in any order
        /// (the standard's definition, so any MPI library's result).
        #[test]
        fn any_order_gives_the_definition(
            vals in proptest::collection::vec((-6i32..6, 0i32..1000), 2..9),
            max: bool,
            which in 0usize..6,
            rot in 0usize..9,
        ) {
            let t = PAIRS[which];
            let n = vals.len();
            let mut acc = pairs(t, &[(f64::from(vals[rot % n].0), vals[rot % n].1)]);
            for k in 1..n {
                let (v, i) = vals[(rot + k) % n];
                reduce_pairs(t, max, &mut acc, &pairs(t, &[(f64::from(v), i)]));
            }
            let best = if max { vals.iter().map(|p| p.0).max() } else { vals.iter().map(|p| p.0).min() };
            let best = best.unwrap_or(0);
            let index = vals.iter().filter(|p| p.0 == best).map(|p| p.1).min().unwrap_or(0);
            prop_assert_eq!(acc, pairs(t, &[(f64::from(best), index)]));
        }
    }
}
