//! ALLREDUCE through whole engines on the simulated fabric: every type and operation the ABI
//! defines, contributions from every rank (in place and from a send buffer, one and several
//! processes per node, a clean fabric and a lossy one), the result at every rank equal — bit for
//! bit — to the checker's own reduction in rank order (`ringcast_sim::reference`, not the
//! engine's code), and identical across ranks;
//! bad type/operation combinations typed at the rank that posted them.
use ringcast_abi::{
    Access, DataType, Opcode, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::{AllgatherParts, Between, EngineConfig, LocalRank};
use ringcast_proto::engine::Engine;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::model::compose::{self, Exchange};
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming};
use ringcast_sim::fabric::Faults;
use ringcast_sim::reference::{reference_reduce, reference_reduce_doubling, reference_reduce_grouped};

/// Rank `r`'s contribution of `n` elements of `dtype`: values spread over the type's range,
/// floats of mixed magnitudes (so the order of a float sum shows).
/// Rank `r`'s buffers for one reduction in segment `seg` of its node: a work buffer of `total`
/// poisoned bytes, its contribution `mine` either in place (at `r × len`) or in a send buffer
/// of its own (`seg | 1`). Returns the work region and the send region, if any.
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

/// A cluster of `engines` on a clean fabric, DMA jobs answered at once, seeded `fabric` and `dma`.
fn clean_cluster(engines: Vec<Engine>, fabric: u64, dma: u64) -> Cluster {
    Cluster::new(
        engines,
        Faults::clean(),
        SimRng::new(fabric),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(dma),
    )
}

/// Attaches every rank of `world` to its node's engine, in rank order: (node, local rank, host).
fn attach_ranks(c: &mut Cluster, world: &World) -> Vec<(usize, u32, HostId)> {
    (0..world.size())
        .map(|r| {
            let (node, local) = world.locate(r).unwrap();
            let m = &mut c.nodes[node as usize];
            let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
            m.engine.host_arrived(host);
            (node as usize, local, host)
        })
        .collect()
}

/// Steps `c` until `done` says so (or nothing is left to do); `what` did not finish otherwise.
fn run_until(c: &mut Cluster, what: &str, done: impl Fn(&Cluster) -> bool) {
    let mut steps = 0u64;
    while !done(c) {
        steps += 1;
        assert!(steps < 20_000_000, "{what} did not finish");
        if c.step().is_none() {
            break;
        }
    }
}

fn contribution(dtype: DataType, r: u32, n: usize) -> Vec<u8> {
    let mut g = SimRng::new(u64::from(r) * 7919 + u64::from(dtype.0));
    (0..n)
        .flat_map(|_| {
            let x = g.next_u64();
            match dtype {
                // Pairs: few distinct values (ties), the rank as the index.
                t if t.is_pair() => pair(t, (x % 7) as i64 - 3, r as i32),
                DataType::F32 => (((x % 2001) as f32 - 1000.0) * 10f32.powi((x >> 20) as i32 % 12 - 6))
                    .to_le_bytes()
                    .to_vec(),
                DataType::F64 => (((x % 2001) as f64 - 1000.0) * 10f64.powi((x >> 20) as i32 % 30 - 15))
                    .to_le_bytes()
                    .to_vec(),
                // Small values now and then, so logical operations see zeros.
                _ => {
                    let v = if x.is_multiple_of(5) { 0 } else { x >> 3 };
                    v.to_le_bytes()[..dtype.size().unwrap()].to_vec()
                }
            }
        })
        .collect()
}

/// A packed pair of `t` with the integer value `v` and index `i`.
fn pair(t: DataType, v: i64, i: i32) -> Vec<u8> {
    let mut e = match t {
        DataType::PAIR_F32_I32 => (v as f32).to_le_bytes().to_vec(),
        DataType::PAIR_F64_I32 => (v as f64).to_le_bytes().to_vec(),
        DataType::PAIR_I64_I32 => v.to_le_bytes().to_vec(),
        DataType::PAIR_I32_I32 => (v as i32).to_le_bytes().to_vec(),
        DataType::PAIR_I16_I32 => (v as i16).to_le_bytes().to_vec(),
        _ => {
            // x87: significand with its integer bit, biased exponent and sign; 6 bytes unused.
            let m = v.unsigned_abs();
            let (mant, exp) =
                if m == 0 { (0, 0) } else { (m << m.leading_zeros(), 16383 + 63 - m.leading_zeros() as u16) };
            let mut w = mant.to_le_bytes().to_vec();
            w.extend_from_slice(&(exp | if v < 0 { 0x8000 } else { 0 }).to_le_bytes());
            w.extend_from_slice(&[0x5A; 6]);
            w
        }
    };
    e.extend_from_slice(&i.to_le_bytes());
    e
}

const TYPES: [DataType; 16] = [
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
    DataType::I32,
    DataType::U32,
    DataType::I64,
    DataType::U64,
    DataType::F32,
    DataType::F64,
    DataType::PAIR_F32_I32,
    DataType::PAIR_F64_I32,
    DataType::PAIR_I64_I32,
    DataType::PAIR_I32_I32,
    DataType::PAIR_I16_I32,
    DataType::PAIR_X87_I32,
];
const OPS: [ReduceOp; 12] = [
    ReduceOp::SUM,
    ReduceOp::PROD,
    ReduceOp::MIN,
    ReduceOp::MAX,
    ReduceOp::BAND,
    ReduceOp::BOR,
    ReduceOp::BXOR,
    ReduceOp::LAND,
    ReduceOp::LOR,
    ReduceOp::LXOR,
    ReduceOp::MAXLOC,
    ReduceOp::MINLOC,
];

