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
//! * the **MAC key**: keyed BLAKE3 over (broadcast id, length and call context, calls of the
//!   posting process that posted nothing, message),
//!   truncated to 128 bits —
//!   the message MAC the last fragment carries, checked after reassembly before delivery. It
//!   covers the payload bytes the per-frame tag leaves out (so a fragment costs one short
//!   SipHash per hop, and the bulk of the bytes one BLAKE3 pass per message, which runs at
//!   several GB/s): a payload replaced in flight ends in `DigestMismatch`, never in wrong bytes.
//!
//! Under `protocol.auth = tag` (the `shm` fabric's default: only the job's own user can write
//! its wire) the MAC covers the call alone — no payload byte — and both keys are derived under
//! other context strings ([`CommKeys::with_auth`]), so engines that disagree on the setting share
//! no key (docs/protocol.md, "Authentication by the fabric's threat").
//!
//! Comparisons are constant-time. No clock, no I/O: pure functions of the key and the bytes.
use crate::config::Auth;
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

/// What a data frame's tag binds under `protocol.auth = tag` besides its header: the call's
/// context (8 bytes, little-endian), its root as a rank of the communicator (4) and its place in
/// the communicator's sequence (8) — [`CommKeys::data_tag`], [`call_binding`].
pub type CallBinding = [u8; 20];

/// The [`CallBinding`] of a call of `context` rooted at `root`, at `slot` of its communicator's
/// sequence. The context's operation byte is
/// bound as the in-step operation's ([`IN_STEP_OP`]) at every rank: a rank whose call is in
/// step for its operation relays under the in-step operation, and a disagreement in the
/// operation alone cannot mix fragments (a broadcast id has one root) — the message MAC, which covers the operation, finds
/// it.
///
/// [`IN_STEP_OP`]: crate::transfer::env::IN_STEP_OP
pub fn call_binding(context: u64, root: u32, slot: u64) -> CallBinding {
    let mut b = [0; 20];
    b[..8].copy_from_slice(&(context | crate::transfer::env::IN_STEP_OP).to_le_bytes());
    b[8..12].copy_from_slice(&root.to_le_bytes());
    b[12..].copy_from_slice(&slot.to_le_bytes());
    b
}

/// The keys derived from one communicator's secret.
#[derive(Clone)]
pub struct CommKeys {
    /// SipHash-2-4 keyed with the tag key, cloned per frame (the key schedule is done once).
    tag: SipHasher24,
    mac: [u8; 32],
    /// The secret they come from ([`CommKeys::derived_from`]: keys shared between ranks).
    secret: Secret,
    /// The setting they were derived under (its own context strings).
    auth: Auth,
}

impl core::fmt::Debug for CommKeys {
    // Never print key material (state dumps of failing DST seeds print communicators).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CommKeys(..)")
    }
}

impl CommKeys {
    /// Derives the tag and MAC keys from `secret` for `protocol.auth = mac`.
    pub fn new(secret: &Secret) -> CommKeys {
        Self::with_auth(secret, Auth::Mac)
    }

