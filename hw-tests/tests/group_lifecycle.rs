//! Multicast groups over a communicator's life, on the `udp` fabric and on `dpdk` over
//! `net_af_xdp`: joined at creation, left at free, and left at process exit — a host that dies
//! with communicators it never freed, and an engine killed outright (the kernel undoes what the
//! engine held: sockets, packet-socket memberships).
//!
//! Two network namespaces on a bridge, an engine daemon and a `ringcast-hw host lifecycle` in
//! each. The hosts create and free 10,000 communicators one after the other (each with its own
//! group: 20,000 joins and leaves across the two engines); every 2,000 cycles the communicator
//! carries a synchronization epoch of checked broadcasts while the test looks at the kernel.
//!
//! Asserted, from outside the engines (the kernel's multicast lists of each namespace's
//! `eth0`, `ip maddr`; the engine's open descriptors, `/proc/<pid>/fd`) and from inside
//! (`COMMS`: communicators and groups the engine holds):
//! * while a communicator exists, its group is in the kernel's list (so the check can fail);
//! * after the 10,000 cycles, every list and the descriptor count equal their values before,
//!   and each engine holds the world alone: 1 communicator, 1 group, 10,001 created, 10,000
//!   dropped;
//! * a host killed holding 20 communicators: its engine drops them and leaves their groups;
//! * an engine killed holding 21 groups: the kernel lists none of the job's groups afterwards.
use ringcast_hw_tests::cluster::{Cluster, Net};
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::roles::{field, lifecycle_identity};
use ringcast_hw_tests::{env, proc};
use ringcast_offload::fabric::dpdk::frame::group_mac;
use ringcast_proto::comm::ident::group_ipv4;
use ringcast_proto::comm::GroupId;
use ringcast_proto::engine::world_identity;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NODES: usize = 2;
const CYCLES: u32 = 10_000;
const CHECK_EVERY: u32 = 2_000;
const LEAK: u32 = 20;

/// How the kernel names `group` in `ip maddr` on `net`: the IPv4 group (udp) or the
/// multicast MAC (dpdk).
fn kernel_name(net: Net, group: &GroupId) -> String {
    match net {
        Net::Udp => group_ipv4(group).to_string(),
        _ => group_mac(group).to_string(),
    }
}

/// The multicast addresses the kernel lists on namespace `ns`'s `eth0`: IPv4 groups (`inet`)
/// and link-layer addresses (`link`).
fn kernel_groups(ns: &str) -> BTreeSet<String> {
    let out = Command::new("ip").args(["-n", ns, "maddr", "show", "dev", "eth0"]).output().expect("ip maddr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match w.next() {
                Some("inet" | "link" | "inet6") => w.next().map(str::to_string),
                _ => None,
            }
        })
        .collect()
}