/// One allreduce per supported (type, operation) at every rank of `nodes × ppn`, all posted at
/// once, in both compositions (leader-based, the default, and per rank); every
/// result checked against the checker's own reduction in the composition's order.
fn check(nodes: u32, ppn: u32, elems: usize, faults: Faults, seed: u64) {
    check_with(nodes, ppn, elems, faults, seed, DmaTiming::Now)
}

/// [`check`] with DMA jobs carried out per `dma`.
fn check_with(nodes: u32, ppn: u32, elems: usize, faults: Faults, seed: u64, dma: DmaTiming) {
    let staging = EngineConfig::default().limits.reduce_staging_bytes;
    check_staged(nodes, ppn, elems, faults, seed, dma, staging)
}

/// [`check_with`] with `limits.reduce_staging_bytes` = `staging`.
fn check_staged(nodes: u32, ppn: u32, elems: usize, faults: Faults, seed: u64, dma: DmaTiming, staging: u64) {
    let cases: Vec<(DataType, ReduceOp)> =
        TYPES.iter().flat_map(|&t| OPS.iter().filter(move |o| o.supports(t)).map(move |&o| (t, o))).collect();
    for parts in [AllgatherParts::Nodes, AllgatherParts::Ranks] {
        let halving = EngineConfig::default().protocol.allreduce_halving_bytes;
        let setup = Setup { parts, staging, between: Between::Multicast, halving, cpus: 0 };
        check_world(&World::Uniform { nodes, ppn }, &cases, elems, faults.clone(), seed, dma, setup);
    }
}

/// The engine settings a [`check_world`] runs with.
#[derive(Clone, Copy, Debug)]
struct Setup {
    parts: AllgatherParts,
    /// `limits.reduce_staging_bytes`.
    staging: u64,
    /// `protocol.allreduce_between`.
    between: Between,
    /// `protocol.allreduce_halving_bytes`.
    halving: u32,
    /// `model.engine_cpus` (what the cost model prices with `between` `auto`).
    cpus: u32,
}

impl Setup {
    /// Leader-based, node results combined by `between`, the default staging.
    fn leaders(between: Between) -> Setup {
        let staging = EngineConfig::default().limits.reduce_staging_bytes;
        let halving = EngineConfig::default().protocol.allreduce_halving_bytes;
        Setup { parts: AllgatherParts::Nodes, staging, between, halving, cpus: 0 }
    }

    /// The engines' configuration for `world`.
    fn apply(&self, c: &mut EngineConfig) {
        c.protocol.allgather_parts = self.parts;
        c.limits.reduce_staging_bytes = self.staging;
        c.protocol.allreduce_between = self.between;
        c.protocol.allreduce_halving_bytes = self.halving;
        c.model.engine_cpus = self.cpus;
    }
}

/// One allreduce per case at every rank of `world` in one composition, all posted at once;
/// every result checked against the checker's reduction in the composition's order.
fn check_world(
    world: &World,
    cases: &[(DataType, ReduceOp)],
    elems: usize,
    faults: Faults,
    seed: u64,
    dma: DmaTiming,
    setup: Setup,
) {
    let parts = setup.parts;
    let engines = world_engines(world, "allreduce", &|c| setup.apply(c));
    let config = EngineConfig::default().with(|c| setup.apply(c));
    let mut c = Cluster::new(engines, faults, SimRng::new(seed), crc32c::crc32c, dma, SimRng::new(seed ^ 3));
    let size = world.size();
    let hosts = attach_ranks(&mut c, world);
    for (i, &(t, o)) in cases.iter().enumerate() {
        let len = elems * t.size().unwrap();
        let total = (len * size as usize) as u64;
        for r in 0..size {
            let (node, local, host) = hosts[r as usize];
            let m = &mut c.nodes[node];
            let seg = u64::from(local) << 48 | (i as u64) << 8;
            let in_place = (i + r as usize).is_multiple_of(2);
            let (wk, send) = stage(m, host, seg, r, &contribution(t, r, elems), in_place, total);
            let d = SubmissionDescriptor::allreduce(
                (u64::from(r) << 16) | i as u64,
                0,
                RegionRef { key: wk, offset: 0 },
                send.map(|key| RegionRef { key, offset: 0 }),
                len as u64,
                t,
                o,
            );
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
    }
    let want = cases.len() * size as usize;
    let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLREDUCE).count();
    run_until(&mut c, "allreduces", |c| count(c) >= want);
    assert_eq!(count(&c), want);
    for p in c.published() {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
    }
    for (i, &(t, o)) in cases.iter().enumerate() {
        let len = elems * t.size().unwrap();
        let blocks: Vec<Vec<u8>> = (0..size).map(|r| contribution(t, r, elems)).collect();
        // Leader-based: node by node, then across the nodes.
        let counts: Vec<u32> = (0..world.nodes()).map(|n| world.count(n)).collect();
        let groups = parts.leader_based().then_some(&counts[..]);
        // Between the leaders by doubling or Rabenseifner's (one tree) unless the call's
        // exchange — forced, or the cost model's — is multicast.
        let exchange = |g: &[u32]| {
            let largest = g.iter().copied().max().unwrap_or(1);
            compose::allreduce(&config, g.len() as u32, largest, len as u64, t.size().unwrap() as u64)
        };
        let want = match groups {
            Some(counts) if counts.len() >= 2 && exchange(counts) != Exchange::Multicast => {
                reference_reduce_doubling(t, o, &blocks, counts)
            }
            _ => reference_reduce_grouped(t, o, &blocks, groups),
        };
        for r in 0..size {
            let (node, local, _) = hosts[r as usize];
            let seg = u64::from(local) << 48 | (i as u64) << 8;
            let got = &c.nodes[node].mem.get(&seg).unwrap()[..len];
            assert!(
                got == &want[..],
                "{parts:?}, rank {r}: {t:?} {o:?}: result differs from the reduction in the composition's order"
            );
        }
    }
}

