//! The element-wise reductions of `ALLREDUCE`: `acc ← acc ⊕ x` over little-endian elements of
//! one of the ABI's types, for each operation the ABI defines.
//!
//! **Order, and why results are bit-identical.** The engine reduces the gathered contributions
//! in rank order — `((c₀ ⊕ c₁) ⊕ c₂) ⊕ …` — at every rank, over the same bytes; composed
//! leader-based (the default, `engine/allgather/`), each node first reduces
//! its ranks' contributions in rank order and the nodes' results are then reduced in node
//! order — `(c₀ ⊕ c₁) ⊕ (c₂ ⊕ c₃)` for two nodes of two. Either way every rank computes the
//! same operations on the same operands in the same order (a node's result is computed once,
//! by its engine, and multicast), so every rank's result is the same bit pattern, floats
//! included. It may differ from an MPI library's result for
//! floats (a library may reduce in a tree, or in another order per algorithm), within what
//! floating-point reassociation allows; for integers it is exact (wrapping, as C's unsigned
//! arithmetic).
//!
//! Min and max of floats: `b` replaces `a` when `b < a` (`b > a`), so a NaN never replaces a
//! number and a number never replaces a leading NaN — deterministic either way.
//!
//! `MAXLOC` and `MINLOC` on the pair types (`loc.rs`): the incoming pair replaces the
//! accumulated one when its value is larger (smaller); on equal values the lower index stays —
//! MPI's tie rule, the comparison the MPI libraries' own operators make (`in > inout`, then
//! `in == inout`). Without NaNs that is the maximum (minimum) with the lowest index among its
//! equals, whatever the order; with them, deterministic in the engine's order. Only the value's
//! bytes are compared and the index's: the 6 bytes after an x87 value are carried along, never
//! read.
//!
//! No allocation, no `unsafe`: elements are read and written through `from_le_bytes` /
//! `to_le_bytes` on `chunks_exact` (the compiler vectorises the integer loops).
use ringcast_abi::{DataType, ReduceOp};

/// Why a reduction was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceError {
    /// Unknown type, unknown operation, or an operation the type does not support.
    Unsupported,
    /// Lengths differ, or are not a whole number of elements.
    Length,
}

/// Checks that `len` bytes of `dtype` can be reduced with `op`.
pub fn check(dtype: DataType, op: ReduceOp, len: usize) -> Result<(), ReduceError> {
    let size = dtype.size().ok_or(ReduceError::Unsupported)?;
    if !op.supports(dtype) {
        return Err(ReduceError::Unsupported);
    }
    if !len.is_multiple_of(size) {
        return Err(ReduceError::Length);
    }
    Ok(())
}

