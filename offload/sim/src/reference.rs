//! The checker's own arithmetic for reductions, independent of the engine's
//! (`ringcast_proto::collective::reduce`): what the DST and the simulator tests compare an
//! allreduce's result with.
use ringcast_abi::{DataType, ReduceOp};

/// The checker's own reduction of `blocks` in the leader-based composition's order: each
/// node's blocks (`counts[k]` consecutive ranks) in rank order, then the nodes' results in node
/// order — `((c₀ ⊕ c₁) ⊕ (c₂ ⊕ c₃))` for two nodes of two. Without `counts`, rank order.
pub fn reference_reduce_grouped(
    t: DataType,
    o: ReduceOp,
    blocks: &[Vec<u8>],
    counts: Option<&[u32]>,
) -> Vec<u8> {
    let Some(counts) = counts else { return reference_reduce(t, o, blocks) };
    reference_reduce(t, o, &node_results(t, o, blocks, counts))
}

/// Each node's blocks (`counts[k]` consecutive ranks) reduced in rank order.
fn node_results(t: DataType, o: ReduceOp, blocks: &[Vec<u8>], counts: &[u32]) -> Vec<Vec<u8>> {
    let mut first = 0;
    counts
        .iter()
        .map(|&n| {
            let group = &blocks[first..first + n as usize];
            first += n as usize;
            reference_reduce(t, o, group)
        })
        .collect()
}

/// The checker's own reduction of `blocks` in the recursive-doubling allreduce's order
/// (`protocol.allreduce_between = doubling`): each node's blocks (`counts[k]` consecutive
/// ranks) in rank order; with `P` the largest power of two not above the node count `E`, node
/// `i + P`'s result folded into node `i`'s (`nᵢ ⊕ nᵢ₊ₚ`); then the results of nodes `i` and
/// `i + P/2` combined lower first, then `i` and `i + P/4`, …: `((m₀ ⊕ m₂) ⊕ (m₁ ⊕ m₃))` for four.
/// Written from that description, not from the engine's schedule (recursive doubling and
/// Rabenseifner's both reduce in this tree).
pub fn reference_reduce_doubling(t: DataType, o: ReduceOp, blocks: &[Vec<u8>], counts: &[u32]) -> Vec<u8> {
    let mut nodes = node_results(t, o, blocks, counts);
    let mut p = 1;
    while p * 2 <= nodes.len() {
        p *= 2;
    }
    for i in 0..nodes.len() - p {
        nodes[i] = reference_reduce(t, o, &[nodes[i].clone(), nodes[i + p].clone()]);
    }
    nodes.truncate(p);
    let mut d = p / 2;
    while d >= 1 {
        for i in 0..d {
            nodes[i] = reference_reduce(t, o, &[nodes[i].clone(), nodes[i + d].clone()]);
        }
        nodes.truncate(d);
        d /= 2;
    }
    nodes.swap_remove(0)
}

/// The checker's own reduction of `blocks` in rank order (not the engine's code): integers as
/// `i128` of their signedness wrapped back to their width, floats with the operators in their
/// own precision.
pub fn reference_reduce(t: DataType, o: ReduceOp, blocks: &[Vec<u8>]) -> Vec<u8> {
    use DataType as T;
    use ReduceOp as O;
    fn pick<F: PartialOrd + Copy>(o: O, p: F, q: F, sum: F, prod: F) -> F {
        match o {
            O::SUM => sum,
            O::PROD => prod,
            O::MIN => {
                if q < p {
                    q
                } else {
                    p
                }
            }
            _ => {
                if q > p {
                    q
                } else {
                    p
                }
            }
        }
    }
    let size = t.size().unwrap_or(1);
    let mut out = blocks[0].clone();
    for b in &blocks[1..] {
        for (a, x) in out.chunks_exact_mut(size).zip(b.chunks_exact(size)) {
            let bytes: Vec<u8> = match t {
                _ if t.is_pair() => reference_loc(t, o == O::MAXLOC, a, x),
                T::F32 => {
                    let (p, q) = (
                        f32::from_le_bytes(a.try_into().unwrap_or_default()),
                        f32::from_le_bytes(x.try_into().unwrap_or_default()),
                    );
                    pick(o, p, q, p + q, p * q).to_le_bytes().to_vec()
                }
                T::F64 => {
                    let (p, q) = (
                        f64::from_le_bytes(a.try_into().unwrap_or_default()),
                        f64::from_le_bytes(x.try_into().unwrap_or_default()),
                    );
                    pick(o, p, q, p + q, p * q).to_le_bytes().to_vec()
                }
                _ => {
                    let signed = matches!(t, T::I8 | T::I16 | T::I32 | T::I64);
                    let get = |v: &[u8]| -> i128 {
                        let mut w = [0u8; 16];
                        w[..size].copy_from_slice(v);
                        if signed && v[size - 1] & 0x80 != 0 {
                            w[size..].iter_mut().for_each(|x| *x = 0xff);
                        }
                        i128::from_le_bytes(w)
                    };
                    let (p, q) = (get(a), get(x));
                    let r = match o {
                        O::SUM => p.wrapping_add(q),
                        O::PROD => p.wrapping_mul(q),
                        O::MIN => p.min(q),
                        O::MAX => p.max(q),
                        O::BAND => p & q,
                        O::BOR => p | q,
                        O::BXOR => p ^ q,
                        O::LAND => i128::from(p != 0 && q != 0),
                        O::LXOR => i128::from((p != 0) != (q != 0)),
                        _ => i128::from(p != 0 || q != 0),
                    };
                    r.to_le_bytes()[..size].to_vec()
                }
            };
            a.copy_from_slice(&bytes);
        }
    }
    out
}

