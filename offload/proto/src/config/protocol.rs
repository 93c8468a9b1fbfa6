//! The reliable broadcast protocol's knobs: frame size, channels, the root's delay, repair and
//! liveness timers, and the algorithm choice (docs/protocol.md).
use super::{invalid, ConfigError};
use crate::schedule::bcast::Algorithm;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;
use ringcast_abi::frame::DIGEST_LEN;
use ringcast_abi::frame::MAX_FRAGS;
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};

/// How long a broadcast's root waits before it multicasts (Hoefler et al. §3.1): receivers that
/// have not posted yet lose multicast datagrams beyond their pre-posted slots (except where the
/// fabric keeps them for the engine: `shm`'s multicast log, `Env::keep_back`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootDelay {
    /// Multicast at once.
    None,
    /// Wait this many microseconds.
    Fixed(u32),
    /// Randomized single-process synchronization: the root waits for the "ready" of one non-root
    /// rank picked per broadcast from the communicator's seed.
    Random,
    /// Learned: the picked rank's "ready" is a sample of how late receivers arrive (the root does
    /// not wait for it); the root waits the moving average of those lags, times a factor the
    /// multicast hit rate measured by the synchronization tunes.
    Adaptive,
}

/// How frames are authenticated (`protocol.auth`, docs/protocol.md "Integrity and
/// authenticity"): by who can write the fabric's wire. Every engine of a job must run the same
/// setting; it is bound into the wire version byte and the key derivation, so an engine of the
/// other setting drops every frame (`DropReason::BadVersion`, counted) instead of accepting it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    /// The keyed header tag on every frame and the keyed message MAC (BLAKE3) over the payload:
    /// for wires others can write (`udp`, `dpdk`, `verbs`).
    #[default]
    Mac,
    /// The keyed header tag and the per-datagram CRC32C, no per-byte MAC: for `shm`, whose
    /// segments only the job's own user can open. The last fragment's trailer carries a keyed
    /// MAC of the call alone (broadcast id, length, context), so ranks posting different calls
    /// still fail typed.
    Tag,
}

impl Auth {
    /// Whether the message MAC covers the payload.
    pub const fn payload_mac(self) -> bool {
        matches!(self, Auth::Mac)
    }

    /// The wire version byte frames of this setting carry ([`ringcast_abi::wire::WIRE_VERSION`],
    /// with [`ringcast_abi::wire::WIRE_AUTH_TAG`] set for `tag`).
    pub const fn wire_version(self) -> u8 {
        match self {
            Auth::Mac => ringcast_abi::wire::WIRE_VERSION,
            Auth::Tag => ringcast_abi::wire::WIRE_VERSION | ringcast_abi::wire::WIRE_AUTH_TAG,
        }
    }
}

/// How the engine composes an allgather, an allreduce, a reduce and an alltoall from broadcasts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllgatherParts {
    /// Mamidala's leader-based compositions: one broadcast per engine — an allgather's ranks'
    /// blocks side by side, a reduction's node result, an alltoall's ranks' send buffers side by
    /// side — when every engine's ranks are consecutive in the communicator; else one per rank.
    /// The default: faster than one part per rank for every reduction and allgather measured
    /// here once parts stopped waiting for a rendezvous (docs/performance.md, "The 4 KiB step
    /// found, and leader-based reductions"), and for alltoalls of short blocks, even for long
    /// ones ("Alltoall aggregated per node").
    #[default]
    Nodes,
    /// One broadcast per rank, always.
    Ranks,
}

impl AllgatherParts {
    /// Whether calls are composed leader-based, where the communicator's placement allows it.
    pub fn leader_based(self) -> bool {
        self == AllgatherParts::Nodes
    }
}

/// How the node leaders of a leader-based allreduce (`allreduce_between`) exchange the node
/// parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Between {
    /// Per call, the cheapest of recursive doubling, Rabenseifner's halving and multicast as
    /// the cost model predicts them (`model/exchange.rs`).
    #[default]
    Auto,
    /// Every node's result multicast once (the multicast allreduce, `engine/allgather/`);
    /// every rank then reduces them all.
    Multicast,
    /// Recursive doubling between the node leaders' engines over pair communicators
    /// (`engine/exchange.rs`) — Mamidala's leader-based allreduce with the leaders'
    /// point-to-point step on the engines: the engines exchange the node result `log₂ E` times
    /// (each receiving `len` bytes per step instead of `E · len`; as fast or faster than
    /// multicast in every configuration measured here, 1.3–2.1× from 64 KiB,
    /// docs/performance.md, "Recursive doubling between the leaders"); Rabenseifner's halving
    /// from `allreduce_halving_bytes`.
    Doubling,
}