macro_rules! int_op {
    ($acc:expr, $x:expr, $t:ty, $op:expr) => {{
        const N: usize = core::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(N).zip($x.chunks_exact(N)) {
            let (p, q) = (
                <$t>::from_le_bytes(a.try_into().unwrap_or([0; N])),
                <$t>::from_le_bytes(b.try_into().unwrap_or([0; N])),
            );
            let r: $t = match $op {
                ReduceOp::SUM => p.wrapping_add(q),
                ReduceOp::PROD => p.wrapping_mul(q),
                ReduceOp::MIN => p.min(q),
                ReduceOp::MAX => p.max(q),
                ReduceOp::BAND => p & q,
                ReduceOp::BOR => p | q,
                ReduceOp::BXOR => p ^ q,
                ReduceOp::LAND => <$t>::from(p != 0 && q != 0),
                ReduceOp::LXOR => <$t>::from((p != 0) != (q != 0)),
                _ => <$t>::from(p != 0 || q != 0), // LOR (checked before)
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

macro_rules! float_op {
    ($acc:expr, $x:expr, $t:ty, $op:expr) => {{
        const N: usize = core::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(N).zip($x.chunks_exact(N)) {
            let (p, q) = (
                <$t>::from_le_bytes(a.try_into().unwrap_or([0; N])),
                <$t>::from_le_bytes(b.try_into().unwrap_or([0; N])),
            );
            let r: $t = match $op {
                ReduceOp::SUM => p + q,
                ReduceOp::PROD => p * q,
                ReduceOp::MIN => {
                    if q < p {
                        q
                    } else {
                        p
                    }
                }
                _ => {
                    // MAX (checked before)
                    if q > p {
                        q
                    } else {
                        p
                    }
                }
            };
            a.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// `acc ← acc ⊕ x`, element by element.
pub fn reduce_into(dtype: DataType, op: ReduceOp, acc: &mut [u8], x: &[u8]) -> Result<(), ReduceError> {
    check(dtype, op, acc.len())?;
    if acc.len() != x.len() {
        return Err(ReduceError::Length);
    }
    match dtype {
        DataType::I8 => int_op!(acc, x, i8, op),
        DataType::U8 => int_op!(acc, x, u8, op),
        DataType::I16 => int_op!(acc, x, i16, op),
        DataType::U16 => int_op!(acc, x, u16, op),
        DataType::I32 => int_op!(acc, x, i32, op),
        DataType::U32 => int_op!(acc, x, u32, op),
        DataType::I64 => int_op!(acc, x, i64, op),
        DataType::U64 => int_op!(acc, x, u64, op),
        DataType::F32 => float_op!(acc, x, f32, op),
        DataType::F64 => float_op!(acc, x, f64, op),
        _ => super::loc::reduce_pairs(dtype, op == ReduceOp::MAXLOC, acc, x), // a pair (checked before)
    }
    Ok(())
}

/// Reduces the `blocks.len() / len` contributions of `len` bytes each in `blocks` (rank order)
/// into the first: `blocks[..len] ← c₀ ⊕ c₁ ⊕ …`, left to right.
pub fn reduce_blocks(
    dtype: DataType,
    op: ReduceOp,
    blocks: &mut [u8],
    len: usize,
) -> Result<(), ReduceError> {
    if len == 0 || !blocks.len().is_multiple_of(len) {
        return Err(ReduceError::Length);
    }
    check(dtype, op, len)?;
    let (acc, rest) = blocks.split_at_mut(len);
    for x in rest.chunks_exact(len) {
        reduce_into(dtype, op, acc, x)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i32]) -> alloc::vec::Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn every_operation_on_signed_integers_matches_the_obvious_fold() {
        let contributions = [[3, -7, 100, 0], [5, 2, -100, 9], [-1, 8, 7, 0]];
        type Fold = fn(i32, i32) -> i32;
        let ops: [(ReduceOp, Fold); 10] = [
            (ReduceOp::SUM, i32::wrapping_add),
            (ReduceOp::PROD, i32::wrapping_mul),
            (ReduceOp::MIN, i32::min),
            (ReduceOp::MAX, i32::max),
            (ReduceOp::BAND, |a, b| a & b),
            (ReduceOp::BOR, |a, b| a | b),
            (ReduceOp::BXOR, |a, b| a ^ b),
            (ReduceOp::LAND, |a, b| i32::from(a != 0 && b != 0)),
            (ReduceOp::LOR, |a, b| i32::from(a != 0 || b != 0)),
            (ReduceOp::LXOR, |a, b| i32::from((a != 0) != (b != 0))),
        ];
        for (op, f) in ops {
            let mut blocks: alloc::vec::Vec<u8> = contributions.iter().flat_map(|c| ints(c)).collect();
            reduce_blocks(DataType::I32, op, &mut blocks, 16).unwrap();
            let want: alloc::vec::Vec<i32> =
                (0..4).map(|i| contributions.iter().map(|c| c[i]).reduce(f).unwrap()).collect();
            assert_eq!(blocks[..16], ints(&want)[..], "{op:?}");
        }
    }

    #[test]
    fn integers_wrap_and_floats_reduce_left_to_right() {
        let mut acc = 250u8.to_le_bytes().to_vec();
        reduce_into(DataType::U8, ReduceOp::SUM, &mut acc, &[10]).unwrap();
        assert_eq!(acc, [4]);
        // (1e16 + 1) + -1e16 = 0 in f64 left to right (1 is lost), 1 in another order.
        let vals = [1e16f64, 1.0, -1e16];
        let mut blocks: alloc::vec::Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        reduce_blocks(DataType::F64, ReduceOp::SUM, &mut blocks, 8).unwrap();
        assert_eq!(f64::from_le_bytes(blocks[..8].try_into().unwrap()), (1e16 + 1.0) + -1e16);
        // A NaN never replaces a number in min or max; a leading NaN stays.
        let mut acc = 1.0f32.to_le_bytes().to_vec();
        reduce_into(DataType::F32, ReduceOp::MIN, &mut acc, &f32::NAN.to_le_bytes()).unwrap();
        assert_eq!(f32::from_le_bytes(acc[..].try_into().unwrap()), 1.0);
    }

    #[test]
    fn unsupported_combinations_and_bad_lengths_are_refused() {
        let mut acc = [0u8; 8];
        assert_eq!(
            reduce_into(DataType::F64, ReduceOp::BAND, &mut acc, &[0; 8]),
            Err(ReduceError::Unsupported)
        );
        assert_eq!(
            reduce_into(DataType::F32, ReduceOp::LOR, &mut acc, &[0; 8]),
            Err(ReduceError::Unsupported)
        );
        assert_eq!(reduce_into(DataType(0), ReduceOp::SUM, &mut acc, &[0; 8]), Err(ReduceError::Unsupported));
        // MAXLOC and MINLOC on pairs only, and pairs with nothing else.
        assert_eq!(
            reduce_into(DataType::F64, ReduceOp::MAXLOC, &mut acc, &[0; 8]),
            Err(ReduceError::Unsupported)
        );
        assert_eq!(
            reduce_into(DataType::PAIR_I32_I32, ReduceOp::SUM, &mut acc, &[0; 8]),
            Err(ReduceError::Unsupported)
        );
        assert_eq!(reduce_into(DataType::PAIR_I32_I32, ReduceOp::MINLOC, &mut acc, &[0; 8]), Ok(()));
        // A pair's length in whole (packed) elements: 12 bytes of MPI_DOUBLE_INT, not 16.
        let mut two = [0u8; 24];
        assert_eq!(
            reduce_into(DataType::PAIR_F64_I32, ReduceOp::MAXLOC, &mut two[..16], &[0; 16]),
            Err(ReduceError::Length)
        );
        assert_eq!(reduce_blocks(DataType::PAIR_F64_I32, ReduceOp::MAXLOC, &mut two, 12), Ok(()));
        assert_eq!(
            reduce_into(DataType::I32, ReduceOp(99), &mut acc, &[0; 8]),
            Err(ReduceError::Unsupported)
        );
        assert_eq!(
            reduce_into(DataType::I64, ReduceOp::SUM, &mut acc[..6], &[0; 6]),
            Err(ReduceError::Length)
        );
        assert_eq!(reduce_into(DataType::I32, ReduceOp::SUM, &mut acc, &[0; 4]), Err(ReduceError::Length));
        assert_eq!(reduce_blocks(DataType::I32, ReduceOp::SUM, &mut acc, 3), Err(ReduceError::Length));
    }
}
