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
//! process finalized or freed it), dropped when the parent breaks or is dropped (the next
//! job's world derives pairs of its own).
//!
//! The partners are those of recursive doubling among the engines (`exchange.rs`): with `P` the
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
use crate::comm::auth::Secret;
use crate::comm::ident::derived_identity;
use crate::comm::links::{partners, LinkSet};
use crate::comm::{CommSpec, PeerId};
use crate::engine::ids::{ExchangeId, TransferId};
use crate::intake::regions::Resolved;
use crate::transfer::protocol::OpCounters;
use crate::transfer::protocol::{CommHandle, Env, Outcome, Post, PostError, Protocol};
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::vec::Vec;
use ringcast_abi::StatusKind;

/// One point-to-point transfer on a pair communicator: `len` bytes at `buf` sent to `partner`
/// (`send`) or received from it into `buf`; its outcome goes to exchange `owner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub partner: u32,
    pub send: bool,
    /// `None`: no memory ([`Post::buf`]).
    pub buf: Option<Resolved>,
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
pub(crate) struct Links {
    /// (partner engine, protocol handle), in [`partners`] order; a handle is `None`
    /// once dropped.
    comms: Vec<(u32, Option<CommHandle>)>,
    /// This engine's number.
    me: u32,
    waiting: VecDeque<Waiting>,
    /// Transfers over, taken by the engine.
    pub(crate) done: Vec<(TransferId, Outcome)>,
}

impl Links {
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
        set: LinkSet,
        proto: &mut Protocol,
    ) -> Links {
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
        Links { comms, me, waiting: VecDeque::new(), done: Vec::new() }
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
    /// [`Links::done`].
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
        let post = Post {
            comm,
            root,
            rank_root: root,
            slot: 0,
            buf,
            len,
            token: id.token(),
            context,
            window: PAIR_WINDOW,
        };
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
