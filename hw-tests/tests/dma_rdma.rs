//! The `rdma` DMA backend on a real RDMA device: a `ringcast-engine` daemon serving only
//! `rdma` (`RINGCAST_DMA=rdma`) and listening on TCP with the job's secret, and this process as
//! its host — connected by `RDMA_CONNECT` (an RC queue pair each, on the device of
//! `RINGCAST_VERBS_DEVICE`/`_PORT`/`_GID_INDEX`), its rings and buffers registered with its own
//! device and reached by the engine only by RDMA READ and WRITE.
//!
//! Asserted: the attach goes by rdma (the engine's log says so); the library's self-test
//! (random COPYs checked byte by byte against a model, a batch in flight, every bad-descriptor
//! case with its typed status) passes; a buffer of this process registered in place is copied
//! byte-exact; the engine's `/proc/<pid>/maps` holds none of this process's memory; the engine
//! stops cleanly.
//!
//! Runs only where `ibv_get_device_list` finds a device. Elsewhere it prints
//! `SKIP: no RDMA device (ibv_get_device_list returned 0)` and returns — which cargo reports as
//! a pass, so read the output: a skip is not a pass. E.g. with soft-RoCE:
//! `rdma link add rxe0 type rxe netdev eth0`, then `RINGCAST_VERBS_DEVICE=rxe0
//! RINGCAST_VERBS_GID_INDEX=1`.
use ringcast_host::{Access, Config, Host};
use ringcast_hw_tests::{env, proc};
use ringcast_offload::config::DmaMode;
use std::process::Command;
use std::time::{Duration, Instant};

const SECRET: &str = "0dd5ec7e0dd5ec7e0dd5ec7e0dd5ec7e0dd5ec7e0dd5ec7e0dd5ec7e0dd5ec7e";

#[test]
fn a_host_reached_only_by_rdma_gets_byte_exact_copies() {
    if let Some(why) = env::verbs_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let name = format!("hw-rdma-{}", std::process::id());
    let mut cmd = Command::new(proc::engine_binary().expect("engine binary"));
    cmd.env("RINGCAST_ENGINE", &name)
        .env("RINGCAST_LISTEN_TCP", format!("127.0.0.1:{port}"))
        .env("RINGCAST_JOB_SECRET", SECRET)
        .env("RINGCAST_DMA", "rdma")
        .env("RINGCAST_LOG_LEVEL", "2");
    let engine = proc::Engine::spawn(&name, cmd).expect("engine started");
    let config = Config::from_env().unwrap().with(|c| {
        c.runner.dma = DmaMode::Rdma;
        c.topology.job_secret = SECRET.parse().unwrap();
    });
    let addr = format!("tcp://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut host = loop {
        match Host::attach_config(&addr, &config, Default::default()) {
            Ok(h) => break h,
            Err(ringcast_host::Error::Connect { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("attach by rdma: {e}"),
        }
    };
    assert!(host.registers_in_place());
    let report =
        ringcast_host::selftest::copy_and_errors(&mut host, 7, 200).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.copies, 200);
    assert_eq!(report.bad_cases.len(), 10, "{:?}", report.bad_cases);

    // In place: plain vectors of this process.
    let src: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let mut dst = vec![0u8; 1 << 20];
    // SAFETY: both vectors live until after their deregistration below, and neither is touched
    // while the COPY is outstanding (it is waited for before `dst` is read).
    let (rs, rd) = unsafe {
        (
            host.register_memory(src.as_ptr(), src.len(), Access::READ).unwrap(),
            host.register_memory(dst.as_mut_ptr(), dst.len(), Access::READ_WRITE).unwrap(),
        )
    };
    let c = host.copy(rd.at(0), rs.at(0), 1 << 20).unwrap();
    assert!(c.status.is_ok(), "{:?}", c.status);
    assert_eq!(std::hint::black_box(&dst), &src);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", engine.pid())).unwrap();
    assert!(!maps.contains("memfd:ringcast"), "the engine mapped host memory");
    host.deregister(rs).unwrap();
    host.deregister(rd).unwrap();
    drop(host);
    let (status, log) = engine.stop();
    assert!(log.contains("host-owned rings by rdma"), "{log}");
    assert!(status.is_some_and(|s| s.success()), "{log}");
}
