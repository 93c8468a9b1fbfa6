//! Builds a scenario's cluster the way a real job starts: one engine per node (configured with
//! the job's topology), the ranks attached to their node's engine as host processes with fixed
//! local ranks, each rank's broadcast buffers and communicator creation records written into
//! its node's simulated host memory and registered as regions; then the foreign, hostile and
//! forged datagrams of the scenario queued for injection.
use super::{Scenario, FORGE_SALT};
use crate::cluster::Cluster;
use crate::forge::{Forger, Target};
use ringcast_abi::frame::DIGEST_LEN;
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_abi::{Access, CommCreateHeader, RegionKey};
use ringcast_proto::comm::{PeerId, World};
use ringcast_proto::config::{AlgorithmChoice, LocalRank};
use ringcast_proto::engine::Engine;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_proto::Nanos;

/// The part of a segment handle that names the record of a communicator (a broadcast's
/// buffer has its index there).
const RECORD: u64 = 0xffff_ffff;

/// Segment of local rank `local`'s buffer `k` of communicator `c` (`k` = [`RECORD`]: its
/// creation record) in its node's host memory.
pub(super) fn segment(local: u32, c: usize, k: u64) -> u64 {
    (u64::from(local) << 48) | ((c as u64) << 32) | k
}

/// A rank as a host process.
pub(super) struct Proc {
    /// Its node (engine).
    pub node: usize,
    /// Its local rank there.
    pub local: u32,
    /// Its host id at its engine.
    pub host: HostId,
    /// Per communicator it is a member of: its rank there, its creation record's region and
    /// length, and the region of each broadcast's buffer (`NONE` for 0 bytes).
    pub comms: Vec<Option<Membership>>,
}

/// A rank's part in one communicator.
pub(super) struct Membership {
    pub rank: u32,
    pub record: RegionKey,
    pub record_len: u64,
    pub bufs: Vec<RegionKey>,
    /// Per step: an allgather's send block when it is not in place (`NONE` otherwise).
    pub sends: Vec<RegionKey>,
    /// Per step: the work and send buffers of the call this rank makes instead of the step's
    /// (`dst/disagree.rs`; `NONE` where it makes the step's).
    pub disagree: Vec<(RegionKey, RegionKey)>,
}

/// The bits of a step index that name the buffers of a call a rank makes instead of the step's.
const DISAGREE: u64 = 1 << 29;
/// Salt of those buffers' bytes.
const DISAGREE_FILL: u64 = 0xd15a_f111;

/// The segment of the work buffer of the call a rank makes instead of step `k`'s.
fn disagree_segment(local: u32, c: usize, k: u64) -> u64 {
    segment(local, c, k | DISAGREE)
}

/// The segment of a rank's send block of allgather `k` (beside its receive buffer's).
pub(super) fn send_segment(local: u32, c: usize, k: u64) -> u64 {
    segment(local, c, k | SEND)
}

/// The bit of a step index that names an allgather's send block.
const SEND: u64 = 1 << 30;

/// The built cluster and what the driver and checker need to know of it.
pub(super) struct Built {
    pub cluster: Cluster,
    pub procs: Vec<Proc>,
    /// Each communicator's handle (its cookie).
    pub handles: Vec<u64>,
    /// Forged datagrams injected, each with where and when it lands.
    pub forged: Vec<Forged>,
}

/// One forged datagram: the node it is injected at, when, and the communicator it names.
#[derive(Clone, Copy, Debug)]
pub(super) struct Forged {
    pub to: usize,
    pub at: Nanos,
    pub comm: usize,
}

/// How many of communicator `c`'s ranks each of its engines holds, in engine order, when its
/// allgathers and reductions are leader-based (`protocol.allgather_parts = nodes`, and every
/// engine's ranks are consecutive, as the engine requires): one part per engine — an allgather's ranks'
/// blocks side by side, a reduction's node result. `None`: one part per rank.
pub(super) fn node_parts(s: &Scenario, c: usize) -> Option<Vec<u32>> {
    if !s.config.protocol.allgather_parts.leader_based() {
        return None;
    }
    let (_, at) = placement(s);
    let mut counts: Vec<(usize, u32)> = Vec::new();
    for &r in &s.comms[c].members {
        let node = at[r].0;
        if counts.last().is_some_and(|&(last, _)| last == node) {
            if let Some((_, n)) = counts.last_mut() {
                *n += 1;
            }
        } else if counts.iter().any(|&(seen, _)| seen == node) {
            return None; // an engine seen before, not just now: its ranks are not consecutive
        } else {
            counts.push((node, 1));
        }
    }
    Some(counts.into_iter().map(|(_, n)| n).collect())
}

