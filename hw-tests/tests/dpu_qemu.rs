//! DPU emulation across architectures: the `ringcast-engine` daemon cross-built for
//! `aarch64-unknown-linux-gnu` (the BlueField's ARM cores; without default features, as on a
//! DPU without the build machine's libdpdk) and run under `qemu-aarch64`, serving x86-64 host
//! processes through the shared-memory rings — the attach segment, submission and completion
//! rings, registered regions and control messages all cross from one architecture to the other.
//!
//! Three nodes on the `shm` fabric: nodes 0 and 2 run the aarch64 engine under qemu, node 1 the
//! native x86-64 engine, so the fabric's multicast log and point-to-point rings are shared
//! across architectures too. Each node has one x86-64 host (`ringcast-hw host verify`) running
//! broadcasts of 2 B to 4 MiB with the root rotating over the nodes, every byte checked at every
//! rank.
//!
//! Asserted: the cross-built binary really is an aarch64 ELF file and the engines under qemu
//! report `aarch64` as their architecture (the native one its own); every broadcast completes
//! byte-exact everywhere; every host and engine exits successfully; nothing of the job is left
//! in `/dev/shm`.
use ringcast_hw_tests::cluster::{run_verify, verify_args, Cluster, Net};
use ringcast_hw_tests::{env, proc};
use std::path::Path;
use std::process::Command;

const NODES: usize = 3;
/// 2 B; around one fragment's payload (mtu 1472); a page; many fragments; `max_message_bytes`.
const SIZES: [usize; 8] = [2, 1431, 1432, 1433, 4096, 65_536, 1 << 20, 4 << 20];
const PASSES: u32 = 2;

/// Whether node `node` runs the aarch64 engine.
fn on_dpu(node: usize) -> bool {
    node.is_multiple_of(2)
}

#[test]
fn aarch64_engines_under_qemu_serve_x86_64_hosts_byte_exact() {
    if let Some(why) = env::dpu_emulation_unavailable() {
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
    let job = format!("hwd{}", std::process::id());
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let cluster =
        Cluster::start_with(None, NODES, Net::Shm, &job, tool, &verify_args(&SIZES, PASSES), &engine)
            .expect("engines (two under qemu-aarch64) and hosts up");
    let (_, logs) =
        run_verify(cluster, &SIZES, PASSES).expect("every broadcast verified, every process stopped cleanly");
    for (node, log) in logs.iter().enumerate() {
        let arch = if on_dpu(node) { "aarch64" } else { std::env::consts::ARCH };
        assert!(log.contains(&format!(", {arch}, poll")), "engine {node} is not the {arch} build:\n{log}");
    }
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let left: Vec<&String> = left.iter().filter(|n| n.starts_with(&format!("ringcast-{job}-"))).collect();
    assert!(left.is_empty(), "segments of the job left in /dev/shm: {left:?}");
}
