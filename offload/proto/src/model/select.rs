//! The per-call algorithm choice: the cheapest broadcast [`cost::predict`] finds for a call's
//! communicator size, message length and placement, unless the configuration forces one.
//!
//! Every rank of a communicator computes the choice on its own and they must agree, or ranks
//! would forward along different trees. So the choice depends only on values all ranks share
//! (the configuration, the communicator's size and layout, the message length, whether the
//! communicator's multicast group is up), the predictions use only correctly rounded `f64`
//! arithmetic (see [`cost`]), and ties go to the first algorithm in [`Algorithm::ALL`].
//!
//! [`Selector::table`] renders the decisions for a grid of sizes and lengths; `ringcast info`
//! prints it for the configuration in force.
use super::{cost, FabricModel, LogGp};
use crate::comm::Layout;
use crate::config::EngineConfig;
use crate::schedule::bcast::Algorithm;
use alloc::format;
use alloc::string::String;
use alloc::string::ToString;
use core::fmt::Write as _;

/// Communicator sizes of [`Selector::table`]'s rows.
pub const TABLE_RANKS: [u32; 10] = [2, 4, 8, 16, 32, 64, 128, 1024, 16384, 1 << 20];
/// Message lengths of [`Selector::table`]'s columns, with their labels.
pub const TABLE_BYTES: [(u64, &str); 5] =
    [(8, "8 B"), (1 << 10, "1 KiB"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (4 << 20, "4 MiB")];
/// Communicator size of [`Selector::table`]'s per-algorithm predictions.
pub const DETAIL_RANKS: u32 = 64;

/// Picks the broadcast algorithm per call (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    /// The fabric the predictions price.
    pub fabric: FabricModel,
    /// The algorithm every call uses, if the configuration forces one.
    pub forced: Option<Algorithm>,
    /// Payload bytes per fragment.
    pub payload: u32,
    /// Broadcasts sharing one delayed synchronization (multicast's amortised cost).
    pub channels: u32,
    /// Communicators smaller than this never multicast (the `small_comm` tunable).
    pub small_comm: u32,
}

/// The fabric the tunables describe: the inter-node class (`model_latency_ns`,
/// `model_overhead_ns`, `model_ns_per_byte`), `model_lanes` and `model_switch_ns`; the gap, the
/// intra-node class and the WAN latency are [`FabricModel::default_cluster`]'s, and the WAN
/// otherwise behaves like the inter-node link (as in the default cluster).
pub fn fabric_from_config(c: &EngineConfig) -> FabricModel {
    let base = FabricModel::default_cluster();
    let intra_site = LogGp {
        latency_ns: c.model.latency_ns,
        overhead_ns: c.model.overhead_ns,
        ns_per_byte: c.model.ns_per_byte,
        ..base.intra_site
    };
    FabricModel {
        intra_site,
        wan: LogGp { latency_ns: base.wan.latency_ns, ..intra_site },
        lanes: c.model.lanes,
        switch_ns: c.model.switch_ns,
        ..base
    }
}

/// Payload bytes of one fragment for a datagram size of `mtu` (0 if the MTU cannot hold one).
pub fn fragment_payload(mtu: u32) -> u32 {
    mtu.saturating_sub(cost::FRAME_OVERHEAD)
}

impl Selector {
    /// The selector the configuration describes.
    pub fn from_config(c: &EngineConfig) -> Self {
        Selector {
            fabric: fabric_from_config(c),
            forced: c.protocol.algorithm.forced(),
            payload: fragment_payload(c.protocol.mtu),
            channels: c.protocol.channels,
            small_comm: c.protocol.small_comm,
        }
    }

    /// Predicted time in nanoseconds of `alg` for this call (see [`cost::predict`]).
    pub fn predict(&self, alg: Algorithm, p: u32, bytes: u64, layout: &Layout) -> f64 {
        cost::predict(alg, p, bytes, layout, &self.fabric, self.payload, self.channels)
    }

