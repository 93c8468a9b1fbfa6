//! The configuration's parsing, checks and documentation, over every section.
use super::*;

#[test]
fn defaults_are_valid_and_documented() {
    let c = Config::default();
    c.validate().unwrap();
    let rows = c.describe();
    assert!(rows.len() >= 14);
    for r in &rows {
        assert!(r.env.starts_with("RINGCAST_"), "{}", r.env);
        assert_eq!(r.default, r.current);
        assert!(!r.meaning.is_empty());
    }
}

#[test]
fn docs_list_every_tunable() {
    let doc = include_str!("../../../../docs/tunables.md");
    for r in Config::default().describe() {
        let row = format!("| `{}` | `{}` | `{}` |", r.name, r.env, r.default);
        assert!(doc.contains(&row), "docs/tunables.md lacks or misstates {}", r.name);
    }
}

#[test]
fn environment_overrides_and_rejects() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    };
    let c =
        Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "64"), ("RINGCAST_POLL_MODE", "spin")])).unwrap();
    assert_eq!(c.limits.ring_entries, 64);
    assert_eq!(c.runner.poll_mode, PollMode::Spin);
    let row = c.describe().into_iter().find(|r| r.name == "limits.ring_entries").unwrap();
    assert_eq!((row.default.as_str(), row.current.as_str()), ("256", "64"));
    assert!(matches!(
        Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "lots")])),
        Err(ConfigError::Parse { env: "RINGCAST_RING_ENTRIES", .. })
    ));
    assert!(matches!(
        Config::from_lookup(env(&[("RINGCAST_RING_ENTRIES", "100")])),
        Err(ConfigError::Invalid(_))
    ));
    assert!(matches!(Config::from_lookup(env(&[("RINGCAST_PIN_CPU", "x")])), Err(ConfigError::Parse { .. })));
    assert_eq!(
        Config::from_lookup(env(&[("RINGCAST_PIN_CPU", "1")])).unwrap().runner.pin_cpu,
        PinCpu::Cpu(1)
    );
}

#[test]
fn verbs_tunables_parse_and_are_checked() {
    let get = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
    assert_eq!(
        Config::from_lookup(get("RINGCAST_FABRIC", "verbs")).unwrap().topology.fabric,
        FabricKind::Verbs
    );
    assert_eq!(FabricKind::Verbs.to_string().parse::<FabricKind>(), Ok(FabricKind::Verbs));
    assert_eq!(
        Config::from_lookup(get("RINGCAST_VERBS_JOIN", "attach")).unwrap().verbs.join,
        crate::fabric::verbs::group::JoinMode::Attach
    );
    assert_eq!(Config::from_lookup(get("RINGCAST_VERBS_ADDR", "10.0.0.1")).unwrap().verbs.addr, "10.0.0.1");
    for (k, v) in [
        ("RINGCAST_VERBS_PORT", "0"),
        ("RINGCAST_VERBS_RECV_SLOTS", "8"),
        ("RINGCAST_VERBS_RECV_SLOTS", "70000"),
        ("RINGCAST_VERBS_SEND_DEPTH", "15"),
        ("RINGCAST_VERBS_HELLO_MS", "0"),
        ("RINGCAST_VERBS_JOIN_TIMEOUT_MS", "0"),
        ("RINGCAST_VERBS_ADDR", "not-an-ip"),
        ("RINGCAST_VERBS_ADDR", "239.1.2.3"),
        ("RINGCAST_VERBS_ADDR", "::"),
    ] {
        assert!(matches!(Config::from_lookup(get(k, v)), Err(ConfigError::Invalid(_))), "{k}={v}");
    }
    assert!(matches!(
        Config::from_lookup(get("RINGCAST_VERBS_JOIN", "sa")),
        Err(ConfigError::Parse { env: "RINGCAST_VERBS_JOIN", .. })
    ));
    assert!(matches!(
        Config::from_lookup(get("RINGCAST_VERBS_PORT", "256")),
        Err(ConfigError::Parse { env: "RINGCAST_VERBS_PORT", .. })
    ));
}