#[test]
fn every_type_and_operation_reduces_exactly_in_the_documented_order_at_every_rank() {
    check(4, 1, 37, Faults::clean(), 1);
    check(3, 2, 300, Faults::clean(), 2);
}

#[test]
fn allreduces_survive_loss_reordering_and_duplicates() {
    let lossy =
        Faults { mcast_loss: 0.1, ucast_loss: 0.03, jitter: 4_000, duplicate: 0.02, ..Faults::clean() };
    check(4, 2, 500, lossy, 9);
}

#[test]
fn unsupported_reductions_are_typed_at_the_rank_that_posted_them() {
    let config = EngineConfig::default().with(|c| c.topology.job = "allreduce-bad".into());
    let engine = Engine::new(&config, crc32c::crc32c, true).unwrap();
    let mut c = Cluster::new(
        vec![engine],
        Faults::clean(),
        SimRng::new(1),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(2),
    );
    let host = c.nodes[0].engine.attach_host(LocalRank::Fixed(0), 0).unwrap();
    c.nodes[0].engine.host_arrived(host);
    c.nodes[0].mem.insert(1, vec![0; 64]);
    let wk = c.nodes[0].engine.register(host, SegmentHandle(1), 64, 0, 64, Access::READ_WRITE).unwrap();
    let at = RegionRef { key: wk, offset: 0 };
    let mut raw = SubmissionDescriptor::allreduce(5, 0, at, None, 8, DataType::I32, ReduceOp::SUM);
    raw.root |= 0x1_0000; // bits past the operation
    let cases = [
        (
            SubmissionDescriptor::allreduce(1, 0, at, None, 8, DataType::F64, ReduceOp::BXOR),
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor::allreduce(2, 0, at, None, 8, DataType(42), ReduceOp::SUM),
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor::allreduce(3, 0, at, None, 8, DataType::I32, ReduceOp(0)),
            StatusKind::BadDescriptor,
        ),
        (
            SubmissionDescriptor::allreduce(4, 0, at, None, 6, DataType::I64, ReduceOp::SUM),
            StatusKind::BadLength,
        ),
        (raw, StatusKind::BadDescriptor),
    ];
    for (d, _) in &cases {
        c.with_engine(0, |e, now| e.handle_descriptor(host, d, now));
    }
    let got: Vec<(u64, u16)> = c.published().iter().map(|p| (p.cqe.cookie, p.cqe.status.0)).collect();
    let want: Vec<(u64, u16)> = cases.iter().map(|(d, s)| (d.cookie, *s as u16)).collect();
    assert_eq!(got, want);
}

/// Reductions in many rounds (`limits.reduce_staging_bytes` of 256 bytes: a few elements of
/// each block per round, the last round shorter), with loss and with DMA jobs answered late:
/// every result still exactly the reduction in the composition's order, at every rank.
#[test]
fn reductions_in_rounds_of_a_small_staging_give_the_same_results() {
    let lossy = Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 2_000, ..Faults::clean() };
    check_staged(3, 2, 301, lossy, 21, DmaTiming::Now, 256);
    let late = DmaTiming::Late { late: 1.0, max_ns: 20_000 };
    check_staged(2, 3, 150, Faults::clean(), 22, late, 256);
}

#[test]
fn late_dma_jobs_change_nothing() {
    let late = DmaTiming::Late { late: 1.0, max_ns: 20_000 };
    check_with(1, 3, 2000, Faults::clean(), 4, late);
    check_with(2, 2, 2000, Faults::clean(), 5, late);
}

