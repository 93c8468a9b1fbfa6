//! The DST's driver-side bookkeeping and its checker. The ledger plays every rank's host
//! process — it posts descriptors, blocking per (rank, communicator), and reads the completions
//! the engines publish — and records what it saw; the checker then judges the run from that
//! record, the simulated host memory and the engines' public counters alone (nothing of the
//! engine's inner state).
use super::setup::{segment, Forged, Proc};
use super::{pattern, DisagreeingCall, Report, Scenario, Violation};
use crate::cluster::Cluster;
use crate::reference::{reference_reduce, reference_reduce_doubling, reference_reduce_grouped, same_values};
use ringcast_abi::frame::DropReason;
use ringcast_abi::{Completion, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::intake::Departure;
use ringcast_proto::model::compose::{self, Exchange};
use ringcast_proto::rng::SimRng;
use ringcast_proto::Nanos;
use std::collections::{BTreeSet, VecDeque};

/// Index of a communicator's creation in a cookie (a broadcast has its index there).
const CREATE: u64 = 0xffff_fffe;
/// Index of a communicator's release in a cookie.
const FREE: u64 = 0xffff_ffff;

/// The cookie of step `k` of communicator `c` (broadcast index, [`CREATE`] or [`FREE`]).
fn cookie(c: usize, k: u64) -> u64 {
    ((c as u64) << 32) | k
}

/// One rank's sequence of descriptors: on every communicator it is a member of, create, the
/// broadcasts in order, maybe free — step `j` of every communicator (in communicator order)
/// before step `j + 1` of any. Every rank's sequence is thus a subsequence of one global order,
/// as MPI asks of collectives on overlapping communicators. A rank keeps up to
/// [`Scenario::window`] collectives in flight (1: a process blocking on each; more: non-blocking
/// calls, `MPI_I*` then a wait, completed in any order), and creates and frees a communicator
/// with nothing else in flight, as blocking calls. (Non-blocking calls posted in different
/// orders at different ranks are `tests/comm_orders.rs`'s.)
#[derive(Clone, Debug)]
struct Lane {
    rank: usize,
    /// (communicator, step): step 0 creates, `1..=n` are broadcasts `0..n`, `n + 1` frees.
    steps: Vec<(usize, usize)>,
    /// Steps posted so far.
    next: usize,
    /// Steps posted and not completed yet.
    in_flight: u32,
    /// A communicator's creation or release is in flight: nothing else is posted beside it.
    blocking: bool,
    ready_at: Nanos,
}

impl Lane {
    /// Whether step `(c, step)` creates or frees its communicator (a blocking call).
    fn life(s: &Scenario, (c, step): (usize, usize)) -> bool {
        step == 0 || step > s.comms[c].bcasts.len()
    }

    /// Whether its next step may be posted now (its time aside): a collective while fewer than
    /// the window are in flight and no creation or release is; a creation or release with
    /// nothing in flight.
    fn may_post(&self, s: &Scenario) -> bool {
        let Some(&next) = self.steps.get(self.next) else { return false };
        match Lane::life(s, next) {
            true => self.in_flight == 0,
            false => !self.blocking && self.in_flight < s.window.max(1),
        }
    }
}

/// When a step was posted (`None`: not yet) and when it completed.
type Times = (Option<Nanos>, Nanos);

/// What the driver posted and saw.
pub(super) struct Ledger {
    procs: Vec<Proc>,
    handles: Vec<u64>,
    lanes: Vec<Lane>,
    /// Lanes (ranks) of each node.
    lanes_at: Vec<Vec<usize>>,
    /// Ranks that finished every step and detached (`MPI_Finalize`).
    finalized: Vec<bool>,
    /// When each node's first process detached: its communicators may be let go from then on.
    first_detach: Vec<Nanos>,
    /// Rank of each (node, host id).
    rank_of: Vec<Vec<usize>>,
    /// Cookies each rank posted and has not seen completed, in order.
    posted: Vec<VecDeque<u64>>,
    /// Broadcast completions: `seen[rank][comm][bcast]`.
    seen: Vec<Vec<Vec<Option<Completion>>>>,
    /// When each step was posted and when it completed, indexed as `seen`.
    times: Vec<Vec<Vec<Times>>>,
    /// Published completions read so far.
    cursor: usize,
    /// Wake-ups scheduled per node and not yet due: one per distinct time, or every event of a
    /// node with many waiting lanes would schedule a wake per lane, each doing the same again.
    wakes: Vec<BTreeSet<Nanos>>,
    /// When each node let go of each communicator's protocol side (`released[node][comm]`,
    /// `Nanos::MAX`: not yet), as its public communicator list shows it — watched only at
    /// nodes forged frames are still to reach ([`Ledger::watch_release`]).
    released: Vec<Vec<Nanos>>,
    /// The last forged frame's arrival at each node (0: none).
    last_forged: Vec<Nanos>,
}

impl Ledger {
    pub(super) fn new(s: &Scenario, procs: Vec<Proc>, handles: Vec<u64>, forged: &[Forged]) -> Ledger {
        let mut lanes = Vec::new();
        let mut rank_of: Vec<Vec<usize>> = Vec::new();
        for (r, p) in procs.iter().enumerate() {
            if rank_of.len() <= p.node {
                rank_of.resize(p.node + 1, Vec::new());
            }
            let hosts = &mut rank_of[p.node];
            if hosts.len() <= p.host.0 as usize {
                hosts.resize(p.host.0 as usize + 1, usize::MAX);
            }
            hosts[p.host.0 as usize] = r;
            let mine: Vec<usize> = (0..s.comms.len()).filter(|&c| p.comms[c].is_some()).collect();
            let longest = mine.iter().map(|&c| Self::steps(s, c)).max().unwrap_or(0);
            let steps = (0..longest)
                .flat_map(|j| mine.iter().filter(move |&&c| j < Self::steps(s, c)).map(move |&c| (c, j)))
                .collect();
            lanes.push(Lane { rank: r, steps, next: 0, in_flight: 0, blocking: false, ready_at: 0 });
        }
        let seen =
            (0..procs.len()).map(|_| s.comms.iter().map(|p| vec![None; p.bcasts.len()]).collect()).collect();
        let times = (0..procs.len())
            .map(|_| s.comms.iter().map(|p| vec![(None, 0); p.bcasts.len()]).collect())
            .collect();
        let posted = vec![VecDeque::new(); procs.len()];
        let wakes = vec![BTreeSet::new(); rank_of.len()];
        let mut lanes_at = vec![Vec::new(); rank_of.len()];
        for (l, lane) in lanes.iter().enumerate() {
            lanes_at[procs[lane.rank].node].push(l);
        }
        let finalized = vec![false; procs.len()];
        let first_detach = vec![Nanos::MAX; rank_of.len()];
        let released = vec![vec![Nanos::MAX; s.comms.len()]; rank_of.len()];
        let mut last_forged = vec![0; rank_of.len()];
        for f in forged {
            if let Some(l) = last_forged.get_mut(f.to) {
                *l = (*l).max(f.at);
            }
        }
        Ledger {
            procs,
            handles,
            lanes,
            lanes_at,
            rank_of,
            finalized,
            first_detach,
            posted,
            seen,
            times,
            cursor: 0,
            wakes,
            released,
            last_forged,
        }
    }

    /// After an event at node `n`: if forged frames are still to reach it, notes the
    /// communicators whose protocol side its engine let go of by now (it broke them there).
    /// An engine changes only in its own events, so the time is exact.
    pub(super) fn watch_release(&mut self, cluster: &Cluster, n: usize) {
        let now = cluster.now();
        if self.last_forged.get(n).is_none_or(|&l| now > l) {
            return;
        }
        let open = &self.released[n];
        if open.iter().all(|&t| t != Nanos::MAX) {
            return;
        }
        for info in cluster.nodes[n].engine.comm_list().iter().filter(|i| i.released) {
            if let Some(c) = self.handles.iter().position(|&h| h == info.handle) {
                self.released[n][c] = self.released[n][c].min(now);
            }
        }
    }

    /// Has node `n` woken at `at` (once, however many lanes wait for that time).
    fn wake(&mut self, cluster: &mut Cluster, n: usize, at: Nanos) {
        if self.wakes[n].insert(at) {
            cluster.wake(n, at);
        }
    }

    /// Steps of a lane on communicator `c`: create, every broadcast, and free if the scenario
    /// frees its communicators.
    fn steps(s: &Scenario, c: usize) -> usize {
        1 + s.comms[c].bcasts.len() + usize::from(s.free_comms)
    }

    /// Reads the completions published since last time: each must be the next its host is
    /// owed (in descriptor order), and the first for its broadcast at its rank; frees its
    /// lane, whose next post is due after a random arrival skew.
    pub(super) fn drain(
        &mut self,
        s: &Scenario,
        cluster: &mut Cluster,
        rng: &mut SimRng,
    ) -> Result<(), Violation> {
        while self.cursor < cluster.published().len() {
            let p = cluster.published()[self.cursor];
            self.cursor += 1;
            let stray = Violation::Stray { node: p.node, cookie: p.cqe.cookie };
            let rank =
                *self.rank_of.get(p.node).and_then(|h| h.get(p.host.0 as usize)).ok_or(stray.clone())?;
            // One call in flight: the next owed. Several: any of them, each once.
            let at = match s.window > 1 {
                true => self.posted[rank].iter().position(|&c| c == p.cqe.cookie),
                false => self.posted[rank].front().map(|_| 0),
            };
            match at.and_then(|i| self.posted[rank].remove(i)) {
                Some(c) if c == p.cqe.cookie => {}
                Some(_) => return Err(Violation::OutOfOrder { rank, cookie: p.cqe.cookie }),
                None => return Err(stray),
            }
            let status = StatusKind::try_from(p.cqe.status).map_err(|_| stray)?;
            let (c, k) = ((p.cqe.cookie >> 32) as usize, p.cqe.cookie & 0xffff_ffff);
            if k == CREATE || k == FREE {
                if status != StatusKind::Ok {
                    return Err(Violation::CommLife { rank, comm: c, status });
                }
            } else if self.seen[rank][c][k as usize].replace(p.cqe).is_some() {
                return Err(Violation::DoubleCompletion { rank, comm: c, bcast: k as usize });
            } else {
                self.times[rank][c][k as usize].1 = p.at;
            }
            let lane = &mut self.lanes[rank];
            lane.in_flight = lane.in_flight.saturating_sub(1);
            if k == CREATE || k == FREE {
                lane.blocking = false;
            }
            // Arrival skew (an application's gaps) before broadcasts and releases; the
            // communicators are created back to back at start, as a job sets them up (an
            // engine that has not created one yet drops its frames: a gap there is a
            // different scenario, see the module documentation of `dst`).
            let creating = lane.steps.get(lane.next).is_some_and(|&(_, j)| j == 0);
            let skew = if s.skew > 0 && !creating { rng.below(s.skew + 1) } else { 0 };
            lane.ready_at = p.at + skew;
            let at = lane.ready_at;
            self.wake(cluster, p.node, at);
        }
        Ok(())
    }

    /// Posts the next step of every lane of node `n`'s ranks whose previous step completed and
    /// whose time has come.
    pub(super) fn post_ready(&mut self, s: &Scenario, cluster: &mut Cluster, n: usize) {
        let now = cluster.now();
        // Wake-ups up to now are spent (taken off the front: `split_off` moved every later
        // one into a new tree, at every event of the node).
        while self.wakes[n].first().is_some_and(|&t| t <= now) {
            self.wakes[n].pop_first();
        }
        // Rounds until no lane posts: a lane with a window posts its calls back to back.
        loop {
            let mut posted = false;
            for i in 0..self.lanes_at[n].len() {
                let l = self.lanes_at[n][i];
                let lane = &self.lanes[l];
                let p = &self.procs[lane.rank];
                if !lane.may_post(s) {
                    continue;
                }
                if now < lane.ready_at {
                    let at = lane.ready_at;
                    self.wake(cluster, n, at);
                    continue;
                }
                let (c, step) = lane.steps[lane.next];
                let Some(m) = p.comms[c].as_ref() else { continue };
                let handle = self.handles[c];
                let plan = &s.comms[c];
                let mut d = if step == 0 {
                    let record = RegionRef { key: m.record, offset: 0 };
                    SubmissionDescriptor::comm_create(cookie(c, CREATE), handle, record, m.record_len)
                } else if step <= plan.bcasts.len() {
                    let k = step - 1;
                    let (root, len) = plan.bcasts[k];
                    let buf = RegionRef { key: m.bufs[k], offset: 0 };
                    // Rank 0's posts recorded late: the planted error the barrier check must catch.
                    let late = if s.plant_late_arrival && lane.rank == 0 { 1_000_000_000 } else { 0 };
                    self.times[lane.rank][c][k].0 = Some(now + late);
                    if plan.alltoall[k] {
                        let send = RegionRef { key: m.sends[k], offset: 0 };
                        SubmissionDescriptor::alltoall(cookie(c, k as u64), handle, buf, send, u64::from(len))
                    } else if plan.barrier[k] {
                        SubmissionDescriptor::barrier(cookie(c, k as u64), handle, buf, u64::from(len))
                    } else {
                        match plan.allgather[k] {
                            Some(_) => {
                                let send = (m.sends[k] != ringcast_abi::RegionKey::NONE)
                                    .then_some(RegionRef { key: m.sends[k], offset: 0 });
                                let (ck, len) = (cookie(c, k as u64), u64::from(len));
                                match plan.allreduce[k] {
                                    Some((t, o)) if plan.reduce[k] => {
                                        SubmissionDescriptor::reduce(ck, handle, root, buf, send, len, t, o)
                                    }
                                    Some((t, o)) if plan.scan[k].is_some() => {
                                        let exclusive = plan.scan[k] == Some(true);
                                        SubmissionDescriptor::scan(
                                            ck, handle, buf, send, len, t, o, exclusive,
                                        )
                                    }
                                    Some((t, o)) => {
                                        SubmissionDescriptor::allreduce(ck, handle, buf, send, len, t, o)
                                    }
                                    None => SubmissionDescriptor::allgather(ck, handle, buf, send, len),
                                }
                            }
                            None => SubmissionDescriptor::bcast(
                                cookie(c, k as u64),
                                handle,
                                root,
                                buf,
                                u64::from(len),
                            ),
                        }
                    }
                } else {
                    SubmissionDescriptor::comm_free(cookie(c, FREE), handle)
                };
                // A call this rank makes instead of the step's (`dst/disagree.rs`).
                if let Some(dis) = step.checked_sub(1).and_then(|k| plan.disagree.get(k).copied().flatten()) {
                    if dis.rank == m.rank {
                        let (work, send) = m.disagree[step - 1];
                        d = disagreeing(d.cookie, handle, dis.call, work, send, plan.members.len() as u32);
                    }
                }
                if step >= 1 && step <= plan.bcasts.len() && plan.refused[step - 1] == Some(m.rank) {
                    let k = step - 1;
                    if plan.refused_shape[k] {
                        // A field that shapes the call (`shape_refusal`).
                        if plan.barrier[k] {
                            d.flags = 0x80;
                        } else if plan.reduce[k] || (plan.allgather[k].is_none() && !plan.alltoall[k]) {
                            d.root = plan.members.len() as u32;
                        } else {
                            d.len = 0;
                        }
                    } else if !plan.refused_field[k] {
                        // A (receive, work or message) buffer nobody registered.
                        d.key = ringcast_abi::RegionKey(0x7fff_0001);
                    } else if plan.allreduce[step - 1].is_some() {
                        // An operation that does not exist (the type's elements as the others').
                        let (t, _) = ringcast_abi::reduce::parse_reduce_spec(d.spec);
                        d.spec = ringcast_abi::reduce::reduce_spec(t, ringcast_abi::ReduceOp(200));
                    } else {
                        // A reserved word set.
                        d._reserved1 = 1;
                    }
                }
                let host = p.host;
                self.posted[lane.rank].push_back(d.cookie);
                let lane = &mut self.lanes[l];
                let life = Lane::life(s, lane.steps[lane.next]);
                lane.next += 1;
                lane.in_flight += 1;
                lane.blocking = life;
                cluster.with_engine(n, |e, now| e.handle_descriptor(host, &d, now));
                posted = true;
            }
            if !posted {
                break;
            }
        }
        self.finalize_done(s, cluster, n);
    }

    /// Finalizes and detaches (`MPI_Finalize`) every process of node `n` whose every step
    /// completed.
    /// Nobody pads synchronization epochs: the engines must settle each communicator's last,
    /// partial epoch themselves — the world's once its local processes all left, a created one
    /// once its local members freed it or left — which [`Ledger::check`] verifies
    /// (`Violation::Unsettled`). Not when an application gap may exceed the peer timeout: a
    /// process leaving counts as freeing what it created, and an engine waits at most that long
    /// for the others to settle a freed communicator (the bound `Scenario::free_comms` keeps).
    fn finalize_done(&mut self, s: &Scenario, cluster: &mut Cluster, n: usize) {
        if s.skew >= s.config.protocol.peer_timeout_ms as Nanos * 1_000_000 {
            return;
        }
        for i in 0..self.lanes_at[n].len() {
            let lane = &self.lanes[self.lanes_at[n][i]];
            let done = lane.in_flight == 0 && lane.next >= lane.steps.len();
            if !done || self.finalized[lane.rank] || cluster.nodes[n].dead(cluster.now()) {
                continue;
            }
            self.finalized[lane.rank] = true;
            if s.plant_no_detach && self.finalized.iter().all(|&f| f) {
                continue; // the planted error: the last process never leaves
            }
            self.first_detach[n] = self.first_detach[n].min(cluster.now());
            let host = self.procs[lane.rank].host;
            cluster.with_engine(n, |e, now| {
                e.finalize_host(host, now);
                e.detach_host(host, Departure::Clean, 0, now)
            });
        }
    }

    /// The first step a rank on a live node posted or had to post that never completed.
    pub(super) fn first_missing(&self, cluster: &Cluster) -> Option<Violation> {
        let at = cluster.now();
        for lane in &self.lanes {
            if cluster.nodes[self.procs[lane.rank].node].crash_at.is_some() {
                continue;
            }
            let rank = lane.rank;
            for (comm, outs) in self.seen[rank].iter().enumerate() {
                if self.procs[rank].comms[comm].is_none() {
                    continue;
                }
                if let Some(k) = outs.iter().position(Option::is_none) {
                    return Some(Violation::Hang { rank, comm, bcast: k, at });
                }
            }
            let busy = lane.in_flight > 0;
            if let Some(&(comm, _)) = lane.steps.get(lane.next.saturating_sub(usize::from(busy))) {
                if busy || lane.next < lane.steps.len() {
                    return Some(Violation::Hang { rank, comm, bcast: usize::MAX, at });
                }
            }
        }
        None
    }

    /// Judges the run from what the ranks saw, their host memory and the engines' counters.
    pub(super) fn check(
        &self,
        s: &Scenario,
        cluster: &Cluster,
        forged: &[Forged],
    ) -> Result<Report, Violation> {
        let forged_frames = forged.len() as u64;
        let benign = s.benign();
        let mut rep = Report {
            seed: s.seed,
            ranks: s.ranks,
            nodes: cluster.nodes.len(),
            benign,
            virtual_ns: cluster.now(),
            ..Report::default()
        };
        rep.delivered = cluster.delivered();
        // The largest message a protocol carries: a broadcast's, or an allgather's node part
        // (up to every rank's block: leader-based, one part per engine).
        let largest = s
            .comms
            .iter()
            .flat_map(|p| {
                let size = p.members.len() as u32;
                p.bcasts.iter().zip(p.allgather.iter().zip(&p.alltoall)).map(move |(b, (ag, &a2a))| {
                    if ag.is_some() || a2a {
                        b.1 * size
                    } else {
                        b.1
                    }
                })
            })
            .max()
            .unwrap_or(0) as usize;
        let all_finalized = self.finalized.iter().all(|&f| f);
        rep.finalized = benign && all_finalized;
        // Where no point-to-point datagram is lost or altered, a freed communicator always
        // settles (a lost last SYNC_DOWN is asked for again within the engines' time-wait; four
        // losses in a row may outlast it).
        let clean_unicast = s.faults.ucast_loss == 0.0
            && s.faults.corrupt == 0.0
            && s.faults.burst_enter == 0.0
            && s.fault.drop == 0.0
            && s.fault.corrupt == 0.0;
        for (node, m) in cluster.nodes.iter().enumerate() {
            // Benign and every process gone: nothing may be owed to the other engines, and no
            // communicator may have been let go unsettled (dropped by the peer timeout).
            let overdue = clean_unicast && m.engine.comm_stats().overdue > 0;
            if benign && all_finalized && (!m.engine.quiescent() || overdue) {
                return Err(Violation::Unsettled { node });
            }
            // Benign: nothing may leave a communicator broken (a slow rank is not a dead one).
            if benign && m.engine.any_broken() {
                let status = StatusKind::CommunicatorBroken;
                return Err(Violation::UnexpectedError { rank: usize::MAX, comm: 0, bcast: node, status });
            }
            let (bytes, bound) = (m.engine.memory_bytes(), m.engine.memory_bound(largest));
            if bytes > bound {
                return Err(Violation::Memory { node, bytes, bound });
            }
            rep.dropped += m.engine.proto_counters().drops.iter().sum::<u64>();
        }
        // Each allreduce's result at the first rank checked: every other rank's must be the same
        // bytes.
        let mut results: std::collections::HashMap<(usize, usize), Vec<u8>> =
            std::collections::HashMap::new();
        // Each call's expected bytes, derived once for all its ranks.
        let mut expected = super::expect::Expected::default();
        for (rank, per_comm) in self.seen.iter().enumerate() {
            let p = &self.procs[rank];
            for (c, outs) in per_comm.iter().enumerate() {
                let Some(me) = p.comms[c].as_ref().map(|m| m.rank) else { continue };
                for (k, out) in outs.iter().enumerate() {
                    let Some(cqe) = out else { continue };
                    rep.completions += 1;
                    // Known: the drain refused a status outside the ABI.
                    let Ok(status) = StatusKind::try_from(cqe.status) else { continue };
                    let (root, len) = s.comms[c].bcasts[k];
                    if len == 0 {
                        // The ABI refuses a 0-byte broadcast, at every rank alike.
                        if status != StatusKind::BadLength {
                            return Err(Violation::UnexpectedError { rank, comm: c, bcast: k, status });
                        }
                        rep.empty += 1;
                        continue;
                    }
                    let aborted = s.comms[c].aborted[k];
                    if aborted && status == StatusKind::Ok {
                        return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                    }
                    // A rank that made another call than the others (`dst/disagree.rs`): typed,
                    // or `Ok` as the root of a broadcast (its buffer only read).
                    if let Some(d) = s.comms[c].disagree[k].filter(|d| d.rank == me) {
                        let root = matches!(d.call, DisagreeingCall::Bcast { root, .. } if root == me);
                        if status == StatusKind::Ok && !root {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.disagreements += 1;
                        continue;
                    }
                    let refused = s.comms[c].refused[k];
                    if refused == Some(me) {
                        // Refused for its buffer or a field: that status, whatever its parts did.
                        let want = match (s.comms[c].refused_shape[k], s.comms[c].refused_field[k]) {
                            (true, _) => shape_refusal(&s.comms[c], k),
                            (_, true) => StatusKind::BadDescriptor,
                            _ => StatusKind::UnknownRegion,
                        };
                        if status != want {
                            return Err(Violation::UnexpectedError { rank, comm: c, bcast: k, status });
                        }
                        rep.refused += 1;
                        rep.refused_fields += u64::from(s.comms[c].refused_field[k]);
                        rep.refused_shapes += u64::from(s.comms[c].refused_shape[k]);
                        continue;
                    }
                    // Another rank's call was refused: only a barrier, or a broadcast that
                    // rank does not root, can do without its part.
                    let plan = &s.comms[c];
                    let needs_it = refused.is_some()
                        && !plan.barrier[k]
                        && (plan.allgather[k].is_some() || plan.alltoall[k] || refused == Some(root));
                    if needs_it && status == StatusKind::Ok {
                        return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                    }
                    let expected_abort = (aborted || needs_it)
                        && matches!(status, StatusKind::RootFailed | StatusKind::OutOfBounds);
                    if status != StatusKind::Ok {
                        if benign && !expected_abort {
                            return Err(Violation::UnexpectedError { rank, comm: c, bcast: k, status });
                        }
                        continue;
                    }
                    rep.ok += 1;
                    // A barrier cannot be over where a rank made another call.
                    let skipped = s.comms[c].disagree[k].filter(|d| d.call != DisagreeingCall::Barrier);
                    if let (true, Some(d)) = (s.comms[c].barrier[k], skipped) {
                        let late = self
                            .procs
                            .iter()
                            .position(|p| p.comms[c].as_ref().is_some_and(|m| m.rank == d.rank));
                        let (left, late) = (self.times[rank][c][k].1, late.unwrap_or(usize::MAX));
                        return Err(Violation::EarlyBarrier {
                            rank,
                            comm: c,
                            bcast: k,
                            left,
                            late,
                            arrived: Nanos::MAX,
                        });
                    }
                    if s.comms[c].barrier[k] {
                        // Left no earlier than the last member posted (every member must have).
                        let left = self.times[rank][c][k].1;
                        let members = (0..self.procs.len()).filter(|&q| self.procs[q].comms[c].is_some());
                        for q in members {
                            let arrived = self.times[q][c][k].0.unwrap_or(Nanos::MAX);
                            if arrived > left {
                                return Err(Violation::EarlyBarrier {
                                    rank,
                                    comm: c,
                                    bcast: k,
                                    left,
                                    late: q,
                                    arrived,
                                });
                            }
                        }
                        if cqe.bytes != 0 {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.barriers += 1;
                        continue;
                    }
                    let mem = &cluster.nodes[p.node].mem;
                    if s.comms[c].alltoall[k] {
                        // Rank `r`'s block for this rank at `r × len`, each computed here.
                        let size = s.comms[c].members.len() as u32;
                        let want: Vec<u8> =
                            (0..size).flat_map(|r| super::pair_pattern(s.seed, c, k, r, me, len)).collect();
                        let got = mem.get(&segment(p.local, c, k as u64)).and_then(|m| m.get(..want.len()));
                        if got != Some(&want[..]) || cqe.bytes != want.len() as u64 {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.alltoalls += 1;
                        continue;
                    }
                    if s.comms[c].reduce[k] && root != me {
                        // A reduce's other rank: gathered, did not reduce, reports nothing.
                        if cqe.bytes != 0 {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.reduces += 1;
                        continue;
                    }
                    if let (Some(exclusive), Some((t, o))) = (s.comms[c].scan[k], s.comms[c].allreduce[k]) {
                        // This rank's prefix — ranks 0 to itself, or (exclusive) to the one
                        // before — reduced left to right in rank order, computed here; an
                        // exscan's rank 0 has none and reports 0 bytes.
                        let upto = if exclusive { me } else { me + 1 };
                        let blocks: Vec<Vec<u8>> =
                            (0..upto).map(|q| super::block_pattern(s.seed, c, k, q, len)).collect();
                        if upto == 0 {
                            if cqe.bytes != 0 {
                                return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                            }
                            rep.scans += 1;
                            continue;
                        }
                        let want = reference_reduce(t, o, &blocks);
                        let got = mem.get(&segment(p.local, c, k as u64)).and_then(|m| m.get(..len as usize));
                        if got.is_none_or(|got| !same_values(t, got, &want)) || cqe.bytes != u64::from(len) {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.scans += 1;
                        continue;
                    }
                    if let Some((t, o)) = s.comms[c].allreduce[k] {
                        // The reduction of every rank's contribution in rank order (node by
                        // node, then across nodes, when leader-based), computed here.
                        let want = expected.get(c, k, || {
                            let size = s.comms[c].members.len() as u32;
                            let blocks: Vec<Vec<u8>> =
                                (0..size).map(|q| super::block_pattern(s.seed, c, k, q, len)).collect();
                            let groups = super::setup::node_parts(s, c);
                            // A reduction of several engines, leader-based, combines the node
                            // results by recursive doubling (or Rabenseifner's, the same tree)
                            // where the call's exchange is not multicast — the configuration's
                            // or the cost model's choice for this call (`model/compose.rs`).
                            let elem = t.size().unwrap_or(1) as u64;
                            let doubling = |g: &[u32]| {
                                let largest = g.iter().copied().max().unwrap_or(1);
                                compose::allreduce(&s.config, g.len() as u32, largest, u64::from(len), elem)
                                    != Exchange::Multicast
                            };
                            match groups.as_deref() {
                                Some(g) if g.len() >= 2 && doubling(g) => {
                                    reference_reduce_doubling(t, o, &blocks, g)
                                }
                                g => reference_reduce_grouped(t, o, &blocks, g),
                            }
                        });
                        let Some(got) = mem.get(&segment(p.local, c, k as u64)).map(|m| &m[..len as usize])
                        else {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        };
                        // Equal to the checker's reduction (a NaN equal to any NaN: the
                        // compiler may order a commutative operation's operands either way,
                        // which changes only a NaN's payload) and bit-identical across ranks.
                        let first = results.entry((c, k)).or_insert_with(|| got.to_vec());
                        if !same_values(t, got, &want) || got != &first[..] || cqe.bytes != u64::from(len) {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        if s.comms[c].reduce[k] {
                            rep.reduces += 1;
                        } else {
                            rep.allreduces += 1;
                        }
                        continue;
                    }
                    if s.comms[c].allgather[k].is_some() {
                        // Every rank's block at its place, each computed here from the inputs.
                        let size = s.comms[c].members.len() as u32;
                        let got = mem.get(&segment(p.local, c, k as u64));
                        let want = expected.get(c, k, || {
                            (0..size).flat_map(|q| super::block_pattern(s.seed, c, k, q, len)).collect()
                        });
                        if got != Some(&want[..]) || cqe.bytes != want.len() as u64 {
                            return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                        }
                        rep.allgathers += 1;
                        continue;
                    }
                    let want = expected.get(c, k, || pattern(s.seed, c, k, len));
                    if mem.get(&segment(p.local, c, k as u64)) != Some(&want[..]) {
                        return Err(Violation::WrongBytes { rank, comm: c, bcast: k });
                    }
                    if root != me {
                        rep.frags_multicast += u64::from(cqe.frags_multicast);
                        rep.frags_repair += u64::from(cqe.frags_repair);
                        rep.penalty_sum += u64::from(cqe.penalty_rounds);
                        rep.penalty_n += 1;
                    }
                }
            }
        }
        // Every injected frame that reached a live node is counted under some drop reason.
        let drops = |r: DropReason| -> u64 {
            cluster.nodes.iter().map(|m| m.engine.proto_counters().drops[r as usize]).sum()
        };
        let counted: u64 =
            [DropReason::TooShort, DropReason::BadCrc, DropReason::BadVersion, DropReason::UnknownKind]
                .into_iter()
                .map(drops)
                .sum();
        if s.crashes.is_empty() && s.faults.corrupt == 0.0 && counted < s.foreign as u64 * 9 / 10 {
            return Err(Violation::UncountedForeign { injected: s.foreign, counted });
        }
        // Every forged frame that reached a live node unaltered was dropped: for its tag if
        // the node held the communicator then, else for its cookie (before the node created it
        // or after it let it go). The release-build injector may drop or corrupt it on
        // receipt, and a crash may swallow it: those runs are not judged.
        let untouched = s.fault.drop == 0.0 && s.fault.corrupt == 0.0;
        if !s.forger_has_key && s.crashes.is_empty() && untouched {
            let dropped = drops(DropReason::BadTag) + drops(DropReason::ForeignCookie);
            if dropped < forged_frames {
                return Err(Violation::UncountedForgery {
                    injected: forged_frames as usize,
                    counted: dropped,
                });
            }
            // Strictly inside [created, freed) at its node — the node's own completions say
            // when; a communicator never freed may be let go once the node's processes detach,
            // and one the node broke is let go of then (its key with it: its public list says
            // so, `CommInfo::released`) — a forged frame can only have been dropped for its tag.
            let lifetime = |n: usize, c: usize| {
                let at = |k: u64| {
                    cluster
                        .published()
                        .iter()
                        .filter(|p| p.node == n && p.cqe.cookie == cookie(c, k))
                        .map(|p| p.at)
                        .min()
                };
                let gone = at(FREE).unwrap_or(Nanos::MAX).min(self.first_detach[n]).min(self.released[n][c]);
                (at(CREATE), gone)
            };
            for (n, m) in cluster.nodes.iter().enumerate() {
                let inside = forged
                    .iter()
                    .filter(|f| f.to == n)
                    .filter(|f| {
                        let (created, freed) = lifetime(n, f.comm);
                        created.is_some_and(|t| t < f.at) && f.at < freed
                    })
                    .count() as u64;
                let bad_tags = m.engine.proto_counters().drops[DropReason::BadTag as usize];
                if bad_tags < inside {
                    return Err(Violation::ForgeryPastTheTag { node: n, inside, bad_tags });
                }
            }
        }
        Ok(rep)
    }
}

/// The descriptor of call `call` (`dst/disagree.rs`), a rank's instead of the step's, on a
/// communicator of `size` ranks with its own `work` and `send` buffers.
fn disagreeing(
    cookie: u64,
    comm: u64,
    call: DisagreeingCall,
    work: ringcast_abi::RegionKey,
    send: ringcast_abi::RegionKey,
    size: u32,
) -> SubmissionDescriptor {
    let (work, send) = (RegionRef { key: work, offset: 0 }, RegionRef { key: send, offset: 0 });
    let at = |len: u32| u64::from(len);
    match call {
        DisagreeingCall::Bcast { root, len } => {
            SubmissionDescriptor::bcast(cookie, comm, root, work, at(len))
        }
        DisagreeingCall::Allgather { len } => {
            SubmissionDescriptor::allgather(cookie, comm, work, None, at(len))
        }
        DisagreeingCall::Allreduce { len, dtype, op } => {
            SubmissionDescriptor::allreduce(cookie, comm, work, None, at(len), dtype, op)
        }
        DisagreeingCall::Alltoall { len } => {
            SubmissionDescriptor::alltoall(cookie, comm, work, send, at(len))
        }
        DisagreeingCall::Barrier => SubmissionDescriptor::barrier(cookie, comm, work, u64::from(size)),
        DisagreeingCall::Scan { len, dtype, op, exclusive } => {
            SubmissionDescriptor::scan(cookie, comm, work, None, at(len), dtype, op, exclusive)
        }
    }
}

/// Every node's engine state, for replaying a failing seed.
pub(super) fn dump(cluster: &Cluster) -> String {
    let mut d = String::new();
    for (i, m) in cluster.nodes.iter().enumerate() {
        d.push_str(&format!(
            "node {i} drops {:?} armed {:?} next {:?} comms {:?} quiescent {}\n{}",
            m.engine.proto_counters().drops,
            m.armed(),
            m.engine.poll_timeout(),
            m.engine.comm_stats(),
            m.engine.quiescent(),
            m.engine.describe()
        ));
    }
    d
}

/// The status a call refused for a field that shapes it ends with at its rank
/// ([`crate::dst::CommPlan::refused_shape`]): a barrier's unknown flag, a broadcast's or
/// reduce's root outside the communicator, another collective's block of 0 bytes.
fn shape_refusal(plan: &crate::dst::CommPlan, k: usize) -> StatusKind {
    if plan.barrier[k] {
        StatusKind::BadFlags
    } else if plan.reduce[k] || (plan.allgather[k].is_none() && !plan.alltoall[k]) {
        StatusKind::BadRoot
    } else {
        StatusKind::BadLength
    }
}