/// How the node leaders of a leader-based allgather (`allgather_between`) exchange the node
/// parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllgatherBetween {
    /// Per call, doubling or multicast, whichever the cost model predicts cheaper
    /// (`model/exchange.rs`).
    #[default]
    Auto,
    /// Every node's part multicast once (`engine/allgather/`).
    Multicast,
    /// Recursive doubling of the parts between the leaders' engines over pair communicators
    /// (`engine/exchange.rs`): `log₂ P` swaps, plus a fold where the engine count is not a
    /// power of two; multicast from `allgather_multicast_bytes` node parts.
    Doubling,
    /// Round a ring of the leaders' engines (`engine/allgather/schedule.rs::ring_step_of`): `E − 1`
    /// steps, each engine sending one part to the next and receiving one from the previous —
    /// every part once per engine whatever `E`, over two neighbours' pair communicators.
    Ring,
}

/// How an alltoall composed per node exchanges between the engines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlltoallBetween {
    /// Per call, pairwise or multicast, whichever the cost model predicts cheaper where both
    /// can run (`model/exchange.rs`).
    #[default]
    Auto,
    /// Every node's (or rank's) whole send buffers multicast once, every rank keeping its
    /// blocks (the multicast alltoall, `engine/alltoall/`).
    Multicast,
    /// Pairwise exchange between the engines over pair communicators in Mamidala's
    /// bidirectional order (`engine/pairwise.rs`): each block travels once, from its sender's
    /// send buffer straight into its receiver's place — on communicators of up to
    /// `pairwise_engines` engines (1.2–3.1× faster than multicast from 4 KiB blocks,
    /// docs/performance.md, "Pairwise alltoall"); with several ranks per engine, from
    /// `alltoall_pairwise_bytes` blocks unless aggregated.
    Pairwise,
}

/// `FromStr` and `Display` for a setting that is one of a few words (`RINGCAST_…=word`, `ringcast
/// info`): each variant and its word; anything else is refused naming the words.
macro_rules! words {
    ($Enum:ident { $($Variant:ident => $word:literal),+ $(,)? }) => {
        impl FromStr for $Enum {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($word => Ok($Enum::$Variant),)+
                    _ => {
                        let words = [$($word),+];
                        let (last, rest) = words.split_last().unwrap_or((&"", &[]));
                        let expected =
                            if rest.is_empty() { format!("{last}") } else { format!("{} or {last}", rest.join(", ")) };
                        Err(format!("expected {expected}, got {s:?}"))
                    }
                }
            }
        }

        impl fmt::Display for $Enum {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self {
                    $($Enum::$Variant => $word,)+
                })
            }
        }
    };
}

words!(AllgatherParts { Nodes => "nodes", Ranks => "ranks" });
words!(Auth { Mac => "mac", Tag => "tag" });
words!(Between { Auto => "auto", Multicast => "multicast", Doubling => "doubling" });
words!(AllgatherBetween { Auto => "auto", Multicast => "multicast", Doubling => "doubling", Ring => "ring" });
words!(AlltoallBetween { Auto => "auto", Multicast => "multicast", Pairwise => "pairwise" });

impl FromStr for RootDelay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(RootDelay::None),
            "random" => Ok(RootDelay::Random),
            "adaptive" => Ok(RootDelay::Adaptive),
            _ => match s.strip_prefix("fixed:").map(str::parse) {
                Some(Ok(us)) => Ok(RootDelay::Fixed(us)),
                _ => Err(format!("expected none, fixed:<microseconds>, random or adaptive, got {s:?}")),
            },
        }
    }
}

impl fmt::Display for RootDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootDelay::None => f.write_str("none"),
            RootDelay::Fixed(us) => write!(f, "fixed:{us}"),
            RootDelay::Random => f.write_str("random"),
            RootDelay::Adaptive => f.write_str("adaptive"),
        }
    }
}

/// Which broadcast algorithm the engine uses: chosen per call by the cost model
/// ([`crate::model::select::Selector`]), or one forced for every broadcast (experiments, or a
/// fabric the model describes badly).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlgorithmChoice {
    /// The cheapest predicted algorithm for each call's size, length and placement.
    #[default]
    Auto,
    /// Always this one (a forced multicast still falls back when the fabric cannot multicast).
    Fixed(Algorithm),
}

