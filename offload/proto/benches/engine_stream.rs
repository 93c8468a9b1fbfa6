//! Engine efficiency (issue 15): one engine core streaming 1 MiB broadcasts to another, on one
//! thread, with nothing but the two state machines and their DMA copies between them — no
//! fabric, no scheduler, no second process. What it measures is what decides whether one
//! BlueField ARM core keeps up with its NIC: the CPU time each side spends per fragment (CRC32C,
//! the keyed tag, the message MAC, the channel copies, bookkeeping), the DMA copies the driver
//! makes for it (host buffer ↔ engine memory: a DPU's DMA engine, the emulation's CPU), and the
//! stream's GB/s per core against this machine's memcpy bandwidth measured in the same run.
//!
//! Run: `cargo bench -p ringcast-proto --bench engine_stream` (in `make bench`). Prints one
//! table, a send and a receive row per datagram size: Ethernet's 1472 bytes (kernel UDP, DPDK,
//! verbs) and the `shm` fabric's 4088 (one ring slot; its default). `ENGINE_STREAM_ITERS` sets
//! the broadcasts (default 300), `ENGINE_STREAM_ROUNDS` the interleaved rounds (default 3),
//! `ENGINE_STREAM_ONLY` the rows (`4088/tag`, `1472`, `mac`: those that match every word), and
//! `ENGINE_STREAM_PLACE=0` sends the receiver through its channel and store jobs,
//! `ENGINE_STREAM_SUMMED=0` has the root's driver only copy its message in (no CRC as the bytes
//! move: the root CRCs each payload as it seals it). The last columns are the per-byte ledger (`ringcast_proto::ledger`)
//! per delivered byte on each side, engine side only: the DMA copy, the channel copies, the MAC
//! and CRC passes — a fabric adds its own (`shm`: one write into the wire at the sender, gathered
//! from the frame's header, channel slice and trailer, as this driver gathers them into its
//! wire; one read out of the multicast log at each receiver of a multicast, none out of a ring
//! slot, where a frame is handled in place; `ringcast stats` shows the sum).
use ringcast_abi::{Access, SubmissionDescriptor};
use ringcast_proto::comm::PeerId;
use ringcast_proto::config::{Auth, EngineConfig, LocalRank, ETHERNET_MTU, SHM_MTU};
use ringcast_proto::engine::{Action, Dma, Engine, HostPort, JobId};
use ringcast_proto::intake::regions::Resolved;
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::ledger::Side;
use std::time::{Duration, Instant};

const MESSAGE: usize = 1 << 20;

/// The CRC32C the engine runs with (`offload/engine/src/crc.rs`, which this crate cannot
/// depend on): `crc-fast`'s.
fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}
const ROOT: usize = 0;
const RECV: usize = 1;

