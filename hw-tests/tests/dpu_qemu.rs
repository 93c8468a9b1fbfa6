//! DPU emulation across architectures and across the boundary: the `ringcast-engine` daemon
//! cross-built for `aarch64-unknown-linux-gnu` (the BlueField's ARM cores; without default
//! features, as on a DPU without the build machine's libdpdk) and run under `qemu-aarch64`, each
//! engine in a network namespace of its own — the "DPU" — reached by its x86-64 host, in
//! another namespace, only over TCP (with the job's secret), and reaching the host's memory
//! only by DMA (`RINGCAST_DMA=cma`; under qemu, through `/proc/<pid>/mem`, since qemu-user has
//! no `process_vm_readv`). The engines talk over the `shm` fabric (qemu-user emulates neither
//! `IP_MULTICAST_IF` nor `SO_RXQ_OVFL`, which the `udp` fabric needs; see `hw-tests/src/dpu.rs`).
//!
//! Three nodes: nodes 0 and 2 run the aarch64 engine under qemu, node 1 the native x86-64 one.
//! Each host (`ringcast-hw host verify`) runs broadcasts of 2 B to 4 MiB with the root rotating
//! over the nodes, every byte checked at every rank. Then node 1's host is killed in the middle
//! of a stream of 4 MiB broadcasts.
//!
//! Asserted: the cross-built binary is an aarch64 ELF file and the engines under qemu report
//! `aarch64` (the native one its own); every host attached by cma over TCP; while the hosts
//! work, no engine's `/proc/<pid>/maps` holds host memory; every broadcast completes byte-exact
//! everywhere; when node 1's host is killed the other hosts end (done, or with a typed error)
//! instead of hanging, and its engine notices, holds as many descriptors as before the host came
//! and no mapping more; every engine stops cleanly.
use ringcast_hw_tests::cluster::verify_args;
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::{dpu, env, proc};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// 2 B; around one fragment's payload (mtu 1472); a page; many fragments; `max_message_bytes`.
const SIZES: [usize; 8] = [2, 1431, 1432, 1433, 4096, 65_536, 1 << 20, 4 << 20];
const PASSES: u32 = 2;

/// Whether node `node` runs the aarch64 engine.
fn on_dpu(node: usize) -> bool {
    node.is_multiple_of(2)
}

/// Open descriptors and mappings of `pid`.
fn fds_and_maps(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|m| m.lines().count()).unwrap_or(0);
    (fds, maps)
}

/// Verify hosts of the phase-2 stream: 4 MiB broadcasts, enough to be killed in the middle of.
const STREAM: [usize; 1] = [4 << 20];
const STREAM_PASSES: u32 = 200;

#[test]
fn aarch64_engines_on_their_own_dpus_serve_x86_64_hosts_by_dma_only() {
    if let Some(why) = env::dpu_emulation_unavailable().or_else(env::no_namespaces) {
        println!("SKIP: {why}");
        return;
    }
    let dpu_engine = proc::cross_engine_binary(env::DPU_TARGET).expect("aarch64 engine cross-built");
    assert_eq!(
        proc::elf_machine(&dpu_engine),
        Some(proc::EM_AARCH64),
        "{} is not an aarch64 ELF file",
        dpu_engine.display()
    );
    let native_engine = proc::engine_binary().expect("native engine");
    let engine = |node: usize| {
        if on_dpu(node) {
            let mut c = Command::new("qemu-aarch64");
            c.args(["-L", env::AARCH64_SYSROOT]).arg(&dpu_engine);
            c
        } else {
            Command::new(&native_engine)
        }
    };
    let lab = Lab::create("dpu", 2 * NODES).expect("namespaces");
    let job = format!("hwd{}", std::process::id());
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let mut cluster = dpu::start(&lab, NODES, &job, tool, &verify_args(&SIZES, PASSES), &engine)
        .expect("engines (two under qemu) and hosts up");
    let pids: Vec<u32> = cluster.engines.iter().map(|e| e.pid()).collect();

    // While hosts work, every engine's mappings are watched for host memory.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, pids) = (stop.clone(), pids.clone());
        std::thread::spawn(move || {
            let mut looks = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for &pid in &pids {
                    let mapped = dpu::host_memory_mapped(pid);
                    assert!(mapped.is_empty(), "engine {pid} maps host memory: {mapped:?}");
                }
                looks += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            looks
        })
    };

    // Phase 1: every size from every root, byte-exact at every rank.
    cluster.send_all("GO").unwrap();
    let results = cluster.expect_all("RESULT", Duration::from_secs(600)).expect("every host verified");
    let broadcasts = (SIZES.len() as u64 * u64::from(PASSES)).to_string();
    for (node, r) in results.iter().enumerate() {
        println!("node {node}: {r}");
        assert!(r.contains(&format!("broadcasts={broadcasts} ")), "node {node}: {r}");
    }
    for (i, h) in std::mem::take(&mut cluster.hosts).into_iter().enumerate() {
        let (status, err) = h.finish(Duration::from_secs(60));
        assert!(status.is_some_and(|s| s.success()), "host {i}: {status:?} {err}");
    }

    // Phase 2: node 1's host is killed in the middle of a stream of 4 MiB broadcasts.
    let idle = fds_and_maps(pids[1]);
    let args = verify_args(&STREAM, STREAM_PASSES);
    cluster.hosts = (0..NODES).map(|n| dpu::spawn_host(&lab, NODES, n, tool, &args).unwrap()).collect();
    cluster.expect_all("READY", Duration::from_secs(60)).expect("stream hosts attached");
    cluster.send_all("GO").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    cluster.hosts[1].kill();
    // The others end — done or with a typed error — and never hang.
    for (i, h) in std::mem::take(&mut cluster.hosts).into_iter().enumerate() {
        if i != 1 {
            let (status, err) = h.finish(Duration::from_secs(120));
            assert!(status.is_some(), "host {i} hung after node 1's host died: {err}");
            println!("host {i} after node 1's host died: {status:?} {}", err.trim());
        }
    }
    // Its descriptors back to their count, no mapping more (the allocator may return one).
    let deadline = Instant::now() + Duration::from_secs(30);
    while {
        let now = fds_and_maps(pids[1]);
        now.0 != idle.0 || now.1 > idle.1
    } {
        assert!(
            Instant::now() < deadline,
            "engine 1 still holds the killed host: {:?} vs {idle:?}",
            fds_and_maps(pids[1])
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(watcher.join().expect("no engine mapped host memory") > 0);

    let logs = cluster.shut_down(Duration::from_secs(120)).expect("every engine stopped cleanly");
    for (node, log) in logs.iter().enumerate() {
        let arch = if on_dpu(node) { "aarch64" } else { std::env::consts::ARCH };
        assert!(log.contains(&format!(", {arch}, poll")), "engine {node} is not the {arch} build:\n{log}");
        assert!(log.contains("attached over TCP"), "engine {node}: hosts attach over TCP only:\n{log}");
        let way = if on_dpu(node) { "/proc/<pid>/mem" } else { "process_vm_readv/writev" };
        assert!(log.contains(&format!("host-owned rings by cma ({way})")), "engine {node}:\n{log}");
        assert!(log.contains("stopped;"), "engine {node} did not stop cleanly:\n{log}");
    }
    assert!(logs[1].contains("went away"), "engine 1 noticed its host die:\n{}", logs[1]);
}
