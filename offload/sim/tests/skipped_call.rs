//! A rank whose call was refused at once (a bad descriptor: a root outside the communicator, a
//! length its element type does not divide — not its buffers, for which the call runs in step
//! on no memory: `refused_buffers.rs`) made a call the other ranks'
//! engines know nothing of: they post that call's broadcasts, it posts none. Its next call must
//! not be matched with theirs one behind and complete `Ok` with the previous call's bytes (it
//! did: a probe's second broadcast delivered the first one's bytes). Every later call of that
//! rank carries its skipped calls in the message MAC's context, so both ends fail typed
//! (`DigestMismatch`; a node whose local processes are in different calls breaks the
//! communicator) — never wrong bytes as success.
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

/// Two ranks, three broadcasts from rank 0; rank 1's first is refused (it names a root outside
/// the communicator). Its second and third must not deliver broadcasts one and two as `Ok`.
#[test]
fn a_broadcast_after_a_refused_one_is_not_given_the_previous_ones_bytes() {
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
    for p in done.iter().filter(|p| p.node == *node1) {
        let k = p.cqe.cookie;
        let got = c.nodes[*node1].mem.get(&segs1[k as usize]).unwrap();
        match (k, status(p)) {
            (0, s) => assert_eq!(s, StatusKind::BadRoot, "the refused broadcast"),
            (_, StatusKind::Ok) => {
                assert!(*got == pattern(k), "broadcast {k} Ok with another broadcast's bytes")
            }
            (_, s) => assert_eq!(s, StatusKind::DigestMismatch, "broadcast {k}: told typed"),
        }
    }
    let second = done.iter().find(|p| p.node == *node1 && p.cqe.cookie == 1).unwrap();
    assert_eq!(status(second), StatusKind::DigestMismatch, "matched with broadcast 0: told, not fooled");
}

/// Two nodes of two ranks, two allreduces; rank 3's first is refused (a length that is not a
/// whole number of its elements). No rank completes either call `Ok` with a sum other than every rank's
/// contribution to that call; rank 3's second call fails typed.
#[test]
fn an_allreduce_after_a_refused_one_is_never_a_wrong_sum() {
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
                // Rank 3's first call is a byte short of a whole number of elements.
                let len = if r == 3 && k == 0 { LEN as u64 - 1 } else { LEN as u64 };
                let d = SubmissionDescriptor::allreduce(k, 0, at, None, len, DataType::I64, ReduceOp::SUM);
                c.with_engine(*node, |e, now| e.handle_descriptor(*host, &d, now));
            }
        }
        let done = run(&mut c, 2 * size, Opcode::ALLREDUCE);
        for p in &done {
            let r = ranks.iter().position(|(n, h, ..)| *n == p.node && *h == p.host).unwrap();
            let k = p.cqe.cookie;
            let s = status(p);
            if r == 3 && k == 0 {
                assert_eq!(s, StatusKind::BadLength, "the refused call");
                continue;
            }
            if s != StatusKind::Ok {
                let typed =
                    [StatusKind::DigestMismatch, StatusKind::CommunicatorBroken, StatusKind::PeerUnreachable];
                assert!(typed.contains(&s), "seed {seed}: rank {r} call {k} ended {s:?}");
                assert!(r != 3 || k != 1 || s != StatusKind::Ok, "rank 3's second call is told");
                continue;
            }
            assert!(
                r != 3,
                "seed {seed}: rank 3's second call, matched with the others' first, completed Ok"
            );
            let sum: Vec<i64> = (0..elems).map(|i| (0..size).map(|q| contribution(q, k)[i]).sum()).collect();
            let (node, _, _, segs) = &ranks[r];
            let got = &c.nodes[*node].mem.get(&segs[k as usize]).unwrap()[..LEN];
            assert!(got == &bytes(&sum)[..], "seed {seed}: rank {r} call {k} Ok with a wrong sum");
        }
    }
}
