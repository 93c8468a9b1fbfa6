//! The per-byte ledger counts exactly the copies, MAC passes and CRC passes the protocol makes
//! (issue 40, item 6): a two-rank broadcast of a known length, driven by hand, every frame
//! carried once, host memory reached at once. The expected counts are derived from what the
//! data path does, not read back from the protocol: a root loads the message (one copy) and,
//! for a driver that gathers each frame into the wire from where its parts lie (the engine's
//! outbox; `Env::send_around`), copies nothing more — its fragments leave as header and
//! trailer around the channel's bytes — while for a driver that takes whole frames it builds
//! each fragment out of its channel (one copy more); it MACs the message once; a receiver writes each
//! fragment's payload into its channel (one copy), stores the message into the host (one
//! copy), MACs it once; both sides CRC every datagram they send or receive, whole.
use ringcast_abi::StatusKind;
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::{CommSpec, GroupId, Layout, PeerId};
use ringcast_proto::config::{Auth, EngineConfig};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::ledger::Side;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{
    ChannelRange, CommHandle, Dest, DmaJob, Env, HostDriver, Outcome, Post, Protocol,
};
use std::collections::VecDeque;

#[derive(Default)]
pub struct Host {
    mem: Vec<u8>,
    sent: Vec<(PeerId, Vec<u8>)>,
    done: Vec<Outcome>,
    /// The driver gathers a fragment's header, payload and trailer into the wire itself (as
    /// the engine's runner does into a ring slot), instead of taking whole frames.
    gather: bool,
    /// DMA jobs handed over, answered after each handler.
    jobs: VecDeque<DmaJob>,
}