/// The two engines, their host buffers, and where the time went.
struct Stream {
    engines: [Engine; 2],
    /// Each engine's host buffer (one segment each).
    mem: [Vec<u8>; 2],
    /// Frames on their way: (to, bytes), reused.
    wire: Vec<(usize, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    /// CPU time inside each engine's calls (events in, actions out), as the clock reads it
    /// around each call: the reads' own cost included (`clock_ns`).
    engine_ns: [Duration; 2],
    /// The timed calls into each engine: each adds about one clock read to `engine_ns`.
    calls: [u64; 2],
    /// The DMA copies the driver made for each engine.
    dma_ns: [Duration; 2],
    completions: [u64; 2],
    frames: [u64; 2],
    epoch: Instant,
    /// Frames handled with the driver's direct reach into the receiver's host buffer
    /// (`Engine::handle_frame_placing`, what the runner does on the `mapped` backend); without
    /// it (`ENGINE_STREAM_PLACE=0`) the receiver goes through its channel and store jobs, as on
    /// `cma` and `rdma`.
    place: bool,
    /// The root's driver computes each fragment's payload CRC as it loads the message
    /// (`Engine::staging_summed`, what the runner does on the `mapped` backend); without it
    /// (`ENGINE_STREAM_SUMMED=0`) it only copies, and the root CRCs each payload as it seals it.
    summed: bool,
}

impl Stream {
    fn new(mtu: u32, auth: Auth) -> Stream {
        let engine = |node: u32| {
            let config = EngineConfig::default().with(|c| {
                c.protocol.mtu = mtu;
                c.protocol.auth = auth;
                c.topology.job = "stream".into();
                (c.topology.nodes, c.topology.node, c.topology.ppn) = (2, node, 1);
            });
            Engine::new(&config, crc32c, true).expect("engine")
        };
        Stream {
            engines: [engine(0), engine(1)],
            mem: [vec![0; MESSAGE], vec![0; MESSAGE]],
            wire: Vec::new(),
            spare: Vec::new(),
            engine_ns: [Duration::ZERO; 2],
            calls: [0; 2],
            dma_ns: [Duration::ZERO; 2],
            completions: [0; 2],
            frames: [0; 2],
            epoch: Instant::now(),
            place: std::env::var("ENGINE_STREAM_PLACE").map_or(true, |v| v != "0"),
            summed: std::env::var("ENGINE_STREAM_SUMMED").map_or(true, |v| v != "0"),
        }
    }

    /// Adds another round's times and counts to this one's (the ledger's ratios are read from
    /// this one's engines: the same per broadcast in every round).
    fn absorb(&mut self, other: &Stream) {
        for e in 0..2 {
            self.engine_ns[e] += other.engine_ns[e];
            self.calls[e] += other.calls[e];
            self.dma_ns[e] += other.dma_ns[e];
            self.completions[e] += other.completions[e];
            self.frames[e] += other.frames[e];
        }
    }

