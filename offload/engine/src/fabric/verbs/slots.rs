//! The bookkeeping of the `verbs` fabric's queue pair, in safe code with no verbs in it: the
//! `n` pre-posted receive slots ([`RecvSlots`]) and the send queue's depth ([`SendRing`]). Both
//! the device ([`super::qp`]) and the unit tests' fake NIC drive them, and they keep one fact
//! each: a receive buffer is read only while its slot is not posted, and a send buffer is
//! written only while no work request in flight uses it. (The `ringcast-verbs` crate's
//! `UdQueue`, under [`super::qp`], checks both facts again with its own account, so that no
//! mistake here can make the device and the engine touch one buffer at once.)
//!
//! # Work request ids
//!
//! A completion names its work request by the 64-bit `wr_id` given at post time:
//! * receive: `generation << 32 | slot` (bit 63 clear; the generation is 31 bits and advances
//!   at every post of the slot), so a completion for a slot that was since reposted — or a
//!   made-up id — is recognised as stale instead of freeing a buffer the NIC still owns;
//! * send: [`SEND_BIT`] `| sequence`, the send's number since start (completions come back in
//!   posting order on one send queue).
//!
//! Completions with an error status carry an undefined opcode, which is why the kind of work
//! request is in its id.
//!
//! # Receive slots
//!
//! A slot is `Queued` (waiting to be posted), `Posted` (the NIC may write it) or `Held` (a
//! completion came back: its bytes are the caller's until it releases the slot, which queues it
//! again). [`RecvSlots::note_burst`] counts the polls that found nothing posted (`dry`): a UD
//! queue pair with no posted receive drops arriving messages silently (UD has no RNR), so this
//! is the only sign software gets of such losses.
//!
//! # Send ring
//!
//! Send buffer `i` serves sends `i, i + depth, …`. At most `depth` sends are in flight
//! (posted, not known complete); a send that would exceed it is refused ([`SendRing::reserve`]
//! returns `None`, counted as `full`) — the send queue never overflows. Only every
//! `signal_every`-th send asks for a completion (fewer completions to poll), plus the send that
//! fills the ring, so a full ring always has a signalled send in flight whose completion frees it
//! all: the ring can never stall with only unsignalled sends in flight. [`SendRing::signal_next`]
//! makes the next send signalled whatever the grid says: [`Retired`] asks for it, so handles
//! waiting for the sends in flight are freed at the next send's completion even when those sends
//! were unsignalled and the fabric then went idle.
//!
//! # Buffer layout
//!
//! [`Layout`] is the arithmetic of the one registered region, shared by the device and the fake
//! NIC: receive slots are sized from the port's active MTU (UD never delivers more than one
//! packet), not from this member's `mtu` — a member whose `RINGCAST_MTU` is larger sends larger
//! messages, which must land and be rejected by the parser (`Oversize`), not overflow the
//! buffer (a local length error, which puts the queue pair into the error state).
//!
//! # Reset
//!
//! When the queue pair is reset to recover from the error state, the device drops every work
//! request: [`RecvSlots::unpost_all`] queues the posted slots again (their old ids become stale
//! at the next post), [`SendRing::abandon_in_flight`] frees every send buffer.
use super::wire::{GRH_LEN, HEADER_LEN};
use std::fmt;

/// Bit 63 of a send's work request id.
pub const SEND_BIT: u64 = 1 << 63;
const GEN_MASK: u32 = 0x7fff_ffff;

/// Why a completion did not match a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// A slot index or sequence outside the table or the ring.
    Range,
    /// The slot was reposted since (generation mismatch), or the send was already completed.
    Stale,
    /// The slot is not posted.
    NotPosted,
}

impl fmt::Display for SlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SlotError::Range => "out of range",
            SlotError::Stale => "stale",
            SlotError::NotPosted => "not posted",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    Posted,
    Held,
}

fn round64(n: usize) -> Option<usize> {
    Some(n.checked_add(63)? / 64 * 64)
}

