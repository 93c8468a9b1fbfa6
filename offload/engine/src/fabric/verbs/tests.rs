//! Unit tests of the `verbs` fabric's logic ([`VerbsFabric`]) on the in-memory fake NIC
//! (`fake.rs`): discovery among members starting at different times, its back-off while a
//! member is missing and address handles retried, delivery and its rejects, multicast without
//! the sender, groups sharing an MGID, slot reposting and overrun, a full send queue, retired
//! address handles, the queue pair's error state and its recovery, restarts, impostors and
//! foreign jobs (the real protocol core over lossy fake links: `protocol_tests.rs`). None of
//! this touches a device; see the module doc for what runs where.
use super::fake::{FakeNic, Wire};
use super::group::{self, JoinMode};
use super::wire::{self, Header, Kind, HEADER_LEN, HELLO_LEN, HELLO_NEED, HELLO_REPLY};
use super::*;
use crate::fabric::Fabric;
use ringcast_proto::comm::ident::IpFamily;

pub(super) const MTU: usize = 1000;
pub(super) const HELLO_NS: u64 = 10_000_000;
const JOB: &str = "verbs-test";

fn spec(local: u32, nodes: u32, incarnation: u64) -> FabricSpec {
    FabricSpec {
        local: PeerId(local),
        nodes,
        mtu: MTU,
        job: wire::job_tag(JOB),
        discovery: group::discovery_group(JOB),
        incarnation,
        hello_ns: HELLO_NS,
        max_groups: 4,
    }
}

fn member(wire: &Wire, local: u32, nodes: u32, incarnation: u64) -> VerbsFabric<FakeNic> {
    member_with(wire, local, nodes, incarnation, 64, 32)
}

pub(super) fn member_with(
    wire: &Wire,
    local: u32,
    nodes: u32,
    inc: u64,
    slots: u32,
    depth: u32,
) -> VerbsFabric<FakeNic> {
    let nic = wire.nic(slots, depth, MTU + HEADER_LEN, JoinMode::Attach);
    VerbsFabric::new(nic, spec(local, nodes, inc)).expect("fabric on the fake NIC")
}

type Inbox = Vec<(PeerId, Vec<u8>)>;

/// Polls every live fabric once, collecting what each delivers.
fn poll_all(fabrics: &mut [Option<VerbsFabric<FakeNic>>], inboxes: &mut [Inbox]) {
    for (f, inbox) in fabrics.iter_mut().zip(inboxes.iter_mut()) {
        if let Some(f) = f {
            f.poll(usize::MAX, &mut |from, d| inbox.push((from, d.to_vec())));
        }
    }
}

/// Polls and advances the clock by `step` until every live fabric knows every member, at most
/// `rounds` times; returns the rounds it took.
pub(super) fn discover(
    wire: &Wire,
    fabrics: &mut [Option<VerbsFabric<FakeNic>>],
    step: u64,
    rounds: usize,
) -> Option<usize> {
    let mut inboxes = vec![Vec::new(); fabrics.len()];
    for round in 0..rounds {
        poll_all(fabrics, &mut inboxes);
        if fabrics.iter().flatten().all(|f| f.peers().complete()) {
            return Some(round);
        }
        wire.advance(step);
    }
    None
}

#[test]
fn members_starting_at_different_times_discover_each_other_then_go_quiet() {
    let wire = Wire::new();
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> = vec![Some(member(&wire, 0, 3, 10)), None, None];
    // Member 0 alone for a while: it keeps asking, backing off (polled every 2 intervals:
    // asks at 0, 20, 40 and 80 ms, as the interval grows 10, 20, 40, 80 ms).
    for _ in 0..5 {
        discover(&wire, &mut fabrics, HELLO_NS, 1);
        wire.advance(HELLO_NS);
    }
    let asked = fabrics[0].as_ref().map(|f| f.stats().hellos_sent).unwrap_or_default();
    assert_eq!(asked, 4, "HELLOs while alone, backing off");
    fabrics[2] = Some(member(&wire, 2, 3, 30));
    wire.advance(HELLO_NS / 3);
    fabrics[1] = Some(member(&wire, 1, 3, 20));
    let rounds = discover(&wire, &mut fabrics, HELLO_NS / 4, 40).expect("everyone known");
    assert!(rounds <= 8, "discovery took {rounds} quarter intervals");
    for (i, f) in fabrics.iter().flatten().enumerate() {
        let s = f.stats();
        assert_eq!(s.known_now, 2, "member {i}");
        assert_eq!(s.ah_errors, 0);
        assert_eq!(f.nic().live_ahs(), 2, "one address handle per other member");
        for m in (0..3).filter(|&m| m != i as u32) {
            let e = f.peers().entry(m).expect("entry");
            assert_eq!(e.incarnation, [10, 20, 30][m as usize]);
        }
    }
    // Once complete, nothing more is sent.
    let before: Vec<u64> =
        fabrics.iter().flatten().map(|f| f.stats().hellos_sent + f.stats().replies_sent).collect();
    let (delivered, ..) = wire.counts();
    for _ in 0..10 {
        discover(&wire, &mut fabrics, HELLO_NS, 1);
        wire.advance(HELLO_NS);
    }
    let after: Vec<u64> =
        fabrics.iter().flatten().map(|f| f.stats().hellos_sent + f.stats().replies_sent).collect();
    assert_eq!(before, after);
    assert_eq!(wire.counts().0, delivered, "a quiet wire");
}

