//! Calls that disagree (issue 38, item 1): ranks whose calls `k` differ — a length on either side
//! of a boundary of the cost model's choice of exchange, one collective against another, an
//! exchange forced on either side of its threshold — end typed within the peer timeout,
//! whatever exchange each rank's engine took. Before, where the exchanges differed (one engine
//! multicasting its part on the communicator, the others swapping over the pair communicators)
//! every rank waited for transfers the others never started, alive and so never declared dead,
//! forever; now a call that waited is checked against the communicator's manager
//! (`engine/node/call_checks.rs`). Three engines of one rank each, every call posted at once, a
//! clean fabric; nothing may end `Ok` but a broadcast's root (done once its message is in its
//! channel). Scans and exscans too: their blocks are gathered as an allgather's, so across the
//! allgather's boundary they take exchanges apart, and their shapes carry their operation.
use ringcast_abi::{
    Access, DataType, Opcode, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::{AllgatherBetween, AlltoallBetween, Between, EngineConfig, LocalRank};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::model::compose::{self, Exchange};
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

const PEER_TIMEOUT_MS: u64 = 300;
/// Every buffer: room for any call of these tests.
const BUF: u64 = 1 << 20;

/// The engines' settings: three engines sharing two CPUs (where the cost model turns around,
/// docs/protocol.md), every exchange left to the model unless `tweak` forces one.
fn settings(c: &mut EngineConfig, tweak: &dyn Fn(&mut EngineConfig)) {
    c.model.engine_cpus = 2;
    c.protocol.peer_timeout_ms = PEER_TIMEOUT_MS as u32;
    tweak(c);
}

/// [`settings`] on the defaults: what the engines decide by.
fn config(tweak: &dyn Fn(&mut EngineConfig)) -> EngineConfig {
    EngineConfig::default().with(|c| settings(c, tweak))
}

/// What one rank calls: its descriptor, given its work buffer and its send buffer.
type Call = Box<dyn Fn(RegionRef, RegionRef) -> SubmissionDescriptor>;

/// Posts `calls[r]` at rank `r` of three engines at once and runs until every call ended or
/// twice the peer timeout passed; checks that each ended within the peer timeout, and typed —
/// `Ok` only at a broadcast's root. Returns the completions.
fn case(what: &str, tweak: &dyn Fn(&mut EngineConfig), calls: [Call; 3]) -> Vec<Published> {
    let [a, b, c] = calls;
    let (done, roots) = run(tweak, [vec![a], vec![b], vec![c]]);
    let at = done.iter().map(|p| p.at).max().unwrap_or(0) / 1_000_000;
    assert_eq!(done.len(), 3, "{what}: {} of 3 calls ended by {at} ms: {done:?}", done.len());
    for p in &done {
        let s = StatusKind::try_from(p.cqe.status).unwrap();
        let ms = p.at / 1_000_000;
        assert!(p.at <= PEER_TIMEOUT_MS * 1_000_000, "{what}: rank {} ended at {ms} ms", p.node);
        if !roots.contains(&p.node) {
            assert_ne!(s, StatusKind::Ok, "{what}: rank {} ended Ok over a call others did not make", p.node);
        }
    }
    done
}

/// Posts `calls[r]` at rank `r` of three engines, one round at a time: every rank's first call
/// at once, then — once each ended and a millisecond passed, as a program calls again after a
/// failure — every rank's second (cookies 1, 2, …). A round runs until each of its calls ended
/// or twice the peer timeout passed. Returns the completions, and the ranks that root their
/// first call's broadcast.
fn run(tweak: &dyn Fn(&mut EngineConfig), calls: [Vec<Call>; 3]) -> (Vec<Published>, Vec<usize>) {
    let world = World::Uniform { nodes: 3, ppn: 1 };
    let engines = world_engines(&world, "disagree", &|c| settings(c, tweak));
    let (fabric, dma) = (SimRng::new(38), SimRng::new(8));
    let mut c = Cluster::new(engines, Faults::clean(), fabric, crc32c::crc32c, DmaTiming::Now, dma);
    let mut roots = Vec::new();
    let mut hosts = Vec::new();
    for r in 0..calls.len() {
        let m = &mut c.nodes[r];
        let host = m.engine.attach_host(LocalRank::Fixed(0), 0).unwrap();
        m.engine.host_arrived(host);
        let mut region = |seg: u64| -> RegionRef {
            m.mem.insert(seg, vec![r as u8 + 1; BUF as usize]);
            let key: RegionKey =
                m.engine.register(host, SegmentHandle(seg), BUF, 0, BUF, Access::READ_WRITE).unwrap();
            RegionRef { key, offset: 0 }
        };
        hosts.push((host, region(1), region(2)));
    }
    let rounds = calls.iter().map(Vec::len).max().unwrap_or(0);
    let mut total = 0;
    for i in 0..rounds {
        let start = c.now();
        for (r, &(host, work, send)) in hosts.iter().enumerate() {
            let Some(call) = calls[r].get(i) else { continue };
            let d = SubmissionDescriptor { cookie: i as u64 + 1, ..call(work, send) };
            if i == 0 && d.opcode == Opcode::BCAST && d.root == r as u32 {
                roots.push(r);
            }
            c.with_engine(r, |e, now| e.handle_descriptor(host, &d, now));
            total += 1;
        }
        let limit = start + 2 * PEER_TIMEOUT_MS * 1_000_000;
        while c.published().len() < total && c.now() < limit {
            if c.step().is_none() {
                break;
            }
        }
        let pause = c.now() + 1_000_000;
        while i + 1 < rounds && c.now() < pause {
            if c.step().is_none() {
                break;
            }
        }
    }
    (c.published().to_vec(), roots)
}

fn allreduce(len: u64) -> Call {
    Box::new(move |work, _| {
        SubmissionDescriptor::allreduce(1, 0, work, None, len, DataType::F64, ReduceOp::SUM)
    })
}

fn allgather(len: u64) -> Call {
    Box::new(move |work, _| SubmissionDescriptor::allgather(1, 0, work, None, len))
}

fn alltoall(len: u64) -> Call {
    Box::new(move |work, send| SubmissionDescriptor::alltoall(1, 0, work, send, len))
}

fn bcast(root: u32, len: u64) -> Call {
    Box::new(move |work, _| SubmissionDescriptor::bcast(1, 0, root, work, len))
}

fn scan(len: u64, op: ReduceOp, exclusive: bool) -> Call {
    Box::new(move |work, _| SubmissionDescriptor::scan(1, 0, work, None, len, DataType::F64, op, exclusive))
}

fn barrier() -> Call {
    Box::new(move |work, _| SubmissionDescriptor::barrier(1, 0, work, 3))
}

/// The first length (a multiple of `step`) below 4 MiB from which `way` picks another exchange
/// than just below it.
fn boundary(step: u64, way: impl Fn(u64) -> Exchange) -> u64 {
    (2..(4 << 20) / step).map(|n| n * step).find(|&n| way(n) != way(n - step)).expect("a boundary")
}

/// The case: the cost model multicasts rank 0's allreduce, one element short of its
/// boundary, and has ranks 1 and 2 swap theirs over the pairs. Before, all three waited forever.
#[test]
fn allreduces_on_either_side_of_the_models_boundary_end_typed() {
    let c = config(&|_| {});
    let way = |len: u64| compose::allreduce(&c, 3, 1, len, 8);
    let b = boundary(8, way);
    assert_ne!(way(b - 8), way(b), "the model's choice differs across {b} B");
    let done = case("allreduce", &|_| {}, [allreduce(b - 8), allreduce(b), allreduce(b)]);
    let mismatch = |p: &Published| StatusKind::try_from(p.cqe.status) == Ok(StatusKind::DigestMismatch);
    assert!(done.iter().any(mismatch), "{done:?}");
}

/// Lengths on the same side of the boundary: the exchanges meet, and the MAC's length fails
/// them at once (what worked before, kept).
#[test]
fn allreduces_on_one_side_of_the_boundary_end_typed_too() {
    let c = config(&|_| {});
    let b = boundary(8, |len| compose::allreduce(&c, 3, 1, len, 8));
    case("allreduce, one side", &|_| {}, [allreduce(b), allreduce(b + 8), allreduce(b + 8)]);
}

/// One collective against another: an allgather of 4 KiB blocks against allreduces of 4 KiB; an
/// allreduce swapped over the pairs against a broadcast, and against a barrier; an alltoall
/// (pairwise) against allreduces multicast.
#[test]
fn one_collective_against_another_ends_typed() {
    let c = config(&|_| {});
    let (ag, ar) = (compose::allgather(&c, 3, 4096), compose::allreduce(&c, 3, 1, 4096, 8));
    assert_ne!(ag, ar, "an allgather and an allreduce of 4 KiB exchange alike here: no test");
    case("allgather against allreduces", &|_| {}, [allgather(4096), allreduce(4096), allreduce(4096)]);
    let b = boundary(8, |len| compose::allreduce(&c, 3, 1, len, 8));
    let (pairs, world) = match compose::allreduce(&c, 3, 1, b, 8) {
        Exchange::Multicast => (b - 8, b),
        _ => (b, b - 8),
    };
    case("broadcast against allreduces", &|_| {}, [bcast(0, pairs), allreduce(pairs), allreduce(pairs)]);
    case("allreduces against a barrier", &|_| {}, [allreduce(pairs), allreduce(pairs), barrier()]);
    assert_eq!(compose::alltoall(&c, 3, 3, 1, 4096), Exchange::Pairwise);
    case("an alltoall against allreduces", &|_| {}, [alltoall(4096), allreduce(world), allreduce(world)]);
}

/// Every exchange forced: an allgather with `doubling` forced, whose 3-engine node parts
/// multicast from `allgather_fold_multicast_bytes`, on either side of it; an allreduce with
/// `doubling` and with `multicast` forced, and an alltoall with `pairwise`, lengths apart (they
/// meet, and the MAC's length fails them).
#[test]
fn forced_exchanges_across_their_thresholds_end_typed() {
    let forced = |c: &mut EngineConfig| c.protocol.allgather_between = AllgatherBetween::Doubling;
    let fold = u64::from(config(&forced).protocol.allgather_fold_multicast_bytes);
    case("forced doubling allgather", &forced, [allgather(fold - 8), allgather(fold), allgather(fold)]);
    let doubling = |c: &mut EngineConfig| c.protocol.allreduce_between = Between::Doubling;
    assert_eq!(compose::allreduce(&config(&doubling), 3, 1, 4096, 8), Exchange::Doubling);
    let apart = || [allreduce(2048), allreduce(4096), allreduce(4096)];
    case("forced doubling allreduce, lengths apart", &doubling, apart());
    let multicast = |c: &mut EngineConfig| c.protocol.allreduce_between = Between::Multicast;
    case("forced multicast allreduce, lengths apart", &multicast, apart());
    let pairwise = |c: &mut EngineConfig| c.protocol.alltoall_between = AlltoallBetween::Pairwise;
    case(
        "forced pairwise alltoall, lengths apart",
        &pairwise,
        [alltoall(2048), alltoall(4096), alltoall(4096)],
    );
}

/// Scans and exscans: a scan one element short of the allgather's boundary (its blocks are
/// gathered as an allgather's, doubling forced: multicast node parts from
/// `allgather_fold_multicast_bytes`) against scans past it; a scan of 4 KiB against allreduces
/// of 4 KiB (exchanged apart); a scan against exscans.
#[test]
fn scans_that_disagree_end_typed() {
    let forced = |c: &mut EngineConfig| c.protocol.allgather_between = AllgatherBetween::Doubling;
    let fold = u64::from(config(&forced).protocol.allgather_fold_multicast_bytes);
    let sum = ReduceOp::SUM;
    case(
        "scans across the allgather's boundary",
        &forced,
        [scan(fold - 8, sum, false), scan(fold, sum, false), scan(fold, sum, false)],
    );
    let c = config(&|_| {});
    let (ag, ar) = (compose::allgather(&c, 3, 3 * 4096), compose::allreduce(&c, 3, 1, 4096, 8));
    assert_ne!(ag, ar, "a scan's gather and an allreduce of 4 KiB exchange alike here: no test");
    case("a scan against allreduces", &|_| {}, [scan(4096, sum, false), allreduce(4096), allreduce(4096)]);
    case(
        "a scan against exscans",
        &|_| {},
        [scan(4096, sum, false), scan(4096, sum, true), scan(4096, sum, true)],
    );
}

/// Scans whose operations differ meet, and the MAC fails them at once; the check then finds
/// the shapes disagree — a scan's operation is part of its shape — and the communicator breaks
/// at every engine, as for any calls that disagree: the next call, made a millisecond after the
/// failure, fails typed everywhere. (Before a scan's shape carried its operation, the
/// communicator went on, and the next allreduce ended `Ok`; a call already in flight when the
/// word comes may still end `Ok`, which this test does not make.)
#[test]
fn scans_with_another_operation_break_the_communicator() {
    let then = || allreduce(64);
    let (done, _) = run(
        &|_| {},
        [
            vec![scan(4096, ReduceOp::SUM, false), then()],
            vec![scan(4096, ReduceOp::MAX, false), then()],
            vec![scan(4096, ReduceOp::MAX, false), then()],
        ],
    );
    assert_eq!(done.len(), 6, "{} of 6 calls ended: {done:?}", done.len());
    for p in &done {
        let s = StatusKind::try_from(p.cqe.status).unwrap();
        assert!(
            p.at <= PEER_TIMEOUT_MS * 1_000_000,
            "rank {} call {} ended at {} ns",
            p.node,
            p.cqe.cookie,
            p.at
        );
        match p.cqe.cookie {
            1 => assert_ne!(s, StatusKind::Ok, "rank {}: a scan Ok over another operation", p.node),
            _ => assert_eq!(s, StatusKind::CommunicatorBroken, "rank {}: the call after: {done:?}", p.node),
        }
    }
}
