//! ALLTOALL through whole engines on the simulated fabric: block `q` of every rank's send
//! buffer reaches rank `q`, at the sender's place in its result, byte for byte — one and several
//! processes per node, uniform and uneven worlds, a clean fabric and one losing, reordering and
//! duplicating datagrams, several alltoalls in flight, both compositions (one part per node,
//! the default, and one per rank); each bad descriptor typed at the rank that posted it.
use ringcast_abi::{
    Access, CommCreateHeader, Opcode, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::{AllgatherParts, AlltoallBetween, LocalRank};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

/// The block rank `from` sends rank `to` in round `round`.
fn block(from: u32, to: u32, round: u32, len: usize) -> Vec<u8> {
    let mut g = SimRng::new(u64::from(from) << 40 | u64::from(to) << 20 | u64::from(round));
    (0..len).map(|_| g.next_u64() as u8).collect()
}

struct Rank {
    node: usize,
    host: HostId,
    /// Per round: (work, send).
    regions: Vec<(RegionKey, RegionKey)>,
    /// Per round: the work buffer's segment.
    segs: Vec<u64>,
}

/// `protocol.alltoall_between`, `alltoall_pairwise_bytes` and `alltoall_aggregate`.
type Between = (AlltoallBetween, u32, bool);
const MULTICAST: Between = (AlltoallBetween::Multicast, 0, true);
/// Pairwise at every block length, aggregated per node where it can be.
const PAIRWISE: Between = (AlltoallBetween::Pairwise, 0, true);
/// Pairwise at every block length, one transfer per pair of ranks.
const DIRECT: Between = (AlltoallBetween::Pairwise, 0, false);

/// One run: a world of `counts` ranks per node, alltoalls of `len`-byte blocks, `rounds` of
/// them in flight, on the world or — `order`, the world rank of each of its ranks — on a
/// communicator created over every world rank in that order ([`COMM`]).
#[derive(Clone)]
struct Run<'a> {
    counts: &'a [u32],
    order: Option<&'a [u32]>,
    len: usize,
    rounds: u32,
    faults: Faults,
    seed: u64,
    parts: AllgatherParts,
    between: Between,
}

impl<'a> Run<'a> {
    /// One round on the world, a clean fabric, leader-based, the multicast alltoall.
    fn new(counts: &'a [u32], len: usize, seed: u64) -> Self {
        let (rounds, faults, parts, between) = (1, Faults::clean(), AllgatherParts::Nodes, MULTICAST);
        Run { counts, order: None, len, rounds, faults, seed, parts, between }
    }

    /// The communicator's handle.
    fn comm(&self) -> u64 {
        if self.order.is_some() {
            COMM
        } else {
            0
        }
    }
}

/// The engines and ranks of `run`, in the communicator's order, every rank's send buffers
/// holding its blocks for the communicator's ranks.
fn cluster(run: &Run) -> (Cluster, Vec<Rank>) {
    let Run { counts, len, rounds, seed, parts, between, .. } = *run;
    let world = World::from_counts(counts).unwrap();
    let engines = world_engines(&world, "alltoall", &|c| {
        c.protocol.allgather_parts = parts;
        c.protocol.alltoall_between = between.0;
        c.protocol.alltoall_pairwise_bytes = between.1;
        c.protocol.alltoall_aggregate = between.2;
        // An allgather beside the alltoalls (`another_kind_of_call_…`) swaps by doubling, set:
        // on two engines the cost model prices doubling and multicast the same.
        c.protocol.allgather_between = ringcast_proto::config::AllgatherBetween::Doubling;
    });
    let mut c = Cluster::new(
        engines,
        run.faults.clone(),
        SimRng::new(seed),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(seed ^ 5),
    );
    let size = world.size();
    let whole = len * size as usize;
    let work_len = (whole * (size as usize + 1)) as u64;
    let identity: Vec<u32> = (0..world.size()).collect();
    let order = run.order.unwrap_or(&identity);
    let mut ranks = Vec::new();
    for (r, &w) in order.iter().enumerate() {
        let r = r as u32;
        let (node, local) = world.locate(w).unwrap();
        let m = &mut c.nodes[node as usize];
        let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
        m.engine.host_arrived(host);
        let (mut regions, mut segs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let seg = u64::from(local) << 48 | u64::from(round) << 8;
            let send: Vec<u8> = (0..size).flat_map(|q| block(r, q, round, len)).collect();
            m.mem.insert(seg | 1, send);
            let sk = m
                .engine
                .register(host, SegmentHandle(seg | 1), whole as u64, 0, whole as u64, Access::READ)
                .unwrap();
            m.mem.insert(seg, vec![0xEE; work_len as usize]);
            let wk = m
                .engine
                .register(host, SegmentHandle(seg), work_len, 0, work_len, Access::READ_WRITE)
                .unwrap();
            regions.push((wk, sk));
            segs.push(seg);
        }
        ranks.push(Rank { node: node as usize, host, regions, segs });
    }
    if run.order.is_some() {
        create(&mut c, &ranks, order, seed);
    }
    (c, ranks)
}

