//! A collective refused at one rank for its buffers — an unregistered key, a range out of
//! bounds, missing access, a send block overlapping the receive buffer — or for a descriptor
//! field its schedule does not read — an operation its type lacks, a root or a send buffer a
//! call without one names, a reserved field, a barrier's short scratch — still runs there, in
//! step with the other ranks, on no memory (every buffer `None`: no job is made on it, each
//! fails where it would be, in the engine; a refused reduction's in-step operation is never applied, and its receives
//! relay without checking a context that is not the others'). Before, such a call posted
//! nothing: the other ranks waited for the parts it never posted until that rank's next call
//! told them typed, and forever if it made none.
//!
//! Each case: every rank of a job makes two calls of one collective; the first is refused at
//! one rank (each rank in turn). Checked: every call of every rank completes, within a bound of
//! simulated time; the offender's first call ends with its refusal's status; no call ends `Ok`
//! with bytes other than the right result; the others' first calls end `RootFailed` where
//! they needed the refused rank's part (`Ok` where they did not: a broadcast's other receivers,
//! a barrier) well within a peer timeout; and — the point — the second call is `Ok` at every
//! rank with the right bytes: the job stays in step, its communicator usable.
use ringcast_abi::{
    Access, DataType, Opcode, ReduceOp, RegionKey, RegionRef, StatusKind, SubmissionDescriptor,
};
use ringcast_proto::comm::World;
use ringcast_proto::config::LocalRank;
use ringcast_proto::config::{AllgatherBetween, AllgatherParts, Between, EngineConfig};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

/// Block bytes (every collective's `len`; the broadcast's message).
const LEN: usize = 1024;
/// A key no host registered.
const BOGUS: RegionKey = RegionKey(0x7fff_0001);
/// Simulated time every call must have ended by: the peer timeout (2 s) per level of the
/// deepest schedule, and then some.
const BOUND: u64 = 30_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coll {
    Bcast,
    Allreduce,
    Reduce,
    Allgather,
    Alltoall,
    Barrier,
}

/// Every way a call is refused and still runs.
const FAULTS: [Fault; 5] =
    [Fault::UnknownKey, Fault::Overlap, Fault::OutOfBounds, Fault::BadOperation, Fault::StrayField];

const ALL: [Coll; 6] =
    [Coll::Bcast, Coll::Allreduce, Coll::Reduce, Coll::Allgather, Coll::Alltoall, Coll::Barrier];

/// How a rank's first call is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Its (receive or work) buffer names a key nobody registered.
    UnknownKey,
    /// Its send block lies inside its receive buffer (not in place).
    Overlap,
    /// Its (receive or work) buffer starts 8 bytes into its region: the range runs past the end.
    OutOfBounds,
    /// A reduction names an operation that does not exist (`BadDescriptor`).
    BadOperation,
    /// A field the call's schedule does not read is wrong: a broadcast's send offset, a root of
    /// an allreduce or allgather, an alltoall without a send buffer (no in place), a reduce's
    /// reserved word, a barrier's scratch of 0 bytes (`BadDescriptor`; the barrier's
    /// `BadLength`).
    StrayField,
}

impl Fault {
    /// The refused call's status.
    fn status(self, coll: Coll) -> StatusKind {
        match self {
            Fault::UnknownKey => StatusKind::UnknownRegion,
            Fault::Overlap => StatusKind::Overlap,
            Fault::OutOfBounds => StatusKind::OutOfBounds,
            Fault::StrayField if coll == Coll::Barrier => StatusKind::BadLength,
            Fault::BadOperation | Fault::StrayField => StatusKind::BadDescriptor,
        }
    }

    /// Whether `coll` has this fault.
    fn applies(self, coll: Coll) -> bool {
        match self {
            Fault::Overlap => !matches!(coll, Coll::Bcast | Coll::Barrier), // no send buffer
            Fault::BadOperation => matches!(coll, Coll::Allreduce | Coll::Reduce),
            _ => true,
        }
    }
}