/// Where the receive slots and the send buffers lie in the registered region: receive slot `i`
/// at `i × recv_size`, send buffer `j` at `send_offset + j × send_size`, `total` bytes in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of a receive slot: the GRH area plus the port's largest message, rounded up to 64.
    pub recv_size: usize,
    /// Bytes of a send buffer: header plus this member's `mtu`, rounded up to 64.
    pub send_size: usize,
    /// Where the send buffers start (after every receive slot).
    pub send_offset: usize,
    /// Bytes of the region.
    pub total: usize,
}

impl Layout {
    /// `slots` receive slots for messages of up to `port_mtu` bytes (the port's active MTU: what
    /// any member may send), `depth` send buffers for this member's frames of at most `mtu` bytes
    /// of datagram; `None` if the sizes overflow.
    pub fn new(slots: u32, depth: u32, port_mtu: usize, mtu: usize) -> Option<Layout> {
        let recv_size = round64(GRH_LEN.checked_add(port_mtu)?)?;
        let send_size = round64(HEADER_LEN.checked_add(mtu)?)?;
        let send_offset = (slots as usize).checked_mul(recv_size)?;
        let total = send_offset.checked_add((depth as usize).checked_mul(send_size)?)?;
        Some(Layout { recv_size, send_size, send_offset, total })
    }
}

/// What the receive side counted (monotonic, except `posted_now` and `low_water`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// Receives posted.
    pub posts: u64,
    /// Receive completions matched to a posted slot.
    pub completions: u64,
    /// Completions that matched no posted slot (stale or made-up ids).
    pub stale: u64,
    /// Posts the NIC refused (the slot is queued again).
    pub post_failures: u64,
    /// Polls after which no receive was posted (the NIC could take nothing meanwhile).
    pub dry: u64,
    /// Receives posted now.
    pub posted_now: u32,
    /// The fewest receives posted after any poll so far.
    pub low_water: u32,
}

/// The `n` receive slots; see the module doc.
#[derive(Clone, Debug)]
pub struct RecvSlots {
    state: Vec<State>,
    generation: Vec<u32>,
    /// Slots waiting to be posted, oldest first (each at most once: state `Queued`).
    queue: std::collections::VecDeque<u32>,
    posted: u32,
    stats: RecvStats,
}

impl RecvSlots {
    /// `n` slots (at most 2^31), all queued for posting.
    pub fn new(n: u32) -> RecvSlots {
        let n = n.min(1 << 31);
        RecvSlots {
            state: vec![State::Queued; n as usize],
            generation: vec![0; n as usize],
            queue: (0..n).collect(),
            posted: 0,
            stats: RecvStats { low_water: n, ..RecvStats::default() },
        }
    }

    /// Number of slots.
    pub fn len(&self) -> u32 {
        self.state.len() as u32
    }

    /// No slot at all.
    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// The work request id of `slot` at `generation`.
    pub fn wr_id(slot: u32, generation: u32) -> u64 {
        u64::from(generation & GEN_MASK) << 32 | u64::from(slot)
    }

    /// The next queued slot, now marked posted, and the id to post it with. If the post fails,
    /// hand it back with [`RecvSlots::post_failed`].
    pub fn next_to_post(&mut self) -> Option<(u32, u64)> {
        let slot = self.queue.pop_front()?;
        let i = slot as usize;
        self.generation[i] = self.generation[i].wrapping_add(1) & GEN_MASK;
        self.state[i] = State::Posted;
        self.posted += 1;
        self.stats.posts += 1;
        self.stats.posted_now = self.posted;
        Some((slot, Self::wr_id(slot, self.generation[i])))
    }

    /// The NIC did not take the post of `slot` (from [`RecvSlots::next_to_post`]): it is queued
    /// again, first.
    pub fn post_failed(&mut self, slot: u32) {
        let i = slot as usize;
        if self.state.get(i) == Some(&State::Posted) {
            self.state[i] = State::Queued;
            self.posted -= 1;
            self.stats.posts -= 1;
            self.stats.post_failures += 1;
            self.stats.posted_now = self.posted;
            self.queue.push_front(slot);
        }
    }

