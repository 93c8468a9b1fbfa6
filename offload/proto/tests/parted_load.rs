//! A root loads its message from host memory in parts (`protocol.root_load_part_bytes`, whole
//! fragments each: `collective::bcast`'s `post` and `loaded`), each answered on its own: a
//! part's fragments leave as it lands, the root's request completes `Ok` only once the last
//! part has landed (Yu et al.'s buffer safety), and a part that fails aborts the broadcast
//! (`OutOfBounds`, never `Ok`) with the parts answered after it ignored. Driven by hand: two
//! engines on one thread, the root's loads held by the test and answered one at a time.
use ringcast_abi::frame::DIGEST_LEN;
use ringcast_abi::wire::{FrameKind, WIRE_HEADER_LEN, WIRE_TRAILER_LEN};
use ringcast_abi::{Access, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::PeerId;
use ringcast_proto::config::{Auth, EngineConfig, LocalRank, SHM_MTU};
use ringcast_proto::engine::{Action, Dma, Engine, JobId};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;

const ROOT: usize = 0;
const RECV: usize = 1;
/// Fragments per part: 16 of `shm`'s.
const PER: usize = 16;

fn payload() -> usize {
    SHM_MTU as usize - WIRE_HEADER_LEN - WIRE_TRAILER_LEN - DIGEST_LEN
}

struct Pair {
    engines: [Engine; 2],
    mem: [Vec<u8>; 2],
    hosts: [(HostId, RegionKey); 2],
    completions: [Vec<StatusKind>; 2],
    /// The root's load jobs, held until the test answers them.
    held: Vec<(JobId, u64, u64)>,
    /// Data frames the root has sent.
    data_sent: usize,
    wire: Vec<(usize, Vec<u8>)>,
}

impl Pair {
    fn new(len: usize, auth: Auth) -> Pair {
        let engine = |node: u32| {
            let config = EngineConfig::default().with(|c| {
                c.protocol.mtu = SHM_MTU;
                c.protocol.auth = auth;
                c.protocol.root_load_part_bytes = (PER * payload()) as u32;
                c.topology.job = "parted".into();
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
        let root: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29).wrapping_add(3)).collect();
        Pair {
            engines,
            mem: [root, vec![0; len]],
            hosts: [hosts[0], hosts[1]],
            completions: [Vec::new(), Vec::new()],
            held: Vec::new(),
            data_sent: 0,
            wire: Vec::new(),
        }
    }

    /// Carries out engine `e`'s actions (the root's loads held), its frames put on the wire.
    fn drain(&mut self, e: usize) {
        loop {
            let mut store = None;
            match self.engines[e].poll_action() {
                None => return,
                Some(Action::Send { to, frame, .. }) => {
                    let mut b = Vec::new();
                    frame.extend_into(&mut b);
                    // The header's second byte: its kind.
                    if e == ROOT && is_data(b[1]) {
                        self.data_sent += 1;
                    }
                    self.wire.push((to.0 as usize, b));
                }
                Some(Action::Dma { job, dma: Dma::Load { src, len } }) => {
                    self.held.push((job, src.offset, len))
                }
                Some(Action::Dma { job, dma: Dma::Store { dst, len } }) => {
                    store = Some((job, dst.offset, len))
                }
                Some(Action::Complete { cqe, .. }) => {
                    self.completions[e].push(StatusKind::try_from(cqe.status).expect("a status"))
                }
                Some(_) => panic!("two nodes broadcast point to point"),
            }
            if let Some((job, at, len)) = store {
                let (at, len) = (at as usize, len as usize);
                let s = self.engines[e].staging(job).expect("staging");
                self.mem[e][at..at + len].copy_from_slice(s);
                self.engines[e].handle_dma_done(job, true, 0);
            }
        }
    }

    /// Delivers every frame on the wire (and whatever they bring about), timers due at once.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            while let Some((to, f)) = self.wire.pop() {
                self.engines[to].handle_frame(PeerId(1 - to as u32), &f, 0);
                self.drain(to);
            }
            let mut due = false;
            for e in 0..2 {
                if self.engines[e].poll_timeout().is_some_and(|t| t == 0) {
                    self.engines[e].handle_timeout(0);
                    self.drain(e);
                    due = true;
                }
            }
            if !due && self.wire.is_empty() {
                return;
            }
        }
        panic!("never settled");
    }

    /// Posts broadcast 1 of the whole buffer at both ranks (the receiver first).
    fn post(&mut self) {
        for e in [RECV, ROOT] {
            let (h, key) = self.hosts[e];
            let len = self.mem[e].len() as u64;
            let d = SubmissionDescriptor::bcast(1, 0, 0, RegionRef { key, offset: 0 }, len);
            self.engines[e].handle_descriptor(h, &d, 0);
            self.drain(e);
        }
        self.settle();
    }

    /// Answers held load `i` (`ok`: its bytes copied in; otherwise failed).
    fn answer(&mut self, i: usize, ok: bool) {
        let (job, at, len) = self.held[i];
        let (at, len) = (at as usize, len as usize);
        if ok {
            let s = self.engines[ROOT].staging(job).expect("a part's staging");
            s.copy_from_slice(&self.mem[ROOT][at..at + len]);
        }
        self.engines[ROOT].handle_dma_done(job, ok, 0);
        self.drain(ROOT);
        self.settle();
    }
}

