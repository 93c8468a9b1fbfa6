//! The authenticated TCP control session: a proof of the job's secret that binds the channel,
//! made by both ends, and a MAC on every later message.
//!
//! A TCP control connection crosses a network (the PCIe boundary to a DPU), where a listener
//! without the secret can sit between a host and its engine. So the proof binds the session:
//!
//! 1. `HELLO` (host → engine) carries the host's fresh 128-bit nonce and its pid; `HELLO_OK`
//!    (engine → host) the engine's fresh 128-bit nonce and its pid. Both messages, whole, are
//!    the *transcript*.
//! 2. Each end derives the session key from the job's secret and the transcript (BLAKE3
//!    `derive_key` under [`SESSION_CONTEXT`]) and from it four subkeys (keyed BLAKE3 over a
//!    label): the host's proof, the engine's proof, and one MAC key per direction. A relay that
//!    changed a byte of either hello — a nonce, a pid — leaves the two ends with different keys.
//! 3. `AUTH` carries the host's proof (128 bits); the engine checks it in constant time and only
//!    then answers `AUTH_OK` with its own proof, which the host checks: mutual, and the engine
//!    never proves anything to a peer that has not proven the secret first.
//! 4. From the next message on, in each direction, every message carries in its last 8 bytes
//!    (`CtlMsg::mac`) the first 8 bytes of keyed BLAKE3 under that direction's key over a
//!    message counter and the other 56 bytes. The counter is not sent: each end counts what it
//!    sent and received, so a replayed, reordered, dropped or spliced message fails as surely as
//!    a changed one. A message that fails its MAC ends the connection.
//!
//! What a relay without the secret can still do: pass the bytes unchanged (it is then a router),
//! or cut the connection. A proof taken from one connection is worthless on another (other
//! nonces), and a tag of one direction is never valid in the other (other labels).
//!
//! The Unix socket needs none of this: the kernel says who the peer is (its user id decides).
use ringcast_abi::ctl::{CtlKind, CtlMsg};
use std::sync::atomic::{AtomicU64, Ordering};
use zerocopy::IntoBytes;

/// BLAKE3 `derive_key` context of the session key (a key for this purpose is never a key for
/// another).
pub const SESSION_CONTEXT: &str = "ringcast 2026 TCP control session v1";

/// Bytes of a message the MAC covers: all but the MAC itself.
const COVERED: usize = core::mem::size_of::<CtlMsg>() - 8;
const _: () = assert!(core::mem::offset_of!(CtlMsg, mac) == COVERED);

/// Which end of the session this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The host library (it sent `HELLO`).
    Host,
    /// The engine (it answered `HELLO_OK`).
    Engine,
}

/// A 128-bit proof (`AUTH`'s and `AUTH_OK`'s `d`, `e`).
pub type Proof = (u64, u64);