#[test]
fn lost_hellos_are_repeated_until_everyone_is_known() {
    let wire = Wire::new();
    // Every HELLO is lost until the switch is turned.
    let w = wire.clone();
    let lossy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let l = lossy.clone();
    wire.set_drop(Some(Box::new(move |_, _, m: &[u8]| {
        l.load(std::sync::atomic::Ordering::Relaxed) && m.get(3) == Some(&Kind::Hello.to_wire())
    })));
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..4).map(|i| Some(member(&w, i, 4, 1 + u64::from(i)))).collect();
    assert_eq!(discover(&wire, &mut fabrics, HELLO_NS, 5), None, "nothing gets through");
    lossy.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(discover(&wire, &mut fabrics, HELLO_NS, 5).is_some());
    assert!(wire.counts().1 >= 12, "HELLOs were dropped: {:?}", wire.counts());
}

/// Three members that know each other and joined group `g`.
fn trio(wire: &Wire, g: &GroupId) -> Vec<Option<VerbsFabric<FakeNic>>> {
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..3).map(|i| Some(member(wire, i, 3, 100 + u64::from(i)))).collect();
    discover(wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    for f in fabrics.iter_mut().flatten() {
        f.join(g).expect("join");
    }
    fabrics
}

#[test]
fn multicast_reaches_the_others_and_unicast_its_member() {
    let wire = Wire::new();
    let g: GroupId = [7; 14];
    let mut fabrics = trio(&wire, &g);
    let mut inboxes = vec![Vec::new(); 3];
    let own_before = at(&mut fabrics, 0).stats().rejected[Reject::Own.index()];
    let refused_before = at(&mut fabrics, 0).counters().refused;
    let sizes = [0usize, 1, 2, 100, MTU - 1, MTU];
    for (i, &len) in sizes.iter().enumerate() {
        let frame: Vec<u8> = (0..len).map(|b| (b * 31 + i) as u8).collect();
        at(&mut fabrics, 0).multicast(&g, &frame);
    }
    at(&mut fabrics, 1).send(PeerId(2), b"one to two");
    at(&mut fabrics, 2).send(PeerId(0), b"two to zero");
    poll_all(&mut fabrics, &mut inboxes);
    for (m, inbox) in inboxes.iter().enumerate() {
        let from0: Vec<&Vec<u8>> = inbox.iter().filter(|(p, _)| *p == PeerId(0)).map(|(_, d)| d).collect();
        if m == 0 {
            assert!(from0.is_empty(), "no echo of its own multicast");
            assert_eq!(inbox, &vec![(PeerId(2), b"two to zero".to_vec())]);
        } else {
            assert_eq!(
                from0.iter().map(|d| d.len()).collect::<Vec<_>>(),
                sizes,
                "member {m}: in order, byte-exact"
            );
            for (i, d) in from0.iter().enumerate() {
                assert!(d.iter().enumerate().all(|(b, &x)| x == (b * 31 + i) as u8));
            }
        }
    }
    assert_eq!(inboxes[2].iter().filter(|(p, _)| *p == PeerId(1)).count(), 1);
    let f0 = fabrics[0].as_ref().map(|f| (f.counters(), f.stats())).expect("member 0");
    assert_eq!(f0.0.multicast, sizes.len() as u64);
    assert_eq!(f0.1.rejected[Reject::Own.index()] - own_before, sizes.len() as u64, "its echoes, dropped");
    assert_eq!(f0.0.refused, refused_before, "echoes are not refusals");
    assert_eq!(f0.0.received, 1);
    let f1 = fabrics[1].as_ref().map(|f| f.counters()).expect("member 1");
    assert_eq!((f1.sent, f1.received, f1.refused), (1, sizes.len() as u64, 0));
    // The ledger: each datagram copied once into a send slot (a multicast once, whatever the
    // receivers), none on receipt (handed over in the receive slot).
    use ringcast_proto::ledger::Side;
    let l0 = fabrics[0].as_ref().map(|f| f.ledger()).expect("member 0");
    assert_eq!(l0.copied_bytes(Side::Send), sizes.iter().sum::<usize>() as u64);
    assert_eq!(l0.copied_bytes(Side::Receive), 0);
}

#[test]
fn sends_that_cannot_go_are_refused_and_counted() {
    let wire = Wire::new();
    let g: GroupId = [8; 14];
    let mut f = member(&wire, 0, 3, 1);
    f.send(PeerId(1), b"nobody knows 1 yet");
    f.send(PeerId(0), b"to self");
    f.send(PeerId(3), b"no such member");
    f.send(PeerId(1), &[0; MTU + 1]);
    f.multicast(&g, b"not joined");
    f.join(&g).expect("join");
    f.multicast(&g, &[0; MTU + 1]);
    let (c, s) = (f.counters(), f.stats());
    assert_eq!((c.sent, c.multicast, c.refused), (0, 0, 6));
    assert_eq!((s.tx_unknown, s.tx_refused, s.tx_not_joined), (1, 4, 1));
    assert_eq!(f.ledger(), ringcast_proto::ledger::Ledger::default(), "nothing refused was copied");
}

