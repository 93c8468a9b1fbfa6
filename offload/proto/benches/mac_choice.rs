//! Which message MAC is cheapest per byte on this machine (issue 40, item 2): the engine's keyed
//! BLAKE3 (`comm::auth::MacState`) against Wegman–Carter MACs over a GF(2¹²⁸) universal hash —
//! RustCrypto's POLYVAL (0.6, one block per carry-less multiply and reduction; 0.7, four blocks
//! per reduction) and GHASH (0.6, over POLYVAL 0.7), and AES-128-GCM used as a one-time MAC
//! (GMAC: empty plaintext, the message as associated data) from `ring` and from `aws-lc-rs` —
//! with memcpy of the same bytes as the yardstick. 1 MiB messages, each construction fed as a
//! receiver feeds it (batches ending at k · 64 KiB of the MAC's input, `transfer/mac.rs`) and
//! whole; rounds interleaved, so every construction sees the same minutes of a shared machine.
//!
//! The Wegman–Carter constructions take their one-time secrets from the message's identity — the
//! engine's MAC prefix (broadcast id, length and call context, skipped calls, root, slot) — by
//! keyed BLAKE3: the mask (and, but for the 0.6 row, the hash key H too) fresh per message. They
//! are sound only while an identity never carries two different payloads under one communicator
//! key; docs/performance.md ("Which MAC construction") says where the engine does not guarantee
//! that today. Both AES-GCM libraries take the associated data whole (no streaming API): their
//! "whole" rows are one pass over the message after its last byte; their "per batch" rows a
//! one-time GMAC per 64 KiB batch, XOR-folded ([`gmac_batches`]: another tag, not the GMAC of
//! the whole message, computable as the batches arrive).
//!
//! Run: `cargo bench -p ringcast-proto --bench mac_choice` (`MAC_CHOICE_ROUNDS`, default 5).
use polyval::universal_hash::UniversalHash;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use ringcast_proto::comm::auth::{CommKeys, Secret, MAC_PREFIX};
use std::hint::black_box;
use std::time::Instant;

const MESSAGE: usize = 1 << 20;
const BATCH: usize = 64 << 10;
const PREFIX: usize = MAC_PREFIX as usize;

/// The one-time secrets' key (in an engine: one more key derived from the communicator's secret).
struct OneTime([u8; 32]);

impl OneTime {
    /// The engine's MAC prefix of broadcast `bid`'s message of `len` bytes (a plain broadcast
    /// rooted at rank 0, slot 0), as `CommKeys::mac_state_in` hashes it.
    fn identity(bid: u32, len: usize) -> [u8; PREFIX] {
        let mut id = [0u8; PREFIX];
        id[..4].copy_from_slice(&bid.to_le_bytes());
        id[4..12].copy_from_slice(&(len as u64).to_le_bytes());
        id
    }

    /// 32 bytes of keyed BLAKE3 of (identity, batch): the per-message hash key and mask.
    fn secrets(&self, bid: u32, len: usize, batch: u32) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(&Self::identity(bid, len));
        h.update(&batch.to_le_bytes());
        *h.finalize().as_bytes()
    }
}

/// The `i`-th 16 bytes of `s`.
fn half(s: &[u8; 32], i: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h.copy_from_slice(&s[i * 16..i * 16 + 16]);
    h
}

fn xor16(a: &[u8], b: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
        *o = x ^ y;
    }
    out
}

/// The message's pieces as a receiver feeds them: batches ending at k · 64 KiB of the MAC's
/// input, which hashes `prefix` bytes before the message (BLAKE3's: its subtrees stay
/// aligned; a universal hash's: none, its blocks stay whole), or the whole message in one.
fn pieces(msg: &[u8], prefix: usize, batched: bool) -> impl Iterator<Item = &[u8]> {
    let first = if batched { BATCH - prefix } else { msg.len() };
    let (head, rest) = msg.split_at(first.min(msg.len()));
    std::iter::once(head).chain(rest.chunks(BATCH))
}

