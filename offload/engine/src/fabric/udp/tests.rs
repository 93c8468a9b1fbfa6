//! Unit tests of the `udp` fabric's pure parts: address normalization, interface lookup, the
//! options a section and a setup give.
use super::sock::{ipv6_ifindex, normalize};
use super::*;
use crate::config::UdpConfig;
use crate::fabric::FabricSetup;
use std::net::{Ipv6Addr, SocketAddrV6};

#[test]
fn sources_compare_equal_to_member_entries() {
    let listed: SocketAddr = "[fd00::1]:9000".parse().expect("addr");
    let received = SocketAddr::V6(SocketAddrV6::new("fd00::1".parse().expect("ip"), 9000, 0x1234, 3));
    assert_eq!(normalize(received), listed, "flow label and a global address's scope ignored");
    let ll = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().expect("ip"), 9000, 0, 3));
    assert_eq!(normalize(ll), ll, "a link-local address keeps its scope");
    let v4: SocketAddr = "10.0.0.1:9".parse().expect("addr");
    assert_eq!(normalize(v4), v4);
}

#[test]
fn ipv6_addresses_resolve_to_their_interface() {
    // `::1` is on `lo`, index 1, wherever IPv6 is enabled.
    if let Ok(index) = ipv6_ifindex(&Ipv6Addr::LOCALHOST) {
        assert_eq!(index, 1);
    }
    assert!(ipv6_ifindex(&"2001:db8::dead".parse().expect("ip")).is_err(), "documentation prefix");
}

#[test]
fn options_follow_the_section_and_the_setup() {
    let setup = FabricSetup {
        job: "unit".into(),
        node: PeerId(1),
        nodes: 2,
        mtu: 9000,
        window: 4 << 20,
        max_groups: 7,
        log_level: 0,
    };
    let v4: IpAddr = "10.0.0.2".parse().expect("ip");
    let o = UdpOptions::from_section(&setup, &UdpConfig::default(), v4);
    assert_eq!((o.family, o.mtu, o.max_groups), (IpFamily::V4, 9000, 7));
    // Buffers sized to the window (twice a 4 MiB message), never below the floor.
    assert_eq!((o.rcvbuf, o.sndbuf, o.batch, o.offload), (8 << 20, 8 << 20, MAX_BATCH, UdpOffload::Auto));
    let small = FabricSetup { window: 1000, ..setup.clone() };
    assert_eq!(UdpOptions::from_section(&small, &UdpConfig::default(), v4).rcvbuf, DEFAULT_RCVBUF);
    let set = UdpConfig { buffer_bytes: 12345, batch: 3, offload: UdpOffload::Off, ..Default::default() };
    let o2 = UdpOptions::from_section(&setup, &set, v4);
    assert_eq!((o2.rcvbuf, o2.sndbuf, o2.batch, o2.offload), (12345, 12345, 3, UdpOffload::Off));
    assert_eq!((o.mcast_port, o.interface.clone()), (job_port("unit"), Interface::Addr(v4)));
    assert!((20_000..40_000).contains(&o.mcast_port));
    let named = UdpConfig { port: 4000, interface: "eth1".into(), ..Default::default() };
    let o = UdpOptions::from_section(&setup, &named, "fd00::2".parse().expect("ip"));
    assert_eq!(
        (o.family, o.mcast_port, o.interface.clone()),
        (IpFamily::V6, 4000, Interface::Name("eth1".into()))
    );
    let indexed = UdpConfig { interface: "3".into(), ..Default::default() };
    assert_eq!(UdpOptions::from_section(&setup, &indexed, v4).interface, Interface::Index(3));
    let members = vec!["[::1]:4001".parse().expect("addr")];
    for bad in [
        UdpOptions { mcast_port: 0, ..o.clone() },
        UdpOptions { batch: 0, ..o.clone() },
        UdpOptions { batch: MAX_BATCH + 1, ..o },
    ] {
        assert!(
            matches!(UdpFabric::new(PeerId(0), members.clone(), &bad), Err(UdpError::Invalid(_))),
            "{bad:?}"
        );
    }
    // A node the list has no address for.
    let one = UdpConfig { members: "127.0.0.1:4001".into(), ..Default::default() };
    assert!(matches!(open(&setup, &one), Err(UdpError::Invalid(m)) if m.contains("node 1")));
}
