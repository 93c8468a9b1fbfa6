//! Communicators: an identity drawn by one member (`ringcast_new_identity`) and handed to the
//! others (over MPI, say), `ringcast_comm_create` at every member, `ringcast_comm_free`.
use crate::codes::{code, RINGCAST_ERR_INVALID, RINGCAST_OK};
use crate::state::with_state;
use std::ffi::c_int;

/// A communicator's identity: what one member draws with [`ringcast_new_identity`] and hands
/// to the others (e.g. `MPI_Bcast` of `sizeof(RingcastIdentity)` bytes) before each calls
/// [`ringcast_comm_create`]. 64 bytes, no pointers: it can be copied as bytes.
///
/// `key` is the communicator's secret: it keys every frame's tag and the message MAC, so
/// anyone who holds it can forge the communicator's traffic. Hand it to the members only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingcastIdentity {
    /// The communicator's handle (the cookie its frames carry; never 0).
    pub handle: u64,
    /// Seed agreed at creation (randomized root delay).
    pub seed: u64,
    /// The 112-bit multicast group id.
    pub group: [u8; 14],
    /// Zero.
    pub pad: [u8; 2],
    /// The communicator's secret key (32 bytes from the CSPRNG).
    pub key: [u8; 32],
}

// C code copies it as bytes (MPI_Bcast of sizeof): its layout is part of the ABI.
const _: () = assert!(std::mem::size_of::<RingcastIdentity>() == 64);
const _: () = assert!(std::mem::offset_of!(RingcastIdentity, key) == 32);

/// Draws a new communicator identity (handle, multicast group, seed and secret key) from the
/// cryptographic generator into `*id`; one member draws, the others receive it and every
/// member passes it to [`ringcast_comm_create`].
///
/// # Safety
/// `id` is valid for one write of a `RingcastIdentity`.
#[no_mangle]
pub unsafe extern "C" fn ringcast_new_identity(id: *mut RingcastIdentity) -> c_int {
    if id.is_null() {
        return RINGCAST_ERR_INVALID;
    }
    let i = ringcast_offload::entropy::new_identity();
    let out = RingcastIdentity { handle: i.cookie, seed: i.seed, group: i.group, pad: [0; 2], key: i.key.0 };
    // SAFETY: the caller guarantees `id` points to a writable `RingcastIdentity`; `write` does
    // not read the (possibly uninitialised) old value.
    unsafe { id.write(out) };
    RINGCAST_OK
}

/// Creates the communicator `*id` names (from [`ringcast_new_identity`], the same at every
/// member) of the `n` world ranks `members`, this process being `members[my_rank]`. Every member
/// calls it; broadcasts name it by `id->handle`.
///
/// # Safety
/// `id` is valid for one read of a `RingcastIdentity`, `members` for `n` `u32`s.
#[no_mangle]
pub unsafe extern "C" fn ringcast_comm_create(
    id: *const RingcastIdentity,
    my_rank: u32,
    members: *const u32,
    n: u32,
) -> c_int {
    if id.is_null() || members.is_null() || n == 0 {
        return RINGCAST_ERR_INVALID;
    }
    // SAFETY: the caller guarantees a readable `RingcastIdentity` at `id` (plain bytes, any
    // value valid) and `n` `u32`s at `members`.
    let (id, members) = unsafe { (id.read(), std::slice::from_raw_parts(members, n as usize)) };
    if id.handle == 0 || id.key == [0; 32] {
        return RINGCAST_ERR_INVALID;
    }
    let ident = ringcast_proto::comm::ident::CommIdentity {
        cookie: id.handle,
        group: id.group,
        seed: id.seed,
        key: ringcast_proto::comm::auth::Secret(id.key),
    };
    with_state(|s| s.host.comm_create(&ident, my_rank, members).map(|()| RINGCAST_OK).map_err(|e| code(&e)))
}

/// Leaves communicator `handle` (`MPI_Comm_free`). Once every local member left it, the engine
/// settles its last, partial synchronization epoch with the other engines and drops it.
#[no_mangle]
pub extern "C" fn ringcast_comm_free(handle: u64) -> c_int {
    with_state(|s| s.host.comm_free(handle).map(|()| RINGCAST_OK).map_err(|e| code(&e)))
}
