//! BARRIER through whole engines on the simulated fabric: no rank completes before the last
//! rank of the communicator has posted — ranks arriving one by one, milliseconds apart, on
//! uniform and uneven worlds, with loss, reordering and duplicates; barriers back to back; the
//! ranks waiting for a late one back their `SYNC_UP` repeats off after a fast window; a
//! dead engine fails the survivors' barrier with a typed error instead of hanging; each bad
//! descriptor gets its typed status at the rank that posted it; and a stopping engine that
//! synchronized the others says itself how long it lingers (`Engine::drained`).
use ringcast_abi::{Access, Opcode, RegionKey, RegionRef, StatusKind, SubmissionDescriptor};
use ringcast_proto::comm::World;
use ringcast_proto::config::{EngineConfig, LocalRank};
use ringcast_proto::intake::regions::SegmentHandle;
use ringcast_proto::intake::HostId;
use ringcast_proto::rng::SimRng;
use ringcast_sim::cluster::{world_engines, Cluster, DmaTiming, Published};
use ringcast_sim::fabric::Faults;

struct Rank {
    node: usize,
    host: HostId,
    /// The scratch region (one byte per rank).
    scratch: RegionKey,
}

/// `counts[n]` processes on node `n`, each with its scratch registered.
fn cluster(
    counts: &[u32],
    faults: Faults,
    seed: u64,
    tweak: &dyn Fn(&mut EngineConfig),
) -> (Cluster, Vec<Rank>) {
    let world = World::from_counts(counts).unwrap();
    let engines = world_engines(&world, "barrier", tweak);
    let mut cluster = Cluster::new(
        engines,
        faults,
        SimRng::new(seed),
        crc32c::crc32c,
        DmaTiming::Now,
        SimRng::new(seed ^ 7),
    );
    let size = u64::from(world.size());
    let mut ranks = Vec::new();
    for r in 0..world.size() {
        let (node, local) = world.locate(r).unwrap();
        let m = &mut cluster.nodes[node as usize];
        let host = m.engine.attach_host(LocalRank::Fixed(local), 0).unwrap();
        m.engine.host_arrived(host);
        let seg = u64::from(local) << 48 | 0x5c;
        m.mem.insert(seg, vec![0u8; size as usize]);
        let scratch = m.engine.register(host, SegmentHandle(seg), size, 0, size, Access::READ_WRITE).unwrap();
        ranks.push(Rank { node: node as usize, host, scratch });
    }
    (cluster, ranks)
}

fn barrier(c: &mut Cluster, ranks: &[Rank], r: usize, cookie: u64) {
    let rank = &ranks[r];
    let d = SubmissionDescriptor::barrier(
        cookie,
        0,
        RegionRef { key: rank.scratch, offset: 0 },
        ranks.len() as u64,
    );
    c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
}

fn barriers(c: &Cluster) -> Vec<Published> {
    c.published().iter().filter(|p| p.cqe.opcode == Opcode::BARRIER).copied().collect()
}

/// Runs until `n` barriers completed, or until virtual time `until`.
fn run_until(c: &mut Cluster, n: usize, until: u64) {
    while barriers(c).len() < n && c.now() < until {
        if c.step().is_none() {
            break;
        }
    }
}

/// Moves virtual time to `at` (running whatever happens until then).
fn advance(c: &mut Cluster, at: u64) {
    c.wake(0, at);
    while c.now() < at {
        if c.step().is_none() {
            break;
        }
    }
}

/// Ranks post one by one, `gap` ns apart in a shuffled order: nothing completes before the last
/// post, and then every rank completes `Ok`.
fn staggered(counts: &[u32], faults: Faults, seed: u64) {
    let (mut c, ranks) = cluster(counts, faults, seed, &|_| {});
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    let mut rng = SimRng::new(seed ^ 0xba77);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.next_u64() as usize % (i + 1));
    }
    let gap = 2_000_000;
    let mut last_post = 0;
    for (i, &r) in order.iter().enumerate() {
        let at = c.now().max(i as u64 * gap);
        advance(&mut c, at);
        assert!(barriers(&c).is_empty(), "seed {seed}: a barrier completed before rank {r} posted");
        last_post = c.now();
        barrier(&mut c, &ranks, r, r as u64);
    }
    run_until(&mut c, ranks.len(), u64::MAX);
    let done = barriers(&c);
    assert_eq!(done.len(), ranks.len(), "seed {seed}: one completion per rank");
    for p in &done {
        assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "seed {seed}: {p:?}");
        assert_eq!(p.cqe.bytes, 0);
        assert!(p.at >= last_post, "seed {seed}: completed at {} before the last post at {last_post}", p.at);
    }
}

