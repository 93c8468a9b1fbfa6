//! Registered memory of a [`Host`]: the [`Region`] a registration returns, and registering
//! and deregistering [`SharedBuf`] ranges (shared mappings with `mapped`, by address with
//! `cma`/`rdma`) or this process's own memory in place ([`Host::register_memory`]).
use crate::error::{Error, Result};
use crate::host::Host;
use crate::shared_buf::SharedBuf;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, RegionKey, RegionRef};

/// A registered region, named by its key: a [`SharedBuf`] range the engine may access, or a
/// range of this process's memory registered in place by address ([`Host::register_memory`],
/// host-owned-ring hosts only).
#[derive(Debug, Clone)]
pub struct Region {
    key: RegionKey,
    offset: u64,
    len: u64,
    buf: Option<SharedBuf>,
}

impl Region {
    /// The engine's key.
    pub fn key(&self) -> RegionKey {
        self.key
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never empty (registration refuses length 0).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Offset of the region inside its buffer.
    pub fn buf_offset(&self) -> u64 {
        self.offset
    }

    /// The buffer it covers (`None`: memory registered in place).
    pub fn buf(&self) -> Option<&SharedBuf> {
        self.buf.as_ref()
    }

    /// `(key, offset)` for a descriptor.
    pub fn at(&self, offset: u64) -> RegionRef {
        RegionRef { key: self.key, offset }
    }
}

impl Host {
    /// Registers all of `buf`.
    pub fn register(&mut self, buf: &SharedBuf, access: Access) -> Result<Region> {
        self.register_range(buf, 0, buf.len() as u64, access)
    }

    /// Registers `len` bytes at `offset` of `buf`.
    pub fn register_range(
        &mut self,
        buf: &SharedBuf,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Region> {
        match offset.checked_add(len) {
            Some(end) if end <= buf.len() as u64 && len > 0 => {}
            _ => return Err(Error::OutOfBounds { offset, len, size: buf.len() as u64 }),
        }
        let reply = if self.host_owned {
            // By address: the engine maps nothing; it reaches the range by DMA.
            self.register_addr(buf.as_ptr() as u64 + offset, len, access)?
        } else {
            let mut req = CtlMsg::new(CtlKind::REGISTER);
            req.a = access.0;
            req.c = buf.len() as u64;
            req.d = offset;
            req.e = len;
            self.request(req, Some(buf), "register")?
        };
        match reply.kind {
            CtlKind::REGISTER_OK => {
                Ok(Region { key: RegionKey(reply.a), offset, len, buf: Some(buf.clone()) })
            }
            _ => Err(Error::Refused { request: "register", status: reply.status }),
        }
    }

    /// Whether this host registers memory in place ([`Host::register_memory`]): its engine
    /// reaches it by DMA (`cma`), not through shared mappings.
    pub fn registers_in_place(&self) -> bool {
        self.host_owned
    }

    /// Registers `len` bytes of this process's memory at `ptr` in place — no copy, no shared
    /// buffer: an MPI user buffer as it is. Only where the engine reaches host memory by DMA
    /// ([`Host::registers_in_place`]; else `Refused` with `BACKEND`, without asking).
    ///
    /// # Safety
    /// The range must stay allocated while registered, and while an operation naming it is
    /// outstanding the engine reads or writes it behind the compiler's back: no Rust reference
    /// to those bytes may be used until the operation's completion (as for a buffer handed to
    /// a NIC).
    pub unsafe fn register_memory(&mut self, ptr: *const u8, len: usize, access: Access) -> Result<Region> {
        if !self.host_owned {
            return Err(Error::Refused { request: "register", status: CtlStatus::BACKEND });
        }
        if ptr.is_null() || len == 0 {
            return Err(Error::OutOfBounds { offset: ptr as u64, len: len as u64, size: 0 });
        }
        let reply = self.register_addr(ptr as u64, len as u64, access)?;
        match reply.kind {
            CtlKind::REGISTER_OK => {
                Ok(Region { key: RegionKey(reply.a), offset: 0, len: len as u64, buf: None })
            }
            _ => Err(Error::Refused { request: "register", status: reply.status }),
        }
    }

    /// `REGISTER_ADDR` of `len` bytes at `addr` of this process (exposed to the engine's queue
    /// pair first with `rdma`: the request carries the rkey).
    fn register_addr(&mut self, addr: u64, len: u64, access: Access) -> Result<CtlMsg> {
        let mut req = CtlMsg::new(CtlKind::REGISTER_ADDR);
        req.a = access.0;
        req.c = addr;
        req.e = len;
        if let Some(end) = self.rdma.as_mut() {
            req.b = end.expose(addr, len, access.0 & Access::WRITE.0 != 0)?;
        }
        let reply = self.request(req, None, "register");
        if let Some(end) = self.rdma.as_mut() {
            end.answered(match &reply {
                Ok(r) if r.kind == CtlKind::REGISTER_OK => Ok(Some(RegionKey(r.a))),
                Ok(_) => Ok(None),
                Err(_) => Err(()),
            });
        }
        reply
    }

    /// Deregisters a region. Descriptors naming it that the engine has not taken yet complete
    /// with `UnknownRegion`; a COPY the engine is executing on it fails with `OutOfBounds`.
    pub fn deregister(&mut self, region: Region) -> Result<()> {
        self.deregister_key(region.key)
    }

    /// Deregisters by key.
    pub fn deregister_key(&mut self, key: RegionKey) -> Result<()> {
        let mut req = CtlMsg::new(CtlKind::DEREGISTER);
        req.a = key.0;
        let reply = self.request(req, None, "deregister")?;
        match reply.kind {
            CtlKind::DEREGISTER_OK => {
                if let Some(end) = self.rdma.as_mut() {
                    end.deregistered(key);
                }
                Ok(())
            }
            _ => Err(Error::Refused { request: "deregister", status: reply.status }),
        }
    }
}
