//! The host's end of the `rdma` DMA backend (`RINGCAST_DMA=rdma`; feature `rdma`, over
//! `ringcast-verbs`): a passive reliable-connected queue pair the engine connects to
//! (`RDMA_CONNECT`), and this process's memory registered for remote read and write — the
//! host-owned rings at attach, every buffer at registration, in place — named to the engine by
//! (address, length, rkey). The engine then reads descriptors and payloads and writes data,
//! completions and indices by RDMA; this process's CPU takes no part in it.
//!
//! The device is the `verbs` section's (`RINGCAST_VERBS_DEVICE`, `_PORT`, `_GID_INDEX`): on a
//! BlueField host, the host-side function of the DPU's NIC.
use crate::error::{Error, Result};
use ringcast_abi::RegionKey;
use ringcast_offload::config::VerbsConfig;
use ringcast_offload::ctl::QpAddress;

/// The host's RDMA end, and the regions it exposes.
pub(crate) struct RdmaEnd {
    #[cfg(feature = "rdma")]
    responder: ringcast_verbs::Responder,
    /// The rings' region (for the attachment's life).
    #[cfg(feature = "rdma")]
    rings: Option<ringcast_verbs::ExposedMr>,
    /// Registered regions by key; one exposed but not yet answered.
    #[cfg(feature = "rdma")]
    regions: Vec<(RegionKey, ringcast_verbs::ExposedMr)>,
    #[cfg(feature = "rdma")]
    unanswered: Option<ringcast_verbs::ExposedMr>,
    /// Regions whose registration got no answer in time: the engine may still have taken them
    /// (its late `REGISTER_OK` is then deregistered as an orphan), so they stay exposed until
    /// the attachment ends — withdrawing them could break the connection under a late probe.
    #[cfg(feature = "rdma")]
    unsettled: Vec<ringcast_verbs::ExposedMr>,
}

#[cfg(feature = "rdma")]
fn rdma_error(e: ringcast_verbs::VerbsError) -> Error {
    Error::Rdma(e.to_string())
}

#[cfg(feature = "rdma")]
impl RdmaEnd {
    /// Opens the device and makes the queue pair (not yet connected).
    pub(crate) fn open(cfg: &VerbsConfig) -> Result<RdmaEnd> {
        let responder =
            ringcast_verbs::Responder::open(&cfg.device, cfg.port, cfg.gid_index).map_err(rdma_error)?;
        Ok(RdmaEnd { responder, rings: None, regions: Vec::new(), unanswered: None, unsettled: Vec::new() })
    }

    /// Its queue pair's address, for `RDMA_CONNECT`.
    pub(crate) fn address(&self) -> Result<QpAddress> {
        let a = self.responder.address().map_err(rdma_error)?;
        Ok(QpAddress { qpn: a.qpn, psn: a.psn, lid: a.lid, gid: a.gid, mtu: a.mtu })
    }

    /// Connects to the engine's queue pair (`RDMA_CONNECT_OK`).
    pub(crate) fn connect(&mut self, engine: &QpAddress) -> Result<()> {
        let a = ringcast_verbs::RcAddress {
            qpn: engine.qpn,
            psn: engine.psn,
            lid: engine.lid,
            gid: engine.gid,
            mtu: engine.mtu,
        };
        self.responder.connect(&a).map_err(rdma_error)
    }

    /// Exposes the rings' `len` bytes at `addr`: their rkey.
    pub(crate) fn expose_rings(&mut self, addr: u64, len: u64) -> Result<u32> {
        let mr = self.responder.expose(addr, len as usize, true).map_err(rdma_error)?;
        let rkey = mr.rkey();
        self.rings = Some(mr);
        Ok(rkey)
    }

    /// Exposes `len` bytes at `addr` for a registration about to be asked for, writable by the
    /// engine only when `writable` (its NIC refuses any WRITE otherwise): its rkey.
    pub(crate) fn expose(&mut self, addr: u64, len: u64, writable: bool) -> Result<u32> {
        let mr = self.responder.expose(addr, len as usize, writable).map_err(rdma_error)?;
        let rkey = mr.rkey();
        self.unanswered = Some(mr);
        Ok(rkey)
    }

    /// The engine answered the registration: kept under `key` (`Ok(Some)`), dropped when
    /// refused (`Ok(None)`: the engine withdrew it), kept until detach when no answer came in
    /// time (`Err`).
    pub(crate) fn answered(&mut self, key: std::result::Result<Option<RegionKey>, ()>) {
        let Some(mr) = self.unanswered.take() else { return };
        match key {
            Ok(Some(key)) => self.regions.push((key, mr)),
            Ok(None) => drop(mr),
            Err(()) => self.unsettled.push(mr),
        }
    }

    /// The engine dropped `key`: its memory is no longer exposed.
    pub(crate) fn deregistered(&mut self, key: RegionKey) {
        self.regions.retain(|(k, _)| *k != key);
    }
}

#[cfg(not(feature = "rdma"))]
impl RdmaEnd {
    pub(crate) fn open(_: &VerbsConfig) -> Result<RdmaEnd> {
        Err(Error::Rdma("this build of the host library has no RDMA support (feature `rdma`)".into()))
    }
    pub(crate) fn address(&self) -> Result<QpAddress> {
        unreachable_end()
    }
    pub(crate) fn connect(&mut self, _: &QpAddress) -> Result<()> {
        unreachable_end()
    }
    pub(crate) fn expose_rings(&mut self, _: u64, _: u64) -> Result<u32> {
        unreachable_end()
    }
    pub(crate) fn expose(&mut self, _: u64, _: u64, _: bool) -> Result<u32> {
        unreachable_end()
    }
    pub(crate) fn answered(&mut self, _: std::result::Result<Option<RegionKey>, ()>) {}
    pub(crate) fn deregistered(&mut self, _: RegionKey) {}
}

/// Without the feature no `RdmaEnd` is ever made (`open` fails): these are never called.
#[cfg(not(feature = "rdma"))]
fn unreachable_end<T>() -> Result<T> {
    Err(Error::Rdma("no RDMA support in this build".into()))
}
