//! The `shm` fabric across real processes: four member processes (this test binary
//! re-executed in a role) exchange multicast and unicast datagrams with checked contents; a
//! slow reader loses datagrams — counted, never wrong bytes; a member SIGKILLed mid-send does
//! not disturb the others. Every test removes its job's segments and checks that `/dev/shm`
//! holds no `ringcast-<job>-*` file afterwards.
use ringcast_offload::fabric::shm::{cleanup, ShmFabric, ShmGeometry};
use ringcast_offload::fabric::{Fabric, Take};
use ringcast_proto::comm::{GroupId, PeerId};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "RINGCAST_SHM_TEST_ROLE";
const JOB: &str = "RINGCAST_SHM_TEST_JOB";
const ME: &str = "RINGCAST_SHM_TEST_ME";
const CHILD_TEST: &str = "shm_member_role";
const GROUP: GroupId = *b"ringcast-test!";
const MTU: usize = 1472;
const MEMBERS: u32 = 4;
const MCAST_COUNT: u64 = 400;
const UNICAST_COUNT: u64 = 200;

const READY: u8 = b'R';
const DATA_UNICAST: u8 = b'U';
const DATA_MCAST: u8 = b'M';
const DONE: u8 = b'D';

/// Datagram `i` of `kind` from `from`: kind, sender, `i`, then a pattern; 10..=1009 bytes.
fn frame(kind: u8, from: u32, i: u64) -> Vec<u8> {
    let len = 10 + ((i * 131 + u64::from(from) * 17) % 1000) as usize;
    let mut v = vec![kind, from as u8];
    v.extend(i.to_le_bytes());
    v.extend((10..len).map(|k| (i as u8).wrapping_mul(29) ^ (k as u8) ^ kind));
    v
}

/// Checks `bytes` is exactly some `frame(kind, from, i)` sent by `from`; returns `(kind, i)`.
fn parse(from: PeerId, bytes: &[u8]) -> (u8, u64) {
    assert!(bytes.len() >= 10, "short datagram from {from:?}: {bytes:?}");
    assert_eq!(u32::from(bytes[1]), from.0, "datagram claims another sender");
    let i = u64::from_le_bytes(bytes[2..10].try_into().unwrap());
    assert_eq!(bytes, &frame(bytes[0], from.0, i)[..], "wrong bytes from {from:?}");
    (bytes[0], i)
}

fn unique_job(tag: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("t{tag}{}x{n}", std::process::id())
}

