//! The fabrics' sections: kernel UDP, DPDK and verbs. Each fabric is handed its own (and the
//! few job-wide values of [`crate::fabric::FabricSetup`]) and nothing else; each section checks
//! its own values, and offers the one check that needs another section's value (its member
//! list against the node count) for the root to call when that fabric is the one in use.
use crate::fabric::dpdk::eal_args::Hugepages;
use crate::fabric::dpdk::frame::parse_members;
use crate::fabric::udp::{UdpOffload, MAX_BATCH};
use crate::fabric::verbs::group::JoinMode;
use ringcast_proto::config::{invalid, ConfigError};

ringcast_proto::tunables! {
    /// The `udp` fabric (section `udp`).
    pub struct UdpConfig in "udp" {
        /// UDP fabric: the members' unicast addresses.
        members: String = String::new(), "RINGCAST_UDP_MEMBERS",
            "udp fabric: every node's unicast address (ip:port, comma-separated, index = node; IPv6 as [addr]:port); the family of the list is the family of the groups";
        /// UDP fabric: the multicast port.
        port: u16 = 0, "RINGCAST_UDP_PORT",
            "udp fabric: port every member's group sockets bind (0: derived from the job name)";
        /// UDP fabric: the multicast interface.
        interface: String = String::new(), "RINGCAST_UDP_INTERFACE",
            "udp fabric: interface for multicast, by name or index (empty: the interface of this node's listed address, or the kernel's route)";
        /// UDP fabric: datagrams per system call.
        batch: u32 = 64, "RINGCAST_UDP_BATCH",
            "udp fabric: most datagrams per system call, sendmmsg and recvmmsg (1..=64; 1: one system call per datagram)";
        /// UDP fabric: GSO and GRO.
        offload: UdpOffload = UdpOffload::Auto, "RINGCAST_UDP_OFFLOAD",
            "udp fabric: auto (UDP GSO sends a run of one destination's datagrams of one size as one system call, UDP GRO receives several of one sender in one buffer, where the kernel has them: probed at start, GSO dropped at the first send the kernel refuses) or off";
        /// UDP fabric: socket buffers.
        buffer_bytes: u32 = 0, "RINGCAST_UDP_BUFFER_BYTES",
            "udp fabric: SO_RCVBUF and SO_SNDBUF requested per socket in bytes (the kernel reports twice the request; past net.core.rmem_max/wmem_max it is forced where CAP_NET_ADMIN allows); 0: sized to the window, twice protocol.max_message_bytes, at least 4 MiB";
    }
}

impl UdpConfig {
    /// Checks what the section can alone: the batch within `1..=64`, and an interface given by
    /// name must be one Linux could have (at most 15 bytes, no `/` or whitespace), so a typo
    /// fails at start with the variable's name rather than as a socket error. The member list is parsed (and counted
    /// against the nodes) only when the fabric is `udp` ([`UdpConfig::check_members`]): a
    /// launcher may set every fabric's list and pick one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_BATCH as u32).contains(&self.batch) {
            return invalid(format!("udp.batch {} outside 1..={MAX_BATCH}", self.batch));
        }
        let i = self.interface.as_str();
        let name_ok = i.len() <= 15 && !i.contains(|c: char| c == '/' || c.is_whitespace());
        if i.parse::<u32>().is_err() && !name_ok {
            return invalid(format!(
                "udp.interface {i:?} is neither an interface index nor a name (at most 15 bytes, no '/' or whitespace)"
            ));
        }
        Ok(())
    }

    /// The member list parses and has one address per node (`topology.nodes`): checked by the
    /// root when `udp` is the fabric in use.
    pub fn check_members(&self, nodes: u32) -> Result<(), ConfigError> {
        let members = self.member_addrs()?;
        if members.len() != nodes as usize {
            return invalid(format!("udp.members lists {} addresses for {nodes} nodes", members.len()));
        }
        Ok(())
    }

    /// The `members` list, parsed (index = node).
    pub fn member_addrs(&self) -> Result<Vec<std::net::SocketAddr>, ConfigError> {
        self.members
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| {
                m.parse().map_err(|e| ConfigError::Invalid(format!("udp.members: {m:?} is not ip:port: {e}")))
            })
            .collect()
    }
}

ringcast_proto::tunables! {
    /// The `dpdk` fabric (section `dpdk`).
    pub struct DpdkConfig in "dpdk" {
        /// DPDK fabric: the port, as an EAL virtual device.
        vdev: String = String::new(), "RINGCAST_DPDK_VDEV",
            "dpdk fabric: the port as an EAL virtual device (--vdev), e.g. net_af_xdp0,iface=eth0,start_queue=0,queue_count=1; empty: the one port dpdk_eal_args make the EAL find (a NIC allowed with -a)";
        /// DPDK fabric: extra EAL arguments.
        eal_args: String = String::new(), "RINGCAST_DPDK_EAL_ARGS",
            "dpdk fabric: extra EAL arguments, whitespace-separated, after the fabric's own; an option given here replaces the fabric's (-l, -a, -m, --log-level, --file-prefix, ...)";
        /// DPDK fabric: mbufs in the pool.
        mbufs: u32 = 8191, "RINGCAST_DPDK_MBUFS",
            "dpdk fabric: mbufs in the port's pool (4095..=16777215; the queues hold 2 x 1024; 2^n - 1 suits the mempool)";
        /// DPDK fabric: hugepages or not.
        hugepages: Hugepages = Hugepages::Off, "RINGCAST_DPDK_HUGEPAGES",
            "dpdk fabric: off (--no-huge: ordinary memory), on (hugepages; fail without them) or auto (hugepages when hugetlbfs is mounted with enough free pages)";
        /// DPDK fabric: the members' MAC addresses.
        members: String = String::new(), "RINGCAST_DPDK_MEMBERS",
            "dpdk fabric: every node's MAC address (comma-separated, index = node); node i's port must have the i-th";
    }
}

