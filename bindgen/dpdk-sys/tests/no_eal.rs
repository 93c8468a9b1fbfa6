//! Tests of `ringcast-dpdk-sys` that need no EAL (bindgen's layout assertions are evaluated at
//! compile time, by this build too): what DPDK answers before `rte_eal_init` — no ports, and a
//! thread that is no lcore — through the real libraries and the `rc_rte_lcore_id` shim; sizes fixed
//! by the wire or by DPDK's ABI; and that the layout assertions cover the structs the fabric code
//! will use. `tests/eal.rs` runs the EAL itself.

use std::mem::{align_of, size_of};

use dpdk_sys::*;

#[test]
fn before_eal_init_there_are_no_ports() {
    // Reads only ethdev's static port table (all ports unused until a driver probes one).
    // SAFETY: no arguments; valid before EAL initialisation.
    assert_eq!(unsafe { rte_eth_dev_count_avail() }, 0);
}

#[test]
fn a_plain_thread_is_no_lcore() {
    // Per-thread values DPDK initialises statically and sets only on EAL threads.
    // SAFETY: both read thread-locals; no EAL state is needed.
    let (lcore, socket) = unsafe { (rc_rte_lcore_id(), rte_socket_id()) };
    assert_eq!(lcore, LCORE_ID_ANY);
    assert_eq!(socket as i32, SOCKET_ID_ANY);
}

#[test]
fn abi_fixed_layouts_and_constants() {
    // The Ethernet header is 14 bytes on the wire; DPDK gives addresses 2-byte alignment.
    assert_eq!(size_of::<rte_ether_addr>(), RTE_ETHER_ADDR_LEN as usize);
    assert_eq!(align_of::<rte_ether_addr>(), 2);
    assert_eq!(size_of::<rte_ether_hdr>(), RTE_ETHER_HDR_LEN as usize);
    assert_eq!(RTE_ETHER_HDR_LEN, 14);
    // An mbuf is two 64-byte cache lines (DPDK asserts the same at its own build).
    assert_eq!(size_of::<rte_mbuf>(), 128);
    assert_eq!(RTE_MBUF_DEFAULT_BUF_SIZE, 2048 + RTE_PKTMBUF_HEADROOM);
}

#[test]
fn layout_assertions_cover_the_fabric_structs() {
    let bindings = include_str!(concat!(env!("OUT_DIR"), "/bindings.rs"));
    for ty in [
        "rte_ether_hdr",
        "rte_ether_addr",
        "rte_mbuf",
        "rte_mempool",
        "rte_eth_conf",
        "rte_eth_rxconf",
        "rte_eth_txconf",
        "rte_eth_dev_info",
        "rte_eth_stats",
    ] {
        for what in ["Size", "Alignment"] {
            let needle = format!("[\"{what} of {ty}\"]");
            assert!(bindings.contains(&needle), "no layout assertion {needle}");
        }
    }
}
