//! Frame authentication: the keys a communicator's secret yields, the per-frame tag and the
//! message MAC (docs/protocol.md, "Integrity and authenticity").
//!
//! Why: the CRC32C of every datagram and a digest of the message detect noise, not an
//! adversary. Anyone who can see a communicator's traffic (root on a host, any machine on the
//! same bridge) learns its cookie and can recompute an unkeyed CRC, so forged fragments for
//! coming broadcasts would be delivered as a successful broadcast. Every communicator therefore
//! has a 32-byte secret, drawn from the CSPRNG at creation and handed to its members with its
//! identity, never on the wire. Two keys are derived from it (BLAKE3 `derive_key`, one context
//! string each, so neither key reveals the other):
//! * the **tag key**: SipHash-2-4 (a PRF made for short inputs) over the frame's header and, but
//!   for data frames, its body — 8 bytes in every frame's trailer. A frame whose tag does not
//!   match is dropped (`DropReason::BadTag`) before anything in it is believed: a forger without
//!   the key gets nothing but a drop counter moved, and the genuine broadcast goes on;
//! * the **MAC key**: keyed BLAKE3 over (broadcast id, length and call context, calls the
//!   posting process skipped, message),
//!   truncated to 128 bits —
//!   the message MAC the last fragment carries, checked after reassembly before delivery. It
//!   covers the payload bytes the per-frame tag leaves out (so a fragment costs one short
//!   SipHash per hop, and the bulk of the bytes one BLAKE3 pass per message, which runs at
//!   several GB/s): a payload replaced in flight ends in `DigestMismatch`, never in wrong bytes.
//!
//! Comparisons are constant-time. No clock, no I/O: pure functions of the key and the bytes.
use core::hash::Hasher;
use ringcast_abi::frame::DIGEST_LEN;
use siphasher::sip::SipHasher24;

/// Bytes of a communicator's secret.
pub const SECRET_LEN: usize = ringcast_abi::COMM_KEY_LEN;

/// A communicator's secret (32 bytes from the CSPRNG). Its `Debug` prints no key material.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Secret(pub [u8; SECRET_LEN]);

impl core::fmt::Debug for Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The message MAC a last fragment carries.
pub type Mac = [u8; DIGEST_LEN];

/// The keys derived from one communicator's secret.
#[derive(Clone)]
pub struct CommKeys {
    /// SipHash-2-4 keyed with the tag key, cloned per frame (the key schedule is done once).
    tag: SipHasher24,
    mac: [u8; 32],
}

impl core::fmt::Debug for CommKeys {
    // Never print key material (state dumps of failing DST seeds print communicators).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CommKeys(..)")
    }
}

impl CommKeys {
    /// Derives the tag and MAC keys from `secret`.
    pub fn new(secret: &Secret) -> CommKeys {
        let t = blake3::derive_key("ringcast 2026 frame tag (SipHash-2-4)", &secret.0);
        let mac = blake3::derive_key("ringcast 2026 message MAC (BLAKE3)", &secret.0);
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&t[i..i + 8]);
            u64::from_le_bytes(w)
        };
        CommKeys { tag: SipHasher24::new_with_keys(word(0), word(8)), mac }
    }

    /// The tag of `span` (a frame's [`ringcast_abi::frame::tag_span`]).
    pub fn tag(&self, span: &[u8]) -> u64 {
        let mut h = self.tag;
        h.write(span);
        h.finish()
    }

    /// Whether `tag` is the tag of `span` (constant-time in the value compared).
    pub fn tag_ok(&self, span: &[u8], tag: u64) -> bool {
        ct_eq(&self.tag(span).to_le_bytes(), &tag.to_le_bytes())
    }

    /// The MAC of broadcast `bid`'s `message`.
    pub fn message_mac(&self, bid: u32, message: &[u8]) -> Mac {
        let mut m = self.mac_state(bid, message.len() as u64);
        m.update(message);
        m.finish()
    }

    /// Whether `mac` is broadcast `bid`'s MAC of `message` (constant-time in the value compared).
    pub fn mac_ok(&self, bid: u32, message: &[u8], mac: &Mac) -> bool {
        ct_eq(&self.message_mac(bid, message), mac)
    }

    /// The MAC of broadcast `bid`'s message of `len` bytes, computed as its bytes come in
    /// order ([`MacState::update`]): a receiver hashes what it holds while the rest is still on
    /// its way, instead of one pass over the whole message at the end.
    /// BLAKE3 hashes large updates in power-of-two subtrees of 1 KiB chunks, SIMD-parallel, when
    /// they start on such a boundary of its input: updates that end at `k · 2ⁿ KiB −`
    /// [`MAC_PREFIX`] bytes of the message keep it on them.
    pub fn mac_state(&self, bid: u32, len: u64) -> MacState {
        self.mac_state_in(bid, len, 0)
    }

    /// [`CommKeys::mac_state`] of a message posted in `context`
    /// ([`crate::transfer::protocol::Post::context`]): its low half — what the call is, beyond a
    /// broadcast, and the posting process's leader-based calls exchanged by multicast
    /// (`engine/node/sequencer.rs`) — folded into the upper half of the hashed length (messages are
    /// below 4 GiB),
    /// its high half — the calls the posting process skipped on the communicator — hashed after
    /// it. Context 0 is a plain broadcast's MAC.
    pub fn mac_state_in(&self, bid: u32, len: u64, context: u64) -> MacState {
        let mut h = blake3::Hasher::new_keyed(&self.mac);
        h.update(&bid.to_le_bytes());
        h.update(&((context << 32) | (len & 0xffff_ffff)).to_le_bytes());
        h.update(&((context >> 32) as u32).to_le_bytes());
        MacState(h)
    }
}

