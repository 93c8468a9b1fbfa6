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
use ringcast_hw_tests::cluster::{run_verify, verify_args, Cluster, Net, VERBS_MTU};
use ringcast_hw_tests::env;
use std::path::Path;

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
    let cluster = Cluster::start(None, NODES, Net::Verbs, &job, tool, &verify_args(&sizes, PASSES))
        .expect("engines and hosts up");
    run_verify(cluster, &sizes, PASSES).expect("every broadcast verified, every process stopped cleanly");
}