    /// The call into engine `e` that began at `t` is over: its time is the engine's.
    fn spent(&mut self, e: usize, t: Instant) {
        self.engine_ns[e] += t.elapsed();
        self.calls[e] += 1;
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The driver's DMA for engine `e`: a memcpy between its host buffer and its staging.
    fn dma(&mut self, e: usize, job: JobId, dma: Dma) {
        let t = Instant::now();
        if let (true, Dma::Load { src, len }) = (self.summed, dma) {
            // The root's load with each fragment's CRC computed as its bytes land
            // (`Engine::staging_summed`): the DMA's time, as a NIC's DMA would.
            let mem = &self.mem[e];
            let ok = self.engines[e].staging_summed(job).map(|load| {
                let base = src.offset as usize;
                load.fill(crc32c, |off, into| {
                    mem.get(base + off..base + off + into.len()).map(|m| into.copy_from_slice(m)).is_some()
                }) && len as usize <= mem.len()
            });
            if let Some(ok) = ok {
                self.dma_ns[e] += t.elapsed();
                let now = self.now();
                let t = Instant::now();
                if ok {
                    self.engines[e].handle_dma_summed(job, now);
                } else {
                    self.engines[e].handle_dma_done(job, false, now);
                }
                self.spent(e, t);
                return;
            }
        }
        let ok = match dma {
            Dma::Load { src, len } => {
                let (mem, engine) = (&self.mem[e], &mut self.engines[e]);
                let range = src.offset as usize..(src.offset + len) as usize;
                match (engine.staging(job), mem.get(range)) {
                    (Some(s), Some(m)) => {
                        s.copy_from_slice(m);
                        true
                    }
                    _ => false,
                }
            }
            Dma::Store { dst, len } => {
                let (mem, engine) = (&mut self.mem[e], &mut self.engines[e]);
                let range = dst.offset as usize..(dst.offset + len) as usize;
                match (engine.staging(job), mem.get_mut(range)) {
                    (Some(s), Some(m)) => {
                        m.copy_from_slice(s);
                        true
                    }
                    _ => false,
                }
            }
            Dma::Copy { .. } => false,
        };
        self.dma_ns[e] += t.elapsed();
        let now = self.now();
        let t = Instant::now();
        self.engines[e].handle_dma_done(job, ok, now);
        self.spent(e, t);
    }

    /// Carries out engine `e`'s actions (their polling is the engine's time; the frame copy
    /// onto the wire and the DMA copies are not).
    fn drain(&mut self, e: usize) {
        loop {
            let t = Instant::now();
            let Some(a) = self.engines[e].poll_action() else {
                self.spent(e, t);
                return;
            };
            let mut job = None;
            match a {
                Action::Send { to, frame, .. } => {
                    // (The fields, not `spent`: the frame still borrows the engine.)
                    self.engine_ns[e] += t.elapsed();
                    self.calls[e] += 1;
                    let mut b = self.spare.pop().unwrap_or_default();
                    b.clear();
                    // The fabric's gather of the frame's parts into the wire.
                    frame.extend_into(&mut b);
                    self.wire.push((to.0 as usize, b));
                    self.frames[e] += 1;
                    continue;
                }
                Action::Multicast { .. } | Action::Join { .. } | Action::Leave { .. } => {
                    panic!("two nodes broadcast point to point")
                }
                Action::Dma { job: j, dma } => job = Some((j, dma)),
                Action::Complete { cqe, .. } => {
                    let ok =
                        ringcast_abi::StatusKind::try_from(cqe.status) == Ok(ringcast_abi::StatusKind::Ok);
                    assert!(ok, "broadcast failed: {cqe:?}");
                    self.completions[e] += 1;
                }
            }
            self.spent(e, t);
            if let Some((j, dma)) = job {
                self.dma(e, j, dma);
            }
        }
    }

    /// Delivers the frames in flight (each engine's handling of them is its time).
    fn deliver(&mut self) -> bool {
        let mut any = false;
        while !self.wire.is_empty() {
            let batch = std::mem::take(&mut self.wire);
            for (to, frame) in batch {
                let now = self.now();
                let t = Instant::now();
                let from = PeerId(1 - to as u32);
                if self.place {
                    // The driver's direct reach into its host buffer, as the runner lends its
                    // `mapped` segments: the receiver's one copy is the engine's time.
                    let port = &mut Flat(&mut self.mem[to]);
                    self.engines[to].handle_frame_placing(from, &frame, now, port);
                } else {
                    self.engines[to].handle_frame(from, &frame, now);
                }
                self.spent(to, t);
                self.spare.push(frame);
                self.drain(to);
                any = true;
            }
        }
        any
    }
}

/// An engine's host buffer as the driver's direct reach into it ([`HostPort`]): one segment,
/// `buf.offset` a byte offset in it.
struct Flat<'a>(&'a mut Vec<u8>);

impl HostPort for Flat<'_> {
    fn reaches(&self, _buf: Resolved) -> bool {
        true
    }