#[test]
fn joins_are_idempotent_bounded_and_undone_by_leave() {
    let wire = Wire::new();
    let mut f = member(&wire, 0, 2, 1);
    assert_eq!(f.nic().live_groups(), 1, "the discovery group");
    let g: GroupId = [1; 14];
    f.join(&g).expect("join");
    f.join(&g).expect("again");
    f.join(&group::discovery_group(JOB)).expect("the discovery group is joined already");
    assert_eq!(f.nic().live_groups(), 2);
    let mgid = group::attach_mgid(&g, IpFamily::V4);
    assert_eq!(wire.attached(&mgid), 1);
    for i in 2..5u8 {
        f.join(&[i; 14]).expect("up to max_groups");
    }
    assert!(f.join(&[9; 14]).is_err(), "max_groups reached");
    assert_eq!(f.groups(), 4, "the discovery group is the fabric's own");
    f.leave(&g);
    f.leave(&g);
    f.leave(&[0xee; 14]);
    assert_eq!(wire.attached(&mgid), 0);
    assert_eq!(f.nic().live_groups(), 4);
    assert_eq!(f.groups(), 3);
    assert_eq!(f.stats().mgid_mismatch, 0);
    // A failing join is an error, and nothing is recorded.
    wire.fail(true, false, false);
    assert!(f.join(&[0x55; 14]).is_err());
    wire.fail(false, false, false);
    // A join whose MGID is not the predicted one is counted, and used.
    wire.override_mgid(Some([0xff; 16]));
    f.join(&[0x66; 14]).expect("join");
    assert_eq!(f.stats().mgid_mismatch, 1);
    assert_eq!(wire.attached(&[0xff; 16]), 1);
}

#[test]
fn a_single_member_needs_no_discovery() {
    let wire = Wire::new();
    let mut f = member(&wire, 0, 1, 1);
    assert_eq!(f.nic().live_groups(), 0);
    f.poll(8, &mut |_, _| panic!("nothing to receive"));
    assert_eq!(f.stats().hellos_sent, 0);
    assert!(f.peers().complete());
}

#[test]
fn the_mtu_must_fit_the_ports_messages() {
    let wire = Wire::new();
    let nic = wire.nic(4, 4, MTU + HEADER_LEN - 1, JoinMode::Attach);
    match VerbsFabric::new(nic, spec(0, 2, 1)) {
        Err(VerbsError::Invalid(m)) => assert!(m.contains("at most 999"), "{m}"),
        other => panic!("{other:?}"),
    }
    let nic = wire.nic(4, 4, 70_000, JoinMode::Attach);
    assert!(VerbsFabric::new(nic, FabricSpec { mtu: wire::MAX_BODY + 1, ..spec(0, 2, 1) }).is_err());
    let nic = wire.nic(4, 4, 2048, JoinMode::Attach);
    assert!(VerbsFabric::new(nic, spec(2, 2, 1)).is_err(), "member outside the job");
    wire.fail(true, false, false);
    let nic = wire.nic(4, 4, 2048, JoinMode::Attach);
    assert!(matches!(VerbsFabric::new(nic, spec(0, 2, 1)), Err(VerbsError::Join { .. })));
}

#[test]
fn receive_slots_are_reposted_and_overruns_counted() {
    let wire = Wire::new();
    let g: GroupId = [3; 14];
    let mut fabrics =
        vec![Some(member_with(&wire, 0, 2, 1, 64, 64)), Some(member_with(&wire, 1, 2, 2, 4, 64))];
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    let (mut a, mut b) = (fabrics[0].take().expect("a"), fabrics[1].take().expect("b"));
    a.join(&g).expect("join");
    b.join(&g).expect("join");
    // 1000 frames, 3 at a time between polls: every one arrives, slots keep coming back.
    let mut got = Vec::new();
    for i in 0..1000u32 {
        a.multicast(&g, &i.to_le_bytes());
        if i % 3 == 2 {
            a.poll(64, &mut |_, _| panic!("a hears only its own echoes"));
            b.poll(64, &mut |_, d| got.push(u32::from_le_bytes(d.try_into().unwrap_or([0xff; 4]))));
            assert_eq!(b.stats().posted_now, 4, "all slots posted again after a poll");
        }
    }
    b.poll(64, &mut |_, d| got.push(u32::from_le_bytes(d.try_into().unwrap_or([0xff; 4]))));
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
    assert_eq!(b.counters().overrun, 0);
    assert_eq!(wire.counts().2, 0);
    // Ten frames between two polls with four slots: six are lost at the NIC, unseen by b but
    // for its dry poll counter.
    for i in 0..10u32 {
        a.multicast(&g, &i.to_le_bytes());
    }
    let mut n = 0;
    b.poll(usize::MAX, &mut |_, _| n += 1);
    assert_eq!(n, 4);
    assert_eq!(wire.counts().2, 6);
    assert_eq!((b.stats().rx_dry, b.counters().overrun), (1, 1), "the poll that found nothing posted");
    // A budget of 1 takes one message and leaves the rest for the next poll.
    for i in 0..3u32 {
        a.multicast(&g, &i.to_le_bytes());
    }
    assert_eq!(b.poll(1, &mut |_, _| {}), 1);
    assert_eq!(b.nic().completions_waiting(), 2);
    assert_eq!(b.poll(8, &mut |_, _| {}), 2);
    let s = b.nic().stats().recv;
    assert_eq!(s.stale, 0);
    assert!(s.completions >= 1007, "1000 + 4 + 3 frames, and HELLOs");
}

