//! The whole engine — intake, the node's gather and communicator tables, the protocol, DMA jobs
//! and in-order completions — driven by hand through its events and actions, with host memory
//! and the fabric modelled in this file: several engines, each with several local processes,
//! and DMA engines that answer at once or late (a DPU's), or fail.
use ringcast_abi::{Access, Completion, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::config::{EngineConfig, LocalRank};
use ringcast_proto::engine::{Action, Dma, Engine, JobId};
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::intake::{Departure, HostId};
use std::collections::{BTreeMap, VecDeque};

/// How the bench's DMA engines answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DmaMode {
    /// At once, as the emulation runners do.
    Now,
    /// At the next step, after everything else queued (an asynchronous DMA engine).
    Late,
}

struct Bench {
    engines: Vec<Engine>,
    /// Host memory: segment handle → bytes.
    mem: BTreeMap<u64, Vec<u8>>,
    /// Frames in flight: (to engine, from, bytes).
    wire: VecDeque<(usize, PeerId, Vec<u8>)>,
    joined: Vec<Vec<GroupId>>,
    completions: Vec<Vec<(HostId, Completion)>>,
    /// DMA jobs not answered yet: (engine, job, what).
    held: VecDeque<(usize, JobId, Dma)>,
    mode: DmaMode,
    /// Segments whose DMA fails (as if deregistered under the job).
    poisoned: Vec<u64>,
    /// DMA jobs the driver carried out and failed.
    failed_jobs: u32,
    now: u64,
}

impl Bench {
    fn new(nodes: u32, ppn: u32, mode: DmaMode) -> Bench {
        let engines = (0..nodes)
            .map(|node| {
                let config = EngineConfig::default().with(|c| {
                    c.topology.job = "bench".into();
                    (c.topology.nodes, c.topology.node, c.topology.ppn) = (nodes, node, ppn);
                    c.protocol.mtu = 1024;
                });
                Engine::new(&config, crc32c::crc32c, true).expect("engine")
            })
            .collect::<Vec<_>>();
        let joined = engines.iter().map(|e| e.world_group().into_iter().collect()).collect();
        Bench {
            completions: vec![Vec::new(); nodes as usize],
            engines,
            mem: BTreeMap::new(),
            wire: VecDeque::new(),
            joined,
            held: VecDeque::new(),
            mode,
            poisoned: Vec::new(),
            failed_jobs: 0,
            now: 0,
        }
    }

    /// Attaches a host to engine `e` with a registered buffer of `len` bytes in its own segment.
    fn host(&mut self, e: usize, len: u64) -> (HostId, RegionKey, u64) {
        let engine = &mut self.engines[e];
        let h = engine.attach_host(LocalRank::Auto, self.now).expect("attach");
        engine.host_arrived(h);
        let seg = (e as u64) << 32 | (self.mem.len() as u64 + 1);
        self.mem.insert(seg, vec![0; len as usize]);
        let key = engine.register(h, SegmentHandle(seg), len, 0, len, Access::READ_WRITE).expect("register");
        (h, key, seg)
    }

    fn range(&mut self, at: Resolved, len: u64) -> Option<&mut [u8]> {
        if self.poisoned.contains(&at.segment.0) {
            return None;
        }
        let m = self.mem.get_mut(&at.segment.0)?;
        m.get_mut(at.offset as usize..(at.offset + len) as usize)
    }

    fn dma(&mut self, e: usize, job: JobId, dma: Dma) {
        let ok = match dma {
            Dma::Copy { src, dst, len, .. } => {
                let bytes = self.range(src, len).map(|s| s.to_vec());
                match (bytes, self.range(dst, len)) {
                    (Some(b), Some(d)) => {
                        d.copy_from_slice(&b);
                        true
                    }
                    _ => false,
                }
            }
            Dma::Load { src, len } => match self.range(src, len).map(|s| s.to_vec()) {
                Some(b) => self.engines[e].staging(job).map(|s| s.copy_from_slice(&b)).is_some(),
                None => false,
            },
            Dma::Store { dst, len } => match self.engines[e].staging(job).map(|s| s.to_vec()) {
                Some(b) if b.len() as u64 == len => {
                    self.range(dst, len).map(|d| d.copy_from_slice(&b)).is_some()
                }
                _ => false,
            },
        };
        self.failed_jobs += u32::from(!ok);
        self.engines[e].handle_dma_done(job, ok, self.now);
    }

