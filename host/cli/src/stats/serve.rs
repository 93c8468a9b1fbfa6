//! `ringcast stats --serve`: the engines' counters over HTTP for a Prometheus server
//! (`GET /metrics`), read afresh per scrape.
//!
//! What a scraper can rely on, whatever other clients do:
//! - Connections are served side by side, one thread each, at most [`MAX_CONNECTIONS`] at once;
//!   one more is answered `503` at once and closed (never queued behind the others).
//! - Each connection has [`REQUEST_DEADLINE`] in all to deliver its request head — a deadline,
//!   not a per-read timeout, so a client sending a byte now and then cannot hold its thread —
//!   and [`WRITE_DEADLINE`] to take the answer. Silent and slow clients cost their own thread
//!   for that long, nobody else's time.
//! - A scrape reads the engines side by side, each request bounded by `--timeout` (see
//!   `engines.rs`: an engine stopped, gone or restarted under its name is read again at the next
//!   scrape). Scrapes take turns on the engines' connections (one reading at a time), so two
//!   at once each wait at most one reading longer.
//! - It binds `127.0.0.1` unless told otherwise, and says so on stderr when told to bind a
//!   wildcard address (every interface: anyone who reaches the machine reads the counters).
use super::engines::{self, Watched};
use ringcast_host::Config;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once; one more is refused with `503`.
pub const MAX_CONNECTIONS: usize = 32;
/// Time a client has to deliver its whole request head (Prometheus sends it at once).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Time a client has to take the answer.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Bytes of a request head read at most.
const HEAD_LIMIT: usize = 8 << 10;
/// The port `--serve` binds without one.
pub const DEFAULT_PORT: u16 = 9464;

/// What `--serve ADDR` means: `PORT` alone or nothing is `127.0.0.1`; `HOST:PORT` as given.
pub fn bind_address(spec: &str) -> Result<SocketAddr, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)));
    }
    if let Ok(port) = spec.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    spec.parse().map_err(|_| format!("{spec:?} is not PORT or IP:PORT (e.g. 127.0.0.1:9464)"))
}

/// The engines and how to read them, shared by the connections.
pub struct Collector {
    /// The engines being read.
    pub engines: Vec<Watched>,
    /// With `--all`: listed again at every scrape.
    pub all: bool,
    /// The configuration to attach with.
    pub config: Config,
    /// Each control request's limit.
    pub timeout: Option<Duration>,
}

impl Collector {
    /// Reads every engine and renders the Prometheus text format.
    fn scrape(&mut self) -> String {
        if self.all {
            engines::rediscover(&mut self.engines, &super::local_engines());
        }
        engines::read_all(&mut self.engines, &self.config, self.timeout);
        super::prometheus::render(&self.engines)
    }
}

/// Serves `requests` scrapes (or any request answered) at `addr`, then returns.
pub fn serve(addr: SocketAddr, requests: u64, collector: Collector) -> std::io::Result<()> {
    if addr.ip().is_unspecified() {
        eprintln!(
            "ringcast stats --serve: warning: {addr} listens on every interface — anyone who can reach \
             this machine reads the engines' counters; bind 127.0.0.1 (the default) unless a \
             Prometheus server elsewhere scrapes it"
        );
    }
    let listener = TcpListener::bind(addr)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    let _ = std::io::stdout().flush();
    let collector = Arc::new(Mutex::new(collector));
    let open = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    // Wakes the accept loop once the count is reached.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    listener.set_nonblocking(true)?;
    while answered.load(Ordering::Acquire) < requests {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let _ = done_rx.recv_timeout(Duration::from_millis(20));
                continue;
            }
            // A client that vanished before accept, or no descriptor left: the next one.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let _ = stream.set_nonblocking(false);
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::AcqRel);
            refuse_busy(stream);
            continue;
        }
        let (collector, mine, answered, done) =
            (collector.clone(), open.clone(), answered.clone(), done_tx.clone());
        let spawned = std::thread::Builder::new().name("stats-http".into()).spawn(move || {
            if answer(stream, &collector).is_ok() && answered.fetch_add(1, Ordering::AcqRel) + 1 >= requests {
                let _ = done.send(());
            }
            mine.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::AcqRel);
        }
    }
    Ok(())
}

/// Past [`MAX_CONNECTIONS`]: `503` without waiting for the request (never blocks: the answer
/// fits the socket buffer of a fresh connection, or is dropped).
fn refuse_busy(stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let body = "busy: too many connections\n";
    let _ = (&stream).write_all(
        format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// Reads the request head from `stream` by [`REQUEST_DEADLINE`] and answers it.
fn answer(stream: TcpStream, collector: &Mutex<Collector>) -> std::io::Result<()> {
    let head = read_head(&stream, Instant::now() + REQUEST_DEADLINE)?;
    let request = String::from_utf8_lossy(&head);
    let mut words = request.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = match (method, path) {
        ("GET", "/metrics" | "/") => {
            let body = collector.lock().unwrap_or_else(|e| e.into_inner()).scrape();
            ("200 OK", body)
        }
        ("GET", _) => ("404 Not Found", "not found: ringcast serves /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
    };
    stream.set_write_timeout(Some(WRITE_DEADLINE))?;
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// The request head (up to the blank line), read by `deadline` whatever pace the client keeps.
fn read_head(mut stream: &TcpStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(head);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || head.len() >= HEAD_LIMIT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request head too slow or too long",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_or_nothing_binds_the_loopback_address() {
        assert_eq!(bind_address("").unwrap(), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(bind_address("9000").unwrap(), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(bind_address(":0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(bind_address("0.0.0.0:80").unwrap(), "0.0.0.0:80".parse().unwrap());
        assert_eq!(bind_address("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
        assert!(bind_address("localhost:80").is_err());
    }
}
