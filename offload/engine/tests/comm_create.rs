//! Communicators created and freed by host processes (`COMM_CREATE`, `COMM_FREE`): broadcasts
//! on them byte-exact, and every misuse answered with its typed error — a bad record, two local
//! members disagreeing on the membership, an unknown or freed communicator, a communicator freed
//! under a broadcast in flight — with nothing hanging. Engines are polling threads on the `shm`
//! fabric, two host processes' worth of hosts (threads) per engine.
use ringcast_host::{Access, Config, Error, Host, SharedBuf, StatusKind, SubmissionDescriptor};
use ringcast_offload::config::FabricKind;
use ringcast_offload::fabric::shm::cleanup;
use ringcast_offload::runner::spawn_thread;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The identity of test communicator `handle` (every member passes the same).
fn id(handle: u64, group: [u8; 14], seed: u64) -> ringcast_proto::comm::ident::CommIdentity {
    ringcast_proto::comm::ident::CommIdentity {
        cookie: handle,
        group,
        seed,
        key: ringcast_proto::comm::auth::Secret([0x42; 32]),
    }
}

static JOBS: AtomicU32 = AtomicU32::new(0);

fn config(job: &str, nodes: u32, node: u32) -> Config {
    Config::default().with(|cfg| {
        cfg.topology.fabric = FabricKind::Shm;
        cfg.topology.job = job.to_string();
        cfg.topology.nodes = nodes;
        cfg.topology.node = node;
        cfg.topology.ppn = 2;
        cfg.protocol.channels = 4;
        cfg.runner.engine_name = format!("{job}-{node}");
        cfg.runner.log_level = 0;
        cfg.protocol.peer_timeout_ms = 1000;
    })
}

fn status(r: Result<impl Sized, Error>) -> Option<StatusKind> {
    match r {
        Ok(_) => Some(StatusKind::Ok),
        Err(e) => e.status(),
    }
}

/// A barrier whose wait gives up after a while: a rank that fails must not leave the others
/// waiting for it forever (the test then reports the failure instead of hanging).
struct Rendezvous {
    parties: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Rendezvous {
    fn new(parties: usize) -> Self {
        Rendezvous { parties, state: Mutex::new((0, 0)), cv: Condvar::new() }
    }

    fn wait(&self) -> Result<(), String> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = s.1;
        s.0 += 1;
        if s.0 == self.parties {
            *s = (0, generation + 1);
            self.cv.notify_all();
            return Ok(());
        }
        let (s, timeout) = self
            .cv
            .wait_timeout_while(s, Duration::from_secs(30), |s| s.1 == generation)
            .unwrap_or_else(|e| e.into_inner());
        drop(s);
        if timeout.timed_out() {
            return Err("another rank failed: nobody came to the rendezvous".into());
        }
        Ok(())
    }
}

/// Runs `body(host, world_rank)` on 2 nodes × 2 processes (threads; each node's engine is a
/// polling thread both of its hosts attach to).
fn cluster(body: impl Fn(&mut Host, u32, &Rendezvous) -> Result<(), String> + Send + Sync + 'static) {
    cluster_with(|c| c, body)
}

/// [`cluster`] with every engine's config passed through `tweak`.
fn cluster_with(
    tweak: fn(Config) -> Config,
    body: impl Fn(&mut Host, u32, &Rendezvous) -> Result<(), String> + Send + Sync + 'static,
) {
    let job = format!("commtest-{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed));
    let (nodes, ppn) = (2u32, 2u32);
    let barrier = Arc::new(Rendezvous::new((nodes * ppn) as usize));
    let body = Arc::new(body);
    let mut threads = Vec::new();
    let mut engines = Vec::new();
    for node in 0..nodes {
        // The engine first, under its name: both of its hosts attach to it.
        engines.push(spawn_thread(tweak(config(&job, nodes, node)), true).expect("engine"));
        for _ in 0..ppn {
            let (barrier, body, name) = (barrier.clone(), body.clone(), format!("{job}-{node}"));
            threads.push(std::thread::spawn(move || -> Result<(), String> {
                let mut host =
                    Host::attach_wait(&name, Duration::from_secs(10)).map_err(|e| e.to_string())?;
                let local = host.local_rank().ok_or("no local rank")?;
                barrier.wait()?;
                body(&mut host, node * ppn + local, &barrier)
            }));
        }
    }
    let results: Vec<_> = threads.into_iter().map(|t| t.join().expect("thread")).collect();
    drop(engines);
    let _ = cleanup(&job);
    // Every rank's error, not only the first: the first is often a rank that waited in vain.
    let errors: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| r.err().map(|e| format!("thread {i}: {e}")))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

const GROUP: [u8; 14] = [0x5a; 14];

fn pattern(k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k.wrapping_mul(131) ^ (i as u64).wrapping_mul(7)) as u8).collect()
}

