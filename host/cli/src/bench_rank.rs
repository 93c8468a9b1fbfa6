//! `ringcast bench-rank`: one rank of `ringcast bench` — per size, warm-up calls, then timed
//! ones of the chosen collective, then the last call's result checked.
//!
//! What a size means depends on the collective (osu's benchmarks use the same conventions):
//! the message for `bcast`; the vector of 64-bit integers each rank contributes for `allreduce`
//! and `reduce` (rounded up to whole elements; summed, rooted at 0 for `reduce`); each rank's
//! block for `allgather` and `alltoall`; nothing for `barrier` (one line, size 0). Every
//! collective reads a send buffer that stays put, so back-to-back calls need no refilling, and
//! the result of the last one is compared with what the inputs make (the sum recomputed,
//! every rank's block by its pattern — hashes, so misplaced or swapped data cannot match), after
//! one more untimed call into a poisoned result.
use crate::barrier::{Barrier, BARRIER_ENV};
use crate::cluster::host_from_env;
use clap::Args;
use ringcast_host::{Access, DataType, Host, ReduceOp, RegionRef, SharedBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The collective `ringcast bench` measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Collective {
    /// Broadcast from rank 0.
    #[default]
    Bcast,
    /// Allreduce: sum of 64-bit integers.
    Allreduce,
    /// Reduce to rank 0: sum of 64-bit integers.
    Reduce,
    /// Allgather of one block per rank.
    Allgather,
    /// Alltoall of one block per pair of ranks.
    Alltoall,
    /// Barrier (sizes ignored).
    Barrier,
}

impl Collective {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Bcast => "bcast",
            Collective::Allreduce => "allreduce",
            Collective::Reduce => "reduce",
            Collective::Allgather => "allgather",
            Collective::Alltoall => "alltoall",
            Collective::Barrier => "barrier",
        }
    }

    /// The sizes it runs for `asked`: a barrier has one, 0; reductions whole 8-byte elements.
    pub fn sizes(self, asked: &[u64]) -> Vec<u64> {
        match self {
            Collective::Barrier => vec![0],
            Collective::Allreduce | Collective::Reduce => {
                asked.iter().map(|&s| s.max(1).div_ceil(8) * 8).collect()
            }
            _ => asked.iter().map(|&s| s.max(1)).collect(),
        }
    }
}

/// `ringcast bench-rank` options (one rank of `ringcast bench`).
#[derive(Args)]
pub struct RankArgs {
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    #[arg(long, default_value_t = 1000)]
    iters: u32,
    /// An untimed barrier (the segment named by RINGCAST_BENCH_BARRIER) before each timed call.
    #[arg(long)]
    barrier: bool,
    #[arg(long, value_enum, default_value_t = Collective::Bcast)]
    collective: Collective,
}

/// How long a rank waits at the barrier for the others before failing.
const BARRIER_LIMIT: Duration = Duration::from_secs(120);

