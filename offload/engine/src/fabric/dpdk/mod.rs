//! The DPDK fabric (docs/design.md §4): the protocol's datagrams in Ethernet frames through one DPDK
//! port — `net_af_xdp` on a veth (tests: veth pairs on a Linux bridge in network namespaces),
//! `net_memif` between two processes, `net_mlx5` on ConnectX/BlueField — with a multicast
//! destination MAC for stage-1 multicast and the peer's MAC for point-to-point.
//!
//! # Contract
//!
//! * Members are identified by MAC address: the launcher hands every engine the same list
//!   (`dpdk_members`, index = [`PeerId`]), and member `node`'s port must have
//!   `dpdk_members[node]` as its MAC (checked at start). A frame is delivered only if its
//!   source MAC is another member's, its EtherType is the fabric's (`0x88B5`), its length
//!   field is consistent and within the MTU, and its destination is this member's MAC or a
//!   joined group's; anything else is counted by reason ([`DpdkStats::rejected`]) and, except
//!   this member's own echoes and frames addressed to others, as [`FabricCounters::refused`].
//!   Framing and the group → MAC mapping: [`frame`].
//! * A send to an unknown member, to this member itself, or above the MTU is refused and counted
//!   ([`FabricCounters::refused`], [`DpdkStats::tx_refused`]), never put on the wire.
//! * Nothing blocks or panics. Sends are queued into an mbuf batch and go out with one
//!   `rte_eth_tx_burst` when the batch is full, on [`Fabric::flush`] (the engine calls it after
//!   every pass) and at the start of every [`Fabric::poll`]; an mbuf shortage, or frames the
//!   driver refuses, are dropped and counted ([`DpdkStats`]). Unreliable by contract.
//! * Receive is zero-copy: the poll callback gets a slice into the mbuf, which is freed when
//!   the callback returns. At most `budget` frames are taken per poll (delivered or not).
//! * The datagram MTU is the engine's `mtu`; the port's MTU must hold it plus the 2-byte
//!   length field, else construction fails with the numbers.
//! * Multicast: a port over a kernel device (`net_af_xdp`'s `iface=`) puts the joined groups'
//!   MACs on that device's multicast list through a packet-socket membership (`ringcast_dpdk::KernelGroups`):
//!   a NIC filters on them, `ip maddr` shows them, and the kernel drops them when the engine
//!   exits, crash included. Any other port: joining sets its multicast filter
//!   (`rte_eth_dev_set_mc_addr_list`); a driver without one gets all-multicast, and one without
//!   that promiscuous mode. The software filter above applies in every case. Leaving a group
//!   drops its entry; leaving the last, and dropping the fabric, undo what was turned on.
//! * The fabric is built from its section (`dpdk.*`) and the job's
//!   [`crate::fabric::FabricSetup`] (datagram size, groups, log level, job and node), never
//!   from the whole configuration. The EAL is initialised from them ([`eal_args`]: `--no-huge` unless
//!   hugepages are asked for and present, a `--file-prefix` unique to job, node and process,
//!   `--no-pci`, `--no-shconf` or `--in-memory`, quiet logs), once per process
//!   (`ringcast_dpdk::Eal`); dropping the fabric stops and closes the port, frees the pool and, as the
//!   EAL's last user, ends the EAL (its runtime directory removed; its memory left to the
//!   process's exit, not `rte_eal_cleanup`: see `ringcast_dpdk::eal`).
//! * Faults (`RINGCAST_FAULT_*`) are injected by wrapping the fabric in
//!   [`crate::fabric::faulty::Faulty`] (`runner/net.rs`), as for every fabric.
//!
//! # Where the device code is
//!
//! In the `ringcast-dpdk` crate (`offload/dpdk`, feature `dpdk`): the EAL's life
//! ([`ringcast_dpdk::Eal`]), the port, its queues, pool and mbufs ([`ringcast_dpdk::Port`]), the
//! kernel memberships ([`ringcast_dpdk::KernelGroups`]) — the only `unsafe` code of this fabric.
//! This module is safe (the engine crate forbids `unsafe`): the framing ([`frame`]), the EAL's
//! arguments ([`eal_args`]), the members, the multicast modes and the [`Fabric`] impl. [`frame`]
//! and [`eal_args`] are DPDK-free and built without the `dpdk` feature too (the configuration
//! parses `dpdk_members` and `dpdk_hugepages` with them).

pub mod eal_args;
pub mod frame;

#[cfg(feature = "dpdk")]
pub use fabric::{DpdkFabric, DpdkOptions, DpdkStats};