    /// A receive completion with id `wr_id`: the slot it names, now held by the caller.
    pub fn complete(&mut self, wr_id: u64) -> Result<u32, SlotError> {
        let r = self.match_completion(wr_id);
        match r {
            Ok(slot) => {
                self.state[slot as usize] = State::Held;
                self.posted -= 1;
                self.stats.completions += 1;
                self.stats.posted_now = self.posted;
            }
            Err(_) => self.stats.stale += 1,
        }
        r
    }

    fn match_completion(&self, wr_id: u64) -> Result<u32, SlotError> {
        if wr_id & SEND_BIT != 0 {
            return Err(SlotError::Range);
        }
        let slot = (wr_id & 0xffff_ffff) as u32;
        let generation = (wr_id >> 32) as u32;
        match self.state.get(slot as usize) {
            None => Err(SlotError::Range),
            Some(State::Posted) if self.generation[slot as usize] == generation => Ok(slot),
            Some(State::Posted) => Err(SlotError::Stale),
            Some(_) => Err(SlotError::NotPosted),
        }
    }

    /// The device dropped every posted receive (the queue pair was reset): the posted slots are
    /// queued again, after those already queued; held slots stay the caller's. Returns how many
    /// were posted.
    pub fn unpost_all(&mut self) -> u32 {
        let mut n = 0;
        for (slot, state) in self.state.iter_mut().enumerate() {
            if *state == State::Posted {
                *state = State::Queued;
                self.queue.push_back(slot as u32);
                n += 1;
            }
        }
        self.posted = 0;
        self.stats.posted_now = 0;
        n
    }

    /// Whether `slot` is held (its bytes are the caller's).
    pub fn is_held(&self, slot: u32) -> bool {
        self.state.get(slot as usize) == Some(&State::Held)
    }

    /// Whether `slot` is posted (the NIC may write it).
    pub fn is_posted(&self, slot: u32) -> bool {
        self.state.get(slot as usize) == Some(&State::Posted)
    }

    /// The caller is done with held `slot`: it is queued for posting. `false` (nothing changed)
    /// if it was not held.
    pub fn release(&mut self, slot: u32) -> bool {
        if !self.is_held(slot) {
            return false;
        }
        self.state[slot as usize] = State::Queued;
        self.queue.push_back(slot);
        true
    }

    /// Slots waiting to be posted.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Receives posted now.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// Called after each poll of the completion queue: counts a dry queue.
    pub fn note_burst(&mut self) {
        if self.posted == 0 && !self.is_empty() {
            self.stats.dry += 1;
        }
        self.stats.low_water = self.stats.low_water.min(self.posted);
    }

    /// Counters so far.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }
}

/// What the send side counted (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Sends posted.
    pub posts: u64,
    /// Sends known complete (freed by a completion).
    pub completed: u64,
    /// Sends refused because `depth` were in flight.
    pub full: u64,
    /// Completions that matched no send in flight.
    pub stale: u64,
    /// Sends posted with a completion requested.
    pub signalled: u64,
    /// Sends in flight when the queue pair was reset (counted in `completed` too: their buffers
    /// are free, though no completion said so).
    pub abandoned: u64,
}

/// A send buffer and work request id reserved for one send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    /// The send buffer to write.
    pub slot: u32,
    /// The id to post with.
    pub wr_id: u64,
    /// Whether to request a completion.
    pub signalled: bool,
}

/// The send queue's accounting; see the module doc.
#[derive(Clone, Debug)]
pub struct SendRing {
    depth: u32,
    signal_every: u32,
    /// Next send's sequence.
    head: u64,
    /// Oldest send not known complete.
    tail: u64,
    /// The next send asks for a completion whatever the grid says.
    force_signal: bool,
    stats: SendStats,
}

impl SendRing {
    /// A ring of `depth` buffers (at least 1) requesting a completion every `signal_every`
    /// sends (clamped to `1..=depth`).
    pub fn new(depth: u32, signal_every: u32) -> SendRing {
        let depth = depth.max(1);
        SendRing {
            depth,
            signal_every: signal_every.clamp(1, depth),
            head: 0,
            tail: 0,
            force_signal: false,
            stats: SendStats::default(),
        }
    }

    /// The completion interval in use.
    pub fn signal_every(&self) -> u32 {
        self.signal_every
    }

