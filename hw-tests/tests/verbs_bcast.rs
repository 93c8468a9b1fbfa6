//! Broadcasts end to end over the verbs fabric on a real RDMA device: three real
//! `ringcast-engine` daemons on this machine with `RINGCAST_FABRIC=verbs`, each with a UD queue
//! pair of its own on the same port (they find each other by HELLO discovery and join the
//! world group through rdmacm, or by attach with `RINGCAST_VERBS_JOIN=attach`), and a host
//! process attached to each.
//!
//! The hosts run broadcasts of 2 B to 4 MiB — around one fragment's payload, a page, and many
//! fragments — with the root rotating over the nodes; the root's buffer holds a pattern of
//! (broadcast, size) and every other buffer poison, and every byte is checked at every rank.
//! Asserted: every broadcast completes byte-exact everywhere; every host and engine exits
//! successfully (an engine after SIGTERM: groups left, QP and memory released).
//!
//! Runs only where `ibv_get_device_list` finds a device. Elsewhere it prints
//! `SKIP: no RDMA device (ibv_get_device_list returned 0)` and returns — which cargo reports as
//! a pass, so read the output: a skip is not a pass. The device, port, GID index and the
//! interface address for rdmacm come from the environment (`RINGCAST_VERBS_DEVICE`,
//! `RINGCAST_VERBS_PORT`, `RINGCAST_VERBS_GID_INDEX`, `RINGCAST_VERBS_ADDR`; see
//! `docs/tunables.md`), which the engines inherit; e.g. soft-RoCE:
//! `rdma link add rxe0 type rxe netdev eth0`, then `RINGCAST_VERBS_DEVICE=rxe0
//! RINGCAST_VERBS_GID_INDEX=1 RINGCAST_VERBS_ADDR=<eth0's IPv4>`.
use ringcast_hw_tests::cluster::{Cluster, Net, VERBS_MTU};
use ringcast_hw_tests::env;
use ringcast_hw_tests::roles::field;
use std::path::Path;
use std::time::Duration;

const NODES: usize = 3;
const PASSES: u32 = 2;
/// The protocol's header (32) and CRC (4), and the fragment header (4), per datagram.
const FRAGMENT_OVERHEAD: usize = 40;

#[test]
fn engines_broadcast_2_bytes_to_4_mib_byte_exact_over_verbs() {
    if let Some(why) = env::verbs_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let mtu = std::env::var("RINGCAST_MTU").ok().and_then(|m| m.parse().ok()).unwrap_or(VERBS_MTU) as usize;
    let payload = mtu - FRAGMENT_OVERHEAD;
    let sizes = [2, 100, payload - 1, payload, payload + 1, 4096, 65_536, 1 << 20, 3 << 20, 4 << 20];
    let job = format!("hwv{}", std::process::id());
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let list = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    let args = ["verify".to_string(), "--sizes".into(), list, "--counts".into(), PASSES.to_string()];
    let mut cluster =
        Cluster::start(None, NODES, Net::Verbs, &job, tool, &args).expect("engines and hosts up");
    cluster.send_all("GO").expect("go");
    let results = cluster.expect_all("RESULT", Duration::from_secs(600)).expect("every broadcast verified");
    let broadcasts = sizes.len() as u64 * u64::from(PASSES);
    let bytes = sizes.iter().sum::<usize>() as u64 * u64::from(PASSES);
    for (node, r) in results.iter().enumerate() {
        println!("node {node}: {r}");
        assert_eq!(field::<u64>(r, "broadcasts"), Some(broadcasts), "node {node}: {r}");
        assert_eq!(field::<u64>(r, "bytes"), Some(bytes), "node {node}: {r}");
    }
    let logs = cluster.shut_down(Duration::from_secs(60)).expect("hosts and engines exit cleanly");
    for (node, log) in logs.iter().enumerate() {
        assert!(log.contains("stopped;"), "engine {node} did not report a clean stop:\n{log}");
    }
}
