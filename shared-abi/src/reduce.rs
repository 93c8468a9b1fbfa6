//! What an `ALLREDUCE` or `REDUCE` descriptor reduces: the element type and the operation, two
//! `u8`s the descriptor carries in its `spec` field (type in the low byte, operation in the
//! high one). Both are newtypes on the ABI, enums inside: a host can put any byte there, and the
//! engine answers an unknown or unsupported one with `BadDescriptor` instead of trusting it.
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

    /// Bytes per element; `None` for an unknown type.
    pub const fn size(self) -> Option<usize> {
        match self.0 {
            1 | 2 => Some(1),
            3 | 4 => Some(2),
            5 | 6 | 9 => Some(4),
            7 | 8 | 10 => Some(8),
            _ => None,
        }
    }

    /// A floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self.0, 9 | 10)
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

    /// Whether the engine reduces `dtype` with this operation (bitwise and logical operations
    /// are defined on integers only, as in MPI).
    pub const fn supports(self, dtype: DataType) -> bool {
        match self.0 {
            1..=4 => dtype.size().is_some(),
            5..=9 => dtype.size().is_some() && !dtype.is_float(),
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
