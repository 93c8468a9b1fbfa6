//! SCAN and EXSCAN (`MPI_Scan`, `MPI_Exscan`) through whole engines on the simulated fabric:
//! every type and operation the ABI defines, contributions in place and from a send buffer, one
//! and several processes per node (uneven too), every way the blocks are gathered (per rank,
//! leader-based with the node parts multicast, exchanged by recursive doubling or round the
//! ring), a clean fabric and a lossy one — each rank's result equal, bit for bit, to the
//! checker's own left-to-right reduction of ranks `0..=r` (`0..r`) in rank order
//! (`ringcast_sim::reference`, not the engine's code); an exscan's rank 0 reports 0 bytes; ranks
//! that disagree on the call fail typed.
use ringcast_abi::{Access, DataType, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::World;
use ringcast_proto::config::{AllgatherBetween, AllgatherParts, EngineConfig, LocalRank};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming};
use ringcast_sim::fabric::Faults;
use ringcast_sim::reference::{reference_reduce, same_values};

/// Rank `r`'s buffers in segment `seg` of its node: a work buffer of `total` poisoned bytes,
/// its contribution `mine` in place (at `r × len`) or in a send buffer of its own (`seg | 1`).
fn stage(
    m: &mut ringcast_sim::cluster::Machine,
    host: HostId,
    seg: u64,
    r: u32,
    mine: &[u8],
    in_place: bool,
    total: u64,
) -> (RegionKey, Option<RegionKey>) {
    let len = mine.len();
    let mut work = vec![0xEE; total as usize];
    let send = if in_place {
        work[r as usize * len..(r as usize + 1) * len].copy_from_slice(mine);
        None
    } else {
        m.mem.insert(seg | 1, mine.to_vec());
        let l = len as u64;
        Some(m.engine.register(host, SegmentHandle(seg | 1), l, 0, l, Access::READ).unwrap())
    };
    m.mem.insert(seg, work);
    (m.engine.register(host, SegmentHandle(seg), total, 0, total, Access::READ_WRITE).unwrap(), send)
}

/// Rank `r`'s contribution of `n` elements of `dtype`: spread over the type's range, floats of
/// mixed magnitudes (so the order of a float sum shows).
fn contribution(dtype: DataType, r: u32, n: usize) -> Vec<u8> {
    let mut g = SimRng::new(u64::from(r) * 7919 + u64::from(dtype.0) + 17);
    (0..n)
        .flat_map(|_| {
            let x = g.next_u64();
            match dtype {
                DataType::F32 => (((x % 2001) as f32 - 1000.0) * 10f32.powi((x >> 20) as i32 % 12 - 6))
                    .to_le_bytes()
                    .to_vec(),
                DataType::F64 => (((x % 2001) as f64 - 1000.0) * 10f64.powi((x >> 20) as i32 % 30 - 15))
                    .to_le_bytes()
                    .to_vec(),
                _ => {
                    let v = if x.is_multiple_of(5) { 0 } else { x >> 3 };
                    v.to_le_bytes()[..dtype.size().unwrap()].to_vec()
                }
            }
        })
        .collect()
}

/// Every supported (type, operation) of the ABI.
fn cases() -> Vec<(DataType, ReduceOp)> {
    let types = (1..=10).map(DataType);
    types.flat_map(|t| (1..=9).map(ReduceOp).filter(move |o| o.supports(t)).map(move |o| (t, o))).collect()
}

/// How the blocks are gathered.
#[derive(Clone, Copy, Debug)]
struct Setup {
    parts: AllgatherParts,
    between: AllgatherBetween,
}

/// One scan (`exclusive`: exscan) per case at every rank of `world`, all posted at once; every
/// rank's prefix checked against the checker's left-to-right reduction in rank order.
fn check(world: &World, exclusive: bool, elems: usize, faults: Faults, seed: u64, setup: Setup) {
    let apply = |c: &mut EngineConfig| {
        c.protocol.allgather_parts = setup.parts;
        c.protocol.allgather_between = setup.between;
    };
    let engines = world_engines(world, "scan", &apply);
    let dma = DmaTiming::Now;
    let mut c = Cluster::new(engines, faults, SimRng::new(seed), crc32c::crc32c, dma, SimRng::new(seed ^ 3));
    let size = world.size();
    let hosts: Vec<(usize, u32, HostId)> = (0..size)
        .map(|r| {
            let (node, local) = world.locate(r).unwrap();
            let m = &mut c.nodes[node as usize];
            let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
            m.engine.host_arrived(host);
            (node as usize, local, host)
        })
        .collect();
    let cases = cases();
    for (i, &(t, o)) in cases.iter().enumerate() {
        let len = elems * t.size().unwrap();
        let total = (len * size as usize) as u64;
        for r in 0..size {
            let (node, local, host) = hosts[r as usize];
            let seg = u64::from(local) << 48 | (i as u64) << 8;
            let in_place = (i + r as usize).is_multiple_of(2);
            let m = &mut c.nodes[node];
            let (wk, send) = stage(m, host, seg, r, &contribution(t, r, elems), in_place, total);
            let work = RegionRef { key: wk, offset: 0 };
            let send = send.map(|key| RegionRef { key, offset: 0 });
            let cookie = (u64::from(r) << 16) | i as u64;
            let d = SubmissionDescriptor::scan(cookie, 0, work, send, len as u64, t, o, exclusive);
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
    }
    let want = cases.len() * size as usize;
    let mut steps = 0u64;
    while c.published().len() < want {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "{setup:?}: scans did not finish");
    }
    assert_eq!(c.published().len(), want);
    for p in c.published() {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{setup:?}: {p:?}");
        let (r, i) = ((p.cqe.cookie >> 16) as u32, (p.cqe.cookie & 0xffff) as usize);
        let (t, o) = cases[i];
        let len = elems * t.size().unwrap();
        let upto = if exclusive { r } else { r + 1 };
        let reported = if upto == 0 { 0 } else { len as u64 };
        assert_eq!(p.cqe.bytes, reported, "{setup:?}, rank {r}: {t:?} {o:?}");
        if upto == 0 {
            continue; // MPI leaves rank 0's exclusive prefix undefined
        }
        let blocks: Vec<Vec<u8>> = (0..upto).map(|q| contribution(t, q, elems)).collect();
        let want = reference_reduce(t, o, &blocks);
        let (node, local, _) = hosts[r as usize];
        let seg = u64::from(local) << 48 | (i as u64) << 8;
        let got = &c.nodes[node].mem.get(&seg).unwrap()[..len];
        assert!(same_values(t, got, &want), "{setup:?}, rank {r}: {t:?} {o:?}: not the prefix in rank order");
    }
}

