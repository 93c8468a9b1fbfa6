//! How the engine exchanges between the engines: a leader-based allreduce's or allgather's
//! node parts between the node leaders, and an alltoall's blocks — what
//! `engine/allgather/`, `engine/exchange.rs` and `engine/alltoall/` decide by, and the table
//! `ringcast info` prints from it.
//!
//! With a `*_between` setting `auto` (the default) the engine takes, per call, the exchange
//! [`super::exchange`] predicts cheapest among those that can run; a word forces one, with the
//! measured thresholds of the settings beside it (`allreduce_halving_bytes`,
//! `allgather_multicast_bytes`, `alltoall_pairwise_bytes`: docs/performance.md, "Recursive
//! doubling between the leaders", "Allgather between the leaders", "Pairwise alltoall"). Every
//! rank decides alike: the inputs are the configuration's, the communicator's and the call's.
use super::exchange::ExchangeModel;
use crate::config::{AllgatherBetween, AlltoallBetween, Between, EngineConfig, ProtocolConfig};
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

/// Whether Rabenseifner's schedule can run: at least four engines in the doubling and an
/// element per segment — below, recursive doubling's `log₂ P` round trips of whole blocks cost
/// less than twice as many of shorter ones (docs/performance.md, "Rabenseifner between the
/// leaders").
pub fn can_halve(engines: u32, len: u64, elem: u64) -> bool {
    let p = u64::from(crate::comm::links::power_below(engines));
    p >= 4 && len / elem.max(1) >= p
}

/// Whether an allreduce of `len`-byte blocks of `elem`-byte elements on `engines` engines halves
/// with `allreduce_between = doubling`: where it can, from `halving_bytes`
/// (`protocol.allreduce_halving_bytes`).
pub fn halves(engines: u32, len: u64, elem: u64, halving_bytes: u64) -> bool {
    can_halve(engines, len, elem) && len >= halving_bytes
}

/// The first of `candidates` with the smallest prediction (ties go to the earlier one).
fn cheapest(candidates: &[(Exchange, bool)], predict: impl Fn(Exchange) -> f64) -> Exchange {
    let mut best: Option<(Exchange, f64)> = None;
    for &(x, ok) in candidates {
        if !ok {
            continue;
        }
        let t = predict(x);
        if best.is_none_or(|(_, b)| t < b) {
            best = Some((x, t));
        }
    }
    best.map_or(Exchange::Multicast, |(x, _)| x)
}

/// A leader-based allreduce's (or reduce's) exchange on `engines` engines, the largest holding
/// `largest` ranks (`allreduce_between`): recursive doubling, Rabenseifner's or multicast.
pub fn allreduce(c: &EngineConfig, engines: u32, largest: u32, len: u64, elem: u64) -> Exchange {
    let p = &c.protocol;
    match p.allreduce_between {
        Between::Multicast => Exchange::Multicast,
        Between::Doubling if halves(engines, len, elem, p.allreduce_halving_bytes.into()) => {
            Exchange::Rabenseifner
        }
        Between::Doubling => Exchange::Doubling,
        Between::Auto => {
            let m = ExchangeModel::from_config(c);
            let candidates = [
                (Exchange::Doubling, true),
                (Exchange::Rabenseifner, can_halve(engines, len, elem)),
                (Exchange::Multicast, true),
            ];
            cheapest(&candidates, |x| m.allreduce(x, engines, largest, len, elem))
        }
    }
}

/// A leader-based allgather's exchange on `engines` engines whose largest node part (its ranks'
/// blocks side by side) is `largest` bytes (`allgather_between`). Forced doubling or ring:
/// doubling or the ring on two engines — one swap either way — or below
/// `allgather_multicast_bytes` (a power of two of engines) or `allgather_fold_multicast_bytes`
/// (others); from there the parts' own broadcasts, pipelined by each engine as it receives,
/// outran the swaps: by 1.05–1.3× from 256 KiB node parts on 4 and 8 engines, and already at
/// 128 KiB by 1.15–1.7× on 3, 5, 6 and 7, where doubling's folds add two sequential transfers,
/// one of them the whole result (equal on 4 and 8; docs/performance.md, "Allgather between the
/// leaders", "The ring between the leaders"). `auto`: doubling or multicast by the model (the
/// ring, which needs its neighbours' pair communicators, only when set).
pub fn allgather(c: &EngineConfig, engines: u32, largest: u64) -> Exchange {
    let p = &c.protocol;
    let threshold = if engines.is_power_of_two() {
        p.allgather_multicast_bytes
    } else {
        p.allgather_fold_multicast_bytes
    };
    let point_to_point = engines == 2 || largest < u64::from(threshold);
    match p.allgather_between {
        AllgatherBetween::Doubling if point_to_point => Exchange::Doubling,
        AllgatherBetween::Ring if point_to_point => Exchange::Ring,
        AllgatherBetween::Auto => {
            let m = ExchangeModel::from_config(c);
            cheapest(&[(Exchange::Doubling, true), (Exchange::Multicast, true)], |x| {
                m.allgather(x, engines, largest)
            })
        }
        _ => Exchange::Multicast,
    }
}

