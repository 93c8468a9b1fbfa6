//! Calls that disagree (issue 38): a step at which one rank makes another call than the others —
//! the same collective on the other side of a boundary of the cost model's choice of exchange
//! (`model/compose.rs`: an allreduce's, an allgather's — a scan's blocks are gathered as an
//! allgather's — or an alltoall's, forced or `auto`, as the scenario configured them), a scan
//! with another operation or the other of scan and exscan, or another collective altogether —
//! drawn from a stream of its own. The others' calls must end typed or with exactly their own bytes, the disagreeing rank's
//! typed (`Ok` only as the root of a broadcast, which completes once its message is in its
//! channel), and nobody may wait forever: where the exchanges differ, only the engines' check
//! of a call that waits (`engine/node/call_checks.rs`) ends it.
use super::setup::{node_parts, placement};
use super::{CommPlan, Scenario};
use ringcast_abi::{DataType, ReduceOp};
use ringcast_proto::model::compose::{self, Exchange};
use ringcast_proto::rng::SimRng;

/// Salt of the disagreement draws: a stream of their own.
const DISAGREE_SALT: u64 = 0xd15a_9ee0_0001;

/// Scenarios that draw disagreements at all: the others stay as they were (and benign where
/// they were).
const SCENARIOS: f64 = 0.15;
/// Of their eligible steps (bytes, a readable root, no call refused), those that disagree.
const STEPS: f64 = 0.3;
/// Longest block a disagreeing call of another collective moves (its buffers are the rank's
/// own, beside the step's).
const MAX_OTHER: u32 = 64 << 10;

/// What the disagreeing rank calls instead of the step's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A broadcast of `len` bytes from `root`.
    Bcast { root: u32, len: u32 },
    /// An allgather of `len`-byte blocks, in place.
    Allgather { len: u32 },
    /// An allreduce of `len` bytes, in place.
    Allreduce { len: u32, dtype: DataType, op: ReduceOp },
    /// An alltoall of `len`-byte blocks.
    Alltoall { len: u32 },
    /// A scan (`exclusive`: an exscan) of `len` bytes, in place.
    Scan { len: u32, dtype: DataType, op: ReduceOp, exclusive: bool },
    /// A barrier.
    Barrier,
}

impl Call {
    /// The work buffer and send buffer it needs on a communicator of `size` ranks.
    pub(super) fn buffers(&self, size: u32) -> (u64, u64) {
        let size = u64::from(size);
        match *self {
            Call::Bcast { len, .. } => (u64::from(len), 0),
            Call::Allgather { len } | Call::Allreduce { len, .. } | Call::Scan { len, .. } => {
                (u64::from(len) * size, 0)
            }
            Call::Alltoall { len } => (u64::from(len) * size * (size + 1), u64::from(len) * size),
            Call::Barrier => (size, 0),
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Call::Bcast { .. } => 0,
            Call::Allgather { .. } => 1,
            Call::Allreduce { .. } => 2,
            Call::Alltoall { .. } => 3,
            Call::Barrier => 4,
            Call::Scan { .. } => 5,
        }
    }
}

/// One rank's call at a step, against the others'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The disagreeing rank (of the communicator).
    pub rank: u32,
    /// What it calls.
    pub call: Call,
}

/// The call every other rank makes at step `k` of `plan`.
pub(super) fn step_call(plan: &CommPlan, k: usize) -> Call {
    let (root, len) = plan.bcasts[k];
    match (plan.alltoall[k], plan.barrier[k], plan.allgather[k], plan.allreduce[k]) {
        (true, ..) => Call::Alltoall { len },
        (_, true, ..) => Call::Barrier,
        (_, _, Some(_), Some((dtype, op))) if plan.scan[k].is_some() => {
            Call::Scan { len, dtype, op, exclusive: plan.scan[k] == Some(true) }
        }
        (_, _, Some(_), Some((dtype, op))) => Call::Allreduce { len, dtype, op },
        (_, _, Some(_), None) => Call::Allgather { len },
        _ => Call::Bcast { root, len },
    }
}

/// Draws scenario `s`'s disagreements, per communicator and step.
pub(super) fn draw(s: &Scenario) -> Vec<Vec<Option<Disagreement>>> {
    let mut g = SimRng::new(s.seed ^ DISAGREE_SALT);
    let on = g.chance(SCENARIOS);
    (0..s.comms.len())
        .map(|c| {
            let plan = &s.comms[c];
            (0..plan.bcasts.len())
                .map(|k| {
                    // (A rank alone disagrees with nobody: its call is just a call.)
                    let eligible = plan.members.len() > 1
                        && plan.bcasts[k].1 > 0
                        && !plan.aborted[k]
                        && plan.refused[k].is_none();
                    // (Drawn alike for every step, so one step's draw never shifts another's.)
                    let (pick, rank, across) =
                        (g.chance(STEPS), g.below(plan.members.len() as u64), g.chance(0.5));
                    if !(on && eligible && pick) {
                        return None;
                    }
                    let ours = step_call(plan, k);
                    let call = across
                        .then(|| across_boundary(s, c, ours))
                        .flatten()
                        .unwrap_or_else(|| another(plan, k, ours, &mut g));
                    Some(Disagreement { rank: rank as u32, call })
                })
                .collect()
        })
        .collect()
}

