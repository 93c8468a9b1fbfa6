//! The TCP side of the engine's tests: a daemon serving `cma` hosts over TCP with the job's
//! secret, hosts attached there, and the handshake's steps by hand (for tests that play a host,
//! a wrong one, or a relay).
use super::*;
use ringcast_abi::ctl::{CtlKind, CtlMsg};
use ringcast_offload::ctl::{self, CtlSock};

/// How long a test waits for one control reply.
pub const TCP_TIMEOUT: Duration = Duration::from_secs(10);

/// The job's secret of every TCP test (64 hex digits).
pub const SECRET: &str = "5a17c0ffee5a17c0ffee5a17c0ffee5a17c0ffee5a17c0ffee5a17c0ffee0001";

/// [`SECRET`] as bytes.
pub fn secret() -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&SECRET[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// A port nobody listens on now (the daemon binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A daemon that serves `cma` only, on its abstract socket and on TCP; its `tcp://` address.
pub fn cma_daemon(tag: &str) -> (Daemon, String) {
    let name = unique_name(tag);
    let port = free_port();
    let daemon = Daemon::start_with(
        &name,
        &[
            ("RINGCAST_LISTEN_TCP", format!("127.0.0.1:{port}")),
            ("RINGCAST_JOB_SECRET", SECRET.to_string()),
            ("RINGCAST_DMA", "cma".to_string()),
        ],
    );
    (daemon, format!("tcp://127.0.0.1:{port}"))
}

/// A host attached over TCP with the job's secret (this process's environment has none).
pub fn tcp_host(addr: &str) -> Host {
    let config = ringcast_host::Config::default().with(|c| c.topology.job_secret.0 = Some(secret()));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Host::attach_config(addr, &config, Default::default()) {
            Ok(h) => return h,
            Err(ringcast_host::Error::Connect { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("attach over TCP: {e}"),
        }
    }
}

/// `HELLO` (seq 1) on `sock`: the transcript, as sent and as answered.
pub fn hello(sock: &mut CtlSock) -> (CtlMsg, CtlMsg) {
    let mut hello = ctl::session::hello(std::process::id());
    hello.seq = 1;
    let (ok, _) = sock.call(&hello, None, TCP_TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(ok.kind, CtlKind::HELLO_OK);
    (hello, ok)
}

/// The `AUTH` (seq 2) proving `secret` over `transcript`.
pub fn auth(secret: &[u8; 32], transcript: &(CtlMsg, CtlMsg)) -> CtlMsg {
    let mut auth = CtlMsg::new(CtlKind::AUTH);
    auth.seq = 2;
    (auth.d, auth.e) = ctl::SessionKeys::derive(secret, &transcript.0, &transcript.1).host_proof();
    auth
}

/// A fresh authenticated connection: HELLO, AUTH with the job's secret, the engine's proof
/// checked, every later message sealed.
pub fn authed(addr: &str) -> CtlSock {
    authed_nonce(addr).0
}

/// [`authed`], and the engine's nonce (the attach proof host-owned rings carry).
pub fn authed_nonce(addr: &str) -> (CtlSock, u64) {
    let mut sock = CtlSock::connect(addr).unwrap();
    let transcript = hello(&mut sock);
    let keys = ctl::SessionKeys::derive(&secret(), &transcript.0, &transcript.1);
    let (ok, _) = sock.call(&auth(&secret(), &transcript), None, TCP_TIMEOUT, &mut |_| {}).unwrap();
    assert_eq!(ok.kind, CtlKind::AUTH_OK);
    assert!(keys.proves(ctl::Role::Engine, (ok.d, ok.e)), "the engine proves the secret too");
    sock.start_session(keys, ctl::Role::Host);
    (sock, transcript.1.c)
}
