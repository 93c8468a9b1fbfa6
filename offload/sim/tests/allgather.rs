//! ALLGATHER through whole engines on the simulated fabric: every rank's block arrives at its
//! place in every rank's receive buffer, byte for byte, with and without the send block in
//! place, one and several processes per node, on a clean fabric and one losing, reordering and
//! duplicating datagrams; several allgathers in flight at once; and each bad descriptor gets its
//! typed status at the rank that posted it.
use ringcast_abi::{Access, Opcode, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::World;
use ringcast_proto::config::{AllgatherBetween, AllgatherParts, EngineConfig, LocalRank};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

/// Rank `r`'s block of round `round`: bytes no other rank or round has.
fn block(r: u32, round: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 31 + r * 7 + round * 101 + 1) as u8).collect()
}

struct Rank {
    node: usize,
    local: u32,
    host: HostId,
    /// Per round: the receive region and, not in place, the send region.
    regions: Vec<(RegionKey, Option<RegionKey>)>,
}

/// A cluster of `nodes` engines with `ppn` processes each, every process's buffers for `rounds`
/// allgathers of `len`-byte blocks registered.
fn cluster(
    nodes: u32,
    ppn: u32,
    len: usize,
    rounds: u32,
    in_place: bool,
    faults: Faults,
    seed: u64,
) -> (Cluster, Vec<Rank>) {
    cluster_with(&vec![ppn; nodes as usize], len, rounds, in_place, faults, seed, &|_| {})
}

/// As [`cluster`] with `counts[n]` processes on node `n` (an uneven world when they differ),
/// every engine's configuration changed by `tweak`.
fn cluster_with(
    counts: &[u32],
    len: usize,
    rounds: u32,
    in_place: bool,
    faults: Faults,
    seed: u64,
    tweak: &dyn Fn(&mut EngineConfig),
) -> (Cluster, Vec<Rank>) {
    let world = World::from_counts(counts).unwrap();
    let engines = world_engines(&world, "allgather", tweak);
    let mut cluster = Cluster::new(
        engines,
        faults,
        SimRng::new(seed),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(seed ^ 7),
    );
    let size = world.size();
    let total = len as u64 * u64::from(size);
    let mut ranks = Vec::new();
    for r in 0..size {
        let (node, local) = world.locate(r).unwrap();
        let node = node as usize;
        let m = &mut cluster.nodes[node];
        let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
        m.engine.host_arrived(host);
        let mut regions = Vec::new();
        for round in 0..rounds {
            let seg = u64::from(local) << 48 | u64::from(round) << 8;
            let mut recv = vec![0u8; total as usize];
            let send = if in_place {
                recv[r as usize * len..(r as usize + 1) * len].copy_from_slice(&block(r, round, len));
                None
            } else {
                m.mem.insert(seg | 1, block(r, round, len));
                let key =
                    m.engine.register(host, SegmentHandle(seg | 1), len as u64, 0, len as u64, Access::READ);
                Some(key.unwrap())
            };
            m.mem.insert(seg, recv);
            let key =
                m.engine.register(host, SegmentHandle(seg), total, 0, total, Access::READ_WRITE).unwrap();
            regions.push((key, send));
        }
        ranks.push(Rank { node, local, host, regions });
    }
    (cluster, ranks)
}