/// Why the DPDK fabric could not be built, or a DPDK call failed.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// The configuration, the member list or the port do not fit together.
    #[error("dpdk fabric: {0}")]
    Invalid(String),
    /// A DPDK call failed.
    #[error("dpdk fabric: {op}: {msg} (errno {errno})")]
    Call {
        /// The failing call.
        op: &'static str,
        /// DPDK's errno.
        errno: i32,
        /// DPDK's message for it.
        msg: String,
    },
    /// The EAL cannot be (re)initialised as asked.
    #[error("dpdk fabric: EAL: {0}")]
    Eal(String),
}

/// The device crate's errors, variant for variant (its messages under this crate's prefix).
#[cfg(feature = "dpdk")]
impl From<ringcast_dpdk::DpdkError> for DpdkError {
    fn from(e: ringcast_dpdk::DpdkError) -> DpdkError {
        match e {
            ringcast_dpdk::DpdkError::Invalid(m) => DpdkError::Invalid(m),
            ringcast_dpdk::DpdkError::Call { op, errno, msg } => DpdkError::Call { op, errno, msg },
            ringcast_dpdk::DpdkError::Eal(m) => DpdkError::Eal(m),
        }
    }
}

impl From<DpdkError> for std::io::Error {
    fn from(e: DpdkError) -> std::io::Error {
        let kind = match &e {
            DpdkError::Invalid(_) => std::io::ErrorKind::InvalidInput,
            DpdkError::Call { errno, .. } => std::io::Error::from_raw_os_error(*errno).kind(),
            DpdkError::Eal(_) => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

#[cfg(feature = "dpdk")]
mod fabric {
    use super::eal_args::{self, EalSpec};
    use super::frame::{self, group_mac, Mac, Reject, Station};
    use super::DpdkError;
    use crate::config::DpdkConfig;
    use crate::fabric::{Datagram, Dest as FabricDest, Fabric, FabricCounters, FabricSetup};
    use ringcast_dpdk::{Eal, EtherAddr, KernelGroups, Port, PortSpec, PortStats, Queued, RX_BURST};
    use ringcast_proto::comm::{GroupId, PeerId};
    use ringcast_proto::ledger::{Ledger, Side};
    use std::sync::Arc;

    /// Default receive and transmit descriptors of the port's queue.
    pub const DESCRIPTORS: u16 = 1024;

    /// Smallest mbuf data area (DPDK's default, `RTE_MBUF_DEFAULT_DATAROOM`).
    const MIN_DATA_ROOM: u32 = 2048;

    /// How to build a [`DpdkFabric`].
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct DpdkOptions {
        /// The EAL's arguments ([`eal_args::eal_args`]).
        pub eal_args: Vec<String>,
        /// The port's name (the vdev's); empty: the only port.
        pub port: String,
        /// Mbufs in the pool.
        pub mbufs: u32,
        /// Receive/transmit descriptors.
        pub descriptors: u16,
        /// Largest datagram.
        pub mtu: usize,
        /// Groups joined at once.
        pub max_groups: usize,
        /// The kernel device under the port, if its driver sits on one (`net_af_xdp`'s
        /// `iface=`): group MACs go on its multicast list ([`KernelGroups`]).
        pub kernel_iface: Option<String>,
    }

    impl DpdkOptions {
        /// What the `dpdk` section says for the job of `setup` (its datagram size, groups, log
        /// level, job name and node), for this process: the file prefix carries its id, the
        /// lcore map its CPUs.
        pub fn new(setup: &FabricSetup, section: &DpdkConfig) -> Result<DpdkOptions, DpdkError> {
            let mtu = setup.mtu;
            let data_room = data_room(mtu);
            let need = u64::from(section.mbufs) * u64::from(data_room + 192);
            let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
            let hugepages = eal_args::resolve_hugepages(
                section.hugepages,
                need,
                &read("/proc/mounts"),
                &read("/proc/meminfo"),
            )
            .map_err(DpdkError::Invalid)?;
            let cpus = rustix::thread::sched_getaffinity(None)
                .map(|set| (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
                .unwrap_or_default();
            let spec = EalSpec {
                vdev: section.vdev.clone(),
                extra: section.eal_args.clone(),
                hugepages,
                mem_mb: eal_args::mem_mb(section.mbufs, data_room),
                prefix: eal_args::file_prefix(&setup.job, setup.node.0, std::process::id()),
                log_level: setup.log_level,
                cpus,
            };
            Ok(DpdkOptions {
                eal_args: eal_args::eal_args(&spec),
                port: eal_args::vdev_port_name(&section.vdev).to_string(),
                mbufs: section.mbufs,
                descriptors: DESCRIPTORS,
                mtu,
                max_groups: setup.max_groups,
                kernel_iface: eal_args::vdev_kernel_iface(&section.vdev).map(str::to_string),
            })
        }
    }

    /// Mbuf data room (headroom included) for datagrams of `mtu` bytes: DPDK's default 2048
    /// bytes, or the frame rounded up to 64 bytes when larger.
    fn data_room(mtu: usize) -> u32 {
        let frame = u32::try_from(frame::frame_len(mtu)).unwrap_or(u32::MAX).div_ceil(64).saturating_mul(64);
        frame.max(MIN_DATA_ROOM).saturating_add(ringcast_dpdk::PKTMBUF_HEADROOM)
    }

    /// What the DPDK fabric counts beyond [`FabricCounters`] (monotonic).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct DpdkStats {
        /// Received frames not delivered, by [`Reject::index`].
        pub rejected: [u64; 7],
        /// Received frames in chained mbufs (never produced at this MTU; refused).
        pub chained: u64,
        /// Sends refused: larger than the MTU, or to an unknown member.
        pub tx_refused: u64,
        /// Sends dropped: no free mbuf.
        pub tx_nombuf: u64,
        /// Sends dropped: the driver's transmit queue was full.
        pub tx_full: u64,
        /// Multicast filter updates that failed on leave (the software filter still applies).
        pub filter_errors: u64,
        /// The port's own statistics (zero if the driver reports none).
        pub port: PortStats,
    }

    /// How the port receives multicast.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum McastMode {
        /// No group joined.
        None,
        /// The driver's multicast address filter.
        List,
        /// All multicast.
        AllMulticast,
        /// Everything (drivers without a multicast filter).
        Promiscuous,
        /// The group MACs on the multicast list of the kernel device under the port.
        Kernel,
    }

    /// The DPDK fabric of one member. See the module documentation.
    pub struct DpdkFabric {
        local: PeerId,
        station: Station,
        groups: Vec<GroupId>,
        max_groups: usize,
        mode: McastMode,
        /// Memberships on the kernel device under the port, for drivers that sit on one.
        kernel: Option<KernelGroups>,
        counters: FabricCounters,
        /// The datagrams copied into mbufs ([`Fabric::ledger`]; a received datagram is handed
        /// over where the port's receive DMA wrote it, no copy).
        ledger: Ledger,
        stats: DpdkStats,
        // Last: closed after everything else is done.
        port: Port,
    }

    impl std::fmt::Debug for DpdkFabric {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DpdkFabric")
                .field("local", &self.local)
                .field("mac", &self.station.own())
                .field("driver", &self.port.driver())
                .field("mode", &self.mode)
                .finish()
        }
    }

    impl DpdkFabric {
        /// Member `local` of `members` (MACs, index = [`PeerId`]) on the port `opts` names,
        /// initialising the EAL if this process has not (see the module doc).
        pub fn new(local: PeerId, members: Vec<Mac>, opts: &DpdkOptions) -> Result<DpdkFabric, DpdkError> {
            if opts.mtu == 0 || opts.mtu > frame::MAX_DATAGRAM {
                return Err(DpdkError::Invalid(format!(
                    "mtu {} outside 1..={}",
                    opts.mtu,
                    frame::MAX_DATAGRAM
                )));
            }
            let station = Station::new(local, members, opts.mtu).map_err(DpdkError::Invalid)?;
            let data_room = u16::try_from(data_room(opts.mtu))
                .map_err(|_| DpdkError::Invalid(format!("mtu {} needs mbufs over 64 KiB", opts.mtu)))?;
            let needed = 2 * u32::from(opts.descriptors) + 2 * RX_BURST as u32;
            if opts.mbufs < needed {
                return Err(DpdkError::Invalid(format!(
                    "dpdk_mbufs {} is below {needed} (the receive and transmit queues' descriptors and two bursts)",
                    opts.mbufs
                )));
            }
            let eal = Eal::acquire(opts.eal_args.clone())?;
            let port = Port::open(
                Arc::clone(&eal),
                &PortSpec {
                    name: opts.port.clone(),
                    mbufs: opts.mbufs,
                    data_room,
                    descriptors: opts.descriptors,
                    mtu: u32::try_from(opts.mtu + 2).unwrap_or(u32::MAX),
                },
            )?;
            drop(eal); // the port holds its own handle
            let port_mac = Mac(port.mac());
            if port_mac != station.own() {
                return Err(DpdkError::Invalid(format!(
                    "node {}: dpdk_members lists {} but the port ({}) has MAC {}",
                    local.0,
                    station.own(),
                    port.driver(),
                    port_mac
                )));
            }
            if usize::from(port.mtu()) < opts.mtu + 2 {
                return Err(DpdkError::Invalid(format!(
                    "mtu {} needs a port MTU of at least {} (datagram + 2-byte length); the port's is {}",
                    opts.mtu,
                    opts.mtu + 2,
                    port.mtu()
                )));
            }
            let kernel = opts.kernel_iface.as_deref().map(KernelGroups::open).transpose()?;
            Ok(DpdkFabric {
                local,
                station,
                groups: Vec::with_capacity(opts.max_groups.min(1024)),
                max_groups: opts.max_groups,
                mode: McastMode::None,
                kernel,
                counters: FabricCounters::default(),
                ledger: Ledger::default(),
                stats: DpdkStats::default(),
                port,
            })
        }

        /// This member's MAC.
        pub fn mac(&self) -> Mac {
            self.station.own()
        }

        /// The driver's name.
        pub fn driver(&self) -> &str {
            self.port.driver()
        }

        /// How the port receives multicast now.
        pub fn mcast_mode(&self) -> McastMode {
            self.mode
        }

        /// The port's promiscuous and all-multicast flags.
        pub fn port_modes(&self) -> (bool, bool) {
            self.port.modes()
        }

        /// The EAL's arguments and runtime directory.
        pub fn eal(&self) -> (&[String], Option<&std::path::Path>) {
            (self.port.eal().args(), self.port.eal().runtime_dir())
        }

        /// Free mbufs and the pool's size (see [`ringcast_dpdk::Port::pool_usage`]).
        pub fn pool_usage(&self) -> (u32, u32) {
            self.port.pool_usage()
        }

        /// Counters beyond [`FabricCounters`].
        pub fn stats(&self) -> DpdkStats {
            let mut s = self.stats;
            if let Some(p) = self.port.stats() {
                s.port = p;
            }
            s
        }

        /// Makes the port receive the joined groups: its multicast filter if the driver has
        /// one, else all-multicast, else promiscuous; nothing special with no group.
        fn apply_filter(&mut self) -> Result<(), DpdkError> {
            let macs: Vec<EtherAddr> = self.station.groups().iter().map(|m| m.0).collect();
            if let Some(k) = self.kernel.as_mut() {
                k.set(&macs)?;
                self.mode = if macs.is_empty() { McastMode::None } else { McastMode::Kernel };
                return Ok(());
            }
            if macs.is_empty() {
                let r = match self.mode {
                    McastMode::None => Ok(()),
                    McastMode::List => self.port.set_mc_list(&[]),
                    McastMode::AllMulticast => self.port.set_allmulticast(false),
                    McastMode::Promiscuous => self.port.set_promiscuous(false),
                    McastMode::Kernel => Ok(()),
                };
                self.mode = McastMode::None;
                return r.map_err(DpdkError::from);
            }
            if matches!(self.mode, McastMode::AllMulticast | McastMode::Promiscuous) {
                return Ok(()); // already receives every group
            }
            let list = match self.port.set_mc_list(&macs) {
                Ok(()) => {
                    self.mode = McastMode::List;
                    return Ok(());
                }
                Err(e) => e,
            };
            if self.port.set_allmulticast(true).is_ok() {
                self.mode = McastMode::AllMulticast;
                return Ok(());
            }
            match self.port.set_promiscuous(true) {
                Ok(()) => {
                    self.mode = McastMode::Promiscuous;
                    Ok(())
                }
                Err(e) => Err(DpdkError::Invalid(format!(
                    "the port ({}) can receive no multicast: multicast filter: {list}; promiscuous: {e}",
                    self.port.driver()
                ))),
            }
        }

        /// Queues the datagram made of `parts`, gathered straight into the mbuf.
        fn queue(&mut self, dst: Mac, parts: &[&[u8]]) {
            let src = self.station.own();
            let total: usize = parts.iter().map(|p| p.len()).sum();
            let len = frame::frame_len(total);
            let mut encoded = true;
            match self.port.queue_tx(len, |buf| encoded = frame::encode_parts(dst, src, parts, buf)) {
                Queued::Yes if encoded => self.ledger.copied(Side::Send, total as u64),
                // `encode` cannot fail for a buffer of exactly `frame_len` bytes and a datagram
                // within the MTU; counted rather than assumed.
                Queued::Yes | Queued::TooLong => self.stats.tx_refused += 1,
                Queued::NoMbuf => self.stats.tx_nombuf += 1,
            }
        }

        fn send_parts(&mut self, to: PeerId, parts: &[&[u8]]) {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            match self.station.member(to) {
                Some(dst) if len <= self.station.mtu() && to != self.local => {
                    self.counters.sent += 1;
                    self.queue(dst, parts);
                }
                _ => {
                    self.counters.refused += 1;
                    self.stats.tx_refused += 1;
                }
            }
        }

        fn multicast_parts(&mut self, group: &GroupId, parts: &[&[u8]]) {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            if len > self.station.mtu() {
                self.counters.refused += 1;
                self.stats.tx_refused += 1;
                return;
            }
            self.counters.multicast += 1;
            self.queue(group_mac(group), parts);
        }

        fn sync_tx_counts(&mut self) {
            self.stats.tx_full = self.port.tx_counts().1;
        }
    }

    impl Fabric for DpdkFabric {
        fn local(&self) -> PeerId {
            self.local
        }

        fn mtu(&self) -> usize {
            self.station.mtu()
        }

        fn join(&mut self, group: &GroupId) -> std::io::Result<()> {
            if self.groups.contains(group) {
                return Ok(());
            }
            if self.groups.len() >= self.max_groups {
                return Err(std::io::Error::other(format!(
                    "dpdk fabric: {} groups joined already",
                    self.groups.len()
                )));
            }
            self.groups.push(*group);
            self.station.add_group(group_mac(group));
            if let Err(e) = self.apply_filter() {
                self.groups.retain(|g| g != group);
                self.rebuild_station_groups();
                return Err(e.into());
            }
            Ok(())
        }

        fn groups(&self) -> usize {
            self.groups.len()
        }

        fn leave(&mut self, group: &GroupId) {
            if !self.groups.contains(group) {
                return;
            }
            self.groups.retain(|g| g != group);
            self.rebuild_station_groups();
            if self.apply_filter().is_err() {
                self.stats.filter_errors += 1;
            }
        }

        fn send(&mut self, to: PeerId, frame: &[u8]) {
            self.send_parts(to, &[frame]);
        }

        fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
            self.multicast_parts(group, &[frame]);
        }

        /// Each datagram gathered from its parts straight into its mbuf.
        fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
            for d in batch {
                match d.dest {
                    FabricDest::Peer(p) => self.send_parts(p, &d.parts),
                    FabricDest::Group(g) => self.multicast_parts(&g, &d.parts),
                }
            }
        }

        /// Sends what is queued, then takes frames in bursts until `budget` frames were taken
        /// (delivered or rejected alike) or the queue is empty.
        fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
            self.port.flush();
            self.sync_tx_counts();
            let DpdkFabric { station, port, counters, stats, .. } = self;
            let mut taken = 0;
            let mut delivered = 0;
            while taken < budget {
                let want = (budget - taken).min(RX_BURST);
                let got = port.receive(want, &mut |data| {
                    let Some(data) = data else {
                        stats.chained += 1;
                        counters.refused += 1;
                        return;
                    };
                    match station.accept(data) {
                        Ok(a) => {
                            counters.received += 1;
                            delivered += 1;
                            rx(a.from, a.datagram);
                        }
                        Err(r) => {
                            stats.rejected[r.index()] += 1;
                            if !matches!(r, Reject::Own | Reject::NotOurs) {
                                counters.refused += 1;
                            }
                        }
                    }
                });
                taken += got;
                if got < want {
                    break;
                }
            }
            delivered
        }

        fn flush(&mut self) {
            self.port.flush();
            self.sync_tx_counts();
        }

        fn ledger(&self) -> Ledger {
            self.ledger
        }

        fn counters(&self) -> FabricCounters {
            let mut c = self.counters;
            if let Some(p) = self.port.stats() {
                c.overrun += p.imissed + p.rx_nombuf;
            }
            c
        }
    }

    impl DpdkFabric {
        fn rebuild_station_groups(&mut self) {
            for m in self.station.groups().to_vec() {
                self.station.remove_group(m);
            }
            for g in &self.groups {
                self.station.add_group(group_mac(g));
            }
        }
    }

    /// The fabric of member `setup.node` of the section's `members`, on the port of its
    /// `vdev` (see [`DpdkOptions::new`]).
    pub fn open(setup: &FabricSetup, section: &DpdkConfig) -> Result<DpdkFabric, DpdkError> {
        let members = frame::parse_members(&section.members).map_err(DpdkError::Invalid)?;
        let opts = DpdkOptions::new(setup, section)?;
        DpdkFabric::new(setup.node, members, &opts)
    }
}

#[cfg(feature = "dpdk")]
pub use fabric::{open, McastMode};
