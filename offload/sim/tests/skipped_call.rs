//! A rank whose collective's *shape* its engine cannot read — a root outside the communicator,
//! a length its element type does not divide, a flag no ABI defines — made a call the other
//! ranks' engines know as theirs. Before, it posted nothing: the others waited for its parts,
//! and its next call was matched with theirs one behind (a probe's second broadcast delivered
//! the first one's bytes as `Ok`; later, with the skipped calls in the MAC's context, every
//! later call of that rank failed `DigestMismatch`). Now its engine learns the call's shape
//! from the others (`engine/call_shapes.rs`), runs it in step on no memory and ends it with the
//! rank's own status; the others end it typed, and every later call is in step and `Ok`. When no
//! engine answers for the peer timeout, the call still ends (never a hang), and its rank's
//! later calls fail typed, never with another call's bytes.
use ringcast_abi::{
    Access, DataType, Opcode, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::LocalRank;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

const LEN: usize = 1000;

fn cluster(world: &World, seed: u64) -> Cluster {
    let engines = world_engines(world, "skipped", &|_| {});
    let faults = Faults { mcast_loss: 0.02, jitter: 1_000, ..Faults::clean() };
    Cluster::new(engines, faults, SimRng::new(seed), crc32c::crc32c, DmaTiming::Now, SimRng::new(seed ^ 9))
}

/// Attaches every rank of `world`, each with `bufs` buffers of `len` bytes: (node, host, keys, segments).
fn attach(
    c: &mut Cluster,
    world: &World,
    bufs: u64,
    len: usize,
) -> Vec<(usize, HostId, Vec<RegionKey>, Vec<u64>)> {
    (0..world.size())
        .map(|r| {
            let (node, local) = world.locate(r).unwrap();
            let m = &mut c.nodes[node as usize];
            let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
            m.engine.host_arrived(host);
            let (mut keys, mut segs) = (Vec::new(), Vec::new());
            for b in 0..bufs {
                let seg = u64::from(local) << 48 | b << 8 | 0x5;
                m.mem.insert(seg, vec![0xEE; len]);
                let l = len as u64;
                keys.push(m.engine.register(host, SegmentHandle(seg), l, 0, l, Access::READ_WRITE).unwrap());
                segs.push(seg);
            }
            (node as usize, host, keys, segs)
        })
        .collect()
}

fn run(c: &mut Cluster, want: usize, opcode: Opcode) -> Vec<Published> {
    let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == opcode).count();
    let mut steps = 0u64;
    while count(c) < want {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{opcode:?}: {} of {want} completions", count(c));
    }
    c.published().iter().filter(|p| p.cqe.opcode == opcode).copied().collect()
}

fn status(p: &Published) -> StatusKind {
    StatusKind::try_from(p.cqe.status).unwrap()
}

/// Two ranks, three broadcasts from rank 0; rank 1's first names a root outside the
/// communicator. It ends `BadRoot` at rank 1 (its buffer untouched) and `Ok` at the root; the
/// second and third are the same calls at both ranks and deliver their own bytes.
#[test]
fn a_broadcast_after_a_refused_one_gets_its_own_bytes() {
    let world = World::Uniform { nodes: 2, ppn: 1 };
    let mut c = cluster(&world, 1);
    let ranks = attach(&mut c, &world, 3, LEN);
    let pattern = |k: u64| vec![k as u8 + 1; LEN];
    for k in 0..3u64 {
        let (node, _, _, segs) = &ranks[0];
        c.nodes[*node].mem.insert(segs[k as usize], pattern(k));
    }
    for (r, (node, host, keys, _)) in ranks.iter().enumerate() {
        for k in 0..3u64 {
            let root = if r == 1 && k == 0 { 7 } else { 0 };
            let d = SubmissionDescriptor::bcast(
                k,
                0,
                root,
                RegionRef { key: keys[k as usize], offset: 0 },
                LEN as u64,
            );
            c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
        }
    }
    let done = run(&mut c, 6, Opcode::BCAST);
    let (node1, _, _, segs1) = &ranks[1];
    for p in &done {
        let k = p.cqe.cookie;
        match (p.node == *node1, k) {
            (true, 0) => {
                assert_eq!(status(p), StatusKind::BadRoot, "the refused broadcast");
                assert!(c.nodes[*node1].mem.get(&segs1[0]).unwrap().iter().all(|&b| b == 0xEE));
            }
            (true, _) => {
                assert_eq!(status(p), StatusKind::Ok, "broadcast {k} at rank 1");
                assert!(
                    *c.nodes[*node1].mem.get(&segs1[k as usize]).unwrap() == pattern(k),
                    "broadcast {k}'s bytes"
                );
            }
            (false, _) => assert_eq!(status(p), StatusKind::Ok, "broadcast {k} at its root"),
        }
    }
}