/// CPU time of this process so far (every thread: in thread mode that includes the engine's).
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// One benchmark rank: prints `size S avg_us A cpu_us C iters I algorithm X repairs R engine_us E`
/// per size (E: the mean of the timed calls' `engine_ns`, the part of a call spent between the
/// engine taking its descriptor and publishing its completion).
pub fn rank(a: RankArgs) -> ExitCode {
    match rank_inner(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringcast bench-rank: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SplitMix64's finalizer: the patterns' hash (`host/mpi/bench/osu_bcast.c` has the same).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The byte rank `from`'s input holds at offset `i` of a `size`-byte call (for an alltoall, its
/// block for rank `to`; otherwise `to` is 0): a hash, so no shift or swap of data matches.
fn pattern(i: u64, size: u64, from: u32, to: u32) -> u8 {
    (mix(i ^ size << 40 ^ u64::from(from) << 20 ^ u64::from(to) << 52) >> 24) as u8
}

/// Element `i` of rank `r`'s reduction input: a hash, so no two ranks' inputs can trade places
/// or stand in for each other and leave the sum unchanged (wrapping sums are exact).
fn element(i: u64, r: u32) -> u64 {
    mix(i ^ u64::from(r) << 40)
}

/// One size of one collective: its buffers, registered, and what one call posts.
struct Call {
    collective: Collective,
    size: u64,
    ranks: u32,
    me: u32,
    /// The result (or the broadcast buffer, or the barrier's nothing).
    work: Option<(SharedBuf, ringcast_host::Region)>,
    /// The input that stays put.
    send: Option<(SharedBuf, ringcast_host::Region)>,
}

impl Call {
    fn new(host: &mut Host, collective: Collective, size: u64, ranks: u32, me: u32) -> Result<Call, String> {
        let n = ranks as u64;
        let (work_len, send_len) = match collective {
            Collective::Bcast => (size, 0),
            Collective::Allreduce | Collective::Reduce => (n * size, size),
            Collective::Allgather => (n * size, size),
            Collective::Alltoall => ((n + 1) * n * size, n * size),
            Collective::Barrier => (0, 0),
        };
        let mut reg = |len: u64, access| -> Result<Option<(SharedBuf, ringcast_host::Region)>, String> {
            if len == 0 {
                return Ok(None);
            }
            let buf = SharedBuf::new(len as usize).map_err(|e| e.to_string())?;
            let region = host.register(&buf, access).map_err(|e| e.to_string())?;
            Ok(Some((buf, region)))
        };
        let call = Call {
            collective,
            size,
            ranks,
            me,
            work: reg(work_len, Access::READ_WRITE)?,
            send: reg(send_len, Access::READ)?,
        };
        call.fill()?;
        Ok(call)
    }

    /// Writes the inputs (and poisons the result).
    fn fill(&self) -> Result<(), String> {
        let (size, me) = (self.size, self.me);
        let input: Vec<u8> = match self.collective {
            Collective::Bcast | Collective::Allgather => (0..size).map(|i| pattern(i, size, me, 0)).collect(),
            Collective::Allreduce | Collective::Reduce => {
                (0..size / 8).flat_map(|i| element(i, me).to_le_bytes()).collect()
            }
            Collective::Alltoall => {
                (0..self.ranks).flat_map(|to| (0..size).map(move |i| pattern(i, size, me, to))).collect()
            }
            Collective::Barrier => Vec::new(),
        };
        if let Some((buf, _)) = &self.work {
            let poison = vec![0xEE; buf.len()];
            buf.write_at(0, &poison).map_err(|e| e.to_string())?;
        }
        match (&self.send, &self.work) {
            (Some((buf, _)), _) => buf.write_at(0, &input).map_err(|e| e.to_string()),
            // A broadcast's root holds the message in its buffer.
            (None, Some((buf, _))) if me == 0 => buf.write_at(0, &input).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    fn at(r: &Option<(SharedBuf, ringcast_host::Region)>) -> Option<RegionRef> {
        r.as_ref().map(|(_, region)| region.at(0))
    }

    /// One call, blocking; its completion's `engine_ns` (the engine's time from taking the
    /// descriptor to publishing the completion).
    fn run(&self, host: &mut Host) -> Result<u64, String> {
        let (work, send) = (Self::at(&self.work), Self::at(&self.send));
        let none = || "no buffer".to_string();
        let r = match self.collective {
            Collective::Bcast => host.bcast(0, 0, work.ok_or_else(none)?, self.size),
            Collective::Allreduce => {
                host.allreduce(0, work.ok_or_else(none)?, send, self.size, DataType::U64, ReduceOp::SUM)
            }
            Collective::Reduce => {
                host.reduce(0, 0, work.ok_or_else(none)?, send, self.size, DataType::U64, ReduceOp::SUM)
            }
            Collective::Allgather => host.allgather(0, work.ok_or_else(none)?, send, self.size),
            Collective::Alltoall => {
                host.alltoall(0, work.ok_or_else(none)?, send.ok_or_else(none)?, self.size)
            }
            Collective::Barrier => host.barrier(0),
        };
        r.map(|c| c.engine_ns).map_err(|e| format!("{} of {} B: {e}", self.collective.name(), self.size))
    }

    /// Whether the last call's result is what the inputs make.
    fn check(&self) -> Result<(), String> {
        let Some((buf, _)) = &self.work else { return Ok(()) };
        let (size, me, n) = (self.size, self.me, self.ranks);
        let want: Vec<u8> = match self.collective {
            Collective::Bcast => (0..size).map(|i| pattern(i, size, 0, 0)).collect(),
            Collective::Reduce if me != 0 => return Ok(()),
            Collective::Allreduce | Collective::Reduce => (0..size / 8)
                .flat_map(|i| (0..n).fold(0u64, |acc, r| acc.wrapping_add(element(i, r))).to_le_bytes())
                .collect(),
            Collective::Allgather => {
                (0..n).flat_map(|from| (0..size).map(move |i| pattern(i, size, from, 0))).collect()
            }
            Collective::Alltoall => {
                (0..n).flat_map(|from| (0..size).map(move |i| pattern(i, size, from, me))).collect()
            }
            Collective::Barrier => return Ok(()),
        };
        let mut got = vec![0u8; want.len()];
        buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
        match got.iter().zip(&want).position(|(g, w)| g != w) {
            None => Ok(()),
            Some(at) => Err(format!(
                "rank {me}: {} of {size} B delivered a wrong byte at offset {at}",
                self.collective.name()
            )),
        }
    }

    /// The broadcast algorithm its messages take (the engine's choice, computed the same way):
    /// the message for a broadcast, each rank's part for the composed collectives.
    fn part_bytes(&self) -> u64 {
        match self.collective {
            Collective::Alltoall => self.size * u64::from(self.ranks),
            Collective::Barrier => 1,
            _ => self.size,
        }
    }

    fn release(self, host: &mut Host) -> Result<(), String> {
        for (_, region) in [self.work, self.send].into_iter().flatten() {
            host.deregister(region).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

fn rank_inner(a: &RankArgs) -> Result<(), String> {
    let config = ringcast_host::Config::from_env().map_err(|e| e.to_string())?;
    // The engine's choice per size, computed the same way (same configuration, same model).
    let selector = ringcast_proto::model::select::Selector::from_config(&config.engine());
    let flat = ringcast_proto::comm::Layout::FLAT;
    let mut host = host_from_env()?;
    let local = host.local_rank().ok_or("no local rank on the engine")?;
    let me = config.topology.world_rank(local).ok_or("local rank outside this node's share of the world")?;
    let ranks = config.topology.world_size();
    let barrier = if a.barrier {
        let name = std::env::var(BARRIER_ENV).map_err(|_| format!("--barrier needs {BARRIER_ENV}"))?;
        Some(Barrier::open(&name, ranks)?)
    } else {
        None
    };
    // A rank that died leaves the others at the barrier: they fail instead of hanging. The
    // barrier progresses this rank's engine as it waits (an MPI barrier runs its progress
    // engine too): in thread mode a root, done at once, still owes its broadcast's sending.
    // The barrier spins as long as the host's own wait does before it yields or sleeps.
    let spins = config.runner.idle_spins;
    let sync = |what: &str, host: &mut Host| match &barrier {
        Some(b) => b.wait(BARRIER_LIMIT, spins, || host.progress()).map_err(|e| format!("{what}: {e}")),
        None => Ok(()),
    };
    // Local rank 0 reports its engine's repair frames per size (the others 0): with loss
    // injected, the launcher's sum shows the repairs the verified results took.
    let repairs = |host: &mut Host| match local {
        0 => host.net_stats().map_or(0, |n| n.repair_frames),
        _ => 0,
    };
    for size in a.collective.sizes(&a.sizes) {
        let repairs_before = repairs(&mut host);
        let call = Call::new(&mut host, a.collective, size, ranks, me)?;
        let iters = crate::bench::iters_for(a.iters, size);
        for _ in 0..iters.min(10) {
            sync("warm-up", &mut host)?;
            call.run(&mut host)?;
        }
        let mut engine_ns = 0u64;
        let (dt, dc) = if barrier.is_some() {
            // osu's method: barrier untimed, only the collective timed (and its CPU time).
            let (mut dt, mut dc) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                sync("timed loop", &mut host)?;
                let c0 = cpu_time();
                let t0 = Instant::now();
                engine_ns = engine_ns.saturating_add(call.run(&mut host)?);
                dt += t0.elapsed();
                dc += cpu_time().saturating_sub(c0);
            }
            (dt, dc)
        } else {
            let (t0, c0) = (Instant::now(), cpu_time());
            for _ in 0..iters {
                engine_ns = engine_ns.saturating_add(call.run(&mut host)?);
            }
            (t0.elapsed(), cpu_time().saturating_sub(c0))
        };
        // The timed calls wrote the same bytes again and again: one more, untimed, into a
        // poisoned result, so a call that completes without writing anything is caught too.
        call.fill()?;
        call.run(&mut host)?;
        call.check()?;
        let algorithm = selector.choose(config.topology.nodes, call.part_bytes(), &flat, true);
        call.release(&mut host)?;
        println!(
            "size {size} avg_us {:.3} cpu_us {:.3} iters {iters} algorithm {algorithm} repairs {} engine_us {:.3}",
            dt.as_secs_f64() * 1e6 / iters as f64,
            dc.as_secs_f64() * 1e6 / iters as f64,
            repairs(&mut host).saturating_sub(repairs_before),
            engine_ns as f64 / 1e3 / iters as f64
        );
    }
    // MPI_Finalize's part: once every rank did, the world's last, partial synchronization
    // epoch settles among the engines (nobody pads epochs).
    host.finalize().map_err(|e| format!("finalize: {e}"))
}
