//! Registered buffers (`RingcastBuf`, opaque to C): shared memory this library allocates and
//! registers (`ringcast_buf_new`), or the caller's own memory registered in place where the
//! engine reaches host memory by DMA (`ringcast_buf_wrap`); their mapping, length and release.
//! A buffer belongs to the engine from the post of an operation on it until that operation's
//! completion: C code must not touch it meanwhile.
use crate::codes::{code, RINGCAST_ERR_INVALID, RINGCAST_OK};
use crate::state::with_state;
use ringcast_host::{Access, Region, RegionRef, SharedBuf};
use std::ffi::c_int;

/// A message buffer registered with the engine (opaque to C): shared memory this library
/// allocated (`ringcast_buf_new`), or the caller's own memory registered in place
/// (`ringcast_buf_wrap`).
pub struct RingcastBuf {
    /// The shared buffer, kept mapped while C holds `ptr` into it; `None` for wrapped memory.
    _buf: Option<SharedBuf>,
    ptr: *mut u8,
    len: usize,
    region: Region,
}

impl RingcastBuf {
    /// Where `len` bytes at `offset` of this buffer are for the engine, if they lie inside it
    /// (`len` 0: `offset` itself inside): the library's own bounds check, before the engine's.
    pub(crate) fn range(&self, offset: usize, len: usize) -> Option<RegionRef> {
        let end = offset.checked_add(len)?;
        (end <= self.len && offset < self.len).then(|| self.region.at(offset as u64))
    }
}

/// The buffer C passed, if any.
///
/// # Safety
/// `b` is NULL or a live buffer of ours.
pub(crate) unsafe fn buf<'a>(b: *const RingcastBuf) -> Option<&'a RingcastBuf> {
    // SAFETY: the caller guarantees `b` is NULL or a live buffer of ours.
    unsafe { b.as_ref() }
}

/// A registered buffer of `len` bytes (zeroed), or NULL.
#[no_mangle]
pub extern "C" fn ringcast_buf_new(len: usize) -> *mut RingcastBuf {
    let mut out = std::ptr::null_mut();
    with_state(|s| {
        let buf = SharedBuf::new(len.max(1)).map_err(|e| code(&e))?;
        let region = s.host.register(&buf, Access::READ_WRITE).map_err(|e| code(&e))?;
        let (ptr, len) = (buf.as_ptr(), buf.len());
        out = Box::into_raw(Box::new(RingcastBuf { _buf: Some(buf), ptr, len, region }));
        Ok(RINGCAST_OK)
    });
    out
}

/// 1 when this process's engine reaches host memory by DMA, so `ringcast_buf_wrap` can
/// register memory in place; 0 when it maps shared buffers (only `ringcast_buf_new`'s); a
/// negative code before `ringcast_init`.
#[no_mangle]
pub extern "C" fn ringcast_registers_in_place() -> c_int {
    with_state(|s| Ok(c_int::from(s.host.registers_in_place())))
}

/// Registers `len` bytes of the caller's memory at `ptr` in place (no copy), as a buffer the
/// other calls take like one of `ringcast_buf_new`'s; NULL when this process's engine reaches
/// host memory through shared mappings (`RINGCAST_DMA=mapped`, or `auto` — the default — over
/// the Unix socket: only `cma` and engines across the PCIe boundary register in place), or on
/// error.
/// `ringcast_buf_free` deregisters it and leaves the memory alone.
///
/// # Safety
/// `ptr..ptr+len` stays allocated until `ringcast_buf_free`, and is not touched by the caller
/// while an operation on it is outstanding.
#[no_mangle]
pub unsafe extern "C" fn ringcast_buf_wrap(ptr: *mut u8, len: usize) -> *mut RingcastBuf {
    let mut out = std::ptr::null_mut();
    with_state(|s| {
        if !s.host.registers_in_place() || ptr.is_null() || len == 0 {
            return Err(RINGCAST_ERR_INVALID);
        }
        // SAFETY: the caller keeps the range allocated while registered and untouched while
        // an operation on it is outstanding (this function's contract).
        let region = unsafe { s.host.register_memory(ptr, len, Access::READ_WRITE) }.map_err(|e| code(&e))?;
        out = Box::into_raw(Box::new(RingcastBuf { _buf: None, ptr, len, region }));
        Ok(RINGCAST_OK)
    });
    out
}

/// The first byte of buffer `b` (NULL for a NULL `b`).
///
/// # Safety
/// `b` is NULL or a pointer `ringcast_buf_new` returned and `ringcast_buf_free` has not freed.
#[no_mangle]
pub unsafe extern "C" fn ringcast_buf_ptr(b: *const RingcastBuf) -> *mut u8 {
    // SAFETY: the caller guarantees `b` is NULL or a live buffer of ours.
    match unsafe { b.as_ref() } {
        Some(b) => b.ptr,
        None => std::ptr::null_mut(),
    }
}

/// Bytes of buffer `b` (0 for NULL).
///
/// # Safety
/// As for [`ringcast_buf_ptr`].
#[no_mangle]
pub unsafe extern "C" fn ringcast_buf_len(b: *const RingcastBuf) -> usize {
    // SAFETY: as in `ringcast_buf_ptr`.
    unsafe { b.as_ref() }.map_or(0, |b| b.len)
}

/// Deregisters and frees buffer `b` (NULL: nothing).
///
/// # Safety
/// `b` is NULL or a live buffer of ours, with no operation outstanding on it; it must not be
/// used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ringcast_buf_free(b: *mut RingcastBuf) -> c_int {
    if b.is_null() {
        return RINGCAST_OK;
    }
    // SAFETY: the caller hands back ownership of a `Box` we made.
    let b = unsafe { Box::from_raw(b) };
    let key = b.region.key();
    with_state(move |s| {
        s.host.deregister_key(key).map_err(|e| code(&e))?;
        drop(b);
        Ok(RINGCAST_OK)
    })
}