    /// Whether the model may choose `alg` for `p` ranks placed as `layout`: multicast needs the
    /// group (`multicast_ok`) and at least `small_comm` ranks (below it, Hoefler's measured
    /// crossover, point-to-point wins in practice whatever the model says); the hierarchical
    /// algorithm needs nodes with several ranks, else it is a flat scatter and ring.
    pub fn applies(&self, alg: Algorithm, p: u32, layout: &Layout, multicast_ok: bool) -> bool {
        match alg {
            Algorithm::Multicast => multicast_ok && p >= 2 && p >= self.small_comm,
            Algorithm::Hierarchical => layout.ppn > 1,
            _ => true,
        }
    }

    /// The algorithm for a broadcast of `bytes` among `p` ranks placed as `layout`. A forced
    /// algorithm wins (a forced multicast only when `multicast_ok`: without a group it cannot
    /// run); up to 2 ranks every algorithm is one send, so linear; else the cheapest predicted
    /// among those that apply, ties to the first in [`Algorithm::ALL`].
    pub fn choose(&self, p: u32, bytes: u64, layout: &Layout, multicast_ok: bool) -> Algorithm {
        if let Some(a) = self.forced {
            if a != Algorithm::Multicast || multicast_ok {
                return a;
            }
        }
        if p <= 2 {
            return Algorithm::Linear;
        }
        let mut best = (Algorithm::Linear, f64::INFINITY);
        for alg in Algorithm::ALL {
            if !self.applies(alg, p, layout, multicast_ok) {
                continue;
            }
            // A NaN (only from hand-built parameters: validation refuses them) never wins.
            let t = self.predict(alg, p, bytes, layout);
            if t < best.1 {
                best = (alg, t);
            }
        }
        best.0
    }

