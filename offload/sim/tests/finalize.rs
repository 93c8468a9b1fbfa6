//! Finalizing the world through whole engines on the simulated fabric: a job that ends with a
//! partial synchronization epoch leaves its engines owing their peers nothing once every process
//! finalized (no padding); the next job on the same engines (a daemon serving jobs one after
//! another) broadcasts byte-exact from the next epoch on; and a process that only detaches — a
//! replacement mid-job — does not close the world: its successor continues the sequence, while
//! one that dies between two collectives breaks it, so the others' next ones end typed. The
//! world's pair communicators (recursive-doubling allreduces) settle with it; the next job gets a world of its own, a failed job's successor too.
use ringcast_abi::{
    Access, DataType, Opcode, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::LocalRank;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::{Departure, HostId};
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming};
use ringcast_sim::fabric::Faults;

const LEN: usize = 3000;

struct Rank {
    node: usize,
    host: HostId,
    buf: RegionKey,
    seg: u64,
}

fn new_cluster(world: &World, seed: u64) -> Cluster {
    let engines = world_engines(world, "finalize", &|c| {
        c.protocol.channels = 4;
        c.protocol.allreduce_between = ringcast_proto::config::Between::Doubling;
    });
    let faults = Faults { mcast_loss: 0.05, jitter: 2_000, ..Faults::clean() };
    Cluster::new(engines, faults, SimRng::new(seed), crc32c::crc32c, DmaTiming::Now, SimRng::new(seed ^ 7))
}

/// Attaches world rank `r` (its node's local rank) with a buffer of its own; `job` tells the
/// segments of successive jobs apart.
fn attach(c: &mut Cluster, world: &World, r: u32, job: u64) -> Rank {
    let (node, local) = world.locate(r).unwrap();
    let m = &mut c.nodes[node as usize];
    let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
    m.engine.host_arrived(host);
    let seg = u64::from(local) << 48 | job << 8 | 0xb;
    m.mem.insert(seg, vec![0u8; LEN]);
    let len = LEN as u64;
    let buf = m.engine.register(host, SegmentHandle(seg), len, 0, len, Access::READ_WRITE).unwrap();
    Rank { node: node as usize, host, buf, seg }
}

fn pattern(k: u64) -> Vec<u8> {
    (0..LEN).map(|i| (i as u64 * 7 + k * 131) as u8).collect()
}

/// Broadcast `k` from `root` on the world at every rank; runs until each completed and checks
/// every rank's bytes.
fn bcast(c: &mut Cluster, ranks: &[Rank], root: usize, k: u64) {
    let before = done(c);
    for (r, rank) in ranks.iter().enumerate() {
        let fill = if r == root { pattern(k) } else { vec![0xEE; LEN] };
        c.nodes[rank.node].mem.insert(rank.seg, fill);
        let d = SubmissionDescriptor::bcast(
            k,
            0,
            root as u32,
            RegionRef { key: rank.buf, offset: 0 },
            LEN as u64,
        );
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
    }
    while done(c) < before + ranks.len() {
        assert!(c.step().is_some(), "broadcast {k}: the simulation ran dry before every rank completed");
    }
    for p in c.published().iter().filter(|p| p.cqe.cookie == k && p.cqe.opcode == Opcode::BCAST) {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "broadcast {k}: {p:?}");
    }
    for rank in ranks {
        assert_eq!(
            c.nodes[rank.node].mem.get(&rank.seg),
            Some(&pattern(k)[..]),
            "broadcast {k}: wrong bytes"
        );
    }
}

fn done(c: &Cluster) -> usize {
    c.published().iter().filter(|p| p.cqe.opcode == Opcode::BCAST).count()
}

/// Runs every event left.
fn settle(c: &mut Cluster) {
    while c.step().is_some() {}
}

#[test]
fn finalizing_settles_a_partial_epoch_and_the_next_job_starts_afresh() {
    for counts in [vec![1u32, 1, 1], vec![2, 2]] {
        let world = World::from_counts(&counts).unwrap();
        let mut c = new_cluster(&world, 3);
        let ranks: Vec<Rank> = (0..world.size()).map(|r| attach(&mut c, &world, r, 1)).collect();
        // Job 1: 5 broadcasts with 4 channels — the last epoch holds one.
        for k in 0..5 {
            bcast(&mut c, &ranks, k as usize % ranks.len(), k);
        }
        finalize_owing_nothing(&mut c, &ranks, &format!("{counts:?}"));
        // Job 2 on the same engines: new processes, a world of its own (the next generation).
        let ranks: Vec<Rank> = (0..world.size()).map(|r| attach(&mut c, &world, r, 2)).collect();
        for k in 100..107 {
            bcast(&mut c, &ranks, (k as usize + 1) % ranks.len(), k);
        }
    }
}