/// The handle of the communicator [`cluster`] creates.
const COMM: u64 = 0xC0FFEE1;

/// Creates communicator [`COMM`] over `order` at every rank, and runs until each one's
/// `COMM_CREATE` completed `Ok`.
fn create(c: &mut Cluster, ranks: &[Rank], order: &[u32], seed: u64) {
    let mut key = [0u8; 32];
    key.iter_mut().enumerate().for_each(|(i, b)| *b = (seed as u8) ^ (i as u8) | 1);
    for (r, rank) in ranks.iter().enumerate() {
        let header = CommCreateHeader::new(order.len() as u32, r as u32, seed, [7; 14], key);
        let record: Vec<u8> = header.record(order).collect();
        let m = &mut c.nodes[rank.node];
        let seg = rank.segs[0] | 2;
        let record_len = record.len() as u64;
        m.mem.insert(seg, record);
        let rk = m
            .engine
            .register(rank.host, SegmentHandle(seg), record_len, 0, record_len, Access::READ)
            .unwrap();
        let d = SubmissionDescriptor::comm_create(1, COMM, RegionRef { key: rk, offset: 0 }, record_len);
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
    }
    let created = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::COMM_CREATE).count();
    let mut steps = 0u64;
    while created(c) < ranks.len() {
        steps += 1;
        assert!(steps < 1_000_000 && c.step().is_some(), "communicator not created");
    }
    for p in c.published().iter().filter(|p| p.cqe.opcode == Opcode::COMM_CREATE) {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
    }
}

fn alltoalls(c: &Cluster) -> Vec<Published> {
    c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLTOALL).copied().collect()
}

/// Runs `rounds` alltoalls on every rank of a world of `counts` in both compositions and checks
/// every block — and that each composition posted the broadcasts it says: one per node per
/// alltoall, or one per rank.
fn check(counts: &[u32], len: usize, rounds: u32, faults: Faults, seed: u64) {
    for parts in [AllgatherParts::Nodes, AllgatherParts::Ranks] {
        let posted =
            check_with(&Run { rounds, faults: faults.clone(), parts, ..Run::new(counts, len, seed) });
        let per_call = if parts.leader_based() { counts.len() } else { counts.iter().sum::<u32>() as usize };
        let want = per_call * rounds as usize;
        assert!(
            posted.iter().all(|&p| p == want),
            "{counts:?} {parts}: broadcasts posted {posted:?}, want {want}"
        );
    }
}

