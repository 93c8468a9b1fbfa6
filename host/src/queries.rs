//! What a [`Host`] can ask its engine about itself: its counters (`STATS`, `NET_STATS`,
//! `COMMS`, the whole `COUNTERS` table) and its communicators (`COMM_LIST`), each one control
//! request; `ringcast stats` reads them as an observer.
use crate::error::{Error, Result};
use crate::host::Host;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
pub use ringcast_offload::runner::net::{CommStats, NetStats};

/// Counters of the engine a host is attached to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Hosts attached now.
    pub hosts_attached: u32,
    /// Hosts that went away without detaching.
    pub hosts_lost: u32,
    /// Descriptors completed `Ok`.
    pub completed_ok: u64,
    /// Descriptors completed with an error status.
    pub completed_err: u64,
    /// Descriptors dead hosts left in their submission rings.
    pub dropped_in_flight: u64,
}

/// One communicator of the engine, as [`Host::comm_list`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommInfo {
    /// Its handle (0: the world).
    pub handle: u64,
    /// Ranks in all, engines they sit on, and ranks on this engine.
    pub ranks: u32,
    /// See `ranks`.
    pub engines: u32,
    /// See `ranks`.
    pub local_members: u32,
    /// Broadcast ids posted at this engine (composed collectives count one per part).
    pub posted: u32,
    /// Synchronization epochs completed.
    pub synced_epochs: u32,
    /// A member unreachable, or a local process left mid-collective.
    pub broken: bool,
    /// Closed here (freed, or the world finalized): its last epoch settles.
    pub closing: bool,
    /// Every local member freed it; dropped once settled.
    pub freeing: bool,
    /// Multicast failed over to point-to-point.
    pub failed_over: bool,
}

impl Host {
    /// The engine's counters.
    pub fn stats(&mut self) -> Result<EngineStats> {
        let r = self.request(CtlMsg::new(CtlKind::STATS), None, "stats")?;
        if r.kind != CtlKind::STATS_OK {
            return Err(Error::Refused { request: "stats", status: r.status });
        }
        Ok(EngineStats {
            hosts_attached: r.a,
            hosts_lost: r.b,
            completed_ok: r.c,
            completed_err: r.d,
            dropped_in_flight: r.e,
        })
    }

    /// The engine's broadcast counters (`Refused` from an engine without a fabric).
    pub fn net_stats(&mut self) -> Result<NetStats> {
        let r = self.request(CtlMsg::new(CtlKind::NET_STATS), None, "net stats")?;
        if r.kind != CtlKind::NET_STATS_OK {
            return Err(Error::Refused { request: "net stats", status: r.status });
        }
        Ok(NetStats {
            syncs: u64::from(r.a),
            overrun: u64::from(r.b),
            crc_drops: r.c,
            other_drops: r.d,
            repair_frames: r.e,
        })
    }

    /// The engine's communicators and multicast groups now (`Refused` from an engine without a
    /// fabric).
    pub fn comm_stats(&mut self) -> Result<CommStats> {
        let r = self.request(CtlMsg::new(CtlKind::COMMS), None, "comm stats")?;
        if r.kind != CtlKind::COMMS_OK {
            return Err(Error::Refused { request: "comm stats", status: r.status });
        }
        Ok(CommStats { alive: r.a, groups: r.b, created: r.c, dropped: r.d, freeing: r.e, overdue: 0 })
    }

    /// Every counter of the engine, in the order of `ringcast_abi::counters::ALL` (three per
    /// `COUNTERS` request): what `ringcast stats` shows. An engine of this ABI version has the
    /// same table, so the values line up with the names.
    pub fn counters(&mut self) -> Result<Vec<u64>> {
        let mut values = Vec::with_capacity(ringcast_abi::counters::COUNT);
        let mut total = ringcast_abi::counters::COUNT;
        while values.len() < total {
            let mut m = CtlMsg::new(CtlKind::COUNTERS);
            m.a = values.len() as u32;
            let r = self.request(m, None, "counters")?;
            if r.kind != CtlKind::COUNTERS_OK || r.a != m.a {
                return Err(Error::Refused { request: "counters", status: r.status });
            }
            total = (r.b as usize).min(ringcast_abi::counters::COUNT);
            values.extend([r.c, r.d, r.e]);
        }
        values.truncate(total);
        Ok(values)
    }

    /// Every communicator alive at the engine, the world first (`COMM_LIST`, two pages each;
    /// an engine without a fabric has none).
    pub fn comm_list(&mut self) -> Result<Vec<CommInfo>> {
        use ringcast_abi::ctl::{COMM_BROKEN, COMM_CLOSING, COMM_FAILED_OVER, COMM_FREEING};
        let mut out = Vec::new();
        loop {
            // `None`: past the end of the table (`ERROR BAD_REQUEST`, the count in `b`).
            let page = |this: &mut Self, b: u32, at: u32| -> Result<Option<CtlMsg>> {
                let mut m = CtlMsg::new(CtlKind::COMM_LIST);
                (m.a, m.b) = (at, b);
                let r = this.request(m, None, "comm list")?;
                match r.kind {
                    CtlKind::COMM_LIST_OK if r.a == at => Ok(Some(r)),
                    CtlKind::ERROR if r.status == CtlStatus::BAD_REQUEST && r.b <= at => Ok(None),
                    _ => Err(Error::Refused { request: "comm list", status: r.status }),
                }
            };
            let at = out.len() as u32;
            // An engine serves at most `max_comms` (a u16-sized table): more is not an engine.
            if at > u32::from(u16::MAX) {
                return Err(Error::Refused { request: "comm list", status: CtlStatus::LIMIT });
            }
            let Some(first) = page(self, 0, at)? else { break };
            // The table may change between the two pages: what was read is the list then.
            let Some(second) = page(self, 1, at)? else { break };
            if second.e != first.c {
                break;
            }
            let (lo, hi) = (|v: u64| v as u32, |v: u64| (v >> 32) as u32);
            let flag = |bit: u64| second.d & bit != 0;
            out.push(CommInfo {
                handle: first.c,
                ranks: lo(first.d),
                engines: hi(first.d),
                posted: lo(first.e),
                synced_epochs: hi(first.e),
                local_members: second.c as u32,
                broken: flag(COMM_BROKEN),
                closing: flag(COMM_CLOSING),
                freeing: flag(COMM_FREEING),
                failed_over: flag(COMM_FAILED_OVER),
            });
            if out.len() >= first.b as usize {
                break;
            }
        }
        Ok(out)
    }
}