fn lossy() -> Faults {
    Faults { mcast_loss: 0.05, ucast_loss: 0.02, jitter: 3_000, duplicate: 0.01, ..Faults::clean() }
}

#[test]
fn no_rank_leaves_before_the_last_one_arrives() {
    staggered(&[1, 1, 1, 1], Faults::clean(), 1);
    staggered(&[2, 2, 2], Faults::clean(), 2);
    for seed in 0..4 {
        staggered(&[3, 3, 3, 3], lossy(), 10 + seed);
    }
}

#[test]
fn an_uneven_world_waits_for_every_rank() {
    staggered(&[2, 1, 3], lossy(), 21);
    staggered(&[8, 8, 7, 7], lossy(), 22);
    staggered(&[1, 4], Faults::clean(), 23);
}

/// Ten barriers back to back at every rank (each posted when the rank's previous one
/// completed), with loss: every rank completes every one, in order.
#[test]
fn barriers_back_to_back_complete_in_order() {
    let (mut c, ranks) = cluster(&[2, 3, 2], lossy(), 5, &|_| {});
    let rounds = 10u64;
    for r in 0..ranks.len() {
        barrier(&mut c, &ranks, r, (r as u64) << 16);
    }
    let mut next = vec![1u64; ranks.len()];
    let mut seen = 0;
    while seen < ranks.len() * rounds as usize {
        assert!(c.step().is_some(), "the queue ran dry with {seen} barriers done");
        let done = barriers(&c);
        for p in &done[seen..] {
            assert_eq!(p.cqe.status.0, StatusKind::Ok as u16, "{p:?}");
            let r = (p.cqe.cookie >> 16) as usize;
            assert_eq!(p.cqe.cookie & 0xffff, next[r] - 1, "rank {r}: in order");
            if next[r] < rounds {
                barrier(&mut c, &ranks, r, (r as u64) << 16 | next[r]);
            }
            next[r] += 1;
        }
        seen = done.len();
    }
}

/// One engine dies before its ranks post: the others' barrier fails with a typed error within
/// the protocol's bound, never hangs.
#[test]
fn a_dead_engine_fails_the_barrier_instead_of_hanging() {
    let tweak = |c: &mut EngineConfig| c.protocol.peer_timeout_ms = 300;
    let (mut c, ranks) = cluster(&[2, 2, 2], Faults::clean(), 9, &tweak);
    c.nodes[2].crash_at = Some(0);
    let alive: Vec<usize> = (0..ranks.len()).filter(|&r| ranks[r].node != 2).collect();
    for &r in &alive {
        barrier(&mut c, &ranks, r, r as u64);
    }
    run_until(&mut c, alive.len(), 5_000_000_000);
    let done = barriers(&c);
    assert_eq!(done.len(), alive.len(), "every survivor completes");
    for p in &done {
        let s = StatusKind::try_from(p.cqe.status).unwrap();
        assert!(matches!(s, StatusKind::PeerUnreachable | StatusKind::CommunicatorBroken), "{p:?}");
        assert!(p.at < 3_000_000_000, "failed within the bound: {p:?}");
    }
}

