//! Collectives on two communicators, posted in different orders at different ranks and finished
//! in any order, as MPI allows: each communicator's calls are made in the same order at every
//! rank, but calls on different communicators in any relative order, and a non-blocking call
//! may be waited for before an earlier one. Whole engines on the simulated fabric; every process
//! posts through its submission queue ([`Cluster::submit`]), so the engine's admission rule
//! decides when a descriptor is taken in, as a runner's does.
//!
//! Before, an engine took a host's descriptors only while nothing of that host was in flight,
//! and published each host's completions in posting order. Two ranks posting `c1, c2` and
//! `c2, c1` then each had one taken in and the other waiting behind it — each waiting for the
//! other's (a deadlock); and in the A/B program below, rank A's `c2` completion was held behind
//! its `c1`, whose other half rank B posts only after A, having seen `c2` complete, "sends" to
//! it (a deadlock MPI forbids). Each test here hung (to its virtual-time bound) on that code.
use ringcast_abi::{
    Access, CommCreateHeader, Opcode, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::LocalRank;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_proto::Nanos;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published, SIM_CQ_ENTRIES};
use ringcast_sim::fabric::Faults;

/// The two communicators' handles: the first over the world ranks in order, the second over
/// them reversed.
const COMMS: [u64; 2] = [0xC0_11, 0xC0_22];
/// Longest message (several fragments).
const MAXLEN: usize = 5000;
/// Virtual time any one wait may take before the test calls it a hang.
const WAIT: Nanos = 10_000_000_000;

struct Rank {
    node: usize,
    host: HostId,
    /// This process's rank in each communicator.
    crank: [u32; 2],
    /// Its buffer on each communicator: region key and segment.
    bufs: [(RegionKey, u64); 2],
}

fn len_of(c: usize, k: u64) -> usize {
    1 + (k as usize * 397 + c * 1009) % MAXLEN
}

fn pattern(c: usize, k: u64) -> Vec<u8> {
    (0..len_of(c, k)).map(|i| (c * 101 + k as usize * 31 + i * 13 + (i >> 8)) as u8).collect()
}

fn cookie(c: usize, k: u64) -> u64 {
    (c as u64 + 1) << 32 | k
}

/// A cluster of `world` with every process attached and both communicators created.
fn setup(world: &World, seed: u64, faults: Faults, dma: DmaTiming) -> (Cluster, Vec<Rank>) {
    let engines = world_engines(world, "comm-orders", &|_| {});
    let mut c =
        Cluster::new(engines, faults, SimRng::new(seed), crc32c::crc32c, dma, SimRng::new(seed ^ 0x5a));
    let n = world.size();
    let mut ranks = Vec::new();
    for r in 0..n {
        let (node, local) = world.locate(r).unwrap();
        let m = &mut c.nodes[node as usize];
        let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
        m.engine.host_arrived(host);
        let mut bufs = [(RegionKey::NONE, 0); 2];
        for (i, b) in bufs.iter_mut().enumerate() {
            let seg = u64::from(local) << 48 | (i as u64) << 8 | 0x5;
            m.mem.insert(seg, vec![0xEE; MAXLEN]);
            let l = MAXLEN as u64;
            *b = (m.engine.register(host, SegmentHandle(seg), l, 0, l, Access::READ_WRITE).unwrap(), seg);
        }
        ranks.push(Rank { node: node as usize, host, crank: [r, n - 1 - r], bufs });
    }
    for (i, &handle) in COMMS.iter().enumerate() {
        let order: Vec<u32> = if i == 0 { (0..n).collect() } else { (0..n).rev().collect() };
        let key = [i as u8 + 0x31; 32];
        for r in &ranks {
            let header = CommCreateHeader::new(n, r.crank[i], seed + i as u64, [i as u8 + 7; 14], key);
            let record: Vec<u8> = header.record(&order).collect();
            let m = &mut c.nodes[r.node];
            let seg = r.bufs[i].1 | 0x2;
            let len = record.len() as u64;
            m.mem.insert(seg, record);
            let rk = m.engine.register(r.host, SegmentHandle(seg), len, 0, len, Access::READ).unwrap();
            let d = SubmissionDescriptor::comm_create(
                cookie(i, 0xffff),
                handle,
                RegionRef { key: rk, offset: 0 },
                len,
            );
            c.submit(r.node, r.host, d);
        }
    }
    let created = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::COMM_CREATE).count();
    run_until(&mut c, "both communicators created", |c| created(c) == 2 * ranks.len());
    for p in c.published().iter().filter(|p| p.cqe.opcode == Opcode::COMM_CREATE) {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
    }
    (c, ranks)
}

