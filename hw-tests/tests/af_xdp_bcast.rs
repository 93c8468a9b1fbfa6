//! Broadcasts end to end over DPDK on AF_XDP: three network namespaces on a Linux bridge
//! (multicast snooping off), in each a real `ringcast-engine` daemon with `RINGCAST_FABRIC=dpdk`
//! on `net_af_xdp` over its veth, and a host process in the same namespace (abstract Unix
//! sockets are per namespace) attached to it.
//!
//! The hosts run broadcasts of 2 B to 4 MiB — sizes around one fragment's payload, a page, and
//! many fragments — with the root rotating over the nodes; the root's buffer holds a pattern of
//! (broadcast, size) and every other buffer poison, and every byte is checked at every rank.
//! Asserted: every broadcast completes byte-exact everywhere; every host and engine exits
//! successfully (an engine after SIGTERM: port closed, EAL ended); no DPDK runtime
//! directory, namespace or process of the test remains.
use ringcast_hw_tests::cluster::{run_verify, verify_args, Cluster, Net};
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::{env, proc};
use std::path::Path;

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
    let cluster = Cluster::start(Some(&lab), NODES, Net::DpdkAfXdp, &job, tool, &verify_args(&SIZES, PASSES))
        .expect("engines and hosts up");
    run_verify(cluster, &SIZES, PASSES).expect("every broadcast verified, every process stopped cleanly");
    assert!(proc::dpdk_leftovers(&job).is_empty(), "{:?}", proc::dpdk_leftovers(&job));
    drop(lab);
    assert!(Lab::existing(&prefix).is_empty(), "namespaces left: {:?}", Lab::existing(&prefix));
}