#[test]
fn bad_barriers_get_typed_errors_at_the_rank_that_posted_them() {
    let (mut c, ranks) = cluster(&[1, 1], Faults::clean(), 3, &|_| {});
    let (host, scratch) = (ranks[0].host, ranks[0].scratch);
    // Local rank 0's scratch segment again, read-only.
    let read_only =
        c.with_engine(0, |e, _| e.register(host, SegmentHandle(0x5c), 2, 0, 2, Access::READ).unwrap());
    let at = |key, offset| RegionRef { key, offset };
    // Refused for its scratch, or for a field a barrier does not read, a barrier is not refused
    // at once: it runs in step with rank 1's on no memory (`refused_buffers.rs`), ends with its
    // status at rank 0 and `Ok` at rank 1.
    let buffers = [
        // Scratch past the region's end.
        (SubmissionDescriptor::barrier(2, 0, at(scratch, 1), 2), StatusKind::OutOfBounds),
        // Scratch the engine may not write.
        (SubmissionDescriptor::barrier(3, 0, at(read_only, 0), 2), StatusKind::AccessDenied),
        // An unknown region.
        (SubmissionDescriptor::barrier(6, 0, at(RegionKey(0x7777), 0), 2), StatusKind::UnknownRegion),
        // Less than a byte per rank.
        (SubmissionDescriptor::barrier(7, 0, at(scratch, 0), 1), StatusKind::BadLength),
        // A root set: a barrier has none.
        (
            SubmissionDescriptor { root: 1, ..SubmissionDescriptor::barrier(8, 0, at(scratch, 0), 2) },
            StatusKind::BadDescriptor,
        ),
    ];
    for (i, (d, _)) in buffers.iter().enumerate() {
        c.with_engine(0, |e, now| e.handle_descriptor(host, d, now));
        barrier(&mut c, &ranks, 1, 200 + i as u64);
    }
    run_until(&mut c, 2 * buffers.len(), u64::MAX);
    let done = barriers(&c);
    assert_eq!(done.len(), 2 * buffers.len());
    for p in &done {
        let want = match buffers.iter().find(|(d, _)| p.node == 0 && d.cookie == p.cqe.cookie) {
            Some((_, s)) => *s,
            None => StatusKind::Ok,
        };
        assert_eq!(p.cqe.status.0, want as u16, "{p:?}");
    }
    let cases = [
        // A flag no version of the ABI defines: what it would ask for is unknown here, so the
        // call waits for rank 1's to learn it, and runs in step (`engine/call_shapes.rs`).
        (
            SubmissionDescriptor { flags: 0x80, ..SubmissionDescriptor::barrier(1, 0, at(scratch, 0), 2) },
            StatusKind::BadFlags,
        ),
        // A communicator this engine does not know: refused at once, not held behind the first
        // (another communicator; completions go out as calls end).
        (SubmissionDescriptor::barrier(5, 99, at(scratch, 0), 2), StatusKind::UnknownCommunicator),
    ];
    let before = barriers(&c).len();
    for (d, _) in &cases {
        c.with_engine(0, |e, now| e.handle_descriptor(host, d, now));
    }
    let later = c.now() + 1_000_000;
    advance(&mut c, later);
    assert_eq!(barriers(&c).len(), before + 1, "the unknown flag waits for rank 1's call");
    assert_eq!(barriers(&c)[before].cqe.cookie, 5, "the unknown communicator is refused at once");
    barrier(&mut c, &ranks, 1, 0x51);
    run_until(&mut c, before + 3, u64::MAX);
    // As each ended: the unknown communicator's first, then the call that waited for its shape.
    let at = |node| -> Vec<(u64, u16)> {
        barriers(&c)[before..]
            .iter()
            .filter(|p| p.node == node)
            .map(|p| (p.cqe.cookie, p.cqe.status.0))
            .collect()
    };
    let want: Vec<(u64, u16)> = cases.iter().rev().map(|(d, s)| (d.cookie, *s as u16)).collect();
    assert_eq!(at(ranks[0].node), want);
    assert_eq!(at(ranks[1].node), vec![(0x51, StatusKind::Ok as u16)]);
    // Both made the same calls on the world: a good barrier afterwards is the same call at
    // both, and succeeds.
    for r in 0..ranks.len() {
        barrier(&mut c, &ranks, r, 100 + r as u64);
    }
    run_until(&mut c, before + 5, u64::MAX);
    let done = barriers(&c);
    assert_eq!(done.len(), before + 5);
    assert!(done[before + 3..].iter().all(|p| p.cqe.status.0 == StatusKind::Ok as u16), "{done:?}");
}

