//! A receiver whose driver reaches its host buffer at once (`Env::reaches`: the `mapped`
//! backend, a simulated host) and which serves nobody's repairs writes each fragment's payload
//! straight into that buffer as the frame is handled — one copy, no channel, no store job — and
//! hashes its message MAC over the bytes where it delivered them. Driven by hand: two protocol
//! instances on a 2-rank linear broadcast, the receiver a leaf.
use ringcast_abi::StatusKind;
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::{CommSpec, GroupId, Layout, PeerId};
use ringcast_proto::config::{Auth, EngineConfig};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::ledger::Side;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{
    CommHandle, DmaDir, DmaJob, Env, HostDriver, Outcome, Post, Protocol,
};
use std::collections::VecDeque;

/// A host and its engine's driver: frames sent are kept for the test to carry; the buffer is
/// reached at once (`reach`), each placement counted; what a placement writes may be spoiled
/// (`spoil`: the byte at that offset of the message is flipped as it lands) or refused (`gone`).
#[derive(Default)]
struct Host {
    mem: Vec<u8>,
    sent: Vec<(PeerId, Vec<u8>)>,
    done: Vec<Outcome>,
    reach: bool,
    placed: usize,
    stores: usize,
    spoil: Option<usize>,
    gone: bool,
    jobs: VecDeque<DmaJob>,
}

impl Env for Host {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
    fn dma(&mut self, job: DmaJob) {
        self.stores += usize::from(job.dir == DmaDir::Store);
        self.jobs.push_back(job);
    }
    fn reaches(&self, _: Resolved) -> bool {
        self.reach
    }
    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        let at = buf.offset as usize;
        if self.gone || at + bytes.len() > self.mem.len() {
            return false;
        }
        self.placed += 1;
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        if let Some(s) = self.spoil.filter(|s| (at..at + bytes.len()).contains(s)) {
            self.mem[s] ^= 0x5a;
        }
        true
    }
    fn view(&mut self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let at = buf.offset as usize;
        match self.mem.get(at..at + len) {
            Some(b) if !self.gone => {
                f(b);
                true
            }
            _ => false,
        }
    }
    fn complete(&mut self, _: u64, outcome: Outcome) {
        self.done.push(outcome);
    }
}

/// Jobs are answered after each handler: every event below is followed by
/// [`Protocol::answer_jobs`].
impl HostDriver for Host {
    fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
        &mut self.jobs
    }
    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
        job.carry_out(&mut self.mem, stage)
    }
}

fn spec(rank: u32) -> CommSpec {
    CommSpec {
        cookie: 0x77,
        group: [0x77; 14],
        members: (0..2).map(PeerId).collect(),
        my_rank: rank,
        seed: 9,
        layout: Layout::FLAT,
        key: Secret([0x77; 32]),
    }
}

/// The root's message (`len` bytes) sent to a receiver that reaches its buffer when `reach`:
/// both posted, the receiver's READY carried, the root's batches run; the fragments the root
/// sent, in order, and the message.
fn start(len: u32, reach: bool) -> (Protocol, Host, Vec<Vec<u8>>, Vec<u8>) {
    start_with(len, reach, Auth::Mac)
}

/// [`start`] under authentication setting `auth`.
fn start_with(len: u32, reach: bool, auth: Auth) -> (Protocol, Host, Vec<Vec<u8>>, Vec<u8>) {
    let config = EngineConfig::default().with(|c| c.protocol.auth = auth);
    let want: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut engines = [0u32, 1].map(|rank| {
        let mut p = Protocol::new(&config, crc32c::crc32c);
        p.force_algorithm(Some(Algorithm::Linear));
        p.create_comm(spec(rank)).unwrap();
        let mem = if rank == 0 { want.clone() } else { vec![0; len as usize] };
        (p, Host { mem, reach: reach && rank == 1, ..Host::default() })
    });
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    for (p, host) in engines.iter_mut() {
        let post = Post::plain(CommHandle(0), 0, buf, len, 1);
        p.post_bcast(post, 0, host).unwrap();
        p.answer_jobs(0, host);
    }
    let readies: Vec<_> = engines[1].1.sent.drain(..).collect();
    let [(root, root_host), (p1, host1)] = engines;
    let (mut root, mut root_host) = (root, root_host);
    for (_, f) in readies {
        root.on_frame(PeerId(1), &f, 1_000, &mut root_host);
        root.answer_jobs(1_000, &mut root_host);
    }
    while root.next_timeout().is_some_and(|t| t <= 1_000) {
        root.on_timeout(1_000, &mut root_host);
        root.answer_jobs(1_000, &mut root_host);
    }
    let frames: Vec<Vec<u8>> =
        root_host.sent.drain(..).filter_map(|(to, f)| (to == PeerId(1)).then_some(f)).collect();
    assert!(frames.len() > 100, "the root sent its fragments: {}", frames.len());
    (p1, host1, frames, want)
}