    /// Derives the tag and MAC keys from `secret` under the authentication setting `auth`: its
    /// own context strings for `tag`, so that a job whose engines disagree on the setting shares
    /// no key — were a frame of the other setting re-labelled with this one's version byte, its
    /// tag would still fail (`BadTag`). `mac`'s keys are the ones every engine derived before the
    /// setting existed.
    pub fn with_auth(secret: &Secret, auth: Auth) -> CommKeys {
        let (tag_ctx, mac_ctx) = match auth {
            Auth::Mac => ("ringcast 2026 frame tag (SipHash-2-4)", "ringcast 2026 message MAC (BLAKE3)"),
            Auth::Tag => (
                "ringcast 2026 frame tag, auth tag (SipHash-2-4)",
                "ringcast 2026 call MAC, auth tag (BLAKE3)",
            ),
        };
        let t = blake3::derive_key(tag_ctx, &secret.0);
        let mac = blake3::derive_key(mac_ctx, &secret.0);
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&t[i..i + 8]);
            u64::from_le_bytes(w)
        };
        CommKeys { tag: SipHasher24::new_with_keys(word(0), word(8)), mac, secret: *secret, auth }
    }

    /// The wire version byte the frames these keys seal carry (their setting's, `Auth::wire_version`).
    pub fn wire_version(&self) -> u8 {
        self.auth.wire_version()
    }

    /// Whether these are the keys of `secret` under `auth` (constant-time in the secrets
    /// compared).
    pub fn derived_from(&self, secret: &Secret, auth: Auth) -> bool {
        self.auth == auth && ct_eq(&self.secret.0, &secret.0)
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

    /// The tag of a data frame's `span` (its header), bound under `protocol.auth = tag` to the
    /// call the fragment belongs to (`binding`, [`call_binding`]), `None` under `mac`. Why:
    /// under `tag` no payload byte is hashed, so a fragment of another call that shares the
    /// broadcast id and length — a rank that made an allgather, or rooted the broadcast itself,
    /// where the others broadcast — would pass a tag over the header alone and be delivered as
    /// the broadcast's bytes. Bound, the tag's low 32 bits are the header's tag alone (checked
    /// as every frame arrives, before anything in it is believed: a frame for a broadcast not
    /// posted yet is kept only if they match) and its high 32 bits the tag of the header and
    /// the call (checked against the call posted here, once there is one): a fragment of
    /// another call is dropped `BadTag` at every rank whose call differs, and the call check
    /// (`CALL_SHAPE`) ends the disagreement. A forger without the key passes both halves with
    /// probability 2^-64, as one 64-bit tag; the first half alone (2^-32) only keeps a frame in
    /// a pre-posted slot until its post checks the second.
    pub fn data_tag(&self, span: &[u8], binding: Option<&CallBinding>) -> u64 {
        let mut h = self.tag;
        h.write(span);
        let Some(b) = binding else { return h.finish() };
        let header = h.finish() & 0xffff_ffff;
        h.write(b);
        header | h.finish() << 32
    }

    /// Whether `tag` is a bound [`CommKeys::data_tag`] of `span`: its low half always (the
    /// header's), and its high half too when the call is known here (`binding`; `None`: a
    /// frame for a broadcast not posted yet, checked in full when its post replays it). One
    /// pass over the header for both halves; constant-time in the values compared.
    pub fn data_tag_verified(&self, span: &[u8], binding: Option<&CallBinding>, tag: u64) -> bool {
        let mut h = self.tag;
        h.write(span);
        let header = (h.finish() as u32).to_le_bytes();
        let mut ok = ct_eq(&header, &(tag as u32).to_le_bytes());
        if let Some(b) = binding {
            h.write(b);
            ok &= ct_eq(&(h.finish() as u32).to_le_bytes(), &((tag >> 32) as u32).to_le_bytes());
        }
        ok
    }

    /// The MAC of broadcast `bid`'s `message`, rooted at `root` (a plain broadcast's call).
    pub fn message_mac(&self, bid: u32, root: u32, message: &[u8]) -> Mac {
        let mut m = self.mac_state_in(bid, message.len() as u64, 0, root, 0);
        m.update(message);
        m.finish()
    }

    /// Whether `mac` is [`CommKeys::message_mac`] (constant-time in the value compared).
    pub fn mac_ok(&self, bid: u32, root: u32, message: &[u8], mac: &Mac) -> bool {
        ct_eq(&self.message_mac(bid, root, message), mac)
    }

    /// The MAC of broadcast `bid`'s message of `len` bytes, a plain broadcast rooted at rank 0,
    /// computed as its bytes come in order ([`MacState::update`]): a receiver hashes what it
    /// holds while the rest is still on its way, instead of one pass over the whole message at
    /// the end. BLAKE3 hashes large updates in power-of-two subtrees of 1 KiB chunks,
    /// SIMD-parallel, when they start on such a boundary of its input: updates that end at
    /// `k · 2ⁿ KiB −` [`MAC_PREFIX`] bytes of the message keep it on them.
    pub fn mac_state(&self, bid: u32, len: u64) -> MacState {
        self.mac_state_in(bid, len, 0, 0, 0)
    }

    /// [`CommKeys::mac_state`] of a message posted in `context`
    /// ([`crate::transfer::protocol::Post::context`]) and rooted at `root`: the context's low
    /// half — what the call is, beyond a broadcast, and the posting process's leader-based calls
    /// exchanged by multicast (`engine/node/sequencer.rs`) — folded into the upper half of the
    /// hashed length (messages are below 4 GiB), its high half — the calls of the posting process
    /// that posted nothing on the communicator — hashed after it, then the root (a rank of the communicator)
    /// and the call's place in the communicator's sequence (`slot`). Why: ranks whose calls got
    /// out of step (one made another call, with others in flight behind it) may hold the same
    /// broadcast id for broadcasts of the same length from different roots, or from the same
    /// root a call apart; without them the MAC of one message passed for the other's, delivered
    /// as success (DST seeds 535, 999000067668 and 999000004130 with non-blocking calls,
    /// `WrongBytes`).
    pub fn mac_state_in(&self, bid: u32, len: u64, context: u64, root: u32, slot: u64) -> MacState {
        let mut h = blake3::Hasher::new_keyed(&self.mac);
        h.update(&bid.to_le_bytes());
        h.update(&((context << 32) | (len & 0xffff_ffff)).to_le_bytes());
        h.update(&((context >> 32) as u32).to_le_bytes());
        h.update(&root.to_le_bytes());
        h.update(&slot.to_le_bytes());
        MacState(h)
    }
}

