//! Point-to-point transfers between a communicator's engines: *pair communicators*.
//!
//! Every transfer of the protocol is a broadcast on a communicator. A broadcast on a
//! communicator of two engines is a reliable point-to-point message — fragments, CRC, the
//! keyed tag and message MAC, bitmaps, repair, retransmission with back-off, typed errors for
//! an unreachable peer within `peer_timeout_ms`, channels and the delayed synchronization for
//! buffer reuse — with nothing new on the wire. So the engine derives, for each communicator
//! (the world and every created one), one two-engine communicator per partner an algorithm
//! needs, the way every engine derives the world itself: its identity (cookie, seed, secret)
//! from the parent's — the job's name and secret for the world, the creation record's cookie
//! and secret for a created one — and the two engine numbers
//! ([`crate::comm::ident::derived_identity`]), no bootstrap traffic; both engines of a pair
//! create it with the parent, so no frame finds it missing. Pair communicators are small (two
//! members: never multicast) and follow their parent's life: closed when it closes (every local
//! process finalized or freed it), reopened with the world for the next job, dropped when the
//! parent breaks or is dropped.
//!
//! The partners are those of recursive doubling among the engines (`doubling.rs`): with `P` the
//! largest power of two not above the engine count `E`, engine `i < P` pairs with `i ^ 2^k`
//! for every `2^k < P` and, if `i + P < E`, with `i + P`; engine `i ≥ P` only with `i − P`:
//! `⌈log₂ E⌉ + 1` communicators per engine at most. With `protocol.alltoall_between =
//! pairwise` or `auto` (the default, where the cost model may pick it), on communicators of up to `protocol.pairwise_engines` engines (16)
//! every engine also pairs with every other, for the pairwise alltoall (`pairwise.rs`): `E − 1`
//! each. With `protocol.allgather_between = ring`, every engine also pairs with its two ring
//! neighbours `i ± 1` (mod `E`).
//!
//! Both engines of a pair post its transfers in the same order (the algorithm's schedule says
//! which side roots each), so the protocol's broadcast numbering lines up, as it does for any
//! communicator. A post that finds its channel still held waits here, in order, and is
//! retried after every event.
use super::ids::{ExchangeId, TransferId};
use crate::comm::auth::Secret;
use crate::comm::ident::derived_identity;
use crate::comm::{CommSpec, PeerId};
use crate::intake::regions::Resolved;
use crate::transfer::protocol::OpCounters;
use crate::transfer::protocol::{CommHandle, Env, Outcome, Post, PostError, Protocol};
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::vec::Vec;
use ringcast_abi::StatusKind;

/// Which pair communicators a communicator's engines derive beyond recursive doubling's: the
/// configuration's, alike at every engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairSet {
    /// Communicators of up to this many engines pair every two (the pairwise alltoall,
    /// `protocol.pairwise_engines`; 0 without it).
    pub all_up_to: u32,
    /// Every engine pairs with its two ring neighbours (the ring allgather).
    pub ring: bool,
}

impl PairSet {
    /// The pairs `protocol` needs.
    pub fn of(p: &crate::config::ProtocolConfig) -> PairSet {
        let all_up_to = match p.alltoall_between {
            crate::config::AlltoallBetween::Pairwise | crate::config::AlltoallBetween::Auto => {
                p.pairwise_engines
            }
            crate::config::AlltoallBetween::Multicast => 0,
        };
        PairSet { all_up_to, ring: p.allgather_between == crate::config::AllgatherBetween::Ring }
    }

    /// The most pair communicators one communicator of engines among `nodes` brings:
    /// `⌈log₂ nodes⌉ + 1`, plus the two ring neighbours, or one per other engine where every
    /// pair has one. (A created communicator spans at most the world's engines.)
    pub fn per_comm(&self, nodes: u32) -> usize {
        let doubling = (32 - nodes.max(2).saturating_sub(1).leading_zeros()) as usize + 1;
        let ring = if self.ring { 2 } else { 0 };
        let all = nodes.min(self.all_up_to).saturating_sub(1) as usize;
        (doubling + ring).max(all)
    }
}

/// The engines engine `me` of `engines` has a pair communicator with: recursive doubling's
/// ([`doubling_partners`]), its ring neighbours (`set.ring`) and, on communicators of up to
/// `set.all_up_to` engines, every other engine (the pairwise alltoall).
pub fn partners(me: u32, engines: u32, set: PairSet) -> Vec<u32> {
    let mut all = doubling_partners(me, engines);
    let mut add = |e: u32| {
        if e != me && e < engines && !all.contains(&e) {
            all.push(e);
        }
    };
    if set.ring && engines >= 2 {
        add((me + 1) % engines);
        add((me + engines - 1) % engines);
    }
    if engines <= set.all_up_to {
        (0..engines).for_each(&mut add);
    }
    all
}

