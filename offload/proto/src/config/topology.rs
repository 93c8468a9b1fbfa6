//! Where this engine sits in its job: the fabric, the job's name and secret, the world's nodes,
//! this node, and the local processes it serves.
use super::{invalid, ConfigError};
use crate::comm::{World, MAX_WORLD};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

/// Which fabric the engine's broadcasts travel on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FabricKind {
    /// No fabric: the engine serves NOP and COPY only; BCAST fails with `UnknownCommunicator`.
    #[default]
    None,
    /// The shared-memory emulation NIC (every node on this machine).
    Shm,
    /// Kernel UDP: multicast to the group's `ff15::`/`239/8` address, unicast between the
    /// members listed in `udp_members`.
    Udp,
    /// Ethernet frames through a DPDK port (`dpdk_vdev`): multicast MACs for the groups, unicast
    /// between the members (by MAC) listed in `dpdk_members`.
    Dpdk,
    /// A UD queue pair on an RDMA port (`verbs_device`, `verbs_port`): multicast groups joined
    /// through rdmacm, unicast to members found by discovery.
    Verbs,
}

/// The datagram size of kernel UDP over 1500-byte Ethernet (and of DPDK and verbs ports unless
/// `RINGCAST_MTU` says more): `protocol.mtu`'s default on every fabric but `shm`.
pub const ETHERNET_MTU: u32 = 1472;

/// The `shm` fabric's datagram: one 4 KiB ring slot less its length and sender words. Its
/// default `protocol.mtu`: the fabric has no wire to fit, and 2.8 times fewer fragments than
/// [`ETHERNET_MTU`] cut the per-fragment work of a large broadcast (docs/performance.md).
pub const SHM_MTU: u32 = 4088;

impl FabricKind {
    /// `protocol.mtu` when `RINGCAST_MTU` is not set: what the fabric carries in one datagram.
    pub const fn default_mtu(self) -> u32 {
        match self {
            FabricKind::Shm => SHM_MTU,
            FabricKind::None | FabricKind::Udp | FabricKind::Dpdk | FabricKind::Verbs => ETHERNET_MTU,
        }
    }
}

impl FromStr for FabricKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(FabricKind::None),
            "shm" => Ok(FabricKind::Shm),
            "udp" => Ok(FabricKind::Udp),
            "dpdk" => Ok(FabricKind::Dpdk),
            "verbs" => Ok(FabricKind::Verbs),
            _ => Err(format!("expected none, shm, udp, dpdk or verbs, got {s:?}")),
        }
    }
}

impl fmt::Display for FabricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FabricKind::None => "none",
            FabricKind::Shm => "shm",
            FabricKind::Udp => "udp",
            FabricKind::Dpdk => "dpdk",
            FabricKind::Verbs => "verbs",
        })
    }
}

/// A host process's rank among its engine's local processes: given by the launcher, or the
/// lowest free one taken at attach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LocalRank {
    /// The engine assigns the lowest free local rank at attach (none when all `ppn` are taken;
    /// such a host can still COPY, but not take part in a broadcast).
    #[default]
    Auto,
    /// This local rank (`0..ppn`).
    Fixed(u32),
    /// No rank: an observer (`ringcast stats`) or a COPY-only client, which must not take a
    /// rank a job's process is about to claim.
    None,
}

impl FromStr for LocalRank {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(LocalRank::Auto),
            "none" => Ok(LocalRank::None),
            n => n
                .parse()
                .map(LocalRank::Fixed)
                .map_err(|_| format!("expected auto, none or a number, got {s:?}")),
        }
    }
}

impl fmt::Display for LocalRank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalRank::Auto => f.write_str("auto"),
            LocalRank::Fixed(n) => write!(f, "{n}"),
            LocalRank::None => f.write_str("none"),
        }
    }
}

/// Processes on each node of an uneven world (`RINGCAST_NODE_RANKS`, comma-separated counts
/// such as `8,8,7,7`); empty: `ppn` on every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRanks(pub Vec<u32>);