/// What the session key is derived into. Its `Debug` prints no key material.
#[derive(Clone)]
pub struct SessionKeys {
    host_proof: Proof,
    engine_proof: Proof,
    host_to_engine: [u8; 32],
    engine_to_host: [u8; 32],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

fn proof(h: &blake3::Hash) -> Proof {
    let b = h.as_bytes();
    // NOTE(unwrap): 8-byte slices of a 32-byte hash.
    (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
}

impl SessionKeys {
    /// The keys of the session whose hellos were `hello` (as the host sent it) and `hello_ok`
    /// (as the engine sent it), under the job's `secret`. Their `mac` fields are not part of
    /// the transcript (they are zero on the wire before the session).
    pub fn derive(secret: &[u8; 32], hello: &CtlMsg, hello_ok: &CtlMsg) -> Self {
        let mut material = [0u8; 32 + 2 * COVERED];
        material[..32].copy_from_slice(secret);
        material[32..32 + COVERED].copy_from_slice(&hello.as_bytes()[..COVERED]);
        material[32 + COVERED..].copy_from_slice(&hello_ok.as_bytes()[..COVERED]);
        let key = blake3::derive_key(SESSION_CONTEXT, &material);
        let sub = |label: &[u8]| blake3::keyed_hash(&key, label);
        SessionKeys {
            host_proof: proof(&sub(b"host proves the job secret")),
            engine_proof: proof(&sub(b"engine proves the job secret")),
            host_to_engine: *sub(b"MAC host to engine").as_bytes(),
            engine_to_host: *sub(b"MAC engine to host").as_bytes(),
        }
    }

    /// The proof `AUTH` carries.
    pub fn host_proof(&self) -> Proof {
        self.host_proof
    }

    /// The proof `AUTH_OK` carries.
    pub fn engine_proof(&self) -> Proof {
        self.engine_proof
    }

    /// Whether `got` is `role`'s proof, compared in constant time (no early exit: the time
    /// taken says nothing about how much of a guess was right).
    pub fn proves(&self, role: Role, got: Proof) -> bool {
        let want = match role {
            Role::Host => self.host_proof,
            Role::Engine => self.engine_proof,
        };
        let diff = (want.0 ^ got.0) | (want.1 ^ got.1);
        // black_box: the compiler may not turn the OR-fold back into a branch per half.
        std::hint::black_box(diff) == 0
    }
}

/// A fresh 128-bit nonce as two halves (OS entropy with the engine's other sources).
pub fn fresh_nonce() -> (u64, u64) {
    let b = crate::entropy::gather();
    // NOTE(unwrap): 8-byte slices of 32 bytes.
    (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
}

/// The `HELLO` a host sends: its fresh nonce in `c` (low half) and `e` (high half), its pid in
/// `a` (its identity in the transcript; over TCP only a claim, which the attach proof backs).
pub fn hello(pid: u32) -> CtlMsg {
    let mut m = CtlMsg::new(CtlKind::HELLO);
    m.a = pid;
    (m.c, m.e) = fresh_nonce();
    m
}

/// The engine's `HELLO_OK` to `req`: its fresh nonce in `c` (low half: also the attach proof
/// host-owned rings carry) and `e` (high half), its pid in `d`.
pub fn hello_ok(req: &CtlMsg, pid: u32) -> CtlMsg {
    let mut m = CtlMsg::reply(req, CtlKind::HELLO_OK);
    (m.c, m.e) = fresh_nonce();
    m.d = u64::from(pid);
    m
}

/// The per-message MACs of an established session, one key and one counter per direction.
#[derive(Debug)]
pub(super) struct Session {
    keys: SessionKeys,
    role: Role,
    /// Messages sent whole: the next one's counter. Atomic only because sending takes `&self`
    /// (one thread owns a connection).
    sent: AtomicU64,
    /// Messages received and verified: the next one's counter.
    received: u64,
    /// A message failed its MAC: nothing later on this connection is believed.
    broken: bool,
}

/// The MAC of `msg` as message number `counter` under `key`.
fn mac(key: &[u8; 32], counter: u64, msg: &CtlMsg) -> u64 {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&counter.to_le_bytes());
    h.update(&msg.as_bytes()[..COVERED]);
    let out = h.finalize();
    // NOTE(unwrap): 8 bytes of a 32-byte hash.
    u64::from_le_bytes(out.as_bytes()[..8].try_into().unwrap())
}

impl Session {
    pub(super) fn new(keys: SessionKeys, role: Role) -> Self {
        Session { keys, role, sent: AtomicU64::new(0), received: 0, broken: false }
    }

    fn keys_for(&self, sending: bool) -> &[u8; 32] {
        match (self.role, sending) {
            (Role::Host, true) | (Role::Engine, false) => &self.keys.host_to_engine,
            (Role::Engine, true) | (Role::Host, false) => &self.keys.engine_to_host,
        }
    }

    /// `msg` with the MAC of the next message sent; [`Session::sent_one`] once it went whole.
    pub(super) fn seal(&self, msg: &CtlMsg) -> CtlMsg {
        let mut m = *msg;
        m.mac = 0;
        m.mac = mac(self.keys_for(true), self.sent.load(Ordering::Relaxed), &m);
        m
    }

    /// The sealed message went whole: the next one takes the next counter.
    pub(super) fn sent_one(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// A message failed its MAC.
    pub(super) fn broken(&self) -> bool {
        self.broken
    }

    /// `msg` with its MAC checked and cleared, or `None` (and every later message too) when it
    /// is not the next message the peer sent, unchanged.
    pub(super) fn open(&mut self, msg: &CtlMsg) -> Option<CtlMsg> {
        if self.broken {
            return None;
        }
        let mut m = *msg;
        m.mac = 0;
        let want = mac(self.keys_for(false), self.received, &m);
        let diff = want ^ msg.mac;
        if std::hint::black_box(diff) != 0 {
            self.broken = true;
            return None;
        }
        self.received += 1;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: [u8; 32] = [7; 32];

    fn pair() -> (Session, Session) {
        let h = hello(42);
        let ok = hello_ok(&h, 4242);
        let k = SessionKeys::derive(&SECRET, &h, &ok);
        (Session::new(k.clone(), Role::Host), Session::new(k, Role::Engine))
    }

    #[test]
    fn each_end_proves_the_secret_over_this_transcript_only() {
        let h = hello(42);
        let ok = hello_ok(&h, 4242);
        let k = SessionKeys::derive(&SECRET, &h, &ok);
        assert!(k.proves(Role::Host, k.host_proof()));
        assert!(k.proves(Role::Engine, k.engine_proof()));
        assert!(!k.proves(Role::Engine, k.host_proof()), "a host's proof is no engine's");
        assert_ne!(hello(42).c, h.c, "a fresh nonce per hello");
        // Another secret, or a single field of either hello changed: other keys.
        let mut other = SECRET;
        other[31] ^= 1;
        assert!(!k.proves(Role::Host, SessionKeys::derive(&other, &h, &ok).host_proof()));
        for change in 0..6 {
            let (mut h2, mut ok2) = (h, ok);
            match change {
                0 => h2.c ^= 1,
                1 => h2.e ^= 1 << 63,
                2 => h2.a ^= 1,
                3 => ok2.c ^= 1,
                4 => ok2.d ^= 1,
                _ => ok2.seq ^= 1,
            }
            assert!(!k.proves(Role::Host, SessionKeys::derive(&SECRET, &h2, &ok2).host_proof()), "{change}");
        }
        assert_eq!(format!("{k:?}"), "SessionKeys(..)");
    }

    #[test]
    fn a_changed_replayed_reordered_or_reflected_message_fails_its_mac() {
        let (host, mut engine) = pair();
        let a = host.seal(&CtlMsg::new(CtlKind::STATS));
        host.sent_one();
        let b = host.seal(&CtlMsg::new(CtlKind::COMMS));
        host.sent_one();
        assert_eq!(engine.open(&a).map(|m| (m.kind, m.mac)), Some((CtlKind::STATS, 0)));
        // Replay of a, then (on a fresh receiver) b before a, then a changed bit.
        assert!(engine.open(&a).is_none());
        assert!(engine.open(&b).is_none(), "a failure is final");
        let (_, mut fresh) = pair();
        assert!(fresh.open(&a).is_none(), "another session's message");
        let (host, mut engine) = pair();
        host.sent_one();
        let b = host.seal(&CtlMsg::new(CtlKind::COMMS));
        assert!(engine.open(&b).is_none(), "out of order (message 1 before 0)");
        let (host, mut engine) = pair();
        let mut m = host.seal(&CtlMsg::new(CtlKind::DEREGISTER));
        m.a ^= 1;
        assert!(engine.open(&m).is_none(), "changed");
        // The engine's own message reflected back to it fails; its host takes it.
        let (mut host, mut engine) = pair();
        let r = engine.seal(&CtlMsg::new(CtlKind::WAKE));
        assert!(engine.open(&r).is_none(), "reflected");
        assert_eq!(host.open(&r).map(|m| m.kind), Some(CtlKind::WAKE));
    }
}