/// The engines disagree on the call: ranks on engines 0 and 2 post a barrier where engine 1's
/// rank posts a broadcast (rooted at itself, or at engine 0), and then, once that returned, the
/// barrier the others posted. Every call ends typed within the protocol's bound: the barriers
/// matched with the broadcast `DigestMismatch`, never `Ok`; a broadcast whose root never sent
/// it never `Ok`; engine 1's later barrier `DigestMismatch` too, or — the calls that disagreed
/// broke the communicator (issue 38, `engine/call_checks.rs`) — `CommunicatorBroken`.
#[test]
fn a_barrier_against_a_broadcast_fails_typed_at_every_rank() {
    for (seed, root) in [(31, 1u32), (32, 0)] {
        let tweak = |c: &mut EngineConfig| c.protocol.peer_timeout_ms = 300;
        let (mut c, ranks) = cluster(&[1, 1, 1], Faults::clean(), seed, &tweak);
        for r in [0, 2] {
            barrier(&mut c, &ranks, r, r as u64);
        }
        let rank = &ranks[1];
        let d = SubmissionDescriptor::bcast(1, 0, root, RegionRef { key: rank.scratch, offset: 0 }, 3);
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        let mut posted = false;
        while c.published().len() < ranks.len() + 1 && c.now() < 5_000_000_000 {
            if !posted && c.published().iter().any(|p| p.cqe.opcode == Opcode::BCAST) {
                barrier(&mut c, &ranks, 1, 3);
                posted = true;
            }
            if c.step().is_none() {
                break;
            }
        }
        let done = c.published();
        assert_eq!(done.len(), ranks.len() + 1, "root {root}: every call ends: {done:?}");
        for p in done {
            assert!(p.at < 3_000_000_000, "root {root}: within the bound: {p:?}");
            let broken = StatusKind::CommunicatorBroken as u16;
            if p.cqe.opcode == Opcode::BARRIER && !(p.node == 1 && p.cqe.status.0 == broken) {
                assert_eq!(p.cqe.status.0, StatusKind::DigestMismatch as u16, "root {root}: {p:?}");
            } else if p.cqe.opcode == Opcode::BCAST && root == 0 {
                // Its root never sent it: it cannot have bytes to deliver.
                assert_eq!(p.cqe.status.0, StatusKind::DigestMismatch as u16, "root {root}: {p:?}");
            }
        }
    }
}

/// The same calls in another order: rank 0 broadcasts, then enters the barrier; rank 1 enters
/// the barrier, then broadcasts. The barriers cut the epoch at different ids (`SyncBody::cut`),
/// so neither is `Ok` — before, both carried the same context and rank 0's completed `Ok`.
#[test]
fn the_same_calls_in_another_order_fail_the_barrier_typed() {
    for seed in [41, 42, 43] {
        let (mut c, ranks) = cluster(&[1, 1], Faults::clean(), seed, &|_| {});
        let rank = &ranks[0];
        let d = SubmissionDescriptor::bcast(10, 0, 0, RegionRef { key: rank.scratch, offset: 0 }, 1);
        c.with_engine(rank.node, |e, now| e.handle_descriptor(rank.host, &d, now));
        barrier(&mut c, &ranks, 0, 0);
        barrier(&mut c, &ranks, 1, 1);
        run_until(&mut c, 2, 5_000_000_000);
        let done = barriers(&c);
        assert_eq!(done.len(), 2, "seed {seed}: both barriers end: {:?}", c.published());
        for p in &done {
            assert_eq!(p.cqe.status.0, StatusKind::DigestMismatch as u16, "seed {seed}: {p:?}");
        }
    }
}

/// Issue 38 (DST seeds 999000069974 and 999000049135): ranks waiting in a barrier for a late
/// process repeat their unanswered `SYNC_UP` every two repair timeouts only for a fast window
/// (256 repair timeouts), then back off to the repair back-off cap — not for the whole wait,
/// which flooded the fabric (here 2 × 3,750 frames in 150 ms) and spent the DST's event budget.
#[test]
fn a_barrier_waiting_for_a_late_rank_backs_its_repeats_off() {
    let tweak = |c: &mut EngineConfig| {
        c.protocol.repair_timeout_us = 20;
        c.protocol.peer_timeout_ms = 200;
    };
    let (mut c, ranks) = cluster(&[1, 1, 1], Faults::clean(), 31, &tweak);
    barrier(&mut c, &ranks, 1, 1);
    barrier(&mut c, &ranks, 2, 2);
    advance(&mut c, 150_000_000);
    let waited = c.delivered();
    assert!(barriers(&c).is_empty(), "a barrier ended before the manager's rank posted");
    // Two waiting engines: 128 fast repeats each, then one every 3.125 ms at most.
    assert!(waited < 600, "{waited} datagrams while two ranks waited 150 ms");
    barrier(&mut c, &ranks, 0, 0);
    run_until(&mut c, 3, u64::MAX);
    let done = barriers(&c);
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|p| p.cqe.status.0 == StatusKind::Ok as u16), "{done:?}");
    // The manager heard its children's UPs 150 ms before its DOWN: they may have backed off, so
    // should it settle now it answers them for the longer TIME-WAIT; a leaf answers nobody.
    let d = 1_000;
    assert!(c.nodes[0].engine.time_wait(d) > d, "the manager keeps the short TIME-WAIT");
    assert_eq!(c.nodes[1].engine.time_wait(d), d);
    // A synchronization that did not wait leaves the TIME-WAIT as it was.
    for r in 0..3 {
        barrier(&mut c, &ranks, r, 10 + r as u64);
    }
    run_until(&mut c, 6, u64::MAX);
    assert_eq!(barriers(&c).len(), 6);
    assert_eq!(c.nodes[0].engine.time_wait(d), d);
}

