//! `ringcast stats --serve` as a Prometheus server meets it (issue 38, item 7): a real engine
//! daemon, the real server, real TCP clients.
//!
//! - Ten silent and ten slow clients (one byte per 0.9 s) connected: scrapes are still answered
//!   inside Prometheus' default scrape timeout (10 s), and the server cuts each of those clients
//!   off at its request deadline (it used to answer one connection at a time: each silent one
//!   cost 5 s, a slow one as long as it liked).
//! - An engine stopped (SIGSTOP) reads as down, and as up again once continued; an engine
//!   killed and restarted under its name is read again (both stayed down for good before).
//! - No address means 127.0.0.1; a wildcard address is warned about.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Prometheus' default scrape timeout: a scrape slower than this is a failed scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills its child when dropped: a failed assertion must leave nothing running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(pid(&self.0), rustix::process::Signal::CONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pid(c: &Child) -> rustix::process::Pid {
    rustix::process::Pid::from_child(c)
}

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_ringcast")
}

/// An engine daemon (no fabric) named `name`, up and accepting.
fn engine(name: &str) -> Reaped {
    let child = Command::new(exe())
        .args(["engine", "--name", name])
        .env("RINGCAST_LOG_LEVEL", "0")
        .env("RINGCAST_FABRIC", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("an engine");
    let deadline = Instant::now() + Duration::from_secs(20);
    while ringcast_offload::ctl::connect(name).is_err() {
        assert!(Instant::now() < deadline, "the engine did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    Reaped(child)
}

/// `ringcast stats --engine NAME --serve 127.0.0.1:0` with `extra` arguments; its address.
fn server(name: &str, extra: &[&str]) -> (Reaped, String) {
    let mut child = Command::new(exe())
        .args(["stats", "--engine", name, "--serve", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ringcast stats --serve");
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut first).expect("its address");
    let addr = first
        .trim()
        .strip_prefix("serving http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    (Reaped(child), addr)
}

/// A scrape: the answer and how long it took (failing past the scrape timeout).
fn scrape(addr: &str) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    (reply, t.elapsed())
}

fn up(reply: &str, name: &str) -> Option<u8> {
    let series = format!("ringcast_engine_up{{engine=\"{name}\"}} ");
    reply.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok())
}

/// Scrapes until `name` reads `want` (an engine's state changes between two scrapes), at most
/// `tries` scrapes; each scrape within the scrape timeout.
fn scrape_until(addr: &str, name: &str, want: u8, tries: usize) -> Vec<Option<u8>> {
    let mut seen = Vec::new();
    for _ in 0..tries {
        let (reply, took) = scrape(addr);
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(took < SCRAPE_TIMEOUT, "a scrape took {took:?}");
        seen.push(up(&reply, name));
        if seen.last() == Some(&Some(want)) {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{name} never read {want}: {seen:?}");
}

#[test]
fn silent_and_slow_clients_delay_no_scrape_and_are_cut_off() {
    let name = format!("stats-slow-{}", std::process::id());
    let _engine = engine(&name);
    let (_server, addr) = server(&name, &["--timeout", "2"]);
    // Ten silent clients, and ten that send a request one byte per 0.9 s (9 s for ten bytes).
    let silent: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let slow: Vec<_> = (0..10)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                let t = Instant::now();
                for b in b"GET /metr\n".iter() {
                    if s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(900));
                }
                // The server closed it: reading ends at once with nothing.
                s.set_read_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest);
                (t.elapsed(), rest)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let (reply, took) = scrape(&addr);
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert_eq!(up(&reply, &name), Some(1), "{reply}");
        assert!(took < SCRAPE_TIMEOUT, "a scrape with 20 idle clients took {took:?}");
    }
    // Each silent client was closed at its deadline, answered nothing.
    for mut s in silent {
        s.set_read_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
        let mut got = Vec::new();
        let t = Instant::now();
        let r = s.read_to_end(&mut got);
        assert!(r.is_ok() && got.is_empty() && t.elapsed() < SCRAPE_TIMEOUT, "{r:?} {got:?}");
    }
    for t in slow {
        let (took, rest) = t.join().unwrap();
        assert!(rest.is_empty(), "a slow client's half request was answered: {rest:?}");
        let _ = took;
    }
}

#[test]
fn an_engine_stopped_then_continued_reads_down_then_up() {
    use rustix::process::{kill_process, Signal};
    let name = format!("stats-stop-{}", std::process::id());
    let engine = engine(&name);
    let (_server, addr) = server(&name, &["--timeout", "1"]);
    scrape_until(&addr, &name, 1, 1);
    kill_process(pid(&engine.0), Signal::STOP).unwrap();
    scrape_until(&addr, &name, 0, 3);
    kill_process(pid(&engine.0), Signal::CONT).unwrap();
    scrape_until(&addr, &name, 1, 10);
}

#[test]
fn an_engine_restarted_under_its_name_is_read_again() {
    let name = format!("stats-restart-{}", std::process::id());
    let mut first = engine(&name);
    let (_server, addr) = server(&name, &["--timeout", "1"]);
    scrape_until(&addr, &name, 1, 1);
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    scrape_until(&addr, &name, 0, 3);
    let _second = engine(&name);
    scrape_until(&addr, &name, 1, 10);
}

#[test]
fn the_default_address_is_the_loopback_one_and_a_wildcard_is_warned_about() {
    let run = |serve: &[&str]| {
        let o = Command::new(exe())
            .args(["stats", "--engine", "nobody-here", "--count", "0"])
            .args(serve)
            .output()
            .unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (out, err) = run(&["--serve", "0"]);
    assert!(out.starts_with("serving http://127.0.0.1:"), "{out}");
    assert!(!err.contains("warning"), "{err}");
    let (out, err) = run(&["--serve", "0.0.0.0:0"]);
    assert!(out.starts_with("serving http://0.0.0.0:"), "{out}");
    assert!(err.contains("warning") && err.contains("every interface"), "{err}");
    let (out, err) = run(&["--serve", "[::]:0"]);
    if out.starts_with("serving") {
        assert!(err.contains("warning"), "{err}");
    }
}