/// `ours` with a length on the other side of the boundary of its exchange nearest to its own
/// length, where the scenario's configuration and communicator `c` have one (`None`: no
/// boundary below the step's budget).
fn across_boundary(s: &Scenario, c: usize, ours: Call) -> Option<Call> {
    let plan = &s.comms[c];
    let size = plan.members.len() as u32;
    let config = &s.config;
    // The engines of the communicator and the most ranks one holds, in any placement.
    let (_, at) = placement(s);
    let mut per: Vec<(usize, u32)> = Vec::new();
    for &r in &plan.members {
        match per.iter_mut().find(|(n, _)| *n == at[r].0) {
            Some((_, count)) => *count += 1,
            None => per.push((at[r].0, 1)),
        }
    }
    let engines = per.len() as u32;
    let largest = per.iter().map(|&(_, n)| n).max().unwrap_or(1);
    let leaders = node_parts(s, c).filter(|g| g.len() >= 2);
    let budget = u64::from(config.protocol.max_message_bytes).min(1 << 20);
    let (len, elem, way): (u32, u64, Box<dyn Fn(u64) -> Exchange>) = match ours {
        Call::Allreduce { len, dtype, .. } if leaders.is_some() => {
            let elem = dtype.size().unwrap_or(1) as u64;
            (len, elem, Box::new(move |n| compose::allreduce(config, engines, largest, n, elem)))
        }
        Call::Allgather { len } if leaders.is_some() => {
            let most = u64::from(leaders.as_ref().and_then(|g| g.iter().copied().max()).unwrap_or(1));
            (len, 1, Box::new(move |n| compose::allgather(config, engines, most * n)))
        }
        // A scan's blocks are gathered as an allgather's (`engine/scan/`), in whole elements.
        Call::Scan { len, dtype, .. } if leaders.is_some() => {
            let most = u64::from(leaders.as_ref().and_then(|g| g.iter().copied().max()).unwrap_or(1));
            let elem = dtype.size().unwrap_or(1) as u64;
            (len, elem, Box::new(move |n| compose::allgather(config, engines, most * n)))
        }
        Call::Alltoall { len } => {
            (len, 1, Box::new(move |n| compose::alltoall(config, engines, size, largest, n)))
        }
        _ => return None,
    };
    let b = nearest_boundary(u64::from(len), elem, budget, &*way)?;
    let mine = way(u64::from(len));
    let other = [b - elem, b].into_iter().find(|&n| n > 0 && way(n) != mine)?;
    let other = u32::try_from(other).ok()?;
    Some(match ours {
        Call::Allreduce { dtype, op, .. } => Call::Allreduce { len: other, dtype, op },
        Call::Allgather { .. } => Call::Allgather { len: other },
        Call::Scan { dtype, op, exclusive, .. } => Call::Scan { len: other, dtype, op, exclusive },
        _ => Call::Alltoall { len: other },
    })
}

/// The boundary of `way` (a length, a multiple of `elem`, whose exchange differs from the one
/// `elem` below it) nearest to `len`, up to `budget` bytes: found on a doubling scan, then
/// narrowed by bisection.
fn nearest_boundary(len: u64, elem: u64, budget: u64, way: &dyn Fn(u64) -> Exchange) -> Option<u64> {
    let mut points = Vec::new();
    let mut n = elem;
    while n <= budget {
        points.push(n);
        n *= 2;
    }
    let mut found = Vec::new();
    for w in points.windows(2) {
        let (mut lo, mut hi) = (w[0], w[1]);
        if way(lo) == way(hi) {
            continue;
        }
        // `way(lo) != way(hi)`: narrow to adjacent multiples of `elem`.
        while hi - lo > elem {
            let mid = lo + (hi - lo) / 2 / elem * elem;
            let mid = mid.max(lo + elem);
            if way(mid) == way(lo) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        found.push(hi);
    }
    found.into_iter().min_by_key(|&b| b.abs_diff(len))
}

/// Another collective than `ours`, of the step's length (capped at [`MAX_OTHER`]; an
/// allreduce's or a scan's a whole number of its elements; an alltoall only on communicators of
/// up to 16 ranks, as the DST draws them) — or, against a scan, the same scan with another
/// operation or the other of scan and exscan.
fn another(plan: &CommPlan, k: usize, ours: Call, g: &mut SimRng) -> Call {
    let (root, len) = plan.bcasts[k];
    let size = plan.members.len() as u32;
    let len = len.clamp(8, MAX_OTHER);
    let mut kinds: Vec<u8> =
        (0..6).filter(|&kind| (kind != ours.kind() || kind == 5) && (kind != 3 || size <= 16)).collect();
    if kinds.is_empty() {
        kinds.push(4);
    }
    match kinds[g.below(kinds.len() as u64) as usize] {
        0 => Call::Bcast { root: root.min(size - 1), len },
        1 => Call::Allgather { len },
        2 => {
            let dtype = if g.chance(0.5) { DataType::I64 } else { DataType::F64 };
            Call::Allreduce { len: len / 8 * 8, dtype, op: ReduceOp::SUM }
        }
        3 => Call::Alltoall { len: len.min(4096) },
        5 => match ours {
            // The step's scan, but for its operation or for being inclusive.
            Call::Scan { len, dtype, op, exclusive } => match g.chance(0.5) {
                true => Call::Scan {
                    len,
                    dtype,
                    op: if op == ReduceOp::MAX { ReduceOp::SUM } else { ReduceOp::MAX },
                    exclusive,
                },
                false => Call::Scan { len, dtype, op, exclusive: !exclusive },
            },
            _ => {
                let dtype = if g.chance(0.5) { DataType::I64 } else { DataType::F64 };
                Call::Scan { len: len / 8 * 8, dtype, op: ReduceOp::SUM, exclusive: g.chance(0.5) }
            }
        },
        _ => Call::Barrier,
    }
}