/// A process's message buffer and its registration.
struct Io {
    buf: SharedBuf,
    region: ringcast_host::Region,
}

impl Io {
    fn new(host: &mut Host, len: usize) -> Result<Io, String> {
        let buf = SharedBuf::new(len).map_err(|e| e.to_string())?;
        let region = host.register(&buf, Access::READ_WRITE).map_err(|e| e.to_string())?;
        Ok(Io { buf, region })
    }

    /// Broadcasts `len` bytes from `root` on `comm`, where this process is `me`; checks them.
    fn bcast(
        &self,
        host: &mut Host,
        comm: u64,
        root: u32,
        me: u32,
        k: u64,
        len: usize,
    ) -> Result<(), String> {
        let want = pattern(k, len);
        let fill = if me == root { want.clone() } else { vec![0xEE; len] };
        self.buf.write_at(0, &fill).map_err(|e| e.to_string())?;
        host.bcast(comm, root, self.region.at(0), len as u64)
            .map_err(|e| format!("comm {comm:#x} bcast {k}: {e}"))?;
        let mut got = vec![0; len];
        self.buf.read_at(0, &mut got).map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("comm {comm:#x} bcast {k}: wrong bytes"));
        }
        Ok(())
    }
}

#[test]
fn created_communicators_broadcast_byte_exact_and_are_freed() {
    cluster(|host, world, barrier| {
        // A = world ranks {0, 2, 3} (one member on node 0, two on node 1); B = {1, 3}.
        let comms: [(u64, &[u32]); 2] = [(0xA0, &[0, 2, 3]), (0xB0, &[1, 3])];
        let io = Io::new(host, 70_000)?;
        let region = io.region.clone();
        let mine: Vec<(u64, &[u32], u32)> = comms
            .iter()
            .filter_map(|&(h, m)| m.iter().position(|&r| r == world).map(|i| (h, m, i as u32)))
            .collect();
        for &(h, m, me) in &mine {
            host.comm_create(&id(h, GROUP, 7), me, m)
                .map_err(|e| format!("rank {world}: create {h:#x}: {e}"))?;
        }
        barrier.wait()?;
        for &(h, m, me) in &mine {
            // Three broadcasts of an epoch of 4: freeing settles the partial epoch.
            for (k, len) in [100usize, 5000, 70_000].into_iter().enumerate() {
                let root = k as u32 % m.len() as u32;
                io.bcast(host, h, root, me, h + k as u64, len)?;
            }
            host.comm_free(h).map_err(|e| format!("rank {world}: free {h:#x}: {e}"))?;
            let after = host.bcast(h, 0, region.at(0), 1);
            if status(after) != Some(StatusKind::UnknownCommunicator) {
                return Err(format!("rank {world}: a broadcast on freed {h:#x} was not refused"));
            }
        }
        // The world is unaffected.
        io.bcast(host, 0, 3, world, 99, 4096)
    });
}