#[test]
fn a_full_send_queue_drops_and_counts_then_recovers() {
    let wire = Wire::new();
    let g: GroupId = [4; 14];
    let mut a = member_with(&wire, 0, 1, 1, 8, 16);
    a.join(&g).expect("join");
    wire.hold_completions(true);
    for _ in 0..20 {
        a.multicast(&g, b"x");
    }
    let s = a.stats();
    assert_eq!((s.tx_full, s.in_flight_now), (4, 16));
    assert_eq!(a.counters().multicast, 20, "handed to the fabric; 4 dropped at the full queue");
    wire.hold_completions(false);
    a.poll(1, &mut |_, _| {});
    assert_eq!(a.stats().in_flight_now, 0, "the signalled completions freed every buffer");
    a.multicast(&g, b"y");
    assert_eq!(a.stats().tx_full, 4);
}

#[test]
fn a_restarted_member_is_learnt_again_and_its_old_handle_destroyed() {
    let wire = Wire::new();
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..3).map(|i| Some(member(&wire, i, 3, 100))).collect();
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    let old_qpn = fabrics[1].as_ref().map(|f| f.address().qpn);
    fabrics[1] = None; // the engine exits
    fabrics[1] = Some(member(&wire, 1, 3, 200)); // and starts again: new QP, new incarnation
    let new_qpn = fabrics[1].as_ref().map(|f| f.address().qpn);
    assert_ne!(old_qpn, new_qpn);
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("rediscovery");
    for m in [0, 2] {
        let f = fabrics[m].as_ref().expect("member");
        let e = f.peers().entry(1).expect("member 1 known");
        assert_eq!((e.incarnation, Some(e.addr.qpn)), (200, new_qpn));
        assert_eq!(f.stats().peers_restarted, 1);
        assert_eq!(f.nic().live_ahs(), 2, "the old handle was destroyed");
    }
    // Unicast now reaches the new process.
    at(&mut fabrics, 0).send(PeerId(1), b"welcome back");
    let mut inboxes = vec![Vec::new(); 3];
    poll_all(&mut fabrics, &mut inboxes);
    assert_eq!(inboxes[1], vec![(PeerId(0), b"welcome back".to_vec())]);
}

#[test]
fn data_announces_a_restart_before_its_hello() {
    let wire = Wire::new();
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..2).map(|i| Some(member(&wire, i, 2, 5))).collect();
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    let to = fabrics[0].as_ref().map(|f| f.address().qpn).unwrap_or_default();
    // A DATA frame from member 1's next incarnation, on a new QP, arrives first.
    let body = b"early";
    let h = Header { kind: Kind::Data, job: wire::job_tag(JOB), member: 1, incarnation: 6, len: 5, flags: 0 };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(body);
    wire.inject(to, 0x999, &m);
    let mut got = Vec::new();
    let f0 = fabrics[0].as_mut().expect("member 0");
    f0.poll(8, &mut |p, d| got.push((p, d.to_vec())));
    assert_eq!(got, vec![(PeerId(1), body.to_vec())], "delivered");
    assert_eq!((f0.peers().known(), f0.nic().live_ahs(), f0.stats().peers_restarted), (0, 0, 1));
    f0.send(PeerId(1), b"held until its HELLO");
    assert_eq!(f0.stats().tx_unknown, 1);
    // Its HELLO follows; from then on frames of the old incarnation are stale.
    let hello = wire::Hello { gid: [9; 16], qpn: 0x999, lid: 0 };
    let hh = Header { kind: Kind::Hello, len: HELLO_LEN as u16, flags: 0, ..h };
    let mut m = hh.encode().to_vec();
    m.extend_from_slice(&hello.encode());
    wire.inject(to, 0x999, &m);
    f0.poll(8, &mut |_, _| {});
    assert_eq!(f0.peers().entry(1).map(|e| e.incarnation), Some(6));
    let old = Header { incarnation: 5, ..h };
    let mut m = old.encode().to_vec();
    m.extend_from_slice(body);
    wire.inject(to, 0x107, &m);
    let mut n = 0;
    f0.poll(8, &mut |_, _| n += 1);
    assert_eq!((n, f0.stats().rejected[Reject::Stale.index()]), (0, 1));
}

