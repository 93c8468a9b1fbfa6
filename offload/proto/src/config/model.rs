//! The cost model's fabric parameters (LogGP and the multicast switch), from which the engine
//! picks a broadcast algorithm per call (`crate::model::select`).
use super::{invalid, ConfigError};
use alloc::format;

crate::tunables! {
    /// The cost model (section `model`).
    pub struct ModelConfig in "model" {
        /// Cost model: inter-node latency.
        latency_ns: f64 = 1000.0, "RINGCAST_MODEL_LATENCY_NS",
            "cost model: LogGP L of the inter-node link, wire and switch latency of a datagram in nanoseconds";
        /// Cost model: per-datagram engine overhead.
        overhead_ns: f64 = 300.0, "RINGCAST_MODEL_OVERHEAD_NS",
            "cost model: LogGP o, engine time per datagram sent or received in nanoseconds";
        /// Cost model: time per byte on one lane.
        ns_per_byte: f64 = 0.08, "RINGCAST_MODEL_NS_PER_BYTE",
            "cost model: LogGP G, nanoseconds per byte on one NIC lane (0.08 = 100 Gb/s)";
        /// Cost model: NIC lanes per node.
        lanes: u32 = 1, "RINGCAST_MODEL_LANES",
            "cost model: NIC lanes per node (1..=8); aggregated sends use all, the binary and dual trees one per child";
        /// Cost model: extra latency of a multicast datagram.
        switch_ns: f64 = 200.0, "RINGCAST_MODEL_SWITCH_NS",
            "cost model: extra latency for the switch to replicate a multicast datagram in nanoseconds";
    }
}

impl ModelConfig {
    /// The model must see finite, non-negative times: a NaN would make every prediction NaN and
    /// the choice meaningless (though still deterministic).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("latency_ns", self.latency_ns),
            ("overhead_ns", self.overhead_ns),
            ("ns_per_byte", self.ns_per_byte),
            ("switch_ns", self.switch_ns),
        ] {
            if !v.is_finite() || v < 0.0 {
                return invalid(format!("model.{name} {v} is not a finite non-negative number"));
            }
        }
        if !(1..=8).contains(&self.lanes) {
            return invalid(format!("model.lanes {} outside 1..=8", self.lanes));
        }
        Ok(())
    }
}