/// Two nodes of two ranks, two allreduces; rank 3's first is a byte short of a whole number of
/// its elements. Its node-mate's call gives the shape: rank 3 ends `BadLength`, the others
/// `RootFailed` (a contribution never came), never a wrong sum; the second call is `Ok`
/// everywhere with every rank's contribution.
#[test]
fn an_allreduce_after_a_refused_one_is_the_right_sum() {
    let world = World::Uniform { nodes: 2, ppn: 2 };
    let size = world.size() as usize;
    let elems = LEN / 8;
    let contribution = |r: usize, k: u64| -> Vec<i64> {
        (0..elems).map(|i| (r * 1000 + i) as i64 * (k as i64 + 1)).collect()
    };
    let bytes = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let work_len = LEN * size;
    for seed in 0..3 {
        let mut c = cluster(&world, 10 + seed);
        let ranks = attach(&mut c, &world, 2, work_len);
        for (r, (node, host, keys, segs)) in ranks.iter().enumerate() {
            for k in 0..2u64 {
                let mut work = vec![0u8; work_len];
                work[r * LEN..(r + 1) * LEN].copy_from_slice(&bytes(&contribution(r, k)));
                c.nodes[*node].mem.insert(segs[k as usize], work);
                let at = RegionRef { key: keys[k as usize], offset: 0 };
                let len = if r == 3 && k == 0 { LEN as u64 - 1 } else { LEN as u64 };
                let d = SubmissionDescriptor::allreduce(k, 0, at, None, len, DataType::I64, ReduceOp::SUM);
                c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
            }
        }
        let done = run(&mut c, 2 * size, Opcode::ALLREDUCE);
        for p in &done {
            let r = ranks.iter().position(|(n, h, ..)| *n == p.node && *h == p.host).unwrap();
            let (k, s) = (p.cqe.cookie, status(p));
            match (r, k) {
                (3, 0) => assert_eq!(s, StatusKind::BadLength, "seed {seed}: the refused call"),
                (_, 0) => assert_eq!(s, StatusKind::RootFailed, "seed {seed}: rank {r}'s first call"),
                _ => {
                    assert_eq!(s, StatusKind::Ok, "seed {seed}: rank {r}'s second call");
                    let sum: Vec<i64> =
                        (0..elems).map(|i| (0..size).map(|q| contribution(q, k)[i]).sum()).collect();
                    let (node, _, _, segs) = &ranks[r];
                    let got = &c.nodes[*node].mem.get(&segs[k as usize]).unwrap()[..LEN];
                    assert!(got == &bytes(&sum)[..], "seed {seed}: rank {r} call {k} Ok with a wrong sum");
                }
            }
        }
    }
}

/// An unknown type at one rank of one per node: its engine asks the others, whose ranks make
/// the call later; the answer comes when they do, and every rank's next call is `Ok`.
#[test]
fn an_unknown_type_waits_for_the_others_to_make_the_call() {
    let world = World::Uniform { nodes: 3, ppn: 1 };
    let size = world.size() as usize;
    let mut c = cluster(&world, 5);
    let ranks = attach(&mut c, &world, 2, LEN * size);
    let post = |c: &mut Cluster, r: usize, k: u64, t: DataType| {
        let (node, host, keys, _) = &ranks[r];
        let at = RegionRef { key: keys[k as usize], offset: 0 };
        let d = SubmissionDescriptor::allreduce(k, 0, at, None, LEN as u64, t, ReduceOp::MAX);
        c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
    };
    post(&mut c, 2, 0, DataType(0x77));
    post(&mut c, 2, 1, DataType::U32);
    // Let rank 2's engine ask and hear "not yet" for a while (longer than a peer timeout).
    let later = c.now() + 3_000_000_000;
    c.wake(0, later);
    while c.now() < later && c.step().is_some() {}
    assert!(c.published().is_empty(), "rank 2's call waits for the others: {:?}", c.published());
    for r in 0..2 {
        post(&mut c, r, 0, DataType::U32);
        post(&mut c, r, 1, DataType::U32);
    }
    let done = run(&mut c, 2 * size, Opcode::ALLREDUCE);
    for p in &done {
        let r = ranks.iter().position(|(n, ..)| *n == p.node).unwrap();
        let want = match (r, p.cqe.cookie) {
            (2, 0) => StatusKind::BadDescriptor,
            (_, 0) => StatusKind::RootFailed,
            _ => StatusKind::Ok,
        };
        assert_eq!(status(p), want, "rank {r} call {}", p.cqe.cookie);
    }
}

