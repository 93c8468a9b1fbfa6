//! `ringcast workload-rank`: one rank of a verified collective workload on a local cluster (the
//! program `ringcast demo` and the cluster tests run on every rank): broadcasts, then on request
//! allgathers, allreduces, barriers, reduces and alltoalls, every result checked. No rank pads
//! synchronization epochs: finalizing (and freeing a communicator) settles the last one.
//!
//! Every rank derives the same schedule from the seed: broadcast `k` has a size drawn from
//! `sizes` and a root drawn from the world ranks, and its bytes are a pattern of `(seed, k)`.
//! Before each broadcast a rank waits a random arrival skew (`skew_us`, its own draw), fills its
//! buffer (the pattern at the root, poison elsewhere, so a stale or partial delivery cannot
//! pass), posts, waits, and checks every byte — the root's too. It prints one line per
//! broadcast:
//!
//! `B k size root latency_ns done_ns frags_multicast frags_repair penalty_rounds retransmits`
//!
//! where `done_ns` is `CLOCK_MONOTONIC` at completion (one clock for every process of the
//! machine, so completion spread across ranks is measured directly). Local rank 0 also prints
//! its engine's counters (`N syncs overrun crc_drops other_drops repair_frames`).
//!
//! `--victim R --die-at K`: world rank `R` posts broadcast `K` and SIGKILLs itself before it
//! completes — a member killed mid-broadcast. With `--expect-failure` the other ranks must then
//! end with a typed error (printed `E k error`, exit 0) instead of hanging.
use crate::cluster::host_from_env;
use clap::Args;
use ringcast_host::{Access, Config, SharedBuf, SubmissionDescriptor};
use ringcast_proto::comm::ident::{derived_identity, CommIdentity};
use ringcast_proto::model::compose::{self, Exchange};
use std::process::ExitCode;

/// `ringcast workload-rank` options (the same at every rank).
#[derive(Args, Clone, Debug)]
pub struct WorkloadArgs {
    /// Broadcasts.
    #[arg(long, default_value_t = 100)]
    pub count: u32,
    /// Message sizes to draw from, in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [2u64, 1024, 65536])]
    pub sizes: Vec<u64>,
    /// Seed of the schedule and the patterns.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Largest random arrival skew before each broadcast, in microseconds.
    #[arg(long, default_value_t = 0)]
    pub skew_us: u64,
    /// World rank that kills itself mid-broadcast.
    #[arg(long)]
    pub victim: Option<u32>,
    /// Broadcast during which the victim dies.
    #[arg(long, default_value_t = 0)]
    pub die_at: u32,
    /// The other ranks must end with a typed error (exit 0 when they do, 1 if all succeed).
    #[arg(long)]
    pub expect_failure: bool,
    /// Also create communicators of the ranks with equal `rank % split` (`COMM_CREATE`) and
    /// run every other broadcast on this rank's one; freed at the end (`COMM_FREE`).
    #[arg(long, default_value_t = 1)]
    pub split: u32,
    /// Allgathers on each communicator after the broadcasts (every other one in place), every
    /// block of every rank checked.
    #[arg(long, default_value_t = 0)]
    pub allgathers: u32,
    /// Bytes of each rank's allgather block.
    #[arg(long, default_value_t = 3000)]
    pub allgather_block: u64,
    /// Allreduces on each communicator after the allgathers (alternately sums of 64-bit
    /// integers and of doubles, in place and not), every result checked against this rank's
    /// own reduction of every rank's contribution in rank order.
    #[arg(long, default_value_t = 0)]
    pub allreduces: u32,
    /// Barriers on each communicator after the allreduces, each rank arriving after a random
    /// nap (up to `--skew-us`); every rank checks it left no earlier than the last one arrived.
    #[arg(long, default_value_t = 0)]
    pub barriers: u32,
    /// Reduces on each communicator after the barriers, the root moving round the ranks
    /// (alternately maxima of 64-bit integers and sums of doubles); the root checks the result
    /// bit for bit against its own rank-order reduction.
    #[arg(long, default_value_t = 0)]
    pub reduces: u32,
    /// Alltoalls on each communicator after the reduces, every block of every sender checked.
    #[arg(long, default_value_t = 0)]
    pub alltoalls: u32,
    /// Bytes of each alltoall block (a rank's whole send buffer, blocks × ranks, must fit one
    /// message).
    #[arg(long, default_value_t = 512)]
    pub alltoall_block: u64,
}