impl DpdkConfig {
    /// Checks the section's values (the member list only when the fabric is in use:
    /// [`DpdkConfig::check_members`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(4095..(1 << 24)).contains(&self.mbufs) {
            return invalid(format!("dpdk.mbufs {} outside 4095..=16777215", self.mbufs));
        }
        Ok(())
    }

    /// The member list parses (MAC addresses) and has one per node (`topology.nodes`):
    /// checked by the root when `dpdk` is the fabric in use.
    pub fn check_members(&self, nodes: u32) -> Result<(), ConfigError> {
        let members = parse_members(&self.members).map_err(ConfigError::Invalid)?;
        if members.len() != nodes as usize {
            return invalid(format!("dpdk.members lists {} addresses for {nodes} nodes", members.len()));
        }
        Ok(())
    }
}

ringcast_proto::tunables! {
    /// The `verbs` fabric (section `verbs`).
    pub struct VerbsConfig in "verbs" {
        /// Verbs fabric: the RDMA device.
        device: String = String::new(), "RINGCAST_VERBS_DEVICE",
            "verbs fabric and the rdma DMA backend: RDMA device by name (ibv_devices: mlx5_0, rxe0, ...); empty: the first device";
        /// Verbs fabric: the port.
        port: u8 = 1, "RINGCAST_VERBS_PORT",
            "verbs fabric and the rdma DMA backend: port number on the device (from 1)";
        /// Verbs fabric: the GID index of this member's address.
        gid_index: u8 = 0, "RINGCAST_VERBS_GID_INDEX",
            "verbs fabric and the rdma DMA backend: GID table index of this member's unicast address (RoCE v2: the index of the interface address's RoCE v2 GID, see show_gids; IB: 0); with rdmacm joins it must be the index the kernel uses for verbs_addr, which the first join checks (naming the index to set)";
        /// Verbs fabric: the IP address rdmacm joins groups from.
        addr: String = String::new(), "RINGCAST_VERBS_ADDR",
            "verbs fabric: IP address of the RDMA device's interface (IPoIB or the RoCE netdev) that rdmacm binds to for multicast joins; its family picks IPv6 ff15:: or IPv4 239/8 groups; empty: the address of the RoCE GID at verbs_gid_index (IB needs it set)";
        /// Verbs fabric: how multicast groups are joined.
        join: JoinMode = JoinMode::Rdmacm, "RINGCAST_VERBS_JOIN",
            "verbs fabric: rdmacm (rdma_join_multicast: SA join on IB, IGMP/MLD on RoCE) or attach (ibv_attach_mcast only; RoCE links that flood multicast)";
        /// Verbs fabric: pre-posted receives.
        recv_slots: u32 = 1024, "RINGCAST_VERBS_RECV_SLOTS",
            "verbs fabric: receive buffers posted on the UD queue pair (16..=65536): the NIC drops a datagram that finds none posted";
        /// Verbs fabric: send queue depth.
        send_depth: u32 = 256, "RINGCAST_VERBS_SEND_DEPTH",
            "verbs fabric: send buffers and send queue depth (16..=16384); a completion is requested every depth/4 sends, a send finding all in flight is dropped";
        /// Verbs fabric: HELLO interval.
        hello_ms: u32 = 10, "RINGCAST_VERBS_HELLO_MS",
            "verbs fabric: first interval between HELLOs (member discovery) while a member's address is unknown, in milliseconds (1..=10000); it doubles after each HELLO up to 1 s (or this, if larger), and starts over when a new member appears";
        /// Verbs fabric: multicast join timeout.
        join_timeout_ms: u32 = 5000, "RINGCAST_VERBS_JOIN_TIMEOUT_MS",
            "verbs fabric: longest wait for rdmacm to confirm a multicast join, in milliseconds";
    }
}

impl VerbsConfig {
    /// Checks the section's values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.port == 0 {
            return invalid("verbs.port must be at least 1".into());
        }
        if !(16..=65536).contains(&self.recv_slots) {
            return invalid(format!("verbs.recv_slots {} outside 16..=65536", self.recv_slots));
        }
        if !(16..=16384).contains(&self.send_depth) {
            return invalid(format!("verbs.send_depth {} outside 16..=16384", self.send_depth));
        }
        if !(1..=10_000).contains(&self.hello_ms) || self.join_timeout_ms == 0 {
            return invalid(format!(
                "verbs.hello_ms {} outside 1..=10000, or verbs.join_timeout_ms is 0",
                self.hello_ms
            ));
        }
        self.parsed_addr().map_err(ConfigError::Invalid)?;
        Ok(())
    }
}

impl VerbsConfig {
    /// `addr`: empty, or a unicast IP address of this host.
    pub fn parsed_addr(&self) -> Result<Option<std::net::IpAddr>, String> {
        let s = self.addr.trim();
        if s.is_empty() {
            return Ok(None);
        }
        let ip: std::net::IpAddr =
            s.parse().map_err(|_| format!("verbs.addr: {s:?} is not an IP address"))?;
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(format!("verbs.addr: {ip} is not a unicast address of this host"));
        }
        Ok(Some(ip))
    }
}