fn is_data(kind: u8) -> bool {
    kind == FrameKind::DATA_MULTICAST.0 || kind == FrameKind::DATA_REPAIR.0
}

/// The first part goes alone; once it lands its fragments leave, and the next two parts are
/// handed over. With the second part held, the first part's fragments are sent and the root's
/// request is not complete; it completes once the last part lands, and the receiver then
/// holds the message. (Against the old whole-message load this fails: one load job of the
/// whole message, nothing sent before it lands.)
#[test]
fn a_parts_fragments_leave_before_the_next_part_lands() {
    for auth in [Auth::Tag, Auth::Mac] {
        let len = 2 * PER * payload() + 1000; // three parts, the last short
        let mut p = Pair::new(len, auth);
        p.post();
        assert_eq!(p.held.len(), 1, "{auth:?}: the first part alone");
        assert_eq!(p.held[0].2, (PER * payload()) as u64, "{auth:?}: whole fragments");
        assert_eq!(p.data_sent, 0, "{auth:?}: nothing to send before a part lands");
        p.answer(0, true);
        assert_eq!(p.data_sent, PER, "{auth:?}: the first part's fragments, and no more, are sent");
        assert_eq!(p.held.len(), 3, "{auth:?}: the next two parts handed over");
        assert_eq!(p.held[2].2, 1000, "{auth:?}: the last part what is left");
        assert!(p.completions[ROOT].is_empty(), "{auth:?}: the root's buffer is still being read");
        p.answer(1, true);
        assert_eq!(p.data_sent, 2 * PER, "{auth:?}");
        assert!(p.completions[ROOT].is_empty(), "{auth:?}");
        p.answer(2, true);
        assert_eq!(p.completions[ROOT], vec![StatusKind::Ok], "{auth:?}: complete once the last part landed");
        assert_eq!(p.completions[RECV], vec![StatusKind::Ok], "{auth:?}");
        assert!(p.mem[RECV] == p.mem[ROOT], "{auth:?}: the receiver holds the root's bytes");
    }
}

/// Parts landing out of order: nothing leaves ahead of a missing earlier fragment (the MAC,
/// under `mac`, fed only loaded bytes), and the message arrives whole and authentic once the
/// gap is filled.
#[test]
fn parts_landing_out_of_order_send_in_order() {
    for auth in [Auth::Tag, Auth::Mac] {
        let len = 3 * PER * payload();
        let mut p = Pair::new(len, auth);
        p.post();
        p.answer(0, true);
        assert_eq!(p.data_sent, PER, "{auth:?}");
        assert_eq!(p.held.len(), 3, "{auth:?}");
        p.answer(2, true);
        assert_eq!(p.data_sent, PER, "{auth:?}: the last part sends nothing before the second");
        assert!(p.completions[ROOT].is_empty(), "{auth:?}");
        p.answer(1, true);
        assert_eq!(p.data_sent, 3 * PER, "{auth:?}");
        assert_eq!(p.completions[ROOT], vec![StatusKind::Ok], "{auth:?}");
        assert_eq!(p.completions[RECV], vec![StatusKind::Ok], "{auth:?}");
        assert!(p.mem[RECV] == p.mem[ROOT], "{auth:?}");
    }
}

/// A middle part that fails aborts the broadcast: the root completes `OutOfBounds` once and
/// never `Ok`, the part answered after it has no staging any more and is ignored, and the
/// receiver gets no message.
#[test]
fn a_failing_middle_part_aborts_the_broadcast() {
    let len = 3 * PER * payload();
    let mut p = Pair::new(len, Auth::Mac);
    p.post();
    p.answer(0, true);
    assert_eq!(p.held.len(), 3);
    p.answer(1, false);
    assert_eq!(p.completions[ROOT], vec![StatusKind::OutOfBounds]);
    let (late, ..) = p.held[2];
    assert!(p.engines[ROOT].staging(late).is_none(), "a part answered after the abort has no staging");
    p.engines[ROOT].handle_dma_done(late, true, 0);
    p.drain(ROOT);
    p.settle();
    assert_eq!(p.data_sent, PER, "nothing more sent");
    assert_eq!(p.completions[ROOT], vec![StatusKind::OutOfBounds], "never Ok after the abort");
    assert!(!p.completions[RECV].contains(&StatusKind::Ok), "{:?}", p.completions[RECV]);
}