/// A communicator of the workload: its handle, size, this rank's rank in it, and the seed its
/// patterns and schedule use.
struct WComm {
    handle: u64,
    size: u32,
    me: u32,
    seed: u64,
    /// How many of its members each engine holds, in order, when the engine reduces leader-based
    /// on it (the reduction order then goes node by node: `reduction_order`); `None`: rank order.
    groups: Option<Vec<u32>>,
}

/// The engines' node-by-node groups of `members` (world ranks, in communicator order) when the
/// configured composition makes reductions leader-based and every engine's members are
/// consecutive (the engine's own rule, `engine/allgather/`); `None` otherwise.
fn reduction_groups(config: &ringcast_offload::Config, members: &[u32]) -> Option<Vec<u32>> {
    if !config.protocol.allgather_parts.leader_based() {
        return None;
    }
    let world = config.topology.world();
    let mut groups: Vec<(u32, u32)> = Vec::new();
    for &r in members {
        let node = world.node_of(r)?;
        match groups.last_mut() {
            Some((last, n)) if *last == node => *n += 1,
            _ => groups.push((node, 1)),
        }
    }
    let consecutive = groups.iter().enumerate().all(|(i, &(n, _))| groups[..i].iter().all(|&(m, _)| m != n));
    consecutive.then(|| groups.into_iter().map(|(_, n)| n).collect())
}

/// The split communicator of `color` in job `job`: every member derives the same identity from
/// the job name (the identity a bootstrap would distribute), keyed by the job's secret.
fn split_identity(config: &ringcast_offload::Config, color: u32) -> CommIdentity {
    derived_identity(&format!("{}/split/{color}", config.topology.job), config.topology.job_secret.0.as_ref())
}

/// SplitMix64: the schedule's and the patterns' generator.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Size and root of broadcast `k` of the schedule.
pub fn schedule(seed: u64, k: u32, sizes: &[u64], world: u32) -> (u64, u32) {
    let size = sizes[(mix(seed ^ u64::from(k)) % sizes.len() as u64) as usize].max(1);
    let root = (mix(seed.rotate_left(17) ^ u64::from(k) ^ 0x5eed) % u64::from(world.max(1))) as u32;
    (size, root)
}

