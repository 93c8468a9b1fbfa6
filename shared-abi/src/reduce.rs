//! What an `ALLREDUCE` or `REDUCE` descriptor reduces: the element type and the operation, two
//! `u8`s the descriptor carries in its `spec` field (type in the low byte, operation in the
//! high one). Both are newtypes on the ABI, enums inside: a host can put any byte there, and the
//! engine answers an unknown or unsupported one with `BadDescriptor` instead of trusting it.
//!
//! The pair types are MPI's `MAXLOC`/`MINLOC` types as `MPI_Pack` lays them out on a
//! little-endian host: the value's bytes, then a signed 32-bit index, with no padding between
//! or after (`MPI_DOUBLE_INT` is 12 bytes here, 16 in a C array). They reduce with `MAXLOC` and
//! `MINLOC` only, and those only them. Values added after version 7 without a bump (no layout
//! changed): an older engine answers `BadDescriptor` for them.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Element type of a reduction (raw byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct DataType(pub u8);

/// Operation of a reduction (raw byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct ReduceOp(pub u8);

impl DataType {
    /// Signed 8-bit integers.
    pub const I8: DataType = DataType(1);
    /// Unsigned 8-bit integers.
    pub const U8: DataType = DataType(2);
    /// Signed 16-bit integers.
    pub const I16: DataType = DataType(3);
    /// Unsigned 16-bit integers.
    pub const U16: DataType = DataType(4);
    /// Signed 32-bit integers.
    pub const I32: DataType = DataType(5);
    /// Unsigned 32-bit integers.
    pub const U32: DataType = DataType(6);
    /// Signed 64-bit integers.
    pub const I64: DataType = DataType(7);
    /// Unsigned 64-bit integers.
    pub const U64: DataType = DataType(8);
    /// IEEE 754 binary32.
    pub const F32: DataType = DataType(9);
    /// IEEE 754 binary64.
    pub const F64: DataType = DataType(10);
    /// `MPI_FLOAT_INT`: binary32 value, i32 index (8 bytes).
    pub const PAIR_F32_I32: DataType = DataType(11);
    /// `MPI_DOUBLE_INT` packed: binary64 value, i32 index (12 bytes).
    pub const PAIR_F64_I32: DataType = DataType(12);
    /// `MPI_LONG_INT` packed (a 64-bit `long`): i64 value, i32 index (12 bytes).
    pub const PAIR_I64_I32: DataType = DataType(13);
    /// `MPI_2INT`: i32 value, i32 index (8 bytes).
    pub const PAIR_I32_I32: DataType = DataType(14);
    /// `MPI_SHORT_INT` packed: i16 value, i32 index (6 bytes).
    pub const PAIR_I16_I32: DataType = DataType(15);
    /// `MPI_LONG_DOUBLE_INT` packed where `long double` is the x87 80-bit extended format in 16
    /// bytes (x86-64): the value's 10 bytes, 6 bytes never read, i32 index (20 bytes).
    pub const PAIR_X87_I32: DataType = DataType(16);

    /// Bytes per element; `None` for an unknown type.
    pub const fn size(self) -> Option<usize> {
        match self.0 {
            1 | 2 => Some(1),
            3 | 4 => Some(2),
            5 | 6 | 9 => Some(4),
            7 | 8 | 10 | 11 | 14 => Some(8),
            12 | 13 => Some(12),
            15 => Some(6),
            16 => Some(20),
            _ => None,
        }
    }

    /// A floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self.0, 9 | 10)
    }

    /// A (value, index) pair of `MAXLOC`/`MINLOC`.
    pub const fn is_pair(self) -> bool {
        matches!(self.0, 11..=16)
    }

    /// An integer type (of one value).
    pub const fn is_integer(self) -> bool {
        matches!(self.0, 1..=8)
    }
}