/// The engine's MAC (`CommKeys::mac_state`), fed in `pieces`.
fn blake3_mac(keys: &CommKeys, bid: u32, msg: &[u8], batched: bool) -> [u8; 16] {
    let mut m = keys.mac_state(bid, msg.len() as u64);
    for p in pieces(msg, PREFIX, batched) {
        m.update(p);
    }
    m.finish()
}

/// A universal hash in GF(2¹²⁸) that takes padded pieces (POLYVAL and GHASH alike).
trait Uhf: Clone {
    fn with_key(h: &[u8; 16]) -> Self;
    fn feed(&mut self, piece: &[u8]);
    fn tag(self) -> [u8; 16];
}

macro_rules! uhf {
    ($t:ty) => {
        impl Uhf for $t {
            fn with_key(h: &[u8; 16]) -> Self {
                <$t>::new(&(*h).into())
            }
            fn feed(&mut self, piece: &[u8]) {
                self.update_padded(piece);
            }
            fn tag(self) -> [u8; 16] {
                self.finalize().into()
            }
        }
    };
}
uhf!(polyval::Polyval);
uhf!(ghash::GHash);

mod old {
    use polyval06::universal_hash::{KeyInit, UniversalHash};
    /// RustCrypto `polyval` 0.6: one block per carry-less multiply and reduction.
    #[derive(Clone)]
    pub struct Polyval06(pub polyval06::Polyval);
    impl super::Uhf for Polyval06 {
        fn with_key(h: &[u8; 16]) -> Self {
            Polyval06(polyval06::Polyval::new(&(*h).into()))
        }
        fn feed(&mut self, piece: &[u8]) {
            self.0.update_padded(piece);
        }
        fn tag(self) -> [u8; 16] {
            self.0.finalize().into()
        }
    }
}

/// Wegman–Carter: UHF_H(message, zero-padded per piece; the pieces are 16-byte multiples but
/// the last) then the lengths block, XOR a mask. H and the mask come from the one-time secrets
/// of the identity; with `fixed` H, the communicator's (`fixed`), the mask alone is fresh.
fn wc_mac<U: Uhf>(ot: &OneTime, fixed: Option<&U>, bid: u32, msg: &[u8], batched: bool) -> [u8; 16] {
    let s = ot.secrets(bid, msg.len(), 0);
    let mut u = match fixed {
        Some(u) => u.clone(),
        None => U::with_key(&half(&s, 0)),
    };
    for p in pieces(msg, 0, batched) {
        u.feed(p);
    }
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(msg.len() as u64 * 8).to_le_bytes());
    u.feed(&lens);
    xor16(&u.tag(), &half(&s, 1))
}

/// `ring`'s AES-128-GCM as a one-time MAC: a fresh AES key per message from the identity, empty
/// plaintext, `msg` the associated data — GHASH_H(msg) ⊕ E_K(J0), H = E_K(0). `batch` gives a
/// key of its own; the tag covers `msg` whole (ring has no streaming associated data).
fn gmac_ring(ot: &OneTime, bid: u32, batch: u32, msg: &[u8]) -> [u8; 16] {
    let s = ot.secrets(bid, msg.len(), batch);
    let Ok(unbound) = UnboundKey::new(&AES_128_GCM, &s[..16]) else { return [0; 16] };
    let key = LessSafeKey::new(unbound);
    let nonce = Nonce::assume_unique_for_key([0; 12]);
    match key.seal_in_place_separate_tag(nonce, Aad::from(msg), &mut []) {
        Ok(tag) => tag.as_ref().try_into().unwrap_or([0; 16]),
        Err(_) => [0; 16],
    }
}

