//! The per-byte ledger: how many payload bytes the engine copied, hashed (the message MAC) and
//! CRC'd, per side, against the bytes it delivered — so that "each byte moved once per side"
//! is a number anyone can read (`ringcast stats`, `engine_stream`), not a claim (issue 40).
//!
//! Contract: every site that copies, MACs or CRCs a broadcast's payload calls this ledger with
//! the bytes it touched *at the site*, in the same pass that touches them — the protocol's
//! channel writes and frame builds, the DMA jobs it sees completed (host ↔ engine memory), and
//! each fabric's own copies (ring slot, multicast log, socket, mbuf). Nothing is estimated from
//! sizes elsewhere. A site that stops copying stops counting, so removing a copy shows.
//!
//! The side is the direction of the bytes at this engine: [`Side::Send`] for bytes on their
//! way out (a root's load, its frame builds, the fabric's sends — and a receiver's forwards and
//! repairs, which are sends too), [`Side::Receive`] for bytes coming in (the fabric's receives,
//! the channel write, the store into the host). In a two-rank broadcast that is exactly the
//! root and the receiver. Counts are monotonic `u64`s, `Copy`, no allocation: cheap enough for
//! the hot path (one add per site per datagram).
//!
//! Per delivered byte: [`Ledger::delivered`] counts the message bytes a root loaded
//! ([`Side::Send`]) and a receiver completed `Ok` ([`Side::Receive`]); [`Ledger::per_byte`]
//! divides. The fabric's copies are counted by the fabric (`Fabric::ledger` in the engine
//! crate) and added to the protocol's with [`Ledger::absorb`].

/// Which way the bytes move at this engine (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Out: a root's load and sends, anyone's forwards and repairs, the fabric's sends.
    Send = 0,
    /// In: the fabric's receives, the channel write, the store into the host buffer.
    Receive = 1,
}

impl Side {
    /// Both sides, in index order.
    pub const ALL: [Side; 2] = [Side::Send, Side::Receive];
}

/// Payload bytes touched per side (monotonic). See the module doc for what each site counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    copied: [u64; 2],
    hashed: [u64; 2],
    crcd: [u64; 2],
    delivered: [u64; 2],
}

/// What one side's counts are per delivered byte ([`Ledger::per_byte`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerByte {
    /// Payload copies per delivered byte.
    pub copies: f64,
    /// MAC (keyed BLAKE3) passes per delivered byte.
    pub hashed: f64,
    /// CRC32C passes per delivered byte.
    pub crcd: f64,
}

impl Ledger {
    /// `n` bytes copied on `side` (a memcpy, a DMA job, a kernel copy in a system call).
    pub fn copied(&mut self, side: Side, n: u64) {
        self.copied[side as usize] += n;
    }

    /// `n` bytes fed to the message MAC on `side`.
    pub fn hashed(&mut self, side: Side, n: u64) {
        self.hashed[side as usize] += n;
    }

    /// `n` bytes run through CRC32C on `side` (computed at a send, checked at a receive).
    pub fn crcd(&mut self, side: Side, n: u64) {
        self.crcd[side as usize] += n;
    }

    /// `n` message bytes delivered on `side`: loaded by a root, completed `Ok` at a receiver.
    pub fn delivered(&mut self, side: Side, n: u64) {
        self.delivered[side as usize] += n;
    }

    /// Bytes copied on `side` so far.
    pub fn copied_bytes(&self, side: Side) -> u64 {
        self.copied[side as usize]
    }

    /// Bytes hashed on `side` so far.
    pub fn hashed_bytes(&self, side: Side) -> u64 {
        self.hashed[side as usize]
    }

    /// Bytes CRC'd on `side` so far.
    pub fn crcd_bytes(&self, side: Side) -> u64 {
        self.crcd[side as usize]
    }

    /// Bytes delivered on `side` so far.
    pub fn delivered_bytes(&self, side: Side) -> u64 {
        self.delivered[side as usize]
    }

    /// Adds another ledger's counts (the fabric's to the protocol's).
    pub fn absorb(&mut self, other: &Ledger) {
        for s in 0..2 {
            self.copied[s] += other.copied[s];
            self.hashed[s] += other.hashed[s];
            self.crcd[s] += other.crcd[s];
            self.delivered[s] += other.delivered[s];
        }
    }

    /// `side`'s counts per delivered byte (zeros before anything was delivered).
    pub fn per_byte(&self, side: Side) -> PerByte {
        let d = self.delivered[side as usize];
        if d == 0 {
            return PerByte::default();
        }
        let r = |n: u64| n as f64 / d as f64;
        let s = side as usize;
        PerByte { copies: r(self.copied[s]), hashed: r(self.hashed[s]), crcd: r(self.crcd[s]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_count_apart_and_absorb_adds() {
        let mut a = Ledger::default();
        a.copied(Side::Send, 10);
        a.copied(Side::Receive, 3);
        a.hashed(Side::Receive, 7);
        a.crcd(Side::Send, 5);
        a.delivered(Side::Send, 5);
        assert_eq!((a.copied_bytes(Side::Send), a.copied_bytes(Side::Receive)), (10, 3));
        assert_eq!((a.hashed_bytes(Side::Send), a.hashed_bytes(Side::Receive)), (0, 7));
        let mut b = a;
        b.absorb(&a);
        assert_eq!(b.copied_bytes(Side::Send), 20);
        assert_eq!(b.crcd_bytes(Side::Send), 10);
        assert_eq!(a.per_byte(Side::Send), PerByte { copies: 2.0, hashed: 0.0, crcd: 1.0 });
        assert_eq!(a.per_byte(Side::Receive), PerByte::default(), "nothing delivered: zeros");
    }
}