/// Posts `rounds` allgathers at every rank (all of them before any runs), runs the cluster
/// until every one is published (or the event budget runs out) and returns the completions.
fn run(cluster: &mut Cluster, ranks: &[Rank], len: usize, rounds: u32) -> Vec<Published> {
    let before = cluster.published().len();
    let ours = |c: &Cluster| -> Vec<Published> {
        c.published()[before..].iter().filter(|p| p.cqe.opcode == Opcode::ALLGATHER).copied().collect()
    };
    for (r, rank) in ranks.iter().enumerate() {
        for round in 0..rounds {
            let (recv, send) = rank.regions[round as usize];
            let cookie = (r as u64) << 16 | u64::from(round);
            let d = SubmissionDescriptor::allgather(
                cookie,
                0,
                RegionRef { key: recv, offset: 0 },
                send.map(|key| RegionRef { key, offset: 0 }),
                len as u64,
            );
            cluster.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
    }
    let want = ranks.len() * rounds as usize;
    let mut steps = 0u64;
    while ours(cluster).len() < want {
        steps += 1;
        assert!(steps < 20_000_000, "allgathers did not finish");
        if cluster.step().is_none() {
            break;
        }
    }
    ours(cluster)
}

fn check(nodes: u32, ppn: u32, len: usize, rounds: u32, in_place: bool, faults: Faults, seed: u64) {
    check_counts(&vec![ppn; nodes as usize], len, rounds, in_place, faults, seed)
}

/// [`check`] with `counts[n]` processes on node `n`.
fn check_counts(counts: &[u32], len: usize, rounds: u32, in_place: bool, faults: Faults, seed: u64) {
    check_tweaked(counts, len, rounds, in_place, faults, seed, &|_| {})
}

/// [`check_counts`] with every engine's configuration changed by `tweak`.
fn check_tweaked(
    counts: &[u32],
    len: usize,
    rounds: u32,
    in_place: bool,
    faults: Faults,
    seed: u64,
    tweak: &dyn Fn(&mut EngineConfig),
) {
    let (mut c, ranks) = cluster_with(counts, len, rounds, in_place, faults, seed, tweak);
    let done = run(&mut c, &ranks, len, rounds);
    let size = ranks.len() as u32;
    assert_eq!(done.len(), ranks.len() * rounds as usize, "one completion per allgather per rank");
    for p in &done {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
        assert_eq!(p.cqe.bytes, len as u64 * u64::from(size));
    }
    for (r, rank) in ranks.iter().enumerate() {
        // A host's completions come in the order it posted.
        let mine: Vec<u64> = done
            .iter()
            .filter(|p| p.node == rank.node && p.host == rank.host)
            .map(|p| p.cqe.cookie)
            .collect();
        let posted: Vec<u64> = (0..rounds).map(|round| (r as u64) << 16 | u64::from(round)).collect();
        assert_eq!(mine, posted, "rank {r}");
        let local = rank.local;
        for round in 0..rounds {
            let seg = u64::from(local) << 48 | u64::from(round) << 8;
            let got = c.nodes[rank.node].mem.get(&seg).unwrap();
            for q in 0..size {
                let at = q as usize * len;
                assert!(
                    got[at..at + len] == block(q, round, len)[..],
                    "rank {r} round {round}: block {q} wrong"
                );
            }
        }
    }
}

fn lossy() -> Faults {
    Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 3_000, duplicate: 0.01, ..Faults::clean() }
}

#[test]
fn every_block_reaches_every_rank_in_place_and_not() {
    for in_place in [true, false] {
        check(4, 1, 1000, 1, in_place, Faults::clean(), 1);
        check(3, 2, 5000, 1, in_place, Faults::clean(), 2);
    }
}

#[test]
fn several_allgathers_in_flight_survive_loss_reordering_and_duplicates() {
    for seed in 0..4 {
        check(4, 2, 3000, 3, seed % 2 == 0, lossy(), 100 + seed);
    }
    // Blocks of many fragments, and more parts than the protocol has channels (24 ranks).
    check(6, 4, 20_000, 2, false, lossy(), 7);
}

/// Both compositions — leader-based (one part per engine, the node's blocks assembled into its
/// leader's buffer first) and one part per rank (the default) — deliver every block, with
/// loss, in place and not, on uniform and uneven worlds.
#[test]
fn leader_based_and_per_rank_compositions_both_gather_every_block() {
    let per_rank = |c: &mut EngineConfig| c.protocol.allgather_parts = AllgatherParts::Ranks;
    for (i, counts) in [&[3u32, 3, 3][..], &[4, 1, 2], &[1, 1, 1, 1]].into_iter().enumerate() {
        for in_place in [true, false] {
            let seed = 60 + i as u64 * 2 + u64::from(in_place);
            check_tweaked(counts, 1500, 2, in_place, lossy(), seed, &per_rank);
            check_tweaked(counts, 1500, 2, in_place, lossy(), seed, &|_| {});
        }
    }
}

/// Leader-based with recursive doubling between the leaders (`allgather_between = doubling`)
/// and round a ring of the engines (`ring`): powers of two and not (a fold of one to three
/// engines), uneven nodes, parts of many fragments, in place and not, with loss — every block
/// reaches every rank.
#[test]
fn recursive_doubling_between_the_leaders_gathers_every_block() {
    for between in [AllgatherBetween::Doubling, AllgatherBetween::Ring] {
        let tweak = move |c: &mut EngineConfig| c.protocol.allgather_between = between;
        let worlds: [&[u32]; 6] =
            [&[1, 1], &[2, 2, 2, 2], &[1, 1, 1, 1, 1], &[2, 1, 3, 1, 2, 1], &[3, 1, 2, 2, 1, 1, 1], &[1; 8]];
        for (i, counts) in worlds.into_iter().enumerate() {
            let seed = 300 + i as u64;
            check_tweaked(counts, 1500, 2, i % 2 == 0, lossy(), seed, &tweak);
        }
        check_tweaked(&[2, 1, 3], 20_000, 2, false, lossy(), 310, &tweak);
        check_tweaked(&[1, 2, 1, 1, 2], 700, 3, true, Faults::clean(), 311, &tweak);
    }
}