impl Env for Host {
    fn send_around(
        &mut self,
        to: Dest<'_>,
        range: ChannelRange,
        data: &[u8],
        scratch: &mut Vec<u8>,
        whole_len: usize,
        whole: &mut dyn FnMut(&mut [u8]) -> usize,
        around_len: usize,
        around: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> (usize, bool) {
        let Dest::Peer(to, _) = to else { panic!("two ranks broadcast point to point") };
        if !self.gather {
            let mut built = 0;
            self.send_built(Dest::Peer(to, 0), whole_len, scratch, &mut |out| {
                built = whole(out);
                built
            });
            return (built, built > 0);
        }
        assert_eq!(data.len(), range.len as usize, "the range names the payload");
        let mut head = vec![0; around_len];
        let n = around(&mut head);
        assert!(n > 0);
        // The wire's one copy of the payload: the driver's, not the protocol's.
        let (h, trailer) = head[..n].split_at(ringcast_abi::wire::WIRE_HEADER_LEN);
        self.sent.push((to, [h, data, trailer].concat()));
        (n + data.len(), false)
    }
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {
        panic!("two ranks broadcast point to point");
    }
    fn dma(&mut self, job: DmaJob) {
        self.jobs.push_back(job);
    }
    fn complete(&mut self, _: u64, outcome: Outcome) {
        self.done.push(outcome);
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

fn spec(rank: u32) -> CommSpec {
    CommSpec {
        cookie: 0x77,
        group: [0x77; 14],
        members: (0..2).map(PeerId).collect(),
        my_rank: rank,
        seed: 3,
        layout: Layout::FLAT,
        key: Secret([0x77; 32]),
    }
}

/// Broadcasts `len` bytes from rank 0 to rank 1 with the root authenticating by `auths[0]` and
/// the receiver by `auths[1]`, and returns both protocols, their hosts and the bytes of every
/// datagram each one sent.
pub fn broadcast(len: u32, auths: [Auth; 2]) -> ([(Protocol, Host); 2], [u64; 2]) {
    broadcast_via(len, auths, true)
}

/// [`broadcast`], the drivers gathering frames into the wire (`gather`) or taking them whole.
pub fn broadcast_via(len: u32, auths: [Auth; 2], gather: bool) -> ([(Protocol, Host); 2], [u64; 2]) {
    let mut e = [0u32, 1].map(|rank| {
        let config = EngineConfig::default().with(|c| c.protocol.auth = auths[rank as usize]);
        let mut p = Protocol::new(&config, crc32c::crc32c);
        p.force_algorithm(Some(Algorithm::Linear));
        p.create_comm(spec(rank)).unwrap();
        let mem = if rank == 0 {
            (0..len).map(|i| (i * 13 + i / 999) as u8).collect()
        } else {
            vec![0; len as usize]
        };
        (p, Host { mem, gather, ..Host::default() })
    });
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    for (p, host) in e.iter_mut() {
        let post = Post::plain(CommHandle(0), 0, buf, len, 1);
        p.post_bcast(post, 0, host).unwrap();
        p.answer_jobs(0, host);
    }
    let mut sent_bytes = [0u64; 2];
    let mut now = 1_000;
    // Up to 3 s of simulated time: past the peer timeout (2 s) of a broadcast that cannot end.
    for _ in 0..3_000 {
        let mut moved = false;
        for from in 0..2 {
            let frames: Vec<_> = e[from].1.sent.drain(..).collect();
            for (to, f) in frames {
                sent_bytes[from] += f.len() as u64;
                let (p, host) = &mut e[to.0 as usize];
                p.on_frame(PeerId(from as u32), &f, now, host);
                p.answer_jobs(now, host);
                moved = true;
            }
        }
        for (p, host) in e.iter_mut() {
            while p.next_timeout().is_some_and(|t| t <= now) {
                p.on_timeout(now, host);
                p.answer_jobs(now, host);
                moved = true;
            }
        }
        if !moved && e.iter().all(|(_, h)| h.done.len() == 1) {
            break;
        }
        now += 1_000_000;
    }
    (e, sent_bytes)
}

#[test]
fn the_ledger_counts_each_copy_mac_and_crc_of_a_known_broadcast() {
    for ((len, auth), gather) in [1u32, 4_000, 100_000, 1 << 20]
        .into_iter()
        .flat_map(|l| [(l, Auth::Mac), (l, Auth::Tag)])
        .flat_map(|la| [(la, true), (la, false)])
    {
        // With `tag` no byte of the message is hashed, on either side.
        let macs = u64::from(auth == Auth::Mac);
        let (e, sent) = broadcast_via(len, [auth; 2], gather);
        let [(root, root_host), (recv, recv_host)] = &e;
        assert_eq!(recv_host.mem, root_host.mem, "{len}: delivered byte-exact");
        assert_eq!(recv_host.done[0].status, StatusKind::Ok);
        let n = u64::from(len);
        let (r, v) = (root.counters().ledger, recv.counters().ledger);
        // The root: its DMA load; then, for a driver that takes whole frames, each fragment
        // built once out of its channel — a gathering driver's fragments leave from the
        // channel, no copy of the protocol's (the wire's is the driver's).
        let builds = u64::from(!gather);
        assert_eq!(r.copied_bytes(Side::Send), (1 + builds) * n, "{len} gather {gather}: root copies");
        assert_eq!(r.per_byte(Side::Send).copies, (1 + builds) as f64, "{len} gather {gather}");
        assert_eq!(
            r.hashed_bytes(Side::Send),
            macs * n,
            "{len} {auth}: the root MACs the message once (mac) or never (tag)"
        );
        assert_eq!(r.crcd_bytes(Side::Send), sent[0], "{len}: the root CRCs what it sends");
        assert_eq!(r.crcd_bytes(Side::Receive), sent[1], "{len}: and checks what it receives");
        assert_eq!(r.delivered_bytes(Side::Send), n);
        assert_eq!(r.copied_bytes(Side::Receive), 0, "{len}: a root copies nothing in");
        // The receiver: each payload into its channel, the message into its host buffer.
        assert_eq!(v.copied_bytes(Side::Receive), 2 * n, "{len}: receiver copies");
        assert_eq!(
            v.hashed_bytes(Side::Receive),
            macs * n,
            "{len} {auth}: the receiver MACs the message once (mac) or never (tag)"
        );
        assert_eq!(v.crcd_bytes(Side::Receive), sent[0], "{len}: the receiver checks every datagram");
        assert_eq!(v.crcd_bytes(Side::Send), sent[1]);
        assert_eq!(v.delivered_bytes(Side::Receive), n);
        assert_eq!(v.copied_bytes(Side::Send), 0, "{len}: a receiver of two ranks forwards nothing");
        let per = v.per_byte(Side::Receive);
        assert_eq!((per.copies, per.hashed), (2.0, macs as f64), "{len} {auth}");
    }
}

/// Engines that disagree on `protocol.auth` never deliver to each other: every frame of the
/// other setting is dropped for its version byte (counted, `drops_bad_version_total`) before
/// its tag is even looked at, and the receiver's broadcast ends typed (`PeerUnreachable`) after
/// the peer timeout instead of completing — whichever side runs which setting.
#[test]
fn engines_of_different_settings_refuse_each_other_counted() {
    use ringcast_abi::frame::DropReason;
    for auths in [[Auth::Mac, Auth::Tag], [Auth::Tag, Auth::Mac]] {
        let (e, sent) = broadcast(10_000, auths);
        let [(root, _), (recv, recv_host)] = &e;
        assert!(sent[0] > 0 && sent[1] > 0, "{auths:?}: both sent frames");
        let bad = |p: &Protocol| p.counters().drops[DropReason::BadVersion as usize];
        assert!(bad(recv) > 0, "{auths:?}: the receiver dropped the root's frames for their version");
        assert!(bad(root) > 0, "{auths:?}: the root dropped the receiver's");
        assert_eq!(
            recv.counters().drops[DropReason::BadTag as usize],
            0,
            "{auths:?}: refused before the tag"
        );
        assert_eq!(recv_host.done.len(), 1, "{auths:?}: the receiver's broadcast ended");
        assert_eq!(recv_host.done[0].status, StatusKind::PeerUnreachable, "{auths:?}");
        assert!(recv_host.mem.iter().all(|&b| b == 0), "{auths:?}: nothing stored");
    }
}
