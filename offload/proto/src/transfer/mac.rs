//! The message MAC as the bytes move: a receiver feeds it the contiguous prefix it holds while
//! the rest is still arriving, a root feeds it as its fragments first leave — instead of one
//! pass over the whole message before the root's first fragment and another after the
//! receiver's last (each ~0.29 ms for 1 MiB on this machine, docs/performance.md). With
//! `protocol.auth = tag` ([`Op::payload_mac`] false) neither hashes a byte: the receiver's
//! `hashed` just follows the contiguous prefix it holds (what may be stored) and, once it holds
//! all of it, checks the root's digest against the call's MAC; the root's digest is the call's
//! MAC, finished before its first fragment leaves.
//!
//! A MAC's running state (BLAKE3's, 1.9 KB with its stack of chaining values) is kept only
//! while a message is hashed in more than one batch: a message hashed in one pass — every
//! message of up to one [`MAC_BATCH`], the simulator's million ranks' included — is hashed on
//! the stack. A kept state comes from its communicator's spare states ([`Comm::spare_macs`],
//! one allocated the first time a channel needs one, none after) and goes back there once its
//! MAC is finished: a million simulated ranks held 3.8 KB each of states they never used.
//!
//! [`Comm::spare_macs`]: crate::transfer::state::Comm::spare_macs
use crate::comm::auth::{mac_eq, CommKeys, Mac, MacState, MAC_PREFIX};
use crate::intake::regions::Resolved;
use crate::transfer::env::Env;
use crate::transfer::state::{give_back, Op};
use alloc::boxed::Box;

/// Running MAC states not in use ([`Comm::spare_macs`]). Boxed: a state (1.9 KB) moves between
/// an [`Op`] and this list by its pointer, and an [`Op`] without one holds a word; the list is
/// one word too until a state is first given back.
pub(crate) type Spares = crate::transfer::boxed_vec::BoxedVec<Box<MacState>>;

/// A receiver feeds its MAC in batches ending on multiples of this many bytes of the MAC's
/// input: whole, aligned subtrees of 64 chunks, which BLAKE3 hashes at full SIMD width. (Fed
/// 16 KiB at a time, unaligned, the receiving engine spent 864 instead of 695 ns per 1 MiB
/// broadcast's fragment: `engine_stream`.)
const MAC_BATCH: u32 = 64 << 10;

/// Feeds `op`'s MAC with the contiguous prefix of the message it holds in `channel`, up to the
/// last [`MAC_BATCH`] boundary it reached (or all of it, when `all`). A receiver so hashes the
/// message while the rest of it is still arriving, not in one pass at the end; fragments past
/// a gap are hashed when it fills. Fragments are never rewritten once held (a duplicate is
/// dropped before it is copied), so hashed bytes stay what is delivered. The MAC is finished
/// and checked against the root's (`op.own_ok`) once the whole message is hashed. Returns the
/// bytes it hashed (the ledger's).
pub(crate) fn advance_mac(
    op: &mut Op,
    channel: &[u8],
    all: bool,
    keys: &CommKeys,
    spare: &mut Spares,
) -> u64 {
    let mut read =
        |from: u32, upto: u32, f: &mut dyn FnMut(&[u8])| match channel.get(from as usize..upto as usize) {
            Some(bytes) => {
                f(bytes);
                true
            }
            None => false,
        };
    advance_mac_from(op, all, keys, spare, &mut read).unwrap_or(0)
}

/// [`advance_mac`] for a receiver that places its payload straight into its host buffer
/// (`Op::direct`): the same batches, read where the bytes were delivered ([`Env::view`]) —
/// the MAC covers exactly the bytes the host gets (under `tag` nothing is read). A buffer the
/// driver no longer reaches is a failed store (`Op::store_failed`); nothing more is hashed.
/// Returns the bytes it hashed.
pub(crate) fn advance_mac_placed(
    op: &mut Op,
    env: &mut impl Env,
    all: bool,
    keys: &CommKeys,
    spare: &mut Spares,
) -> u64 {
    if op.store_failed {
        return 0;
    }
    // (Placed directly only into a buffer that exists: `places_directly`.)
    let Some(buf) = op.buf else {
        op.store_failed = true;
        return 0;
    };
    let mut read = |from: u32, upto: u32, f: &mut dyn FnMut(&[u8])| {
        let at = Resolved { offset: buf.offset + u64::from(from), ..buf };
        env.view(at, upto.saturating_sub(from) as usize, f)
    };
    match advance_mac_from(op, all, keys, spare, &mut read) {
        Some(fed) => fed,
        None => {
            op.store_failed = true;
            0
        }
    }
}

/// The MAC's advance over the message's bytes `from..upto` as `read` hands them (`None`: it
/// could not).
type Read<'a> = dyn FnMut(u32, u32, &mut dyn FnMut(&[u8])) -> bool + 'a;