/// Ranks that disagree on the call — one rank's operation, or type, differs; or one posts an
/// allgather of the same bytes, or an alltoall of blocks of that length — never reduce each
/// other's bytes their own way, in either composition: the call's context is in every part's
/// message MAC (and compared by the node's gather; a node part carries its leader's call, and
/// lengths differ between an allgather's and a reduction's node part). With recursive doubling
/// between the leaders the pair transfers' MACs and the node's assembly tell another type or
/// operation; another shape of call (an allgather) posts other parts and waits, so those
/// variants run with multicast only. The offender fails typed, and every other rank either
/// fails typed too or completes with exactly the reduction it asked for. The offender sits on a
/// node of its own (`ppn` 1) and beside a sibling (`ppn` 2).
#[test]
fn ranks_that_disagree_on_the_call_get_typed_errors_not_wrong_results() {
    let elems = 40usize;
    let cases = [(1u32, 2u32), (2, 1), (2, 2)];
    for ((ppn, offender), parts) in
        cases.into_iter().flat_map(|c| [AllgatherParts::Nodes, AllgatherParts::Ranks].map(|p| (c, p)))
    {
        let betweens = |variant: u32| match variant {
            0 | 1 => &[Between::Multicast, Between::Doubling][..],
            _ => &[Between::Multicast][..],
        };
        for (variant, &between) in (0..4u32).flat_map(|v| betweens(v).iter().map(move |b| (v, b))) {
            let nodes = 3u32;
            // An allreduce against another type or operation is told in both ways of combining
            // the node results; against an allgather or an alltoall — another shape of call —
            // only multicast posts the same parts (with doubling the ranks wait for each
            // other's parts, as for a collective not called yet: docs/protocol.md).
            let engines = world_engines(&World::Uniform { nodes, ppn }, "mismatch", &|c| {
                c.protocol.allgather_parts = parts;
                c.protocol.allreduce_between = between;
                // (The offending allgather exchanges as the allreduce does; the offending
                // alltoall multicasts: pairwise, it posts other parts and waits.)
                c.protocol.allgather_between = match between {
                    Between::Multicast => ringcast_proto::config::AllgatherBetween::Multicast,
                    Between::Doubling => ringcast_proto::config::AllgatherBetween::Doubling,
                    Between::Auto => ringcast_proto::config::AllgatherBetween::Auto,
                };
                c.protocol.alltoall_between = ringcast_proto::config::AlltoallBetween::Multicast;
            });
            let seed = 40 + u64::from(variant);
            let mut c = clean_cluster(engines, seed, 1);
            let size = nodes * ppn;
            let len = elems * 8;
            // Room for an alltoall's work buffer too (the allreduce uses the first `size` blocks).
            let total = (len * size as usize * (size as usize + 1)) as u64;
            for r in 0..size {
                let (node, local) = ((r / ppn) as usize, r % ppn);
                let m = &mut c.nodes[node];
                let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
                m.engine.host_arrived(host);
                let seg = u64::from(local) << 48 | 0x77;
                let mut work = vec![0u8; total as usize];
                work[r as usize * len..(r as usize + 1) * len].copy_from_slice(&contribution(
                    DataType::I64,
                    r,
                    elems,
                ));
                m.mem.insert(seg, work);
                let wk =
                    m.engine.register(host, SegmentHandle(seg), total, 0, total, Access::READ_WRITE).unwrap();
                let at = RegionRef { key: wk, offset: 0 };
                let send_len = (len * size as usize) as u64;
                m.mem.insert(seg | 0x100, vec![7u8; send_len as usize]);
                let sk = m
                    .engine
                    .register(host, SegmentHandle(seg | 0x100), send_len, 0, send_len, Access::READ)
                    .unwrap();
                let mut d = SubmissionDescriptor::allreduce(
                    u64::from(r),
                    0,
                    at,
                    None,
                    len as u64,
                    DataType::I64,
                    ReduceOp::SUM,
                );
                if r == offender {
                    d = match variant {
                        0 => SubmissionDescriptor::allreduce(
                            u64::from(r),
                            0,
                            at,
                            None,
                            len as u64,
                            DataType::I64,
                            ReduceOp::MAX,
                        ),
                        1 => SubmissionDescriptor::allreduce(
                            u64::from(r),
                            0,
                            at,
                            None,
                            len as u64,
                            DataType::U64,
                            ReduceOp::SUM,
                        ),
                        2 => SubmissionDescriptor::allgather(u64::from(r), 0, at, None, len as u64),
                        _ => SubmissionDescriptor::alltoall(
                            u64::from(r),
                            0,
                            at,
                            RegionRef { key: sk, offset: 0 },
                            len as u64,
                        ),
                    };
                }
                c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
            }
            let done = |c: &Cluster| c.published().len();
            run_until(&mut c, &format!("{parts:?} ppn {ppn} variant {variant}"), |c| {
                done(c) >= size as usize
            });
            let outcomes: Vec<(u64, StatusKind)> = c
                .published()
                .iter()
                .map(|p| (p.cqe.cookie, StatusKind::try_from(p.cqe.status).unwrap()))
                .collect();
            assert_eq!(outcomes.len(), size as usize, "ppn {ppn} variant {variant}: every rank completes");
            // The offender fails typed. Every other rank fails typed too, or — when the
            // offender's block travelled inside its node leader's part, whose call was the
            // others' — completes with the sum the others asked for, of every contribution.
            let blocks: Vec<Vec<u8>> = (0..size).map(|r| contribution(DataType::I64, r, elems)).collect();
            let sum = reference_reduce(DataType::I64, ReduceOp::SUM, &blocks);
            for &(r, s) in &outcomes {
                let r = r as u32;
                if r == offender || s != StatusKind::Ok {
                    // Told at the part: the MAC's context, the gather's comparison, the length.
                    let typed = [
                        StatusKind::DigestMismatch,
                        StatusKind::LengthMismatch,
                        StatusKind::CommunicatorBroken,
                        StatusKind::PeerUnreachable,
                    ];
                    assert!(
                        typed.contains(&s),
                        "{parts:?} ppn {ppn} variant {variant}: rank {r} ended {s:?}"
                    );
                    continue;
                }
                let (node, local) = ((r / ppn) as usize, r % ppn);
                let got = &c.nodes[node].mem.get(&(u64::from(local) << 48 | 0x77)).unwrap()[..len];
                assert!(
                    got == &sum[..],
                    "{parts:?} ppn {ppn} variant {variant}: rank {r} Ok with another result"
                );
            }
            assert!(outcomes.iter().any(|&(r, _)| r as u32 == offender), "the offender completed");
        }
    }
}