#[test]
fn impostors_foreign_jobs_and_garbage_are_rejected_by_reason() {
    let wire = Wire::new();
    let mut f = member(&wire, 0, 3, 50);
    let me = f.address().qpn;
    let tag = wire::job_tag(JOB);
    let frame = |h: Header, body: &[u8]| {
        let mut m = h.encode().to_vec();
        m.extend_from_slice(body);
        m
    };
    let data = |member: u32, inc: u64, job: u32| Header {
        kind: Kind::Data,
        job,
        member,
        incarnation: inc,
        len: 3,
        flags: 0,
    };
    wire.inject(me, 0x500, &frame(data(0, 77, tag), b"abc")); // another process as member 0
    wire.inject(me, 0x500, &frame(data(1, 1, tag ^ 1), b"abc")); // another job
    wire.inject(me, 0x500, &frame(data(3, 1, tag), b"abc")); // no member 3
    wire.inject(me, 0x500, &frame(Header { len: 4, ..data(1, 1, tag) }, b"abc")); // length
    wire.inject(me, 0x500, b"RV"); // short
    wire.inject(me, 0x500, &[0xAA; 40]); // magic
    let hello = wire::Hello { gid: [1; 16], qpn: 0x501, lid: 0 };
    let hh = Header { kind: Kind::Hello, len: HELLO_LEN as u16, flags: HELLO_NEED, ..data(1, 1, tag) };
    wire.inject(me, 0x500, &frame(hh, &hello.encode())); // announces a QP that did not send it
    let mut n = 0;
    f.poll(64, &mut |_, _| n += 1);
    assert_eq!(n, 0);
    let s = f.stats();
    for (r, count) in [
        (Reject::Impostor, 1),
        (Reject::Job, 1),
        (Reject::Member, 1),
        (Reject::Length, 1),
        (Reject::Short, 1),
        (Reject::Magic, 1),
        (Reject::Conflict, 1),
    ] {
        assert_eq!(s.rejected[r.index()], count, "{}", r.name());
    }
    assert_eq!(f.counters().refused, 7);
    assert_eq!(f.peers().known(), 0);
    assert_eq!(f.stats().posted_now, 64, "every slot back");
    // Two engines started as the same member: each sees the other as an impostor.
    let mut twin = member(&wire, 0, 3, 51);
    let g: GroupId = [2; 14];
    f.join(&g).expect("join");
    twin.join(&g).expect("join");
    twin.multicast(&g, b"who am i");
    f.poll(8, &mut |_, _| n += 1);
    // Its HELLO and its DATA, after the forged frame above.
    assert_eq!((n, f.stats().rejected[Reject::Impostor.index()]), (0, 3));
}

#[test]
fn random_messages_never_panic_and_every_slot_comes_back() {
    let wire = Wire::new();
    let mut f = member_with(&wire, 1, 4, 9, 16, 16);
    let me = f.address().qpn;
    let tag = wire::job_tag(JOB).to_le_bytes();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut delivered = 0u64;
    for round in 0..200 {
        for _ in 0..8 {
            let len = (next() % 80) as usize;
            let mut m: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Often a plausible header, so the later checks are reached too.
            if round % 2 == 0 && m.len() >= HEADER_LEN {
                m[..2].copy_from_slice(&wire::MAGIC);
                m[2] = wire::VERSION;
                m[3] = 1 + (next() % 2) as u8;
                m[4..8].copy_from_slice(&tag);
                m[8..12].copy_from_slice(&((next() % 5) as u32).to_le_bytes());
                let body = (m.len() - HEADER_LEN) as u16;
                m[20..22].copy_from_slice(&body.to_le_bytes());
            }
            wire.inject(me, (next() % 0x1000) as u32, &m);
        }
        f.poll(usize::MAX, &mut |p, d| {
            assert!(p != PeerId(1) && p.0 < 4 && d.len() <= MTU);
            delivered += 1;
        });
        assert_eq!(f.stats().posted_now, 16);
    }
    let s = f.stats();
    let rejected: u64 = s.rejected.iter().sum();
    // 1600 injected, plus the member's own first HELLO looped back.
    assert_eq!(rejected + delivered + s.hellos_received, 1601, "every message accounted for");
    assert!(delivered > 0 && rejected > 0);
}

/// A HELLO of member `member` (incarnation `inc`) from QP `qpn`, with `flags` and, when given,
/// a known-members bitmap.
fn hello_frame(member: u32, inc: u64, qpn: u32, flags: u16, bitmap: Option<&[u8]>) -> Vec<u8> {
    let mut body = wire::Hello { gid: [qpn as u8; 16], qpn, lid: 0 }.encode().to_vec();
    body.extend_from_slice(bitmap.unwrap_or_default());
    let h = Header {
        kind: Kind::Hello,
        job: wire::job_tag(JOB),
        member,
        incarnation: inc,
        len: body.len() as u16,
        flags,
    };
    let mut m = h.encode().to_vec();
    m.extend_from_slice(&body);
    m
}