    /// Carries out engine `e`'s actions.
    fn drain(&mut self, e: usize) {
        while let Some(a) = self.engines[e].poll_action() {
            match a {
                Action::Send { to, frame, .. } => {
                    self.wire.push_back((to.0 as usize, PeerId(e as u32), frame.to_vec()))
                }
                Action::Multicast { group, frame } => {
                    let frame = frame.to_vec();
                    for to in (0..self.joined.len()).filter(|&t| t != e && self.joined[t].contains(&group)) {
                        self.wire.push_back((to, PeerId(e as u32), frame.clone()));
                    }
                }
                Action::Join { job, group } => {
                    self.joined[e].push(group);
                    self.engines[e].handle_join_done(job, true, self.now);
                }
                Action::Leave { group } => self.joined[e].retain(|g| *g != group),
                Action::Dma { job, dma } => match self.mode {
                    DmaMode::Now => self.dma(e, job, dma),
                    DmaMode::Late => self.held.push_back((e, job, dma)),
                },
                Action::Complete { host, cqe, .. } => self.completions[e].push((host, cqe)),
            }
        }
    }

    /// Runs until `n` completions are out in all and nothing is in flight (frames, held
    /// jobs), advancing time by 1 µs a step and firing timers; panics after `limit` steps (a
    /// hang).
    fn run(&mut self, n: usize, limit: u32) {
        for _ in 0..limit {
            for e in 0..self.engines.len() {
                self.drain(e);
            }
            let mut progressed = false;
            while let Some((to, from, frame)) = self.wire.pop_front() {
                self.engines[to].handle_frame(from, &frame, self.now);
                self.drain(to);
                progressed = true;
            }
            if let Some((e, job, dma)) = self.held.pop_front() {
                self.dma(e, job, dma);
                self.drain(e);
                progressed = true;
            }
            self.now += 1_000;
            for e in 0..self.engines.len() {
                if self.engines[e].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.engines[e].handle_timeout(self.now);
                    self.drain(e);
                    progressed = true;
                }
            }
            let out: usize = self.completions.iter().map(Vec::len).sum();
            if !progressed && self.wire.is_empty() && self.held.is_empty() && out >= n {
                return;
            }
        }
        panic!("the bench did not settle within {limit} steps");
    }

    fn post(&mut self, e: usize, h: HostId, d: SubmissionDescriptor) {
        self.engines[e].handle_descriptor(h, &d, self.now);
        self.drain(e);
    }

    fn statuses(&self, e: usize, h: HostId) -> Vec<(u64, StatusKind)> {
        self.completions[e]
            .iter()
            .filter(|(host, _)| *host == h)
            .map(|(_, c)| (c.cookie, StatusKind::try_from(c.status).expect("a known status")))
            .collect()
    }
}

fn message(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

/// Every process of the world broadcasts `len` bytes from rank `root`; every buffer ends equal
/// to the root's, every completion is Ok, in order.
fn world_bcast(mode: DmaMode, nodes: u32, ppn: u32, len: u64) {
    let mut b = Bench::new(nodes, ppn, mode);
    let hosts: Vec<(usize, HostId, RegionKey, u64)> = (0..nodes as usize)
        .flat_map(|e| (0..ppn).map(move |_| e))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|e| {
            let (h, k, s) = b.host(e, len);
            (e, h, k, s)
        })
        .collect();
    let root = 1u32; // node 0, local 1
    let data = message(len as usize, 7);
    b.mem.get_mut(&hosts[root as usize].3).expect("root memory").copy_from_slice(&data);
    for (i, &(e, h, k, _)) in hosts.iter().enumerate() {
        b.post(
            e,
            h,
            SubmissionDescriptor::bcast(100 + i as u64, 0, root, RegionRef { key: k, offset: 0 }, len),
        );
    }
    b.run(hosts.len(), 100_000);
    for (i, &(e, h, _, s)) in hosts.iter().enumerate() {
        assert_eq!(b.statuses(e, h), vec![(100 + i as u64, StatusKind::Ok)], "process {i}");
        assert!(b.mem[&s] == data, "process {i}'s buffer");
    }
}

