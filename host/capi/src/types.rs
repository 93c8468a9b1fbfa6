//! What a reduction reduces, as C names it: `RINGCAST_TYPE_*` (the ABI's `DataType`) and
//! `RINGCAST_OP_*` (its `ReduceOp`), each checked against the ABI's value at compile time.
//!
//! The pair types are MPI's `MAXLOC`/`MINLOC` types packed (`MPI_Pack`'s layout: the value,
//! then an `int32_t` index, no padding): `RINGCAST_TYPE_PAIR_F64_I32` is 12 bytes per element
//! where a C array of `struct { double; int; }` spaces them 16 apart. They take
//! `RINGCAST_OP_MAXLOC` and `RINGCAST_OP_MINLOC` only, and those only them.
use ringcast_abi::{DataType, ReduceOp};

/// Signed 8-bit integers.
pub const RINGCAST_TYPE_INT8: u8 = 1;
/// Unsigned 8-bit integers.
pub const RINGCAST_TYPE_UINT8: u8 = 2;
/// Signed 16-bit integers.
pub const RINGCAST_TYPE_INT16: u8 = 3;
/// Unsigned 16-bit integers.
pub const RINGCAST_TYPE_UINT16: u8 = 4;
/// Signed 32-bit integers.
pub const RINGCAST_TYPE_INT32: u8 = 5;
/// Unsigned 32-bit integers.
pub const RINGCAST_TYPE_UINT32: u8 = 6;
/// Signed 64-bit integers.
pub const RINGCAST_TYPE_INT64: u8 = 7;
/// Unsigned 64-bit integers.
pub const RINGCAST_TYPE_UINT64: u8 = 8;
/// IEEE 754 binary32.
pub const RINGCAST_TYPE_FLOAT: u8 = 9;
/// IEEE 754 binary64.
pub const RINGCAST_TYPE_DOUBLE: u8 = 10;
/// `float` value, `int32_t` index (8 bytes; `MPI_FLOAT_INT`).
pub const RINGCAST_TYPE_PAIR_F32_I32: u8 = 11;
/// `double` value, `int32_t` index, packed (12 bytes; `MPI_DOUBLE_INT`).
pub const RINGCAST_TYPE_PAIR_F64_I32: u8 = 12;
/// `int64_t` value, `int32_t` index, packed (12 bytes; `MPI_LONG_INT` with a 64-bit `long`).
pub const RINGCAST_TYPE_PAIR_I64_I32: u8 = 13;
/// `int32_t` value, `int32_t` index (8 bytes; `MPI_2INT`).
pub const RINGCAST_TYPE_PAIR_I32_I32: u8 = 14;
/// `int16_t` value, `int32_t` index, packed (6 bytes; `MPI_SHORT_INT`).
pub const RINGCAST_TYPE_PAIR_I16_I32: u8 = 15;
/// x87 80-bit `long double` in 16 bytes, `int32_t` index, packed (20 bytes;
/// `MPI_LONG_DOUBLE_INT` on x86-64).
pub const RINGCAST_TYPE_PAIR_X87_I32: u8 = 16;

/// Sum (integers wrap around).
pub const RINGCAST_OP_SUM: u8 = 1;
/// Product (integers wrap around).
pub const RINGCAST_OP_PROD: u8 = 2;
/// Minimum.
pub const RINGCAST_OP_MIN: u8 = 3;
/// Maximum.
pub const RINGCAST_OP_MAX: u8 = 4;
/// Bitwise and (integers only).
pub const RINGCAST_OP_BAND: u8 = 5;
/// Bitwise or (integers only).
pub const RINGCAST_OP_BOR: u8 = 6;
/// Bitwise exclusive or (integers only).
pub const RINGCAST_OP_BXOR: u8 = 7;
/// Logical and (integers only).
pub const RINGCAST_OP_LAND: u8 = 8;
/// Logical or (integers only).
pub const RINGCAST_OP_LOR: u8 = 9;
/// Logical exclusive or (integers only).
pub const RINGCAST_OP_LXOR: u8 = 10;
/// The largest value with its index, the lowest index among equal values (pair types only).
pub const RINGCAST_OP_MAXLOC: u8 = 11;
/// The smallest value with its index, the lowest index among equal values (pair types only).
pub const RINGCAST_OP_MINLOC: u8 = 12;

static_assertions::const_assert_eq!(RINGCAST_TYPE_INT8, DataType::I8.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_UINT64, DataType::U64.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_DOUBLE, DataType::F64.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_F32_I32, DataType::PAIR_F32_I32.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_F64_I32, DataType::PAIR_F64_I32.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_I64_I32, DataType::PAIR_I64_I32.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_I32_I32, DataType::PAIR_I32_I32.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_I16_I32, DataType::PAIR_I16_I32.0);
static_assertions::const_assert_eq!(RINGCAST_TYPE_PAIR_X87_I32, DataType::PAIR_X87_I32.0);
static_assertions::const_assert_eq!(RINGCAST_OP_SUM, ReduceOp::SUM.0);
static_assertions::const_assert_eq!(RINGCAST_OP_LOR, ReduceOp::LOR.0);
static_assertions::const_assert_eq!(RINGCAST_OP_LXOR, ReduceOp::LXOR.0);
static_assertions::const_assert_eq!(RINGCAST_OP_MAXLOC, ReduceOp::MAXLOC.0);
static_assertions::const_assert_eq!(RINGCAST_OP_MINLOC, ReduceOp::MINLOC.0);