#[test]
fn answers_wait_for_an_address_handle_and_go_only_to_askers_that_miss_this_member() {
    let wire = Wire::new();
    let mut f = member(&wire, 0, 3, 1);
    let me = f.address().qpn;
    // Member 1 asks, and its bitmap says it knows only itself.
    let misses_me = hello_frame(1, 3, 0x777, HELLO_NEED, Some(&[0b010]));
    // No address handle can be made: no answer yet.
    wire.fail(false, true, false);
    wire.inject(me, 0x777, &misses_me);
    f.poll(8, &mut |_, _| {});
    assert_eq!((f.stats().ah_errors, f.stats().replies_sent), (1, 0));
    // The next HELLO brings the handle, and the answer goes out.
    wire.fail(false, false, false);
    wire.inject(me, 0x777, &misses_me);
    f.poll(8, &mut |_, _| {});
    assert_eq!((f.nic().live_ahs(), f.stats().replies_sent), (1, 1));
    // Asked again within half an interval: no second answer; later: one more.
    wire.inject(me, 0x777, &misses_me);
    f.poll(8, &mut |_, _| {});
    assert_eq!(f.stats().replies_sent, 1);
    wire.advance(HELLO_NS / 2);
    wire.inject(me, 0x777, &misses_me);
    f.poll(8, &mut |_, _| {});
    assert_eq!(f.stats().replies_sent, 2);
    // A NEED whose bitmap says it knows this member is answered by nobody, however often.
    let knows_me = hello_frame(1, 3, 0x777, HELLO_NEED, Some(&[0b011]));
    for _ in 0..5 {
        wire.advance(HELLO_NS);
        wire.inject(me, 0x777, &knows_me);
        f.poll(8, &mut |_, _| {});
    }
    assert_eq!(f.stats().replies_sent, 2);
    // A NEED whose bitmap does not reach this member's number (member 2's bitmap has none):
    // answered at most once per back-off cap.
    let unsaid = hello_frame(2, 4, 0x778, HELLO_NEED, None);
    for _ in 0..20 {
        wire.inject(me, 0x778, &unsaid);
        f.poll(8, &mut |_, _| {});
        wire.advance(HELLO_BACKOFF_CAP_NS / 10);
    }
    assert_eq!(f.stats().replies_sent, 2 + 2, "at 0 and after one cap");
    assert_eq!(f.stats().hellos_received, 4 + 5 + 20);
    // Posts failing: sends are dropped and counted, nothing breaks.
    wire.fail(false, false, true);
    f.send(PeerId(1), b"x");
    assert_eq!(f.stats().tx_errors, 1);
}

/// A member of `nodes` on its own NIC with a port of `port_mtu` bytes, with `mtu`.
fn member_mtu(
    wire: &Wire,
    local: u32,
    nodes: u32,
    inc: u64,
    port_mtu: usize,
    mtu: usize,
) -> VerbsFabric<FakeNic> {
    let nic = wire.nic(64, 32, port_mtu, JoinMode::Attach).with_mtu(mtu);
    VerbsFabric::new(nic, FabricSpec { mtu, ..spec(local, nodes, inc) }).expect("fabric on the fake NIC")
}

#[test]
fn a_member_with_a_larger_mtu_is_rejected_as_oversize_not_a_length_error() {
    // Both ports take 4096-byte messages; member 0 runs with RINGCAST_MTU 4000, member 1 with
    // 1000. Member 1's slots are sized from the port, so member 0's large frames land and are
    // rejected by the parser; sized from its own mtu, they would complete with a local length
    // error and put its queue pair into the error state.
    let wire = Wire::new();
    let mut fabrics =
        vec![Some(member_mtu(&wire, 0, 2, 1, 4096, 4000)), Some(member_mtu(&wire, 1, 2, 2, 4096, 1000))];
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    assert!(at(&mut fabrics, 1).nic().recv_size() >= wire::GRH_LEN + 4096);
    at(&mut fabrics, 0).send(PeerId(1), &[7; 4000]);
    at(&mut fabrics, 0).send(PeerId(1), b"small");
    let mut got = Vec::new();
    at(&mut fabrics, 1).poll(64, &mut |_, d| got.push(d.to_vec()));
    assert_eq!(got, vec![b"small".to_vec()]);
    let s = at(&mut fabrics, 1).stats();
    assert_eq!(s.rejected[Reject::Oversize.index()], 1);
    assert_eq!((s.qp_failures, s.rx_errors, s.posted_now), (0, 0, 64));
    assert!(!at(&mut fabrics, 1).nic().failed());
}

