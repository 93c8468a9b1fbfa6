//! What a [`Protocol`](super::protocol::Protocol) is configured with and never changes: sizes,
//! timeouts, the CRC function, the authentication setting and the cost model, derived once from
//! the [`EngineConfig`]. A protocol holds it behind one `Arc`, shared by its
//! [`sibling`](super::protocol::Protocol::sibling)s: a simulator's million ranks of one
//! configuration hold one copy and a pointer each (it was ~120 bytes a rank inline). The engine's
//! data path reads it through that pointer, one dereference per call, never per byte.
use crate::config::{Auth, EngineConfig, RootDelay};
use crate::model::select::Selector;
use crate::Nanos;
use ringcast_abi::frame::{Crc32c, DIGEST_LEN};
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};

/// A protocol's immutable configuration (see the module doc).
#[derive(Debug)]
pub(crate) struct Tunables {
    pub(crate) channels: u32,
    /// Payload bytes per fragment: `mtu` less the header, trailer and digest.
    pub(crate) payload: u32,
    pub(crate) mtu: usize,
    pub(crate) max_message: u32,
    /// Pre-posted receive slots per communicator.
    pub(crate) slots: usize,
    pub(crate) root_delay: RootDelay,
    pub(crate) root_delay_max: Nanos,
    pub(crate) repair_timeout: Nanos,
    pub(crate) backoff_max: Nanos,
    pub(crate) escalate_after: u32,
    pub(crate) peer_timeout: Nanos,
    /// How often a rank waiting on the synchronization probes its neighbours: 64 chances per
    /// `peer_timeout` for an answer to get through a lossy link before the neighbour is declared
    /// unreachable.
    pub(crate) probe_every: Nanos,
    pub(crate) selective_bytes: u32,
    /// Communicators it may hold, their pair communicators included.
    pub(crate) max_comms: usize,
    pub(crate) crc: Crc32c,
    /// How frames are authenticated (`protocol.auth`): every communicator's keys and version.
    pub(crate) auth: Auth,
    /// The cost model that picks an algorithm per call and says how long one should take.
    pub(crate) selector: Selector,
}

impl Tunables {
    /// The tunables of `config`; `crc` computes CRC32C.
    pub(crate) fn new(config: &EngineConfig, crc: Crc32c) -> Self {
        let mtu = config.protocol.mtu as usize;
        let payload = (mtu - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - DIGEST_LEN) as u32;
        let repair_timeout = config.protocol.repair_timeout_us as Nanos * 1000;
        let probe_every = (config.protocol.peer_timeout_ms as Nanos * 1_000_000 / 64).max(repair_timeout);
        Tunables {
            channels: config.protocol.channels,
            payload,
            mtu,
            max_message: config.protocol.max_message_bytes,
            slots: config.protocol.preposted_slots as usize,
            root_delay: config.protocol.root_delay,
            root_delay_max: config.protocol.root_delay_max_us as Nanos * 1000,
            repair_timeout,
            // A receiver's requests are also its liveness probes: an answer (fragments, or
            // `READY`/alive from a root whose application is late) is what keeps it from
            // declaring the source dead after `peer_timeout`. Capped at the synchronization's
            // probe interval, they get the same 64 chances per peer timeout to cross a lossy
            // link; the default 50 ms cap left 40 per 2 s (DST seed 888000012974: a late root's
            // answers lost for 200 ms in a burst, a benign run's communicator broken).
            backoff_max: (config.protocol.repair_backoff_max_us as Nanos * 1000).min(probe_every),
            escalate_after: config.protocol.escalate_after,
            peer_timeout: config.protocol.peer_timeout_ms as Nanos * 1_000_000,
            probe_every,
            selective_bytes: config.protocol.selective_repair_bytes,
            // Each communicator brings its pair communicators (`comm/links.rs`: ⌈log₂ nodes⌉ + 1,
            // or one per other engine).
            max_comms: config.limits.max_comms as usize
                * (1 + crate::comm::links::LinkSet::of(&config.protocol)
                    .per_comm(config.topology.world().nodes())),
            crc,
            auth: config.protocol.auth,
            selector: Selector::from_config(config),
        }
    }
}