#[test]
fn misuse_of_communicators_gets_typed_errors_and_nothing_hangs() {
    let disagreement = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = disagreement.clone();
    cluster(move |host, world, barrier| {
        let io = Io::new(host, 4096)?;
        let region = io.region.clone();
        let check = |what: &str, got: Option<StatusKind>, want: StatusKind| {
            if got == Some(want) {
                Ok(())
            } else {
                Err(format!("rank {world}: {what}: {got:?}, want {want:?}"))
            }
        };
        let other = (world + 1) % 4;
        check(
            "record naming someone else",
            status(host.comm_create(&id(0xC0, GROUP, 1), 0, &[other])),
            StatusKind::BadDescriptor,
        )?;
        check(
            "member outside the world",
            status(host.comm_create(&id(0xC1, GROUP, 1), 0, &[world, 99])),
            StatusKind::BadRoot,
        )?;
        check(
            "broadcast on an unknown communicator",
            status(host.bcast(0xDEAD, 0, region.at(0), 8)),
            StatusKind::UnknownCommunicator,
        )?;
        check(
            "freeing an unknown communicator",
            status(host.comm_free(0xDEAD)),
            StatusKind::UnknownCommunicator,
        )?;
        check("freeing the world", status(host.comm_free(0)), StatusKind::BadDescriptor)?;
        // Two processes of node 0 disagree on a membership: the second to arrive is refused.
        if world < 2 {
            let members: &[u32] = if world == 0 { &[0, 1] } else { &[1, 0] };
            let me = members.iter().position(|&r| r == world).unwrap_or(0) as u32;
            disagreement.lock().unwrap_or_else(|e| e.into_inner()).push(status(host.comm_create(
                &id(0xE0, GROUP, 1),
                me,
                members,
            )));
        }
        // Freed under a broadcast in flight: F = {0, 2}. Rank 2 posts a broadcast from rank 0
        // (who never posts it) and frees F: its broadcast fails at once instead of hanging,
        // with `CommunicatorFreed` (not `CommunicatorBroken`, which says a rank was lost).
        if world == 0 || world == 2 {
            let me = u32::from(world == 2);
            host.comm_create(&id(0xF0, GROUP, 3), me, &[0, 2])
                .map_err(|e| format!("rank {world}: create F: {e}"))?;
        }
        barrier.wait()?;
        if world == 2 {
            let cookie = host.next_cookie();
            let posted = std::time::Instant::now();
            host.post(&SubmissionDescriptor::bcast(cookie, 0xF0, 0, region.at(0), 64))
                .map_err(|e| e.to_string())?;
            host.comm_free(0xF0).map_err(|e| format!("free F under a broadcast: {e}"))?;
            let c = host.wait_cookie(cookie).map_err(|e| e.to_string())?;
            let status = StatusKind::try_from(c.status).ok();
            // The free fails it at once. Only if the free reached the engine later than the peer
            // timeout (a starved engine thread on a loaded machine) may the timeout have failed
            // it first — a typed error too, and never before its time.
            let timed_out = status == Some(StatusKind::PeerUnreachable)
                && posted.elapsed()
                    >= Duration::from_millis(u64::from(config("j", 2, 0).protocol.peer_timeout_ms));
            if !timed_out {
                // Its own status: the process freed it, no rank was lost (issue 38, item 8).
                check("the broadcast freed under", status, StatusKind::CommunicatorFreed)?;
            }
        }
        if world == 0 {
            host.comm_free(0xF0).map_err(|e| format!("rank 0 frees F: {e}"))?;
        }
        barrier.wait()?;
        // The world still works for everyone.
        io.bcast(host, 0, 1, world, 5, 1500)
    });
    let mut got = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    got.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        got,
        vec![Some(StatusKind::BadDescriptor), Some(StatusKind::Ok)],
        "one creates, the other is refused"
    );
}

