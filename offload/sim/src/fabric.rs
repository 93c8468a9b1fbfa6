//! The simulated fabric: discrete events in virtual time, delivering datagrams between
//! simulated engines with the faults of a [`Faults`] profile.
//!
//! Per datagram and receiver: latency (base + uniform jitter, so datagrams reorder), loss —
//! i.i.d. or bursty (a two-state Gilbert–Elliott channel per receiver) — bit corruption (caught
//! by the CRC), *sealed* corruption (a flipped payload byte with the CRC recomputed, which only
//! the end-to-end digest can catch), and duplication. Multicast loss and unicast loss are
//! separate knobs: the paper's model is an unreliable multicast over a reliable-ish point-to-point
//! network. The full LogGP performance model grows from here (issue 4).
use ringcast_proto::rng::SimRng;
use ringcast_proto::Nanos;

/// Fault and timing profile of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// One-way latency floor in nanoseconds.
    pub latency: Nanos,
    /// Uniform extra latency in `0..=jitter` nanoseconds (reorders datagrams).
    pub jitter: Nanos,
    /// Per-receiver probability that a multicast datagram is lost.
    pub mcast_loss: f64,
    /// Probability that a point-to-point datagram is lost.
    pub ucast_loss: f64,
    /// Bursty loss: probability of entering / leaving the bad state per datagram (0 = i.i.d.).
    pub burst_enter: f64,
    /// See `burst_enter`.
    pub burst_leave: f64,
    /// Probability a datagram has one bit flipped (the CRC drops it).
    pub corrupt: f64,
    /// Probability a datagram has a payload byte changed and its CRC recomputed.
    pub sealed_corrupt: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Drop exactly the `n`-th multicast datagram (1-based) to node `to` (targeted tests).
    pub drop_mcast: Option<(usize, u32)>,
}

impl Faults {
    /// No faults, 1 µs latency.
    pub fn clean() -> Self {
        Faults {
            latency: 1_000,
            jitter: 0,
            mcast_loss: 0.0,
            ucast_loss: 0.0,
            burst_enter: 0.0,
            burst_leave: 0.0,
            corrupt: 0.0,
            sealed_corrupt: 0.0,
            duplicate: 0.0,
            drop_mcast: None,
        }
    }
}

/// What a delivery does to a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
    /// Dropped.
    Lost,
    /// Delivered (`copies` times: 2 when duplicated) after `delay`.
    Deliver {
        /// Latency.
        delay: Nanos,
        /// 1 or 2.
        copies: u8,
    },
}

/// A datagram as [`Channel::fate`] sees it: shared bytes, copied only if it corrupts them —
/// most datagrams pass unaltered, and copying each for each receiver just in case cost the
/// simulator an allocation and a copy per delivery.
pub struct Probe<'a> {
    shared: &'a [u8],
    owned: Option<Vec<u8>>,
}

impl<'a> Probe<'a> {
    /// A probe of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Probe { shared: bytes, owned: None }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.owned.as_ref().map_or(self.shared.len(), Vec::len)
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes, copied first if they are still shared.
    pub fn to_mut(&mut self) -> &mut Vec<u8> {
        let shared = self.shared;
        self.owned.get_or_insert_with(|| shared.to_vec())
    }

    /// The altered copy, if it was altered.
    pub fn into_altered(self) -> Option<Vec<u8>> {
        self.owned
    }
}

/// Per-receiver burst state and the decision stream.
pub struct Channel {
    rng: SimRng,
    /// Per receiver: in the burst's bad state (made at the first decision of a bursty
    /// profile: a million receivers of a profile without bursts hold nothing).
    bad: Vec<bool>,
    nodes: usize,
}

impl Channel {
    /// A channel for `nodes` receivers.
    pub fn new(rng: SimRng, nodes: usize) -> Self {
        Channel { rng, bad: Vec::new(), nodes }
    }

    /// Decides one datagram's fate towards `to`, corrupting `frame` (a copy of it, made only
    /// then: [`Probe`]) if the profile says. A `frame` of no bytes is never corrupted (and
    /// draws no corruption decision).
    pub fn fate(
        &mut self,
        f: &Faults,
        to: usize,
        multicast: bool,
        frame: &mut Probe<'_>,
        crc: fn(&[u8]) -> u32,
    ) -> Fate {
        let mut loss = if multicast { f.mcast_loss } else { f.ucast_loss };
        if f.burst_enter > 0.0 {
            if self.bad.is_empty() {
                self.bad = vec![false; self.nodes];
            }
            let bad = &mut self.bad[to];
            *bad = if *bad { !self.rng.chance(f.burst_leave) } else { self.rng.chance(f.burst_enter) };
            // Bad state: mostly lost; good state: rarely.
            loss = if *bad { loss.max(0.9) } else { loss * 0.1 };
        }
        if self.rng.chance(loss) {
            return Fate::Lost;
        }
        let len = frame.len();
        if len != 0 && self.rng.chance(f.corrupt) {
            let bit = self.rng.below(len as u64 * 8);
            frame.to_mut()[(bit / 8) as usize] ^= 1 << (bit % 8);
        } else if len > 40 && self.rng.chance(f.sealed_corrupt) {
            // Change a byte behind the header, then re-seal: only the digest can tell.
            let at = 32 + self.rng.below(len as u64 - 36) as usize;
            let frame = frame.to_mut();
            frame[at] ^= 0x5a;
            let n = frame.len() - 4;
            let sum = crc(&frame[..n]).to_le_bytes();
            frame[n..].copy_from_slice(&sum);
        }
        let delay = f.latency + if f.jitter > 0 { self.rng.below(f.jitter + 1) } else { 0 };
        let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
        Fate::Deliver { delay, copies }
    }

    /// The decision stream (for other random choices of the fabric).
    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }
}