impl FromStr for NodeRanks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(NodeRanks(Vec::new()));
        }
        s.split(',')
            .map(|c| c.trim().parse::<u32>().map_err(|_| format!("expected counts like 8,8,7,7, got {s:?}")))
            .collect::<Result<_, _>>()
            .map(NodeRanks)
    }
}

impl fmt::Display for NodeRanks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            write!(f, "{}{c}", if i == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

/// The job's secret (`RINGCAST_JOB_SECRET`, 64 hex digits): keys the world communicator's frames
/// (docs/protocol.md, "Integrity and authenticity"). The launcher (`ringcast run`, the MPI
/// interposer) draws it from the CSPRNG and hands it to every engine of the job; it never
/// travels on the fabric and is never printed (`Display` says only whether it is set).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct JobSecret(pub Option<[u8; 32]>);

impl JobSecret {
    /// Hex form, as the environment variable carries it.
    pub fn to_hex(bytes: &[u8; 32]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl FromStr for JobSecret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(JobSecret(None));
        }
        // The reason names only the length and the rule: a value that does not parse may
        // still be most of a key.
        let bad = || {
            format!("expected 64 hex digits (32 bytes), not all zero, without 0x; got {} characters", s.len())
        };
        if s.len() != 64 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        if out == [0; 32] {
            return Err(bad());
        }
        Ok(JobSecret(Some(out)))
    }
}

impl fmt::Display for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "set (hidden)" } else { "" })
    }
}

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobSecret({})", if self.0.is_some() { "set" } else { "unset" })
    }
}

crate::tunables! {
    /// The job and this engine's place in it (section `topology`).
    pub struct Topology in "topology" {
        /// Fabric of the broadcasts.
        fabric: FabricKind = FabricKind::None, "RINGCAST_FABRIC",
            "fabric the engine's broadcasts travel on: none (NOP and COPY only), shm (the shared-memory emulation NIC), udp (kernel UDP multicast), dpdk (Ethernet frames through a DPDK port) or verbs (a UD queue pair on an RDMA device)";
        /// Job the engine belongs to.
        job: String = "default".to_string(), "RINGCAST_JOB",
            "job name: the engines of one job share a fabric namespace and derive their world communicator's identity from it";
        /// The job's secret.
        job_secret: JobSecret = JobSecret(None), "RINGCAST_JOB_SECRET",
            "the job's secret, 64 hex digits from the CSPRNG (ringcast run and the MPI interposer draw one): keys the tag of every world-communicator frame; unset, the key is derived from the job name and anyone who knows the name can forge world frames (the engine warns). Never printed, not even a bad value", secret;
        /// Engines (nodes) of the job.
        nodes: u32 = 1, "RINGCAST_NODES",
            "engines (nodes) in the job's world communicator";
        /// This engine's node number.
        node: u32 = 0, "RINGCAST_NODE",
            "this engine's rank in the job's world communicator (0..nodes)";
        /// Host processes per node.
        ppn: u32 = 1, "RINGCAST_PPN",
            "host processes per node in the job's world communicator: process rank = node * ppn + local rank; the engine gathers its local processes' posts of each broadcast, takes part once, and copies into every local buffer";
        /// Processes on each node, when nodes differ.
        node_ranks: NodeRanks = NodeRanks(Vec::new()), "RINGCAST_NODE_RANKS",
            "an uneven world: host processes on each node, comma-separated, one count per node (e.g. 8,8,7,7 for 30 ranks on 4 nodes); ranks are numbered node by node. Empty: ppn on every node. Set with ppn left at 1";
        /// This host process's local rank.
        local_rank: LocalRank = LocalRank::Auto, "RINGCAST_LOCAL_RANK",
            "this host process's local rank on its engine (0..ppn), sent at attach; auto: the lowest free one; none: no rank (an observer: COPY and counters only)";
    }
}

