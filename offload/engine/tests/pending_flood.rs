//! Legitimate hosts attach while connections that proved the job's secret flood the engine's
//! table of connections not attached yet (issue 38, item 8): 300 authenticated connections, more
//! than `max_pending_conns` (256), each reopened every 1.5 s, and hosts attaching over TCP one
//! after another meanwhile. Every attach must succeed.
//!
//! What failed before: the table, full of authenticated connections, made room for each new
//! connection by closing the oldest one that had not passed `AUTH` yet — often a legitimate host
//! between its `HELLO` and its `AUTH`, the newest connections being the flood's fresh ones that
//! authenticate as fast (1 attach in 38 failed with "the engine went away"). Now the connection
//! silent the longest goes first: a host in its handshake is never silent for long, a flood
//! connection that authenticated and then waits is.
mod common;
use common::tcp::*;
use ringcast_abi::ctl::CtlKind;
use ringcast_offload::ctl::{self, CtlSock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flood connections, and how long each is held before it is reopened.
const FLOOD: usize = 300;
const HOLD: Duration = Duration::from_millis(1500);
/// Legitimate attaches made during the flood.
const ATTACHES: usize = 120;

/// HELLO and AUTH with the job's secret, or `None` if the engine closed the connection first
/// (it makes room for newer ones).
fn try_authed(addr: &str) -> Option<CtlSock> {
    let t = Duration::from_secs(5);
    let mut sock = CtlSock::connect(addr).ok()?;
    let mut hello = ctl::session::hello(std::process::id());
    hello.seq = 1;
    let (ok, _) = sock.call(&hello, None, t, &mut |_| {}).ok()?;
    (ok.kind == CtlKind::HELLO_OK).then_some(())?;
    let keys = ctl::SessionKeys::derive(&secret(), &hello, &ok);
    let (reply, _) = sock.call(&auth(&secret(), &(hello, ok)), None, t, &mut |_| {}).ok()?;
    (reply.kind == CtlKind::AUTH_OK).then_some(())?;
    sock.start_session(keys, ctl::Role::Host);
    Some(sock)
}

#[test]
fn hosts_attach_while_authenticated_connections_flood_the_pending_table() {
    let (daemon, addr) = cma_daemon("pending-flood");
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    // Four threads keep 75 authenticated connections each, every one reopened after HOLD
    // (staggered: a steady stream of new connections, 200 a second).
    let flood: Vec<_> = (0..4)
        .map(|t| {
            let (addr, stop, opened) = (addr.clone(), stop.clone(), opened.clone());
            std::thread::spawn(move || {
                let n = FLOOD / 4;
                let mut held: Vec<Option<(Instant, CtlSock)>> = (0..n).map(|_| None).collect();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    for (i, h) in held.iter_mut().enumerate() {
                        // Slot i of thread t first opens at its share of HOLD.
                        let due = HOLD.mul_f64((i * 4 + t) as f64 / FLOOD as f64);
                        let stale = h.as_ref().is_none_or(|(at, _)| at.elapsed() >= HOLD);
                        if stale && start.elapsed() >= due {
                            *h = None;
                            if let Some(s) = try_authed(&addr) {
                                opened.fetch_add(1, Ordering::Relaxed);
                                *h = Some((Instant::now(), s));
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    // Let the flood fill the table.
    std::thread::sleep(HOLD * 2);
    let mut failures = Vec::new();
    for i in 0..ATTACHES {
        let config = ringcast_host::Config::default().with(|c| c.topology.job_secret.0 = Some(secret()));
        match ringcast_host::Host::attach_config(&addr, &config, Default::default()) {
            Ok(mut h) => {
                if let Err(e) = h.nop() {
                    failures.push(format!("attach {i}: nop: {e}"));
                }
            }
            Err(e) => failures.push(format!("attach {i}: {e}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    let opened = opened.load(Ordering::Relaxed);
    assert!(opened as usize > FLOOD, "the flood ran: {opened} authenticated connections");
    assert!(failures.is_empty(), "{} of {ATTACHES} attaches failed: {failures:#?}", failures.len());
    let mut good = tcp_host(&addr);
    good.nop().unwrap();
    drop(good);
    assert!(daemon.stop());
}