#[test]
fn a_world_broadcast_reaches_every_local_buffer_with_dma_at_once() {
    world_bcast(DmaMode::Now, 3, 2, 40_000);
}

#[test]
fn a_world_broadcast_reaches_every_local_buffer_with_late_dma() {
    world_bcast(DmaMode::Late, 3, 2, 40_000);
    world_bcast(DmaMode::Late, 2, 3, 1);
}

/// A host's completions go out as its operations end, not in posting order: a NOP posted behind
/// a COPY whose DMA is still in flight completes first (a host may need a later operation's
/// completion to make the call an earlier one waits for: MPI's non-blocking collectives complete
/// in any order). Before, the NOP was held behind the COPY.
#[test]
fn a_completion_is_not_held_behind_a_late_copy() {
    let mut b = Bench::new(1, 1, DmaMode::Late);
    let (h, k, s) = b.host(0, 4096);
    b.mem.get_mut(&s).expect("memory")[..100].copy_from_slice(&message(100, 1));
    let at = |offset| RegionRef { key: k, offset };
    b.post(0, h, SubmissionDescriptor::copy(1, at(2048), at(0), 100));
    b.post(0, h, SubmissionDescriptor::nop(2));
    assert_eq!(b.statuses(0, h), vec![(2, StatusKind::Ok)], "the NOP does not wait for the COPY's DMA");
    assert_eq!(b.engines[0].in_flight(h), 1, "the COPY is still in flight");
    b.run(2, 10);
    assert_eq!(b.statuses(0, h), vec![(2, StatusKind::Ok), (1, StatusKind::Ok)]);
    assert_eq!(b.engines[0].in_flight(h), 0);
    assert_eq!(b.mem[&s][2048..2148], message(100, 1)[..]);
    assert_eq!(b.engines[0].counters().dma_bytes, 100);
}

#[test]
fn a_failed_dma_fails_its_operation_and_is_counted() {
    // A COPY whose memory goes away under it.
    let mut b = Bench::new(1, 1, DmaMode::Late);
    let (h, k, s) = b.host(0, 4096);
    b.post(
        0,
        h,
        SubmissionDescriptor::copy(1, RegionRef { key: k, offset: 100 }, RegionRef { key: k, offset: 0 }, 50),
    );
    b.poisoned.push(s);
    b.run(1, 10);
    assert_eq!(b.statuses(0, h), vec![(1, StatusKind::OutOfBounds)]);
    let c = b.engines[0].counters();
    assert_eq!((c.completed_ok, c.completed_err, c.dma_bytes), (0, 1, 0));

    // A broadcast whose root's buffer cannot be loaded: the root fails with OutOfBounds, the
    // others learn the broadcast was aborted.
    let mut b = Bench::new(2, 1, DmaMode::Late);
    let (r, rk, rs) = b.host(0, 1000);
    let (x, xk, _) = b.host(1, 1000);
    b.poisoned.push(rs);
    b.post(0, r, SubmissionDescriptor::bcast(5, 0, 0, RegionRef { key: rk, offset: 0 }, 1000));
    b.post(1, x, SubmissionDescriptor::bcast(6, 0, 0, RegionRef { key: xk, offset: 0 }, 1000));
    b.run(2, 100_000);
    assert_eq!(b.statuses(0, r), vec![(5, StatusKind::OutOfBounds)]);
    assert_eq!(b.statuses(1, x), vec![(6, StatusKind::RootFailed)]);
}