/// Files of `job` left in /dev/shm.
/// The job's segments in `/dev/shm` now.
fn segments(job: &str) -> Vec<String> {
    let prefix = format!("ringcast-{job}-");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The job's segments once its members' reapers had their few hundred milliseconds to remove
/// what nobody maps (`ringcast_ring::Reaper`: a dismissed one scans once more); anything still
/// there after 5 s is left behind.
fn leftovers(job: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = segments(job);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unlinks the job's segments when dropped, also when a test fails.
struct JobGuard(String);

impl Drop for JobGuard {
    fn drop(&mut self) {
        let _ = cleanup(&self.0);
    }
}

/// What one member has received, checked as it arrives.
struct Checker {
    me: u32,
    next_unicast: Vec<u64>,
    last_mcast: Vec<Option<u64>>,
    mcast: Vec<u64>,
    ready: Vec<bool>,
    done: Vec<bool>,
}

impl Checker {
    fn new(me: u32, members: u32) -> Checker {
        let n = members as usize;
        Checker {
            me,
            next_unicast: vec![0; n],
            last_mcast: vec![None; n],
            mcast: vec![0; n],
            ready: vec![false; n],
            done: vec![false; n],
        }
    }

    fn rx(&mut self, from: PeerId, bytes: &[u8]) {
        assert_ne!(from.0, self.me, "own datagram delivered");
        let f = from.0 as usize;
        match parse(from, bytes) {
            (READY, _) => self.ready[f] = true,
            (DONE, _) => self.done[f] = true,
            (DATA_UNICAST, i) => {
                assert_eq!(i, self.next_unicast[f], "unicast from {f} lost, duplicated or reordered");
                self.next_unicast[f] += 1;
            }
            (DATA_MCAST, i) => {
                assert!(
                    self.last_mcast[f].is_none_or(|l| i > l),
                    "multicast from {f} duplicated or reordered"
                );
                self.last_mcast[f] = Some(i);
                self.mcast[f] += 1;
            }
            (kind, _) => panic!("unknown kind {kind}"),
        }
    }

    fn poll(&mut self, fabric: &mut ShmFabric) -> usize {
        fabric.poll(64, &mut |from, bytes| self.rx(from, bytes))
    }
}

/// Sends until the ring takes it (the application's retry: the fabric itself drops).
fn send_reliably(fabric: &mut ShmFabric, checker: &mut Checker, to: PeerId, bytes: &[u8], deadline: Instant) {
    loop {
        let before = fabric.counters();
        fabric.send(to, bytes);
        let after = fabric.counters();
        assert_eq!(after.refused, before.refused, "send to {to:?} refused");
        if after.overrun == before.overrun {
            return;
        }
        assert!(Instant::now() < deadline, "ring to {to:?} stayed full");
        checker.poll(fabric);
        std::thread::yield_now();
    }
}

fn spawn_role(role: &str, job: &str, me: u32) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(JOB, job)
        .env(ME, me.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_success(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Entry point of the child members (nothing to do when run directly).
#[test]
fn shm_member_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let job = std::env::var(JOB).unwrap();
    let me: u32 = std::env::var(ME).unwrap().parse().unwrap();
    match role.as_str() {
        "member" => member(&job, me),
        "flooder" => flooder(&job, me),
        other => panic!("unknown role {other}"),
    }
}

/// One of the four members of `four_members_exchange`.
fn member(job: &str, me: u32) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut fabric = ShmFabric::new(job, PeerId(me), MEMBERS, MTU).unwrap();
    fabric.join(&GROUP).unwrap();
    let mut checker = Checker::new(me, MEMBERS);
    let peers: Vec<PeerId> = (0..MEMBERS).filter(|&p| p != me).map(PeerId).collect();
    // Every peer exists (its inbound rings), then READY: a READY from p means p has joined,
    // so once we hold all of them nobody's multicasts can precede a member's reader.
    for &p in &peers {
        while !fabric.connect(p) {
            assert!(Instant::now() < deadline, "peer {p:?} never appeared");
            std::thread::sleep(Duration::from_millis(1));
        }
        send_reliably(&mut fabric, &mut checker, p, &frame(READY, me, 0), deadline);
    }
    while !peers.iter().all(|p| checker.ready[p.0 as usize]) {
        assert!(Instant::now() < deadline, "READY missing");
        checker.poll(&mut fabric);
        std::thread::yield_now();
    }
    let mut ring_full = 0;
    for i in 0..MCAST_COUNT.max(UNICAST_COUNT) {
        if i < MCAST_COUNT {
            fabric.multicast(&GROUP, &frame(DATA_MCAST, me, i));
        }
        if i < UNICAST_COUNT {
            for &p in &peers {
                let before = fabric.counters().overrun;
                send_reliably(&mut fabric, &mut checker, p, &frame(DATA_UNICAST, me, i), deadline);
                ring_full += fabric.counters().overrun - before;
            }
        }
        checker.poll(&mut fabric);
    }
    for &p in &peers {
        send_reliably(&mut fabric, &mut checker, p, &frame(DONE, me, 0), deadline);
    }
    while !peers.iter().all(|p| checker.done[p.0 as usize]) {
        assert!(Instant::now() < deadline, "DONE missing");
        checker.poll(&mut fabric);
        std::thread::yield_now();
    }
    // Every peer's multicasts were written before its DONE: drain the log (past any stall).
    let mut idle = 0;
    while idle < 10_000 {
        idle = if checker.poll(&mut fabric) == 0 { idle + 1 } else { 0 };
    }
    let c = fabric.counters();
    let log_lost = c.overrun - ring_full;
    let missing: u64 = peers.iter().map(|p| MCAST_COUNT - checker.mcast[p.0 as usize]).sum();
    for p in &peers {
        assert_eq!(checker.next_unicast[p.0 as usize], UNICAST_COUNT, "unicasts from {p:?}");
    }
    assert!(missing <= log_lost, "{missing} multicasts missing but only {log_lost} counted lost");
    assert_eq!(c.refused, 0);
    assert_eq!(c.multicast, MCAST_COUNT);
    eprintln!("member {me}: received {} ({missing} multicasts lost), counters {c:?}", c.received);
}

/// Member 1 of `member_killed_mid_send`: multicasts and unicasts without pause until killed.
fn flooder(job: &str, me: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut fabric = ShmFabric::new(job, PeerId(me), 3, MTU).unwrap();
    fabric.join(&GROUP).unwrap();
    let mut i = 0u64;
    while Instant::now() < deadline {
        fabric.multicast(&GROUP, &frame(DATA_MCAST, me, i));
        for p in [0, 2] {
            fabric.send(PeerId(p), &frame(DATA_UNICAST, me, i));
        }
        // Drain our inbound rings so nobody's sends to us pile up (not needed for the test).
        fabric.poll(16, &mut |_, _| {});
        i += 1;
    }
}

#[test]
fn four_members_exchange() {
    let job = unique_job("four");
    let guard = JobGuard(job.clone());
    let mut children: Vec<Child> = (0..MEMBERS).map(|me| spawn_role("member", &job, me)).collect();
    let ok: Vec<bool> = children.iter_mut().map(|c| wait_success(c, Duration::from_secs(120))).collect();
    assert!(ok.iter().all(|&ok| ok), "members failed: {ok:?}");
    // The last member out removed the job's segments (issue 13): nothing for `cleanup`.
    assert_eq!(leftovers(&job), Vec::<String>::new(), "the members left their segments");
    assert_eq!(cleanup(&job).unwrap(), 0);
    drop(guard);
}

#[test]
fn slow_reader_loses_counted_datagrams() {
    let job = unique_job("slow");
    let guard = JobGuard(job.clone());
    let geometry = ShmGeometry { log_slots: 64, ring_slots: 16 };
    let mut a = ShmFabric::with_geometry(&job, PeerId(0), 2, MTU, geometry).unwrap();
    let mut b = ShmFabric::with_geometry(&job, PeerId(1), 2, MTU, geometry).unwrap();
    a.join(&GROUP).unwrap();
    b.join(&GROUP).unwrap();
    for i in 0..1000 {
        a.multicast(&GROUP, &frame(DATA_MCAST, 0, i));
    }
    for i in 0..20 {
        a.send(PeerId(1), &frame(DATA_UNICAST, 0, i));
    }
    assert_eq!(a.counters().overrun, 4, "a 16-slot ring takes 16 of 20");
    // `b` reads only now: the log holds the last 64 multicasts; the 936 before are lost.
    let mut checker = Checker::new(1, 2);
    while checker.poll(&mut b) > 0 {}
    assert_eq!(checker.mcast[0], 64);
    assert_eq!(checker.last_mcast[0], Some(999));
    assert_eq!(checker.next_unicast[0], 16);
    let c = b.counters();
    assert_eq!((c.received, c.overrun, c.refused), (80, 936, 0));
    // `a` never receives its own multicasts; oversized and misaddressed datagrams are refused.
    assert_eq!(a.poll(100, &mut |_, _| panic!("own datagram")), 0);
    a.multicast(&GROUP, &vec![0; MTU + 1]);
    a.send(PeerId(1), &vec![0; MTU + 1]);
    a.send(PeerId(7), b"x");
    a.send(PeerId(0), b"self");
    assert_eq!(a.counters().refused, 4);
    // Leaving keeps the loss count, unmaps the log and unlinks its name (a communicator's group
    // is left only once every member is done with it): nothing of it stays in /dev/shm.
    let log = ringcast_offload::fabric::shm::log_name(&job, &GROUP);
    assert_eq!((a.groups(), b.groups()), (1, 1));
    assert!(segments(&job).contains(&log));
    b.leave(&GROUP);
    assert_eq!(b.groups(), 0);
    assert_eq!(b.counters().overrun, 936);
    assert!(!segments(&job).contains(&log), "the log's name outlived the leave");
    a.leave(&GROUP);
    assert_eq!(a.groups(), 0);
    // Joined again, a group starts with a fresh log.
    b.join(&GROUP).unwrap();
    assert!(segments(&job).contains(&log));
    assert_eq!(b.poll(100, &mut |_, _| panic!("nothing new")), 0);
    drop(a);
    assert!(segments(&job).contains(&log), "b still maps its log");
    drop(b);
    assert_eq!(leftovers(&job), Vec::<String>::new(), "the last member out leaves nothing");
    drop(guard);
}

/// A multicast sent before a unicast is delivered before it, whatever source the member's
/// round-robin would take next: a NIC's one receive queue keeps that order, and the protocol
/// relies on it (a have-all overtaking the multicast made a receiver ask for the whole
/// message again). Here member 2's unicast is sent after it has read member 0's multicasts,
/// as a ring predecessor's have-all is.
#[test]
fn a_multicast_sent_before_a_unicast_is_delivered_first() {
    let job = unique_job("order");
    let guard = JobGuard(job.clone());
    let mut f: Vec<ShmFabric> = (0..3).map(|m| ShmFabric::new(&job, PeerId(m), 3, MTU).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
    }
    for round in 0..4u64 {
        for i in 0..50 {
            f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, round * 50 + i));
        }
        // Member 2 reads them all, then tells member 1 (a unicast after the multicast).
        let mut seen = 0;
        while f[2].poll(64, &mut |_, _| seen += 1) > 0 {}
        assert_eq!(seen, 50);
        f[2].send(PeerId(1), &frame(DATA_UNICAST, 2, round));
        // Member 1 reads in small polls, so each poll starts where the last one stopped.
        let mut order = Vec::new();
        while f[1].poll(7, &mut |from, b| order.push(parse(from, b).0)) > 0 {}
        assert_eq!(order.len(), 51, "round {round}");
        assert_eq!(
            order.last(),
            Some(&DATA_UNICAST),
            "round {round}: the unicast came before a multicast sent before it: {order:?}"
        );
    }
    drop(f);
    drop(guard);
}