/// Fills `out` with broadcast `k`'s pattern.
fn pattern(seed: u64, k: u32, out: &mut [u8]) {
    let base = mix(seed ^ (u64::from(k) << 32));
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let w = mix(base ^ i as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One rank.
pub fn rank(a: WorkloadArgs) -> ExitCode {
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringcast workload-rank: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &WorkloadArgs) -> Result<(), String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let mut host = host_from_env()?;
    let local = host.local_rank().ok_or("this process holds no local rank on its engine")?;
    let me = config.topology.world_rank(local).ok_or("local rank outside this node's share of the world")?;
    let world = config.topology.world_size();
    if a.sizes.is_empty() {
        return Err("no sizes".into());
    }
    let largest = a.sizes.iter().copied().max().unwrap_or(1).max(1) as usize;
    let buf = SharedBuf::new(largest).map_err(|e| e.to_string())?;
    let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let mut want = vec![0u8; largest];
    let mut got = vec![0u8; largest];
    let poison = vec![0xEEu8; largest];
    let mut lines = String::with_capacity(a.count as usize * 64);
    let mut skew = mix(a.seed ^ u64::from(me) << 40);
    let everyone: Vec<u32> = (0..world).collect();
    let groups = reduction_groups(&config, &everyone);
    let mut comms = vec![WComm { handle: 0, size: world, me, seed: a.seed, groups }];
    if a.split > 1 {
        let color = me % a.split;
        let members: Vec<u32> = (0..world).filter(|r| r % a.split == color).collect();
        let my_rank = members.iter().position(|&r| r == me).unwrap_or(0) as u32;
        let id = split_identity(&config, color);
        let (handle, seed) = (id.cookie, id.seed);
        host.comm_create(&id, my_rank, &members)
            .map_err(|e| format!("rank {me}: creating split communicator {color}: {e}"))?;
        let size = members.len() as u32;
        let groups = reduction_groups(&config, &members);
        comms.push(WComm { handle, size, me: my_rank, seed: a.seed ^ seed, groups });
    }
    for k in 0..a.count {
        let n_comms = comms.len();
        let c = &mut comms[k as usize % n_comms];
        let (comm, my_rank, seed) = (c.handle, c.me, c.seed);
        let (size, root) = schedule(seed, k, &a.sizes, c.size);
        let n = size as usize;
        pattern(seed, k, &mut want[..n]);
        let fill = if root == my_rank { &want[..n] } else { &poison[..n] };
        buf.write_at(0, fill).map_err(|e| e.to_string())?;
        if a.skew_us > 0 {
            skew = mix(skew);
            std::thread::sleep(std::time::Duration::from_micros(skew % a.skew_us));
        }
        if a.victim == Some(me) && k == a.die_at {
            let cookie = host.next_cookie();
            host.post(&SubmissionDescriptor::bcast(cookie, 0, root, region.at(0), size))
                .map_err(|e| e.to_string())?;
            print!("{lines}");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            // SIGKILL to ourselves: no detach, no cleanup of any kind — a crash.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        let t0 = monotonic_ns();
        let cqe = match host.bcast(comm, root, region.at(0), size) {
            Ok(c) => c,
            Err(e) if a.expect_failure && a.victim.is_some() && k >= a.die_at => {
                let what = match e.status() {
                    Some(kind) => format!("{kind:?}"),
                    None => e.to_string().replace(' ', "_"),
                };
                print!("{lines}");
                println!("E {k} {what}");
                return Ok(());
            }
            Err(e) => return Err(format!("rank {me}: broadcast {k} ({size} B from {root}): {e}")),
        };
        let t1 = monotonic_ns();
        buf.read_at(0, &mut got[..n]).map_err(|e| e.to_string())?;
        if got[..n] != want[..n] {
            let first = got[..n].iter().zip(&want[..n]).position(|(g, w)| g != w).unwrap_or(0);
            return Err(format!(
                "rank {me}: broadcast {k} ({size} B from {root}): wrong bytes from offset {first}"
            ));
        }
        use std::fmt::Write as _;
        let _ = writeln!(
            lines,
            "B {k} {size} {root} {} {t1} {} {} {} {}",
            t1 - t0,
            cqe.frags_multicast,
            cqe.frags_repair,
            cqe.penalty_rounds,
            cqe.retransmits
        );
    }
    if a.allgathers > 0 {
        allgathers(a, &mut host, &mut comms, &mut lines).map_err(|e| format!("rank {me}: {e}"))?;
    }
    if a.allreduces > 0 {
        reductions(a, &config.engine(), &mut host, &mut comms, &mut lines, false)
            .map_err(|e| format!("rank {me}: {e}"))?;
    }
    if a.barriers > 0 {
        barriers(a, &mut host, &mut comms, &mut lines, &mut skew).map_err(|e| format!("rank {me}: {e}"))?;
    }
    if a.reduces > 0 {
        reductions(a, &config.engine(), &mut host, &mut comms, &mut lines, true)
            .map_err(|e| format!("rank {me}: {e}"))?;
    }
    if a.alltoalls > 0 {
        alltoalls(a, &mut host, &mut comms, &mut lines).map_err(|e| format!("rank {me}: {e}"))?;
    }
    if a.expect_failure && a.victim.is_some() && a.victim != Some(me) {
        print!("{lines}");
        return Err(format!("rank {me}: every broadcast succeeded although rank {:?} died", a.victim));
    }
    // No padding of synchronization epochs: freeing a communicator, and finalizing the world
    // (below), settle its last, partial epoch with the other engines.
    for c in comms.iter().skip(1) {
        host.comm_free(c.handle).map_err(|e| format!("rank {me}: freeing communicator: {e}"))?;
        // Freed: the engine no longer takes broadcasts on it from this process.
        match host.bcast(c.handle, 0, region.at(0), 1) {
            Err(e) if e.status() == Some(ringcast_host::StatusKind::UnknownCommunicator) => {}
            other => return Err(format!("rank {me}: broadcast on a freed communicator: {other:?}")),
        }
    }
    if local == 0 {
        if let Ok(n) = host.net_stats() {
            let _ = std::fmt::Write::write_fmt(
                &mut lines,
                format_args!(
                    "N {} {} {} {} {}\n",
                    n.syncs, n.overrun, n.crc_drops, n.other_drops, n.repair_frames
                ),
            );
        }
    }
    print!("{lines}");
    // MPI_Finalize's part: the world's last, partial epoch settles among the engines.
    host.finalize().map_err(|e| format!("rank {me}: finalize: {e}"))
}

/// Rank `r`'s block of allgather `g` on a communicator seeded `seed`.
fn block_pattern(seed: u64, g: u32, r: u32, out: &mut [u8]) {
    pattern(seed ^ 0xa11_6a7e_u64 ^ (u64::from(r) << 40), g, out)
}

/// `a.allgathers` allgathers on every communicator, alternately in place and from a send
/// buffer; every block checked. Each consumes one broadcast per member of the communicator's
/// sequence.
fn allgathers(
    a: &WorkloadArgs,
    host: &mut ringcast_host::Host,
    comms: &mut [WComm],
    lines: &mut String,
) -> Result<(), String> {
    let block = a.allgather_block.max(1) as usize;
    let most = comms.iter().map(|c| c.size).max().unwrap_or(1) as usize;
    let recv = SharedBuf::new(block * most).map_err(|e| e.to_string())?;
    let send = SharedBuf::new(block).map_err(|e| e.to_string())?;
    let rr = host.register(&recv, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let rs = host.register(&send, Access::READ).map_err(|e| e.to_string())?;
    let mut mine = vec![0u8; block];
    let mut got = vec![0u8; block * most];
    let mut want = vec![0u8; block];
    for g in 0..a.allgathers {
        for c in comms.iter_mut() {
            let total = block * c.size as usize;
            recv.write_at(0, &vec![0xEE; total]).map_err(|e| e.to_string())?;
            block_pattern(c.seed, g, c.me, &mut mine);
            let in_place = g % 2 == 0;
            let from = if in_place {
                recv.write_at(c.me as u64 * block as u64, &mine).map_err(|e| e.to_string())?;
                None
            } else {
                send.write_at(0, &mine).map_err(|e| e.to_string())?;
                Some(rs.at(0))
            };
            let t0 = monotonic_ns();
            host.allgather(c.handle, rr.at(0), from, block as u64)
                .map_err(|e| format!("allgather {g} ({block} B blocks, {} ranks): {e}", c.size))?;
            let t1 = monotonic_ns();
            recv.read_at(0, &mut got[..total]).map_err(|e| e.to_string())?;
            for r in 0..c.size {
                block_pattern(c.seed, g, r, &mut want);
                let at = r as usize * block;
                if got[at..at + block] != want[..] {
                    return Err(format!("allgather {g}: block of rank {r} wrong"));
                }
            }
            use std::fmt::Write as _;
            let _ = writeln!(lines, "G {g} {block} {} {}", c.size, t1 - t0);
        }
    }
    host.deregister(rr).map_err(|e| e.to_string())?;
    host.deregister(rs).map_err(|e| e.to_string())?;
    Ok(())
}

/// `a.barriers` barriers on every communicator, each rank arriving after a random nap (up to
/// `skew_us`). Every rank checks it left no earlier than the last rank arrived: the arrival
/// times — on this machine's monotonic clock, which every rank of `ringcast run` shares, also
/// across its network namespaces — are gathered by an allgather right after.
fn barriers(
    a: &WorkloadArgs,
    host: &mut ringcast_host::Host,
    comms: &mut [WComm],
    lines: &mut String,
    skew: &mut u64,
) -> Result<(), String> {
    let most = comms.iter().map(|c| c.size).max().unwrap_or(1) as usize;
    let times = SharedBuf::new(8 * most).map_err(|e| e.to_string())?;
    let rt = host.register(&times, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let mut got = vec![0u8; 8 * most];
    for g in 0..a.barriers {
        for c in comms.iter_mut() {
            if a.skew_us > 0 {
                *skew = mix(*skew);
                std::thread::sleep(std::time::Duration::from_micros(*skew % a.skew_us));
            }
            let arrived = monotonic_ns();
            host.barrier(c.handle).map_err(|e| format!("barrier {g} ({} ranks): {e}", c.size))?;
            let left = monotonic_ns();
            times.write_at(u64::from(c.me) * 8, &arrived.to_le_bytes()).map_err(|e| e.to_string())?;
            host.allgather(c.handle, rt.at(0), None, 8)
                .map_err(|e| format!("barrier {g}'s arrival times: {e}"))?;
            let n = 8 * c.size as usize;
            times.read_at(0, &mut got[..n]).map_err(|e| e.to_string())?;
            for (r, t) in got[..n].chunks_exact(8).enumerate() {
                let t = u64::from_le_bytes(t.try_into().unwrap_or_default());
                if left < t {
                    return Err(format!("barrier {g}: left at {left} ns, before rank {r} arrived at {t} ns"));
                }
            }
            use std::fmt::Write as _;
            let _ = writeln!(lines, "W {g} {} {}", c.size, left - arrived);
        }
    }
    host.deregister(rt).map_err(|e| e.to_string())?;
    Ok(())
}

/// Rank `r`'s contribution to allreduce `g` on a communicator seeded `seed`: `n` elements, as
/// 64-bit integers (`g` even) or doubles of mixed magnitudes (`g` odd).
fn contribution(seed: u64, g: u32, r: u32, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = mix(seed ^ 0xa11_7ed0 ^ (u64::from(g) << 48) ^ (u64::from(r) << 32) ^ i as u64);
            if g.is_multiple_of(2) {
                x.to_le_bytes()
            } else {
                let scale = 10f64.powi((x >> 58) as i32 - 8);
                (((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * scale).to_le_bytes()
            }
        })
        .collect()
}

/// Reductions on every communicator, every result compared bit for bit with this rank's own
/// left-to-right reduction of every rank's contribution (the engine's order: the same bits at
/// every rank). Not `rooted`: `a.allreduces` allreduces of 4 KiB, alternately sums of 64-bit
/// integers and of doubles, alternately in place and from a send buffer (two calls each);
/// `rooted`: `a.reduces` reduces of 2 KiB to the root `g mod size`, alternately maxima of
/// signed 64-bit integers (in place) and sums of doubles (from a send buffer), which only the
/// root checks (the others only see their call succeed).
fn reductions(
    a: &WorkloadArgs,
    engine: &ringcast_proto::config::EngineConfig,
    host: &mut ringcast_host::Host,
    comms: &mut [WComm],
    lines: &mut String,
    rooted: bool,
) -> Result<(), String> {
    use ringcast_host::{DataType, ReduceOp};
    let (count, n, tag, what) =
        if rooted { (a.reduces, 256, 'D', "reduce") } else { (a.allreduces, 512, 'R', "allreduce") };
    let len = n * 8;
    let most = comms.iter().map(|c| c.size).max().unwrap_or(1) as usize;
    let work = SharedBuf::new(len * most).map_err(|e| e.to_string())?;
    let send = SharedBuf::new(len).map_err(|e| e.to_string())?;
    let rw = host.register(&work, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let rs = host.register(&send, Access::READ).map_err(|e| e.to_string())?;
    let mut got = vec![0u8; len];
    for g in 0..count {
        for c in comms.iter_mut() {
            let ints = g.is_multiple_of(2);
            // Integers: sums (allreduce) or maxima (reduce); doubles: sums.
            let (dtype, op) = match (ints, rooted) {
                (true, false) => (DataType::I64, ReduceOp::SUM),
                (true, true) => (DataType::I64, ReduceOp::MAX),
                (false, _) => (DataType::F64, ReduceOp::SUM),
            };
            let in_place = if rooted { ints } else { g % 4 < 2 };
            let mine = contribution(c.seed, g, c.me, n);
            let from = if in_place {
                work.write_at(c.me as u64 * len as u64, &mine).map_err(|e| e.to_string())?;
                None
            } else {
                send.write_at(0, &mine).map_err(|e| e.to_string())?;
                Some(rs.at(0))
            };
            let root = g % c.size;
            let t0 = monotonic_ns();
            let done = match rooted {
                false => host.allreduce(c.handle, rw.at(0), from, len as u64, dtype, op),
                true => host.reduce(c.handle, root, rw.at(0), from, len as u64, dtype, op),
            };
            done.map_err(|e| format!("{what} {g} ({len} B, {} ranks): {e}", c.size))?;
            let t1 = monotonic_ns();
            if !rooted || c.me == root {
                work.read_at(0, &mut got).map_err(|e| e.to_string())?;
                // Leader-based on several engines, the node results combine by recursive
                // doubling between the leaders (a balanced tree, not left to right) unless the
                // call's exchange is multicast: the configuration's or the cost model's choice,
                // as the engines make it (`model/compose.rs`).
                let doubling = c.groups.as_ref().is_some_and(|groups| {
                    groups.len() >= 2
                        && compose::allreduce(engine, groups.len() as u32, largest(groups), len as u64, 8)
                            != Exchange::Multicast
                });
                let want = reduction_order(c, g, n, doubling, |p, q| match (ints, op) {
                    (true, ReduceOp::MAX) => i64::from_le_bytes(p).max(i64::from_le_bytes(q)).to_le_bytes(),
                    (true, _) => u64::from_le_bytes(p).wrapping_add(u64::from_le_bytes(q)).to_le_bytes(),
                    (false, _) => (f64::from_le_bytes(p) + f64::from_le_bytes(q)).to_le_bytes(),
                });
                if got != want {
                    return Err(format!(
                        "{what} {g} ({} ranks): result differs from the reduction in the engine's order",
                        c.size
                    ));
                }
            }
            use std::fmt::Write as _;
            let _ = writeln!(lines, "{tag} {g} {len} {} {}", c.size, t1 - t0);
        }
    }
    host.deregister(rw).map_err(|e| e.to_string())?;
    host.deregister(rs).map_err(|e| e.to_string())?;
    Ok(())
}

/// This rank's own reduction of every member's contribution to reduction `g` (`n` 8-byte
/// elements) in the engine's documented order: left to right in rank order, or — leader-based
/// (`WComm::groups`) — each engine's members left to right, then the engines' results left to
/// right, or (`doubling`: between the leaders) node `i + P`'s folded into node `i`'s (`P` the
/// largest power of two not above the engines), then nodes `i` and `i + P/2` combined, then
/// `i` and `i + P/4`, ….
fn reduction_order(
    c: &WComm,
    g: u32,
    n: usize,
    doubling: bool,
    fold: impl Fn([u8; 8], [u8; 8]) -> [u8; 8],
) -> Vec<u8> {
    let fold_into = |acc: &mut Vec<u8>, x: &[u8]| {
        for (w, v) in acc.chunks_exact_mut(8).zip(x.chunks_exact(8)) {
            let folded = fold(w.try_into().unwrap_or([0; 8]), v.try_into().unwrap_or([0; 8]));
            w.copy_from_slice(&folded);
        }
    };
    let whole = [c.size];
    let groups = c.groups.as_deref().unwrap_or(&whole);
    let mut first = 0;
    let mut nodes: Vec<Vec<u8>> = Vec::with_capacity(groups.len());
    for &count in groups {
        let mut node = contribution(c.seed, g, first, n);
        for r in first + 1..first + count {
            fold_into(&mut node, &contribution(c.seed, g, r, n));
        }
        first += count;
        nodes.push(node);
    }
    if doubling {
        let p = ringcast_proto::comm::links::power_below(nodes.len() as u32) as usize;
        for i in 0..nodes.len() - p {
            let upper = nodes[i + p].clone();
            fold_into(&mut nodes[i], &upper);
        }
        nodes.truncate(p);
        let mut d = p / 2;
        while d >= 1 {
            for i in 0..d {
                let upper = nodes[i + d].clone();
                fold_into(&mut nodes[i], &upper);
            }
            nodes.truncate(d);
            d /= 2;
        }
    }
    let mut nodes = nodes.into_iter();
    let mut want = nodes.next().unwrap_or_default();
    for node in nodes {
        fold_into(&mut want, &node);
    }
    want
}

/// Sender `s`'s block for rank `d` in alltoall `g` on a communicator seeded `seed`.
fn exchange_pattern(seed: u64, g: u32, s: u32, d: u32, out: &mut [u8]) {
    pattern(seed ^ 0xa11_2a11 ^ (u64::from(s) << 40) ^ (u64::from(d) << 20), g, out)
}

/// `a.alltoalls` alltoalls on every communicator, every block from every sender checked at
/// every receiver. Each is one broadcast per member (the multicast alltoall).
fn alltoalls(
    a: &WorkloadArgs,
    host: &mut ringcast_host::Host,
    comms: &mut [WComm],
    lines: &mut String,
) -> Result<(), String> {
    let block = a.alltoall_block.max(1) as usize;
    let most = comms.iter().map(|c| c.size).max().unwrap_or(1) as usize;
    // The result, then scratch for every rank's whole send buffer.
    let work = SharedBuf::new((most + 1) * most * block).map_err(|e| e.to_string())?;
    let send = SharedBuf::new(most * block).map_err(|e| e.to_string())?;
    let rw = host.register(&work, Access::READ_WRITE).map_err(|e| e.to_string())?;
    let rs = host.register(&send, Access::READ).map_err(|e| e.to_string())?;
    let mut out = vec![0u8; most * block];
    let mut got = vec![0u8; most * block];
    let mut want = vec![0u8; block];
    for g in 0..a.alltoalls {
        for c in comms.iter_mut() {
            let total = c.size as usize * block;
            for d in 0..c.size {
                let at = d as usize * block;
                exchange_pattern(c.seed, g, c.me, d, &mut out[at..at + block]);
            }
            send.write_at(0, &out[..total]).map_err(|e| e.to_string())?;
            work.write_at(0, &vec![0xEE; total]).map_err(|e| e.to_string())?;
            let t0 = monotonic_ns();
            host.alltoall(c.handle, rw.at(0), rs.at(0), block as u64)
                .map_err(|e| format!("alltoall {g} ({block} B blocks, {} ranks): {e}", c.size))?;
            let t1 = monotonic_ns();
            work.read_at(0, &mut got[..total]).map_err(|e| e.to_string())?;
            for s in 0..c.size {
                exchange_pattern(c.seed, g, s, c.me, &mut want);
                let at = s as usize * block;
                if got[at..at + block] != want[..] {
                    return Err(format!("alltoall {g}: block from rank {s} wrong"));
                }
            }
            use std::fmt::Write as _;
            let _ = writeln!(lines, "X {g} {block} {} {}", c.size, t1 - t0);
        }
    }
    host.deregister(rw).map_err(|e| e.to_string())?;
    host.deregister(rs).map_err(|e| e.to_string())?;
    Ok(())
}

/// The most ranks one engine holds.
fn largest(groups: &[u32]) -> u32 {
    groups.iter().copied().max().unwrap_or(1)
}