    /// The decisions for [`TABLE_RANKS`] × [`TABLE_BYTES`] (multicast available), then the
    /// predicted microseconds of every algorithm at [`DETAIL_RANKS`] ranks (`*` the chosen one,
    /// `-` one that does not apply to this layout).
    pub fn table(&self, layout: &Layout) -> String {
        let mut s = String::new();
        let forced = match self.forced {
            Some(a) => format!("; forced: {a}"),
            None => String::new(),
        };
        let f = &self.fabric.intra_site;
        let _ = writeln!(
            s,
            "algorithm choice ({} rank(s) per node, {} placement, {} site(s); multicast available{forced})",
            layout.ppn.max(1),
            if layout.cyclic { "cyclic" } else { "block" },
            layout.sites.max(1),
        );
        let _ = write!(
            s,
            "model: L {} ns, o {} ns, G {} ns/B, {} lane(s), switch {} ns; ",
            f.latency_ns, f.overhead_ns, f.ns_per_byte, self.fabric.lanes, self.fabric.switch_ns,
        );
        let _ = writeln!(
            s,
            "payload {} B; {} channels; multicast from {} ranks",
            self.payload,
            self.channels,
            self.small_comm.max(2),
        );
        let _ = writeln!(s);
        let w = Algorithm::ALL.iter().map(|a| a.name().len()).max().unwrap_or(0);
        let _ = write!(s, "{:>8}", "ranks");
        for (_, label) in TABLE_BYTES {
            let _ = write!(s, "  {label:<w$}");
        }
        let _ = writeln!(s);
        for p in TABLE_RANKS {
            let _ = write!(s, "{p:>8}");
            for (bytes, _) in TABLE_BYTES {
                let _ = write!(s, "  {:<w$}", self.choose(p, bytes, layout, true).name());
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s, "\npredicted microseconds at {DETAIL_RANKS} ranks (* = chosen):");
        let _ = write!(s, "{:<w$}", "algorithm");
        for (_, label) in TABLE_BYTES {
            let _ = write!(s, "  {label:>11}");
        }
        let _ = writeln!(s);
        for alg in Algorithm::ALL {
            let _ = write!(s, "{:<w$}", alg.name());
            for (bytes, _) in TABLE_BYTES {
                let cell = if self.applies(alg, DETAIL_RANKS, layout, true) {
                    let mark = if self.choose(DETAIL_RANKS, bytes, layout, true) == alg { "*" } else { " " };
                    format!("{}{mark}", micros(self.predict(alg, DETAIL_RANKS, bytes, layout)))
                } else {
                    "- ".to_string()
                };
                let _ = write!(s, "  {cell:>11}");
            }
            let _ = writeln!(s);
        }
        // Cells are padded to align columns; the padding at the end of a line is noise.
        s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
    }
}

/// Nanoseconds as microseconds: one decimal below 1000 µs, none above (the table stays narrow).
fn micros(ns: f64) -> String {
    let us = ns / 1000.0;
    if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AlgorithmChoice;
    use std::string::ToString;

    fn selector() -> Selector {
        Selector::from_config(&EngineConfig::default())
    }

    #[test]
    fn defaults_describe_the_default_cluster() {
        let s = selector();
        assert_eq!(s.fabric, FabricModel::default_cluster());
        assert_eq!(s.payload, 1472 - 60, "MTU less header 32, trailer 12 and MAC 16");
        assert_eq!((s.channels, s.small_comm, s.forced), (16, 20, None));
    }

    #[test]
    fn tunables_build_the_fabric() {
        let env = [
            ("RINGCAST_ALGORITHM", "dual-tree"),
            ("RINGCAST_MODEL_LATENCY_NS", "1500"),
            ("RINGCAST_MODEL_OVERHEAD_NS", "120.5"),
            ("RINGCAST_MODEL_NS_PER_BYTE", "0.04"),
            ("RINGCAST_MODEL_LANES", "2"),
            ("RINGCAST_MODEL_SWITCH_NS", "0"),
            ("RINGCAST_MTU", "9000"),
        ];
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        let s = Selector::from_config(&EngineConfig::from_lookup(&get).unwrap());
        let lane = s.fabric.intra_site;
        assert_eq!((lane.latency_ns, lane.overhead_ns, lane.ns_per_byte), (1500.0, 120.5, 0.04));
        assert_eq!(s.fabric.wan, LogGp { latency_ns: 10_000_000.0, ..lane });
        assert_eq!((s.fabric.lanes, s.fabric.switch_ns, s.payload), (2, 0.0, 9000 - 60));
        assert_eq!(s.forced, Some(Algorithm::DualTree));
        assert_eq!(fragment_payload(10), 0);
    }

    #[test]
    fn a_forced_algorithm_wins() {
        let mut config = EngineConfig::default();
        config.protocol.algorithm = AlgorithmChoice::Fixed(Algorithm::Chain);
        let s = Selector::from_config(&config);
        for p in [0, 1, 2, 64, u32::MAX] {
            assert_eq!(s.choose(p, 1 << 20, &Layout::FLAT, true), Algorithm::Chain);
        }
        // A forced multicast needs the group; without one the model chooses.
        let s = Selector { forced: Some(Algorithm::Multicast), ..selector() };
        assert_eq!(s.choose(64, 8, &Layout::FLAT, true), Algorithm::Multicast);
        assert_ne!(s.choose(64, 8, &Layout::FLAT, false), Algorithm::Multicast);
    }

    #[test]
    fn tiny_communicators_are_linear() {
        let s = selector();
        for p in [0, 1, 2] {
            for bytes in [0, 8, u64::MAX] {
                assert_eq!(
                    s.choose(p, bytes, &Layout { ppn: 4, cyclic: false, sites: 2 }, true),
                    Algorithm::Linear
                );
            }
        }
    }

    #[test]
    fn multicast_and_hierarchical_only_where_they_apply() {
        let s = selector();
        let node8 = Layout { ppn: 8, cyclic: false, sites: 1 };
        for p in [3, 16, 19, 20, 64, 1 << 20] {
            for bytes in [8, 1 << 20] {
                for layout in [Layout::FLAT, node8] {
                    let without = s.choose(p, bytes, &layout, false);
                    assert_ne!(without, Algorithm::Multicast);
                    let with = s.choose(p, bytes, &layout, true);
                    if p < 20 {
                        assert_ne!(with, Algorithm::Multicast, "below small_comm");
                    }
                    if layout.ppn == 1 {
                        assert_ne!(with, Algorithm::Hierarchical);
                        assert_ne!(without, Algorithm::Hierarchical);
                    }
                }
            }
        }
        assert_eq!(s.choose(1024, 1 << 20, &node8, false), Algorithm::Hierarchical);
        let eager = Selector { small_comm: 2, ..selector() };
        assert_eq!(eager.choose(8, 8, &Layout::FLAT, true), Algorithm::Multicast);
    }

    #[test]
    fn the_choice_is_the_cheapest_applicable_first_on_ties() {
        let s = selector();
        let layouts = [
            Layout::FLAT,
            Layout { ppn: 8, cyclic: true, sites: 1 },
            Layout { ppn: 1, cyclic: false, sites: 2 },
        ];
        for layout in &layouts {
            // Up to 2 ranks the choice is linear by rule.
            for p in TABLE_RANKS.into_iter().filter(|&p| p > 2) {
                for (bytes, _) in TABLE_BYTES {
                    for ok in [false, true] {
                        let chosen = s.choose(p, bytes, layout, ok);
                        let t = s.predict(chosen, p, bytes, layout);
                        for alg in Algorithm::ALL.into_iter().filter(|&a| s.applies(a, p, layout, ok)) {
                            let u = s.predict(alg, p, bytes, layout);
                            assert!(t < u || (t == u && chosen <= alg) || alg == chosen, "{p} {bytes} {alg}");
                        }
                    }
                }
            }
        }
        // Binomial and scatter–allgather (one fragment: a binomial tree from the root) tie at
        // 32 ranks: binomial comes first.
        let t = |alg| s.predict(alg, 32, 8, &Layout::FLAT);
        assert_eq!(t(Algorithm::Binomial), t(Algorithm::ScatterAllgather));
        assert_eq!(s.choose(32, 8, &Layout::FLAT, false), Algorithm::Binomial);
    }

    #[test]
    fn small_messages_switch_to_multicast_near_hoefler_crossover() {
        let s = selector();
        let first =
            TABLE_RANKS.into_iter().find(|&p| s.choose(p, 8, &Layout::FLAT, true) == Algorithm::Multicast);
        assert!(matches!(first, Some(8..=64)), "{first:?}");
        // Large messages on one lane: the dual tree beats the binary tree (Chiba), multicast aside.
        assert_eq!(s.choose(64, 4 << 20, &Layout::FLAT, false), Algorithm::DualTree);
    }

    #[test]
    fn the_table_has_every_row_and_column() {
        let s = selector();
        let table = s.table(&Layout::FLAT);
        let lines: Vec<&str> = table.lines().collect();
        for p in TABLE_RANKS {
            let row = lines.iter().find(|l| l.split_whitespace().next() == Some(&p.to_string())).unwrap();
            let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
            assert_eq!(cells.len(), TABLE_BYTES.len(), "{row}");
            for (cell, (bytes, _)) in cells.iter().zip(TABLE_BYTES) {
                assert_eq!(Algorithm::from_name(cell), Some(s.choose(p, bytes, &Layout::FLAT, true)));
            }
        }
        for (_, label) in TABLE_BYTES {
            assert!(lines[3].contains(label));
        }
        for alg in Algorithm::ALL {
            assert!(lines.iter().any(|l| l.starts_with(alg.name())), "{alg}");
        }
        // Hierarchical does not apply to one rank per node; exactly one `*` per column.
        assert!(lines.iter().any(|l| l.starts_with("hierarchical") && l.contains('-')));
        assert_eq!(table.matches('*').count(), TABLE_BYTES.len() + 1);
        // A forced algorithm shows in the header and everywhere.
        let forced = Selector { forced: Some(Algorithm::Chain), ..selector() }.table(&Layout::FLAT);
        assert!(forced.contains("forced: chain"));
    }
}