/// Node and local rank of every rank: `ppn` ranks per node, block-wise or cyclic.
pub(super) fn placement(s: &Scenario) -> (usize, Vec<(usize, u32)>) {
    let ppn = (s.layout.ppn.max(1) as usize).min(s.ranks.max(1));
    let nodes = s.ranks.div_ceil(ppn);
    let at = (0..s.ranks)
        .map(|r| if s.layout.cyclic { (r % nodes, (r / nodes) as u32) } else { (r / ppn, (r % ppn) as u32) })
        .collect();
    (nodes, at)
}

/// The engines' world: exactly the ranks each node holds — uneven when `ranks` is not a
/// multiple of `ppn` (block: the last node holds fewer) or of the node count (cyclic: the
/// first nodes hold one more), so the engines' uneven worlds (issue 17, item 8) run under
/// every fault class.
pub(super) fn world(nodes: usize, at: &[(usize, u32)]) -> World {
    let mut counts = vec![0u32; nodes];
    at.iter().for_each(|&(n, _)| counts[n] += 1);
    World::from_counts(&counts).expect("every node holds a rank")
}

pub(super) fn build(s: &Scenario, rng: &mut SimRng) -> Built {
    let (nodes, at) = placement(s);
    let world = world(nodes, &at);
    let world_rank = |node: usize, local: u32| world.rank(node as u32, local).expect("a rank of the world");
    let engines = (0..nodes)
        .map(|n| {
            let config = s.config.clone().with(|c| {
                c.topology.job = "dst".into();
                c.topology.set_world(&world);
                c.topology.node = n as u32;
                if let Some(a) = s.algorithm {
                    c.protocol.algorithm = AlgorithmChoice::Fixed(a);
                }
            });
            Engine::new(&config, crc32c::crc32c, true).expect("a valid engine configuration")
        })
        .collect();
    let mut cluster = Cluster::new(engines, s.faults.clone(), rng.fork(), crc32c::crc32c, s.dma, rng.fork());
    for &(r, t) in &s.crashes {
        let n = at[r].0;
        let m = &mut cluster.nodes[n];
        m.crash_at = Some(m.crash_at.map_or(t, |c| c.min(t)));
    }
    cluster.inject_faults(&s.fault);

    let mut procs: Vec<Proc> = at
        .iter()
        .map(|&(node, local)| {
            let host = cluster.with_engine(node, |e, now| {
                let h = e.attach_host(LocalRank::Fixed(local), now).expect("a free local rank");
                e.host_arrived(h);
                h
            });
            Proc { node, local, host, comms: (0..s.comms.len()).map(|_| None).collect() }
        })
        .collect();

    // Communicators: identities drawn as a creator would, handed to every member.
    let mut handles = Vec::with_capacity(s.comms.len());
    let mut secrets = Vec::with_capacity(s.comms.len());
    let mut frng = SimRng::new(s.seed ^ FORGE_SALT ^ 0x5ec);
    for (c, plan) in s.comms.iter().enumerate() {
        let cookie = rng.next_u64() | 1;
        handles.push(cookie);
        let mut group = [0u8; 14];
        group.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        let seed = rng.next_u64();
        let mut key = [0u8; 32];
        key.iter_mut().for_each(|b| *b = frng.next_u64() as u8);
        secrets.push(ringcast_proto::comm::auth::Secret(key));
        let worlds: Vec<u32> = plan.members.iter().map(|&r| world_rank(at[r].0, at[r].1)).collect();
        for (rank, &r) in plan.members.iter().enumerate() {
            let header = CommCreateHeader::new(worlds.len() as u32, rank as u32, seed, group, key);
            let record: Vec<u8> = header.record(&worlds).collect();
            let p = &procs[r];
            let (node, local, host) = (p.node, p.local, p.host);
            let mut register = |seg: u64, bytes: Vec<u8>, len: u64, access| {
                let m = &mut cluster.nodes[node];
                m.mem.insert(seg, bytes);
                m.engine.register(host, SegmentHandle(seg), len, 0, len, access).expect("a region")
            };
            let record_len = record.len() as u64;
            let rec_key = register(segment(local, c, RECORD), record, record_len, Access::READ);
            let size = plan.members.len() as u32;
            let mut sends = vec![RegionKey::NONE; plan.bcasts.len()];
            let bufs = plan
                .bcasts
                .iter()
                .enumerate()
                .map(|(k, &(root, len))| {
                    if len == 0 {
                        return RegionKey::NONE;
                    }
                    if plan.alltoall[k] {
                        // The work buffer (result, then scratch) and a send buffer of a block
                        // for every rank.
                        let whole = u64::from(len) * u64::from(size);
                        let send: Vec<u8> = (0..size)
                            .flat_map(|q| super::pair_pattern(s.seed, c, k, rank as u32, q, len))
                            .collect();
                        sends[k] = register(send_segment(local, c, k as u64), send, whole, Access::READ);
                        let work = whole * (u64::from(size) + 1);
                        return register(
                            segment(local, c, k as u64),
                            vec![0xEE; work as usize],
                            work,
                            Access::READ_WRITE,
                        );
                    }
                    if plan.barrier[k] {
                        // The barrier's scratch: one byte per rank.
                        return register(
                            segment(local, c, k as u64),
                            vec![0; len as usize],
                            u64::from(len),
                            Access::READ_WRITE,
                        );
                    }
                    if let Some(in_place) = plan.allgather[k] {
                        // The receive buffer for every block (poison), this rank's block in place
                        // or in a send block of its own.
                        let total = u64::from(len) * u64::from(size);
                        let mine = super::block_pattern(s.seed, c, k, rank as u32, len);
                        let mut recv = vec![0xEE; total as usize];
                        if in_place && !(s.plant_missing_block && rank == 0) {
                            let at = rank * len as usize;
                            recv[at..at + len as usize].copy_from_slice(&mine);
                        } else if !in_place {
                            let seg = send_segment(local, c, k as u64);
                            sends[k] = register(seg, mine, u64::from(len), Access::READ);
                        }
                        return register(segment(local, c, k as u64), recv, total, Access::READ_WRITE);
                    }
                    let mine = root as usize == rank;
                    let bytes = match (mine, plan.aborted[k]) {
                        // An unreadable root buffer: registered, but its memory is gone.
                        (true, true) => Vec::new(),
                        (true, false) => super::pattern(s.seed, c, k, len),
                        (false, _) => vec![0; len as usize],
                    };
                    register(segment(local, c, k as u64), bytes, u64::from(len), Access::READ_WRITE)
                })
                .collect();
            // The buffers of a call this rank makes instead of the step's.
            let disagree = plan
                .disagree
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    let none = (RegionKey::NONE, RegionKey::NONE);
                    let Some(d) = d.filter(|d| d.rank == rank as u32) else { return none };
                    let (work, send) = d.call.buffers(size);
                    let seg = disagree_segment(local, c, k as u64);
                    let fill = super::pattern(s.seed ^ DISAGREE_FILL, c, k, work as u32);
                    let work = register(seg, fill, work, Access::READ_WRITE);
                    let send = match send {
                        0 => RegionKey::NONE,
                        n => register(seg | SEND, vec![0x5d; n as usize], n, Access::READ),
                    };
                    (work, send)
                })
                .collect();
            procs[r].comms[c] =
                Some(Membership { rank: rank as u32, record: rec_key, record_len, bufs, sends, disagree });
        }
    }

    for _ in 0..s.foreign {
        let to = rng.below(nodes as u64) as usize;
        let t = rng.below(1_000_000);
        let len = rng.range(0, 120) as usize;
        let frame: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        cluster.inject(to, PeerId(rng.below(nodes as u64) as u32), t, frame);
    }
    for _ in 0..s.hostile {
        let len = rng.range(40, 200) as usize;
        let mut f: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        // The engines' version byte: past it, to the cookie and the tag.
        f[0] = s.config.protocol.auth.wire_version();
        f[1] = rng.range(1, 6) as u8;
        f[8..16].copy_from_slice(&handles[rng.below(handles.len() as u64) as usize].to_le_bytes());
        let n = f.len() - 4;
        let sum = crc32c::crc32c(&f[..n]).to_le_bytes();
        f[n..].copy_from_slice(&sum);
        let to = rng.below(nodes as u64) as usize;
        cluster.inject(to, PeerId(rng.below(nodes as u64) as u32), rng.below(2_000_000), f);
    }

    // The forger sees the protocol's traffic: a communicator's members there are the engines
    // holding its ranks, in order of their first rank (the engine's rule, `engine::comms`), and
    // its broadcasts those the ABI lets through (not 0 bytes).
    let payload = s.config.protocol.mtu - (WIRE_HEADER_LEN + WIRE_TRAILER_LEN + DIGEST_LEN) as u32;
    let auth = s.config.protocol.auth;
    let forger = if s.forger_has_key {
        Forger::with_real_key(payload, auth)
    } else {
        Forger::new(&mut frng, payload, auth)
    };
    let mut forged = Vec::new();
    for _ in 0..s.forged {
        let c = frng.below(s.comms.len() as u64) as usize;
        let plan = &s.comms[c];
        let mut engines: Vec<usize> = Vec::new();
        for &r in &plan.members {
            if !engines.contains(&at[r].0) {
                engines.push(at[r].0);
            }
        }
        let engine_rank = |rank: u32| {
            let n = at[plan.members[rank as usize]].0;
            engines.iter().position(|&e| e == n).unwrap_or(0) as u32
        };
        let n_engines = engines.len() as u32;
        // Leader-based compositions (where the ranks allow it): one part per engine.
        let node_counts = node_parts(s, c);
        let bcasts: Vec<(u32, u32)> = plan
            .bcasts
            .iter()
            .zip(plan.allgather.iter().zip(plan.barrier.iter().zip(&plan.alltoall)))
            .zip(plan.allreduce.iter().zip(&plan.scan))
            // (A scan gathers every rank's block, as an allgather does.)
            .map(|((b, (ag, rest)), (red, scan))| (b, (ag, rest), red.is_some() && scan.is_none()))
            .filter(|(b, _, _)| b.1 > 0)
            // An allgather is one broadcast per rank, rooted at each in turn; a barrier one
            // byte from each engine in turn; an alltoall a whole send buffer from each rank.
            .flat_map(|(&(root, len), (ag, (&barrier, &a2a)), reduction)| -> Vec<(u32, u32)> {
                if a2a {
                    let whole = len * plan.members.len() as u32;
                    (0..plan.members.len() as u32).map(|r| (engine_rank(r), whole)).collect()
                } else if barrier {
                    (0..n_engines).map(|e| (e, 1)).collect()
                } else if let (Some(_), Some(counts)) = (ag, &node_counts) {
                    // A reduction's node part is one block; an allgather's, its ranks' blocks.
                    let per = |n: u32| if reduction { len } else { len * n };
                    counts.iter().enumerate().map(|(e, &n)| (e as u32, per(n))).collect()
                } else if ag.is_some() {
                    (0..plan.members.len() as u32).map(|r| (engine_rank(r), len)).collect()
                } else {
                    vec![(engine_rank(root), len)]
                }
            })
            .collect();
        let t = Target { cookie: handles[c], members: &engines, bcasts: &bcasts, secret: secrets[c] };
        // Early (before or while the broadcasts run) and spread out.
        let when = frng.below(3_000_000);
        for f in forger.forge(&mut frng, &t) {
            let at = when + frng.below(50_000);
            forged.push(Forged { to: f.to, at, comm: c });
            cluster.inject(f.to, PeerId(f.from as u32), at, f.frame);
        }
    }
    for n in 0..nodes {
        cluster.wake(n, 0);
    }
    Built { cluster, procs, handles, forged }
}