impl Topology {
    /// Checks the section's values against each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.nodes == 0 || self.nodes > 4096 || self.node >= self.nodes {
            return invalid(format!(
                "node {} of {} nodes: need 0 <= node < nodes <= 4096",
                self.node, self.nodes
            ));
        }
        if self.job.is_empty()
            || self.job.len() > 64
            || !self.job.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return invalid(format!("job {:?} must be 1..=64 characters of [A-Za-z0-9_-]", self.job));
        }
        if self.ppn == 0 || self.nodes.saturating_mul(self.ppn) > MAX_WORLD {
            return invalid(format!("ppn {} is 0, or nodes * ppn is above 2^24", self.ppn));
        }
        if !self.node_ranks.0.is_empty() {
            if self.ppn != 1 {
                return invalid(format!(
                    "node_ranks {} and ppn {}: set one of them",
                    self.node_ranks, self.ppn
                ));
            }
            if self.node_ranks.0.len() != self.nodes as usize {
                return invalid(format!(
                    "node_ranks {} lists {} nodes, the job has {}",
                    self.node_ranks,
                    self.node_ranks.0.len(),
                    self.nodes
                ));
            }
            if let Err(e) = World::from_counts(&self.node_ranks.0) {
                return invalid(format!(
                    "node_ranks {}: {e:?} (every count 1 or more, 2^24 in all)",
                    self.node_ranks
                ));
            }
        }
        if let LocalRank::Fixed(l) = self.local_rank {
            let here = self.local_capacity();
            if l >= here {
                return invalid(format!("local_rank {l} outside 0..{here}, the processes this node serves"));
            }
        }
        Ok(())
    }

    /// The world communicator: `ppn` processes on every node, or `node_ranks`' counts.
    /// (Call on a validated section; an invalid `node_ranks` gives the uniform world.)
    pub fn world(&self) -> World {
        match self.node_ranks.0.is_empty() {
            true => World::Uniform { nodes: self.nodes, ppn: self.ppn.max(1) },
            false => World::from_counts(&self.node_ranks.0)
                .unwrap_or(World::Uniform { nodes: self.nodes, ppn: self.ppn.max(1) }),
        }
    }

    /// Makes this the topology of `world`: its node count, and `ppn` or `node_ranks` as it is
    /// uniform or not (the node itself is left as it is).
    pub fn set_world(&mut self, world: &World) {
        self.nodes = world.nodes();
        match world {
            World::Uniform { ppn, .. } => (self.ppn, self.node_ranks) = (*ppn, NodeRanks(Vec::new())),
            World::Uneven { .. } => {
                self.ppn = 1;
                self.node_ranks = NodeRanks((0..world.nodes()).map(|n| world.count(n)).collect());
            }
        }
    }

    /// The world communicator's size in processes.
    pub fn world_size(&self) -> u32 {
        self.world().size()
    }

    /// Local processes this node serves (local ranks `0..` this).
    pub fn local_capacity(&self) -> u32 {
        match self.node_ranks.0.get(self.node as usize) {
            Some(&c) => c,
            None => self.ppn,
        }
    }

    /// The world rank of this node's local process `local`.
    pub fn world_rank(&self, local: u32) -> Option<u32> {
        self.world().rank(self.node, local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_secret_that_does_not_parse_is_kept_nowhere_a_message_could_print_it() {
        let key = "9e1c7a5f3d2b0e8c6a4f2d1b9e7c5a3f1d0b8e6c4a2f9d7b5e3c1a0f8d6b4e2c";
        for bad in [format!("0x{key}"), key[..62].to_string(), format!("{}q", &key[..63])] {
            let get = |k: &str| (k == "RINGCAST_JOB_SECRET").then(|| bad.clone());
            let e = Topology::parse(&get).unwrap_err();
            let shown = format!("{e} {e:?}");
            assert!(shown.contains("RINGCAST_JOB_SECRET"), "{shown}");
            assert!(!shown.contains(&key[8..20]), "{shown}");
        }
        // Other tunables still echo what they were given (it helps, and it is no key).
        let e = Topology::parse(&|k| (k == "RINGCAST_NODES").then(|| "many".to_string())).unwrap_err();
        assert!(e.to_string().contains("\"many\""), "{e}");
    }
}
