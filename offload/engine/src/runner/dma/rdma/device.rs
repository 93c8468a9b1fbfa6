//! The `rdma` backend's queue pairs on a real RDMA device (feature `verbs`, over
//! `ringcast-verbs`): one RC queue pair per host, on the device, port and GID index of the
//! `verbs` section (`RINGCAST_VERBS_DEVICE`, `_PORT`, `_GID_INDEX`), opened at the first
//! `RDMA_CONNECT`.
use super::{RcPort, RdmaDevice, WorkDone, WorkRequest};
use crate::config::VerbsConfig;
use crate::ctl::QpAddress;
use ringcast_verbs::{sys, Context, PostError, RcAddress, RcQueue, RdmaRequest};
use std::sync::Arc;

/// Bytes of local buffer per host's queue pair: a job larger than this moves in pieces.
const LINK_BUFFER: usize = 256 * 1024;
/// Work requests in flight per host's queue pair (one batch: `BATCH`).
const LINK_DEPTH: u32 = 32;

/// The device the engine's queue pairs are made on.
pub struct VerbsDevice {
    ctx: Arc<Context>,
    port: u8,
    gid_index: u8,
}

impl VerbsDevice {
    /// Opens the device `cfg` names (the first one when none is named).
    pub fn open(cfg: &VerbsConfig) -> Result<VerbsDevice, String> {
        let ctx = Context::open(&cfg.device).map_err(|e| e.to_string())?;
        Ok(VerbsDevice { ctx, port: cfg.port, gid_index: cfg.gid_index })
    }
}

fn to_wire(a: RcAddress) -> QpAddress {
    QpAddress { qpn: a.qpn, psn: a.psn, lid: a.lid, gid: a.gid, mtu: a.mtu }
}

impl RdmaDevice for VerbsDevice {
    fn connect(&mut self, host: &QpAddress) -> Result<(Box<dyn RcPort>, QpAddress), String> {
        let mut qp = RcQueue::new(Arc::clone(&self.ctx), self.port, self.gid_index, LINK_BUFFER, LINK_DEPTH)
            .map_err(|e| e.to_string())?;
        let peer = RcAddress { qpn: host.qpn, psn: host.psn, lid: host.lid, gid: host.gid, mtu: host.mtu };
        qp.connect(&peer).map_err(|e| e.to_string())?;
        let ours = qp.address().map_err(|e| e.to_string())?;
        Ok((Box::new(qp), to_wire(ours)))
    }
}

impl RcPort for RcQueue {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        RcQueue::buffer(self)
    }
    fn buffer_len(&self) -> usize {
        RcQueue::buffer_len(self)
    }
    fn post(&mut self, r: WorkRequest) -> Result<(), i32> {
        let req = RdmaRequest {
            wr_id: r.wr_id,
            write: r.write,
            local: r.local,
            len: r.len,
            remote: r.remote,
            rkey: r.rkey,
        };
        RcQueue::post(self, req).map_err(|e| match e {
            PostError::Invalid => 0,
            PostError::Post(errno) => errno,
        })
    }
    fn poll(&mut self) -> Result<Option<WorkDone>, i32> {
        let mut wc = [sys::ibv_wc::default()];
        match RcQueue::poll(self, &mut wc)? {
            0 => Ok(None),
            _ => {
                let ok = wc[0].status == sys::ibv_wc_status::IBV_WC_SUCCESS;
                let status = if ok { Ok(()) } else { Err(wc[0].status.0) };
                Ok(Some(WorkDone { wr_id: wc[0].wr_id, status }))
            }
        }
    }
    fn describe(&self) -> String {
        self.address().map_or_else(|_| "RC QP".into(), |a| format!("RC QP {:#x}", a.qpn))
    }
}