/// One run of [`check`]; returns the broadcasts each engine posted on the run's communicator.
fn check_with(run: &Run) -> Vec<usize> {
    let (mut c, ranks) = cluster(run);
    let Run { counts, len, rounds, parts, .. } = *run;
    let comm = run.comm();
    // Last rank first: a node's leader is never the first of its processes to post.
    for (r, rank) in ranks.iter().enumerate().rev() {
        for round in 0..rounds {
            let (wk, sk) = rank.regions[round as usize];
            let cookie = (r as u64) << 16 | u64::from(round);
            let d = SubmissionDescriptor::alltoall(
                cookie,
                comm,
                RegionRef { key: wk, offset: 0 },
                RegionRef { key: sk, offset: 0 },
                len as u64,
            );
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
    }
    let want = ranks.len() * rounds as usize;
    let mut steps = 0u64;
    while alltoalls(&c).len() < want {
        steps += 1;
        assert!(steps < 20_000_000, "alltoalls did not finish");
        if c.step().is_none() {
            break;
        }
    }
    let done = alltoalls(&c);
    assert_eq!(done.len(), want, "{counts:?}: one completion per alltoall per rank");
    let size = ranks.len() as u32;
    for p in &done {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{counts:?}: {p:?}");
        assert_eq!(p.cqe.bytes, (len * ranks.len()) as u64);
    }
    for (q, rank) in ranks.iter().enumerate() {
        for round in 0..rounds {
            let got = c.nodes[rank.node].mem.get(&rank.segs[round as usize]).unwrap();
            for r in 0..size {
                let at = r as usize * len;
                assert!(
                    got[at..at + len] == block(r, q as u32, round, len)[..],
                    "{counts:?} {parts} round {round}: rank {q}'s block from rank {r} wrong"
                );
            }
        }
    }
    c.nodes
        .iter()
        .map(|n| {
            let list = n.engine.comm_list();
            list.iter().find(|i| i.handle == comm).map_or(0, |i| i.state.posted as usize)
        })
        .collect()
}

/// The pairwise exchange between the engines (`alltoall_between = pairwise`), aggregated per
/// node (one transfer per pair of engines, staged in the leaders' work buffers) and direct (one
/// per pair of ranks): every block from every rank, on even and uneven worlds of 2-7 engines
/// (odd and even: the step where both directions meet), several calls in flight, blocks of many
/// fragments, with loss — and no broadcast on the world: every block went over a pair
/// communicator or a local copy. A transposed staging fails it.
#[test]
fn the_pairwise_exchange_delivers_every_block_over_the_pairs() {
    let pairwise = |counts: &[u32], len, rounds, faults: Faults, seed| {
        for way in [PAIRWISE, DIRECT] {
            let posted = check_with(&Run {
                rounds,
                faults: faults.clone(),
                between: way,
                ..Run::new(counts, len, seed)
            });
            assert!(posted.iter().all(|&p| p == 0), "{counts:?}: world broadcasts {posted:?}");
        }
    };
    pairwise(&[1, 1], 100, 1, Faults::clean(), 50);
    pairwise(&[2, 2, 2, 2], 300, 2, lossy(), 51);
    pairwise(&[2, 1, 3], 64, 3, lossy(), 52);
    pairwise(&[1, 1, 1, 1, 1], 1000, 2, lossy(), 53);
    pairwise(&[3, 1, 2, 2, 1, 1, 1], 200, 1, lossy(), 54);
    pairwise(&[2, 2], 20_000, 2, lossy(), 55);
}

/// The pairwise exchange on communicators whose engines' ranks are not consecutive (created
/// here over a block world in another order): ranks alternating between two engines, and an
/// uneven mix where one engine's ranks form two runs and another's single ranks — aggregated
/// (the staging copies a run at a time) and direct, with loss. Every block arrives, and none
/// went by broadcast on the communicator (it took the multicast alltoall before).
#[test]
fn the_pairwise_exchange_runs_on_any_placement() {
    let on = |counts: &[u32], order: &[u32], len, seed| {
        for way in [PAIRWISE, DIRECT] {
            let run = Run {
                order: Some(order),
                rounds: 2,
                faults: lossy(),
                between: way,
                ..Run::new(counts, len, seed)
            };
            let posted = check_with(&run);
            assert!(posted.iter().all(|&p| p == 0), "{order:?}: broadcasts {posted:?}");
        }
    };
    // Engine 0 holds ranks 0, 2; engine 1 holds 1, 3.
    on(&[2, 2], &[0, 2, 1, 3], 300, 80);
    // Engine 0 holds 0, 1, 3 (two runs); engine 1 holds 2, 4; engine 2 holds 5, 6.
    on(&[3, 2, 2], &[0, 1, 3, 2, 4, 5, 6], 200, 81);
    // Engine 0 holds 0, 2, 4; engine 1 holds 1, 5; engine 2 holds 3, 6.
    on(&[3, 2, 2], &[0, 3, 1, 5, 2, 4, 6], 1000, 82);
}

/// The rule of `alltoall_between = pairwise` (`model/compose.rs`): pairwise with one rank per engine, aggregated per
/// node where engines hold several ranks and the staging fits, and from
/// `alltoall_pairwise_bytes` otherwise; below it the multicast alltoall — counted by the
/// broadcasts on the world.
#[test]
fn the_rule_picks_pairwise_aggregated_or_the_multicast_alltoall() {
    let default = (AlltoallBetween::Pairwise, 4096, true);
    let run =
        |counts, len, way| check_with(&Run { faults: lossy(), between: way, ..Run::new(counts, len, 60) });
    assert_eq!(run(&[1, 1, 1], 100, default), [0, 0, 0], "one rank per engine: pairwise");
    assert_eq!(run(&[2, 2], 100, default), [0, 0], "aggregated per node: pairwise");
    assert_eq!(run(&[3, 1], 100, default), [2, 2], "the staging would not fit: multicast");
    assert_eq!(run(&[3, 1], 4096, default), [0, 0], "from 4 KiB: pairwise, direct");
    let unaggregated = (AlltoallBetween::Pairwise, 4096, false);
    assert_eq!(run(&[2, 2], 100, unaggregated), [2, 2], "short blocks: one multicast per node");
    assert_eq!(run(&[2, 2], 4096, unaggregated), [0, 0]);
}

/// Two processes of one node in different calls at one slot — one a pairwise alltoall, the
/// other an allgather (recursive doubling between the leaders, set) — and the other
/// node's alltoalls: the slot cannot run; every rank's call ends, typed, none `Ok` (it waited
/// forever before: each kind's engine work waited for the other's).
#[test]
fn another_kind_of_call_beside_a_pairwise_alltoall_ends_typed() {
    let len = 4096usize;
    let (mut c, ranks) = cluster(&Run { between: PAIRWISE, ..Run::new(&[2, 2], len, 70) });
    for (r, rank) in ranks.iter().enumerate() {
        let (wk, sk) = rank.regions[0];
        let (work, send) = (RegionRef { key: wk, offset: 0 }, RegionRef { key: sk, offset: 0 });
        let d = match r {
            1 => SubmissionDescriptor::allgather(r as u64, 0, work, Some(send), len as u64),
            _ => SubmissionDescriptor::alltoall(r as u64, 0, work, send, len as u64),
        };
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
    }
    let done = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode != Opcode::NOP).count();
    let mut steps = 0u64;
    while done(&c) < ranks.len() {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{} of 4 calls ended", done(&c));
    }
    for p in c.published() {
        assert_ne!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
    }
}