const SETUPS: [Setup; 4] = [
    Setup { parts: AllgatherParts::Ranks, between: AllgatherBetween::Multicast },
    Setup { parts: AllgatherParts::Nodes, between: AllgatherBetween::Multicast },
    Setup { parts: AllgatherParts::Nodes, between: AllgatherBetween::Doubling },
    Setup { parts: AllgatherParts::Nodes, between: AllgatherBetween::Ring },
];

#[test]
fn every_type_and_operation_scans_in_rank_order_at_every_rank() {
    for setup in SETUPS {
        for exclusive in [false, true] {
            check(&World::Uniform { nodes: 3, ppn: 2 }, exclusive, 5, Faults::clean(), 1, setup);
        }
    }
}

#[test]
fn scans_on_an_uneven_world_and_one_process_per_node() {
    let uneven = World::from_counts(&[3, 1, 2]).unwrap();
    for setup in SETUPS {
        check(&uneven, false, 3, Faults::clean(), 2, setup);
        check(&uneven, true, 3, Faults::clean(), 3, setup);
        check(&World::Uniform { nodes: 4, ppn: 1 }, true, 2, Faults::clean(), 4, setup);
    }
}

#[test]
fn scans_survive_loss_reordering_and_duplicates() {
    let faults = Faults { mcast_loss: 0.2, ucast_loss: 0.05, duplicate: 0.05, ..Faults::clean() };
    for setup in [SETUPS[0], SETUPS[2]] {
        check(&World::Uniform { nodes: 2, ppn: 2 }, false, 300, faults.clone(), 5, setup);
        check(&World::Uniform { nodes: 2, ppn: 2 }, true, 300, faults.clone(), 6, setup);
    }
}

/// A rank posting an exscan where the others post a scan (or another operation) fails typed —
/// its parts' context is not theirs — and nobody completes with another call's prefix.
#[test]
fn ranks_that_disagree_on_the_call_get_typed_errors_not_wrong_results() {
    let world = World::Uniform { nodes: 2, ppn: 2 };
    let setup = Setup { parts: AllgatherParts::Ranks, between: AllgatherBetween::Multicast };
    let apply = |c: &mut EngineConfig| {
        c.protocol.allgather_parts = setup.parts;
        c.protocol.allgather_between = setup.between;
        c.protocol.peer_timeout_ms = 200;
    };
    let engines = world_engines(&world, "scan", &apply);
    let mut c = Cluster::new(
        engines,
        Faults::clean(),
        SimRng::new(7),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(8),
    );
    let (t, len) = (DataType::I64, 64usize);
    for r in 0..world.size() {
        let (node, local) = world.locate(r).unwrap();
        let m = &mut c.nodes[node as usize];
        let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
        m.engine.host_arrived(host);
        let seg = u64::from(local) << 48;
        let total = (len * world.size() as usize) as u64;
        let (wk, _) = stage(m, host, seg, r, &contribution(t, r, len / 8), true, total);
        let work = RegionRef { key: wk, offset: 0 };
        // Rank 3 posts an exscan, rank 2 a scan of another operation, the others a sum scan.
        let (op, exclusive) = match r {
            3 => (ReduceOp::SUM, true),
            2 => (ReduceOp::MAX, false),
            _ => (ReduceOp::SUM, false),
        };
        let d = SubmissionDescriptor::scan(u64::from(r), 0, work, None, len as u64, t, op, exclusive);
        c.with_engine(node as usize, |e, now| e.handle_descriptor(host, &d, now));
    }
    let mut steps = 0u64;
    while c.published().len() < world.size() as usize {
        steps += 1;
        assert!(steps < 20_000_000 && c.step().is_some(), "the calls did not end");
    }
    for p in c.published() {
        let status = StatusKind::try_from(p.cqe.status).unwrap();
        assert_ne!(status, StatusKind::Ok, "rank {}: a call the others did not make succeeded", p.cqe.cookie);
        assert_eq!(p.cqe.bytes, 0);
    }
}