/// Back-pressure (`poll_keeping`): a log datagram the receiver declines stays at its cursor with
/// everything after it — offered again, in order and whole, after `resume`, nothing lost —
/// while ring datagrams still come through; another reader is not affected.
#[test]
fn a_declined_multicast_stays_in_the_log_until_resumed() {
    let job = unique_job("keep");
    let guard = JobGuard(job.clone());
    let mut f: Vec<ShmFabric> = (0..3).map(|m| ShmFabric::new(&job, PeerId(m), 3, MTU).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
    }
    for i in 0..10 {
        f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, i));
    }
    let mut got = Vec::new();
    let taken = f[1].poll_keeping(64, &mut |from, b, keepable| {
        let (kind, i) = parse(from, b);
        assert!(keepable, "a log datagram can be kept");
        if i == 3 {
            return Take::Declined;
        }
        got.push((kind, i));
        Take::Taken
    });
    assert_eq!((taken, got.len()), (3, 3), "0, 1, 2 taken, 3 declined: {got:?}");
    assert_eq!(f[1].poll_keeping(64, &mut |_, _, _| Take::Taken), 0, "the log waits behind 3");
    f[2].send(PeerId(1), &frame(DATA_UNICAST, 2, 0));
    f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, 10));
    let taken = f[1].poll_keeping(64, &mut |from, b, keepable| {
        got.push(parse(from, b));
        assert!(!keepable, "a ring datagram is taken");
        Take::Taken
    });
    assert_eq!(taken, 1, "the ring datagram comes through a declined log");
    f[1].resume();
    while f[1].poll_keeping(4, &mut |from, b, _| {
        got.push(parse(from, b));
        Take::Taken
    }) > 0
    {}
    let mut want: Vec<(u8, u64)> = (0..3).map(|i| (DATA_MCAST, i)).collect();
    want.push((DATA_UNICAST, 0));
    want.extend((3..11).map(|i| (DATA_MCAST, i)));
    assert_eq!(got, want);
    assert_eq!(f[1].counters().overrun, 0, "nothing lost");
    let mut other = 0;
    while f[2].poll(64, &mut |from, b| {
        parse(from, b);
        other += 1;
    }) > 0
    {}
    assert_eq!(other, 11, "another reader is not held back");
    drop(f);
    drop(guard);
}

