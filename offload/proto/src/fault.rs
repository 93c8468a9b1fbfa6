//! Fault injection for every fabric, in release builds, through tunables (`RINGCAST_FAULT_*`):
//! drop, corrupt, duplicate, reorder and delay datagrams, per direction and per frame kind — so a
//! user can rehearse loss on a real cluster, not only in the simulator.
//!
//! Its owner — the engine's one wrapper around whichever fabric runs
//! (`ringcast_offload::fabric::faulty`), or the simulator — calls [`FaultInjector::on_datagram`]
//! for each datagram sent (`Tx`) or received (`Rx`) and does what the [`Verdict`] says; held
//! (reordered or delayed) datagrams come back from [`FaultInjector::release`]. With every rate at zero, [`FaultInjector::from_config`]
//! returns `None` and a fabric pays nothing.
//!
//! The injector draws from a generator of its own ([`SimRng`]), seeded by `fault.seed` or, when
//! that is 0, by a seed its owner hands it: nothing here reads the pid or the clock.
use crate::config::{invalid, ConfigError};
use crate::rng::SimRng;
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

/// Which direction a datagram travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Being sent.
    Tx,
    /// Being received.
    Rx,
}

/// Directions the injector acts on (`RINGCAST_FAULT_DIRECTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultDirection {
    /// Outgoing only.
    Tx,
    /// Incoming only.
    Rx,
    /// Both.
    Both,
}

impl FromStr for FaultDirection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tx" => Ok(FaultDirection::Tx),
            "rx" => Ok(FaultDirection::Rx),
            "both" => Ok(FaultDirection::Both),
            _ => Err(format!("expected tx, rx or both, got {s:?}")),
        }
    }
}

impl fmt::Display for FaultDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultDirection::Tx => "tx",
            FaultDirection::Rx => "rx",
            FaultDirection::Both => "both",
        })
    }
}

/// Frame kinds the injector acts on (`RINGCAST_FAULT_KINDS`): a comma list of `mcast`,
/// `repair`, `ready`, `sync`, `retransmit`, `shape` (`CALL_SHAPE`), or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameKinds(u8);

const KIND_NAMES: [(&str, u8); 6] =
    [("mcast", 1), ("repair", 2), ("ready", 3), ("sync", 4), ("retransmit", 6), ("shape", 7)];

impl FrameKinds {
    /// Every kind.
    pub const ALL: FrameKinds = FrameKinds(0xff);

    fn bit(kind: u8) -> u8 {
        match kind {
            1 => 1,
            2 => 2,
            3 => 4,
            4 | 5 => 8,
            6 => 16,
            7 => 64,
            _ => 32, // anything else (garbage) counts as its own kind, included in `all`
        }
    }

    /// Whether a frame whose kind byte is `kind` is covered.
    pub fn covers(self, kind: u8) -> bool {
        self.0 & Self::bit(kind) != 0
    }
}

impl FromStr for FrameKinds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(FrameKinds::ALL);
        }
        let mut bits = 0;
        for part in s.split(',').map(str::trim) {
            let Some(&(_, kind)) = KIND_NAMES.iter().find(|(n, _)| *n == part) else {
                return Err(format!(
                    "unknown frame kind {part:?} (mcast, repair, ready, sync, retransmit, shape, all)"
                ));
            };
            bits |= Self::bit(kind);
        }
        Ok(FrameKinds(bits))
    }
}

impl fmt::Display for FrameKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == FrameKinds::ALL {
            return f.write_str("all");
        }
        let names: Vec<&str> =
            KIND_NAMES.iter().filter(|(_, k)| self.0 & Self::bit(*k) != 0).map(|(n, _)| *n).collect();
        f.write_str(&names.join(","))
    }
}