/// REDUCE to every root in turn, with loss, in place and not, per rank and leader-based (node
/// results by multicast and by recursive doubling): the root's result equals the checker's
/// reduction in the composition's order (rank order; node by node then across nodes in node
/// order, or by the doubling's tree); every other rank completes `Ok` with 0 bytes. A root
/// outside the communicator is `BadRoot`.
#[test]
fn a_reduce_delivers_the_result_at_its_root_only() {
    let (nodes, ppn, elems) = (3u32, 2u32, 50usize);
    let setups = [
        (AllgatherParts::Ranks, Between::Multicast),
        (AllgatherParts::Nodes, Between::Multicast),
        (AllgatherParts::Nodes, Between::Doubling),
    ];
    for (parts, between) in setups {
        let engines = world_engines(&World::Uniform { nodes, ppn }, "reduce", &|c| {
            c.protocol.allgather_parts = parts;
            c.protocol.allreduce_between = between;
        });
        let faults = Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 3_000, ..Faults::clean() };
        let mut c =
            Cluster::new(engines, faults, SimRng::new(9), crc32c::crc32c, DmaTiming::Now, SimRng::new(10));
        let size = nodes * ppn;
        let (t, o) = (DataType::F64, ReduceOp::SUM);
        let len = elems * 8;
        let total = (len * size as usize) as u64;
        let hosts = attach_ranks(&mut c, &World::Uniform { nodes, ppn });
        // One reduce per root, every rank posting all of them at once.
        for root in 0..size {
            for r in 0..size {
                let (node, local, host) = hosts[r as usize];
                let m = &mut c.nodes[node];
                let seg = u64::from(local) << 48 | u64::from(root) << 8;
                let in_place = (root + r).is_multiple_of(2);
                let (wk, send) = stage(m, host, seg, r, &contribution(t, r, elems), in_place, total);
                let d = SubmissionDescriptor::reduce(
                    u64::from(r) << 16 | u64::from(root),
                    0,
                    root,
                    RegionRef { key: wk, offset: 0 },
                    send.map(|key| RegionRef { key, offset: 0 }),
                    len as u64,
                    t,
                    o,
                );
                c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
            }
        }
        let want = (size * size) as usize;
        let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::REDUCE).count();
        run_until(&mut c, &format!("{parts:?}: reduces"), |c| count(c) >= want);
        let blocks: Vec<Vec<u8>> = (0..size).map(|r| contribution(t, r, elems)).collect();
        // Leader-based: each node's contributions reduced first (two ranks each), then the nodes'.
        let counts = vec![ppn; nodes as usize];
        let groups = (parts == AllgatherParts::Nodes).then_some(&counts[..]);
        let result = match (between, groups) {
            (Between::Doubling, Some(g)) => reference_reduce_doubling(t, o, &blocks, g),
            _ => reference_reduce_grouped(t, o, &blocks, groups),
        };
        for p in c.published() {
            let (r, root) = ((p.cqe.cookie >> 16) as u32, (p.cqe.cookie & 0xffff) as u32);
            assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{parts:?}: {p:?}");
            if r == root {
                assert_eq!(p.cqe.bytes, len as u64);
                let (node, local, _) = hosts[r as usize];
                let got =
                    &c.nodes[node].mem.get(&(u64::from(local) << 48 | u64::from(root) << 8)).unwrap()[..len];
                assert!(
                    got == &result[..],
                    "{parts:?}: root {root}'s result differs from the checker's reduction in its order"
                );
            } else {
                assert_eq!(p.cqe.bytes, 0, "{parts:?}: rank {r} of a reduce to {root}");
            }
        }
        assert_eq!(count(&c), want);
        // A root outside the communicator at rank 0: `BadRoot` there, once the others made the
        // call (a reduce to root 1) and rank 0 ran it in step on no memory; at the others,
        // nothing worse than a typed error — and root 1's is one (rank 0's part never came).
        let before = c.published().len();
        let (node, _, host) = hosts[0];
        let d = SubmissionDescriptor::reduce(0xbad, 0, size, RegionRef::default(), None, len as u64, t, o);
        c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        for r in 1..size {
            let (node, local, host) = hosts[r as usize];
            let m = &mut c.nodes[node];
            let seg = u64::from(local) << 48 | 0xbad << 8;
            let (wk, send) = stage(m, host, seg, r, &contribution(t, r, elems), false, total);
            let (work, send) =
                (RegionRef { key: wk, offset: 0 }, send.map(|key| RegionRef { key, offset: 0 }));
            let d = SubmissionDescriptor::reduce(0xbad0 + u64::from(r), 0, 1, work, send, len as u64, t, o);
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
        run_until(&mut c, &format!("{parts:?}: the bad root's call"), |c| {
            c.published().len() >= before + size as usize
        });
        for p in &c.published()[before..] {
            let status = StatusKind::try_from(p.cqe.status).unwrap();
            match p.cqe.cookie {
                0xbad => assert_eq!(status, StatusKind::BadRoot, "{parts:?}"),
                0xbad1 => assert_eq!(status, StatusKind::RootFailed, "{parts:?}: root 1"),
                _ => assert!(matches!(status, StatusKind::Ok | StatusKind::RootFailed), "{parts:?}: {p:?}"),
            }
        }
    }
}

