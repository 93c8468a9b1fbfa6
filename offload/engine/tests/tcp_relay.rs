//! A relay without the job's secret between a real host and a real engine daemon over TCP
//! (issue 38, item 5): a TCP listener in this test that the host connects to, which connects to
//! the engine and passes the 64-byte control messages on — or changes, injects, replays them.
//!
//! Passing bytes unchanged it is a router: the host attaches and works. It cannot use the
//! host's proof for requests of its own on its connection to the engine, nor change a message
//! either way, nor replay one: each is refused and the connection ends. On the engine of before
//! the session (a proof over the engine's nonce alone, no MAC on later messages) the relay's own
//! ATTACH was answered `ATTACH_OK`, a changed ATTACH attached the host as something else, and a
//! replayed request was answered twice.
mod common;
use common::tcp::*;
use common::*;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

type Raw = [u8; 64];

/// Which way a message travels through the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    ToEngine,
    ToHost,
}

/// What the relay sends on for one message it read: towards the engine and towards the host.
#[derive(Default)]
struct Out {
    to_engine: Vec<Raw>,
    to_host: Vec<Raw>,
}

impl Out {
    /// The message on, unchanged, the way it was going.
    fn pass(way: Way, m: Raw) -> Self {
        match way {
            Way::ToEngine => Out { to_engine: vec![m], ..Out::default() },
            Way::ToHost => Out { to_host: vec![m], ..Out::default() },
        }
    }
}

/// What the relay does with the n-th message of a direction.
type Hook = Box<dyn FnMut(Way, usize, Raw) -> Out + Send>;

fn parse(m: &Raw) -> CtlMsg {
    CtlMsg::read_from_bytes(m).unwrap()
}

/// A relay listening on 127.0.0.1 for one host, passing its messages to `engine` through `hook`;
/// it records every message the engine sent.
struct Relay {
    addr: String,
    from_engine: Arc<Mutex<Vec<CtlMsg>>>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    fn start(engine: &str, hook: Hook) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("tcp://{}", listener.local_addr().unwrap());
        let engine = engine.strip_prefix("tcp://").unwrap().to_string();
        let from_engine = Arc::new(Mutex::new(Vec::new()));
        let seen = from_engine.clone();
        let thread = std::thread::spawn(move || {
            let (host, _) = listener.accept().unwrap();
            let eng = TcpStream::connect(&engine).unwrap();
            for s in [&host, &eng] {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s.set_nodelay(true).unwrap();
            }
            let hook = Arc::new(Mutex::new(hook));
            let writers = Arc::new(Mutex::new((host.try_clone().unwrap(), eng.try_clone().unwrap())));
            let pump = |way: Way, mut from: TcpStream| {
                let (hook, writers, seen) = (hook.clone(), writers.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut n = 0;
                    let mut m = [0u8; 64];
                    while from.read_exact(&mut m).is_ok() {
                        if way == Way::ToHost {
                            seen.lock().unwrap().push(parse(&m));
                        }
                        let out = (hook.lock().unwrap())(way, n, m);
                        n += 1;
                        let mut w = writers.lock().unwrap();
                        for o in &out.to_engine {
                            let _ = w.1.write_all(o);
                        }
                        for o in &out.to_host {
                            let _ = w.0.write_all(o);
                        }
                    }
                    // One side ended: so does the relay, both ways.
                    let w = writers.lock().unwrap();
                    let _ = w.0.shutdown(std::net::Shutdown::Both);
                    let _ = w.1.shutdown(std::net::Shutdown::Both);
                })
            };
            let a = pump(Way::ToEngine, host);
            let b = pump(Way::ToHost, eng);
            let _ = (a.join(), b.join());
        });
        Relay { addr, from_engine, thread: Some(thread) }
    }

    /// Waits for the relay to end (both connections closed) and returns what the engine sent.
    fn finish(mut self) -> Vec<CtlMsg> {
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.from_engine.lock().unwrap().clone()
    }
}

fn host_config() -> ringcast_host::Config {
    ringcast_host::Config::default().with(|c| c.topology.job_secret.0 = Some(secret()))
}

/// A host that waits 3 s for a control reply (a relay may never pass one on).
fn short_timeout() -> ringcast_host::AttachOptions {
    ringcast_host::AttachOptions { ctl_timeout: Some(Duration::from_secs(3)), ..Default::default() }
}

/// Sequence number of the requests the relay makes up.
const RELAY_SEQ: u64 = 0x5e1f;

#[test]
fn a_relay_that_passes_bytes_unchanged_is_only_a_router() {
    let (daemon, addr) = cma_daemon("relay-pass");
    let relay = Relay::start(&addr, Box::new(|way, _, m| Out::pass(way, m)));
    let mut host = ringcast_host::Host::attach_config(&relay.addr, &host_config(), Default::default())
        .expect("a host attaches through a relay that changes nothing");
    copy_workload(&mut host, 5, 20);
    assert_eq!(host.stats().unwrap().hosts_lost, 0);
    drop(host);
    relay.finish();
    assert!(daemon.stop());
}

