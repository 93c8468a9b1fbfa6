//! What a verbs fabric is built from and reports: [`VerbsOptions`] (device, port and queue
//! sizes from the `verbs.*` section), [`FabricSpec`] (this member of the job, its groups and
//! HELLO interval) and [`VerbsStats`] (what it counts beyond the common fabric counters).
use super::{group, wire, Reject, VerbsError};
use crate::config::VerbsConfig;
use crate::fabric::FabricSetup;
use ringcast_proto::comm::{GroupId, PeerId};
use std::net::IpAddr;
/// How to open the device and size the queue pair (from the `verbs_*` tunables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsOptions {
    /// Device name; empty: the first device.
    pub device: String,
    /// Port number (from 1).
    pub port: u8,
    /// GID table index of this member's address.
    pub gid_index: u8,
    /// IP address rdmacm binds to (its interface decides the device); `None`: from the GID.
    pub addr: Option<IpAddr>,
    /// How groups are joined.
    pub join: group::JoinMode,
    /// Pre-posted receives.
    pub recv_slots: u32,
    /// Send buffers (send queue depth).
    pub send_depth: u32,
    /// Largest datagram (the engine's `mtu`).
    pub mtu: usize,
    /// Longest wait for a multicast join, in milliseconds.
    pub join_timeout_ms: u32,
    /// Groups joined at once (communicators, plus the discovery group).
    pub max_groups: usize,
}

impl VerbsOptions {
    /// What the `verbs` section says, for datagrams and groups of the job of `setup` (one
    /// group more than it has communicators: the discovery group).
    pub fn new(setup: &FabricSetup, section: &VerbsConfig) -> Result<VerbsOptions, VerbsError> {
        Ok(VerbsOptions {
            device: section.device.clone(),
            port: section.port,
            gid_index: section.gid_index,
            addr: section.parsed_addr().map_err(VerbsError::Invalid)?,
            join: section.join,
            recv_slots: section.recv_slots,
            send_depth: section.send_depth,
            mtu: setup.mtu,
            join_timeout_ms: section.join_timeout_ms,
            max_groups: setup.max_groups + 1,
        })
    }
}

/// What the verbs fabric counts beyond [`FabricCounters`] (monotonic, except the `*_now`
/// fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Received messages not delivered, by [`Reject::index`].
    pub rejected: [u64; Reject::ALL.len()],
    /// Sends refused: above the MTU, to this member, or to a member number out of range.
    pub tx_refused: u64,
    /// Sends dropped: the member's address is not known yet.
    pub tx_unknown: u64,
    /// Multicasts refused: the group is not joined.
    pub tx_not_joined: u64,
    /// Sends dropped: every send buffer in flight.
    pub tx_full: u64,
    /// Sends refused: the queue pair is in the error state.
    pub tx_down: u64,
    /// Sends the device refused, or completed with an error other than a flush.
    pub tx_errors: u64,
    /// Receive completions with an error status other than a flush, and completions naming a
    /// slot the NIC does not hold.
    pub rx_errors: u64,
    /// Receives flushed (the queue pair went to the error state).
    pub rx_flushed: u64,
    /// Times the queue pair was found in the error state.
    pub qp_failures: u64,
    /// Recoveries of the queue pair that brought it back.
    pub qp_recoveries: u64,
    /// Recoveries that failed (the fabric stays down until the next attempt).
    pub qp_recovery_failures: u64,
    /// Polls after which no receive was posted (messages arriving then are lost unseen).
    pub rx_dry: u64,
    /// HELLOs multicast (asking) and unicast (answering).
    pub hellos_sent: u64,
    /// See `hellos_sent`.
    pub replies_sent: u64,
    /// HELLOs received and taken.
    pub hellos_received: u64,
    /// Members learnt (first HELLO of an incarnation).
    pub peers_learned: u64,
    /// Members seen restarting (a new incarnation).
    pub peers_restarted: u64,
    /// Address handles that could not be created.
    pub ah_errors: u64,
    /// Joins whose MGID differs from the one [`group`] predicts (the join's is used).
    pub mgid_mismatch: u64,
    /// Other members known now.
    pub known_now: u32,
    /// Receives posted now.
    pub posted_now: u32,
    /// Sends in flight now.
    pub in_flight_now: u32,
    /// Address handles kept until the sends that may name them complete.
    pub retired_now: u32,
}

/// What a [`VerbsFabric`] is, beyond its NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricSpec {
    /// This member.
    pub local: PeerId,
    /// Members.
    pub nodes: u32,
    /// Largest datagram.
    pub mtu: usize,
    /// [`wire::job_tag`] of the job.
    pub job: u32,
    /// The job's discovery group ([`group::discovery_group`]).
    pub discovery: GroupId,
    /// This start's incarnation (larger than any earlier start's).
    pub incarnation: u64,
    /// Interval between HELLOs while members are missing, in nanoseconds.
    pub hello_ns: u64,
    /// Groups joined at once (communicators; the discovery group is extra).
    pub max_groups: usize,
}

impl FabricSpec {
    /// Member `setup.node` of the job `setup` describes, HELLOs at the section's interval,
    /// with incarnation `incarnation`.
    pub fn new(setup: &FabricSetup, section: &VerbsConfig, incarnation: u64) -> FabricSpec {
        FabricSpec {
            local: setup.node,
            nodes: setup.nodes,
            mtu: setup.mtu,
            job: wire::job_tag(&setup.job),
            discovery: group::discovery_group(&setup.job),
            incarnation,
            hello_ns: u64::from(section.hello_ms) * 1_000_000,
            max_groups: setup.max_groups,
        }
    }
}