/// The engines engine `me` of `engines` exchanges with in recursive doubling (module doc), in
/// the order the algorithm meets them.
pub fn doubling_partners(me: u32, engines: u32) -> Vec<u32> {
    let p = power_below(engines);
    if me >= p {
        return alloc::vec![me - p];
    }
    let fold = (me + p < engines).then_some(me + p);
    fold.into_iter().chain((0..p.trailing_zeros()).map(|k| me ^ (1 << k))).collect()
}

/// The largest power of two not above `n` (1 for 0 and 1).
pub fn power_below(n: u32) -> u32 {
    match n {
        0 | 1 => 1,
        n => 1 << (31 - n.leading_zeros()),
    }
}

/// One point-to-point transfer on a pair communicator: `len` bytes at `buf` sent to `partner`
/// (`send`) or received from it into `buf`; its outcome goes to exchange `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub partner: u32,
    pub send: bool,
    pub buf: Resolved,
    pub len: u32,
    pub owner: ExchangeId,
    /// The call's context ([`Post::context`]).
    pub context: u64,
}

/// How many transfers of a call a pair's root may run ahead of its partner ([`Post::window`]):
/// two, a swap's, for every call. A window of `channels`, the broadcast's, made every part
/// beyond 4 fragments wait for a rendezvous (64 KiB allreduces on 2 × 2 took 178–368 µs instead
/// of 112–134); counting every transfer of a pairwise alltoall sent parts beyond 8 fragments by
/// rendezvous on 2 × 2, 1.4–2× slower at 64 KiB (245 against 345–502 µs; docs/performance.md,
/// "Pairwise alltoall"). Parts up to `preposted_slots / 2` fragments go eagerly; a late
/// receiver's early fragments beyond its slots are dropped, counted and repaired.
const PAIR_WINDOW: u32 = 2;

/// One transfer waiting for its pair's channel.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    partner: u32,
    id: TransferId,
    post: Post,
}

/// This engine's pair communicators and their transfers.
#[derive(Debug, Default)]
pub(crate) struct Pairs {
    /// (partner engine, protocol handle), in [`partners`] order; a handle is `None`
    /// once dropped.
    comms: Vec<(u32, Option<CommHandle>)>,
    /// This engine's number.
    me: u32,
    waiting: VecDeque<Waiting>,
    /// Transfers over, taken by the engine.
    pub(crate) done: Vec<(TransferId, Outcome)>,
}

impl Pairs {
    /// Creates the pair communicators engine `me` of a communicator needs: the communicator's
    /// engines are `members` (fabric addresses, in engine order), it is named `parent` (the
    /// job's world, or a created communicator's cookie) and keyed by `secret`. Those the
    /// protocol refuses (its table full) are left out: transfers to that partner then fail
    /// typed.
    pub(crate) fn new(
        parent: &str,
        secret: &Secret,
        members: &[PeerId],
        me: u32,
        set: PairSet,
        proto: &mut Protocol,
    ) -> Pairs {
        let mut comms = Vec::new();
        let engines = members.len() as u32;
        if engines >= 2 && me < engines {
            for partner in partners(me, engines, set) {
                let (lo, hi) = (me.min(partner), me.max(partner));
                let name = format!("ringcast pair communicator {lo} {hi} of {parent}");
                let id = derived_identity(&name, Some(&secret.0));
                let spec = CommSpec {
                    cookie: id.cookie,
                    group: id.group,
                    members: alloc::vec![members[lo as usize], members[hi as usize]].into(),
                    my_rank: u32::from(me == hi),
                    seed: id.seed,
                    key: id.key,
                    layout: Default::default(),
                };
                comms.push((partner, proto.create_comm(spec).ok()));
            }
        }
        Pairs { comms, me, waiting: VecDeque::new(), done: Vec::new() }
    }