/// Issue 17 item 8: nodes holding different numbers of processes (30 ranks on 4 nodes as
/// 8+8+7+7, and 2+1+3), with loss: every block reaches every rank.
#[test]
fn an_uneven_world_gathers_every_block() {
    check_counts(&[2, 1, 3], 2000, 2, false, lossy(), 21);
    check_counts(&[2, 1, 3], 700, 1, true, Faults::clean(), 22);
    check_counts(&[8, 8, 7, 7], 300, 1, false, lossy(), 23);
}

#[test]
fn bad_allgathers_get_typed_errors_at_the_rank_that_posted_them() {
    let len = 64usize;
    let (mut c, ranks) = cluster(2, 1, len, 1, false, Faults::clean(), 3);
    let (recv, send) = ranks[0].regions[0];
    let send = send.unwrap();
    let at = |key, offset| RegionRef { key, offset };
    let cases = [
        // A block of 0 bytes.
        (SubmissionDescriptor::allgather(1, 0, at(recv, 0), Some(at(send, 0)), 0), StatusKind::BadLength),
        // (A receive buffer too small, a send block inside the receive buffer, an unknown key,
        // a root set where allgather has none: refused for this rank's buffers or a field its
        // schedule does not read, such a call runs in step with the others' on no memory and
        // is not refused at once — `refused_buffers.rs`.)
        // A communicator this engine does not know.
        (
            SubmissionDescriptor::allgather(5, 99, at(recv, 0), None, len as u64),
            StatusKind::UnknownCommunicator,
        ),
    ];
    for (d, _) in &cases {
        c.with_engine(0, |e, now| e.handle_descriptor(ranks[0].host, d, now));
    }
    // The block of 0 bytes leaves this call's shape unknown at rank 0: it waits for rank 1's
    // call to learn it (`engine/call_shapes.rs`); rank 0's next descriptor, on another
    // communicator, is not held behind it and ends at once.
    let unknown = |c: &Cluster| -> Vec<(u64, u16)> {
        c.published().iter().map(|p| (p.cqe.cookie, p.cqe.status.0)).collect()
    };
    assert_eq!(unknown(&c), vec![(5, StatusKind::UnknownCommunicator as u16)]);
    let mut steps = 0;
    while c.step().is_some() && steps < 10_000 {
        steps += 1;
    }
    assert_eq!(c.published().len(), 1, "the call awaiting its shape does not end before rank 1 makes it");
    // Rank 1 makes it: rank 0 runs it in step on no memory and ends with its own status, rank
    // 1 is told that a rank's part failed.
    let d1 = SubmissionDescriptor::allgather(
        7,
        0,
        at(ranks[1].regions[0].0, 0),
        ranks[1].regions[0].1.map(|k| at(k, 0)),
        len as u64,
    );
    c.with_engine(ranks[1].node, |e, now| e.handle_descriptor(ranks[1].host, &d1, now));
    let mut steps = 0u64;
    while c.published().len() < 3 {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{:?}", c.published());
    }
    let of = |node| -> Vec<(u64, u16)> {
        c.published().iter().filter(|p| p.node == node).map(|p| (p.cqe.cookie, p.cqe.status.0)).collect()
    };
    // Each completion as its call ended: the unknown communicator's first.
    let want: Vec<(u64, u16)> = cases.iter().rev().map(|(d, s)| (d.cookie, *s as u16)).collect();
    assert_eq!(of(ranks[0].node), want);
    assert_eq!(of(ranks[1].node), vec![(7, StatusKind::RootFailed as u16)]);
    assert!(c.published().iter().all(|p| p.cqe.opcode == Opcode::ALLGATHER));
    // Both made the same calls: the next allgather is the same call at both, and succeeds.
    let done = run(&mut c, &ranks, len, 1);
    let next: Vec<_> = done.iter().filter(|p| p.cqe.cookie != 7 && p.cqe.cookie & 0xffff == 0).collect();
    assert_eq!(next.len(), 2, "{done:?}");
    assert!(next.iter().all(|p| p.cqe.status.0 == StatusKind::Ok as u16), "{done:?}");
}