/// An alltoall's exchange on `engines` engines holding `size` ranks (consecutive or not), the
/// largest engine `largest` of them, of `block`-byte blocks. Pairwise can run where every pair of
/// engines has a pair communicator (`pairwise_engines`) and a block fits a message
/// (`max_message_bytes`: a longer one fails `BadLength` by the multicast alltoall, one call,
/// not the communicator). Forced pairwise (`alltoall_between`) takes it where it can run and
/// either every engine holds one rank, or the exchange aggregates per node
/// ([`pairwise_aggregates`]), or the blocks have `alltoall_pairwise_bytes` or more: unaggregated
/// with several ranks per node, short blocks went faster by the multicast alltoall's one message
/// per node than by `ppn²` per pair of engines (2 × 2 at 8 B: 34 against 50–62 µs); aggregated,
/// the pairwise exchange was as fast at 8 B and 1.5–4× faster from 1–4 KiB —
/// docs/performance.md, "Pairwise alltoall". `auto`: pairwise where it can run and the model
/// predicts it no dearer than multicast.
pub fn alltoall(c: &EngineConfig, engines: u32, size: u32, largest: u32, block: u64) -> Exchange {
    let p = &c.protocol;
    let can = engines >= 2 && engines <= p.pairwise_engines && block <= u64::from(p.max_message_bytes);
    let aggregated = pairwise_aggregates(p, size, largest, block);
    let pairwise = match p.alltoall_between {
        AlltoallBetween::Multicast => false,
        AlltoallBetween::Pairwise => {
            can && (largest <= 1 || aggregated || block >= u64::from(p.alltoall_pairwise_bytes))
        }
        AlltoallBetween::Auto => {
            let m = ExchangeModel::from_config(c);
            let candidates = [(Exchange::Pairwise, can), (Exchange::Multicast, true)];
            cheapest(&candidates, |x| m.alltoall(x, engines, size, largest, block, aggregated))
                == Exchange::Pairwise
        }
    };
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
/// allgather whose every node part has that length; an alltoall of blocks of that length).
pub fn table(config: &EngineConfig) -> String {
    let c = &config.protocol;
    let m = &config.model;
    let mut s = format!(
        "\nbetween the engines (allreduce_between = {}, allgather_between = {}, alltoall_between = {}; auto: the cost model's cheapest with engine_cpus = {}, {} ns/B, {} ns/B reduced, {} ns/message, wake-up {} ns; forced doubling halves from {} B, forced doubling or ring multicasts from {} B node parts, {} B on engine counts not a power of two):\n",
        c.allreduce_between,
        c.allgather_between,
        c.alltoall_between,
        m.engine_cpus,
        m.engine_ns_per_byte,
        m.reduce_ns_per_byte,
        m.message_ns,
        m.wake_ns,
        c.allreduce_halving_bytes,
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
                let x = if what == "allreduce" {
                    allreduce(config, e, 1, len, 8)
                } else {
                    allgather(config, e, len)
                };
                let _ = write!(s, "  {:<12}", x.to_string());
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(
        s,
        "alltoall (pairwise up to {} engines; forced pairwise from {} B blocks with several ranks per engine unless aggregated):",
        c.pairwise_engines, c.alltoall_pairwise_bytes
    );
    for (ppn, label) in [(1, "1 rank"), (8, "8 ranks")] {
        for e in ENGINES {
            let _ = write!(s, "{e:>8}  {label:9}");
            for (len, _) in PARTS {
                let x = match alltoall(config, e, e * ppn, ppn, len) {
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
    // The predictions behind the choices, where the model chooses.
    let m = ExchangeModel::from_config(config);
    let engines = 8;
    let _ = writeln!(s, "predicted microseconds at {engines} engines of one rank (* = chosen with auto):");
    let _ = write!(s, "{:>23}", "");
    for (_, label) in PARTS {
        let _ = write!(s, "  {label:>11}");
    }
    let _ = writeln!(s);
    let rows = [
        ("allreduce", Exchange::Doubling),
        ("allreduce", Exchange::Rabenseifner),
        ("allreduce", Exchange::Multicast),
        ("allgather", Exchange::Doubling),
        ("allgather", Exchange::Multicast),
    ];
    let mut auto = config.clone();
    auto.protocol.allreduce_between = Between::Auto;
    auto.protocol.allgather_between = AllgatherBetween::Auto;
    for (what, x) in rows {
        let _ = write!(s, "{:>23}", format!("{what} {x}"));
        for (len, _) in PARTS {
            let (predicted, chosen) = if what == "allreduce" {
                (m.allreduce(x, engines, 1, len, 8), allreduce(&auto, engines, 1, len, 8))
            } else {
                (m.allgather(x, engines, len), allgather(&auto, engines, len))
            };
            let mark = if chosen == x { "*" } else { " " };
            let _ = write!(s, "  {:>10.1}{mark}", predicted / 1000.0);
        }
        let _ = writeln!(s);
    }
    s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forced(f: impl FnOnce(&mut ProtocolConfig)) -> EngineConfig {
        let mut c = EngineConfig::default();
        c.protocol.allreduce_between = Between::Doubling;
        c.protocol.allgather_between = AllgatherBetween::Doubling;
        c.protocol.alltoall_between = AlltoallBetween::Pairwise;
        f(&mut c.protocol);
        c
    }

    #[test]
    fn forced_settings_follow_their_thresholds() {
        let c = forced(|_| {});
        assert_eq!(allreduce(&c, 2, 1, 1 << 20, 8), Exchange::Doubling, "halving needs four engines");
        assert_eq!(allreduce(&c, 4, 1, 1 << 20, 8), Exchange::Rabenseifner);
        assert_eq!(allreduce(&c, 5, 1, 64 << 10, 8), Exchange::Doubling);
        assert_eq!(allgather(&c, 2, 4 << 20), Exchange::Doubling, "two engines: one swap");
        assert_eq!(allgather(&c, 4, (256 << 10) - 1), Exchange::Doubling);
        assert_eq!(allgather(&c, 4, 256 << 10), Exchange::Multicast);
        assert_eq!(allgather(&c, 5, (128 << 10) - 1), Exchange::Doubling);
        assert_eq!(allgather(&c, 5, 128 << 10), Exchange::Multicast, "a fold: multicast sooner");
        let c = forced(|p| {
            (p.allreduce_between, p.allgather_between) = (Between::Multicast, AllgatherBetween::Multicast)
        });
        assert_eq!(allreduce(&c, 8, 1, 1 << 20, 8), Exchange::Multicast);
        assert_eq!(allgather(&c, 2, 8), Exchange::Multicast);
        let c = forced(|p| p.allgather_between = AllgatherBetween::Ring);
        assert_eq!(allgather(&c, 5, 8), Exchange::Ring);
        assert_eq!(allgather(&c, 5, 128 << 10), Exchange::Multicast);
        let c = forced(|p| p.alltoall_between = AlltoallBetween::Multicast);
        assert_eq!(alltoall(&c, 4, 4, 1, 1 << 20), Exchange::Multicast);
        let mut c = forced(|_| {});
        assert_eq!(alltoall(&c, 16, 16, 1, 8), Exchange::Pairwise, "one rank per engine: always");
        assert_eq!(alltoall(&c, 4, 8, 2, 8), Exchange::Pairwise, "aggregated per node");
        let p = &mut c.protocol;
        assert!(pairwise_aggregates(p, 8, 2, 8));
        p.mtu = 4088; // shm's
        assert!(pairwise_aggregates(p, 8, 2, 16 << 10), "4 x 16 KiB: 17 fragments, eager");
        assert!(!pairwise_aggregates(p, 8, 2, 64 << 10), "4 x 64 KiB: a rendezvous; direct");
        assert!(pairwise_aggregates(p, 8, 4, 64 << 10), "four ranks per engine: always");
        assert!(!pairwise_aggregates(p, 4, 3, 8), "the staging would not fit: 3 + 1 ranks");
        assert_eq!(alltoall(&c, 2, 4, 3, 8), Exchange::Multicast, "short, unaggregated: multicast");
        assert_eq!(alltoall(&c, 2, 4, 3, 4096), Exchange::Pairwise);
        c.protocol.alltoall_aggregate = false;
        assert_eq!(alltoall(&c, 4, 8, 2, 8), Exchange::Multicast);
        assert_eq!(alltoall(&c, 4, 8, 2, 4096), Exchange::Pairwise);
        assert_eq!(alltoall(&c, 17, 17, 1, 8), Exchange::Multicast, "no pair communicator for every pair");
        assert_eq!(alltoall(&c, 1, 4, 4, 1 << 20), Exchange::Multicast);
        assert_eq!(alltoall(&c, 4, 4, 1, 8 << 20), Exchange::Multicast, "a block beyond a message");
        let t = table(&forced(|_| {}));
        assert!(t.contains("rabenseifner") && t.contains("multicast") && t.contains("doubling"), "{t}");
        assert!(t.contains("predicted microseconds") && t.contains('*'), "{t}");
    }
}