    /// The protocol handles of the pair communicators alive.
    pub(crate) fn handles(&self) -> impl Iterator<Item = CommHandle> + '_ {
        self.comms.iter().filter_map(|(_, h)| *h)
    }

    /// Whether every pair communicator settled with its partner (nothing owed).
    pub(crate) fn quiescent(&self, proto: &Protocol) -> bool {
        self.comms.iter().filter_map(|(_, h)| *h).all(|h| proto.is_quiescent(h))
    }

    fn handle(&self, partner: u32) -> Option<CommHandle> {
        self.comms.iter().find(|(p, _)| *p == partner).and_then(|(_, h)| *h)
    }

    /// Posts transfer `t` as `id` (in the order posted per pair); its outcome comes back in
    /// [`Pairs::done`].
    pub(crate) fn post(
        &mut self,
        proto: &mut Protocol,
        t: Transfer,
        id: TransferId,
        now: Nanos,
        env: &mut impl Env,
    ) {
        let Transfer { partner, send, buf, len, context, .. } = t;
        let Some(comm) = self.handle(partner) else {
            return self.done.push((id, failed(StatusKind::UnknownCommunicator)));
        };
        let root_engine = if send { self.me } else { partner };
        let root = u32::from(root_engine == self.me.max(partner));
        let post = Post { comm, root, buf, len, token: id.token(), context, window: PAIR_WINDOW };
        let w = Waiting { partner, id, post };
        if self.waiting.iter().any(|q| q.partner == partner) {
            return self.waiting.push_back(w); // behind an earlier transfer of this pair
        }
        if let Some(w) = self.try_post(proto, w, now, env) {
            self.waiting.push_back(w);
        }
    }

    /// Posts what waits for a channel, in order per pair.
    pub(crate) fn retry(&mut self, proto: &mut Protocol, now: Nanos, env: &mut impl Env) {
        let mut blocked: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            let w = self.waiting[i];
            if blocked.contains(&w.partner) {
                i += 1;
                continue;
            }
            let _ = self.waiting.remove(i);
            if let Some(w) = self.try_post(proto, w, now, env) {
                self.waiting.insert(i, w);
                blocked.push(w.partner);
                i += 1;
            }
        }
    }

    /// Posts `w`; gives it back if its channel is still held.
    fn try_post(
        &mut self,
        proto: &mut Protocol,
        w: Waiting,
        now: Nanos,
        env: &mut impl Env,
    ) -> Option<Waiting> {
        match proto.post_bcast(w.post, now, env) {
            Ok(()) => None,
            Err(PostError::WouldBlock) => Some(w),
            Err(PostError::Refused(status)) => {
                self.done.push((w.id, failed(status)));
                None
            }
        }
    }

    /// The world closed (every local process finalized): the pairs settle their last
    /// synchronization epoch with their partners, as the world does.
    pub(crate) fn close(&mut self, proto: &mut Protocol, now: Nanos, env: &mut impl Env) {
        for h in self.comms.iter().filter_map(|(_, h)| *h) {
            proto.close_comm(h, now, env);
        }
    }

    /// The world reopened for the next job.
    pub(crate) fn reopen(&mut self, proto: &mut Protocol) {
        for h in self.comms.iter().filter_map(|(_, h)| *h) {
            proto.reopen_comm(h);
        }
    }

    /// The world broke: its pairs go with it (their transfers fail; partners learn within the
    /// peer timeout) and what waited fails.
    pub(crate) fn drop_all(&mut self, proto: &mut Protocol, env: &mut impl Env) {
        for (_, h) in self.comms.iter_mut() {
            if let Some(h) = h.take() {
                proto.destroy_comm(h, env);
            }
        }
        for w in self.waiting.drain(..) {
            self.done.push((w.id, failed(StatusKind::CommunicatorBroken)));
        }
    }
}

fn failed(status: StatusKind) -> Outcome {
    Outcome { status, bytes: 0, counters: OpCounters::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_those_of_recursive_doubling_with_a_fold() {
        assert_eq!(power_below(1), 1);
        assert_eq!(power_below(5), 4);
        assert_eq!(power_below(8), 8);
        assert_eq!(doubling_partners(0, 2), [1]);
        assert_eq!(doubling_partners(1, 2), [0]);
        // Five engines: 4 folds into 0; 0..4 double among themselves.
        assert_eq!(doubling_partners(0, 5), [4, 1, 2]);
        assert_eq!(doubling_partners(3, 5), [2, 1]);
        assert_eq!(doubling_partners(4, 5), [0]);
        // Every pair is known at both ends; up to `pairwise` engines every pair exists.
        for e in 2..20u32 {
            for a in 0..e {
                for b in doubling_partners(a, e) {
                    assert!(doubling_partners(b, e).contains(&a), "{a} <-> {b} of {e}");
                }
                let set = PairSet { all_up_to: 16, ring: false };
                let all = partners(a, e, set);
                for b in &all {
                    assert!(partners(*b, e, set).contains(&a), "{a} <-> {b} of {e}");
                }
                let want = if e <= 16 { e as usize - 1 } else { doubling_partners(a, e).len() };
                assert_eq!(all.len(), want, "{a} of {e}");
                assert!(want <= set.per_comm(e), "{a} of {e}: the protocol table's share");
                // The ring adds the two neighbours, at both ends, where doubling lacks them.
                let ring = PairSet { all_up_to: 0, ring: true };
                let with_ring = partners(a, e, ring);
                for b in [(a + 1) % e, (a + e - 1) % e] {
                    assert!(with_ring.contains(&b) && partners(b, e, ring).contains(&a), "{a} ~ {b} of {e}");
                }
                assert!(with_ring.len() <= ring.per_comm(e), "{a} of {e}: the protocol table's share");
            }
        }
    }
}
