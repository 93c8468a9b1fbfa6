//! `ringcast-abi`: every byte layout that crosses a boundary in ringcast.
//!
//! Three boundaries meet here:
//! * **host ↔ engine** (shared memory): [`SubmissionDescriptor`], [`Completion`], the ring control
//!   block ([`RingControl`]), the per-host attach segment ([`SegmentHeader`]), registration
//!   records ([`RegistrationRecord`]) and communicator records ([`CommCreateHeader`]);
//! * **host ↔ daemon control socket**: the fixed-size messages of [`ctl`];
//! * **engine ↔ engine** (the fabric): the datagram header [`WireHeader`].
//!
//! Rules (docs/design.md §2, STYLE "ABI structs"): `#[repr(C)]`, fixed-width integers, explicit padding,
//! no `usize`/`bool`/Rust enums (a `u8`/`u16` newtype with `TryFrom` instead), a `const` assertion
//! on every size, alignment and field offset, and the same layout on x86-64 and aarch64
//! (checked against `fixtures/abi-layout.txt` by [`layout`]). The engine refuses a host whose
//! [`ABI_VERSION`] differs from its own.
#![no_std]
#![forbid(unsafe_code)]

pub mod comm;
pub mod counters;
pub mod cqe;
pub mod crc_combine;
pub mod ctl;
pub mod desc;
pub mod frame;
pub mod layout;
pub mod opcode;
pub mod reduce;
pub mod reg;
pub mod ring;
pub mod segment;
pub mod status;
pub mod wire;

pub use comm::{CommCreateHeader, COMM_KEY_LEN, COMM_MAGIC};
pub use cqe::Completion;
pub use desc::{RegionRef, SubmissionDescriptor};
pub use opcode::{Op, Opcode};
pub use reduce::{DataType, ReduceOp};
pub use reg::{Access, RegionKey, RegistrationRecord};
pub use ring::{ConsumerIndex, ProducerIndex, RingControl, RingHeader, RingRole};
pub use segment::SegmentHeader;
pub use status::{Status, StatusKind};
pub use wire::{FrameKind, WireHeader};

/// Version of every layout in this crate. Bump on any change to a `#[repr(C)]` type or a
/// constant's meaning; the golden layout file must be re-blessed in the same commit.
pub const ABI_VERSION: u32 = 8;

/// Size of the cache-line unit used to keep producer and consumer state apart. 128 bytes, not
/// 64: x86 adjacent-line prefetch and the Neoverse cores of BlueField-3 both pull pairs of lines.
pub const CACHE_LINE: usize = 128;

// Every layout here is little-endian on the wire and in shared memory; both supported targets
// (x86-64, aarch64) are little-endian, so native integers are used in shared memory.
#[cfg(not(target_endian = "little"))]
compile_error!("ringcast's shared-memory ABI is little-endian; big-endian targets are not supported");
