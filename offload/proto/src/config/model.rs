//! The cost model's parameters: the fabric's (LogGP and the multicast switch), from which the
//! engine picks a broadcast algorithm per call (`crate::model::select`), and the engine's own
//! per-byte and per-message costs and CPUs, from which it picks how the engines exchange in an
//! allreduce, allgather or alltoall (`crate::model::exchange`).
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
        /// Cost model: engine time per byte sent or received.
        engine_ns_per_byte: f64 = 1.0, "RINGCAST_MODEL_ENGINE_NS_PER_BYTE",
            "cost model: engine CPU time per byte it sends or receives (CRC32C, the message MAC, its copies, the stores into host buffers) in nanoseconds; prices the exchanges between engines (1.0: fitted to this project's measurements on a 2-core machine, docs/protocol.md)";
        /// Cost model: engine time per byte reduced.
        reduce_ns_per_byte: f64 = 0.1, "RINGCAST_MODEL_REDUCE_NS_PER_BYTE",
            "cost model: engine CPU time per byte of a reduction's operand it combines in nanoseconds";
        /// Cost model: engine time per message.
        message_ns: f64 = 2000.0, "RINGCAST_MODEL_MESSAGE_NS",
            "cost model: engine CPU time per message sent or received beyond its datagrams (its slot, completion and synchronization) in nanoseconds";
        /// Cost model: CPUs the engines share.
        engine_cpus: u32 = 0, "RINGCAST_MODEL_ENGINE_CPUS",
            "cost model: CPUs the job's engines share (with their host processes, which the model does not count); 0: every engine has its own core (a DPU, a cluster node). ringcast run, ringcast bench and the MPI interposer set it to the machine's CPU count when they start every engine on one machine. Every engine of a job must have the same value";
        /// Cost model: a step's wait for a CPU.
        wake_ns: f64 = 5000.0, "RINGCAST_MODEL_WAKE_NS",
            "cost model, with more engines than engine_cpus: time a sequential step of an exchange waits for its engine to get a CPU in nanoseconds (5000: fitted to this project's measurements on a 2-core machine, where spinning and yielding pollers hand over in microseconds; a wake-up from sleep costs ~24 us)";
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
            ("engine_ns_per_byte", self.engine_ns_per_byte),
            ("reduce_ns_per_byte", self.reduce_ns_per_byte),
            ("message_ns", self.message_ns),
            ("wake_ns", self.wake_ns),
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