impl Coll {
    fn opcode(self) -> Opcode {
        match self {
            Coll::Bcast => Opcode::BCAST,
            Coll::Allreduce => Opcode::ALLREDUCE,
            Coll::Reduce => Opcode::REDUCE,
            Coll::Allgather => Opcode::ALLGATHER,
            Coll::Alltoall => Opcode::ALLTOALL,
            Coll::Barrier => Opcode::BARRIER,
        }
    }

    /// Bytes of the receive (work) buffer on `size` ranks.
    fn work_len(self, size: usize) -> usize {
        match self {
            Coll::Bcast => LEN,
            Coll::Alltoall => (size + 1) * size * LEN,
            Coll::Barrier => size,
            _ => size * LEN,
        }
    }

    /// Bytes of the send buffer.
    fn send_len(self, size: usize) -> usize {
        match self {
            Coll::Alltoall => size * LEN,
            _ => LEN,
        }
    }
}

/// Rank `r`'s send bytes for call `k`.
fn send_bytes(coll: Coll, size: usize, r: usize, k: u64) -> Vec<u8> {
    match coll {
        // i64 elements (reduced with MAX).
        Coll::Allreduce | Coll::Reduce => {
            (0..LEN / 8).flat_map(|i| ((r * 1000 + i) as i64 * (k as i64 + 1) - 500).to_le_bytes()).collect()
        }
        _ => (0..coll.send_len(size)).map(|i| (r * 31 + i * 7 + k as usize * 13) as u8).collect(),
    }
}

/// What rank `r`'s call `k` must leave at the start of its work buffer when `Ok` (`None`:
/// nothing to check, a barrier or a reduce away from its root).
fn expected(coll: Coll, size: usize, r: usize, k: u64) -> Option<Vec<u8>> {
    match coll {
        Coll::Bcast => Some(send_bytes(coll, size, 0, k)),
        Coll::Allreduce | Coll::Reduce if coll == Coll::Reduce && r != 0 => None,
        Coll::Allreduce | Coll::Reduce => {
            let max = (0..LEN / 8).flat_map(|i| {
                (0..size)
                    .map(|q| {
                        i64::from_le_bytes(send_bytes(coll, size, q, k)[i * 8..i * 8 + 8].try_into().unwrap())
                    })
                    .max()
                    .unwrap()
                    .to_le_bytes()
            });
            Some(max.collect())
        }
        Coll::Allgather => Some((0..size).flat_map(|q| send_bytes(coll, size, q, k)).collect()),
        Coll::Alltoall => Some(
            (0..size).flat_map(|q| send_bytes(coll, size, q, k)[r * LEN..(r + 1) * LEN].to_vec()).collect(),
        ),
        Coll::Barrier => None,
    }
}

struct Rank {
    node: usize,
    host: HostId,
    /// Per call: (work key, work segment, send key, send segment).
    bufs: Vec<(RegionKey, u64, RegionKey, u64)>,
}

fn setup(world: &World, coll: Coll, seed: u64, tweak: &dyn Fn(&mut EngineConfig)) -> (Cluster, Vec<Rank>) {
    let engines = world_engines(world, "refused", tweak);
    let faults = Faults { mcast_loss: 0.02, jitter: 1_000, ..Faults::clean() };
    let mut c = Cluster::new(
        engines,
        faults,
        SimRng::new(seed),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(seed ^ 7),
    );
    let size = world.size() as usize;
    let ranks = (0..world.size())
        .map(|r| {
            let (node, local) = world.locate(r).unwrap();
            let m = &mut c.nodes[node as usize];
            let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
            m.engine.host_arrived(host);
            let mut region = |b: u64, bytes: Vec<u8>| {
                let seg = u64::from(local) << 48 | b << 8 | 0x5;
                let l = bytes.len() as u64;
                m.mem.insert(seg, bytes);
                (m.engine.register(host, SegmentHandle(seg), l, 0, l, Access::READ_WRITE).unwrap(), seg)
            };
            let bufs = (0..2u64)
                .map(|k| {
                    let (wk, ws) = region(2 * k, vec![0xEE; coll.work_len(size)]);
                    let (sk, ss) = region(2 * k + 1, send_bytes(coll, size, r as usize, k));
                    (wk, ws, sk, ss)
                })
                .collect();
            Rank { node: node as usize, host, bufs }
        })
        .collect();
    (c, ranks)
}