#[test]
fn a_leaf_that_reaches_its_buffer_places_each_payload_once_and_stores_nothing() {
    let len = 1 << 20;
    let (mut p1, mut host1, frames, want) = start(len, true);
    for (k, f) in frames.iter().enumerate() {
        p1.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host1);
        p1.answer_jobs(2_000 + k as u64, &mut host1);
    }
    assert_eq!(host1.done.len(), 1, "completed once");
    assert_eq!(host1.done[0].status, StatusKind::Ok);
    assert_eq!(host1.done[0].bytes, u64::from(len));
    assert!(host1.mem == want, "the receiver holds the root's message");
    assert_eq!(host1.placed, frames.len(), "each fragment placed once");
    assert_eq!(host1.stores, 0, "no store job: the bytes are where they belong");
    // By the ledger: one copy and one MAC pass per delivered byte (two copies through the
    // channel, below).
    let (n, ledger) = (u64::from(len), p1.counters().ledger);
    assert_eq!(ledger.copied_bytes(Side::Receive), n, "the receiver's one copy");
    assert_eq!(ledger.hashed_bytes(Side::Receive), n, "the MAC over the delivered bytes");
    assert_eq!(ledger.delivered_bytes(Side::Receive), n);
    // Without the reach, the same message goes through the channel and store jobs.
    let (mut p2, mut host2, frames, want) = start(len, false);
    for (k, f) in frames.iter().enumerate() {
        p2.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host2);
        p2.answer_jobs(2_000 + k as u64, &mut host2);
    }
    assert_eq!(host2.done[0].status, StatusKind::Ok);
    assert!(host2.mem == want);
    assert_eq!(host2.placed, 0);
    assert!(host2.stores > 0);
    assert_eq!(p2.counters().ledger.copied_bytes(Side::Receive), 2 * u64::from(len));
}

#[test]
fn fragments_out_of_order_are_placed_and_hashed_once_the_gaps_fill() {
    let len = 1 << 20;
    let (mut p1, mut host1, mut frames, want) = start(len, true);
    // Odd fragments first, then the even ones backwards: the MAC's prefix waits on gaps.
    let evens: Vec<_> = (0..frames.len()).filter(|i| i % 2 == 0).rev().collect();
    let order: Vec<_> = (0..frames.len()).filter(|i| i % 2 == 1).chain(evens).collect();
    let shuffled: Vec<_> = order.iter().map(|&i| std::mem::take(&mut frames[i])).collect();
    for (k, f) in shuffled.iter().enumerate() {
        assert!(host1.done.is_empty(), "nothing completes before the last fragment arrives");
        p1.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host1);
        p1.answer_jobs(2_000 + k as u64, &mut host1);
    }
    assert_eq!(host1.done.len(), 1);
    assert_eq!(host1.done[0].status, StatusKind::Ok);
    assert!(host1.mem == want);
    assert_eq!(host1.stores, 0);
}

#[test]
fn the_mac_covers_the_delivered_bytes_not_the_frames() {
    // A byte changed as it lands in the host buffer (a faulty DMA, a host rewriting its
    // receive buffer mid-call): the frames were all sound, the delivered message is not.
    for spoil in [0usize, 300_000, (1 << 20) - 1] {
        let (mut p1, mut host1, frames, _) = start(1 << 20, true);
        host1.spoil = Some(spoil);
        for (k, f) in frames.iter().enumerate() {
            p1.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host1);
            p1.answer_jobs(2_000 + k as u64, &mut host1);
        }
        assert_eq!(host1.done.len(), 1, "spoiled at {spoil}");
        assert_eq!(host1.done[0].status, StatusKind::DigestMismatch, "never Ok with wrong bytes");
    }
}

#[test]
fn a_buffer_gone_under_a_placing_receiver_fails_its_broadcast() {
    let (mut p1, mut host1, frames, _) = start(1 << 20, true);
    let half = frames.len() / 2;
    for (k, f) in frames.iter().enumerate() {
        host1.gone = k >= half;
        p1.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host1);
        p1.answer_jobs(2_000 + k as u64, &mut host1);
    }
    assert_eq!(host1.done.len(), 1);
    assert_eq!(host1.done[0].status, StatusKind::OutOfBounds);
}

#[test]
fn under_tag_a_placing_receiver_copies_once_and_hashes_nothing() {
    let len = 1 << 20;
    let (mut p1, mut host1, frames, want) = start_with(len, true, Auth::Tag);
    for (k, f) in frames.iter().enumerate() {
        p1.on_frame(PeerId(0), f, 2_000 + k as u64, &mut host1);
        p1.answer_jobs(2_000 + k as u64, &mut host1);
    }
    assert_eq!(host1.done.len(), 1);
    assert_eq!(host1.done[0].status, StatusKind::Ok);
    assert!(host1.mem == want);
    assert_eq!((host1.placed, host1.stores), (frames.len(), 0));
    let ledger = p1.counters().ledger;
    assert_eq!(ledger.copied_bytes(Side::Receive), u64::from(len), "the placement, once");
    assert_eq!(ledger.hashed_bytes(Side::Receive), 0, "no payload byte hashed under tag");
}
