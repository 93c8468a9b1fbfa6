//! How the engine exchanges between the engines: a leader-based allreduce's or allgather's
//! node parts between the node leaders, and an alltoall's blocks — the rules
//! `engine/allgather.rs`, `engine/leader_schedule.rs` and `engine/alltoall.rs` decide by, and
//! the table `ringcast info` prints from them.
//!
//! These are measured thresholds, not [`super::cost`] predictions: on the LogGP cluster the
//! model prices, a multicast exchange moves the same bytes per engine as recursive doubling in
//! one round instead of `log₂ E`, so it would always win — while on this machine's `shm` fabric,
//! where the engines share two cores, doubling measured 1.2–2.1× faster over most of the range
//! (docs/performance.md, "Recursive doubling between the leaders", "Allgather between the
//! leaders"). Every rank decides alike: the inputs are the configuration's, the communicator's
//! and the call's.
use crate::config::{AllgatherBetween, AlltoallBetween, Between, ProtocolConfig};
use alloc::format;
use alloc::string::{String, ToString};
use core::fmt::{self, Write as _};

/// How the leaders exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Every node's part multicast once (on `shm`, each part's broadcast by the cost model's
    /// algorithm for its length).
    Multicast,
    /// Recursive doubling over pair communicators (an allreduce's whole blocks; an allgather's
    /// parts held so far).
    Doubling,
    /// Rabenseifner's reduce-scatter by recursive halving, then allgather by recursive doubling.
    Rabenseifner,
    /// Every block sent once, pair by pair, in the bidirectional order (an alltoall).
    Pairwise,
    /// Round a ring of the engines, one part per step (an allgather's).
    Ring,
}

impl fmt::Display for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Exchange::Multicast => "multicast",
            Exchange::Doubling => "doubling",
            Exchange::Rabenseifner => "rabenseifner",
            Exchange::Pairwise => "pairwise",
            Exchange::Ring => "ring",
        })
    }
}

/// Whether an allreduce of `len`-byte blocks of `elem`-byte elements on `engines` engines halves
/// (Rabenseifner's schedule): from `allreduce_halving_bytes`, with at least four engines in the
/// doubling and an element per segment — below, recursive doubling's `log₂ P` round trips of
/// whole blocks cost less than twice as many of shorter ones.
/// (docs/performance.md, "Rabenseifner between the leaders"). `halving_bytes` is
/// `protocol.allreduce_halving_bytes`.
pub fn halves(engines: u32, len: u64, elem: u64, halving_bytes: u64) -> bool {
    let p = u64::from(crate::engine::power_below(engines));
    p >= 4 && len >= halving_bytes && len / elem.max(1) >= p
}

/// A leader-based allreduce's (or reduce's) exchange on `engines` engines (`allreduce_between`).
pub fn allreduce(c: &ProtocolConfig, engines: u32, len: u64, elem: u64) -> Exchange {
    match c.allreduce_between {
        Between::Multicast => Exchange::Multicast,
        Between::Doubling if halves(engines, len, elem, c.allreduce_halving_bytes.into()) => {
            Exchange::Rabenseifner
        }
        Between::Doubling => Exchange::Doubling,
    }
}

/// A leader-based allgather's exchange on `engines` engines whose largest node part (its ranks'
/// blocks side by side) is `largest` bytes: doubling or the ring (`allgather_between`) on two
/// engines — one swap either way — or below `allgather_multicast_bytes` (a power of two of
/// engines) or `allgather_fold_multicast_bytes` (others); from there the parts' own
/// broadcasts, pipelined by each engine as it receives, outran the swaps: by 1.05–1.3× from
/// 256 KiB node parts on 4 and 8 engines, and already at 128 KiB by 1.15–1.7× on 3, 5, 6 and 7,
/// where doubling's folds add two sequential transfers, one of them the whole result (equal on
/// 4 and 8; docs/performance.md, "Allgather between the leaders", "The ring between the
/// leaders").
pub fn allgather(c: &ProtocolConfig, engines: u32, largest: u64) -> Exchange {
    let threshold = if engines.is_power_of_two() {
        c.allgather_multicast_bytes
    } else {
        c.allgather_fold_multicast_bytes
    };
    let point_to_point = engines == 2 || largest < u64::from(threshold);
    match c.allgather_between {
        AllgatherBetween::Doubling if point_to_point => Exchange::Doubling,
        AllgatherBetween::Ring if point_to_point => Exchange::Ring,
        _ => Exchange::Multicast,
    }
}