/// A root that has several composed calls in flight may be that many calls ahead, so it waits
/// for a rendezvous where a receiver with one call in flight would send eagerly
/// (`Post::window`); the receiver answers with its `READY` wherever any root could be
/// waiting, so the root never waits for the receiver's repair request instead (a repair
/// timeout, 500 µs, per call). Node 0's ranks post four allreduces of 16 KiB at once, node 1's
/// one at a time, each after the last completed: every call completes within a few hops of
/// node 1's post.
#[test]
fn a_root_with_calls_in_flight_is_answered_by_a_receiver_with_one() {
    let (nodes, ppn, calls, elems) = (2u32, 2u32, 4u64, 2048usize);
    let engines = world_engines(&World::Uniform { nodes, ppn }, "in-flight", &|_| {});
    let mut c = clean_cluster(engines, 5, 6);
    let size = nodes * ppn;
    let (t, o) = (DataType::U64, ReduceOp::SUM);
    let len = elems * 8;
    let total = (len * size as usize) as u64;
    let hosts = attach_ranks(&mut c, &World::Uniform { nodes, ppn });
    let post = |c: &mut Cluster, r: u32, k: u64| {
        let (node, local, host) = hosts[r as usize];
        let m = &mut c.nodes[node];
        let seg = u64::from(local) << 48 | k << 8;
        let (wk, _) = stage(m, host, seg, r, &contribution(t, r, elems), true, total);
        let d = SubmissionDescriptor::allreduce(
            u64::from(r) << 16 | k,
            0,
            RegionRef { key: wk, offset: 0 },
            None,
            len as u64,
            t,
            o,
        );
        c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
    };
    for r in 0..ppn {
        for k in 0..calls {
            post(&mut c, r, k);
        }
    }
    let mut posted_at = vec![[0u64; 4]; size as usize];
    for r in ppn..size {
        posted_at[r as usize][0] = c.now();
        post(&mut c, r, 0);
    }
    let mut seen = 0;
    let mut steps = 0u64;
    while c.published().len() < (calls * u64::from(size)) as usize {
        steps += 1;
        assert!(steps < 20_000_000, "the allreduces did not finish");
        if c.step().is_none() {
            break;
        }
        let fresh: Vec<(u32, u64, u64)> = c.published()[seen..]
            .iter()
            .map(|p| ((p.cqe.cookie >> 16) as u32, p.cqe.cookie & 0xffff, p.at))
            .collect();
        seen = c.published().len();
        for (r, k, at) in fresh {
            assert!(r < size);
            if r >= ppn {
                let waited = at - posted_at[r as usize][k as usize];
                assert!(waited < 300_000, "rank {r}'s call {k} took {waited} ns after its post");
                if k + 1 < calls {
                    posted_at[r as usize][(k + 1) as usize] = c.now();
                    post(&mut c, r, k + 1);
                }
            }
        }
    }
    assert_eq!(c.published().len(), (calls * u64::from(size)) as usize);
    for p in c.published() {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
    }
}

