//! The per-byte ledger counts exactly the copies, MAC passes and CRC passes the protocol makes
//! (issue 40, item 6): a two-rank broadcast of a known length, driven by hand, every frame
//! carried once, host memory reached at once. The expected counts are derived from what the
//! data path does, not read back from the protocol: a root loads the message (one copy) and
//! builds each fragment out of its channel (one copy), MACs it once; a receiver writes each
//! fragment's payload into its channel (one copy), stores the message into the host (one
//! copy), MACs it once; both sides CRC every datagram they send or receive, whole.
use ringcast_abi::StatusKind;
use ringcast_proto::comm::auth::Secret;
use ringcast_proto::comm::{CommSpec, GroupId, Layout, PeerId};
use ringcast_proto::config::EngineConfig;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::ledger::Side;
use ringcast_proto::schedule::bcast::Algorithm;
use ringcast_proto::transfer::protocol::{CommHandle, DmaJob, DmaStatus, Env, Outcome, Post, Protocol};

#[derive(Default)]
struct Host {
    mem: Vec<u8>,
    sent: Vec<(PeerId, Vec<u8>)>,
    done: Vec<Outcome>,
}

impl Env for Host {
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }
    fn multicast(&mut self, _: &GroupId, _: &[u8]) {
        panic!("two ranks broadcast point to point");
    }
    fn dma(&mut self, job: DmaJob, stage: &mut [u8]) -> DmaStatus {
        job.carry_out(&mut self.mem, stage)
    }
    fn complete(&mut self, _: u64, outcome: Outcome) {
        self.done.push(outcome);
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

/// Broadcasts `len` bytes from rank 0 to rank 1 and returns both protocols, their hosts and the
/// bytes of every datagram each one sent.
fn broadcast(len: u32) -> ([(Protocol, Host); 2], [u64; 2]) {
    let config = EngineConfig::default();
    let mut e = [0u32, 1].map(|rank| {
        let mut p = Protocol::new(&config, crc32c::crc32c);
        p.force_algorithm(Some(Algorithm::Linear));
        p.create_comm(spec(rank)).unwrap();
        let mem = if rank == 0 {
            (0..len).map(|i| (i * 13 + i / 999) as u8).collect()
        } else {
            vec![0; len as usize]
        };
        (p, Host { mem, ..Host::default() })
    });
    let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
    for (p, host) in e.iter_mut() {
        let post = Post { comm: CommHandle(0), root: 0, buf, len, token: 1, context: 0, window: 0 };
        p.post_bcast(post, 0, host).unwrap();
    }
    let mut sent_bytes = [0u64; 2];
    let mut now = 1_000;
    for _ in 0..10_000 {
        let mut moved = false;
        for from in 0..2 {
            let frames: Vec<_> = e[from].1.sent.drain(..).collect();
            for (to, f) in frames {
                sent_bytes[from] += f.len() as u64;
                let (p, host) = &mut e[to.0 as usize];
                p.on_frame(PeerId(from as u32), &f, now, host);
                moved = true;
            }
        }
        for (p, host) in e.iter_mut() {
            while p.next_timeout().is_some_and(|t| t <= now) {
                p.on_timeout(now, host);
                moved = true;
            }
        }
        if !moved && e.iter().all(|(_, h)| h.done.len() == 1) {
            break;
        }
        now += 1_000;
    }
    (e, sent_bytes)
}

#[test]
fn the_ledger_counts_each_copy_mac_and_crc_of_a_known_broadcast() {
    for len in [1u32, 4_000, 100_000, 1 << 20] {
        let (e, sent) = broadcast(len);
        let [(root, root_host), (recv, recv_host)] = &e;
        assert_eq!(recv_host.mem, root_host.mem, "{len}: delivered byte-exact");
        assert_eq!(recv_host.done[0].status, StatusKind::Ok);
        let n = u64::from(len);
        let (r, v) = (root.counters().ledger, recv.counters().ledger);
        // The root: its DMA load, then each fragment built once out of its channel.
        assert_eq!(r.copied_bytes(Side::Send), 2 * n, "{len}: root copies");
        assert_eq!(r.hashed_bytes(Side::Send), n, "{len}: the root MACs the message once");
        assert_eq!(r.crcd_bytes(Side::Send), sent[0], "{len}: the root CRCs what it sends");
        assert_eq!(r.crcd_bytes(Side::Receive), sent[1], "{len}: and checks what it receives");
        assert_eq!(r.delivered_bytes(Side::Send), n);
        assert_eq!(r.copied_bytes(Side::Receive), 0, "{len}: a root copies nothing in");
        // The receiver: each payload into its channel, the message into its host buffer.
        assert_eq!(v.copied_bytes(Side::Receive), 2 * n, "{len}: receiver copies");
        assert_eq!(v.hashed_bytes(Side::Receive), n, "{len}: the receiver MACs the message once");
        assert_eq!(v.crcd_bytes(Side::Receive), sent[0], "{len}: the receiver checks every datagram");
        assert_eq!(v.crcd_bytes(Side::Send), sent[1]);
        assert_eq!(v.delivered_bytes(Side::Receive), n);
        assert_eq!(v.copied_bytes(Side::Send), 0, "{len}: a receiver of two ranks forwards nothing");
        let per = v.per_byte(Side::Receive);
        assert_eq!((per.copies, per.hashed), (2.0, 1.0), "{len}");
    }
}