#[test]
fn a_process_that_only_detaches_is_replaced_without_closing_the_world() {
    let world = World::from_counts(&[1, 1]).unwrap();
    let mut c = new_cluster(&world, 5);
    let mut ranks: Vec<Rank> = (0..2).map(|r| attach(&mut c, &world, r, 1)).collect();
    for k in 0..3 {
        bcast(&mut c, &ranks, k as usize % 2, k);
    }
    // Rank 1 leaves without finalizing (its node's only process) and a newcomer takes its rank:
    // it continues the sequence, in the middle of an epoch.
    let gone = &ranks[1];
    c.with_engine(gone.node, |e, now| e.detach_host(gone.host, Departure::Clean, 0, now));
    ranks[1] = attach(&mut c, &world, 1, 2);
    for k in 3..9 {
        bcast(&mut c, &ranks, k as usize % 2, k);
    }
}

/// An allreduce (`i64` sum, in place) at every rank, its cookie `k`, combined by recursive
/// doubling between the leaders over the world's pair communicators; checks every result.
fn allreduce(c: &mut Cluster, ranks: &[Rank], k: u64) {
    let size = ranks.len();
    let elems = LEN / size / 8;
    let len = elems * 8;
    let value = |r: usize, i: usize| (r as i64 + 1) * 1_000 + i as i64 + k as i64;
    let before = c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLREDUCE).count();
    for (r, rank) in ranks.iter().enumerate() {
        let mut work = vec![0u8; LEN];
        for i in 0..elems {
            work[r * len + i * 8..r * len + i * 8 + 8].copy_from_slice(&value(r, i).to_le_bytes());
        }
        c.nodes[rank.node].mem.insert(rank.seg, work);
        let at = RegionRef { key: rank.buf, offset: 0 };
        let d = SubmissionDescriptor::allreduce(k, 0, at, None, len as u64, DataType::I64, ReduceOp::SUM);
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
    }
    let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == Opcode::ALLREDUCE).count();
    while count(c) < before + size {
        assert!(c.step().is_some(), "allreduce {k}: the simulation ran dry");
    }
    let want: Vec<u8> =
        (0..elems).flat_map(|i| (0..size).map(|r| value(r, i)).sum::<i64>().to_le_bytes()).collect();
    for p in c.published().iter().filter(|p| p.cqe.cookie == k && p.cqe.opcode == Opcode::ALLREDUCE) {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "allreduce {k}: {p:?}");
    }
    for rank in ranks {
        assert!(
            c.nodes[rank.node].mem.get(&rank.seg).unwrap()[..len] == want[..],
            "allreduce {k}: wrong sum"
        );
    }
}

/// Recursive-doubling allreduces leave partial epochs on the world's pair communicators too:
/// once every process finalized, every engine owes nothing; the next job's allreduces work.
#[test]
fn pair_communicators_settle_at_finalize_and_serve_the_next_job() {
    for counts in [vec![1u32, 1, 1], vec![2, 1, 2, 1]] {
        let world = World::from_counts(&counts).unwrap();
        let mut c = new_cluster(&world, 7);
        let ranks: Vec<Rank> = (0..world.size()).map(|r| attach(&mut c, &world, r, 1)).collect();
        for k in 0..3 {
            allreduce(&mut c, &ranks, k);
        }
        finalize_owing_nothing(&mut c, &ranks, &format!("{counts:?}"));
        let ranks: Vec<Rank> = (0..world.size()).map(|r| attach(&mut c, &world, r, 2)).collect();
        for k in 10..15 {
            allreduce(&mut c, &ranks, k);
        }
    }
}

/// The job ends owing its peers a partial epoch; every process finalizes and detaches; then no
/// engine owes anything.
fn finalize_owing_nothing(c: &mut Cluster, ranks: &[Rank], what: &str) {
    settle(c);
    assert!(c.nodes.iter().any(|m| !m.engine.quiescent()), "{what}: a partial epoch is owed");
    for rank in ranks {
        c.with_engine(rank.node, |e, now| {
            e.finalize_host(rank.host, now);
            e.detach_host(rank.host, Departure::Clean, 0, now)
        });
    }
    settle(c);
    for (n, m) in c.nodes.iter().enumerate() {
        assert!(
            m.engine.quiescent(),
            "{what}: engine {n} still owes its peers after every process finalized"
        );
    }
}