/// The others' engine is gone before it answers: the refused call still ends, with its own
/// status, within the peer timeout — no hang.
#[test]
fn a_refused_call_with_nobody_to_ask_still_ends() {
    let world = World::Uniform { nodes: 2, ppn: 1 };
    let mut c = cluster(&world, 9);
    let ranks = attach(&mut c, &world, 1, LEN);
    c.nodes[ranks[0].0].crash_at = Some(0);
    let (node, host, keys, _) = &ranks[1];
    let d = SubmissionDescriptor::bcast(1, 0, 9, RegionRef { key: keys[0], offset: 0 }, LEN as u64);
    c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
    let done = run(&mut c, 1, Opcode::BCAST);
    assert_eq!(status(&done[0]), StatusKind::BadRoot);
    assert!(done[0].at < 3_000_000_000, "ended at {} ns", done[0].at);
}

/// Every rank of a 2×2 world makes its first broadcast with 0 bytes: no engine can read the
/// call, so nothing runs anywhere — the manager hears every engine say so and tells them —
/// and each rank ends `BadLength`; the next broadcast is the same call everywhere and `Ok`.
/// Node 0's second process leaves instead of making the call awaiting its shape: its node-mate's call does
/// not wait for it (the next broadcast then waits for a process to take that rank, as any
/// call of the world does, so that run stops at the call awaiting its shape).
#[test]
fn a_call_every_rank_made_void_ends_everywhere_and_the_next_is_in_step() {
    for leave in [false, true] {
        let world = World::Uniform { nodes: 2, ppn: 2 };
        let mut c = cluster(&world, 21 + u64::from(leave));
        let ranks = attach(&mut c, &world, 2, LEN);
        let (root_node, _, _, root_segs) = &ranks[0];
        c.nodes[*root_node].mem.insert(root_segs[1], vec![0x5a; LEN]);
        for (r, (node, host, keys, _)) in ranks.iter().enumerate() {
            if leave && r == 1 {
                c.with_engine(*node, |e, now| {
                    e.detach_host(*host, ringcast_proto::intake::Departure::Clean, 0, now);
                });
                continue;
            }
            for k in 0..2 - u64::from(leave) {
                let len = if k == 0 { 0 } else { LEN as u64 };
                let d =
                    SubmissionDescriptor::bcast(k, 0, 0, RegionRef { key: keys[k as usize], offset: 0 }, len);
                c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
            }
        }
        let posting = ranks.len() - usize::from(leave);
        let done = run(&mut c, (2 - usize::from(leave)) * posting, Opcode::BCAST);
        for p in &done {
            let want = if p.cqe.cookie == 0 { StatusKind::BadLength } else { StatusKind::Ok };
            assert_eq!(status(p), want, "leave {leave}: {p:?}");
            assert!(
                p.cqe.cookie == 1 || p.at < 1_000_000_000,
                "leave {leave}: the call awaiting its shape waited {} ns",
                p.at
            );
        }
        for (r, (node, _, _, segs)) in ranks.iter().enumerate().skip(2).filter(|_| !leave) {
            assert!(
                *c.nodes[*node].mem.get(&segs[1]).unwrap() == vec![0x5a; LEN],
                "rank {r}'s second broadcast"
            );
        }
    }
}