fn descriptor(
    coll: Coll,
    size: usize,
    r: usize,
    k: u64,
    rank: &Rank,
    fault: Option<Fault>,
) -> SubmissionDescriptor {
    let (wk, _, sk, _) = rank.bufs[k as usize];
    let work = RegionRef {
        key: if fault == Some(Fault::UnknownKey) { BOGUS } else { wk },
        offset: if fault == Some(Fault::OutOfBounds) { 8 } else { 0 },
    };
    // Overlap: the send block is the work buffer's own start.
    let send = RegionRef { key: if fault == Some(Fault::Overlap) { wk } else { sk }, offset: 0 };
    let len = LEN as u64;
    // (Not SUM: a refused reduction runs under SUM as an in-step operation, whose context would then be
    // the others' by chance.)
    let op = if fault == Some(Fault::BadOperation) { ReduceOp(200) } else { ReduceOp::MAX };
    let d = match coll {
        Coll::Bcast => {
            // The root's message is its send buffer.
            let at = if r == 0 && fault.is_none() { send } else { work };
            SubmissionDescriptor::bcast(k, 0, 0, at, len)
        }
        Coll::Allreduce => SubmissionDescriptor::allreduce(k, 0, work, Some(send), len, DataType::I64, op),
        Coll::Reduce => SubmissionDescriptor::reduce(k, 0, 0, work, Some(send), len, DataType::I64, op),
        Coll::Allgather => SubmissionDescriptor::allgather(k, 0, work, Some(send), len),
        Coll::Alltoall => SubmissionDescriptor::alltoall(k, 0, work, send, len),
        Coll::Barrier => SubmissionDescriptor::barrier(k, 0, work, size as u64),
    };
    if fault != Some(Fault::StrayField) {
        return d;
    }
    match coll {
        Coll::Bcast => SubmissionDescriptor { aux_offset: 8, ..d },
        Coll::Allreduce | Coll::Allgather => SubmissionDescriptor { root: 1, ..d },
        Coll::Alltoall => SubmissionDescriptor { aux_key: RegionKey::NONE, ..d },
        Coll::Reduce => SubmissionDescriptor { _reserved1: 1, ..d },
        Coll::Barrier => SubmissionDescriptor { len: 0, ..d },
    }
}

/// Runs `coll` twice on `world` with rank `bad`'s first call refused by `fault`; checks the
/// invariants of the module doc. The statuses of every rank's calls.
fn case(world: &World, coll: Coll, bad: usize, fault: Fault, seed: u64) -> Vec<[StatusKind; 2]> {
    case_with(world, coll, bad, fault, seed, &|_| {})
}