    /// Buffers (and the most sends in flight).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Sequence the next send will get (sends `0..posted_seq()` were reserved).
    pub fn posted_seq(&self) -> u64 {
        self.head
    }

    /// Sends `0..completed_seq()` are known complete.
    pub fn completed_seq(&self) -> u64 {
        self.tail
    }

    /// Sends in flight.
    pub fn in_flight(&self) -> u32 {
        (self.head - self.tail) as u32
    }

    /// Reserves the next buffer, or `None` (counted) when `depth` sends are in flight.
    pub fn reserve(&mut self) -> Option<Reserved> {
        if self.in_flight() >= self.depth {
            self.stats.full += 1;
            return None;
        }
        let seq = self.head;
        self.head += 1;
        let k = u64::from(self.signal_every);
        let signalled = seq % k == k - 1 || self.in_flight() == self.depth || self.force_signal;
        self.force_signal = false;
        self.stats.posts += 1;
        self.stats.signalled += u64::from(signalled);
        Some(Reserved { slot: (seq % u64::from(self.depth)) as u32, wr_id: SEND_BIT | seq, signalled })
    }

    /// The post of `r` (the last reservation) failed: its buffer is free again.
    pub fn unreserve(&mut self, r: Reserved) {
        if r.wr_id == SEND_BIT | (self.head.wrapping_sub(1)) && self.head > self.tail {
            self.head -= 1;
            self.stats.posts -= 1;
            self.stats.signalled -= u64::from(r.signalled);
            // A forced signal goes to the send that replaces this one.
            self.force_signal |= r.signalled;
        }
    }

    /// The next send reserved asks for a completion (see the module doc).
    pub fn signal_next(&mut self) {
        self.force_signal = true;
    }

    /// The device dropped every send in flight (the queue pair was reset): their buffers are
    /// free. Returns how many there were.
    pub fn abandon_in_flight(&mut self) -> u32 {
        let n = self.in_flight();
        self.tail = self.head;
        self.stats.completed += u64::from(n);
        self.stats.abandoned += u64::from(n);
        n
    }

    /// A send completion with id `wr_id` (successful or not): it and every send before it are
    /// done. Returns how many buffers were freed.
    pub fn complete(&mut self, wr_id: u64) -> Result<u32, SlotError> {
        if wr_id & SEND_BIT == 0 {
            self.stats.stale += 1;
            return Err(SlotError::Range);
        }
        let seq = wr_id & !SEND_BIT;
        if seq >= self.head {
            self.stats.stale += 1;
            return Err(SlotError::Range);
        }
        if seq < self.tail {
            self.stats.stale += 1;
            return Err(SlotError::Stale);
        }
        let freed = (seq + 1 - self.tail) as u32;
        self.tail = seq + 1;
        self.stats.completed += u64::from(freed);
        Ok(freed)
    }

    /// Whether send buffer `slot` is used by no send in flight.
    pub fn is_free(&self, slot: u32) -> bool {
        if slot >= self.depth {
            return false;
        }
        let d = u64::from(self.depth);
        // In flight: sequences tail..head, i.e. `in_flight` buffers from tail % depth on.
        let offset = (u64::from(slot) + d - self.tail % d) % d;
        offset >= self.head - self.tail
    }

    /// Counters so far.
    pub fn stats(&self) -> SendStats {
        self.stats
    }
}

/// Things a send in flight may still name (address handles of restarted members and left
/// groups), each kept until every send reserved before its retirement is known complete.
#[derive(Debug)]
pub struct Retired<T> {
    items: Vec<(u64, T)>,
}

impl<T> Default for Retired<T> {
    fn default() -> Retired<T> {
        Retired { items: Vec::new() }
    }
}

impl<T> Retired<T> {
    /// Nothing retired.
    pub fn new() -> Retired<T> {
        Retired::default()
    }

    /// Keeps `item` until the sends reserved on `ring` so far are complete (dropped at once if
    /// none is in flight). With sends in flight, the ring's next send is made signalled: its
    /// completion frees `item` even if the sends in flight were not signalled.
    pub fn retire(&mut self, ring: &mut SendRing, item: T) {
        if ring.in_flight() == 0 {
            drop(item);
            return;
        }
        self.items.push((ring.posted_seq(), item));
        ring.signal_next();
    }