/// `ring`'s AES-128-GCM encrypting `buf` in place under a one-time key: its fused AES-CTR and
/// GHASH over the bytes (what an engine that sent ciphertext would pay — another wire, and a
/// receiver's decryption in place after its copy: ring has no out-of-place API).
fn gcm_ring_encrypt(ot: &OneTime, bid: u32, buf: &mut [u8]) -> [u8; 16] {
    let s = ot.secrets(bid, buf.len(), 0);
    let Ok(unbound) = UnboundKey::new(&AES_128_GCM, &s[..16]) else { return [0; 16] };
    let key = LessSafeKey::new(unbound);
    let nonce = Nonce::assume_unique_for_key([0; 12]);
    match key.seal_in_place_separate_tag(nonce, Aad::empty(), buf) {
        Ok(tag) => tag.as_ref().try_into().unwrap_or([0; 16]),
        Err(_) => [0; 16],
    }
}

/// `aws-lc-rs`'s AES-128-GCM as the same one-time MAC ([`gmac_ring`]'s construction, the same
/// tag): AWS-LC hashes the associated data in bulk (aggregated GHASH, VPCLMULQDQ where the CPU
/// has it), where ring 0.17 multiplies it in one block at a time.
fn gmac_awslc(ot: &OneTime, bid: u32, batch: u32, msg: &[u8]) -> [u8; 16] {
    use aws_lc_rs::aead as lc;
    let s = ot.secrets(bid, msg.len(), batch);
    let Ok(unbound) = lc::UnboundKey::new(&lc::AES_128_GCM, &s[..16]) else { return [0; 16] };
    let key = lc::LessSafeKey::new(unbound);
    let nonce = lc::Nonce::assume_unique_for_key([0; 12]);
    match key.seal_in_place_separate_tag(nonce, lc::Aad::from(msg), &mut []) {
        Ok(tag) => tag.as_ref().try_into().unwrap_or([0; 16]),
        Err(_) => [0; 16],
    }
}

