//! Which message MAC is cheapest per byte on this machine (issue 40, item 2): the engine's keyed
//! BLAKE3 (`comm::auth::MacState`, fed in the 64 KiB batches a receiver feeds it) against a
//! Wegman–Carter MAC over POLYVAL (RustCrypto's `polyval`, carry-less multiply: PCLMULQDQ on
//! x86-64, PMULL on aarch64) — the universal hash of the message under a secret key, masked by a
//! keyed BLAKE3 PRF of the broadcast's (id, length, context), which are never reused under one
//! key: the construction of GMAC and AES-GCM-SIV's tag. Both over 1 MiB messages, in
//! interleaved rounds, with memcpy of the same bytes as the yardstick.
//!
//! Run: `cargo bench -p ringcast-proto --bench mac_choice` (`MAC_CHOICE_ROUNDS`, default 5).
use polyval::universal_hash::{KeyInit, UniversalHash};
use polyval::Polyval;
use ringcast_proto::comm::auth::{CommKeys, Secret};
use std::hint::black_box;
use std::time::Instant;

const MESSAGE: usize = 1 << 20;
const BATCH: usize = 64 << 10;

fn blake3_mac(keys: &CommKeys, bid: u32, msg: &[u8]) -> [u8; 16] {
    // As a receiver feeds it (`transfer::mac`): batches ending at k · 64 KiB − MAC_PREFIX bytes
    // of the message, so each batch is whole, aligned subtrees of the MAC's input.
    let mut m = keys.mac_state(bid, msg.len() as u64);
    let first = BATCH - ringcast_proto::comm::auth::MAC_PREFIX as usize;
    let (head, rest) = msg.split_at(first.min(msg.len()));
    m.update(head);
    for b in rest.chunks(BATCH) {
        m.update(b);
    }
    m.finish()
}

/// POLYVAL_H(message, zero-padded) then the lengths block, XOR a keyed PRF of the nonce.
fn polyval_mac(h: &Polyval, prf: &[u8; 32], bid: u32, msg: &[u8]) -> [u8; 16] {
    let mut p = h.clone();
    for b in msg.chunks(BATCH) {
        p.update_padded(b);
    }
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(msg.len() as u64 * 8).to_le_bytes());
    p.update_padded(&lens);
    let s = p.finalize();
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&bid.to_le_bytes());
    nonce[4..].copy_from_slice(&(msg.len() as u64).to_le_bytes());
    let mask = blake3::keyed_hash(prf, &nonce);
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = s[i] ^ mask.as_bytes()[i];
    }
    out
}

fn main() {
    let measured = std::env::args().any(|a| a == "--bench");
    let rounds: usize = std::env::var("MAC_CHOICE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let iters = if measured { 200 } else { 2 };
    let msg: Vec<u8> = (0..MESSAGE).map(|i| (i * 31 + i / 4096) as u8).collect();
    let keys = CommKeys::new(&Secret([5; 32]));
    let h = Polyval::new(&[7u8; 16].into());
    let prf = [9u8; 32];
    // Both detect a changed byte (a sanity check that each hashes what it is given).
    let mut changed = msg.clone();
    changed[MESSAGE / 2] ^= 1;
    assert_ne!(blake3_mac(&keys, 1, &msg), blake3_mac(&keys, 1, &changed));
    assert_ne!(polyval_mac(&h, &prf, 1, &msg), polyval_mac(&h, &prf, 1, &changed));
    let mut dst = vec![0u8; MESSAGE];
    let mut gbps = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..rounds {
        let t = Instant::now();
        for i in 0..iters {
            black_box(blake3_mac(&keys, i, black_box(&msg)));
        }
        gbps[0].push((iters as usize * MESSAGE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        // Larger batches: the whole message in one update.
        let t = Instant::now();
        for i in 0..iters {
            black_box(keys.message_mac(i, 0, black_box(&msg)));
        }
        gbps[3].push((iters as usize * MESSAGE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for i in 0..iters {
            black_box(polyval_mac(&h, &prf, i, black_box(&msg)));
        }
        gbps[1].push((iters as usize * MESSAGE) as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for _ in 0..iters {
            dst.copy_from_slice(black_box(&msg));
            black_box(&dst);
        }
        gbps[2].push((iters as usize * MESSAGE) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    if !measured {
        println!("mac_choice: both MACs detect a changed byte (smoke run; `cargo bench` measures)");
        return;
    }
    println!("# mac_choice: 1 MiB messages, {rounds} interleaved rounds of {iters}; GB/s per round, then the median");
    let names = [
        "keyed BLAKE3, aligned 64 KiB batches (the engine's)",
        "POLYVAL + BLAKE3 PRF mask",
        "memcpy",
        "keyed BLAKE3, one 1 MiB update after the prefix",
    ];
    for (name, v) in names.iter().zip(&mut gbps) {
        let rounds: Vec<String> = v.iter().map(|g| format!("{g:.2}")).collect();
        v.sort_by(f64::total_cmp);
        println!("{name:<52} {:>7.2} GB/s median   [{}]", v[v.len() / 2], rounds.join(" "));
    }
}
