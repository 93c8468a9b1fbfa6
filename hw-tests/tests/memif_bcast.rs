//! Broadcasts end to end over DPDK without namespaces: two real `ringcast-engine` daemons whose
//! `dpdk` fabrics are the two ends of a `net_memif` link (shared-memory packet rings between
//! processes, set up over an abstract Unix socket named after the job: no file, no root, no
//! network), a host process attached to each. Node 0's engine (the memif server) is up before
//! node 1's starts: DPDK's memif client connects once, at port start, and a server whose port is
//! not started yet turns it away for good ("ID not found"), which made this test fail one run in
//! three before the order was enforced. Broadcasts of 2 B to 4 MiB from both roots, every
//! byte checked at both ranks; both engines and hosts exit cleanly and leave nothing behind.
//!
//! Why memif and not `net_ring`: a `net_ring` port is a pair of `rte_ring`s inside one process's
//! DPDK memory, so two ring ports can only be linked inside one EAL, i.e. one process — and an
//! engine is a process with an EAL of its own (DPDK initialises once per process; see
//! `ringcast_dpdk::eal`). Sharing rings across processes would need DPDK's primary/secondary
//! multi-process mode (shared hugepage memory and configuration files), which the fabric avoids
//! on purpose (`--no-shconf`/`--in-memory`, one file prefix per engine). memif is DPDK's
//! supported way to link two independent DPDK processes, and it is a real driver with its own
//! rings, so it tests the fabric's data path; it is point-to-point, hence two nodes (a third
//! would need a switch — the AF_XDP tests have one).
use ringcast_hw_tests::cluster::{run_verify, verify_args, Cluster, Net};
use ringcast_hw_tests::{env, proc};
use std::path::Path;

const SIZES: [usize; 8] = [2, 1431, 1432, 1433, 65_536, 1 << 20, 3 << 20, 4 << 20];
const PASSES: u32 = 2;

#[test]
fn two_engines_on_a_memif_link_broadcast_byte_exact() {
    if let Some(why) = env::memif_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let job = format!("hwm{}", std::process::id());
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let cluster = Cluster::start(None, 2, Net::DpdkMemif, &job, tool, &verify_args(&SIZES, PASSES))
        .expect("engines and hosts up");
    run_verify(cluster, &SIZES, PASSES).expect("every broadcast verified, every process stopped cleanly");
    assert!(proc::dpdk_leftovers(&job).is_empty(), "{:?}", proc::dpdk_leftovers(&job));
    assert!(!Path::new(&format!("/run/ringcast-{job}.memif")).exists(), "the memif socket is abstract");
}