/// Bytes the MAC hashes before the message: the broadcast id (4), the length with the call (8),
/// the calls that posted nothing (4), the root (4) and the call's place in its communicator's sequence (8).
pub const MAC_PREFIX: u32 = 28;

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

/// Whether two MACs are equal (constant-time in the values compared).
pub fn mac_eq(a: &Mac, b: &Mac) -> bool {
    ct_eq(a, b)
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
        let mac = a.message_mac(5, 0, &msg);
        assert!(a.mac_ok(5, 0, &msg, &mac));
        assert!(!a.mac_ok(6, 0, &msg, &mac), "bound to the broadcast id");
        assert!(!a.mac_ok(5, 1, &msg, &mac), "bound to the root");
        assert!(!a.mac_ok(5, 0, &msg[..msg.len() - 1], &mac), "bound to the length");
        assert!(!b.mac_ok(5, 0, &msg, &mac), "bound to the key");
        for i in 0..msg.len() {
            let mut m = msg.clone();
            m[i] ^= 0x80;
            assert!(!a.mac_ok(5, 0, &m, &mac), "byte {i} not covered by the MAC");
        }
        assert_ne!(a.message_mac(0, 0, b""), a.message_mac(1, 0, b""), "empty messages too");
    }

    #[test]
    fn the_mac_fed_in_pieces_is_the_mac_of_the_whole() {
        let k = CommKeys::new(&Secret([3; 32]));
        let msg: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let whole = k.message_mac(9, 0, &msg);
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

    /// A data frame's bound tag depends on every byte of the binding, and is no plain tag.
    #[test]
    fn a_bound_tag_depends_on_the_call() {
        let k = CommKeys::with_auth(&Secret([5; 32]), Auth::Tag);
        let span = [9u8; 32];
        let b: CallBinding = [3; 20];
        let tag = k.data_tag(&span, Some(&b));
        assert_ne!(tag, k.tag(&span), "a bound tag is no plain one");
        assert_eq!(k.data_tag(&span, None), k.tag(&span), "unbound: the plain tag");
        assert!(k.data_tag_verified(&span, Some(&b), tag), "both halves");
        assert!(k.data_tag_verified(&span, None, tag), "its low half is the header's");
        let mut other_span = span;
        other_span[0] ^= 1;
        assert!(!k.data_tag_verified(&other_span, None, tag), "another header fails the first half");
        assert!(!CommKeys::with_auth(&Secret([6; 32]), Auth::Tag).data_tag_verified(&span, None, tag));
        let (mut low, mut high) = (tag, tag);
        low ^= 1;
        high ^= 1 << 40;
        assert!(!k.data_tag_verified(&span, None, low), "the low half checked");
        assert!(k.data_tag_verified(&span, None, high), "the high half is the call's");
        assert!(!k.data_tag_verified(&span, Some(&b), high), "and checked with the call");
        for i in 0..b.len() {
            let mut other = b;
            other[i] ^= 1;
            assert!(!k.data_tag_verified(&span, Some(&other), tag), "binding byte {i}");
        }
        assert_ne!(call_binding(1, 2, 0), call_binding(1, 3, 0), "the root is bound");
        assert_ne!(call_binding(1, 2, 0), call_binding(1 << 8, 2, 0), "the call is bound");
        assert_ne!(call_binding(1, 2, 0), call_binding(1, 2, 1), "its place is bound");
        assert_eq!(call_binding(1 << 16, 2, 0), call_binding(2 << 16, 2, 0), "not the operation byte");
        for i in 0..b.len() {
            let mut other = b;
            other[i] ^= 1;
            assert_ne!(k.data_tag(&span, Some(&other)), tag, "binding byte {i} not covered");
        }
    }

    /// The two settings share no key: neither a tag nor a MAC of one is valid under the other.
    #[test]
    fn the_settings_derive_different_keys() {
        let s = Secret([4; 32]);
        let (m, t) = (CommKeys::with_auth(&s, Auth::Mac), CommKeys::with_auth(&s, Auth::Tag));
        let span = [1u8; 32];
        assert!(!t.tag_ok(&span, m.tag(&span)), "a mac engine's tag is no tag engine's");
        assert!(!m.tag_ok(&span, t.tag(&span)));
        assert_ne!(m.message_mac(3, 0, b""), t.message_mac(3, 0, b""));
        assert_eq!(CommKeys::new(&s).tag(&span), m.tag(&span), "mac keys are the keys of before");
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