/// An alltoall's exchange on `engines` engines holding `size` ranks (consecutive or not), the
/// largest engine `largest` of them, of `block`-byte blocks: pairwise (`alltoall_between`) where every
/// pair of engines has a pair communicator (`pairwise_engines`), a block fits a message
/// (`max_message_bytes`: a longer one fails `BadLength` by the multicast alltoall, one call,
/// not the communicator), and either every engine holds one rank, or the exchange aggregates
/// per node ([`pairwise_aggregates`]), or the blocks have `alltoall_pairwise_bytes` or more;
/// else multicast. Unaggregated with several ranks per node, short blocks went faster by the
/// multicast alltoall's one message per node than by `ppn²` per pair of engines (2 × 2 at 8 B:
/// 34 against 50–62 µs); aggregated, the pairwise exchange was as fast at 8 B and 1.5–4× faster
/// from 1–4 KiB — docs/performance.md, "Pairwise alltoall".
pub fn alltoall(c: &ProtocolConfig, engines: u32, size: u32, largest: u32, block: u64) -> Exchange {
    let short_ok = largest <= 1
        || pairwise_aggregates(c, size, largest, block)
        || block >= u64::from(c.alltoall_pairwise_bytes);
    let pairwise = c.alltoall_between == AlltoallBetween::Pairwise
        && engines >= 2
        && engines <= c.pairwise_engines
        && block <= u64::from(c.max_message_bytes)
        && short_ok;
    if pairwise {
        Exchange::Pairwise
    } else {
        Exchange::Multicast
    }
}

/// Whether a pairwise alltoall of `block`-byte blocks on a communicator of `size` ranks whose
/// largest engine holds `largest` aggregates per node (`pairwise.rs`): one transfer each way
/// per pair of engines — each engine's blocks for the other staged in its leader's work buffer
/// past the result — instead of one per pair of ranks. Where engines hold several ranks, the
/// staging fits (what a node sends and receives, `2 · largest` send buffers, within the work
/// buffer's `size` past the result), the longest transfer fits a message, and either it still
/// goes eagerly (its fragments within half the pre-posted slots, the pair window's share) or
/// engines hold more than two ranks. Measured (docs/performance.md, "Pairwise alltoall"):
/// aggregated was 1.3–4× faster than direct up to 16 KiB blocks, and with four ranks per engine
/// at every length; with two, at 64 KiB blocks, its 256 KiB transfer waits for a rendezvous
/// and direct's four 64 KiB ones go eagerly: direct was 1.5× faster.
pub fn pairwise_aggregates(c: &ProtocolConfig, size: u32, largest: u32, block: u64) -> bool {
    let pair = u64::from(largest) * u64::from(largest) * block;
    let payload = u64::from(super::select::fragment_payload(c.mtu)).max(1);
    let eager = pair.div_ceil(payload) <= u64::from(c.preposted_slots / 2);
    c.alltoall_aggregate
        && largest > 1
        && 2 * largest <= size
        && pair <= u64::from(c.max_message_bytes)
        && (eager || largest > 2)
}

/// Engine counts and node part lengths of [`table`].
const ENGINES: [u32; 7] = [2, 3, 4, 6, 8, 64, 1024];
const PARTS: [(u64, &str); 7] = [
    (8, "8 B"),
    (4 << 10, "4 KiB"),
    (64 << 10, "64 KiB"),
    (128 << 10, "128 KiB"),
    (256 << 10, "256 KiB"),
    (1 << 20, "1 MiB"),
    (4 << 20, "4 MiB"),
];