#[test]
fn an_error_completion_takes_the_qp_down_until_a_recovery_reposts_and_reattaches() {
    let wire = Wire::new();
    let g: GroupId = [0x31; 14];
    let mut fabrics = trio(&wire, &g);
    let qpn1 = at(&mut fabrics, 1).address().qpn;
    wire.fail_recovery(true);
    wire.inject_error(qpn1);
    let mut inboxes = vec![Vec::new(); 3];
    poll_all(&mut fabrics, &mut inboxes);
    let f1 = at(&mut fabrics, 1);
    assert!(f1.nic().failed());
    let s = f1.stats();
    assert_eq!((s.qp_failures, s.rx_errors, s.rx_flushed, s.posted_now), (1, 1, 63, 0));
    assert_eq!((s.qp_recoveries, s.qp_recovery_failures), (0, 1), "tried at once");
    assert!(
        f1.recovery_error().is_some_and(|e| e.contains("ibv_modify_qp(RESET)")),
        "{:?}",
        f1.recovery_error()
    );
    assert_eq!(f1.counters().overrun, 1, "the message lost to the error; flushes held none");
    // Down: nothing is reposted, polls do not churn, sends are refused, arriving frames lost.
    let (posts, dry) = (f1.nic().stats().recv.posts, s.rx_dry);
    let refused = f1.counters().refused;
    f1.send(PeerId(2), b"down");
    f1.multicast(&g, b"down");
    assert_eq!((f1.counters().refused - refused, f1.stats().tx_down), (2, 2));
    for _ in 0..100 {
        at(&mut fabrics, 0).multicast(&g, b"lost");
        poll_all(&mut fabrics, &mut inboxes);
        wire.advance(QP_RECOVERY_INTERVAL_NS / 200);
    }
    let f1 = at(&mut fabrics, 1);
    let s = f1.stats();
    assert_eq!((f1.nic().stats().recv.posts, s.rx_dry, s.rx_flushed, s.qp_failures), (posts, dry, 63, 1));
    assert_eq!(f1.counters().overrun, 1);
    assert_eq!(s.qp_recovery_failures, 1, "at most one attempt per interval");
    assert!(wire.lost_down() >= 100);
    assert!(inboxes[1].is_empty());
    // The next interval: another attempt, failing again; then one that works.
    wire.advance(QP_RECOVERY_INTERVAL_NS / 2);
    poll_all(&mut fabrics, &mut inboxes);
    assert_eq!(at(&mut fabrics, 1).stats().qp_recovery_failures, 2);
    wire.fail_recovery(false);
    wire.advance(QP_RECOVERY_INTERVAL_NS);
    poll_all(&mut fabrics, &mut inboxes);
    let f1 = at(&mut fabrics, 1);
    let s = f1.stats();
    assert!(!f1.nic().failed());
    assert_eq!((s.qp_recoveries, s.qp_recovery_failures, s.posted_now), (1, 2, 64));
    // Multicast arrives again (the group was attached again after the reset), and unicast.
    at(&mut fabrics, 0).multicast(&g, b"back");
    at(&mut fabrics, 1).send(PeerId(2), b"up");
    poll_all(&mut fabrics, &mut inboxes);
    assert_eq!(inboxes[1], vec![(PeerId(0), b"back".to_vec())]);
    assert!(inboxes[2].contains(&(PeerId(1), b"up".to_vec())));
    assert_eq!(at(&mut fabrics, 1).stats().qp_failures, 1);
}

#[test]
fn groups_that_map_to_one_mgid_share_its_attachment() {
    let wire = Wire::new();
    let (g1, g2): (GroupId, GroupId) = ([0x41; 14], [0x42; 14]);
    let mut fabrics = trio(&wire, &[0x40; 14]);
    // Both groups' addresses map to one MGID (as two 239/8 hashes can).
    let mgid = [0xee; 16];
    wire.override_mgid(Some(mgid));
    for f in fabrics.iter_mut().flatten() {
        f.join(&g1).expect("join");
        f.join(&g2).expect("join");
    }
    assert_eq!(wire.attached(&mgid), 3, "one attachment per QP");
    // Member 1 leaves one: it still hears the other.
    at(&mut fabrics, 1).leave(&g1);
    assert_eq!(wire.attached(&mgid), 3);
    at(&mut fabrics, 0).multicast(&g2, b"still there");
    let mut inboxes = vec![Vec::new(); 3];
    poll_all(&mut fabrics, &mut inboxes);
    assert_eq!(inboxes[1], vec![(PeerId(0), b"still there".to_vec())]);
    // Leaving the last detaches.
    at(&mut fabrics, 1).leave(&g2);
    assert_eq!(wire.attached(&mgid), 2);
    assert_eq!(at(&mut fabrics, 1).nic().live_groups(), 2, "the discovery group and [0x40; 14]");
}