/// Runs the cluster until `done` holds, for at most [`WAIT`] of virtual time.
fn run_until(c: &mut Cluster, what: &str, done: impl Fn(&Cluster) -> bool) {
    let deadline = c.now() + WAIT;
    while !done(c) {
        assert!(
            c.step().is_some() && c.now() < deadline,
            "{what}: not within {} s of virtual time (a hang); published so far: {:?}",
            WAIT / 1_000_000_000,
            c.published().iter().map(|p| (p.node, p.host.0, p.cqe.cookie)).collect::<Vec<_>>()
        );
    }
}

/// Posts rank `r`'s broadcast `k` on communicator `comm` (root: a rank of it) through its
/// submission queue, its buffer filled first (the pattern at the root, poison elsewhere).
fn post(c: &mut Cluster, r: &Rank, comm: usize, k: u64, root: u32) {
    let (key, seg) = r.bufs[comm];
    let len = len_of(comm, k);
    let bytes = if r.crank[comm] == root { pattern(comm, k) } else { vec![0xEE; len] };
    c.nodes[r.node].mem.get_mut(&seg).unwrap()[..len].copy_from_slice(&bytes);
    let d = SubmissionDescriptor::bcast(
        cookie(comm, k),
        COMMS[comm],
        root,
        RegionRef { key, offset: 0 },
        len as u64,
    );
    c.submit(r.node, r.host, d);
}

fn completion(c: &Cluster, r: &Rank, comm: usize, k: u64) -> Option<Published> {
    c.published()
        .iter()
        .find(|p| p.node == r.node && p.host == r.host && p.cqe.cookie == cookie(comm, k))
        .copied()
}

/// Broadcast `k` on `comm` completed at rank `r`, `Ok` and with the root's bytes.
fn check(c: &Cluster, r: &Rank, comm: usize, k: u64) {
    let p = completion(c, r, comm, k)
        .unwrap_or_else(|| panic!("broadcast {k} on c{} at a rank: no completion", comm + 1));
    assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "broadcast {k} on c{}: {p:?}", comm + 1);
    let len = len_of(comm, k);
    assert!(
        c.nodes[r.node].mem.get(&r.bufs[comm].1).unwrap()[..len] == pattern(comm, k)[..],
        "broadcast {k} on c{}: a wrong byte",
        comm + 1
    );
}

/// Even ranks post `c1` then `c2`, odd ranks `c2` then `c1`, every process both at once; then
/// each waits for both. On one and two processes per node (the node's processes in opposite
/// orders too), with loss and late DMA.
#[test]
fn two_communicators_posted_in_opposite_orders_all_complete() {
    for (world, faults, dma) in [
        (World::Uniform { nodes: 2, ppn: 1 }, Faults::clean(), DmaTiming::Now),
        (World::Uniform { nodes: 2, ppn: 2 }, Faults::clean(), DmaTiming::Now),
        (
            World::Uniform { nodes: 3, ppn: 2 },
            Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 3_000, ..Faults::clean() },
            DmaTiming::Late { late: 0.5, max_ns: 20_000 },
        ),
    ] {
        let (mut c, ranks) = setup(&world, 11, faults, dma);
        let n = ranks.len() as u32;
        for k in 0..12u64 {
            let root = (k as u32) % n;
            for (i, r) in ranks.iter().enumerate() {
                let first = i % 2;
                post(&mut c, r, first, k, root);
                post(&mut c, r, 1 - first, k, root);
            }
            let ranks = &ranks;
            run_until(&mut c, &format!("{world:?}: round {k} in opposite orders"), |c| {
                ranks.iter().all(|r| (0..2).all(|comm| completion(c, r, comm, k).is_some()))
            });
            for r in ranks {
                for comm in 0..2 {
                    check(&c, r, comm, k);
                }
            }
        }
    }
}