/// The exchanges for [`ENGINES`] × node parts of [`PARTS`] (an allreduce of doubles; an
/// allgather whose every node part has that length).
pub fn table(c: &ProtocolConfig) -> String {
    let mut s = format!(
        "\nbetween the node leaders (allreduce_between = {}, halving from {} B; allgather_between = {}, multicast from {} B node parts, {} B on engine counts not a power of two):\n",
        c.allreduce_between,
        c.allreduce_halving_bytes,
        c.allgather_between,
        c.allgather_multicast_bytes,
        c.allgather_fold_multicast_bytes
    );
    let _ = write!(s, "{:>8}  {:9}", "engines", "");
    for (_, label) in PARTS {
        let _ = write!(s, "  {label:<12}");
    }
    let _ = writeln!(s);
    for e in ENGINES {
        for what in ["allreduce", "allgather"] {
            let _ = write!(s, "{e:>8}  {what:9}");
            for (len, _) in PARTS {
                let x = if what == "allreduce" { allreduce(c, e, len, 8) } else { allgather(c, e, len) };
                let _ = write!(s, "  {:<12}", x.to_string());
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(
        s,
        "alltoall (alltoall_between = {}, pairwise up to {} engines, from {} B blocks with several ranks per engine):",
        c.alltoall_between, c.pairwise_engines, c.alltoall_pairwise_bytes
    );
    for (ppn, label) in [(1, "1 rank"), (8, "8 ranks")] {
        for e in ENGINES {
            let _ = write!(s, "{e:>8}  {label:9}");
            for (len, _) in PARTS {
                let x = match alltoall(c, e, e * ppn, ppn, len) {
                    Exchange::Pairwise if pairwise_aggregates(c, e * ppn, ppn, len) => {
                        "pairwise-agg".to_string()
                    }
                    x => x.to_string(),
                };
                let _ = write!(s, "  {x:<12}");
            }
            let _ = writeln!(s);
        }
    }
    s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_follow_the_configuration() {
        let mut c = ProtocolConfig::default();
        assert_eq!(allreduce(&c, 2, 1 << 20, 8), Exchange::Doubling, "halving needs four engines");
        assert_eq!(allreduce(&c, 4, 1 << 20, 8), Exchange::Rabenseifner);
        assert_eq!(allreduce(&c, 5, 64 << 10, 8), Exchange::Doubling);
        assert_eq!(allgather(&c, 2, 4 << 20), Exchange::Doubling, "two engines: one swap");
        assert_eq!(allgather(&c, 4, (256 << 10) - 1), Exchange::Doubling);
        assert_eq!(allgather(&c, 4, 256 << 10), Exchange::Multicast);
        assert_eq!(allgather(&c, 5, (128 << 10) - 1), Exchange::Doubling);
        assert_eq!(allgather(&c, 5, 128 << 10), Exchange::Multicast, "a fold: multicast sooner");
        c.allreduce_between = Between::Multicast;
        c.allgather_between = AllgatherBetween::Multicast;
        assert_eq!(allreduce(&c, 8, 1 << 20, 8), Exchange::Multicast);
        assert_eq!(allgather(&c, 2, 8), Exchange::Multicast);
        c.allgather_between = AllgatherBetween::Ring;
        assert_eq!(allgather(&c, 5, 8), Exchange::Ring);
        assert_eq!(allgather(&c, 5, 128 << 10), Exchange::Multicast);
        c.alltoall_between = AlltoallBetween::Multicast;
        assert_eq!(alltoall(&c, 4, 4, 1, 1 << 20), Exchange::Multicast);
        c.alltoall_between = AlltoallBetween::Pairwise;
        assert_eq!(alltoall(&c, 16, 16, 1, 8), Exchange::Pairwise, "one rank per engine: always");
        assert_eq!(alltoall(&c, 4, 8, 2, 8), Exchange::Pairwise, "aggregated per node");
        assert!(pairwise_aggregates(&c, 8, 2, 8));
        c.mtu = 4088; // shm's
        assert!(pairwise_aggregates(&c, 8, 2, 16 << 10), "4 x 16 KiB: 17 fragments, eager");
        assert!(!pairwise_aggregates(&c, 8, 2, 64 << 10), "4 x 64 KiB: a rendezvous; direct");
        assert!(pairwise_aggregates(&c, 8, 4, 64 << 10), "four ranks per engine: always");
        assert!(!pairwise_aggregates(&c, 4, 3, 8), "the staging would not fit: 3 + 1 ranks");
        assert_eq!(alltoall(&c, 2, 4, 3, 8), Exchange::Multicast, "short, unaggregated: multicast");
        assert_eq!(alltoall(&c, 2, 4, 3, 4096), Exchange::Pairwise);
        c.alltoall_aggregate = false;
        assert_eq!(alltoall(&c, 4, 8, 2, 8), Exchange::Multicast);
        assert_eq!(alltoall(&c, 4, 8, 2, 4096), Exchange::Pairwise);
        assert_eq!(alltoall(&c, 17, 17, 1, 8), Exchange::Multicast, "no pair communicator for every pair");
        assert_eq!(alltoall(&c, 1, 4, 4, 1 << 20), Exchange::Multicast);
        assert_eq!(alltoall(&c, 4, 4, 1, 8 << 20), Exchange::Multicast, "a block beyond a message");
        let t = table(&ProtocolConfig::default());
        assert!(t.contains("rabenseifner") && t.contains("multicast") && t.contains("doubling"), "{t}");
    }
}