impl AlgorithmChoice {
    /// The forced algorithm, if any.
    pub fn forced(self) -> Option<Algorithm> {
        match self {
            AlgorithmChoice::Auto => None,
            AlgorithmChoice::Fixed(a) => Some(a),
        }
    }
}

impl FromStr for AlgorithmChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(AlgorithmChoice::Auto);
        }
        Algorithm::from_name(s).map(AlgorithmChoice::Fixed).ok_or_else(|| {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            format!("expected auto or one of {}, got {s:?}", names.join(", "))
        })
    }
}

impl fmt::Display for AlgorithmChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgorithmChoice::Auto => f.write_str("auto"),
            AlgorithmChoice::Fixed(a) => f.write_str(a.name()),
        }
    }
}

/// The largest `protocol.mtu`: a datagram within one IP packet of either family with room to
/// spare (IPv4's largest UDP payload is 65,507 bytes). Loopback's 64 KiB MTU gives this.
pub const MAX_MTU: u32 = 65_000;

crate::tunables! {
    /// The protocol (section `protocol`).
    pub struct ProtocolConfig in "protocol" {
        /// Largest datagram on the fabric.
        mtu: u32 = super::topology::ETHERNET_MTU, "RINGCAST_MTU",
            "largest datagram in bytes (header 32 + payload + trailer 12: tag 8, CRC 4), 64..=65000; unset: by fabric: on udp the path's (the least route MTU to the members and the multicast groups, less the IP and UDP headers: 1472 on 1500-byte Ethernet, 65000 on loopback), 4088 on shm (one 4 KiB ring slot), else 1472 (UDP over 1500-byte Ethernet)";
        /// How frames are authenticated.
        auth: Auth = Auth::Mac, "RINGCAST_AUTH",
            "frame authentication: mac (keyed header tag + keyed BLAKE3 message MAC over the payload) or tag (keyed header tag + per-datagram CRC32C, no per-byte MAC); unset: by fabric: tag on shm (only the job's user can open its segments), mac on udp, dpdk and verbs (wires others can write); every engine of a job must agree (an engine of the other setting drops every frame, counted as drops_bad_version_total)";
        /// Largest broadcast message.
        max_message_bytes: u32 = 4 << 20, "RINGCAST_MAX_MESSAGE_BYTES",
            "largest broadcast message in bytes (its fragments must fit the 8192-fragment bitmap)";
        /// Broadcast channels per communicator.
        channels: u32 = 16, "RINGCAST_CHANNELS",
            "broadcast channels per communicator: broadcasts in flight before a delayed synchronization must free one (Yu et al.)";
        /// Pre-posted receive slots.
        preposted_slots: u32 = 64, "RINGCAST_PREPOSTED_SLOTS",
            "fragments kept per communicator for broadcasts this rank has not posted yet (the n pre-posted receives of Hoefler et al.)";
        /// Size below which a communicator uses point-to-point broadcast.
        small_comm: u32 = 20, "RINGCAST_SMALL_COMM",
            "communicators smaller than this broadcast point-to-point (binomial; linear up to 4 ranks) instead of multicast";
        /// Root delay mode.
        root_delay: RootDelay = RootDelay::None, "RINGCAST_ROOT_DELAY",
            "root delay before the multicast: none, fixed:<us>, random (wait for one picked rank's ready) or adaptive";
        /// Ceiling of the adaptive root delay.
        root_delay_max_us: u32 = 100, "RINGCAST_ROOT_DELAY_MAX_US",
            "largest delay the adaptive root delay may choose, in microseconds";
        /// First repair request timeout.
        repair_timeout_us: u32 = 500, "RINGCAST_REPAIR_TIMEOUT_US",
            "microseconds without progress before an incomplete rank asks its repair source for missing fragments (doubles per retry)";
        /// Cap of the repair back-off.
        repair_backoff_max_us: u32 = 50_000, "RINGCAST_REPAIR_BACKOFF_MAX_US",
            "largest interval between repair requests in microseconds (at most peer_timeout_ms / 64: each request is also a liveness probe)";
        /// Requests to the repair source before asking the root.
        escalate_after: u32 = 3, "RINGCAST_ESCALATE_AFTER",
            "unanswered repair requests to the ring predecessor before asking the root directly (fail-over to point-to-point)";
        /// Time after which a silent rank is declared unreachable.
        peer_timeout_ms: u32 = 2000, "RINGCAST_PEER_TIMEOUT_MS",
            "milliseconds without progress after which an operation fails with PeerUnreachable and the communicator is broken";
        /// Message size from which repair is selective.
        selective_repair_bytes: u32 = 65536, "RINGCAST_SELECTIVE_REPAIR_BYTES",
            "messages from this size use selective ring repair (only missing fragments travel); smaller ones forward everything";
        /// Broadcast algorithm: chosen by the cost model, or forced.
        algorithm: AlgorithmChoice = AlgorithmChoice::Auto, "RINGCAST_ALGORITHM",
            "broadcast algorithm: auto (cheapest predicted by the cost model per call) or multicast, linear, binomial, chain, binary, scatter-allgather, dual-tree, hierarchical";
        /// How allgathers, reductions and alltoalls are composed.
        allgather_parts: AllgatherParts = AllgatherParts::Nodes, "RINGCAST_ALLGATHER_PARTS",
            "how the engine composes ALLGATHER, ALLREDUCE, REDUCE and ALLTOALL from broadcasts: nodes (Mamidala's leader-based compositions: one broadcast per engine — an allgather's ranks' blocks side by side, a reduction's node result, an alltoall's ranks' send buffers side by side — when every engine's ranks are consecutive; else one per rank) or ranks (one broadcast per rank)";
        /// How a leader-based allreduce combines the node results.
        allreduce_between: Between = Between::Auto, "RINGCAST_ALLREDUCE_BETWEEN",
            "how a leader-based ALLREDUCE or REDUCE combines the node results: auto (per call, recursive doubling, Rabenseifner's halving or multicast, whichever the cost model predicts cheapest: model.*), multicast (each node's result multicast once, every rank reduces them all) or doubling (recursive doubling between the node leaders' engines over pair communicators, then delivered to each node's processes; Rabenseifner's from allreduce_halving_bytes); per-rank compositions always multicast";
        /// How a leader-based allgather exchanges the node parts.
        allgather_between: AllgatherBetween = AllgatherBetween::Auto, "RINGCAST_ALLGATHER_BETWEEN",
            "how a leader-based ALLGATHER exchanges the node parts: auto (per call, doubling or multicast, whichever the cost model predicts cheaper: model.*), multicast (each node's part multicast once, every engine receives them all), doubling (recursive doubling of the node parts between the leaders' engines over pair communicators, then the whole result delivered to each node's processes; on two engines, or while the largest node part is below allgather_multicast_bytes, or allgather_fold_multicast_bytes where the engine count is not a power of two) or ring (the same, round a ring of the engines: E - 1 steps of one part each; every engine also pairs with its two neighbours); per-rank compositions always multicast";
        /// Node parts from which a doubling allgather multicasts instead.
        allgather_multicast_bytes: u32 = 256 << 10, "RINGCAST_ALLGATHER_MULTICAST_BYTES",
            "with allgather_between doubling or ring: an allgather whose largest node part (its ranks' blocks) has this many bytes multicasts the node parts instead, on a power of two of engines from four";
        /// The same where the engine count is not a power of two.
        allgather_fold_multicast_bytes: u32 = 128 << 10, "RINGCAST_ALLGATHER_FOLD_MULTICAST_BYTES",
            "allgather_multicast_bytes on three engines or more that are not a power of two, where recursive doubling folds the engines past the largest power of two (two more sequential transfers, one of them the whole result)";
        /// How an alltoall exchanges between the engines.
        alltoall_between: AlltoallBetween = AlltoallBetween::Auto, "RINGCAST_ALLTOALL_BETWEEN",
            "how an ALLTOALL exchanges between the engines: auto (per call, pairwise where it can run or multicast, whichever the cost model predicts cheaper: model.*), multicast (every node's or rank's whole send buffers multicast once, each rank keeping its blocks; per node where every engine's ranks are consecutive) or pairwise (every block sent once over pair communicators, from the sender's buffer to its place at the receiver, in Mamidala's bidirectional order; up to pairwise_engines engines, and with several ranks per engine from alltoall_pairwise_bytes blocks)";
        /// Blocks from which an alltoall with several ranks per engine goes pairwise.
        alltoall_pairwise_bytes: u32 = 4096, "RINGCAST_ALLTOALL_PAIRWISE_BYTES",
            "with alltoall_between pairwise: on engines holding several ranks, blocks shorter than this go by the multicast alltoall aggregated per node (one message per node instead of ppn^2 per pair of engines); with one rank per engine every block goes pairwise";
        /// Whether a pairwise alltoall aggregates per node.
        alltoall_aggregate: bool = true, "RINGCAST_ALLTOALL_AGGREGATE",
            "pairwise alltoalls on engines holding several ranks send one transfer per pair of engines (each node's blocks for the other staged in its leader's work buffer, then scattered: Mamidala's node-level aggregation) instead of one per pair of ranks, where the staging and the transfer fit";
        /// Communicators up to this many engines derive a pair communicator per pair.
        pairwise_engines: u32 = 16, "RINGCAST_PAIRWISE_ENGINES",
            "communicators of up to this many engines derive a pair communicator for every pair of engines (the pairwise alltoall: E - 1 per engine); larger ones only recursive doubling's partners (log2 E + 1 per engine)";
        /// Blocks from which an allreduce between the leaders halves.
        allreduce_halving_bytes: u32 = 256 << 10, "RINGCAST_ALLREDUCE_HALVING_BYTES",
            "with allreduce_between doubling: blocks from this many bytes use Rabenseifner's reduce-scatter + allgather (recursive halving, then doubling of the segments) instead of recursive doubling of whole blocks, on four engines or more; the result is the same bits either way";
    }
}