/// A one-time GMAC per 64 KiB batch of the message — each batch's key from (identity, batch
/// index) — XOR-folded into one tag: a sum of independently keyed almost-XOR-universal hashes,
/// masked by independent one-time pads, so still a Wegman–Carter MAC, and one a receiver can
/// compute batch by batch with a library that takes its input whole. A key setup per batch.
fn gmac_batches(
    ot: &OneTime,
    bid: u32,
    msg: &[u8],
    one: fn(&OneTime, u32, u32, &[u8]) -> [u8; 16],
) -> [u8; 16] {
    let mut acc = [0u8; 16];
    for (i, b) in msg.chunks(BATCH).enumerate() {
        acc = xor16(&acc, &one(ot, bid, i as u32, b));
    }
    acc
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

type Candidate<'a> = (&'a str, Box<dyn Fn(u32, &[u8]) -> [u8; 16] + 'a>);

fn main() {
    let measured = std::env::args().any(|a| a == "--bench");
    let rounds: usize = std::env::var("MAC_CHOICE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let iters: u32 = if measured { 200 } else { 2 };
    let msg: Vec<u8> = (0..MESSAGE).map(|i| (i * 31 + i / 4096) as u8).collect();
    let keys = CommKeys::new(&Secret([5; 32]));
    let ot = OneTime(blake3::derive_key("ringcast mac_choice bench: one-time MAC secrets", &[5; 32]));
    let fixed06 = <old::Polyval06 as Uhf>::with_key(&[7u8; 16]);
    let (k, o, f) = (&keys, &ot, &fixed06);
    let scratch = &std::cell::RefCell::new(vec![0u8; MESSAGE]);
    let mut candidates: Vec<Candidate> = vec![
        ("keyed BLAKE3, 64 KiB batches (the engine's)", Box::new(move |b, m| blake3_mac(k, b, m, true))),
        ("keyed BLAKE3, whole", Box::new(move |b, m| blake3_mac(k, b, m, false))),
        (
            "polyval 0.6.2 (fixed H) + mask, 64 KiB batches",
            Box::new(move |b, m| wc_mac(o, Some(f), b, m, true)),
        ),
        (
            "polyval 0.7.3 (one-time H) + mask, 64 KiB batches",
            Box::new(move |b, m| wc_mac::<polyval::Polyval>(o, None, b, m, true)),
        ),
        (
            "polyval 0.7.3 (one-time H) + mask, whole",
            Box::new(move |b, m| wc_mac::<polyval::Polyval>(o, None, b, m, false)),
        ),
        (
            "ghash 0.6.0 (one-time H) + mask, 64 KiB batches",
            Box::new(move |b, m| wc_mac::<ghash::GHash>(o, None, b, m, true)),
        ),
        ("ring 0.17 AES-128-GMAC, one-time key, whole", Box::new(move |b, m| gmac_ring(o, b, 0, m))),
        (
            "ring 0.17 AES-128-GMAC, a key per 64 KiB batch",
            Box::new(move |b, m| gmac_batches(o, b, m, gmac_ring)),
        ),
        ("aws-lc-rs 1 AES-128-GMAC, one-time key, whole", Box::new(move |b, m| gmac_awslc(o, b, 0, m))),
        (
            "aws-lc-rs 1 AES-128-GMAC, a key per 64 KiB batch",
            Box::new(move |b, m| gmac_batches(o, b, m, gmac_awslc)),
        ),
        (
            "ring 0.17 AES-128-GCM: copy, then encrypt in place",
            Box::new(move |b, m| {
                let mut s = scratch.borrow_mut();
                s.copy_from_slice(m);
                gcm_ring_encrypt(o, b, &mut s)
            }),
        ),
    ];
    // Each detects a changed byte, and gives another tag for another identity: it hashes what
    // it is given, keyed by what it is told.
    let mut changed = msg.clone();
    changed[MESSAGE / 2 + 5] ^= 1;
    for (name, mac) in &candidates {
        assert_ne!(mac(1, &msg), mac(1, &changed), "{name}: a changed byte went unnoticed");
        assert_ne!(mac(1, &msg), mac(2, &msg), "{name}: two identities, one tag");
        assert_eq!(mac(1, &msg), mac(1, &msg), "{name}: not a function of its input");
    }
    // Batched and whole feeding are the same MAC.
    assert_eq!(candidates[0].1(3, &msg), candidates[1].1(3, &msg));
    assert_eq!(candidates[3].1(3, &msg), candidates[4].1(3, &msg));
    // ring and AWS-LC compute the same GMAC, whole and per batch.
    assert_eq!(candidates[6].1(3, &msg), candidates[8].1(3, &msg));
    assert_eq!(candidates[7].1(3, &msg), candidates[9].1(3, &msg));
    let mut dst = vec![0u8; MESSAGE];
    let mut gbps = vec![Vec::new(); candidates.len() + 1];
    let load_before = load();
    let rate = |t: Instant| f64::from(iters) * MESSAGE as f64 / t.elapsed().as_secs_f64() / 1e9;
    for _ in 0..rounds {
        for (i, (_, mac)) in candidates.iter_mut().enumerate() {
            let t = Instant::now();
            for bid in 0..iters {
                black_box(mac(bid, black_box(&msg)));
            }
            gbps[i].push(rate(t));
        }
        let t = Instant::now();
        for _ in 0..iters {
            dst.copy_from_slice(black_box(&msg));
            black_box(&dst);
        }
        gbps[candidates.len()].push(rate(t));
    }
    if !measured {
        println!("mac_choice: every MAC detects a changed byte (smoke run; `cargo bench` measures)");
        return;
    }
    println!(
        "# mac_choice: 1 MiB messages, {rounds} interleaved rounds of {iters}; GB/s per round, the median, \
         (max-min)/median; load {load_before} before, {} after",
        load()
    );
    let names = candidates.iter().map(|c| c.0).chain(["memcpy"]);
    for (name, v) in names.zip(&mut gbps) {
        let each: Vec<String> = v.iter().map(|g| format!("{g:.2}")).collect();
        v.sort_by(f64::total_cmp);
        let median = v[v.len() / 2];
        let spread = (v[v.len() - 1] - v[0]) / median * 100.0;
        println!("{name:<52} {median:>7.2} GB/s median  ±{spread:>3.0} %  [{}]", each.join(" "));
    }
}