#[test]
fn a_relay_cannot_use_the_hosts_proof_for_requests_of_its_own() {
    let (daemon, addr) = cma_daemon("relay-own");
    // The relay's own ATTACH: rings in this process carrying the engine's nonce it saw pass,
    // sent on its connection to the engine right after the engine accepted the host's proof.
    let rings = Arc::new(Mutex::new(None));
    let keep = rings.clone();
    let hook: Hook = Box::new(move |way, _, m| {
        let msg = parse(&m);
        if way == Way::ToHost && msg.kind == CtlKind::AUTH_OK {
            let nonce = keep.lock().unwrap().as_ref().map(|(n, _)| *n).unwrap();
            let r = ringcast_ring::attach::create_host_owned(64, nonce).unwrap();
            let mut attach = CtlMsg::new(CtlKind::ATTACH);
            attach.seq = RELAY_SEQ;
            (attach.a, attach.b) = (std::process::id(), 64);
            (attach.d, attach.e) = (r.segment.as_non_null().as_ptr() as u64, r.header.total_len);
            *keep.lock().unwrap() = Some((nonce, Some(r)));
            let mut own = [0u8; 64];
            own.copy_from_slice(attach.as_bytes());
            // The host does not hear AUTH_OK: its proof was the relay's to use.
            return Out { to_engine: vec![own], to_host: vec![] };
        }
        if way == Way::ToHost && msg.kind == CtlKind::HELLO_OK {
            *keep.lock().unwrap() = Some((msg.c, None));
        }
        Out::pass(way, m)
    });
    let relay = Relay::start(&addr, hook);
    let config = host_config();
    let relay_addr = relay.addr.clone();
    let host = std::thread::spawn(move || {
        let opts = short_timeout();
        ringcast_host::Host::attach_config(&relay_addr, &config, opts).is_ok()
    });
    // The engine refuses the relay's request and ends the connection.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let seen = relay.from_engine.lock().unwrap().clone();
        if let Some(m) = seen.iter().skip_while(|m| m.kind != CtlKind::AUTH_OK).nth(1) {
            break *m;
        }
        assert!(std::time::Instant::now() < deadline, "the engine never answered the relay: {seen:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_ne!(answered.kind, CtlKind::ATTACH_OK, "the relay attached with the host's proof");
    assert_eq!((answered.kind, answered.status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED));
    assert!(!host.join().unwrap(), "the host whose proof was taken does not attach");
    let seen = relay.finish();
    assert!(!seen.iter().any(|m| m.kind == CtlKind::ATTACH_OK), "{seen:?}");
    drop(rings);
    // The engine serves on.
    let mut good = tcp_host(&addr);
    copy_workload(&mut good, 6, 10);
    drop(good);
    assert!(daemon.stop());
}

/// A relay that changes the first message of `kind` travelling `way` with `change`; whether the
/// host still attached, and what the engine sent.
fn attach_through_a_changing_relay(tag: &str, way: Way, kind: CtlKind, change: fn(&mut CtlMsg)) -> bool {
    let (daemon, addr) = cma_daemon(tag);
    let mut done = false;
    let hook: Hook = Box::new(move |w, _, m| {
        let mut msg = parse(&m);
        if w == way && msg.kind == kind && !done {
            done = true;
            change(&mut msg);
            let mut out = [0u8; 64];
            out.copy_from_slice(msg.as_bytes());
            return Out::pass(w, out);
        }
        Out::pass(w, m)
    });
    let relay = Relay::start(&addr, hook);
    let opts = short_timeout();
    let attached = match ringcast_host::Host::attach_config(&relay.addr, &host_config(), opts) {
        Ok(mut h) => {
            // Whatever it became, it works or fails typed; then it leaves.
            let _ = h.nop();
            true
        }
        Err(e) => {
            eprintln!("{tag}: refused as it should be: {e}");
            false
        }
    };
    let seen = relay.finish();
    if way == Way::ToEngine && !attached {
        let last = seen.last().copied().unwrap_or_default();
        assert_eq!((last.kind, last.status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED), "{seen:?}");
    }
    let mut good = tcp_host(&addr);
    copy_workload(&mut good, 7, 10);
    drop(good);
    assert!(daemon.stop());
    attached
}

#[test]
fn a_message_the_relay_changed_is_refused_either_way() {
    // The host's ATTACH, its local-rank claim turned into none (an observer).
    assert!(
        !attach_through_a_changing_relay("relay-change-attach", Way::ToEngine, CtlKind::ATTACH, |m| m.c =
            u64::MAX),
        "an ATTACH changed on the way attached the host"
    );
    // The engine's ATTACH_OK, another local rank in it.
    assert!(
        !attach_through_a_changing_relay("relay-change-ok", Way::ToHost, CtlKind::ATTACH_OK, |m| m.d ^= 2),
        "a changed ATTACH_OK was believed"
    );
}

#[test]
fn a_request_the_relay_replays_is_refused() {
    let (daemon, addr) = cma_daemon("relay-replay");
    // Every STATS the host sends reaches the engine twice.
    let hook: Hook = Box::new(|way, _, m| {
        if way == Way::ToEngine && parse(&m).kind == CtlKind::STATS {
            return Out { to_engine: vec![m, m], to_host: vec![] };
        }
        Out::pass(way, m)
    });
    let relay = Relay::start(&addr, hook);
    let mut host = ringcast_host::Host::attach_config(&relay.addr, &host_config(), Default::default())
        .expect("attach through the relay");
    let _ = host.stats();
    // Whatever the host saw of its first request, the replay is not answered as a request: the
    // engine says UNAUTHORIZED and ends the connection, and the host's next request fails.
    let next = host.stats();
    drop(host);
    let seen = relay.finish();
    let answers = seen.iter().filter(|m| m.kind == CtlKind::STATS_OK).count();
    assert_eq!(answers, 1, "a replayed STATS was answered: {seen:?}");
    let last = seen.last().copied().unwrap_or_default();
    assert_eq!((last.kind, last.status), (CtlKind::ERROR, CtlStatus::UNAUTHORIZED), "{seen:?}");
    assert!(next.is_err(), "the connection ended with the replay");
    let mut good = tcp_host(&addr);
    copy_workload(&mut good, 8, 10);
    drop(good);
    assert!(daemon.stop());
}
