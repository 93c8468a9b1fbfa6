//! The DPU emulation's boundary: each engine in a network namespace of its own — the "DPU" —
//! and each host in another — the host machine — joined by the lab's bridge, as a BlueField's
//! ARM cores and its host are joined by the NIC. A host reaches its engine only over TCP (with
//! the job's secret); the engine reaches the host's memory only by DMA (`RINGCAST_DMA=cma`:
//! nothing of the host mapped, host-owned rings). The only thing the two sides still share is
//! the machine's RAM, which the `cma` backend reaches the way an RDMA NIC would: by address,
//! inside registered ranges.
//!
//! The engines talk to each other over the `shm` fabric (segments of their own, no sockets: it
//! crosses namespaces). Not `udp` on the bridge: `qemu-user` emulates neither `IP_MULTICAST_IF`
//! nor `SO_RXQ_OVFL`, and the point here is the host–engine boundary, which is the same for any
//! fabric.
//!
//! Namespaces: a lab of `2 × nodes`; node `i`'s engine in `lab.nodes[i]` (address
//! [`Lab::ip`]`(i)`), its host in `lab.nodes[nodes + i]`.
use crate::cluster::{engine_env, poll_env, Cluster, Net};
use crate::netns::Lab;
use crate::proc::{Child, Engine};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The TCP port every DPU engine listens on for its hosts.
pub const CONTROL_PORT: u16 = 7471;

/// The job secret of a DPU cluster (a test fixture: `ringcast run --mode dpu` draws one).
pub const JOB_SECRET: &str = "d9c0ffee00112233445566778899aabbccddeeff00112233445566778899aab1";

/// Where node `node`'s host finds its engine.
pub fn engine_address(node: usize) -> String {
    format!("tcp://{}:{CONTROL_PORT}", Lab::ip(node))
}

/// Starts `nodes` engines (command line `engine(node)`) and hosts (`tool host <host_args…>`)
/// across the boundary described in the module doc, in `lab` (of `2 × nodes` namespaces), and
/// waits until every host attached (`READY`).
pub fn start(
    lab: &Lab,
    nodes: usize,
    job: &str,
    tool: &Path,
    host_args: &[String],
    engine: &dyn Fn(usize) -> Command,
) -> Result<Cluster, String> {
    if lab.nodes.len() != 2 * nodes {
        return Err(format!("a DPU cluster of {nodes} needs a lab of {} namespaces", 2 * nodes));
    }
    let mut c = Cluster { job: job.to_string(), hosts: Vec::new(), engines: Vec::new() };
    for node in 0..nodes {
        let mut cmd = engine(node);
        cmd.envs(engine_env(Net::Shm, job, nodes, node)).envs([
            ("RINGCAST_LISTEN_TCP", format!("{}:{CONTROL_PORT}", Lab::ip(node))),
            ("RINGCAST_JOB_SECRET", JOB_SECRET.to_string()),
            ("RINGCAST_DMA", "cma".to_string()),
            // Every attach logged with its backend and transport.
            ("RINGCAST_LOG_LEVEL", "2".to_string()),
        ]);
        c.engines.push(Engine::spawn(&format!("{job}-{node}"), lab.wrap(node, cmd))?);
    }
    for node in 0..nodes {
        c.hosts.push(spawn_host(lab, nodes, node, tool, host_args)?);
    }
    if let Err(e) = c.expect_all("READY", Duration::from_secs(120)) {
        // The engines' side of it, for the failure message.
        c.hosts.clear();
        let logs: Vec<String> = std::mem::take(&mut c.engines).into_iter().map(|e| e.stop().1).collect();
        return Err(format!("{e}\nengine logs:\n{}", logs.join("\n---\n")));
    }
    Ok(c)
}

/// A host for node `node` in its host namespace, attaching over TCP.
pub fn spawn_host(
    lab: &Lab,
    nodes: usize,
    node: usize,
    tool: &Path,
    host_args: &[String],
) -> Result<Child, String> {
    let mut cmd = Command::new(tool);
    cmd.arg("host")
        .args(host_args)
        .args(["--engine", &engine_address(node), "--node", &node.to_string()])
        .args(["--nodes", &nodes.to_string()])
        .envs(poll_env(nodes * 2))
        .env("RINGCAST_JOB_SECRET", JOB_SECRET);
    Child::spawn(&format!("host {node}"), lab.wrap(nodes + node, cmd))
}

/// Mappings of process `pid` that are host memory (the host library's memfds are all named
/// `ringcast-*`): none may exist in a DPU engine.
pub fn host_memory_mapped(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("memfd:ringcast"))
        .map(str::to_string)
        .collect()
}