fn lossy() -> Faults {
    Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 3_000, duplicate: 0.01, ..Faults::clean() }
}

#[test]
fn every_rank_gets_its_block_from_every_rank() {
    check(&[1, 1, 1, 1], 100, 1, Faults::clean(), 1);
    check(&[2, 2, 2], 333, 1, Faults::clean(), 2);
    check(&[2, 1, 3], 64, 1, Faults::clean(), 3);
}

/// Under `nodes`, an alltoall whose node parts would not go eagerly (more fragments than the
/// pre-posted slots) is composed per rank, at every rank alike: 20 KB blocks on 2 × 2 ranks
/// post one part per rank, and every block still arrives.
#[test]
fn long_blocks_are_not_aggregated() {
    let posted = check_with(&Run { faults: lossy(), ..Run::new(&[2, 2], 20_000, 30) });
    assert_eq!(posted, [4, 4], "one part per rank");
}

#[test]
fn several_alltoalls_in_flight_survive_loss_reordering_and_duplicates() {
    for seed in 0..3 {
        check(&[2, 2, 2], 500, 3, lossy(), 10 + seed);
    }
    check(&[3, 1, 4], 200, 2, lossy(), 20);
}

#[test]
fn bad_alltoalls_get_typed_errors_at_the_rank_that_posted_them() {
    let len = 64u64;
    let (mut c, ranks) = cluster(&Run { rounds: 3, ..Run::new(&[1, 1], len as usize, 4) });
    let (wk, sk) = ranks[0].regions[0];
    let at = |key, offset| RegionRef { key, offset };
    let cases = [
        // A block of 0 bytes.
        (SubmissionDescriptor::alltoall(1, 0, at(wk, 0), at(sk, 0), 0), StatusKind::BadLength),
        // (A work buffer short of the scratch, a send buffer inside the work buffer, no send
        // buffer (no in place), a root set: refused for this rank's buffers or a field its
        // schedule does not read, such a call runs in step with the others' on no memory
        // instead of being refused at once — `refused_buffers.rs`.)
        // A communicator this engine does not know.
        (SubmissionDescriptor::alltoall(6, 99, at(wk, 0), at(sk, 0), len), StatusKind::UnknownCommunicator),
        // More than the engine's message limit in all.
        (SubmissionDescriptor::alltoall(7, 0, at(wk, 0), at(sk, 0), 1 << 30), StatusKind::BadLength),
    ];
    for (d, _) in &cases {
        c.with_engine(0, |e, now| e.handle_descriptor(ranks[0].host, d, now));
    }
    // The lengths leave the first and third calls' shapes unknown at rank 0: each waits for
    // rank 1's call to learn it (`engine/call_shapes.rs`), the third also behind the first (one
    // communicator); the unknown communicator's ends at once (completions are not held in
    // posting order).
    let unknown = (6, StatusKind::UnknownCommunicator as u16);
    assert_eq!(
        c.published().iter().map(|p| (p.cqe.cookie, p.cqe.status.0)).collect::<Vec<_>>(),
        vec![unknown]
    );
    // Rank 1 makes its two calls: rank 0 runs both in step on no memory, with its own
    // statuses, and rank 1 is told that a rank's part failed.
    let post = |c: &mut Cluster, r: usize, k: usize, cookie: u64| {
        let (wk, sk) = ranks[r].regions[k];
        let d = SubmissionDescriptor::alltoall(cookie, 0, at(wk, 0), at(sk, 0), len);
        c.with_engine(ranks[r].node, |e, now| e.handle_descriptor(ranks[r].host, &d, now));
    };
    post(&mut c, 1, 0, 0x10);
    post(&mut c, 1, 1, 0x11);
    let mut steps = 0u64;
    while alltoalls(&c).len() < cases.len() + 2 {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{:?}", c.published());
    }
    let of = |c: &Cluster, node| -> Vec<(u64, u16)> {
        alltoalls(c).iter().filter(|p| p.node == node).map(|p| (p.cqe.cookie, p.cqe.status.0)).collect()
    };
    // Each as its call ended: the unknown communicator's first, then the two in step.
    let want: Vec<(u64, u16)> = [1, 0, 2].iter().map(|&i| (cases[i].0.cookie, cases[i].1 as u16)).collect();
    assert_eq!(of(&c, ranks[0].node), want);
    let failed = StatusKind::RootFailed as u16;
    assert_eq!(of(&c, ranks[1].node), vec![(0x10, failed), (0x11, failed)]);
    // Both made the same calls: the next alltoall is the same call at both, and succeeds.
    post(&mut c, 0, 2, 0x20);
    post(&mut c, 1, 2, 0x21);
    while alltoalls(&c).len() < cases.len() + 4 {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{:?}", c.published());
    }
    let ok = StatusKind::Ok as u16;
    assert!(alltoalls(&c)[cases.len() + 2..].iter().all(|p| p.cqe.status.0 == ok), "{:?}", alltoalls(&c));
}
