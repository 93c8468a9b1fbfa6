//! The message MAC as the bytes move: a receiver feeds it the contiguous prefix it holds while
//! the rest is still arriving, a root feeds it as its fragments first leave — instead of one
//! pass over the whole message before the root's first fragment and another after the
//! receiver's last (each ~0.29 ms for 1 MiB on this machine, docs/performance.md). With
//! `protocol.auth = tag` ([`Op::payload_mac`] false) neither hashes a byte: the receiver's
//! `hashed` just follows the contiguous prefix it holds (what may be stored), and the root's
//! digest is the call's MAC, finished before its first fragment leaves.
use crate::comm::auth::MAC_PREFIX;
use crate::transfer::state::Op;

/// A receiver feeds its MAC in batches ending on multiples of this many bytes of the MAC's
/// input: whole, aligned subtrees of 64 chunks, which BLAKE3 hashes at full SIMD width. (Fed
/// 16 KiB at a time, unaligned, the receiving engine spent 864 instead of 695 ns per 1 MiB
/// broadcast's fragment: `engine_stream`.)
const MAC_BATCH: u32 = 64 << 10;

/// Feeds `op`'s MAC with the contiguous prefix of the message it holds in `channel`, up to the
/// last [`MAC_BATCH`] boundary it reached (or all of it, when `all`). A receiver so hashes the
/// message while the rest of it is still arriving, not in one pass at the end; fragments past
/// a gap are hashed when it fills. Fragments are never rewritten once held (a duplicate is
/// dropped before it is copied), so hashed bytes stay what is delivered. Returns the bytes it
/// hashed (the ledger's).
pub(crate) fn advance_mac(op: &mut Op, channel: &[u8], all: bool) -> u64 {
    let count = op.geo.count();
    while op.prefix < count && op.bits.get(op.prefix) {
        op.prefix += 1;
    }
    let end = match op.prefix.checked_sub(1).and_then(|last| op.geo.range(last)) {
        Some((off, len)) => off + len,
        None => 0,
    };
    if !op.payload_mac {
        // `tag`: no byte is hashed; the prefix held is what may be stored.
        op.hashed = op.hashed.max(end);
        return 0;
    }
    let upto =
        if all { end } else { ((end + MAC_PREFIX) / MAC_BATCH * MAC_BATCH).saturating_sub(MAC_PREFIX) };
    if upto > op.hashed {
        if let Some(bytes) = channel.get(op.hashed as usize..upto as usize) {
            op.mac.update(bytes);
            op.hashed = upto;
            return bytes.len() as u64;
        }
    }
    0
}

/// The root's MAC, fed through the end of fragment `seq` before that fragment first leaves —
/// up to the next [`MAC_BATCH`] boundary, so the first fragments leave after one batch is
/// hashed, not the whole message — and finished into `op.digest` once the whole message is
/// (at the latest for the last fragment, which carries it). Called in fragment order by the
/// root's sends, and for all of it before the root answers a repair request. Returns the bytes
/// it hashed (the ledger's).
pub(crate) fn root_mac_through(op: &mut Op, channel: &[u8], seq: u32) -> u64 {
    if op.digest.is_some() {
        return 0;
    }
    if !op.payload_mac {
        // `tag`: the MAC of the call alone, finished before the first fragment leaves.
        op.hashed = op.geo.total;
        op.digest = Some(op.mac.finish());
        return 0;
    }
    let mut fed = 0;
    let total = op.geo.total;
    let need = match op.geo.range(seq) {
        Some(_) if seq + 1 == op.geo.count() => total,
        Some((off, len)) => off + len,
        None => return 0,
    };
    if need > op.hashed {
        let upto =
            ((need + MAC_PREFIX).div_ceil(MAC_BATCH) * MAC_BATCH).saturating_sub(MAC_PREFIX).min(total);
        if let Some(bytes) = channel.get(op.hashed as usize..upto as usize) {
            op.mac.update(bytes);
            op.hashed = upto;
            fed = bytes.len() as u64;
        }
    }
    if op.hashed == total {
        op.digest = Some(op.mac.finish());
    }
    fed
}