#[test]
fn a_join_with_another_source_gid_index_fails_naming_the_index_to_set() {
    let wire = Wire::new();
    // At start: the discovery group's join is the first.
    wire.override_join_sgid(Some(3));
    let nic = wire.nic(8, 8, MTU + HEADER_LEN, JoinMode::Rdmacm);
    match VerbsFabric::new(nic, spec(0, 2, 1)) {
        Err(VerbsError::Invalid(m)) => assert!(m.contains("RINGCAST_VERBS_GID_INDEX=3"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Later joins too, and nothing stays joined.
    wire.override_join_sgid(None);
    let nic = wire.nic(8, 8, MTU + HEADER_LEN, JoinMode::Rdmacm);
    let mut f = VerbsFabric::new(nic, spec(0, 2, 1)).expect("matching index");
    wire.override_join_sgid(Some(1));
    let e = f.join(&[9; 14]).expect_err("mismatch");
    assert!(e.to_string().contains("RINGCAST_VERBS_GID_INDEX=1"), "{e}");
    assert_eq!((f.groups(), f.nic().live_groups()), (0, 1));
}

#[test]
fn hellos_back_off_while_a_member_is_missing_and_a_late_member_is_still_found() {
    // Four members, member 3 absent for a minute: the three others find each other, then keep
    // asking for member 3 with intervals doubling from 10 ms to the 1 s cap, and nobody answers
    // NEEDs from members that know it already. (Before the back-off: 6000 NEEDs each, and an
    // answer to every one.)
    let wire = Wire::new();
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..3).map(|i| Some(member(&wire, i, 4, 1 + u64::from(i)))).chain([None]).collect();
    let seconds = 60;
    let mut inboxes = vec![Vec::new(); 4];
    for _ in 0..seconds * 1_000_000_000 / HELLO_NS {
        poll_all(&mut fabrics, &mut inboxes);
        wire.advance(HELLO_NS);
    }
    let doublings = (HELLO_BACKOFF_CAP_NS / HELLO_NS).ilog2() as u64 + 1;
    for f in fabrics.iter().flatten() {
        let s = f.stats();
        assert_eq!(s.known_now, 2);
        assert!(s.hellos_sent <= 2 + doublings + seconds, "{} NEEDs", s.hellos_sent);
        assert!(s.replies_sent <= 2, "{} answers: only to members that missed this one", s.replies_sent);
    }
    // Member 3 starts: its NEED is answered by everyone (their bitmaps say they miss it, its
    // says it misses them), and everyone learns it from that NEED.
    fabrics[3] = Some(member(&wire, 3, 4, 4));
    let rounds = discover(&wire, &mut fabrics, HELLO_NS, 10).expect("member 3 found");
    assert!(rounds <= 2, "{rounds} rounds");
    // Then the wire goes quiet.
    let before = wire.counts().0;
    for _ in 0..100 {
        poll_all(&mut fabrics, &mut inboxes);
        wire.advance(HELLO_NS);
    }
    assert_eq!(wire.counts().0, before);
}

#[test]
fn an_address_handle_that_could_not_be_made_is_retried_from_the_tick() {
    let wire = Wire::new();
    wire.fail(false, true, false);
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..2).map(|i| Some(member(&wire, i, 2, 1 + u64::from(i)))).collect();
    let mut inboxes = vec![Vec::new(); 2];
    for _ in 0..2 {
        poll_all(&mut fabrics, &mut inboxes);
        wire.advance(HELLO_NS);
    }
    for f in fabrics.iter().flatten() {
        assert_eq!((f.peers().entry(1 - f.local().0).is_some(), f.peers().known()), (true, 0));
        assert!(f.stats().ah_errors >= 1);
        assert!(!f.peers().complete(), "an entry without a handle is not a route");
    }
    // From now on every HELLO is lost: the handles can only come from the tick's retries.
    wire.set_drop(Some(Box::new(|_, _, m: &[u8]| m.get(3) == Some(&Kind::Hello.to_wire()))));
    wire.fail(false, false, false);
    assert!(discover(&wire, &mut fabrics, HELLO_NS, 3).is_some(), "complete once the handles exist");
    at(&mut fabrics, 0).send(PeerId(1), b"routed");
    poll_all(&mut fabrics, &mut inboxes);
    assert_eq!(inboxes[1], vec![(PeerId(0), b"routed".to_vec())]);
    assert_eq!(at(&mut fabrics, 0).stats().tx_unknown, 0);
}

#[test]
fn a_retired_address_handle_is_freed_by_the_next_send_even_off_the_signal_grid() {
    let wire = Wire::new();
    let mut fabrics: Vec<Option<VerbsFabric<FakeNic>>> =
        (0..2).map(|i| Some(member(&wire, i, 2, 5))).collect();
    discover(&wire, &mut fabrics, HELLO_NS, 10).expect("discovery");
    let f0 = at(&mut fabrics, 0);
    let every = 32 / 4; // member(): depth 32, a completion every 8th send
                        // Unsignalled sends in flight, and the next send off the grid.
    while f0.nic().stats().send.posts % every != 2 || f0.stats().in_flight_now == 0 {
        f0.send(PeerId(1), b"unsignalled");
        f0.poll(64, &mut |_, _| {});
    }
    assert!(f0.stats().in_flight_now > 0);
    // Member 1 restarts (a HELLO without NEED of a new incarnation): its old handle is retired.
    let me = f0.address().qpn;
    wire.inject(me, 0x999, &hello_frame(1, 6, 0x999, HELLO_REPLY, None));
    f0.poll(64, &mut |_, _| {});
    assert_eq!((f0.stats().peers_restarted, f0.stats().retired_now), (1, 1));
    // Idle: it waits.
    for _ in 0..10 {
        f0.poll(64, &mut |_, _| {});
    }
    assert_eq!(f0.stats().retired_now, 1);
    // The next send asks for a completion, whose arrival frees it.
    f0.send(PeerId(1), b"signalled");
    f0.poll(64, &mut |_, _| {});
    assert_eq!((f0.stats().retired_now, f0.stats().in_flight_now), (0, 0));
}

#[test]
fn receive_error_counters_add_up_and_flushes_are_no_overrun() {
    let wire = Wire::new();
    let mut f = member(&wire, 0, 2, 1);
    let me = f.address().qpn;
    // A completion naming a slot the NIC does not hold: counted by the fabric, kept in stats().
    wire.inject_bogus_completion(me);
    f.poll(8, &mut |_, _| panic!("nothing to deliver"));
    assert_eq!((f.stats().rx_errors, f.counters().overrun), (1, 0));
    // An error completion: one receive error (a message lost: overrun), the other 63 posted
    // receives flushed (no message: not overrun).
    wire.inject_error(me);
    f.poll(8, &mut |_, _| panic!("nothing to deliver"));
    let s = f.stats();
    assert_eq!((s.rx_errors, s.rx_flushed, s.qp_failures), (2, 63, 1));
    assert_eq!(f.counters().overrun, 1);
}

fn at(fabrics: &mut [Option<VerbsFabric<FakeNic>>], i: usize) -> &mut VerbsFabric<FakeNic> {
    fabrics[i].as_mut().expect("a live member")
}