/// Bytes the MAC hashes before the message: the broadcast id (4), the length with the call (8)
/// and the skipped calls (4).
pub const MAC_PREFIX: u32 = 16;

/// A message MAC being computed ([`CommKeys::mac_state`]). Its `Debug` prints no state.
#[derive(Clone)]
pub struct MacState(blake3::Hasher);

impl core::fmt::Debug for MacState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("MacState(..)")
    }
}

impl MacState {
    /// The message's next bytes, in order. BLAKE3 hashes many 1 KiB chunks at once only in
    /// large updates: feed it batches of several KiB, not datagram by datagram.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The MAC of everything fed.
    pub fn finish(&self) -> Mac {
        let mut out = [0u8; DIGEST_LEN];
        self.0.finalize_xof().fill(&mut out);
        out
    }

    /// Whether `mac` is the MAC of everything fed (constant-time in the value compared).
    pub fn ok(&self, mac: &Mac) -> bool {
        ct_eq(&self.finish(), mac)
    }
}

/// Equality whose time does not depend on where the inputs differ.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_macs_depend_on_key_and_every_byte() {
        let a = CommKeys::new(&Secret([1; 32]));
        let b = CommKeys::new(&Secret([2; 32]));
        let span = [7u8; 32];
        assert_eq!(a.tag(&span), a.tag(&span), "deterministic");
        assert_ne!(a.tag(&span), b.tag(&span), "another key, another tag");
        assert!(a.tag_ok(&span, a.tag(&span)));
        assert!(!b.tag_ok(&span, a.tag(&span)));
        for i in 0..span.len() {
            let mut s = span;
            s[i] ^= 1;
            assert!(!a.tag_ok(&s, a.tag(&span)), "byte {i} not covered by the tag");
        }
        let msg = b"the root's bytes".to_vec();
        let mac = a.message_mac(5, &msg);
        assert!(a.mac_ok(5, &msg, &mac));
        assert!(!a.mac_ok(6, &msg, &mac), "bound to the broadcast id");
        assert!(!a.mac_ok(5, &msg[..msg.len() - 1], &mac), "bound to the length");
        assert!(!b.mac_ok(5, &msg, &mac), "bound to the key");
        for i in 0..msg.len() {
            let mut m = msg.clone();
            m[i] ^= 0x80;
            assert!(!a.mac_ok(5, &m, &mac), "byte {i} not covered by the MAC");
        }
        assert_ne!(a.message_mac(0, b""), a.message_mac(1, b""), "empty messages too");
    }

    #[test]
    fn the_mac_fed_in_pieces_is_the_mac_of_the_whole() {
        let k = CommKeys::new(&Secret([3; 32]));
        let msg: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let whole = k.message_mac(9, &msg);
        for piece in [1usize, 1411, 1024, 16 << 10, 70_000] {
            let mut m = k.mac_state(9, msg.len() as u64);
            for p in msg.chunks(piece) {
                m.update(p);
            }
            assert_eq!(m.finish(), whole, "pieces of {piece}");
            assert!(m.ok(&whole));
        }
        let mut m = k.mac_state(9, msg.len() as u64);
        m.update(&msg[..msg.len() - 1]);
        assert!(!m.ok(&whole), "a byte short");
    }

    #[test]
    fn the_tag_key_and_the_mac_key_differ() {
        let k = CommKeys::new(&Secret([9; 32]));
        let mut t = k.tag;
        t.write(b"");
        assert_ne!(format!("{k:?}"), "", "debug output exists");
        assert!(!format!("{k:?}{:?}", Secret([9; 32])).contains('9'), "no key material in debug output");
        assert_ne!(&k.mac[..], &blake3::derive_key("ringcast 2026 frame tag (SipHash-2-4)", &[9; 32])[..]);
    }
}