/// The A/B program: rank A posts `c1` and `c2` and waits for `c2` only, then "sends" to rank B;
/// B posts `c2`, waits for it, "receives", and only then posts `c1`. A's `c2` must complete
/// while its `c1` is still owed. On two nodes of one process (A and B on different engines) and
/// on one node's two processes (A and B on one engine, the other node's ranks posting both).
#[test]
fn a_later_call_completes_before_an_earlier_one_whose_other_half_is_not_posted() {
    for world in [World::Uniform { nodes: 2, ppn: 1 }, World::Uniform { nodes: 2, ppn: 2 }] {
        let (mut c, ranks) = setup(&world, 12, Faults::clean(), DmaTiming::Now);
        let n = ranks.len() as u32;
        let (a, b) = (&ranks[0], &ranks[1]);
        for k in 0..6u64 {
            // A is never c1's root (a root's own part may end before the others post theirs);
            // c2's root moves round every rank.
            let roots = [1 + k as u32 % (n - 1), k as u32 % n];
            // A, and every rank beyond B, posts both; B posts c2 only.
            for (i, r) in ranks.iter().enumerate() {
                if i != 1 {
                    post(&mut c, r, 0, k, roots[0]);
                }
                post(&mut c, r, 1, k, roots[1]);
            }
            run_until(&mut c, &format!("{world:?}, round {k}: c2 at A and B while A's c1 is owed"), |c| {
                completion(c, a, 1, k).is_some() && completion(c, b, 1, k).is_some()
            });
            assert!(
                completion(&c, a, 0, k).is_none(),
                "{world:?}, round {k}: A's c1 cannot be over, B has not posted it: {:?}",
                completion(&c, a, 0, k)
            );
            check(&c, a, 1, k);
            check(&c, b, 1, k);
            // A "sends", B "receives": only now does B post c1.
            post(&mut c, b, 0, k, roots[0]);
            run_until(&mut c, &format!("{world:?}, round {k}: c1 everywhere"), |c| {
                ranks.iter().all(|r| (0..2).all(|comm| completion(c, r, comm, k).is_some()))
            });
            for r in &ranks {
                for comm in 0..2 {
                    check(&c, r, comm, k);
                }
            }
        }
    }
}

/// Each process advances one broadcast on each communicator independently: it posts the next
/// one a random time after the last completed (its own draws), so every rank and every process
/// of a node interleaves the two communicators' calls its own way. Roots move round the ranks;
/// a lossy, reordering fabric and late DMA.
#[test]
fn independent_loops_on_two_communicators_all_complete() {
    const ROUNDS: u64 = 25;
    for (seed, world) in [
        (21, World::Uniform { nodes: 2, ppn: 1 }),
        (22, World::Uniform { nodes: 2, ppn: 2 }),
        (23, World::Uniform { nodes: 3, ppn: 2 }),
    ] {
        let faults = Faults { mcast_loss: 0.05, ucast_loss: 0.01, jitter: 5_000, ..Faults::clean() };
        let (mut c, ranks) = setup(&world, seed, faults, DmaTiming::Late { late: 0.3, max_ns: 30_000 });
        let n = ranks.len() as u32;
        let mut rng = SimRng::new(seed);
        // Per rank and communicator: broadcasts completed, one posted, when the next is due.
        let mut next = vec![[0u64; 2]; ranks.len()];
        let mut posted = vec![[false; 2]; ranks.len()];
        let mut due = vec![[0 as Nanos; 2]; ranks.len()];
        let mut cursor = c.published().len();
        let mut last_progress = c.now();
        loop {
            for (i, r) in ranks.iter().enumerate() {
                for comm in 0..2 {
                    if !posted[i][comm] && next[i][comm] < ROUNDS && due[i][comm] <= c.now() {
                        let k = next[i][comm];
                        post(&mut c, r, comm, k, (k as u32) % n);
                        posted[i][comm] = true;
                    }
                }
            }
            if next.iter().all(|k| k.iter().all(|&k| k == ROUNDS)) {
                break;
            }
            assert!(
                c.step().is_some() && c.now() < last_progress + WAIT,
                "{world:?}: no completion for {} s of virtual time (a hang): at {next:?}, posted {posted:?}",
                WAIT / 1_000_000_000
            );
            while cursor < c.published().len() {
                let p = c.published()[cursor];
                cursor += 1;
                let i = ranks.iter().position(|r| r.node == p.node && r.host == p.host).unwrap();
                let comm = (p.cqe.cookie >> 32) as usize - 1;
                let k = p.cqe.cookie & 0xffff_ffff;
                assert_eq!(
                    (posted[i][comm], next[i][comm]),
                    (true, k),
                    "{world:?}: an unexpected completion {p:?}"
                );
                // Checked now: the rank's next post on this communicator refills the buffer.
                check(&c, &ranks[i], comm, k);
                posted[i][comm] = false;
                next[i][comm] += 1;
                due[i][comm] = c.now() + rng.below(40_000);
                c.wake(p.node, due[i][comm]);
                last_progress = c.now();
            }
        }
    }
}

