//! A root whose driver computes each fragment's payload CRC32C as it loads the message
//! (`Engine::staging_summed`, `transfer/summed.rs`) sends the very frames a root whose driver
//! only copies sends, and its sums are what seals them: a driver that writes a wrong sum gets
//! that fragment refused by the receiver's CRC check, never delivered. Driven by hand: two
//! engines on one thread, 2-rank broadcasts, the driver's DMA a copy between `Vec`s.
use ringcast_abi::frame::{DropReason, DIGEST_LEN};
use ringcast_abi::wire::{WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_abi::{Access, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::PeerId;
use ringcast_proto::config::{Auth, EngineConfig, LocalRank, SHM_MTU};
use ringcast_proto::engine::{Action, Dma, Engine, JobId, SummedLoad};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::ledger::Side;

const ROOT: usize = 0;
const RECV: usize = 1;

/// How the root's driver carries out its load.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// A copy (`Engine::staging`).
    Copied,
    /// A copy that sums each fragment as its bytes land (`Engine::staging_summed`).
    Summed,
    /// As `Summed`, fragment `n`'s sum written wrong.
    SummedWrong(usize),
}

struct Pair {
    engines: [Engine; 2],
    mem: [Vec<u8>; 2],
    hosts: [(HostId, RegionKey); 2],
    /// Every frame each engine sent, in order.
    sent: [Vec<Vec<u8>>; 2],
    completions: [Vec<StatusKind>; 2],
    load: Load,
    /// Loads the driver carried out summed.
    summed_loads: usize,
}

impl Pair {
    fn new(len: usize, load: Load) -> Pair {
        let engine = |node: u32| {
            let config = EngineConfig::default().with(|c| {
                c.protocol.mtu = SHM_MTU;
                c.protocol.auth = Auth::Tag;
                c.topology.job = "summed".into();
                (c.topology.nodes, c.topology.node, c.topology.ppn) = (2, node, 1);
            });
            Engine::new(&config, crc32c::crc32c, true).expect("engine")
        };
        let mut engines = [engine(0), engine(1)];
        let mut hosts = Vec::new();
        for (e, engine) in engines.iter_mut().enumerate() {
            let h = engine.attach_host(LocalRank::Auto, 0).expect("attach");
            engine.host_arrived(h);
            let key = engine
                .register(h, SegmentHandle(e as u64 + 1), len as u64, 0, len as u64, Access::READ_WRITE)
                .expect("register");
            hosts.push((h, key));
        }
        let root: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
        Pair {
            engines,
            mem: [root, vec![0; len]],
            hosts: [hosts[0], hosts[1]],
            sent: [Vec::new(), Vec::new()],
            completions: [Vec::new(), Vec::new()],
            load,
            summed_loads: 0,
        }
    }

    fn dma(&mut self, e: usize, job: JobId, dma: Dma) {
        let ok = match dma {
            Dma::Load { src, len } => {
                let at = src.offset as usize;
                if self.load != Load::Copied {
                    if let Some(load) = self.engines[e].staging_summed(job) {
                        assert_eq!(load.bytes.len() as u64, len);
                        let mem = &self.mem[e];
                        let ok = SummedLoad {
                            bytes: &mut *load.bytes,
                            stride: load.stride,
                            sums: &mut *load.sums,
                        }
                        .fill(crc32c::crc32c, |off, into| {
                            into.copy_from_slice(&mem[at + off..at + off + into.len()]);
                            true
                        });
                        if let Load::SummedWrong(n) = self.load {
                            load.sums[n] ^= 1;
                        }
                        assert!(ok);
                        self.summed_loads += 1;
                        self.engines[e].handle_dma_summed(job, 0);
                        return;
                    }
                }
                let s = self.engines[e].staging(job).expect("staging");
                s.copy_from_slice(&self.mem[e][at..at + len as usize]);
                true
            }
            Dma::Store { dst, len } => {
                let at = dst.offset as usize;
                let s = self.engines[e].staging(job).expect("staging");
                self.mem[e][at..at + len as usize].copy_from_slice(s);
                true
            }
            Dma::Copy { .. } => false,
        };
        self.engines[e].handle_dma_done(job, ok, 0);
    }

    /// Carries out engine `e`'s actions; returns the frames it sent.
    fn drain(&mut self, e: usize) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let mut job = None;
            match self.engines[e].poll_action() {
                None => return out,
                Some(Action::Send { to, frame, .. }) => {
                    let mut b = Vec::new();
                    frame.extend_into(&mut b);
                    out.push((to.0 as usize, b));
                }
                Some(Action::Dma { job: j, dma }) => job = Some((j, dma)),
                Some(Action::Complete { cqe, .. }) => {
                    self.completions[e].push(StatusKind::try_from(cqe.status).expect("a status"))
                }
                Some(_) => panic!("two nodes broadcast point to point"),
            }
            if let Some((j, dma)) = job {
                self.dma(e, j, dma);
            }
        }
    }

    /// Broadcast `k` of the whole buffer, run until nothing moves (timers due at once).
    fn bcast(&mut self, k: u64) {
        let mut wire = Vec::new();
        for e in [RECV, ROOT] {
            let (h, key) = self.hosts[e];
            let len = self.mem[e].len() as u64;
            let d = SubmissionDescriptor::bcast(k + 1, 0, 0, RegionRef { key, offset: 0 }, len);
            self.engines[e].handle_descriptor(h, &d, 0);
            for (to, f) in self.drain(e) {
                self.sent[e].push(f.clone());
                wire.push((to, f));
            }
        }
        for _ in 0..10_000 {
            while let Some((to, f)) = wire.pop() {
                self.engines[to].handle_frame(PeerId(1 - to as u32), &f, 0);
                for (to2, f2) in self.drain(to) {
                    self.sent[to].push(f2.clone());
                    wire.insert(0, (to2, f2));
                }
            }
            let mut due = false;
            for e in 0..2 {
                if self.engines[e].poll_timeout().is_some_and(|t| t == 0) {
                    self.engines[e].handle_timeout(0);
                    for (to, f) in self.drain(e) {
                        self.sent[e].push(f.clone());
                        wire.push((to, f));
                    }
                    due = true;
                }
            }
            if !due && wire.is_empty() {
                return;
            }
        }
        panic!("the broadcast never settled");
    }
}