/// A ring datagram whose handler answers `Take::Resume` (it made a post) resumes a declined
/// log at once: the next ring datagram is fenced behind the log's datagrams again, as a
/// have-all must not overtake the fragments it speaks of.
#[test]
fn a_resume_answer_fences_the_next_ring_datagram_behind_the_log_again() {
    let job = unique_job("resume");
    let guard = JobGuard(job.clone());
    let mut f: Vec<ShmFabric> = (0..3).map(|m| ShmFabric::new(&job, PeerId(m), 3, MTU).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
    }
    f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, 0));
    f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, 1));
    f[2].send(PeerId(1), &frame(READY, 2, 0)); // a SYNC_DOWN, say: it makes the post
    f[2].send(PeerId(1), &frame(DONE, 2, 1)); // a have-all, say
    let (mut order, mut declined) = (Vec::new(), false);
    while f[1].poll_keeping(64, &mut |from, b, _| {
        let (kind, i) = parse(from, b);
        if kind == DATA_MCAST && !declined {
            declined = true;
            return Take::Declined;
        }
        order.push((kind, i));
        if kind == READY {
            Take::Resume
        } else {
            Take::Taken
        }
    }) > 0
    {}
    assert_eq!(
        order,
        [(READY, 0), (DATA_MCAST, 0), (DATA_MCAST, 1), (DONE, 1)],
        "after the resume the log came before the next ring datagram"
    );
    drop(f);
    drop(guard);
}