crate::tunables! {
    /// Fault injection on a fabric (section `fault`).
    pub struct FaultConfig in "fault" {
        /// Injected datagram loss.
        drop: f64 = 0.0, "RINGCAST_FAULT_DROP",
            "fault injection (release builds, every fabric): probability a datagram is dropped";
        /// Injected bit corruption.
        corrupt: f64 = 0.0, "RINGCAST_FAULT_CORRUPT",
            "fault injection: probability a datagram gets one bit flipped (the CRC catches it)";
        /// Injected duplication.
        duplicate: f64 = 0.0, "RINGCAST_FAULT_DUPLICATE",
            "fault injection: probability a datagram is delivered twice";
        /// Injected reordering.
        reorder: f64 = 0.0, "RINGCAST_FAULT_REORDER",
            "fault injection: probability a datagram is held back so later ones overtake it";
        /// Injected delay.
        delay_us: u32 = 0, "RINGCAST_FAULT_DELAY_US",
            "fault injection: extra delay of every affected datagram in microseconds";
        /// Direction of the injected faults.
        direction: crate::fault::FaultDirection = crate::fault::FaultDirection::Both, "RINGCAST_FAULT_DIRECTION",
            "fault injection: tx, rx or both";
        /// Frame kinds the faults hit.
        kinds: crate::fault::FrameKinds = crate::fault::FrameKinds::ALL, "RINGCAST_FAULT_KINDS",
            "fault injection: comma list of mcast, repair, ready, sync, retransmit, shape, or all";
        /// Seed of the injected faults.
        seed: u64 = 0, "RINGCAST_FAULT_SEED",
            "fault injection: seed (0 = from the process id), so a rehearsal can be repeated";
    }
}

impl FaultConfig {
    /// Every rate must be a probability.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, p) in [
            ("drop", self.drop),
            ("corrupt", self.corrupt),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return invalid(format!("fault.{name} {p} is not a probability in 0..=1"));
            }
        }
        Ok(())
    }

    /// Whether any fault is asked for.
    pub fn active(&self) -> bool {
        self.drop > 0.0
            || self.corrupt > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
            || self.delay_us > 0
    }
}

/// What to do with one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pass it on (possibly corrupted in place).
    Pass,
    /// Drop it.
    Drop,
    /// Pass it on twice.
    Duplicate,
    /// Hold it; it comes back from [`FaultInjector::release`].
    Held,
}

/// The injector of one fabric endpoint.
#[derive(Debug)]
pub struct FaultInjector {
    drop: f64,
    corrupt: f64,
    duplicate: f64,
    reorder: f64,
    delay: Nanos,
    direction: FaultDirection,
    kinds: FrameKinds,
    rng: SimRng,
    held: VecDeque<(Nanos, Vec<u8>)>,
    /// Datagrams dropped, corrupted, duplicated, held.
    pub counts: [u64; 4],
}

/// Datagrams one injector holds at most (beyond, they pass at once: bounded memory).
pub const MAX_HELD: usize = 256;

impl FaultInjector {
    /// An injector per `c`, or `None` when every rate is zero; it draws from `c.seed`, or from
    /// `fallback_seed` when that is 0 (a fabric hands it one that differs between processes).
    pub fn from_config(c: &FaultConfig, fallback_seed: u64) -> Option<Self> {
        c.active().then(|| FaultInjector {
            drop: c.drop,
            corrupt: c.corrupt,
            duplicate: c.duplicate,
            reorder: c.reorder,
            delay: c.delay_us as Nanos * 1000,
            direction: c.direction,
            kinds: c.kinds,
            rng: SimRng::new(if c.seed != 0 { c.seed } else { fallback_seed }),
            held: VecDeque::with_capacity(MAX_HELD),
            counts: [0; 4],
        })
    }

