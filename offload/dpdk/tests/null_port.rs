//! The safe API for real, in its own test binary (the EAL initialises once per process): no
//! hugepages, no PCI, no shared configuration files, one `net_null` virtual port. Drives every
//! `unsafe` block of the crate that needs no NIC: EAL init (affinity kept, runtime directory),
//! port lookup by name and as the only port, pool creation, the queues, start, MAC and MTU,
//! mbuf alloc/append (a frame too long for an mbuf too), transmit bursts and what the driver
//! refuses, receive bursts (`net_null` makes frames up) lent to a closure and freed, the
//! multicast filter and the receive modes, statistics, the port claimed once, the pool's mbufs
//! all back after the port closed, cleanup, and the EAL refused afterwards.

use ringcast_dpdk::{DpdkError, Eal, Port, PortSpec, Queued, RX_BURST, TX_BURST};

fn args(prefix: &str) -> Vec<String> {
    [
        "ringcast-dpdk-test",
        "--no-huge",
        "-m",
        "64",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=error",
        "--vdev=net_null0",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--file-prefix={prefix}")])
    .collect()
}

#[test]
fn eal_port_mbufs_and_cleanup_on_a_null_port() {
    let affinity = rustix::thread::sched_getaffinity(None).expect("affinity");
    let a = args(&format!("rc-dpdk-test-{}", std::process::id()));
    let eal = Eal::acquire(a.clone()).expect("the EAL initialises");
    assert_eq!(eal.args(), a.as_slice());
    let after = rustix::thread::sched_getaffinity(None).expect("affinity");
    assert!(
        (0..rustix::thread::CpuSet::MAX_CPU).all(|c| affinity.is_set(c) == after.is_set(c)),
        "the calling thread's affinity is kept"
    );
    let runtime_dir = eal.runtime_dir().map(|d| d.to_path_buf());
    // The same arguments share it; others are refused, naming both.
    let again = Eal::acquire(a.clone()).expect("same arguments: shared");
    drop(again);
    match Eal::acquire(args("other")) {
        Err(DpdkError::Eal(m)) => assert!(m.contains("already runs"), "{m}"),
        other => panic!("{other:?}"),
    }

    let spec = PortSpec {
        name: "net_null0".into(),
        mbufs: 1023,
        data_room: 2048 + 128,
        descriptors: 128,
        mtu: 1500,
    };
    assert!(matches!(
        Port::open(eal.clone(), &PortSpec { name: "net_null9".into(), ..spec.clone() }),
        Err(DpdkError::Invalid(m)) if m.contains("no port named")
    ));
    let mut port = Port::open(eal.clone(), &spec).expect("the null port opens");
    // The only port, by no name, is the same one, and is claimed already.
    match Port::open(eal.clone(), &PortSpec { name: String::new(), ..spec.clone() }) {
        Err(DpdkError::Invalid(m)) => assert!(m.contains("already used"), "{m}"),
        other => panic!("{:?}", other.map(|p| p.id())),
    }
    drop(eal); // the port holds its own handle
    assert_eq!(port.driver(), "net_null");
    assert!(port.mtu() >= 1500, "{}", port.mtu());
    assert_eq!(port.queued(), 0);

    // Transmit: a frame too long for an mbuf is dropped, others are queued and sent in bursts.
    assert_eq!(port.queue_tx(70_000, |_| unreachable!()), Queued::TooLong);
    assert_eq!(port.queue_tx(4096, |_| unreachable!()), Queued::TooLong);
    for i in 0..TX_BURST + 3 {
        let q = port.queue_tx(64, |buf| {
            assert_eq!(buf.len(), 64);
            buf.fill(i as u8);
        });
        assert_eq!(q, Queued::Yes);
    }
    assert_eq!(port.queued(), 3, "a full batch went out at once");
    let (sent, refused) = port.flush();
    assert_eq!(sent + refused, 3);
    let (accepted, refused_total) = port.tx_counts();
    assert_eq!(accepted + refused_total, TX_BURST as u64 + 3);
    assert_eq!(port.flush(), (0, 0));

    // Receive: net_null makes frames up; each is lent to the closure, then freed.
    let mut seen = 0;
    let got = port.receive(RX_BURST + 10, &mut |data| {
        assert!(data.is_some_and(|d| !d.is_empty()));
        seen += 1;
    });
    assert_eq!(got, seen);
    assert!(got <= RX_BURST);
    assert_eq!(port.receive(0, &mut |_| unreachable!()), 0);

    // Multicast filter (net_null has none: an error naming the call) and receive modes.
    let group = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01];
    if let Err(e) = port.set_mc_list(&[group]) {
        assert!(matches!(&e, DpdkError::Call { op: "rte_eth_dev_set_mc_addr_list", .. }), "{e}");
    }
    let (promisc_before, allmulti_before) = port.modes();
    if port.set_allmulticast(true).is_ok() {
        assert!(port.modes().1);
        port.set_allmulticast(false).expect("off again");
        assert_eq!(port.modes().1, allmulti_before);
    }
    if port.set_promiscuous(true).is_ok() {
        assert!(port.modes().0);
        port.set_promiscuous(false).expect("off again");
        assert_eq!(port.modes().0, promisc_before);
    }
    let stats = port.stats().expect("net_null keeps statistics");
    assert!(stats.opackets + port.tx_counts().1 >= accepted, "{stats:?}");

    // Nothing leaks: with nothing queued, the pool's free mbufs and what the driver holds add up.
    let (free, size) = port.pool_usage();
    assert_eq!(size, 1023);
    assert!(free <= size);

    // Dropping the port closes it, frees the pool and, as the EAL's last user, ends it.
    drop(port);
    if let Some(dir) = runtime_dir {
        assert!(!dir.exists(), "the runtime directory {dir:?} is removed");
    }
    match Eal::acquire(a) {
        Err(DpdkError::Eal(m)) => assert!(m.contains("ended with its last user"), "{m}"),
        other => panic!("{other:?}"),
    }
}