/// The fabric's ledger counts each datagram's bytes once where they are written into the wire
/// (a ring slot, the group's log — once, whatever the readers), once per reader where a log
/// datagram is copied out of the log (its seqlock checks a copy), nothing where a ring datagram
/// is read — it is handed over in its slot — and nothing for a datagram it refused. Seen
/// failing before the receive in place: member 1's receive copies were its ring datagram's too.
#[test]
fn the_ledger_counts_one_copy_into_the_wire_and_one_out_of_the_log_per_reader() {
    use ringcast_proto::ledger::Side;
    let job = unique_job("ledger");
    let guard = JobGuard(job.clone());
    let mut f: Vec<ShmFabric> = (0..3).map(|m| ShmFabric::new(&job, PeerId(m), 3, MTU).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
    }
    let (m, u) = (frame(DATA_MCAST, 0, 1), frame(DATA_UNICAST, 0, 2));
    f[0].multicast(&GROUP, &m);
    f[0].send(PeerId(1), &u);
    f[0].send(PeerId(2), &vec![0; MTU + 1]); // refused: nothing copied
    let sent = f[0].ledger();
    assert_eq!(sent.copied_bytes(Side::Send), (m.len() + u.len()) as u64);
    assert_eq!(sent.copied_bytes(Side::Receive), 0);
    let mut got = [0u64; 3];
    for k in 1..3 {
        while f[k].poll(64, &mut |_, b| got[k] += b.len() as u64) > 0 {}
        assert_eq!(
            f[k].ledger().copied_bytes(Side::Receive),
            m.len() as u64,
            "member {k}: the log read only"
        );
        assert_eq!(f[k].ledger().copied_bytes(Side::Send), 0);
    }
    assert_eq!(got[1], (m.len() + u.len()) as u64);
    assert_eq!(got[2], m.len() as u64);
    drop(f);
    drop(guard);
}

/// Where this process maps the segment `name` (`/proc/self/maps`): its address range. A
/// segment created here is mapped under its creation name (`<name>.tmp.<pid>.<n>`, since
/// removed: the name it was linked to is not what the kernel shows).
fn mapped_range(name: &str) -> Option<std::ops::Range<usize>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = format!("/dev/shm/{name}");
    let ours =
        |file: &str| file.strip_prefix(path.as_str()).is_some_and(|r| r.is_empty() || r.starts_with(".tmp."));
    maps.lines().find(|l| l.split_whitespace().nth(5).is_some_and(ours)).and_then(|l| {
        let (a, b) = l.split_whitespace().next()?.split_once('-')?;
        Some(usize::from_str_radix(a, 16).ok()?..usize::from_str_radix(b, 16).ok()?)
    })
}

