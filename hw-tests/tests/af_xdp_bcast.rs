//! Broadcasts end to end over DPDK on AF_XDP: three network namespaces on a Linux bridge
//! (multicast snooping off), in each a real `ringcast-engine` daemon with `RINGCAST_FABRIC=dpdk`
//! on `net_af_xdp` over its veth, and a host process in the same namespace (abstract Unix
//! sockets are per namespace) attached to it.
//!
//! The hosts run broadcasts of 2 B to 4 MiB — sizes around one fragment's payload, a page, and
//! many fragments — with the root rotating over the nodes; the root's buffer holds a pattern of
//! (broadcast, size) and every other buffer poison, and every byte is checked at every rank.
//! Asserted: every broadcast completes byte-exact everywhere; every host and engine exits
//! successfully (an engine after SIGTERM: port closed, EAL cleaned up); no DPDK runtime
//! directory, namespace or process of the test remains.
use ringcast_hw_tests::cluster::{Cluster, Net};
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::roles::field;
use ringcast_hw_tests::{env, proc};
use std::path::Path;
use std::time::Duration;

const NODES: usize = 3;
/// 2 B; one fragment's payload and either side of it (mtu 1472 − 32 header − 4 CRC − 4);
/// a page; 64 KiB; 1 MiB; 4 MiB (`max_message_bytes`).
const SIZES: [usize; 10] = [2, 100, 1431, 1432, 1433, 4096, 65_536, 1 << 20, 3 << 20, 4 << 20];
const PASSES: u32 = 2;

#[test]
fn engines_broadcast_2_bytes_to_4_mib_byte_exact_over_af_xdp() {
    if let Some(why) = env::af_xdp_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let job = format!("hwx{}", std::process::id());
    let lab = Lab::create("bc", NODES).expect("namespaces");
    let prefix = lab.prefix.clone();
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let sizes = SIZES.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    let args = ["verify".to_string(), "--sizes".into(), sizes, "--counts".into(), PASSES.to_string()];
    let mut cluster =
        Cluster::start(Some(&lab), NODES, Net::DpdkAfXdp, &job, tool, &args).expect("engines and hosts up");
    cluster.send_all("GO").expect("go");
    let results = cluster.expect_all("RESULT", Duration::from_secs(600)).expect("every broadcast verified");
    let broadcasts = SIZES.len() as u64 * u64::from(PASSES);
    let bytes = SIZES.iter().sum::<usize>() as u64 * u64::from(PASSES);
    for (node, r) in results.iter().enumerate() {
        println!("node {node}: {r}");
        assert_eq!(field::<u64>(r, "broadcasts"), Some(broadcasts), "node {node}: {r}");
        assert_eq!(field::<u64>(r, "bytes"), Some(bytes), "node {node}: {r}");
    }
    let logs = cluster.shut_down(Duration::from_secs(60)).expect("hosts and engines exit cleanly");
    for (node, log) in logs.iter().enumerate() {
        assert!(log.contains("stopped;"), "engine {node} did not report a clean stop:\n{log}");
    }
    assert!(proc::dpdk_leftovers(&job).is_empty(), "{:?}", proc::dpdk_leftovers(&job));
    drop(lab);
    assert!(Lab::existing(&prefix).is_empty(), "namespaces left: {:?}", Lab::existing(&prefix));
}