/// Issue 39: the engine, not its driver, says when a stopping engine may go. It lingers a peer
/// timeout after its last work while it owes something (here a ranked host still attached),
/// four at most however busy; owing nothing, the manager that synchronized the others answers
/// for its TIME-WAIT, a leaf goes at once. The drain's next deadline is a key of the engine's
/// timer table (`poll_timeout` wakes a sleeping driver for it), and its falling due is no work.
#[test]
fn a_draining_engine_says_when_it_is_drained() {
    let linger: u64 = 100_000_000;
    let (mut c, ranks) = cluster(&[1, 1, 1], Faults::clean(), 5, &|c| c.protocol.peer_timeout_ms = 100);
    for r in 0..3 {
        barrier(&mut c, &ranks, r, r as u64);
    }
    run_until(&mut c, 3, u64::MAX);
    assert_eq!(barriers(&c).len(), 3);
    // Past every timer of the barriers (the engines' probes and retries are over).
    let later = c.now() + linger;
    advance(&mut c, later);
    let t0 = c.now();
    let e = &mut c.nodes[0].engine;
    assert!(e.answers_sync_children(), "the manager synchronized the others");
    assert_eq!(e.poll_timeout(), None, "nothing armed before the stop");
    assert!(!e.drained(t0), "not draining before the stop");
    e.start_drain(t0);
    // Owing (its host is attached): a peer timeout without work.
    assert!(!e.drained(t0 + linger - 1));
    assert!(e.drained(t0 + linger));
    // The first deadline armed is the quiet period's; falling due, it is no work, does not end
    // the drain while the engine owes, and the next is armed.
    let quiet = e.poll_timeout().expect("the drain's deadline is armed");
    assert!(quiet > t0 && quiet < t0 + linger, "{quiet} after {t0}");
    assert!(!e.handle_timeout(quiet), "the drain's own deadline is no work");
    assert!(!e.drained(quiet), "its host is still attached");
    assert_eq!(e.poll_timeout(), Some(t0 + linger));
    // Work starts the linger over, four peer timeouts after the stop at most.
    for k in 1..8 {
        e.drain_busy(t0 + k * linger / 2);
    }
    assert_eq!(e.poll_timeout(), Some(t0 + 4 * linger));
    assert!(!e.drained(t0 + 4 * linger - 1));
    assert!(e.drained(t0 + 4 * linger), "however busy");
    // Owing nothing (a drain started afresh once its host left): the manager answers for its
    // quiet period, a leaf goes at once.
    let t1 = t0 + 4 * linger;
    e.detach_host(ranks[0].host, ringcast_proto::intake::Departure::Clean, 0, t1);
    e.start_drain(t1);
    let quiet = e.poll_timeout().expect("the quiet period's end") - t1;
    assert!(quiet >= linger / 10 && quiet < linger, "TIME-WAIT {quiet}");
    assert!(!e.drained(t1 + quiet - 1));
    assert!(e.drained(t1 + quiet), "owing nothing, its TIME-WAIT over");
    let leaf = &mut c.nodes[1].engine;
    assert!(!leaf.answers_sync_children());
    leaf.detach_host(ranks[1].host, ringcast_proto::intake::Departure::Clean, 0, t0);
    leaf.start_drain(t0);
    assert!(leaf.drained(t0), "a leaf that owes nothing goes at once");
}