/// Three engines; the third is dead. The first two ranks make a broadcast rooted outside the
/// communicator: nobody alive can read it, the dead engine never answers, so the manager gives
/// up after the peer timeout and says so — both ranks end `BadRoot`, neither waits forever.
#[test]
fn a_manager_that_gives_up_tells_the_engines_that_asked() {
    let world = World::Uniform { nodes: 3, ppn: 1 };
    let mut c = cluster(&world, 31);
    let ranks = attach(&mut c, &world, 1, LEN);
    c.nodes[ranks[2].0].crash_at = Some(0);
    for (node, host, keys, _) in &ranks[..2] {
        let d = SubmissionDescriptor::bcast(1, 0, 9, RegionRef { key: keys[0], offset: 0 }, LEN as u64);
        c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
    }
    let done = run(&mut c, 2, Opcode::BCAST);
    for p in &done {
        assert_eq!(status(p), StatusKind::BadRoot, "{p:?}");
        assert!(p.at < 3_000_000_000, "ended at {} ns", p.at);
    }
    // Node 1 ended with the manager's word, not its own give-up a peer timeout later: within
    // a few of the manager's query intervals of node 0.
    let (a, b) = (done[0].at, done[1].at);
    assert!(a.abs_diff(b) < 200_000_000, "node 0 at {a} ns, node 1 at {b} ns");
}

/// Issue 38 (item 8): an engine that gives up alone. Two nodes of two ranks; rank 3's first
/// broadcast names a root outside the communicator, and every `CALL_SHAPE` frame is lost (the
/// fault injector drops them as they leave), so node 1 hears nothing from the manager for the
/// peer timeout and gives up on call 0 alone. Its node-mate, rank 2, makes call 0 only after
/// that, then both make call 1. Before, the give-up counted call 0 as skipped at rank 3: its
/// call 1 failed `DigestMismatch`, and rank 2's call 1 waited forever for a gather slot rank 3
/// had filled with its call 1 — one behind. Now the communicator breaks at node 1: rank 3's
/// call 0 ends with its own status (`BadRoot`), every other call there `CommunicatorBroken`,
/// none waits; node 0's broadcasts (it roots them) end `Ok`.
#[test]
fn an_engine_that_gives_up_alone_breaks_the_communicator() {
    let world = World::Uniform { nodes: 2, ppn: 2 };
    let mut c = cluster(&world, 38);
    let lost = ringcast_proto::fault::FaultConfig {
        drop: 1.0,
        kinds: "shape".parse().unwrap(),
        direction: ringcast_proto::fault::FaultDirection::Tx,
        seed: 38,
        ..Default::default()
    };
    c.inject_faults(&lost);
    let ranks = attach(&mut c, &world, 2, LEN);
    let post = |c: &mut Cluster, r: usize, k: u64| {
        let (node, host, keys, _) = &ranks[r];
        let root = if r == 3 && k == 0 { 9 } else { 0 };
        let d = SubmissionDescriptor::bcast(
            k,
            0,
            root,
            RegionRef { key: keys[k as usize], offset: 0 },
            LEN as u64,
        );
        c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
    };
    for r in [0, 1, 3] {
        post(&mut c, r, 0);
    }
    // Past node 1's give-up (the peer timeout, 2 s), rank 2 makes call 0; then everyone call 1.
    let later = 2_500_000_000;
    c.wake(ranks[2].0, later);
    while c.now() < later {
        assert!(c.step().is_some(), "the cluster went idle before {later} ns");
    }
    post(&mut c, 2, 0);
    for r in 0..4 {
        post(&mut c, r, 1);
    }
    let done = run(&mut c, 8, Opcode::BCAST);
    for p in &done {
        let r = ranks.iter().position(|(n, h, _, _)| *n == p.node && *h == p.host).unwrap();
        let want = match (r, p.cqe.cookie) {
            (0 | 1, _) => StatusKind::Ok,
            (3, 0) => StatusKind::BadRoot,
            _ => StatusKind::CommunicatorBroken,
        };
        assert_eq!(status(p), want, "rank {r} call {}: {p:?}", p.cqe.cookie);
        assert!(p.at < later + 3_000_000_000, "rank {r} call {} ended at {} ns", p.cqe.cookie, p.at);
    }
}