/// Open file descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Waits (up to 30 s) until `done()` holds; false if it never does.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn lifecycle(net: Net) {
    let job = format!("hwl{}{}", std::process::id(), if net == Net::Udp { "u" } else { "d" });
    let lab = Lab::create("lc", NODES).expect("namespaces");
    let prefix = lab.prefix.clone();
    let tool = Path::new(env!("CARGO_BIN_EXE_ringcast-hw"));
    let args: Vec<String> = [
        "lifecycle",
        "--job",
        &job,
        "--cycles",
        &CYCLES.to_string(),
        "--check-every",
        &CHECK_EVERY.to_string(),
        "--leak",
        &LEAK.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cluster =
        Cluster::start(Some(&lab), NODES, net, &job, tool, &args).expect("engines and hosts up");
    let name = |g: &GroupId| kernel_name(net, g);
    let world = name(&world_identity(&job, &Default::default()).group);

    // Before: the world's group is joined, nothing else of the job.
    let before: Vec<BTreeSet<String>> = lab.nodes.iter().map(|ns| kernel_groups(ns)).collect();
    let fds_before: Vec<usize> = cluster.engines.iter().map(|e| fds(e.pid())).collect();
    for (i, b) in before.iter().enumerate() {
        assert!(b.contains(&world), "node {i}: the world's group {world} is not joined: {b:?}");
    }
    println!("{net:?}: kernel multicast lists before {before:?}, engine descriptors {fds_before:?}");

    cluster.send_all("GO").expect("go");
    let started = Instant::now();
    for i in (0..CYCLES).step_by(CHECK_EVERY as usize) {
        let at = cluster.expect_all("BARRIER", Duration::from_secs(300)).expect("barrier");
        assert!(at.iter().all(|a| *a == format!("joined-{i}")), "hosts at {at:?}, expected joined-{i}");
        let g = name(&lifecycle_identity(&job, i).group);
        for (n, ns) in lab.nodes.iter().enumerate() {
            let now = kernel_groups(ns);
            assert!(now.contains(&g), "node {n}, communicator {i}: its group {g} is not joined: {now:?}");
        }
        cluster.send_all("GO").expect("go");
    }
    let results = cluster.expect_all("RESULT", Duration::from_secs(600)).expect("cycles done");
    let took = started.elapsed();
    for (n, r) in results.iter().enumerate() {
        println!("{net:?} node {n}: {r}");
        assert_eq!(field::<u32>(r, "cycles"), Some(CYCLES), "node {n}: {r}");
        assert_eq!(field::<u32>(r, "alive"), Some(1), "node {n}: only the world may remain: {r}");
        assert_eq!(field::<u32>(r, "groups"), Some(1), "node {n}: only the world's group may remain: {r}");
        assert_eq!(field::<u64>(r, "created"), Some(u64::from(CYCLES) + 1), "node {n}: {r}");
        assert_eq!(field::<u64>(r, "dropped"), Some(u64::from(CYCLES)), "node {n}: {r}");
    }
    for (n, ns) in lab.nodes.iter().enumerate() {
        assert_eq!(kernel_groups(ns), before[n], "node {n}: the kernel's multicast list changed");
        assert_eq!(
            fds(cluster.engines[n].pid()),
            fds_before[n],
            "node {n}: the engine's descriptors changed"
        );
    }
    println!(
        "{net:?}: {CYCLES} communicators created and freed per engine in {:.1} s ({:.0} µs per cycle); nothing left",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / f64::from(CYCLES)
    );

    // A host dies holding LEAK communicators: its engine drops them and leaves their groups.
    let leaked: BTreeSet<String> =
        (0..LEAK).map(|j| name(&lifecycle_identity(&job, CYCLES + j).group)).collect();
    cluster.send_all("GO").expect("go");
    let at = cluster.expect_all("BARRIER", Duration::from_secs(120)).expect("leaked");
    assert!(at.iter().all(|a| a == "leaked"), "{at:?}");
    for (n, ns) in lab.nodes.iter().enumerate() {
        let now = kernel_groups(ns);
        assert!(
            leaked.is_subset(&now),
            "node {n}: the {LEAK} communicators' groups are not all joined: {now:?}"
        );
    }
    cluster.hosts[0].kill();
    assert!(
        eventually(|| kernel_groups(&lab.nodes[0]) == before[0]),
        "node 0: groups left behind by a killed host: {:?}",
        kernel_groups(&lab.nodes[0]).difference(&before[0]).collect::<Vec<_>>()
    );
    assert!(leaked.is_subset(&kernel_groups(&lab.nodes[1])), "node 1's host still holds its communicators");

    // An engine is killed holding the world and LEAK groups: the kernel lets go of them all.
    cluster.engines[1].kill();
    let mine: BTreeSet<String> = leaked.iter().cloned().chain([world.clone()]).collect();
    assert!(
        eventually(|| kernel_groups(&lab.nodes[1]).is_disjoint(&mine)),
        "node 1: groups of a killed engine still joined: {:?}",
        kernel_groups(&lab.nodes[1]).intersection(&mine).collect::<Vec<_>>()
    );
    drop(cluster);
    assert!(proc::dpdk_leftovers(&job).is_empty(), "{:?}", proc::dpdk_leftovers(&job));
    drop(lab);
    assert!(Lab::existing(&prefix).is_empty(), "namespaces left: {:?}", Lab::existing(&prefix));
}

#[test]
fn udp_groups_follow_communicators_through_10000_cycles_and_crashes() {
    if let Some(why) = env::no_namespaces() {
        println!("SKIP: {why}");
        return;
    }
    lifecycle(Net::Udp);
}

#[test]
fn dpdk_groups_follow_communicators_through_10000_cycles_and_crashes() {
    if let Some(why) = env::af_xdp_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    lifecycle(Net::DpdkAfXdp);
}