    fn place(&mut self, buf: Resolved, bytes: &[u8]) -> bool {
        let start = buf.offset as usize;
        match self.0.get_mut(start..start + bytes.len()) {
            Some(m) => {
                m.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    fn view(&self, buf: Resolved, len: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let start = buf.offset as usize;
        self.0.get(start..start + len).map(f).is_some()
    }
}

/// What the clock reads around an empty call (`Instant::now` then `elapsed`, as around each
/// call into an engine), ns: the median of 9 batches. Inside each timed call the engine's time
/// includes about one such read (a `clock_gettime` through the vDSO, 15-25 ns here).
fn empty_call_ns() -> f64 {
    const N: u32 = 100_000;
    let mut batches: Vec<f64> = (0..9)
        .map(|_| {
            let mut d = Duration::ZERO;
            for _ in 0..N {
                let t = Instant::now();
                d += std::hint::black_box(t).elapsed();
            }
            d.as_nanos() as f64 / f64::from(N)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[batches.len() / 2]
}

/// memcpy of 1 MiB messages into `slots` rotating destinations (the engine's channels), GB/s.
fn memcpy_gbps(slots: usize, iters: usize) -> f64 {
    let src = vec![7u8; MESSAGE];
    let mut dst: Vec<Vec<u8>> = (0..slots).map(|_| vec![0u8; MESSAGE]).collect();
    for d in dst.iter_mut() {
        d.copy_from_slice(&src); // touch every page first
    }
    let t = Instant::now();
    for i in 0..iters {
        let d = &mut dst[i % slots];
        d.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&d[i % MESSAGE]);
    }
    (iters * MESSAGE) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it: a
    // smoke run then (a few broadcasts, checked, no figures), as criterion's test mode does.
    let measured = std::env::args().any(|a| a == "--bench");
    let default_iters = if measured { 300 } else { 3 };
    let iters: u64 =
        std::env::var("ENGINE_STREAM_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default_iters);
    // Each datagram size under both authentication settings (`protocol.auth`), in interleaved
    // rounds (`ENGINE_STREAM_ROUNDS`, default 3): `mac` against `tag` in the same minutes.
    let rounds: u64 = if measured {
        std::env::var("ENGINE_STREAM_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1)
    } else {
        1
    };
    let configs =
        [(ETHERNET_MTU, Auth::Mac), (ETHERNET_MTU, Auth::Tag), (SHM_MTU, Auth::Mac), (SHM_MTU, Auth::Tag)];
    // `ENGINE_STREAM_ONLY=4088/tag` (or `1472`, or `mac`): only the rows that match, for a
    // profile of one configuration.
    let only = std::env::var("ENGINE_STREAM_ONLY").unwrap_or_default();
    let configs: Vec<(u32, Auth)> = configs
        .into_iter()
        .filter(|(mtu, auth)| {
            only.split('/').filter(|w| !w.is_empty()).all(|w| *w == mtu.to_string() || *w == auth.to_string())
        })
        .collect();
    let mut runs: Vec<(u32, Auth, Stream)> = Vec::new();
    for _ in 0..rounds {
        for (k, &(mtu, auth)) in configs.iter().enumerate() {
            let s = stream(mtu, auth, iters, measured);
            match runs.get_mut(k) {
                Some((_, _, sum)) => sum.absorb(&s),
                None => runs.push((mtu, auth, s)),
            }
        }
    }
    let iters = iters * rounds;
    if !measured {
        println!("engine_stream: {iters} broadcasts of 1 MiB delivered byte-exact at each MTU, mac and tag (smoke run; `cargo bench` measures)");
        return;
    }
    let cache = memcpy_gbps(16, 2000);
    let dram = memcpy_gbps(64, 1000);
    let clock = empty_call_ns();
    println!("# engine_stream: {iters} broadcasts of 1 MiB per datagram size and auth ({rounds} interleaved rounds), 2 engines on one thread");
    println!("# memcpy of 1 MiB messages on this machine: {cache:.1} GB/s into 16 rotating buffers (the channels), {dram:.1} GB/s into 64");
    println!("# the clock around each call into an engine: an empty call reads {clock:.1} ns (`clock ns/frag`: that times the calls per fragment, in `engine ns/frag`; the last % leaves it out)");
    println!(
        "{:<10}{:>6}{:>5}{:>8}{:>16}{:>16}{:>14}{:>14}{:>18}{:>10}{:>10}{:>10}{:>16}{:>12}",
        "# side",
        "MTU",
        "auth",
        "frags",
        "engine ns/frag",
        "DMA ns/frag",
        "engine GB/s",
        "+DMA GB/s",
        "of memcpy (16)",
        "copies/B",
        "MAC/B",
        "CRC/B",
        "clock ns/frag",
        "w/o clock"
    );
    for (mtu, auth, s) in &runs {
        let frags = s.frames[ROOT] as f64;
        let bytes = (iters as usize * MESSAGE) as f64;
        let gbps = |d: Duration| bytes / d.as_secs_f64() / 1e9;
        let per_frag = |d: Duration| d.as_nanos() as f64 / frags;
        for (name, e, side) in [("send", ROOT, Side::Send), ("receive", RECV, Side::Receive)] {
            let all = s.engine_ns[e] + s.dma_ns[e];
            let reads = Duration::from_nanos((s.calls[e] as f64 * clock) as u64);
            // The ledger's payload work per delivered byte (warm-up included: the same per
            // broadcast), engine side: the DMA copy, the channel and frame copies, MAC, CRC.
            let per = s.engines[e].proto_counters().ledger.per_byte(side);
            println!(
                "{:<10}{:>6}{:>5}{:>8.0}{:>16.0}{:>16.0}{:>14.2}{:>14.2}{:>17.0}%{:>10.3}{:>10.3}{:>10.3}{:>16.0}{:>11.0}%",
                name,
                mtu,
                auth.to_string(),
                frags / iters as f64,
                per_frag(s.engine_ns[e]),
                per_frag(s.dma_ns[e]),
                gbps(s.engine_ns[e]),
                gbps(all),
                100.0 * gbps(all) / cache,
                per.copies,
                per.hashed,
                per.crcd,
                per_frag(reads),
                100.0 * gbps(all.saturating_sub(reads)) / cache
            );
        }
        println!(
            "# MTU {mtu} {auth}: sync frames from the receiver: {} ({:.2} per broadcast)",
            s.frames[RECV],
            s.frames[RECV] as f64 / iters as f64
        );
    }
}

/// Streams `iters` 1 MiB broadcasts at datagram size `mtu` after a warm-up, checked: every
/// broadcast completes on both sides and the receiver holds the root's bytes.
fn stream(mtu: u32, auth: Auth, iters: u64, measured: bool) -> Stream {
    let mut s = Stream::new(mtu, auth);
    let mut keys = Vec::new();
    for e in 0..2 {
        let h = s.engines[e].attach_host(LocalRank::Auto, 0).expect("attach");
        s.engines[e].host_arrived(h);
        let key = s.engines[e]
            .register(h, SegmentHandle(e as u64 + 1), MESSAGE as u64, 0, MESSAGE as u64, Access::READ_WRITE)
            .expect("register");
        keys.push((h, key));
    }
    for (i, b) in s.mem[ROOT].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31);
    }
    // Warm-up (channels grow to the message once), then the measured stream.
    let run = |s: &mut Stream, n: u64| {
        for k in 0..n {
            for e in [RECV, ROOT] {
                let (h, key) = keys[e];
                let d = SubmissionDescriptor::bcast(
                    k + 1,
                    0,
                    0,
                    ringcast_abi::RegionRef { key, offset: 0 },
                    MESSAGE as u64,
                );
                let now = s.now();
                let t = Instant::now();
                s.engines[e].handle_descriptor(h, &d, now);
                s.spent(e, t);
                s.drain(e);
            }
            while s.deliver() {}
            // Timers: the root's next batches of fragments, each due at once (nothing else
            // fires in a clean stream; checked below through the counts).
            let mut due = true;
            while due {
                due = false;
                for e in 0..2 {
                    let now = s.now();
                    if s.engines[e].poll_timeout().is_some_and(|t| t <= now) {
                        let t = Instant::now();
                        s.engines[e].handle_timeout(now);
                        s.spent(e, t);
                        s.drain(e);
                        while s.deliver() {}
                        due = true;
                    }
                }
            }
        }
    };
    run(&mut s, if measured { 20 } else { 1 });
    s.engine_ns = [Duration::ZERO; 2];
    s.calls = [0; 2];
    s.dma_ns = [Duration::ZERO; 2];
    s.completions = [0; 2];
    s.frames = [0; 2];
    run(&mut s, iters);
    assert_eq!(s.completions, [iters, iters], "every broadcast completed on both sides");
    assert!(s.mem[RECV] == s.mem[ROOT], "the receiver holds the root's bytes");
    s
}