/// A process that leaves without freeing its communicators (it exited or crashed before
/// `MPI_Comm_free`) counts as having freed them: once every local member freed or left one,
/// the engine drops it and leaves its multicast group — the shm fabric unlinks the group's log —
/// so a long-running engine does not accumulate them.
#[test]
fn communicators_a_leaving_process_never_freed_are_dropped_with_their_groups() {
    let job = format!("commtest-{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed));
    let engine = spawn_thread(config(&job, 1, 0).with(|cfg| cfg.topology.ppn = 2), true).expect("engine");
    let name = format!("{job}-0");
    let mut a = Host::attach_wait(&name, Duration::from_secs(10)).expect("a");
    let mut b = Host::attach_wait(&name, Duration::from_secs(10)).expect("b");
    let (ra, rb) = (a.local_rank().expect("rank"), b.local_rank().expect("rank"));
    let group = [0x6b; 14];
    let log = ringcast_offload::fabric::shm::log_name(&job, &group);
    let in_shm = |n: &str| std::fs::read_dir("/dev/shm").unwrap().flatten().any(|e| e.file_name() == n);
    let before = a.comm_stats().expect("stats");
    assert_eq!((before.alive, before.groups, before.created, before.dropped), (1, 1, 1, 0), "{before:?}");
    a.comm_create(&id(0xC1, group, 3), ra, &[0, 1]).expect("a creates");
    b.comm_create(&id(0xC1, group, 3), rb, &[0, 1]).expect("b creates");
    let s = a.comm_stats().expect("stats");
    assert_eq!((s.alive, s.groups, s.created), (2, 2, 2), "{s:?}");
    assert!(in_shm(&log), "the group's log exists while the communicator does");
    // `a` frees it; `b` goes away without doing so.
    a.comm_free(0xC1).expect("a frees");
    assert_eq!(a.comm_stats().expect("stats").alive, 2, "b is still a member");
    drop(b);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = a.comm_stats().expect("stats");
        if s.alive == 1 || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!((s.alive, s.groups, s.created, s.dropped, s.freeing), (1, 1, 2, 1, 0), "{s:?}");
    assert!(!in_shm(&log), "the group's log outlived its communicator");
    drop(a);
    drop(engine);
    let _ = cleanup(&job);
}

/// A communicator's identity for cycle `k` (every member derives the same).
fn cycle_identity(k: u64) -> (u64, [u8; 14]) {
    let mut group = [0u8; 14];
    group[..8].copy_from_slice(&k.to_le_bytes());
    group[8..].copy_from_slice(&[0xc7; 6]);
    (0x1_0000 + k, group)
}

/// Issue 13, defect 4: create, broadcast once, free — more than twice `max_comms` (64) times,
/// back to back. A freed communicator's slot comes back as soon as its broadcasts are settled
/// with the other engine (its last, partial synchronization epoch included), not a peer timeout
/// later (10 s here, so a communicator left to linger fills the table within the run): every
/// cycle succeeds, and nothing accumulates.
#[test]
fn freed_communicators_are_recycled_at_once() {
    const CYCLES: u64 = 150;
    let stats = Arc::new(Mutex::new(Vec::new()));
    let seen = stats.clone();
    let slow_timeout = |c: Config| c.with(|cfg| cfg.protocol.peer_timeout_ms = 10_000);
    cluster_with(slow_timeout, move |host, world, _| {
        let io = Io::new(host, 256)?;
        for k in 0..CYCLES {
            let (handle, group) = cycle_identity(k);
            host.comm_create(&id(handle, group, k), world, &[0, 1, 2, 3])
                .map_err(|e| format!("rank {world}: cycle {k}: create: {e}"))?;
            // Roots on both nodes in turn: neither node runs far ahead of the other.
            io.bcast(host, handle, (k % 4) as u32, world, k, 64 + k as usize % 128)?;
            host.comm_free(handle).map_err(|e| format!("rank {world}: cycle {k}: free: {e}"))?;
        }
        // Every freed communicator settles and is dropped promptly, long before a peer timeout.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let s = loop {
            let s = host.comm_stats().map_err(|e| e.to_string())?;
            if s.alive == 1 || std::time::Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        seen.lock().unwrap_or_else(|e| e.into_inner()).push((s.alive, s.created, s.dropped));
        Ok(())
    });
    for &(alive, created, dropped) in stats.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        assert_eq!((alive, created, dropped), (1, 1 + CYCLES, CYCLES), "alive, created, dropped");
    }
}

/// A genuinely full communicator table answers `TooManyCommunicators` (the host library's
/// `Error::TooManyCommunicators`), not `UnknownCommunicator`; freeing one makes room at once,
/// also after a broadcast on it (its partial epoch settles as soon as it is freed).
#[test]
fn a_full_communicator_table_is_a_typed_refusal() {
    let job = format!("commtest-{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed));
    let max_comms = 4u32;
    let engine = spawn_thread(
        config(&job, 1, 0).with(|cfg| {
            cfg.topology.ppn = 1;
            cfg.limits.max_comms = max_comms;
        }),
        true,
    )
    .expect("engine");
    let mut host = Host::attach_wait(&format!("{job}-0"), Duration::from_secs(10)).expect("attach");
    let io = Io::new(&mut host, 256).expect("buffer");
    // The world holds one slot.
    for k in 1..u64::from(max_comms) {
        let (handle, group) = cycle_identity(1000 + k);
        host.comm_create(&id(handle, group, k), 0, &[0]).expect("room for it");
        io.bcast(&mut host, handle, 0, 0, k, 100).expect("broadcast");
    }
    let (full, group) = cycle_identity(2000);
    let refused = host.comm_create(&id(full, group, 1), 0, &[0]).expect_err("the table is full");
    assert!(matches!(refused, Error::TooManyCommunicators { handle } if handle == full), "{refused:?}");
    assert_eq!(refused.status(), Some(StatusKind::TooManyCommunicators));
    // A broadcast on the refused handle: it was never created.
    let err = host.bcast(full, 0, io.region.at(0), 8).expect_err("not created");
    assert_eq!(err.status(), Some(StatusKind::UnknownCommunicator));
    let (busy, _) = cycle_identity(1001);
    host.comm_free(busy).expect("free");
    host.comm_create(&id(full, group, 1), 0, &[0]).expect("the freed slot is back at once");
    io.bcast(&mut host, full, 0, 0, 9, 100).expect("broadcast on the new one");
    let s = host.comm_stats().expect("stats");
    assert_eq!((s.alive, s.created, s.dropped), (max_comms, u64::from(max_comms) + 1, 1), "{s:?}");
    drop(host);
    drop(engine);
    let _ = cleanup(&job);
}
