//! A receiver stores a large message into its host buffer in parts while it arrives — each part
//! once the message MAC covers it — and completes only after the message is verified and every
//! part is stored (the completion follows the bytes it reports). Driven by hand: two protocol
//! instances, the root's load answered as soon as its post returns, the receiver's stores kept
//! pending until the test answers them, as a DPU's DMA engine does. And the root's side of it:
//! the root seals its fragments a batch per pass of its driver, not all at once.
use ringcast_abi::StatusKind;
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::{CommSpec, GroupId, Layout, PeerId};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{
    CommHandle, DmaDir, DmaJob, DmaToken, Env, HostDriver, Outcome, Post, Protocol,
};
use std::collections::VecDeque;

/// A host and the driver of its engine: frames sent are kept for the test to carry; host
/// memory jobs are answered after each handler (`jobs`, [`HostDriver`]), or kept pending
/// (`defer`) with their host offsets until the test answers them.
#[derive(Default)]
struct Host {
    mem: Vec<u8>,
    sent: Vec<(PeerId, Vec<u8>)>,
    done: Vec<Outcome>,
    defer: bool,
    jobs: VecDeque<DmaJob>,
    pending: Vec<(DmaToken, u64)>,
    /// Actions the driver says it still holds queued ([`Env::backlog`]).
    backlog: usize,
}

impl Env for Host {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {}
    fn dma(&mut self, job: DmaJob) {
        if self.defer {
            assert_eq!(job.dir, DmaDir::Store, "a receiver only stores");
            assert_eq!(job.len, u64::from(job.token.len));
            self.pending.push((job.token, job.buf.offset));
        } else {
            self.jobs.push_back(job);
        }
    }
    fn complete(&mut self, _: u64, outcome: Outcome) {
        self.done.push(outcome);
    }
    fn backlog(&self) -> usize {
        self.backlog
    }
}

impl HostDriver for Host {
    fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
        &mut self.jobs
    }
    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
        job.carry_out(&mut self.mem, stage)
    }
}

