//! The engine's counters as `COUNTERS` reports them: one table of names, kinds and meanings the
//! engine fills in and every reader (`ringcast stats`, its Prometheus export) prints from, so a
//! counter added here reaches every view at once.
//!
//! A reader asks `COUNTERS` with `a` = the first counter's index; the engine answers
//! `COUNTERS_OK` with `a` echoed, `b` = how many counters it has ([`COUNT`] of its build), and
//! the values of counters `a`, `a + 1`, `a + 2` in `c`, `d`, `e` (zero past the end). Indexes are
//! positions in [`ALL`]: new counters are appended, never inserted.

/// Whether a counter only grows (a rate makes sense) or says how things are now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Monotonic since the engine started.
    Total,
    /// A level now.
    Gauge,
}

/// One counter: its name (Prometheus-style, without the `ringcast_` prefix), kind and meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    pub name: &'static str,
    pub kind: CounterKind,
    pub help: &'static str,
}

const fn total(name: &'static str, help: &'static str) -> Counter {
    Counter { name, kind: CounterKind::Total, help }
}

const fn gauge(name: &'static str, help: &'static str) -> Counter {
    Counter { name, kind: CounterKind::Gauge, help }
}

/// Counters one `COUNTERS_OK` carries.
pub const PER_REPLY: u32 = 3;

/// Index of the first of the [`crate::frame::DropReason`] counters (one per reason, in code
/// order).
pub const DROPS_FIRST: usize = 17;

/// Every counter, in index order.
pub const ALL: [Counter; COUNT] = [
    // Hosts and descriptors (the intake).
    gauge("hosts_attached", "host processes attached now (a `ringcast stats` reader included)"),
    total("hosts_attached_total", "host processes that attached since start"),
    total("hosts_lost_total", "host processes that went away without detaching"),
    total("descriptors_ok_total", "descriptors completed ok"),
    total("descriptors_failed_total", "descriptors completed with an error status"),
    total("descriptors_dropped_total", "descriptors dead hosts left in their submission rings"),
    total("dma_bytes_total", "bytes moved between host memory and the engine by DMA"),
    // Collectives (summed over every broadcast, part or composed collective that ended).
    total("collectives_total", "collective operations that ended (broadcasts and composed ones)"),
    total("fragments_multicast_total", "fragments received by multicast"),
    total("fragments_repair_total", "fragments received by repair (point-to-point)"),
    total("penalty_rounds_total", "repair rounds operations needed"),
    // The fabric.
    total("fabric_sent_total", "datagrams handed to the fabric point-to-point"),
    total("fabric_multicast_total", "datagrams handed to the fabric by multicast"),
    total("fabric_received_total", "datagrams the fabric delivered"),
    total("fabric_overrun_total", "datagrams lost before the engine read them"),
    total("fabric_refused_total", "datagrams the fabric refused (over MTU, unknown member, malformed)"),
    // The protocol.
    total("sync_epochs_total", "synchronization epochs completed"),
    // DROPS_FIRST: one per DropReason, in code order.
    total("drops_too_short_total", "frames dropped: shorter than a header and trailer"),
    total("drops_bad_crc_total", "frames dropped: CRC32C mismatch (corrupted in flight)"),
    total("drops_bad_version_total", "frames dropped: another wire version"),
    total("drops_unknown_kind_total", "frames dropped: a kind this version does not define"),
    total("drops_bad_length_total", "frames dropped: body length wrong for the kind"),
    total("drops_bad_fragment_total", "frames dropped: inconsistent fragment fields"),
    total("drops_foreign_cookie_total", "frames dropped: no communicator here (another job's)"),
    total("drops_bid_out_of_window_total", "frames dropped: broadcast id stale or too far ahead"),
    total("drops_bad_rank_total", "frames dropped: sender not a member"),
    total("drops_no_slot_total", "frames dropped: no pre-posted slot for an early fragment"),
    total("drops_bad_tag_total", "frames dropped: keyed tag mismatch (forged or tampered)"),
    total("repair_frames_total", "repair datagrams sent"),
    total("repair_bytes_total", "repair payload bytes sent"),
    // Communicators.
    gauge("communicators", "communicators alive now (the world included)"),
    gauge("multicast_groups", "multicast groups the fabric has joined now"),
    total("communicators_created_total", "communicators created since start (the world included)"),
    total("communicators_dropped_total", "communicators dropped since start"),
    gauge("communicators_freeing", "communicators every local member freed, not settled yet"),
    total(
        "communicators_overdue_total",
        "communicators dropped unsettled, a peer timeout after their last local member freed them",
    ),
    // The per-byte ledger (`ringcast_proto::ledger`): payload bytes the engine and its fabric
    // copied, hashed and CRC'd, per side (send: a root's load and every frame out; receive:
    // every frame in and the store into the host), and the message bytes delivered per side.
    total(
        "ledger_send_copied_bytes_total",
        "payload bytes copied on the send side (DMA load, frame build, fabric send)",
    ),
    total(
        "ledger_receive_copied_bytes_total",
        "payload bytes copied on the receive side (fabric receive, channel, DMA store)",
    ),
    total("ledger_send_hashed_bytes_total", "message bytes the root side fed to the message MAC"),
    total("ledger_receive_hashed_bytes_total", "message bytes the receive side fed to the message MAC"),
    total("ledger_send_crc_bytes_total", "datagram bytes CRC32C computed over on the send side"),
    total("ledger_receive_crc_bytes_total", "datagram bytes CRC32C checked on the receive side"),
    total(
        "ledger_send_delivered_bytes_total",
        "message bytes loaded as a root (the send side's delivered bytes)",
    ),
    total("ledger_receive_delivered_bytes_total", "message bytes a receiver delivered ok"),
    // The outbox.
    total(
        "frames_unsent_total",
        "frames dropped unsent: their broadcast ended or failed before the fabric took them",
    ),
];

/// Index of the first of the ledger's counters (send then receive, for copied, hashed, CRC'd
/// and delivered bytes, in that order).
pub const LEDGER_FIRST: usize = 36;

/// Number of counters.
pub const COUNT: usize = 45;

/// Index of counter `name`, if this build has it.
pub fn index_of(name: &str) -> Option<usize> {
    ALL.iter().position(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::DropReason;
    extern crate std;
    use std::format;
    use std::string::String;

    #[test]
    fn names_are_unique_and_the_drop_counters_follow_the_reasons() {
        for (i, c) in ALL.iter().enumerate() {
            assert_eq!(index_of(c.name), Some(i), "{} twice", c.name);
            assert!(c.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}", c.name);
            assert_eq!(c.kind == CounterKind::Total, c.name.ends_with("_total"), "{}", c.name);
        }
        for r in DropReason::ALL {
            let c = ALL[DROPS_FIRST + r as usize];
            let words = format!("{r:?}").chars().fold(String::new(), |mut s, ch| {
                if ch.is_uppercase() && !s.is_empty() {
                    s.push('_');
                }
                s.push(ch.to_ascii_lowercase());
                s
            });
            assert_eq!(c.name, format!("drops_{words}_total"), "{r:?}");
        }
    }
}