/// Every rank but one posts its second allgather at once; the last arrives 417 ms later — an
/// application gap twice the peer timeout. The others' parts past the first synchronization
/// epoch wait behind it while their own earlier parts wait on the slow rank: a slow
/// application, not a dead engine, so nothing may fail (it broke the communicator once: the
/// blocked post's synchronization clock ran while this rank's own part of the epoch was still
/// waiting on the slow root).
#[test]
fn a_slow_rank_behind_a_long_gap_breaks_nothing() {
    let len = 356usize;
    for seed in 1..4u64 {
        let faults = Faults { ucast_loss: 0.09, mcast_loss: 0.5, ..Faults::clean() };
        let tweak = |c: &mut EngineConfig| {
            c.protocol.peer_timeout_ms = 200;
            c.protocol.repair_backoff_max_us = 5_000;
            c.protocol.preposted_slots = 0;
        };
        let (mut c, ranks) = cluster_with(&[2; 6], len, 2, true, faults, seed, &tweak);
        let post = |c: &mut Cluster, r: usize, round: usize| {
            let rank = &ranks[r];
            let (recv, _) = rank.regions[round];
            let cookie = (r as u64) << 16 | round as u64;
            let d = SubmissionDescriptor::allgather(
                cookie,
                0,
                RegionRef { key: recv, offset: 0 },
                None,
                len as u64,
            );
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        };
        let run_until = |c: &mut Cluster, n: usize, until: u64| {
            while c.published().len() < n && c.now() < until {
                if c.step().is_none() {
                    break;
                }
            }
        };
        for r in 0..ranks.len() {
            post(&mut c, r, 0);
        }
        run_until(&mut c, ranks.len(), u64::MAX);
        for r in 1..ranks.len() {
            post(&mut c, r, 1);
        }
        let gap_end = c.now() + 417_000_000;
        run_until(&mut c, usize::MAX, gap_end);
        assert_eq!(c.published().len(), ranks.len(), "nobody finishes without the slow rank's block");
        post(&mut c, 0, 1);
        run_until(&mut c, 2 * ranks.len(), u64::MAX);
        let bad: Vec<(usize, u16)> =
            c.published().iter().filter(|p| p.cqe.status.0 != 0).map(|p| (p.node, p.cqe.status.0)).collect();
        assert_eq!(c.published().len(), 2 * ranks.len(), "seed {seed}");
        assert!(bad.is_empty(), "seed {seed}: failed (node, status): {bad:?}");
    }
}

/// A local process disagreeing on the block length (rank 1 of 2 × 2 gives half the others'):
/// its piece would land inside rank 0's place in the leader's node part and leave its own stale
/// — every other rank completing `Ok` with those bytes. Both exchanges between the leaders:
/// the assembly refuses pieces of different lengths, the communicator breaks, and no rank
/// completes `Ok` with a block other than its owner's.
#[test]
fn a_local_process_disagreeing_on_the_length_is_never_gathered() {
    let len = 64usize;
    for between in [AllgatherBetween::Multicast, AllgatherBetween::Doubling, AllgatherBetween::Ring] {
        let tweak = move |c: &mut EngineConfig| c.protocol.allgather_between = between;
        let (mut c, ranks) = cluster_with(&[2, 2], len, 1, false, Faults::clean(), 41, &tweak);
        for (r, rank) in ranks.iter().enumerate() {
            let (recv, send) = rank.regions[0];
            let mine = if r == 1 { len / 2 } else { len } as u64;
            let (recv, send) =
                (RegionRef { key: recv, offset: 0 }, RegionRef { key: send.unwrap(), offset: 0 });
            let d = SubmissionDescriptor::allgather(r as u64, 0, recv, Some(send), mine);
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
        let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLGATHER).count();
        let mut steps = 0u64;
        while count(&c) < ranks.len() {
            steps += 1;
            assert!(steps < 20_000_000 && c.step().is_some(), "{between:?}: {} of 4 completions", count(&c));
        }
        for p in c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLGATHER) {
            let r = p.cqe.cookie as usize;
            if p.cqe.status.0 != StatusKind::Ok as u16 {
                continue;
            }
            assert_ne!(r, 1, "{between:?}: the disagreeing rank completed Ok");
            let seg = u64::from(ranks[r].local) << 48;
            let got = c.nodes[ranks[r].node].mem.get(&seg).unwrap();
            for q in 0..ranks.len() {
                assert!(
                    got[q * len..(q + 1) * len] == block(q as u32, 0, len)[..],
                    "{between:?}: rank {r} completed Ok with a wrong block {q}"
                );
            }
        }
    }
}
