//! The `dpdk` fabric on a real kernel-bypass path, without the engine: three members, each a
//! process in its own network namespace driving `net_af_xdp` on its veth, joined by a Linux
//! bridge (multicast snooping off), plus a stranger on the same bridge whose MAC no member lists.
//!
//! Every member multicasts numbered datagrams to the group and sends one to each other member,
//! paced; each datagram's body derives from its header, so a receiver checks every one byte
//! for byte and tells lost, doubled, misattributed, misaddressed or damaged datagrams apart.
//! Asserted: every member gets every datagram of the others exactly once; everything the
//! stranger sent is refused as foreign and nothing of it delivered; the fabric's counters agree
//! with what was sent and received; the pool does not leak mbufs; multicast reception puts the
//! group's MAC on the kernel device's multicast list (no promiscuous mode), and leaving the
//! group takes it off;
//! dropping the fabric closes the port, cleans the EAL up and removes its runtime directory;
//! and nothing of the test remains (namespaces, processes, runtime directories).
use ringcast_hw_tests::cluster::af_xdp_vdev;
use ringcast_hw_tests::env;
use ringcast_hw_tests::netns::Lab;
use ringcast_hw_tests::proc::{self, Child};
use ringcast_hw_tests::roles::field;
use std::path::Path;
use std::time::{Duration, Instant};

/// Datagrams each member multicasts (and sends to each other member).
const COUNT: u32 = 300;
/// Members (the stranger is one more namespace).
const MEMBERS: usize = 3;
/// Receive and transmit descriptors of a port plus two bursts: what the driver may hold.
const DRIVER_HOLDS: u64 = 2 * 1024 + 64;

fn spawn(lab: &Lab, i: usize, members: &str, job: &str) -> Child {
    let mut cmd = lab.command(i, Path::new(env!("CARGO_BIN_EXE_ringcast-hw")));
    cmd.args(["fabric", "--kind", "dpdk", "--node", &i.to_string(), "--members", members])
        .args(["--vdev", &af_xdp_vdev(), "--mode", "verify", "--count", &COUNT.to_string()])
        .args(["--len", "1400", "--job", job]);
    Child::spawn(&format!("member {i}"), cmd).expect("spawn a member")
}

#[test]
fn members_exchange_every_datagram_and_refuse_a_stranger() {
    if let Some(why) = env::af_xdp_unavailable() {
        println!("SKIP: {why}");
        return;
    }
    let job = format!("hwf{}", std::process::id());
    let lab = Lab::create("fab", MEMBERS + 1).expect("namespaces");
    let prefix = lab.prefix.clone();
    let listed = Lab::macs(MEMBERS);
    let mut members: Vec<Child> = (0..MEMBERS).map(|i| spawn(&lab, i, &listed, &job)).collect();
    // The stranger counts itself a member; nobody else does.
    let mut stranger = spawn(&lab, MEMBERS, &Lab::macs(MEMBERS + 1), &job);

    let ready = proc::all(&mut members, |m| m.expect("READY", Duration::from_secs(30))).expect("members up");
    let pool_start: Vec<u64> = ready.iter().map(|r| field(r, "pool_free").expect("pool_free")).collect();
    for (i, r) in ready.iter().enumerate() {
        assert_eq!(field::<String>(r, "driver").as_deref(), Some("net_af_xdp"), "{r}");
        assert_eq!(field::<String>(r, "mac"), Some(Lab::mac(i)), "the port has the listed MAC: {r}");
        assert_eq!(
            field::<String>(r, "mode").as_deref(),
            Some("Kernel"),
            "AF_XDP's groups go on the kernel device's multicast list: {r}"
        );
        assert_eq!(field::<bool>(r, "promisc"), Some(false), "no promiscuous mode needed: {r}");
        assert_eq!(field::<usize>(r, "mtu"), Some(1472), "{r}");
    }
    stranger.expect("READY", Duration::from_secs(30)).expect("stranger up");

    // The stranger first (the members poll meanwhile), then the members.
    stranger.send("GO").expect("stranger go");
    stranger.expect("SENT", Duration::from_secs(30)).expect("stranger sent");
    proc::all(&mut members, |m| m.send("GO")).expect("go");
    proc::all(&mut members, |m| m.expect("SENT", Duration::from_secs(60))).expect("members sent");

    // Every member expects COUNT multicast and COUNT unicast datagrams from each other member.
    let expected = (2 * COUNT as usize) * (MEMBERS - 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reports = Vec::new();
    for m in &mut members {
        let report = loop {
            m.send("REPORT").expect("report");
            let r = m.expect("RESULT", Duration::from_secs(10)).expect("result");
            if field::<usize>(&r, "unique") == Some(expected) || Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        reports.push(report);
    }
    for (i, r) in reports.iter().enumerate() {
        println!("member {i}: {r}");
        let get = |k: &str| field::<u64>(r, k).unwrap_or_else(|| panic!("member {i}: no {k} in {r}"));
        assert_eq!(get("unique"), expected as u64, "member {i} lost datagrams: {r}");
        assert_eq!((get("dup"), get("bad"), get("misaddressed")), (0, 0, 0), "member {i}: {r}");
        assert_eq!(get("received"), expected as u64, "member {i}: delivered = checked: {r}");
        assert_eq!(
            (get("multicast"), get("sent")),
            (u64::from(COUNT), 2 * u64::from(COUNT)),
            "member {i}: {r}"
        );
        // The stranger's multicast and its unicast to this member: all refused as foreign.
        assert_eq!(get("foreign"), 2 * u64::from(COUNT), "member {i}: {r}");
        assert!(get("refused") >= get("foreign"), "member {i}: foreign frames count as refused: {r}");
        assert_eq!(
            (get("imissed"), get("tx_nombuf"), get("tx_full"), get("tx_refused")),
            (0, 0, 0, 0),
            "{r}"
        );
        // No mbuf leaks: what is not free is what the driver may hold.
        assert!(
            get("pool_free") + DRIVER_HOLDS >= pool_start[i],
            "member {i} leaks mbufs: {r} vs {}",
            pool_start[i]
        );
    }

    // Leaving the group takes its MAC off the kernel device's list.
    proc::all(&mut members, |m| m.send("LEAVE")).expect("leave");
    for (i, left) in proc::all(&mut members, |m| m.expect("LEFT", Duration::from_secs(10)))
        .expect("left")
        .iter()
        .enumerate()
    {
        assert_eq!(field::<String>(left, "mode").as_deref(), Some("None"), "member {i}: {left}");
        assert_eq!(field::<bool>(left, "promisc"), Some(false), "member {i}: {left}");
    }

    // Dropping the fabric: port closed, EAL ended, runtime directory gone; clean exit.
    members.push(stranger);
    proc::all(&mut members, |m| m.send("EXIT")).expect("exit");
    for (i, closed) in proc::all(&mut members, |m| m.expect("CLOSED", Duration::from_secs(30)))
        .expect("closed")
        .iter()
        .enumerate()
    {
        assert_eq!(field::<bool>(closed, "runtime_dir_removed"), Some(true), "member {i}: {closed}");
    }
    for m in members {
        let name = m.name.clone();
        let (status, err) = m.finish(Duration::from_secs(20));
        assert!(status.is_some_and(|s| s.success()), "{name}: {status:?}\n{err}");
    }
    assert!(proc::dpdk_leftovers(&job).is_empty(), "{:?}", proc::dpdk_leftovers(&job));
    drop(lab);
    assert!(Lab::existing(&prefix).is_empty(), "namespaces left: {:?}", Lab::existing(&prefix));
}
