//! Fixed capacities: the engine's tables are sized from these once, at start, and never grow.
use super::{invalid, ConfigError};
use alloc::format;

crate::tunables! {
    /// Capacities and size limits (section `limits`).
    pub struct Limits in "limits" {
        /// Entries in each host's submission ring and in its completion ring.
        ring_entries: u32 = 256, "RINGCAST_RING_ENTRIES",
            "entries in each host's submission and completion ring (power of two, 2..=max_ring_entries)";
        /// Largest ring a host may ask for at attach.
        max_ring_entries: u32 = 16384, "RINGCAST_MAX_RING_ENTRIES",
            "largest ring a host may request at attach";
        /// Host processes one engine serves at once.
        max_hosts: u32 = 64, "RINGCAST_MAX_HOSTS",
            "host processes one engine serves at once";
        /// Registered regions per host.
        max_regions: u32 = 256, "RINGCAST_MAX_REGIONS",
            "registered memory regions per host process";
        /// Largest single registered region.
        max_region_bytes: u64 = 1 << 36, "RINGCAST_MAX_REGION_BYTES",
            "largest registered region in bytes (default 64 GiB)";
        /// Shared memory one host may have the engine map.
        max_host_bytes: u64 = 1 << 36, "RINGCAST_MAX_HOST_BYTES",
            "shared memory (sum of distinct segment sizes) one host may have the engine map (default 64 GiB); bounds the engine's address space, and the pages its DMA faults in, per host";
        /// Largest byte count one descriptor may name.
        max_op_bytes: u64 = 1 << 30, "RINGCAST_MAX_OP_BYTES",
            "largest byte count of one descriptor; above it the descriptor completes with BadLength";
        /// DMA bytes per host per pass.
        dma_pass_bytes: u64 = 1 << 20, "RINGCAST_DMA_PASS_BYTES",
            "DMA bytes moved for one host per polling pass; a larger copy continues in later passes so other hosts and control traffic are never stalled";
        /// Communicators per engine.
        max_comms: u32 = 64, "RINGCAST_MAX_COMMS",
            "communicators one engine serves at once";
        /// Engine memory one reduction stages at once.
        reduce_staging_bytes: u64 = 512 << 10, "RINGCAST_REDUCE_STAGING_BYTES",
            "engine memory one reduction holds at once: its blocks are loaded, reduced and stored a slice of each at a time, blocks x slice within this (at least one element of each block); small enough to stay in a cache, independent of the message";
    }
}

impl Limits {
    /// Checks the section's values against each other and against the ABI's hard limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.ring_entries.is_power_of_two() || self.ring_entries < 2 {
            return invalid(format!("ring_entries {} is not a power of two >= 2", self.ring_entries));
        }
        if !self.max_ring_entries.is_power_of_two() || self.max_ring_entries > 1 << 20 {
            return invalid(format!(
                "max_ring_entries {} is not a power of two <= 2^20",
                self.max_ring_entries
            ));
        }
        if self.ring_entries > self.max_ring_entries {
            return invalid(format!(
                "ring_entries {} > max_ring_entries {}",
                self.ring_entries, self.max_ring_entries
            ));
        }
        if self.max_hosts == 0 || self.max_hosts > 4096 {
            return invalid(format!("max_hosts {} outside 1..=4096", self.max_hosts));
        }
        // Region keys carry the slot in 16 bits (see intake::regions).
        if self.max_regions == 0 || self.max_regions > u16::MAX as u32 {
            return invalid(format!("max_regions {} outside 1..=65535", self.max_regions));
        }
        if self.max_op_bytes == 0 || self.max_region_bytes == 0 || self.max_host_bytes == 0 {
            return invalid("max_op_bytes, max_region_bytes and max_host_bytes must be positive".into());
        }
        if self.dma_pass_bytes < 4096 {
            return invalid(format!("dma_pass_bytes {} is below 4096", self.dma_pass_bytes));
        }
        if self.reduce_staging_bytes < 64 {
            return invalid(format!("reduce_staging_bytes {} is below 64", self.reduce_staging_bytes));
        }
        if self.max_comms == 0 {
            return invalid("max_comms must be positive".into());
        }
        Ok(())
    }
}
