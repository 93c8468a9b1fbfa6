//! The `rdma` backend through the whole engine loop, with a fake device: a "host" in this test
//! (raw control messages on the engine's Unix socket, host-owned rings and buffers in this
//! process's memory, registered on the fake NIC under rkeys) connects by `RDMA_CONNECT`,
//! attaches its rings by rkey, registers buffers by rkey and gets byte-exact COPYs — every
//! byte moved by RDMA READ/WRITE work requests the fake NIC checks against the host's
//! registrations. Then the host's NIC revokes a key: the link faults, that host alone is told
//! `BACKEND` and detached, and a second host attached the same way is served on.
use super::fake::{FakeNic, NicState};
use super::{RcPort, RdmaDevice};
use crate::config::{Config, DmaMode};
use crate::ctl::{CtlSock, QpAddress, Received};
use crate::runner::engine_loop::EngineLoop;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::{Access, Completion, RegionKey, RegionRef, Status, SubmissionDescriptor};
use ringcast_ring::attach::{self, HostRings};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Hands out fake NICs; the test reaches each connection's NIC state to register memory on it.
#[derive(Clone, Default)]
struct FakeDevice {
    nics: Arc<Mutex<Vec<Arc<Mutex<NicState>>>>>,
}

impl RdmaDevice for FakeDevice {
    fn connect(&mut self, host: &QpAddress) -> Result<(Box<dyn RcPort>, QpAddress), String> {
        assert_eq!(host.mtu, 3, "the host's address arrives whole");
        let (nic, state) = FakeNic::new(4096);
        let mut nics = self.nics.lock().unwrap();
        nics.push(state);
        let ours = QpAddress { qpn: 0x100 + nics.len() as u32, psn: 7, lid: 0, gid: [0xab; 16], mtu: 3 };
        Ok((Box::new(nic), ours))
    }
}

/// An engine loop with the fake device, polled by a thread until the guard drops.
struct Running {
    name: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(device: FakeDevice) -> Running {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!("rdma-test-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    let config = Config::default().with(|c| {
        c.runner.engine_name = name.clone();
        c.runner.dma = DmaMode::Rdma;
        c.runner.log_level = 0;
    });
    let mut lp = EngineLoop::bind(config, 0).unwrap();
    lp.rdma = Some(Box::new(device));
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            if !lp.poll_once() {
                std::thread::yield_now();
            }
        }
    });
    Running { name, stop, thread: Some(thread) }
}

/// A host of this test: its control socket, rings, and the NIC state it registers on.
struct TestHost {
    sock: CtlSock,
    rings: HostRings,
    nic: Arc<Mutex<NicState>>,
    seq: u64,
    next_rkey: u32,
}

impl TestHost {
    fn call(&mut self, mut m: CtlMsg) -> CtlMsg {
        self.seq += 1;
        m.seq = self.seq;
        self.sock.call(&m, None, TIMEOUT, &mut |_| {}).unwrap().0
    }

    /// Registers `len` bytes at `addr` on the NIC: the rkey.
    fn expose(&mut self, addr: u64, len: u64) -> u32 {
        self.next_rkey += 0x101;
        self.nic.lock().unwrap().registered.push((addr, len, self.next_rkey));
        self.next_rkey
    }

    fn register(&mut self, buf: &[u8], access: Access) -> RegionKey {
        let (addr, len) = (buf.as_ptr() as u64, buf.len() as u64);
        let mut m = CtlMsg::new(CtlKind::REGISTER_ADDR);
        (m.a, m.b, m.c, m.e) = (access.0, self.expose(addr, len), addr, len);
        let r = self.call(m);
        assert_eq!(r.kind, CtlKind::REGISTER_OK, "{:?}", r.status);
        RegionKey(r.a)
    }

    /// Posts `d` and waits for its completion.
    fn run(&mut self, d: SubmissionDescriptor) -> Completion {
        assert_eq!(self.rings.sq.push_batch(&[d]), 1);
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(c) = self.rings.cq.try_pop().unwrap() {
                return c;
            }
            assert!(Instant::now() < deadline, "no completion for {}", d.cookie);
            std::thread::yield_now();
        }
    }
}