impl ProtocolConfig {
    /// Checks the section's values against each other and the wire format's limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mtu < 64 || self.mtu > MAX_MTU {
            return invalid(format!("mtu {} outside 64..={MAX_MTU}", self.mtu));
        }
        let payload = self.mtu - (WIRE_HEADER_LEN + WIRE_TRAILER_LEN + DIGEST_LEN) as u32;
        if self.max_message_bytes.div_ceil(payload) > MAX_FRAGS {
            return invalid(format!(
                "max_message_bytes {} needs more than {MAX_FRAGS} fragments of {payload} bytes; raise mtu or lower it",
                self.max_message_bytes
            ));
        }
        if self.channels == 0 || self.channels > 64 {
            return invalid(format!(
                "channels {} outside 1..=64 (a sync window is 64 broadcasts)",
                self.channels
            ));
        }
        if self.repair_timeout_us == 0 || self.peer_timeout_ms == 0 {
            return invalid("repair_timeout_us and peer_timeout_ms must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// Every word reads back as its variant and prints as its word; anything else is refused
    /// naming the words.
    #[test]
    fn a_word_setting_reads_what_it_prints() {
        for v in [
            AllgatherBetween::Auto,
            AllgatherBetween::Multicast,
            AllgatherBetween::Doubling,
            AllgatherBetween::Ring,
        ] {
            assert_eq!(v.to_string().parse::<AllgatherBetween>(), Ok(v));
        }
        assert_eq!("auto".parse::<Between>(), Ok(Between::Auto));
        assert_eq!("ranks".parse::<AllgatherParts>(), Ok(AllgatherParts::Ranks));
        assert_eq!(AlltoallBetween::Pairwise.to_string(), "pairwise");
        assert_eq!(
            "tree".parse::<AllgatherBetween>(),
            Err("expected auto, multicast, doubling or ring, got \"tree\"".to_string())
        );
        assert_eq!("".parse::<Between>(), Err("expected auto, multicast or doubling, got \"\"".to_string()));
    }

    /// `protocol.auth` reads `mac` and `tag` (what it prints) and refuses anything else, typed,
    /// naming the words; each setting has its own wire version byte.
    #[test]
    fn the_auth_setting_parses_and_versions_differ() {
        assert_eq!("tag".parse::<Auth>(), Ok(Auth::Tag));
        assert_eq!(" mac".trim().parse::<Auth>(), Ok(Auth::Mac));
        assert_eq!(Auth::Tag.to_string(), "tag");
        assert_eq!("none".parse::<Auth>(), Err("expected mac or tag, got \"none\"".to_string()));
        assert_eq!(Auth::default(), Auth::Mac, "the section's own default: the safe one");
        assert_ne!(Auth::Mac.wire_version(), Auth::Tag.wire_version());
        assert_eq!(Auth::Mac.wire_version(), ringcast_abi::wire::WIRE_VERSION, "mac frames as before");
        let get = |v: &'static str| move |k: &str| (k == "RINGCAST_AUTH").then(|| String::from(v));
        assert_eq!(ProtocolConfig::parse(&get("tag")).map(|c| c.auth), Ok(Auth::Tag));
        assert!(matches!(
            ProtocolConfig::parse(&get("hmac")),
            Err(ConfigError::Parse { env: "RINGCAST_AUTH", .. })
        ));
    }
}