/// A ring datagram is handed to the receiver where it lies in its ring slot — the bytes `rx`
/// reads are inside the mapping of the sender's ring — not copied into a buffer of the fabric;
/// and while it is held back behind a multicast sent before it (a poll whose budget ends at
/// the multicast), it stays in its slot: a 2-slot ring holding two datagrams refuses a third
/// (`overrun`) until the receiver has handled them. Seen failing before the receive in place
/// (the bytes were read from the fabric's heap buffer, and the held datagram's slot had been
/// freed, so the third send went through).
#[test]
fn a_ring_datagram_is_handed_over_in_its_slot() {
    let job = unique_job("inplace");
    let guard = JobGuard(job.clone());
    let geometry = ShmGeometry { ring_slots: 2, ..ShmGeometry::default() };
    let mut f: Vec<ShmFabric> =
        (0..2).map(|m| ShmFabric::with_geometry(&job, PeerId(m), 2, MTU, geometry).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
    }
    let ring = mapped_range(&ringcast_offload::fabric::shm::ring_name(&job, PeerId(0), PeerId(1)))
        .expect("member 1 maps its inbound ring");
    f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, 0));
    f[0].send(PeerId(1), &frame(DATA_UNICAST, 0, 1));
    f[0].send(PeerId(1), &frame(DATA_UNICAST, 0, 2));
    let mut seen = Vec::new();
    assert_eq!(f[1].poll(1, &mut |from, b| seen.push(parse(from, b))), 1);
    assert_eq!(seen, [(DATA_MCAST, 0)], "the multicast first; the unicast held");
    let overrun = f[0].counters().overrun;
    f[0].send(PeerId(1), &frame(DATA_UNICAST, 0, 3));
    assert_eq!(f[0].counters().overrun, overrun + 1, "the held datagram still fills its slot");
    let mut at = Vec::new();
    while f[1].poll(1, &mut |from, b| {
        seen.push(parse(from, b));
        at.push(b.as_ptr() as usize..b.as_ptr() as usize + b.len());
    }) > 0
    {}
    assert_eq!(seen[1..], [(DATA_UNICAST, 1), (DATA_UNICAST, 2)]);
    for a in &at {
        assert!(ring.start <= a.start && a.end <= ring.end, "read at {a:x?}, outside the ring {ring:x?}");
    }
    assert_ne!(at[0].start, at[1].start, "each in its own slot");
    // Released: the ring takes datagrams again.
    f[0].send(PeerId(1), &frame(DATA_UNICAST, 0, 4));
    assert_eq!(f[0].counters().overrun, overrun + 1);
    assert_eq!(f[1].poll(8, &mut |from, b| assert_eq!(parse(from, b), (DATA_UNICAST, 4))), 1);
    drop(f);
    drop(guard);
}

/// What a peer writes into a ring slot is checked before the slot is lent: a frame claiming
/// another sender, or longer than the fabric's datagram, is consumed and counted `refused`,
/// never handed over, and the datagram behind it is delivered (in its slot) as usual.
#[test]
fn a_ring_slot_with_a_wrong_sender_or_length_is_refused_not_lent() {
    use ringcast_ring::{frame_ring_producer, push_frame};
    let job = unique_job("badslot");
    let guard = JobGuard(job.clone());
    let mut b = ShmFabric::new(&job, PeerId(1), 2, 100).unwrap();
    // Member 0's ring into member 1, written by hand: what a broken member 0 could put there.
    let mut p =
        frame_ring_producer(&ringcast_offload::fabric::shm::ring_name(&job, PeerId(0), PeerId(1))).unwrap();
    push_frame(&mut p, 1, b"claims to be member 1").unwrap();
    push_frame(&mut p, 0, &[7; 101]).unwrap();
    push_frame(&mut p, 0, b"fine").unwrap();
    let mut got = Vec::new();
    while b.poll(8, &mut |from, d| got.push((from, d.to_vec()))) > 0 {}
    assert_eq!(got, [(PeerId(0), b"fine".to_vec())]);
    assert_eq!((b.counters().received, b.counters().refused), (1, 2));
    drop((p, b));
    drop(guard);
}