    /// Drops the items no send in flight can name any more; how many.
    pub fn reap(&mut self, ring: &SendRing) -> usize {
        let done = ring.completed_seq();
        let before = self.items.len();
        self.items.retain(|(seq, _)| *seq > done);
        before - self.items.len()
    }

    /// Items kept.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Nothing kept.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Takes every item out without dropping it (for an owner that must leak them).
    pub fn take_all(&mut self) -> Vec<T> {
        self.items.drain(..).map(|(_, t)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_slots_fit_the_ports_largest_message_not_the_local_mtu() {
        // Port MTU 4096, this member's mtu 1000: a member with RINGCAST_MTU 4000 sends 4024-byte
        // messages, which land in a slot (GRH + 4024 <= recv_size) instead of overflowing it.
        let l = Layout::new(8, 4, 4096, 1000).expect("layout");
        assert_eq!(l.recv_size, 4160, "round64(40 + 4096)");
        assert!(l.recv_size >= GRH_LEN + HEADER_LEN + 4000);
        assert_eq!(l.send_size, 1024, "round64(24 + 1000)");
        assert_eq!((l.send_offset, l.total), (8 * 4160, 8 * 4160 + 4 * 1024));
        assert_eq!(Layout::new(2, 2, 256, 100).map(|l| l.recv_size), Some(320));
        assert_eq!(Layout::new(u32::MAX, 2, usize::MAX / 2, 1), None, "overflow");
        assert_eq!(Layout::new(1, 1, usize::MAX, 1), None);
    }

    #[test]
    fn a_reset_requeues_posted_slots_and_frees_the_ring() {
        let mut s = RecvSlots::new(4);
        let ids: Vec<(u32, u64)> = std::iter::from_fn(|| s.next_to_post()).collect();
        assert_eq!(s.complete(ids[1].1), Ok(1));
        assert_eq!(s.unpost_all(), 3);
        assert_eq!((s.posted(), s.queued(), s.stats().posted_now), (0, 3, 0));
        assert!(s.is_held(1), "held slots stay the caller's");
        assert_eq!(s.complete(ids[0].1), Err(SlotError::NotPosted), "a flush from before the reset");
        let again: Vec<u32> = std::iter::from_fn(|| s.next_to_post().map(|p| p.0)).collect();
        assert_eq!(again, [0, 2, 3]);
        assert!(s.release(1));
        assert_eq!(s.next_to_post().map(|p| p.0), Some(1));
        let mut r = SendRing::new(8, 4);
        let sent: Vec<Reserved> = (0..5).filter_map(|_| r.reserve()).collect();
        assert_eq!(r.abandon_in_flight(), 5);
        assert_eq!((r.in_flight(), r.stats().completed, r.stats().abandoned), (0, 5, 5));
        assert_eq!(r.complete(sent[3].wr_id), Err(SlotError::Stale), "a flush from before the reset");
    }

    #[test]
    fn retired_items_wait_for_the_sends_in_flight_and_force_a_signal() {
        let mut r = SendRing::new(32, 8);
        let mut retired = Retired::new();
        // Nothing in flight: dropped at once.
        retired.retire(&mut r, "a");
        assert!(retired.is_empty());
        // Three unsignalled sends in flight, then the fabric goes idle: the handle waits ...
        let sent: Vec<Reserved> = (0..3).filter_map(|_| r.reserve()).collect();
        assert!(sent.iter().all(|s| !s.signalled));
        retired.retire(&mut r, "b");
        assert_eq!((retired.len(), retired.reap(&r)), (1, 0));
        // ... and the next send, off the every-8th grid, asks for the completion that frees it.
        let next = r.reserve().expect("room");
        assert!(next.signalled, "forced");
        assert!(!r.reserve().expect("room").signalled, "only the one");
        assert_eq!(r.complete(next.wr_id), Ok(4));
        assert_eq!(retired.reap(&r), 1);
        assert!(retired.is_empty());
        // A forced send whose post fails hands the signal on.
        let _ = r.reserve();
        retired.retire(&mut r, "c");
        let x = r.reserve().expect("room");
        assert!(x.signalled);
        r.unreserve(x);
        assert!(r.reserve().expect("room").signalled);
        assert_eq!(retired.take_all(), ["c"]);
    }

    #[test]
    fn receive_slots_post_complete_release_and_repost() {
        let mut s = RecvSlots::new(4);
        assert_eq!((s.len(), s.queued(), s.posted()), (4, 4, 0));
        let posted: Vec<(u32, u64)> = std::iter::from_fn(|| s.next_to_post()).collect();
        assert_eq!(posted.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!((s.queued(), s.posted()), (0, 4));
        for &(slot, wr) in &posted {
            assert_eq!(wr & SEND_BIT, 0);
            assert_eq!(wr, RecvSlots::wr_id(slot, 1));
            assert!(s.is_posted(slot));
        }
        // Completions in any order.
        assert_eq!(s.complete(posted[2].1), Ok(2));
        assert!(s.is_held(2) && !s.is_posted(2));
        assert_eq!(s.complete(posted[0].1), Ok(0));
        assert_eq!(s.posted(), 2);
        // Released slots are reposted with a new generation; the old id is stale then.
        assert!(s.release(2));
        assert!(!s.release(2), "released twice");
        assert!(!s.release(1), "posted, not held");
        let (slot, wr) = s.next_to_post().expect("slot 2 again");
        assert_eq!((slot, wr), (2, RecvSlots::wr_id(2, 2)));
        assert_eq!(s.complete(posted[2].1), Err(SlotError::Stale));
        assert_eq!(s.complete(posted[0].1), Err(SlotError::NotPosted), "held, completed twice");
        assert_eq!(s.complete(RecvSlots::wr_id(9, 1)), Err(SlotError::Range));
        assert_eq!(s.complete(SEND_BIT | 2), Err(SlotError::Range), "a send's id");
        assert_eq!(s.stats().stale, 4);
        assert_eq!(s.stats().completions, 2);
        assert_eq!(s.stats().posts, 5);
    }

    #[test]
    fn failed_posts_are_retried_first() {
        let mut s = RecvSlots::new(3);
        let (a, _) = s.next_to_post().expect("a");
        let (b, _) = s.next_to_post().expect("b");
        s.post_failed(b);
        s.post_failed(b); // not posted any more: ignored
        assert_eq!((s.posted(), s.queued(), s.stats().post_failures), (1, 2, 1));
        assert_eq!(s.next_to_post().map(|p| p.0), Some(b), "retried before the rest");
        assert_eq!(s.next_to_post().map(|p| p.0), Some(2));
        assert_eq!(s.next_to_post(), None);
        assert!(s.is_posted(a));
    }

    #[test]
    fn dry_polls_and_low_water_are_counted() {
        let mut s = RecvSlots::new(2);
        s.note_burst();
        assert_eq!(s.stats().dry, 1, "nothing posted yet");
        let ids: Vec<u64> = std::iter::from_fn(|| s.next_to_post().map(|p| p.1)).collect();
        s.note_burst();
        assert_eq!((s.stats().dry, s.stats().low_water), (1, 0));
        let _ = s.complete(ids[0]);
        s.note_burst();
        assert_eq!(s.stats().low_water, 0);
        assert_eq!(s.stats().posted_now, 1);
        let _ = s.complete(ids[1]);
        s.note_burst();
        assert_eq!(s.stats().dry, 2);
        RecvSlots::new(0).note_burst(); // no slots, never dry
    }

    #[test]
    fn generations_wrap_within_31_bits() {
        let mut s = RecvSlots::new(1);
        s.generation[0] = GEN_MASK;
        let (_, wr) = s.next_to_post().expect("post");
        assert_eq!(wr >> 32, 0, "wrapped to 0");
        assert_eq!(s.complete(wr), Ok(0));
    }

    #[test]
    fn the_send_ring_never_overflows_and_always_gets_a_completion_when_full() {
        let mut r = SendRing::new(8, 4);
        let mut got = Vec::new();
        while let Some(x) = r.reserve() {
            got.push(x);
        }
        assert_eq!(got.len(), 8);
        assert_eq!(r.stats().full, 1);
        assert_eq!(got.iter().map(|x| x.slot).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        let signalled: Vec<usize> = (0..8).filter(|&i| got[i].signalled).collect();
        assert_eq!(signalled, [3, 7], "every 4th; the 8th fills the ring");
        assert!(r.reserve().is_none());
        assert!((0..8).all(|s| !r.is_free(s)));
        // The first signalled completion frees sends 0..=3.
        assert_eq!(r.complete(got[3].wr_id), Ok(4));
        assert_eq!(r.in_flight(), 4);
        assert!((0..4).all(|s| r.is_free(s)) && (4..8).all(|s| !r.is_free(s)));
        let x = r.reserve().expect("room again");
        assert_eq!((x.slot, x.wr_id), (0, SEND_BIT | 8));
        assert!(!r.is_free(0));
        assert_eq!(r.complete(got[3].wr_id), Err(SlotError::Stale), "twice");
        assert_eq!(r.complete(SEND_BIT | 99), Err(SlotError::Range), "never posted");
        assert_eq!(r.complete(5), Err(SlotError::Range), "a receive's id");
        assert_eq!(r.complete(x.wr_id), Ok(5));
        assert_eq!(r.in_flight(), 0);
        assert_eq!((r.posted_seq(), r.completed_seq()), (9, 9));
        assert_eq!(r.stats().completed, 9);
        assert!(!r.is_free(8), "no such buffer");
    }

    #[test]
    fn a_ring_filled_off_the_signal_grid_still_signals_its_last_send() {
        // depth 6, every 4th: sends 0..=5 fill it; 3 is signalled by the grid, 5 because it fills.
        let mut r = SendRing::new(6, 4);
        let sent: Vec<Reserved> = std::iter::from_fn(|| r.reserve()).collect();
        assert_eq!(
            sent.iter().filter(|x| x.signalled).map(|x| x.wr_id & !SEND_BIT).collect::<Vec<_>>(),
            [3, 5]
        );
        assert_eq!(r.complete(sent[3].wr_id), Ok(4));
        // Two in flight (4, 5); refill: 6, 7 (signalled: grid), 8, 9 (signalled: fills).
        let more: Vec<Reserved> = std::iter::from_fn(|| r.reserve()).collect();
        assert_eq!(more.len(), 4);
        assert_eq!(
            more.iter().filter(|x| x.signalled).map(|x| x.wr_id & !SEND_BIT).collect::<Vec<_>>(),
            [7, 9]
        );
        assert_eq!(r.complete(more[3].wr_id), Ok(6));
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn a_failed_post_returns_its_buffer() {
        let mut r = SendRing::new(2, 2);
        let a = r.reserve().expect("a");
        r.unreserve(a);
        assert_eq!((r.in_flight(), r.stats().posts), (0, 0));
        let b = r.reserve().expect("b");
        assert_eq!(b, a, "the same buffer and id again");
        let c = r.reserve().expect("c");
        r.unreserve(b); // not the last reservation: ignored
        assert_eq!(r.in_flight(), 2);
        assert!(c.signalled);
        assert_eq!(SendRing::new(0, 0).depth(), 1);
        assert_eq!(SendRing::new(4, 9).signal_every(), 4);
    }

    #[test]
    fn synthetic_completion_streams_keep_the_books_balanced() {
        // A pseudo-random mix of sends and completions: in flight never exceeds depth, every
        // signalled send eventually frees what precedes it, and the counters add up.
        let mut r = SendRing::new(16, 4);
        let mut signalled = std::collections::VecDeque::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) {
                if let Some(s) = r.reserve() {
                    if s.signalled {
                        signalled.push_back(s.wr_id);
                    }
                }
            } else if let Some(wr) = signalled.pop_front() {
                assert!(r.complete(wr).is_ok());
            }
            assert!(r.in_flight() <= 16);
            assert!(r.in_flight() < 16 || !signalled.is_empty(), "a full ring has a completion coming");
        }
        let s = r.stats();
        assert_eq!(s.posts, s.completed + u64::from(r.in_flight()));
        assert!(s.full > 0);
    }
}