fn advance_mac_from(
    op: &mut Op,
    all: bool,
    keys: &CommKeys,
    spare: &mut Spares,
    read: &mut Read<'_>,
) -> Option<u64> {
    let count = op.geo.count();
    while op.prefix < count && op.bits.get(op.prefix) {
        op.prefix += 1;
    }
    let end = match op.prefix.checked_sub(1).and_then(|last| op.geo.range(last)) {
        Some((off, len)) => off + len,
        None => 0,
    };
    if !op.payload_mac {
        // `tag`: no byte is hashed; the prefix held is what may be stored. Holding all of it,
        // the receiver has the last fragment, hence the root's digest: the call's MAC.
        op.hashed = op.hashed.max(end);
        if op.hashed == op.geo.total && op.own_ok.is_none() {
            let mac = keys
                .mac_state_in(op.bid, u64::from(op.geo.total), op.context, op.rank_root, op.call_slot)
                .finish();
            op.own_ok = Some(op.digest.is_some_and(|theirs| mac_eq(&theirs, &mac)));
        }
        return Some(0);
    }
    let upto =
        if all { end } else { ((end + MAC_PREFIX) / MAC_BATCH * MAC_BATCH).saturating_sub(MAC_PREFIX) };
    // (An empty message is hashed, and its MAC finished, with nothing fed.)
    if upto > op.hashed || (upto == op.geo.total && op.own_ok.is_none()) {
        let (from, mut fed, mut finished) = (op.hashed, 0, None);
        let ok = read(from, upto, &mut |bytes| {
            fed = bytes.len() as u64;
            finished = feed(op, keys, spare, bytes, upto);
        });
        if !ok {
            return None;
        }
        if let Some(mac) = finished {
            op.own_ok = Some(op.digest.is_some_and(|theirs| mac_eq(&theirs, &mac)));
        }
        return Some(fed);
    }
    Some(0)
}

/// The root's MAC, fed through the end of fragment `seq` before that fragment first leaves —
/// up to the next [`MAC_BATCH`] boundary, so the first fragments leave after one batch is
/// hashed, not the whole message — and finished into `op.digest` once the whole message is
/// (at the latest for the last fragment, which carries it). Called in fragment order by the
/// root's sends, and for all of it before the root answers a repair request. Returns the bytes
/// it hashed (the ledger's).
pub(crate) fn root_mac_through(
    op: &mut Op,
    channel: &[u8],
    seq: u32,
    keys: &CommKeys,
    spare: &mut Spares,
) -> u64 {
    if op.digest.is_some() {
        return 0;
    }
    if !op.payload_mac {
        // `tag`: the MAC of the call alone, finished before the first fragment leaves.
        op.hashed = op.geo.total;
        op.digest = Some(
            keys.mac_state_in(op.bid, u64::from(op.geo.total), op.context, op.rank_root, op.call_slot)
                .finish(),
        );
        return 0;
    }
    let mut fed = 0;
    let total = op.geo.total;
    let need = match op.geo.range(seq) {
        Some(_) if seq + 1 == op.geo.count() => total,
        Some((off, len)) => off + len,
        None => return 0,
    };
    // Nothing new needed: only an empty message, whose MAC is finished with nothing fed.
    let upto = if need > op.hashed {
        ((need + MAC_PREFIX).div_ceil(MAC_BATCH) * MAC_BATCH).saturating_sub(MAC_PREFIX).min(total)
    } else {
        op.hashed
    };
    if let Some(bytes) = channel.get(op.hashed as usize..upto as usize) {
        fed = bytes.len() as u64;
        if let Some(mac) = feed(op, keys, spare, bytes, upto) {
            op.digest = Some(mac);
        }
    }
    fed
}

/// Feeds `bytes`, the message's bytes from `op.hashed` up to `upto`, to `op`'s MAC; returns
/// the MAC once `upto` is the message's end. The whole message at once is hashed on the
/// stack; otherwise the running state is kept in `op.mac`, taken from `spare` (or allocated,
/// the first time) and given back there when the MAC is finished.
fn feed(op: &mut Op, keys: &CommKeys, spare: &mut Spares, bytes: &[u8], upto: u32) -> Option<Mac> {
    let total = op.geo.total;
    if op.hashed == 0 && upto == total && op.mac.is_none() {
        let mut m = keys.mac_state_in(op.bid, u64::from(total), op.context, op.rank_root, op.call_slot);
        m.update(bytes);
        op.hashed = upto;
        return Some(m.finish());
    }
    let (bid, context, root, slot) = (op.bid, op.context, op.rank_root, op.call_slot);
    let state = op.mac.get_or_insert_with(|| {
        let fresh = keys.mac_state_in(bid, u64::from(total), context, root, slot);
        match spare.pop() {
            Some(mut b) => {
                *b = fresh;
                b
            }
            None => Box::new(fresh),
        }
    });
    state.update(bytes);
    op.hashed = upto;
    if upto < total {
        return None;
    }
    let mac = state.finish();
    if let Some(b) = op.mac.take() {
        give_back(spare.vec(), b);
    }
    Some(mac)
}