/// Summed or copied, the root sends the same bytes, the receiver gets the message, and the
/// ledger reads the same CRC passes per delivered byte (each payload byte once, the headers
/// and trailers once per frame) — at message sizes with a short last fragment, a single
/// fragment, and a whole number of them.
#[test]
fn a_summed_load_seals_the_frames_a_copied_one_does() {
    let payload = SHM_MTU as usize - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - DIGEST_LEN;
    for len in [1usize, 100, payload, 3 * payload, 70_000, 1 << 20] {
        let (mut copied, mut summed) = (Pair::new(len, Load::Copied), Pair::new(len, Load::Summed));
        for k in 0..3 {
            copied.bcast(k);
            summed.bcast(k);
        }
        assert_eq!(copied.summed_loads, 0);
        assert_eq!(summed.summed_loads, 3, "{len} B: the driver was lent every load summed");
        assert!(!summed.sent[ROOT].is_empty());
        assert_eq!(summed.sent[ROOT], copied.sent[ROOT], "{len} B: the root's frames, byte for byte");
        for p in [&copied, &summed] {
            assert_eq!(p.completions[RECV], vec![StatusKind::Ok; 3], "{len} B");
            assert!(p.mem[RECV] == p.mem[ROOT], "{len} B: the receiver holds the root's bytes");
        }
        let per = |p: &Pair| p.engines[ROOT].proto_counters().ledger.per_byte(Side::Send);
        assert_eq!(per(&summed), per(&copied), "{len} B: the root's ledger");
    }
}

/// The sums are what seals the frames: a wrong one makes its fragment fail the receiver's CRC
/// check, every time it is sent (repairs included), and the receiver never completes `Ok`
/// with bytes it did not check. (Against a root that ignored the driver's sums this fails: its
/// frames would carry the right CRC.)
#[test]
fn a_wrong_sum_is_caught_by_the_receivers_crc() {
    let len = 70_000;
    let mut p = Pair::new(len, Load::SummedWrong(5));
    p.bcast(0);
    assert_eq!(p.summed_loads, 1);
    let bad_crc = p.engines[RECV].proto_counters().drops[DropReason::BadCrc as usize];
    assert!(bad_crc >= 1, "fragment 5 dropped for its CRC ({bad_crc})");
    assert!(
        !p.completions[RECV].contains(&StatusKind::Ok),
        "no Ok without fragment 5: {:?}",
        p.completions[RECV]
    );
}