/// A process whose broadcast is refused for its buffer (a key nobody registered) takes part in
/// step on no memory (`engine/participation/`): the driver is never handed a job on memory that
/// is not there (none of the jobs it carries out fails), its own call ends with its status
/// whatever its node-mate's copy into it would have done, every other process gets the root's
/// bytes, its buffer is untouched, and the next broadcast is `Ok` everywhere.
#[test]
fn a_process_on_no_memory_hands_the_driver_no_job() {
    for mode in [DmaMode::Now, DmaMode::Late] {
        let mut b = Bench::new(2, 2, mode);
        // World ranks 0 and 1 on engine 0, 2 and 3 on engine 1; rank 3 is refused.
        let hosts: Vec<_> = [0, 0, 1, 1]
            .into_iter()
            .map(|e| {
                let (h, k, s) = b.host(e, 1000);
                (e, h, k, s)
            })
            .collect();
        let data = message(1000, 3);
        b.mem.get_mut(&hosts[0].3).expect("root memory").copy_from_slice(&data);
        for (i, &(e, h, k, _)) in hosts.iter().enumerate() {
            let key = if i == 3 { RegionKey(0xdead_0001) } else { k };
            let d = SubmissionDescriptor::bcast(10 + i as u64, 0, 0, RegionRef { key, offset: 0 }, 1000);
            b.post(e, h, d);
        }
        b.run(4, 100_000);
        for (i, &(e, h, _, s)) in hosts.iter().enumerate() {
            let want = if i == 3 { StatusKind::UnknownRegion } else { StatusKind::Ok };
            assert_eq!(b.statuses(e, h), vec![(10 + i as u64, want)], "process {i}");
            let bytes = if i == 3 { vec![0; 1000] } else { data.clone() };
            assert!(b.mem[&s] == bytes, "process {i}'s buffer");
        }
        assert_eq!(b.failed_jobs, 0, "no job on no memory reached the driver");
        // In step: the next broadcast, on every process's own buffer, is `Ok` everywhere.
        let data = message(1000, 4);
        b.mem.get_mut(&hosts[0].3).expect("root memory").copy_from_slice(&data);
        for (i, &(e, h, k, _)) in hosts.iter().enumerate() {
            b.post(
                e,
                h,
                SubmissionDescriptor::bcast(20 + i as u64, 0, 0, RegionRef { key: k, offset: 0 }, 1000),
            );
        }
        b.run(8, 100_000);
        for (i, &(e, h, _, s)) in hosts.iter().enumerate() {
            assert_eq!(b.statuses(e, h).last(), Some(&(20 + i as u64, StatusKind::Ok)), "process {i}");
            assert!(b.mem[&s] == data, "process {i}'s buffer");
        }
        assert_eq!(b.failed_jobs, 0);
    }
}

#[test]
fn a_host_leaving_with_a_job_in_flight_lets_go_of_it() {
    let mut b = Bench::new(1, 1, DmaMode::Late);
    let (h, k, _) = b.host(0, 4096);
    b.post(
        0,
        h,
        SubmissionDescriptor::copy(1, RegionRef { key: k, offset: 100 }, RegionRef { key: k, offset: 0 }, 50),
    );
    assert_eq!(b.held.len(), 1);
    let segments = b.engines[0].detach_host(h, Departure::Lost, 0, b.now);
    assert_eq!(segments.len(), 1);
    assert_eq!(b.engines[0].in_flight(h), 0);
    // The late answer finds nothing: no completion, nothing counted twice.
    b.run(0, 10);
    assert!(b.completions[0].is_empty());
    let c = b.engines[0].counters();
    assert_eq!((c.hosts_lost, c.dropped_in_flight, c.completed_ok), (1, 1, 0));
}

#[test]
fn without_a_fabric_collectives_fail_and_copies_work() {
    let config = EngineConfig::default();
    let mut e = Engine::new(&config, crc32c::crc32c, false).expect("engine");
    assert_eq!(e.world_group(), None);
    let h = e.attach_host(LocalRank::Auto, 0).expect("attach");
    e.host_arrived(h);
    let k = e.register(h, SegmentHandle(1), 64, 0, 64, Access::READ_WRITE).expect("register");
    e.handle_descriptor(h, &SubmissionDescriptor::bcast(1, 0, 0, RegionRef { key: k, offset: 0 }, 8), 0);
    let mut got = Vec::new();
    while let Some(a) = e.poll_action() {
        if let Action::Complete { cqe, .. } = a {
            got.push(StatusKind::try_from(cqe.status).expect("known"));
        }
    }
    assert_eq!(got, vec![StatusKind::UnknownCommunicator]);
}