impl ReduceOp {
    /// Sum (integers wrap around, as C's unsigned arithmetic and MPI implementations do).
    pub const SUM: ReduceOp = ReduceOp(1);
    /// Product (integers wrap around).
    pub const PROD: ReduceOp = ReduceOp(2);
    /// Minimum.
    pub const MIN: ReduceOp = ReduceOp(3);
    /// Maximum.
    pub const MAX: ReduceOp = ReduceOp(4);
    /// Bitwise and (integers only).
    pub const BAND: ReduceOp = ReduceOp(5);
    /// Bitwise or (integers only).
    pub const BOR: ReduceOp = ReduceOp(6);
    /// Bitwise exclusive or (integers only).
    pub const BXOR: ReduceOp = ReduceOp(7);
    /// Logical and: 1 if both are non-zero, else 0 (integers only).
    pub const LAND: ReduceOp = ReduceOp(8);
    /// Logical or: 1 if either is non-zero, else 0 (integers only).
    pub const LOR: ReduceOp = ReduceOp(9);
    /// Logical exclusive or: 1 if exactly one is non-zero, else 0 (integers only).
    pub const LXOR: ReduceOp = ReduceOp(10);
    /// The larger value and its index; of equal values the lower index (pair types only).
    pub const MAXLOC: ReduceOp = ReduceOp(11);
    /// The smaller value and its index; of equal values the lower index (pair types only).
    pub const MINLOC: ReduceOp = ReduceOp(12);

    /// Whether the engine reduces `dtype` with this operation (bitwise and logical operations
    /// are defined on integers only, `MAXLOC` and `MINLOC` on the pair types only, as in MPI).
    pub const fn supports(self, dtype: DataType) -> bool {
        match self.0 {
            1..=4 => dtype.is_integer() || dtype.is_float(),
            5..=10 => dtype.is_integer(),
            11 | 12 => dtype.is_pair(),
            _ => false,
        }
    }
}

/// The `spec` field of an `ALLREDUCE` or `REDUCE` descriptor carrying `dtype` and `op`.
pub const fn reduce_spec(dtype: DataType, op: ReduceOp) -> u16 {
    dtype.0 as u16 | (op.0 as u16) << 8
}

/// The type and operation a `spec` field carries.
pub const fn parse_reduce_spec(spec: u16) -> (DataType, ReduceOp) {
    (DataType(spec as u8), ReduceOp((spec >> 8) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every known type with every known operation: MPI's groups (C integer, floating point,
    /// logical and bitwise on integers, `MAXLOC`/`MINLOC` on the pair types) and nothing else.
    #[test]
    fn operations_support_their_mpi_groups_only() {
        for t in 0..=17u8 {
            let t = DataType(t);
            for o in 0..=13u8 {
                let o = ReduceOp(o);
                let want = matches!((o.0, t.0), (1..=4, 1..=10) | (5..=10, 1..=8) | (11 | 12, 11..=16));
                assert_eq!(o.supports(t), want, "{t:?} {o:?}");
                // A supported type always has a size: the engine cuts its buffers by it.
                assert!(!want || t.size().is_some(), "{t:?}");
            }
        }
        // The packed pairs: the value's bytes then an i32, no padding.
        let sizes = [(DataType::PAIR_F32_I32, 8), (DataType::PAIR_F64_I32, 12), (DataType::PAIR_I64_I32, 12)];
        for (t, n) in sizes {
            assert_eq!(t.size(), Some(n));
        }
        assert_eq!(DataType::PAIR_I32_I32.size(), Some(8));
        assert_eq!(DataType::PAIR_I16_I32.size(), Some(6));
        assert_eq!(DataType::PAIR_X87_I32.size(), Some(20));
        let (t, o) = parse_reduce_spec(reduce_spec(DataType::PAIR_X87_I32, ReduceOp::MINLOC));
        assert_eq!((t, o), (DataType::PAIR_X87_I32, ReduceOp::MINLOC));
    }
}