fn attach(engine: &Running, device: &FakeDevice) -> TestHost {
    let mut sock = CtlSock::connect(&engine.name).unwrap();
    let hello = sock.call(&CtlMsg::new(CtlKind::HELLO), None, TIMEOUT, &mut |_| {}).unwrap().0;
    assert_eq!(hello.kind, CtlKind::HELLO_OK);
    let mut connect = CtlMsg::new(CtlKind::RDMA_CONNECT);
    QpAddress { qpn: 0x42, psn: 9, lid: 0, gid: [0xcd; 16], mtu: 3 }.put(&mut connect);
    connect.seq = 2;
    let ok = sock.call(&connect, None, TIMEOUT, &mut |_| {}).unwrap().0;
    assert_eq!(ok.kind, CtlKind::RDMA_CONNECT_OK);
    let engine_qp = QpAddress::get(&ok).unwrap();
    assert_eq!((engine_qp.psn, engine_qp.gid), (7, [0xab; 16]));
    let nic = Arc::clone(device.nics.lock().unwrap().last().unwrap());
    let mut rings = attach::create_host_owned(64, hello.c).unwrap();
    rings.sq.set_mirrored();
    rings.cq.set_mirrored();
    let mut host = TestHost { sock, rings, nic, seq: 2, next_rkey: 0x1000 };
    let (addr, len) = (host.rings.segment.as_non_null().as_ptr() as u64, host.rings.header.total_len);
    let mut m = CtlMsg::new(CtlKind::ATTACH);
    (m.a, m.b, m.d, m.e) = (host.expose(addr, len), 64, addr, len);
    let r = host.call(m);
    assert_eq!(r.kind, CtlKind::ATTACH_OK, "{:?}", r.status);
    host
}

#[test]
fn hosts_attach_register_and_copy_by_rdma_and_a_faulted_link_detaches_only_its_host() {
    let device = FakeDevice::default();
    let engine = start(device.clone());
    let mut a = attach(&engine, &device);

    // COPYs between two buffers registered in place, every byte by RDMA.
    let src: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let dst = vec![0u8; 100_000];
    let ks = a.register(&src, Access::READ);
    let kd = a.register(&dst, Access::READ_WRITE);
    for (i, (off, len)) in [(0u64, 1u64), (17, 4095), (4096, 60_000), (0, 100_000)].into_iter().enumerate() {
        let c = a.run(SubmissionDescriptor::copy(
            i as u64 + 1,
            RegionRef { key: kd, offset: off },
            RegionRef { key: ks, offset: off },
            len,
        ));
        assert_eq!(c.status, Status::OK, "copy {i}");
        // The engine wrote `dst` by RDMA WRITE into this process behind the compiler's back;
        // read it as the host library does, after the completion.
        let got = read_back(&dst);
        assert_eq!(got[off as usize..(off + len) as usize], src[off as usize..(off + len) as usize]);
    }
    // A COPY past the registration is refused by the engine's bounds: nothing is written.
    let dst_addr = dst.as_ptr() as u64;
    let before = a.nic.lock().unwrap().writes_into(dst_addr, 100_000);
    let c = a.run(SubmissionDescriptor::copy(
        9,
        RegionRef { key: kd, offset: 99_999 },
        RegionRef { key: ks, offset: 0 },
        2,
    ));
    assert_eq!(c.status, Status::from(ringcast_abi::StatusKind::OutOfBounds));
    assert_eq!(a.nic.lock().unwrap().writes_into(dst_addr, 100_000), before, "no WRITE reached dst");

    // A second host on its own connection.
    let mut b = attach(&engine, &device);
    assert_eq!(b.run(SubmissionDescriptor::nop(1)).status, Status::OK);

    // Host A's NIC revokes every key (its process deregistered behind the engine's back): the
    // engine's next RDMA on A fails, A is told BACKEND and detached.
    a.nic.lock().unwrap().registered.clear();
    assert!(a.rings.sq.push_batch(&[SubmissionDescriptor::nop(2)]) == 1);
    let deadline = Instant::now() + TIMEOUT;
    let mut told = None;
    while Instant::now() < deadline {
        match a.sock.recv(&mut Vec::new()) {
            Ok(Received::Msg(m, _)) if m.kind == CtlKind::ERROR => told = Some(m.status),
            Ok(Received::Closed) | Err(_) => break,
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert_eq!(told, Some(CtlStatus::BACKEND), "the host is told why");
    // B is served on.
    for i in 0..50 {
        assert_eq!(b.run(SubmissionDescriptor::nop(10 + i)).status, Status::OK);
    }
}

/// `buf` as it is in memory now, read back through the kernel (the fake NIC wrote it with
/// `process_vm_writev`, behind the compiler's back).
fn read_back(buf: &[u8]) -> Vec<u8> {
    let me = crate::runner::dma::cma::Process::open(nix::unistd::Pid::this()).unwrap();
    let mut out = vec![0u8; buf.len()];
    assert!(me.read(buf.as_ptr() as u64, &mut out));
    out
}
