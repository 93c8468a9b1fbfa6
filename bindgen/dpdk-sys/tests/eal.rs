//! The EAL for real, in its own test binary (the EAL initialises once per process): no hugepages,
//! no PCI, no shared configuration files, one `net_null` virtual port (its driver is one of the
//! plugins the EAL loads from DPDK's driver directory). Drives every allow-listed call and every
//! `rc_` shim: pool creation, an mbuf's alloc/append/mtod/lengths/free, port configuration, queues,
//! start, MTU, promiscuous and all-multicast modes, a receive and a transmit burst, statistics,
//! stop, close, cleanup, `rte_errno` and `rte_strerror`, the runtime directory.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;

use dpdk_sys::*;

const PORT: u16 = 0;
const BURST: u16 = 8;
/// `net_null`'s default frame length.
const NULL_FRAME: u16 = 64;

#[test]
fn eal_mbufs_and_a_null_port() {
    let args = [
        "ringcast-dpdk-sys-test",
        "--no-huge",
        "-m",
        "64",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=error",
        "--vdev=net_null0",
        "--file-prefix=rc-sys-test",
    ]
    .map(|a| CString::new(a).expect("no NUL in the EAL arguments"));
    let mut argv: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    // SAFETY: argv holds argc valid C strings that outlive the call (EAL may permute the array).
    let parsed = unsafe { rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
    assert!(parsed >= 0, "rte_eal_init failed: {parsed}");
    // SAFETY: the EAL is initialised; the runtime directory string is owned by the EAL and read
    // before cleanup.
    let runtime_dir = unsafe { CStr::from_ptr(rte_eal_get_runtime_dir()) }.to_string_lossy().into_owned();
    assert!(!runtime_dir.is_empty(), "the EAL names its runtime directory");

    // SAFETY: (every call below) the EAL is initialised and this thread is its main lcore; every
    // pointer passed is live for the call.
    unsafe {
        assert_ne!(rc_rte_lcore_id(), LCORE_ID_ANY, "the EAL's main thread is an lcore");
        assert_ne!(rte_socket_id() as i32, SOCKET_ID_ANY, "an lcore sits on a known socket");
        assert_eq!(rte_eth_dev_count_avail(), 1);
        let mut by_name = u16::MAX;
        let vdev = CString::new("net_null0").expect("no NUL");
        assert_eq!(rte_eth_dev_get_port_by_name(vdev.as_ptr(), &mut by_name), 0);
        assert_eq!(by_name, PORT);
        let nope = CString::new("net_null9").expect("no NUL");
        assert!(rte_eth_dev_get_port_by_name(nope.as_ptr(), &mut by_name) < 0, "no such port");
        let socket = rte_eth_dev_socket_id(PORT);

        let mut info = rte_eth_dev_info::default();
        assert_eq!(rte_eth_dev_info_get(PORT, &mut info), 0);
        assert_eq!(CStr::from_ptr(info.driver_name).to_str(), Ok("net_null"));
        assert!(info.max_rx_queues >= 1 && info.max_tx_queues >= 1);

        let mut mac = rte_ether_addr::default();
        assert_eq!(rte_eth_macaddr_get(PORT, &mut mac), 0);

        let name = CString::new("rc_sys_test").expect("no NUL");
        let pool =
            rte_pktmbuf_pool_create(name.as_ptr(), 255, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE as u16, socket);
        assert!(!pool.is_null(), "rte_pktmbuf_pool_create failed");
        assert_eq!((rte_mempool_avail_count(pool), rte_mempool_in_use_count(pool)), (255, 0));
        // A second pool of the same name fails and says why through rte_errno.
        assert!(rte_pktmbuf_pool_create(name.as_ptr(), 255, 0, 0, 2048, socket).is_null());
        assert_eq!(rc_rte_errno(), 17 /* EEXIST */);
        let why = CStr::from_ptr(rte_strerror(rc_rte_errno())).to_string_lossy().into_owned();
        assert!(why.contains("exists"), "{why}");

        // One mbuf by hand: the data starts after the headroom, append extends it, a too-long
        // append fails and changes nothing.
        let m = rc_rte_pktmbuf_alloc(pool);
        assert!(!m.is_null());
        assert_eq!((rc_rte_pktmbuf_data_len(m), rc_rte_pktmbuf_pkt_len(m)), (0, 0));
        let data = rc_rte_pktmbuf_append(m, 100);
        assert!(!data.is_null());
        assert_eq!(data as *mut u8, rc_rte_pktmbuf_mtod(m) as *mut u8);
        assert_eq!((rte_mempool_avail_count(pool), rte_mempool_in_use_count(pool)), (254, 1));
        assert_eq!(data as usize - (*m).buf_addr as usize, RTE_PKTMBUF_HEADROOM as usize);
        ptr::write_bytes(data, 0x5a, 100);
        assert_eq!((rc_rte_pktmbuf_data_len(m), rc_rte_pktmbuf_pkt_len(m)), (100, 100));
        assert!(rc_rte_pktmbuf_append(m, u16::MAX).is_null());
        assert_eq!((rc_rte_pktmbuf_data_len(m), rc_rte_pktmbuf_pkt_len(m)), (100, 100));
        rc_rte_pktmbuf_free(m);

        let conf = rte_eth_conf::default();
        assert_eq!(rte_eth_dev_configure(PORT, 1, 1, &conf), 0);
        assert_eq!(rte_eth_rx_queue_setup(PORT, 0, 64, socket as u32, ptr::null(), pool), 0);
        assert_eq!(rte_eth_tx_queue_setup(PORT, 0, 64, socket as u32, ptr::null()), 0);
        let mut mtu = 0u16;
        assert_eq!(rte_eth_dev_get_mtu(PORT, &mut mtu), 0);
        assert_eq!(mtu, 1500, "ethdev's default MTU (RTE_ETHER_MTU) when the configuration names none");
        assert_eq!(rte_eth_dev_start(PORT), 0);
        assert_eq!(rte_eth_promiscuous_enable(PORT), 0);
        assert_eq!(rte_eth_promiscuous_get(PORT), 1);
        // net_null implements enabling the modes only: disabling reaches ethdev, which reports
        // the driver lacks it, and the mode stays on.
        assert_eq!(rte_eth_promiscuous_disable(PORT), -95 /* -ENOTSUP */);
        assert_eq!(rte_eth_promiscuous_get(PORT), 1);
        assert_eq!(rte_eth_allmulticast_enable(PORT), 0);
        assert_eq!(rte_eth_allmulticast_get(PORT), 1);
        assert_eq!(rte_eth_allmulticast_disable(PORT), -95 /* -ENOTSUP */);
        assert_eq!(rte_eth_allmulticast_get(PORT), 1);
        // net_null keeps no multicast filter: the call reaches ethdev, which reports the driver
        // lacks it (the binding and its argument types are what is checked here).
        let mut group = rte_ether_addr { addr_bytes: [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01] };
        assert_eq!(rte_eth_dev_set_mc_addr_list(PORT, &mut group, 1), -95 /* -ENOTSUP */);

        let mut bufs = [ptr::null_mut::<rte_mbuf>(); BURST as usize];
        let got = rc_rte_eth_rx_burst(PORT, 0, bufs.as_mut_ptr(), BURST);
        assert_eq!(got, BURST, "net_null fills every slot it is offered");
        for &b in &bufs {
            assert!(!b.is_null());
            assert_eq!(rc_rte_pktmbuf_data_len(b), NULL_FRAME);
        }
        assert_eq!(rc_rte_eth_tx_burst(PORT, 0, bufs.as_mut_ptr(), BURST), BURST);

        let mut stats = rte_eth_stats::default();
        assert_eq!(rte_eth_stats_get(PORT, &mut stats), 0);
        assert_eq!((stats.ipackets, stats.opackets), (BURST as u64, BURST as u64));

        assert_eq!(rte_eth_dev_stop(PORT), 0);
        assert_eq!(rte_eth_dev_close(PORT), 0);
        assert_eq!(rte_eth_dev_count_avail(), 0);
        rte_mempool_free(pool);
        assert_eq!(rte_eal_cleanup(), 0);
    }
    // The EAL creates its runtime directory even with --no-shconf and leaves it (empty) behind.
    assert_eq!(std::fs::remove_dir(&runtime_dir).map_err(|e| e.kind()), Ok(()), "{runtime_dir}");
}