/// The order above does not starve anyone: a ring datagram waits only for the multicasts
/// visible when it was seen, not for logs that keep filling, and a busy group's log does not
/// keep another group's waiting. The reader polls 8 datagrams at a time while 30 new multicasts
/// arrive on one group between its polls.
#[test]
fn busy_logs_starve_neither_the_rings_nor_other_logs() {
    const OTHER: GroupId = *b"ringcast-test2";
    let job = unique_job("fair");
    let guard = JobGuard(job.clone());
    let mut f: Vec<ShmFabric> = (0..3).map(|m| ShmFabric::new(&job, PeerId(m), 3, MTU).unwrap()).collect();
    for x in &mut f {
        x.join(&GROUP).unwrap();
        x.join(&OTHER).unwrap();
    }
    for i in 0..3 {
        f[2].multicast(&OTHER, &frame(DATA_MCAST, 2, i));
    }
    f[2].send(PeerId(1), &frame(DATA_UNICAST, 2, 0));
    let (mut unicast_at, mut other) = (None, 0);
    for step in 0..20u64 {
        for i in 0..30 {
            f[0].multicast(&GROUP, &frame(DATA_MCAST, 0, step * 30 + i));
        }
        f[1].poll(8, &mut |from, b| {
            let (kind, _) = parse(from, b);
            if kind == DATA_UNICAST {
                unicast_at.get_or_insert(step);
            } else if from == PeerId(2) {
                other += 1;
            }
        });
    }
    assert_eq!(other, 3, "the quiet group's multicasts were delivered");
    // 33 multicasts were visible when the unicast was seen: 5 polls of 8, then the unicast.
    let at = unicast_at.expect("the unicast was delivered while the log kept filling");
    assert!(at <= 5, "the unicast waited {at} polls");
    drop(f);
    drop(guard);
}

#[test]
fn member_killed_mid_send() {
    let job = unique_job("kill");
    let guard = JobGuard(job.clone());
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut f0 = ShmFabric::new(&job, PeerId(0), 3, MTU).unwrap();
    let mut f2 = ShmFabric::new(&job, PeerId(2), 3, MTU).unwrap();
    f0.join(&GROUP).unwrap();
    f2.join(&GROUP).unwrap();
    let mut c0 = Checker::new(0, 3);
    let mut c2 = Checker::new(2, 3);
    let mut child = spawn_role("flooder", &job, 1);
    // The flooder's unicast rings fill and drop (its business); what arrives must be exact —
    // except that dropped unicasts make gaps, so only multicast order is checked for member 1.
    let mut from_1 = 0;
    while from_1 < 300 {
        assert!(Instant::now() < deadline, "no traffic from the flooder");
        from_1 += f0.poll(64, &mut |from, bytes| {
            let (kind, _) = parse(from, bytes);
            if kind == DATA_MCAST {
                c0.rx(from, bytes);
            }
        });
        f2.poll(64, &mut |from, bytes| {
            parse(from, bytes);
        });
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // Members 0 and 2 carry on: unicast both ways, multicast both ways, contents checked.
    let n = 200u64;
    let sink = |c: &mut Checker, from: PeerId, bytes: &[u8]| {
        if from.0 != 1 {
            c.rx(from, bytes);
        } else {
            parse(from, bytes); // leftovers of the dead member: still exact bytes
        }
    };
    for i in 0..n {
        f0.multicast(&GROUP, &frame(DATA_MCAST, 0, i));
        f2.multicast(&GROUP, &frame(DATA_MCAST, 2, i));
        f0.send(PeerId(2), &frame(DATA_UNICAST, 0, i));
        f2.send(PeerId(0), &frame(DATA_UNICAST, 2, i));
        f0.poll(64, &mut |from, bytes| sink(&mut c0, from, bytes));
        f2.poll(64, &mut |from, bytes| sink(&mut c2, from, bytes));
    }
    let mut idle = 0;
    while idle < 20_000 {
        assert!(Instant::now() < deadline, "survivors stuck");
        let k = f0.poll(64, &mut |from, bytes| sink(&mut c0, from, bytes))
            + f2.poll(64, &mut |from, bytes| sink(&mut c2, from, bytes));
        idle = if k == 0 { idle + 1 } else { 0 };
    }
    assert_eq!(c0.next_unicast[2], n);
    assert_eq!(c2.next_unicast[0], n);
    assert_eq!((f0.counters().refused, f2.counters().refused), (0, 0));
    // A slot the flooder died in costs at most one datagram per reader; everything else of
    // the survivors' multicasts arrives.
    assert!(c0.mcast[2] >= n - 1, "member 0 got {} of {n} from 2", c0.mcast[2]);
    assert!(c2.mcast[0] >= n - 1, "member 2 got {} of {n} from 0", c2.mcast[0]);
    drop((f0, f2));
    // The flooder died holding its mappings (the kernel dropped its locks with it): the
    // survivors, the last out, remove everything of the job, its segments included.
    assert_eq!(leftovers(&job), Vec::<String>::new(), "left behind");
    drop(guard);
}