/// A process that dies between two collectives (lost: no DETACH, no finalize) leaves the world
/// owing its parts: the others' next broadcasts — more than the channels, so the root needs the
/// synchronization the dead rank's engine can no longer give — each end within the peer
/// timeout, `Ok` with the root's bytes or with a typed error, and not all `Ok`. Before, its
/// engine, alive, kept the world open for a successor and answered for it: the others waited
/// without end (`hw-tests/tests/dpu_qemu.rs` under load, the host killed between two 4 MiB
/// broadcasts).
#[test]
fn a_process_lost_between_collectives_fails_the_others_next_ones_typed() {
    let world = World::from_counts(&[1, 1, 1]).unwrap();
    let mut c = new_cluster(&world, 11);
    let ranks: Vec<Rank> = (0..3).map(|r| attach(&mut c, &world, r, 1)).collect();
    for k in 0..3 {
        bcast(&mut c, &ranks, k as usize % 3, k);
    }
    let gone = &ranks[1];
    c.with_engine(gone.node, |e, now| e.detach_host(gone.host, Departure::Lost, 0, now));
    let (alive, calls) = ([&ranks[0], &ranks[2]], 10u64..16);
    let before = done(&c);
    let start = c.now();
    for k in calls.clone() {
        for rank in alive {
            let d = SubmissionDescriptor::bcast(k, 0, 0, RegionRef { key: rank.buf, offset: 0 }, LEN as u64);
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
    }
    let want = before + alive.len() * calls.clone().count();
    while done(&c) < want {
        assert!(c.step().is_some(), "the simulation ran dry");
        let waited = c.now() - start;
        assert!(
            waited < 60_000_000_000,
            "{} of {} broadcasts ended after 60 s",
            done(&c) - before,
            want - before
        );
    }
    let ended: Vec<_> = c.published().iter().filter(|p| calls.contains(&p.cqe.cookie)).collect();
    assert!(ended.iter().any(|p| p.cqe.status.0 != StatusKind::Ok as u16), "{ended:?}");
}

/// A daemon reused after a failed job needs no restart (issue 38, item 8): rank 1's process is
/// lost mid-job, the others' next broadcasts end typed, then the survivors leave — lost too, or
/// finalizing as a program that handles the error does — and a new job's processes attach to the
/// same engines: its broadcasts and allreduces are byte-exact, on a world of the new job (its
/// own key, its broadcast ids from zero). Before, the world stayed broken at the engine that lost
/// the process (and at the others once they noticed), under the old job's key and sequence: the
/// new job's collectives failed until the engines were restarted.
#[test]
fn the_job_after_a_failed_one_runs_on_the_same_engines() {
    for survivors_finalize in [false, true] {
        let world = World::from_counts(&[1, 1, 1]).unwrap();
        let mut c = new_cluster(&world, 13);
        let ranks: Vec<Rank> = (0..3).map(|r| attach(&mut c, &world, r, 1)).collect();
        for k in 0..3 {
            bcast(&mut c, &ranks, k as usize % 3, k);
        }
        let gone = &ranks[1];
        c.with_engine(gone.node, |e, now| e.detach_host(gone.host, Departure::Lost, 0, now));
        let before = done(&c);
        for rank in [&ranks[0], &ranks[2]] {
            let d = SubmissionDescriptor::bcast(50, 0, 0, RegionRef { key: rank.buf, offset: 0 }, LEN as u64);
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
        while done(&c) < before + 2 {
            assert!(c.step().is_some(), "the failed job's broadcast never ended");
        }
        for rank in [&ranks[0], &ranks[2]] {
            c.with_engine(rank.node, |e, now| {
                if survivors_finalize {
                    e.finalize_host(rank.host, now);
                    e.detach_host(rank.host, Departure::Clean, 0, now)
                } else {
                    e.detach_host(rank.host, Departure::Lost, 0, now)
                }
            });
        }
        settle(&mut c);
        // The next job, on the same engines.
        let ranks: Vec<Rank> = (0..3).map(|r| attach(&mut c, &world, r, 2)).collect();
        for k in 100..106 {
            bcast(&mut c, &ranks, k as usize % 3, k);
        }
        for k in 200..203 {
            allreduce(&mut c, &ranks, k);
        }
        // And the one after it, which ends well: the engines owe nothing, the job after runs.
        finalize_owing_nothing(&mut c, &ranks, &format!("survivors finalize: {survivors_finalize}"));
        let ranks: Vec<Rank> = (0..3).map(|r| attach(&mut c, &world, r, 3)).collect();
        for k in 300..305 {
            bcast(&mut c, &ranks, k as usize % 3, k);
        }
    }
}