fn pair(len: u32) -> [(Protocol, Host); 2] {
    let config = EngineConfig::default();
    [0u32, 1].map(|rank| {
        let mut p = Protocol::new(&config, crc32c::crc32c);
        p.force_algorithm(Some(Algorithm::Linear));
        p.create_comm(spec(rank, 0x51)).unwrap();
        let mem = if rank == 0 {
            (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
        } else {
            vec![0; len as usize]
        };
        (p, Host { mem, defer: rank == 1, ..Host::default() })
    })
}

/// Rank `rank`'s view of a 2-rank communicator `cookie` (its group and key follow the cookie).
fn spec(rank: u32, cookie: u8) -> CommSpec {
    CommSpec {
        cookie: u64::from(cookie),
        group: [cookie; 14],
        members: (0..2).map(PeerId).collect(),
        my_rank: rank,
        seed: 9,
        layout: Layout::FLAT,
        key: Secret([cookie; 32]),
    }
}

/// Hands the receiver `frames` from the root, one event each (the jobs not deferred answered
/// after each).
fn feed(p: &mut Protocol, host: &mut Host, frames: &[Vec<u8>]) {
    for (k, f) in frames.iter().enumerate() {
        p.on_frame(PeerId(0), f, 2_000 + k as u64, host);
        p.answer_jobs(2_000 + k as u64, host);
    }
}

/// Posts the broadcast of `len` bytes at both ranks at time 0; the root's load is answered.
fn post_both(engines: &mut [(Protocol, Host); 2], len: u32) {
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    for (p, host) in engines.iter_mut() {
        p.post_bcast(Post::plain(CommHandle(0), 0, buf, len, 1), 0, host).unwrap();
        p.answer_jobs(0, host);
    }
}

/// Posts at both ranks, lets the root have the receiver's READY (a 1 MiB broadcast on two ranks
/// is a rendezvous) and run its batches, and returns the fragments the root sent, in order.
fn start(engines: &mut [(Protocol, Host); 2], len: u32) -> Vec<Vec<u8>> {
    post_both(engines, len);
    let readies: Vec<_> = engines[1].1.sent.drain(..).collect();
    assert!(!readies.is_empty(), "the receiver announced itself");
    let (root, root_host) = &mut engines[0];
    for (to, f) in readies {
        assert_eq!(to, PeerId(0));
        root.on_frame(PeerId(1), &f, 1_000, root_host);
    }
    // The root sends a batch per timer pass, each due at once.
    while root.next_timeout().is_some_and(|t| t <= 1_000) {
        root.on_timeout(1_000, root_host);
    }
    let frames: Vec<Vec<u8>> =
        root_host.sent.drain(..).filter_map(|(to, f)| (to == PeerId(1)).then_some(f)).collect();
    assert!(frames.len() > 100, "the root sent its fragments: {}", frames.len());
    frames
}

/// Answers the receiver's pending store jobs: the bytes go to the host buffer at each job's
/// offset, then the protocol hears the job is done.
fn answer(p: &mut Protocol, host: &mut Host, now: u64) -> usize {
    let jobs: Vec<_> = host.pending.drain(..).collect();
    for &(token, off) in &jobs {
        let bytes = p.staging(token).expect("a pending part is still staged").to_vec();
        assert_eq!(bytes.len(), token.len as usize, "a job's staging is its length");
        host.mem[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
        p.dma_done(token, true, now, host);
    }
    jobs.len()
}

#[test]
fn a_large_message_is_stored_in_parts_while_it_arrives_and_completes_after_the_last() {
    let len = 1 << 20;
    let mut engines = pair(len);
    let frames = start(&mut engines, len);
    let [(_, root_host), (p1, host1)] = &mut engines;
    let want = root_host.mem.clone();
    let mut parts = Vec::new();
    let (last, rest) = frames.split_last().unwrap();
    for (k, f) in rest.iter().enumerate() {
        p1.on_frame(PeerId(0), f, 2_000 + k as u64, host1);
        parts.extend(host1.pending.iter().map(|&(t, off)| (off, t.len)));
        answer(p1, host1, 2_000 + k as u64);
    }
    assert!(host1.done.is_empty(), "nothing completes before the last fragment");
    assert!(parts.len() >= 14, "parts stored while the message arrived: {}", parts.len());
    let before_last: u64 = parts.iter().map(|&(_, l)| u64::from(l)).sum();
    assert!(
        before_last >= u64::from(len) * 7 / 8,
        "{before_last} of {len} bytes stored before the last fragment"
    );
    assert_eq!(&host1.mem[..before_last as usize], &want[..before_last as usize]);

    // The last fragment: the MAC is checked, the tail is handed to the driver — and the
    // broadcast does not complete while that part is out.
    p1.on_frame(PeerId(0), last, 9_000, host1);
    assert_eq!(host1.pending.len(), 1, "one last part");
    parts.extend(host1.pending.iter().map(|&(t, off)| (off, t.len)));
    assert!(host1.done.is_empty(), "no completion before its bytes are stored");
    assert_eq!(answer(p1, host1, 9_500), 1);
    let outcome = host1.done.first().expect("completed once the last part was stored");
    assert_eq!(outcome.status, StatusKind::Ok);
    assert_eq!(outcome.bytes, u64::from(len));
    // The parts tile the message: contiguous, in order, no byte twice.
    let mut at = 0u64;
    for &(off, l) in &parts {
        assert_eq!(off, at, "parts {parts:?}");
        at += u64::from(l);
    }
    assert_eq!(at, u64::from(len));
    assert!(host1.mem == want, "the receiver holds the root's message");
}

#[test]
fn a_failed_part_fails_the_broadcast_and_a_late_answer_for_a_gone_one_is_ignored() {
    let len = 1 << 20;
    let mut engines = pair(len);
    let frames = start(&mut engines, len);
    let [_, (p1, host1)] = &mut engines;
    feed(p1, host1, &frames);
    let jobs: Vec<_> = host1.pending.drain(..).collect();
    assert!(jobs.len() >= 2, "{} parts", jobs.len());
    // The first part cannot be written (its host memory went away); the others can.
    for (i, &(token, _)) in jobs.iter().enumerate() {
        assert!(host1.done.is_empty(), "no completion while parts are out");
        p1.dma_done(token, i != 0, 10_000, host1);
    }
    assert_eq!(host1.done.len(), 1, "one completion");
    assert_eq!(host1.done[0].status, StatusKind::OutOfBounds, "never Ok with a part missing");
    // An answer for a job of the finished broadcast changes nothing.
    p1.dma_done(jobs[0].0, true, 11_000, host1);
    assert_eq!(host1.done.len(), 1);
    assert!(p1.staging(jobs[1].0).is_none(), "nothing of a failed broadcast is staged any more");
}

#[test]
fn parts_of_a_destroyed_communicators_broadcast_move_nothing_and_touch_its_successor_not() {
    let len = 1 << 20;
    let mut engines = pair(len);
    let frames = start(&mut engines, len);
    let [_, (p1, host1)] = &mut engines;
    feed(p1, host1, &frames[..frames.len() / 2]);
    let old: Vec<_> = host1.pending.drain(..).collect();
    assert!(old.len() >= 4, "parts out: {}", old.len());
    // The communicator goes while its parts are out: the broadcast fails, once.
    assert!(p1.destroy_comm(CommHandle(0), host1));
    assert_eq!(host1.done.len(), 1);
    assert_eq!(host1.done[0].status, StatusKind::CommunicatorBroken);
    // A new communicator takes the same handle and starts a broadcast of the same size: its
    // id, channel and range are those of the old parts.
    assert_eq!(p1.create_comm(spec(1, 0x52)).unwrap(), CommHandle(0), "the handle is reused");
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    p1.post_bcast(Post::plain(CommHandle(0), 0, buf, len, 2), 50_000, host1).unwrap();
    host1.sent.clear();
    for &(token, _) in &old {
        assert!(p1.staging(token).is_none(), "an old part has no bytes to move any more");
        p1.dma_done(token, true, 60_000, host1);
    }
    assert_eq!(host1.done.len(), 1, "the late answers completed nothing of the new broadcast");
}

/// The root seals a 1 MiB message a batch at a time: after the receiver's READY at most 32
/// fragments are out; each timer pass — due at once — adds at most 32, and none while its
/// driver still holds more than 64 actions queued; and the batches make the whole message, which
/// the receiver completes `Ok` with the root's bytes.
#[test]
fn the_root_sends_a_batch_per_pass_and_waits_while_its_queue_is_long() {
    let len = 1 << 20;
    let mut engines = pair(len);
    post_both(&mut engines, len);
    let readies: Vec<_> = engines[1].1.sent.drain(..).collect();
    let [(root, root_host), (p1, host1)] = &mut engines;
    for (_, f) in readies {
        root.on_frame(PeerId(1), &f, 1_000, root_host);
    }
    let first = root_host.sent.len();
    assert!((1..=32).contains(&first), "the first batch: {first} frames");
    // The driver's queue is long: the root's timer comes due, and it seals nothing.
    root_host.backlog = 65;
    assert!(root.next_timeout().is_some_and(|t| t <= 1_000), "the next batch is due at once");
    root.on_timeout(1_000, root_host);
    assert_eq!(root_host.sent.len(), first, "no batch while 65 actions wait");
    root_host.backlog = 64;
    let mut passes = 0;
    while root.next_timeout().is_some_and(|t| t <= 1_000) {
        let before = root_host.sent.len();
        root.on_timeout(1_000, root_host);
        assert!(
            root_host.sent.len() - before <= 32,
            "pass {passes}: {} frames",
            root_host.sent.len() - before
        );
        passes += 1;
    }
    let frames: Vec<_> = root_host.sent.drain(..).map(|(_, f)| f).collect();
    assert!(passes >= frames.len() / 32, "{} frames in {passes} passes", frames.len());
    host1.defer = false;
    feed(p1, host1, &frames);
    let outcome = host1.done.first().expect("the receiver completed");
    assert_eq!((outcome.status, outcome.bytes), (StatusKind::Ok, u64::from(len)));
    assert!(host1.mem == root_host.mem, "the receiver holds the root's message");
}