#[test]
fn algorithm_choice_and_model_parameters() {
    use ringcast_proto::schedule::bcast::Algorithm;
    for a in Algorithm::ALL {
        let c: AlgorithmChoice = a.name().parse().unwrap();
        assert_eq!(
            (c, c.to_string(), c.forced()),
            (AlgorithmChoice::Fixed(a), a.name().to_string(), Some(a))
        );
    }
    assert_eq!("auto".parse::<AlgorithmChoice>(), Ok(AlgorithmChoice::Auto));
    assert_eq!(AlgorithmChoice::Auto.to_string(), "auto");
    assert!("fastest".parse::<AlgorithmChoice>().unwrap_err().contains("dual-tree"));
    let get = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
    assert_eq!(
        Config::from_lookup(get("RINGCAST_ALGORITHM", "binomial")).unwrap().protocol.algorithm,
        AlgorithmChoice::Fixed(Algorithm::Binomial)
    );
    assert!(matches!(
        Config::from_lookup(get("RINGCAST_ALGORITHM", "Binomial")),
        Err(ConfigError::Parse { env: "RINGCAST_ALGORITHM", .. })
    ));
    assert_eq!(Config::from_lookup(get("RINGCAST_MODEL_LANES", "8")).unwrap().model.lanes, 8);
    for (k, v) in [
        ("RINGCAST_MODEL_LANES", "0"),
        ("RINGCAST_MODEL_LANES", "9"),
        ("RINGCAST_MODEL_LATENCY_NS", "-1"),
        ("RINGCAST_MODEL_OVERHEAD_NS", "NaN"),
        ("RINGCAST_MODEL_NS_PER_BYTE", "inf"),
        ("RINGCAST_MODEL_SWITCH_NS", "-0.5"),
    ] {
        assert!(matches!(Config::from_lookup(get(k, v)), Err(ConfigError::Invalid(_))), "{k}={v}");
    }
    let c = Config::from_lookup(get("RINGCAST_MODEL_NS_PER_BYTE", "0.8")).unwrap();
    assert_eq!(c.model.ns_per_byte, 0.8);
}

#[test]
fn a_fabric_checks_only_its_own_member_list() {
    // A launcher may set every fabric's list and pick one: the udp list is parsed only when
    // the fabric is udp.
    let pairs = [
        ("RINGCAST_FABRIC", "dpdk"),
        ("RINGCAST_NODES", "2"),
        ("RINGCAST_DPDK_MEMBERS", "02:72:63:68:00:01,02:72:63:68:00:02"),
        ("RINGCAST_UDP_MEMBERS", "02:72:63:68:00:01,02:72:63:68:00:02"),
    ];
    let get = |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
    assert_eq!(Config::from_lookup(get).map(|c| c.topology.fabric), Ok(FabricKind::Dpdk));
    let udp = |k: &str| match k {
        "RINGCAST_FABRIC" => Some("udp".to_string()),
        _ => get(k),
    };
    assert!(matches!(Config::from_lookup(udp), Err(ConfigError::Invalid(m)) if m.contains("udp.members")));
}

#[test]
fn each_section_checks_itself_and_the_root_only_what_spans_sections() {
    // Alone: an impossible interface name is the udp section's own error.
    let udp = UdpConfig { interface: "a-name-longer-than-ifnamsiz".into(), ..UdpConfig::default() };
    assert!(matches!(udp.validate(), Err(ConfigError::Invalid(m)) if m.contains("udp.interface")));
    for ok in ["", "eth0", "7", "enp1s0f0np0"] {
        assert_eq!(UdpConfig { interface: ok.into(), ..UdpConfig::default() }.validate(), Ok(()), "{ok:?}");
    }
    // The member lists against the node count: a section's check, called by the root for the
    // fabric in use only.
    let two = UdpConfig { members: "127.0.0.1:1,127.0.0.1:2".into(), ..UdpConfig::default() };
    assert_eq!(two.check_members(2), Ok(()));
    assert!(
        matches!(two.check_members(3), Err(ConfigError::Invalid(m)) if m.contains("2 addresses for 3 nodes"))
    );
    let macs = DpdkConfig { members: "02:72:63:68:00:01".into(), ..DpdkConfig::default() };
    assert_eq!(macs.check_members(1), Ok(()));
    assert!(macs.check_members(2).is_err());
    assert!(DpdkConfig { members: "not-a-mac".into(), ..DpdkConfig::default() }.check_members(1).is_err());
}