/// More broadcasts posted at once than a host's completion ring holds: the engine takes in only
/// as many as the ring has slots for ([`SIM_CQ_ENTRIES`]) and the rest wait in the submission
/// queue (back-pressure) until completions make room; every one completes with the root's
/// bytes. Roots move round the ranks, late DMA.
#[test]
fn more_posted_than_a_completion_ring_holds_wait_and_all_complete() {
    const N: u64 = SIM_CQ_ENTRIES as u64 + 60;
    const LEN: usize = 48;
    let world = World::Uniform { nodes: 2, ppn: 2 };
    let (mut c, ranks) = setup(&world, 31, Faults::clean(), DmaTiming::Late { late: 0.5, max_ns: 20_000 });
    let n = ranks.len() as u32;
    let bytes = |k: u64| -> Vec<u8> { (0..LEN).map(|i| (k as usize * 7 + i * 3 + 1) as u8).collect() };
    // One region per rank holding all N broadcasts' buffers, LEN bytes apart.
    let regions: Vec<(RegionKey, u64)> = ranks
        .iter()
        .map(|r| {
            let m = &mut c.nodes[r.node];
            let seg = r.bufs[0].1 | 0x9;
            let l = N * LEN as u64;
            m.mem.insert(seg, vec![0xEE; l as usize]);
            (m.engine.register(r.host, SegmentHandle(seg), l, 0, l, Access::READ_WRITE).unwrap(), seg)
        })
        .collect();
    let id = |k: u64| cookie(0, 0x1000 + k);
    for (r, &(key, seg)) in ranks.iter().zip(&regions) {
        for k in 0..N {
            let root = (k as u32) % n;
            if r.crank[0] == root {
                c.nodes[r.node].mem.get_mut(&seg).unwrap()[k as usize * LEN..][..LEN]
                    .copy_from_slice(&bytes(k));
            }
            let at = RegionRef { key, offset: k * LEN as u64 };
            c.submit(r.node, r.host, SubmissionDescriptor::bcast(id(k), COMMS[0], root, at, LEN as u64));
        }
    }
    let done = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::BCAST).count();
    let (mut held_back, deadline) = (false, c.now() + WAIT);
    while done(&c) < ranks.len() * N as usize {
        for r in &ranks {
            let in_flight = c.nodes[r.node].engine.in_flight(r.host);
            assert!(in_flight <= SIM_CQ_ENTRIES, "{in_flight} in flight, past the completion ring");
        }
        held_back |= (0..world.nodes() as usize).any(|i| c.unsubmitted(i) > 0);
        assert!(
            c.step().is_some() && c.now() < deadline,
            "not all complete within {} s of virtual time (a hang)",
            WAIT / 1_000_000_000
        );
    }
    assert!(
        held_back,
        "nothing ever waited in a submission queue: the test did not reach the ring's capacity"
    );
    for (r, &(_, seg)) in ranks.iter().zip(&regions) {
        for k in 0..N {
            let p = completion(&c, r, 0, 0x1000 + k).expect("a completion");
            assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "broadcast {k}: {p:?}");
            let got = &c.nodes[r.node].mem.get(&seg).unwrap()[k as usize * LEN..][..LEN];
            assert!(got == &bytes(k)[..], "broadcast {k}: a wrong byte");
        }
    }
}