/// A rank whose allreduce is shorter than the others' — beside a sibling on its node, whose
/// engine reduces their contributions together (leader-based), and alone on its node — fails
/// typed; nobody reduces past the shorter buffer or completes `Ok` with another result than the
/// others asked for (the node whose processes disagree breaks the communicator: every rank's
/// operation on it then fails typed, within the protocol's bound).
#[test]
fn a_shorter_contribution_is_a_typed_error_not_a_wrong_result() {
    let elems = 40usize;
    for (ppn, offender) in [(2u32, 1u32), (1, 2)] {
        let nodes = 3u32;
        let engines = world_engines(&World::Uniform { nodes, ppn }, "short", &|_| {});
        let mut c = clean_cluster(engines, 7, 8);
        let size = nodes * ppn;
        let len = elems * 8;
        let total = (len * size as usize) as u64;
        let hosts = attach_ranks(&mut c, &World::Uniform { nodes, ppn });
        for r in 0..size {
            let (node, local, host) = hosts[r as usize];
            let m = &mut c.nodes[node];
            let seg = u64::from(local) << 48 | 0x55;
            // The offender's last element, past its shorter length, is not its to give.
            let mut block = contribution(DataType::I64, r, elems);
            if r == offender {
                block[len - 8..].fill(0x5a);
            }
            let (wk, _) = stage(m, host, seg, r, &block, true, total);
            let mine = if r == offender { len - 8 } else { len };
            let d = SubmissionDescriptor::allreduce(
                u64::from(r),
                0,
                RegionRef { key: wk, offset: 0 },
                None,
                mine as u64,
                DataType::I64,
                ReduceOp::SUM,
            );
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
        run_until(&mut c, &format!("ppn {ppn}"), |c| c.published().len() >= size as usize);
        assert_eq!(c.published().len(), size as usize, "ppn {ppn}: every rank completes");
        let blocks: Vec<Vec<u8>> = (0..size).map(|r| contribution(DataType::I64, r, elems)).collect();
        let counts = vec![ppn; nodes as usize];
        let sum = reference_reduce_grouped(DataType::I64, ReduceOp::SUM, &blocks, Some(&counts));
        for p in c.published() {
            let r = p.cqe.cookie as u32;
            let s = StatusKind::try_from(p.cqe.status).unwrap();
            if r == offender {
                assert_ne!(s, StatusKind::Ok, "ppn {ppn}: the offender completed Ok");
            } else if s == StatusKind::Ok {
                let (node, local) = ((r / ppn) as usize, r % ppn);
                let got = &c.nodes[node].mem.get(&(u64::from(local) << 48 | 0x55)).unwrap()[..len];
                assert!(got == &sum[..], "ppn {ppn}: rank {r} Ok with another result");
            }
        }
    }
}

/// Leader-based reductions on an uneven world (3, 1 and 2 ranks per node), floats and
/// integers, in place and not: each node's contributions reduced by its engine, then the nodes'
/// in node order — exactly the checker's reduction in that order, at every rank.
#[test]
fn leader_based_reductions_on_an_uneven_world() {
    let world = World::from_counts(&[3, 1, 2]).unwrap();
    let cases =
        [(DataType::F64, ReduceOp::SUM), (DataType::F32, ReduceOp::PROD), (DataType::I32, ReduceOp::MAX)];
    check_world(&world, &cases, 300, Faults::clean(), 3, DmaTiming::Now, Setup::leaders(Between::Multicast));
}

/// Recursive doubling between the node leaders (`protocol.allreduce_between = doubling`): two
/// to eight nodes — powers of two and not (a fold) — one to three processes per node and an
/// uneven world, floats and integers, in place and not, with loss and with DMA jobs answered
/// late: every rank's result is exactly the checker's reduction in the doubling's order (node
/// by node, the fold, then a balanced tree over the nodes).
#[test]
fn recursive_doubling_between_the_leaders_reduces_in_its_documented_order() {
    let cases = [
        (DataType::F64, ReduceOp::SUM),
        (DataType::F32, ReduceOp::PROD),
        (DataType::I32, ReduceOp::MAX),
        (DataType::U8, ReduceOp::BXOR),
    ];
    let doubling = Setup::leaders(Between::Doubling);
    let lossy =
        Faults { mcast_loss: 0.05, ucast_loss: 0.03, jitter: 3_000, duplicate: 0.01, ..Faults::clean() };
    let late = DmaTiming::Late { late: 1.0, max_ns: 20_000 };
    for (i, counts) in
        [&[1u32, 1][..], &[2, 2, 2], &[1, 1, 1, 1], &[2, 1, 3, 1, 2], &[1; 8]].into_iter().enumerate()
    {
        let world = World::from_counts(counts).unwrap();
        check_world(&world, &cases, 257, Faults::clean(), 40 + i as u64, DmaTiming::Now, doubling);
        check_world(&world, &cases, 300, lossy.clone(), 50 + i as u64, late, doubling);
    }
    // Rounds of a small staging in every step.
    let small = Setup { staging: 256, ..doubling };
    check_world(
        &World::from_counts(&[2, 2, 1]).unwrap(),
        &cases,
        301,
        lossy.clone(),
        60,
        DmaTiming::Now,
        small,
    );
    // Rabenseifner's schedule (halving from 64 bytes): the same tree, so the same reference —
    // four to eight engines, a fold, uneven segments (301 elements), loss, late DMA.
    let halving = Setup { halving: 64, ..doubling };
    for (i, counts) in
        [&[1u32, 1, 1, 1][..], &[2, 1, 3, 1, 2], &[1; 8], &[2, 2, 2, 2, 2, 2]].into_iter().enumerate()
    {
        let world = World::from_counts(counts).unwrap();
        check_world(&world, &cases, 301, Faults::clean(), 70 + i as u64, DmaTiming::Now, halving);
        check_world(&world, &cases, 257, lossy.clone(), 80 + i as u64, late, halving);
    }
}

/// The cost model's choice (`allreduce_between = auto`), on engines with a core each and on
/// engines sharing two CPUs (`model.engine_cpus`): three to eight nodes, short and long blocks,
/// loss — every rank's result is the checker's reduction in the order of the exchange the model
/// picked for that call, and the cases cover all three exchanges.
#[test]
fn the_cost_models_exchange_reduces_in_the_order_it_picked() {
    let cases = [(DataType::F64, ReduceOp::SUM), (DataType::I32, ReduceOp::MAX)];
    let lossy = Faults { mcast_loss: 0.03, ucast_loss: 0.02, jitter: 2_000, ..Faults::clean() };
    let mut seen = std::collections::BTreeSet::new();
    for (i, (counts, cpus, elems)) in [
        (&[1u32, 1, 1][..], 2, 64usize),
        (&[1, 1, 1][..], 2, 40_000),
        (&[1, 2, 1, 1][..], 2, 64),
        (&[1, 1, 1, 1][..], 2, 20_000),
        (&[1; 8][..], 0, 20_000),
        (&[1; 6][..], 2, 64),
    ]
    .into_iter()
    .enumerate()
    {
        let setup = Setup { cpus, ..Setup::leaders(Between::Auto) };
        let world = World::from_counts(counts).unwrap();
        let config = EngineConfig::default().with(|c| setup.apply(c));
        for &(t, _) in &cases {
            let len = (elems * t.size().unwrap()) as u64;
            let largest = counts.iter().copied().max().unwrap_or(1);
            let x = compose::allreduce(&config, counts.len() as u32, largest, len, t.size().unwrap() as u64);
            seen.insert(x.to_string());
        }
        check_world(&world, &cases, elems, lossy.clone(), 90 + i as u64, DmaTiming::Now, setup);
    }
    assert_eq!(seen.len(), 3, "every exchange drawn: {seen:?}");
}

/// An engine dead before the ranks post a doubling allreduce: every survivor fails typed within
/// `(⌈log₂ E⌉ + 1)` peer timeouts — the dead engine's partner by the peer timeout, the partners
/// of the later steps because that engine's world broke — never hangs. Every position of the
/// dead engine among five (a folded one, a butterfly's) is tried.
#[test]
fn a_dead_engine_fails_a_doubling_allreduce_everywhere_within_the_bound() {
    let nodes = 5u32;
    let world = World::Uniform { nodes, ppn: 1 };
    let peer_timeout_ms = 300u64;
    for dead in 0..nodes as usize {
        let engines = world_engines(&world, "doubling-dead", &|c| {
            c.protocol.allreduce_between = Between::Doubling;
            c.protocol.peer_timeout_ms = peer_timeout_ms as u32;
        });
        let mut c = clean_cluster(engines, 70 + dead as u64, 1);
        c.nodes[dead].crash_at = Some(0);
        let hosts = attach_ranks(&mut c, &world);
        let elems = 64;
        let len = elems * 8;
        let total = (len * nodes as usize) as u64;
        let alive: Vec<u32> = (0..nodes).filter(|&r| r as usize != dead).collect();
        for &r in &alive {
            let (node, local, host) = hosts[r as usize];
            let m = &mut c.nodes[node];
            let (wk, _) = stage(
                m,
                host,
                u64::from(local) << 48 | 0x3,
                r,
                &contribution(DataType::I64, r, elems),
                true,
                total,
            );
            let at = RegionRef { key: wk, offset: 0 };
            let d = SubmissionDescriptor::allreduce(
                u64::from(r),
                0,
                at,
                None,
                len as u64,
                DataType::I64,
                ReduceOp::SUM,
            );
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
        run_until(&mut c, &format!("dead engine {dead}"), |c| c.published().len() >= alive.len());
        let bound = (3 + 1) * peer_timeout_ms * 1_000_000 + 100_000_000;
        for p in c.published() {
            let s = StatusKind::try_from(p.cqe.status).unwrap();
            let typed = [
                StatusKind::PeerUnreachable,
                StatusKind::CommunicatorBroken,
                StatusKind::UnknownCommunicator,
            ];
            assert!(typed.contains(&s), "dead engine {dead}: {p:?}");
            assert!(p.at < bound, "dead engine {dead}: failed at {} ms, beyond the bound", p.at / 1_000_000);
        }
    }
}

/// Ranks that disagree on an allreduce's length across a boundary of the cost model's choice:
/// three engines sharing two CPUs, rank 0 one element short of the length from which the model
/// picks doubling (it multicasts its part), ranks 1 and 2 at it (they swap over the pairs), then
/// a second allreduce in step. Engine 0 goes on to the second call, whose pair transfers the
/// others, still in the first, took as the first's: `Ok` over another call's contribution. With
/// the count of multicast exchanges in every later context (`node/sequencer.rs`) every call of every
/// rank ends typed within a few peer timeouts, none `Ok`.
#[test]
fn ranks_split_by_the_exchange_get_typed_errors() {
    let world = World::Uniform { nodes: 3, ppn: 1 };
    let setup = Setup { cpus: 2, ..Setup::leaders(Between::Auto) };
    let config = EngineConfig::default().with(|c| setup.apply(c));
    let t = DataType::F64;
    let way = |elems: u64| compose::allreduce(&config, 3, 1, elems * 8, 8);
    let boundary = (2..4096u64).find(|&n| way(n) != way(n - 1)).expect("a boundary below 32 KiB");
    assert_eq!((way(boundary - 1), way(boundary)), (Exchange::Multicast, Exchange::Doubling));
    let peer_timeout_ms = 300u64;
    let engines = world_engines(&world, "split", &|c| {
        setup.apply(c);
        c.protocol.peer_timeout_ms = peer_timeout_ms as u32;
    });
    let mut c = clean_cluster(engines, 5, 1);
    let hosts = attach_ranks(&mut c, &world);
    for call in 0..2u64 {
        for r in 0..3u32 {
            let elems = (boundary - u64::from(call == 0 && r == 0)) as usize;
            let (len, (node, local, host)) = (elems * 8, hosts[r as usize]);
            let m = &mut c.nodes[node];
            let seg = u64::from(local) << 48 | call << 8;
            let (wk, _) = stage(m, host, seg, r, &contribution(t, r, elems), true, (len * 3) as u64);
            let work = RegionRef { key: wk, offset: 0 };
            let d = SubmissionDescriptor::allreduce(
                u64::from(r) << 16 | call,
                0,
                work,
                None,
                len as u64,
                t,
                ReduceOp::SUM,
            );
            c.with_engine(node, |e, now| e.handle_descriptor(host, &d, now));
        }
    }
    let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLREDUCE).count();
    run_until(&mut c, "split allreduces", |c| count(c) >= 6);
    assert_eq!(count(&c), 6, "every call of every rank ends");
    assert!(c.now() < 4 * peer_timeout_ms * 1_000_000, "within four peer timeouts: {} ns", c.now());
    for p in c.published() {
        assert_ne!(p.cqe.status.0, StatusKind::Ok as u16, "a call of ranks out of step ended Ok: {p:?}");
    }
}