#[test]
fn a_fabric_is_set_up_from_the_sections_that_own_its_values() {
    let c = Config::default().with(|c| {
        c.topology.job = "setup-test".into();
        c.topology.node = 2;
        c.topology.nodes = 3;
        c.protocol.mtu = 9000;
        c.protocol.max_message_bytes = 1 << 20;
        c.limits.max_comms = 5;
        c.runner.log_level = 2;
    });
    let s = c.fabric_setup();
    assert_eq!(
        (s.job.as_str(), s.node, s.nodes, s.mtu, s.window, s.max_groups, s.log_level),
        ("setup-test", ringcast_proto::comm::PeerId(2), 3, 9000, 1 << 20, 5, 2)
    );
}

#[test]
fn the_datagram_size_defaults_to_the_fabrics_own_unless_set() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        Config::from_lookup(move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
            .unwrap()
            .protocol
            .mtu
    };
    assert_eq!(env(&[("RINGCAST_FABRIC", "shm")]), 4088, "shm: one ring slot");
    // udp: the path's (loopback's 64 KiB MTU, within the protocol's 65000).
    let lo = std::fs::read_to_string("/sys/class/net/lo/mtu").ok().and_then(|m| m.trim().parse::<u32>().ok());
    let lo = lo.map_or(65_000, |m| (m.min(65_535) - 28).min(65_000));
    assert_eq!(env(&[("RINGCAST_FABRIC", "udp"), ("RINGCAST_UDP_MEMBERS", "127.0.0.1:1")]), lo);
    assert_eq!(
        env(&[("RINGCAST_FABRIC", "udp"), ("RINGCAST_UDP_MEMBERS", "127.0.0.1:1"), ("RINGCAST_MTU", "1472")]),
        1472
    );
    assert_eq!(env(&[]), 1472, "no fabric: the Ethernet default");
    assert_eq!(env(&[("RINGCAST_FABRIC", "shm"), ("RINGCAST_MTU", "1472")]), 1472, "set: kept");
    assert_eq!(Config::default().protocol.mtu, 1472, "the section alone knows no fabric");
}

#[test]
fn an_uneven_world_is_parsed_and_checked() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    };
    let c = Config::from_lookup(env(&[
        ("RINGCAST_NODES", "4"),
        ("RINGCAST_NODE", "2"),
        ("RINGCAST_NODE_RANKS", "8, 8,7,7"),
        ("RINGCAST_LOCAL_RANK", "6"),
    ]))
    .unwrap();
    let t = &c.topology;
    assert_eq!(
        (t.world_size(), t.local_capacity(), t.world_rank(6), t.world_rank(7)),
        (30, 7, Some(22), None)
    );
    assert_eq!(t.node_ranks.to_string(), "8,8,7,7", "printed as it is given");
    let invalid = |pairs: &'static [(&'static str, &'static str)]| {
        matches!(Config::from_lookup(env(pairs)), Err(ConfigError::Invalid(_)))
    };
    assert!(invalid(&[("RINGCAST_NODES", "3"), ("RINGCAST_NODE_RANKS", "2,1")]), "a count per node");
    assert!(invalid(&[("RINGCAST_NODES", "2"), ("RINGCAST_NODE_RANKS", "2,0")]), "an empty node");
    assert!(
        invalid(&[("RINGCAST_NODES", "2"), ("RINGCAST_NODE_RANKS", "2,1"), ("RINGCAST_PPN", "2")]),
        "both"
    );
    assert!(
        invalid(&[
            ("RINGCAST_NODES", "2"),
            ("RINGCAST_NODE", "1"),
            ("RINGCAST_NODE_RANKS", "2,1"),
            ("RINGCAST_LOCAL_RANK", "1")
        ]),
        "node 1 serves one process"
    );
    assert!(matches!(
        Config::from_lookup(env(&[("RINGCAST_NODE_RANKS", "2;1")])),
        Err(ConfigError::Parse { env: "RINGCAST_NODE_RANKS", .. })
    ));
}
