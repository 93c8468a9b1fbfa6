//! The `dpdk` fabric's life in one process, on real DPDK (`net_memif` ports with no peer: no
//! namespaces, no root needed), in a test binary of its own because the EAL initialises once
//! per process:
//! the EAL is initialised once and shared by fabrics asking with the same arguments, a second
//! fabric on a port in use is refused, other arguments are refused naming both lists, a port
//! whose MAC is not the listed one is refused; the calling thread's CPU affinity survives
//! `rte_eal_init`; sends to unknown members, to itself or above the MTU are refused and counted,
//! a frame the driver cannot take (memif link down) is dropped and counted, and no mbuf leaks;
//! multicast reception falls back to promiscuous mode and leaving undoes it; dropping the last
//! fabric ends the EAL and removes its runtime directory, after which DPDK refuses to start
//! again with an error that says so.
use ringcast_hw_tests::cluster::memif_vdev;
use ringcast_hw_tests::env;
use ringcast_hw_tests::netns::Lab;
use ringcast_offload::config::{Config, FabricKind};
use ringcast_offload::fabric::dpdk::frame::Mac;
use ringcast_offload::fabric::dpdk::{DpdkError, DpdkFabric, DpdkOptions, McastMode};
use ringcast_offload::fabric::Fabric;
use ringcast_proto::comm::PeerId;

fn mac(i: usize) -> Mac {
    Lab::mac(i).parse().expect("lab MACs parse")
}

#[test]
fn one_eal_per_process_shared_refused_and_ended() {
    if let Some(why) = env::memif_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let job = format!("hwl{}", std::process::id());
    // Two memif ports in one EAL: net_memif0 (node 0's MAC) and, through the extra arguments,
    // net_memif1 whose MAC (node 2's) is not what the member list says.
    let second = format!(
        "net_memif1,role=server,id=1,socket=/run/ringcast-{job}b.memif,socket-abstract=yes,mac={}",
        mac(2)
    );
    let config = Config::default().with(|cfg| {
        cfg.topology.fabric = FabricKind::Dpdk;
        cfg.topology.job = job.clone();
        cfg.topology.nodes = 2;
        cfg.topology.node = 0;
        cfg.dpdk.vdev = memif_vdev(&job, 0);
        cfg.dpdk.eal_args = format!("--vdev={second}");
        cfg.dpdk.members = Lab::macs(2);
    });
    config.validate().expect("a valid configuration");
    let opts = DpdkOptions::new(&config.fabric_setup(), &config.dpdk).expect("options");
    let members = vec![mac(0), mac(1)];
    let affinity = rustix::thread::sched_getaffinity(None).expect("affinity");

    let mut f = DpdkFabric::new(PeerId(0), members.clone(), &opts).expect("the fabric on memif");
    assert_eq!(rustix::thread::sched_getaffinity(None).expect("affinity"), affinity, "EAL init kept it");
    assert_eq!((f.driver(), f.mac(), f.mtu()), ("net_memif", mac(0), 1472));
    let (args, dir) = f.eal();
    let dir = dir.expect("a runtime directory").to_path_buf();
    assert!(dir.is_dir(), "{dir:?}");
    let prefix = format!("--file-prefix=rc-{job}-0-{}", std::process::id());
    for a in [prefix.as_str(), "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry"] {
        assert!(args.iter().any(|x| x == a), "{a} not in {args:?}");
    }

    // Same arguments: the EAL is shared, but its port is taken.
    match DpdkFabric::new(PeerId(0), members.clone(), &opts) {
        Err(DpdkError::Invalid(m)) => assert!(m.contains("already used"), "{m}"),
        other => panic!("a second fabric on the same port: {other:?}"),
    }
    // Same EAL, the other port, whose MAC is not the one listed for node 1: refused.
    let other_port = DpdkOptions { port: "net_memif1".into(), ..opts.clone() };
    match DpdkFabric::new(PeerId(1), members.clone(), &other_port) {
        Err(DpdkError::Invalid(m)) => assert!(m.contains(&mac(2).to_string()) && m.contains("lists"), "{m}"),
        other => panic!("a port with an unlisted MAC: {other:?}"),
    }
    // Other arguments: DPDK cannot have a second EAL.
    let mut other_args = opts.clone();
    other_args.eal_args.push("--log-level=8".into());
    match DpdkFabric::new(PeerId(0), members.clone(), &other_args) {
        Err(DpdkError::Eal(m)) => {
            assert!(m.contains("already runs with") && m.contains("--log-level=8"), "{m}")
        }
        other => panic!("a second EAL: {other:?}"),
    }

    // Refused sends are counted, never sent; a frame the driver cannot take (no peer: link
    // down) is freed and counted; nothing leaks.
    f.send(PeerId(7), b"to nobody");
    f.send(PeerId(0), b"to myself");
    f.send(PeerId(1), &vec![0; 1473]);
    f.multicast(&[1; 14], &vec![0; 1473]);
    assert_eq!(f.counters().refused, 4);
    assert_eq!(f.stats().tx_refused, 4);
    f.send(PeerId(1), b"hello");
    f.multicast(&[1; 14], b"everyone");
    f.flush();
    let (c, s) = (f.counters(), f.stats());
    assert_eq!((c.sent, c.multicast), (1, 1));
    assert_eq!(s.tx_full, 2, "memif without a peer takes no frame: {s:?}");
    assert_eq!(f.poll(64, &mut |_, _| panic!("nothing can arrive")), 0);
    let (free, size) = f.pool_usage();
    assert_eq!(free, size, "every mbuf is back in the pool");

    // Multicast: memif has no multicast filter; promiscuous mode it is, undone on leave — unless
    // the port was promiscuous before (memif ports start so): then it is not the fabric's to undo.
    let before = f.port_modes().0;
    f.join(&[9; 14]).expect("join");
    f.join(&[9; 14]).expect("joining twice is idempotent");
    assert_eq!(f.mcast_mode(), McastMode::Promiscuous);
    assert!(f.port_modes().0, "promiscuous on");
    f.leave(&[9; 14]);
    assert_eq!(f.mcast_mode(), McastMode::None);
    assert_eq!(f.stats().filter_errors, 0);
    assert_eq!(f.port_modes().0, before, "promiscuous as it was before the join");

    // The last fabric goes: port closed, pool freed, EAL ended, directory removed.
    drop(f);
    assert!(!dir.exists(), "{dir:?} left behind");
    match DpdkFabric::new(PeerId(0), members, &opts) {
        Err(DpdkError::Eal(m)) => assert!(m.contains("ended with its last user"), "{m}"),
        other => panic!("DPDK after its EAL ended: {other:?}"),
    }
}