/// The checker's own `MAXLOC` (`max`) or `MINLOC` of pair `a` (accumulated) and `x`
/// (incoming), from MPI's definition and the libraries' tie rule (`x` wins if strictly better;
/// on equal values the lower index, `a`'s value; unordered values keep `a`): values read as
/// exact rationals `(sign, exponent, significand)`, not through the engine's keys.
fn reference_loc(t: DataType, max: bool, a: &[u8], x: &[u8]) -> Vec<u8> {
    use std::cmp::Ordering;
    let v = a.len() - 4;
    let index = |e: &[u8]| i32::from_le_bytes(e[v..].try_into().unwrap_or_default());
    // A value as a comparable number: integers and IEEE floats through f64/i128 (exact for
    // every value of these widths but i64, compared as i128), x87 decoded from its bits.
    let ord: Option<Ordering> = match t {
        DataType::PAIR_F32_I32 => f32::from_le_bytes(x[..4].try_into().unwrap_or_default())
            .partial_cmp(&f32::from_le_bytes(a[..4].try_into().unwrap_or_default())),
        DataType::PAIR_F64_I32 => f64::from_le_bytes(x[..8].try_into().unwrap_or_default())
            .partial_cmp(&f64::from_le_bytes(a[..8].try_into().unwrap_or_default())),
        DataType::PAIR_X87_I32 => match (x87_value(&x[..10]), x87_value(&a[..10])) {
            (Some(p), Some(q)) => Some(cmp_exact(p, q)),
            _ => None,
        },
        _ => {
            let int = |e: &[u8]| -> i128 {
                let mut w = [0u8; 16];
                w[..v].copy_from_slice(&e[..v]);
                if e[v - 1] & 0x80 != 0 {
                    w[v..].iter_mut().for_each(|b| *b = 0xff);
                }
                i128::from_le_bytes(w)
            };
            Some(int(x).cmp(&int(a)))
        }
    };
    let better = if max { Ordering::Greater } else { Ordering::Less };
    let mut out = a.to_vec();
    if ord == Some(better) {
        out.copy_from_slice(x);
    } else if ord == Some(Ordering::Equal) {
        out[v..].copy_from_slice(&index(a).min(index(x)).to_le_bytes());
    }
    out
}

/// An x87 extended value as `(negative, exponent, significand)` with value
/// `significand × 2^exponent` and the significand's top bit set (or zero: `(_, 0, 0)`); `None`
/// for NaNs, infinities of the wrong form and the encodings the FPU refuses. Infinity is
/// `(_, i32::MAX, 1)`.
fn x87_value(b: &[u8]) -> Option<(bool, i32, u64)> {
    let m = u64::from_le_bytes(b[..8].try_into().ok()?);
    let se = u16::from_le_bytes(b[8..10].try_into().ok()?);
    let (neg, e) = (se >> 15 == 1, i32::from(se & 0x7fff));
    let top = m >> 63 == 1;
    if e == 0x7fff {
        return (top && m == 1 << 63).then_some((neg, i32::MAX, 1));
    }
    if e != 0 && !top {
        return None; // an unnormal
    }
    if m == 0 {
        return Some((neg, 0, 0));
    }
    // Exponent 0 scales as exponent 1 (denormals, pseudo-denormals); then normalized.
    let lz = m.leading_zeros() as i32;
    Some((neg, e.max(1) - 16383 - 63 - lz, m << lz))
}

/// Orders two decoded x87 values.
fn cmp_exact(p: (bool, i32, u64), q: (bool, i32, u64)) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let zero = |v: (bool, i32, u64)| v.2 == 0;
    if zero(p) && zero(q) {
        return Ordering::Equal;
    }
    let signed = |v: (bool, i32, u64)| {
        if zero(v) {
            0
        } else if v.0 {
            -1
        } else {
            1
        }
    };
    match signed(p).cmp(&signed(q)) {
        Ordering::Equal => {}
        other => return other,
    }
    let magnitude = (p.1, p.2).cmp(&(q.1, q.2));
    if p.0 {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// Whether `a` and `b` hold the same elements of `t`: bytes equal, or both NaN (floats).
pub fn same_values(t: DataType, a: &[u8], b: &[u8]) -> bool {
    let size = t.size().unwrap_or(1);
    a.len() == b.len()
        && a.chunks_exact(size).zip(b.chunks_exact(size)).all(|(x, y)| {
            x == y
                || match size {
                    4 if t.is_float() => {
                        f32::from_le_bytes(x.try_into().unwrap_or_default()).is_nan()
                            && f32::from_le_bytes(y.try_into().unwrap_or_default()).is_nan()
                    }
                    8 if t.is_float() => {
                        f64::from_le_bytes(x.try_into().unwrap_or_default()).is_nan()
                            && f64::from_le_bytes(y.try_into().unwrap_or_default()).is_nan()
                    }
                    _ => false,
                }
        })
}