/// [`case`] on engines configured by `tweak`.
fn case_with(
    world: &World,
    coll: Coll,
    bad: usize,
    fault: Fault,
    seed: u64,
    tweak: &dyn Fn(&mut EngineConfig),
) -> Vec<[StatusKind; 2]> {
    let size = world.size() as usize;
    let (mut c, ranks) = setup(world, coll, seed, tweak);
    for (r, rank) in ranks.iter().enumerate() {
        for k in 0..2u64 {
            let fault = (r == bad && k == 0).then_some(fault);
            let d = descriptor(coll, size, r, k, rank, fault);
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
    }
    let opcode = coll.opcode();
    let count = |c: &Cluster| c.published().iter().filter(|p| p.cqe.opcode == opcode).count();
    let want = 2 * size;
    let what = format!("{coll:?} on {world:?}, rank {bad} refused ({fault:?}), seed {seed}");
    while count(&c) < want {
        assert!(c.now() < BOUND && c.step().is_some(), "{what}: {} of {want} calls ended", count(&c));
    }
    let done: Vec<Published> = c.published().iter().filter(|p| p.cqe.opcode == opcode).copied().collect();
    let mut statuses = vec![[StatusKind::Ok; 2]; size];
    for p in &done {
        let r = ranks.iter().position(|x| x.node == p.node && x.host == p.host).unwrap();
        let k = p.cqe.cookie;
        let s = StatusKind::try_from(p.cqe.status).unwrap();
        statuses[r][k as usize] = s;
        if r == bad && k == 0 {
            assert_eq!(s, fault.status(coll), "{what}: the refused call's status");
            continue;
        }
        if s != StatusKind::Ok {
            let typed = [StatusKind::RootFailed, StatusKind::PeerUnreachable, StatusKind::CommunicatorBroken];
            assert!(typed.contains(&s), "{what}: rank {r} call {k} ended {s:?}");
            continue;
        }
        let rank = &ranks[r];
        let got = c.nodes[rank.node].mem.get(&rank.bufs[k as usize].1).unwrap();
        if let Some(want) = expected(coll, size, r, k) {
            // A broadcast root's work buffer is untouched: its message was its send buffer.
            if !(coll == Coll::Bcast && r == 0) {
                assert!(got[..want.len()] == want[..], "{what}: rank {r} call {k} Ok with wrong bytes");
            }
        }
    }
    // On no memory: the refused call touched none of its rank's buffers.
    let (_, ws, _, ss) = ranks[bad].bufs[0];
    let node = &c.nodes[ranks[bad].node];
    assert!(node.mem.get(&ws).unwrap().iter().all(|&b| b == 0xEE), "{what}: its work buffer was written");
    assert!(
        *node.mem.get(&ss).unwrap() == send_bytes(coll, size, bad, 0),
        "{what}: its send buffer was written"
    );
    // The job is in step: the next call is `Ok` everywhere (its bytes checked above).
    assert!(statuses.iter().all(|s| s[1] == StatusKind::Ok), "{what}: the next call {statuses:?}");
    // And the others learned of the refusal from the aborted transfers, not from a peer
    // timeout (2 s): within a few repair timeouts.
    let last = done.iter().filter(|p| p.cqe.cookie == 0).map(|p| p.at).max().unwrap_or(0);
    assert!(last < 100_000_000, "{what}: the refused call ended everywhere at {last} ns");
    statuses
}

#[test]
fn a_broadcast_refused_at_one_rank_leaves_the_job_in_step() {
    for world in [World::Uniform { nodes: 4, ppn: 1 }, World::Uniform { nodes: 2, ppn: 2 }] {
        for (bad, fault) in (0..world.size() as usize)
            .flat_map(|b| [(b, Fault::UnknownKey), (b, Fault::OutOfBounds), (b, Fault::StrayField)])
        {
            let s = case(&world, Coll::Bcast, bad, fault, 1 + bad as u64);
            // A refused receiver costs the others nothing; a refused root tells them typed.
            for (r, s) in s.iter().enumerate().filter(|(r, _)| *r != bad) {
                let want = if bad == 0 { StatusKind::RootFailed } else { StatusKind::Ok };
                assert_eq!(s[0], want, "{world:?}: rank {bad} refused, rank {r}");
            }
        }
    }
}

#[test]
fn every_collective_refused_at_one_rank_fails_it_everywhere_and_leaves_the_job_in_step() {
    for world in [
        World::Uniform { nodes: 4, ppn: 1 },
        World::Uniform { nodes: 2, ppn: 2 },
        World::Uniform { nodes: 3, ppn: 1 },
    ] {
        for coll in ALL {
            for bad in 0..world.size() as usize {
                for fault in FAULTS.into_iter().filter(|f| f.applies(coll)) {
                    let s = case(&world, coll, bad, fault, 100 + bad as u64);
                    // Whoever needed its part is told `RootFailed`: every rank of these, whose
                    // results all include every rank's contribution.
                    if !matches!(coll, Coll::Bcast | Coll::Barrier) {
                        for (r, s) in s.iter().enumerate().filter(|(r, _)| *r != bad) {
                            assert_eq!(
                                s[0],
                                StatusKind::RootFailed,
                                "{coll:?} {world:?}: rank {bad} refused, rank {r}"
                            );
                        }
                    }
                    if coll == Coll::Barrier {
                        // A barrier needs no memory: the others pass it.
                        assert!(
                            s.iter().enumerate().all(|(r, s)| r == bad || s[0] == StatusKind::Ok),
                            "{s:?}"
                        );
                    }
                }
            }
        }
    }
}

/// The reductions and the allgather refused at one rank under every way of combining the node
/// results the engine has, not only the cost model's pick for 1 KiB: multicast, recursive
/// doubling and Rabenseifner's halving between the leaders, and one part per rank.
#[test]
fn refused_reductions_and_allgathers_stay_in_step_under_every_exchange() {
    for world in [World::Uniform { nodes: 4, ppn: 1 }, World::Uniform { nodes: 2, ppn: 2 }] {
        for (parts, between, halving) in [
            (AllgatherParts::Nodes, Between::Multicast, false),
            (AllgatherParts::Nodes, Between::Doubling, false),
            (AllgatherParts::Nodes, Between::Doubling, true),
            (AllgatherParts::Ranks, Between::Multicast, false),
        ] {
            let tweak = move |c: &mut EngineConfig| {
                c.protocol.allgather_parts = parts;
                c.protocol.allreduce_between = between;
                c.protocol.allgather_between = match between {
                    Between::Doubling => AllgatherBetween::Doubling,
                    _ => AllgatherBetween::Multicast,
                };
                if halving {
                    c.protocol.allreduce_halving_bytes = 8;
                }
            };
            for coll in [Coll::Allreduce, Coll::Reduce, Coll::Allgather] {
                for fault in [Fault::BadOperation, Fault::StrayField, Fault::UnknownKey] {
                    if !fault.applies(coll) {
                        continue;
                    }
                    for bad in 0..world.size() as usize {
                        let s = case_with(&world, coll, bad, fault, 300 + bad as u64, &tweak);
                        for (r, s) in s.iter().enumerate().filter(|(r, _)| *r != bad) {
                            assert_eq!(
                                s[0],
                                StatusKind::RootFailed,
                                "{coll:?} {world:?} {parts:?} {between:?} halving {halving}: rank {bad} refused ({fault:?}), rank {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// An in-step operation (a reduction refused for its operation) posted first on its node is not the
/// reference its siblings are compared with: two siblings that disagree on the operation — one
/// `MAX`, one `MIN` — are still told typed (`DigestMismatch`, or the node's communicator broken),
/// never carried on as if only the refused process were wrong (`RootFailed`) or `Ok`.
#[test]
fn siblings_that_disagree_are_told_even_beside_a_stand_in() {
    let world = World::Uniform { nodes: 2, ppn: 3 };
    let size = world.size() as usize;
    for between in [Between::Multicast, Between::Doubling] {
        let tweak = move |c: &mut EngineConfig| c.protocol.allreduce_between = between;
        let (mut c, ranks) = setup(&world, Coll::Allreduce, 7, &tweak);
        for (r, rank) in ranks.iter().enumerate() {
            let (wk, _, sk, _) = rank.bufs[0];
            let op = match r {
                0 => ReduceOp(200), // refused: runs under the in-step operation, posted first
                2 => ReduceOp::MIN,
                _ => ReduceOp::MAX,
            };
            let (work, send) = (RegionRef { key: wk, offset: 0 }, RegionRef { key: sk, offset: 0 });
            let d = SubmissionDescriptor::allreduce(0, 0, work, Some(send), LEN as u64, DataType::I64, op);
            c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        }
        let count = |c: &Cluster| c.published().len();
        while count(&c) < size {
            assert!(
                c.now() < BOUND && c.step().is_some(),
                "{between:?}: {} of {size} calls ended",
                count(&c)
            );
        }
        for p in c.published() {
            let r = ranks.iter().position(|x| x.node == p.node && x.host == p.host).unwrap();
            let s = StatusKind::try_from(p.cqe.status).unwrap();
            match r {
                0 => assert_eq!(s, StatusKind::BadDescriptor, "{between:?}: the refused call"),
                1 | 2 => assert!(
                    matches!(s, StatusKind::DigestMismatch | StatusKind::CommunicatorBroken),
                    "{between:?}: rank {r}, whose sibling asked for another operation, ended {s:?}"
                ),
                _ => assert_ne!(s, StatusKind::Ok, "{between:?}: rank {r} Ok without node 0's blocks"),
            }
        }
    }
}
