//! The host library's shared-memory allocator: buffers an engine can reach.
//!
//! A [`SharedBuf`] is an anonymous memfd sealed against shrinking and growing, mapped into this
//! process; its fd goes to the engine at registration, which maps it too. Clones share the same
//! memory. Access is by copy (`read_at`, `write_at`, `fill`): while the engine may be writing a
//! buffer, no Rust reference to its bytes may exist, so none is handed out.
use crate::error::{Error, Result};
use ringcast_ring::ShmSegment;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// A buffer in shared memory.
#[derive(Clone)]
pub struct SharedBuf {
    seg: Arc<ShmSegment>,
}

impl std::fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuf").field("len", &self.len()).finish()
    }
}

impl SharedBuf {
    /// Allocates `len` zeroed bytes (`len > 0`).
    pub fn new(len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::OutOfBounds { offset: 0, len: 0, size: 0 });
        }
        let seg = ShmSegment::create("ringcast-buf", len)?;
        Ok(SharedBuf { seg: Arc::new(seg) })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.seg.len()
    }

    /// The mapping's first byte, for foreign code (the C ABI hands it to C programs, which
    /// read and write the buffer directly and are responsible for not racing the engine: a
    /// buffer is the engine's from a post until its completion). Rust code uses
    /// `read_at`/`write_at`.
    pub fn as_ptr(&self) -> *mut u8 {
        self.seg.as_non_null().as_ptr()
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn oob(&self, offset: u64, len: usize) -> Error {
        Error::OutOfBounds { offset, len: len as u64, size: self.len() as u64 }
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.seg.read_at(offset, out).map_err(|_| self.oob(offset, out.len()))
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.seg.write_at(offset, data).map_err(|_| self.oob(offset, data.len()))
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: u64, len: usize, byte: u8) -> Result<()> {
        self.seg.fill(offset, len as u64, byte).map_err(|_| self.oob(offset, len))
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }

    /// The memfd, for registration.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.seg.fd()
    }
}