    /// Decides the fate of `frame` travelling in `dir` at `now`; may corrupt it in place.
    pub fn on_datagram(&mut self, dir: Dir, frame: &mut [u8], now: Nanos) -> Verdict {
        let dir_ok = matches!(
            (self.direction, dir),
            (FaultDirection::Both, _) | (FaultDirection::Tx, Dir::Tx) | (FaultDirection::Rx, Dir::Rx)
        );
        let kind = frame.get(1).copied().unwrap_or(0);
        if !dir_ok || !self.kinds.covers(kind) {
            return Verdict::Pass;
        }
        if self.rng.chance(self.drop) {
            self.counts[0] += 1;
            return Verdict::Drop;
        }
        if !frame.is_empty() && self.rng.chance(self.corrupt) {
            let bit = self.rng.below(frame.len() as u64 * 8);
            frame[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.counts[1] += 1;
        }
        let reorder = self.rng.chance(self.reorder);
        if (self.delay > 0 || reorder) && self.held.len() < MAX_HELD {
            // A reordered datagram waits one extra delay quantum (at least 1 µs) so later ones
            // overtake it.
            let wait = self.delay + if reorder { self.delay.max(1_000) } else { 0 };
            self.held.push_back((now + wait, frame.to_vec()));
            self.counts[3] += 1;
            return Verdict::Held;
        }
        if self.rng.chance(self.duplicate) {
            self.counts[2] += 1;
            return Verdict::Duplicate;
        }
        Verdict::Pass
    }

    /// A held datagram whose time has come, if any.
    pub fn release(&mut self, now: Nanos) -> Option<Vec<u8>> {
        let i = self.held.iter().position(|(at, _)| *at <= now)?;
        self.held.remove(i).map(|(_, f)| f)
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<Nanos> {
        self.held.iter().map(|(at, _)| *at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::string::ToString;
    use std::vec;

    fn cfg(f: impl FnOnce(&mut FaultConfig)) -> FaultConfig {
        let mut c = FaultConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn off_by_default_and_parsed_from_the_environment() {
        assert!(FaultInjector::from_config(&FaultConfig::default(), 1).is_none());
        let env = |k: &str| match k {
            "RINGCAST_FAULT_DROP" => Some("0.25".to_string()),
            "RINGCAST_FAULT_KINDS" => Some("mcast,sync".to_string()),
            "RINGCAST_FAULT_DIRECTION" => Some("rx".to_string()),
            _ => None,
        };
        let c = FaultConfig::from_lookup(&env).unwrap();
        assert_eq!(
            (c.drop, c.direction, c.kinds.to_string().as_str()),
            (0.25, FaultDirection::Rx, "mcast,sync")
        );
        assert!(FaultInjector::from_config(&c, 1).is_some());
        assert!(FaultConfig::from_lookup(&|k| (k == "RINGCAST_FAULT_KINDS").then(|| "bogus".into())).is_err());
        assert!(FaultConfig::from_lookup(&|k| (k == "RINGCAST_FAULT_DROP").then(|| "2".into())).is_err());
    }

    #[test]
    fn drops_at_the_rate_only_in_its_direction_and_kinds() {
        let c = cfg(|c| {
            c.drop = 0.3;
            c.kinds = "mcast".parse().unwrap();
            c.direction = FaultDirection::Rx;
            c.seed = 9;
        });
        let mut inj = FaultInjector::from_config(&c, 1).unwrap();
        let mut mcast = [1u8, 1, 0, 0];
        let mut repair = [1u8, 2, 0, 0];
        let n = 20_000;
        let dropped = (0..n).filter(|_| inj.on_datagram(Dir::Rx, &mut mcast, 0) == Verdict::Drop).count();
        assert!((5_400..6_600).contains(&dropped), "{dropped} of {n} at 30 %");
        assert!((0..n).all(|_| inj.on_datagram(Dir::Tx, &mut mcast, 0) == Verdict::Pass), "tx untouched");
        assert!(
            (0..n).all(|_| inj.on_datagram(Dir::Rx, &mut repair, 0) == Verdict::Pass),
            "repair untouched"
        );
    }

    #[test]
    fn corrupts_duplicates_and_delays() {
        let mut inj = FaultInjector::from_config(
            &cfg(|c| {
                c.corrupt = 1.0;
                c.seed = 3;
            }),
            1,
        )
        .unwrap();
        let mut f = [0u8; 64];
        f[1] = 1;
        assert_eq!(inj.on_datagram(Dir::Tx, &mut f, 0), Verdict::Pass);
        assert_eq!(
            f.iter().map(|b| b.count_ones()).sum::<u32>(),
            1 + 1,
            "one bit flipped (kind byte has one)"
        );
        let mut dup = FaultInjector::from_config(&cfg(|c| c.duplicate = 1.0), 1).unwrap();
        assert_eq!(dup.on_datagram(Dir::Tx, &mut [0u8, 2], 0), Verdict::Duplicate);
        let mut delay = FaultInjector::from_config(&cfg(|c| c.delay_us = 10), 1).unwrap();
        assert_eq!(delay.on_datagram(Dir::Tx, &mut [7u8, 2], 0), Verdict::Held);
        assert_eq!(delay.next_release(), Some(10_000));
        assert_eq!(delay.release(9_999), None);
        assert_eq!(delay.release(10_000), Some(vec![7u8, 2]));
    }
}
