//! The attach handshake of a host with its engine: over the Unix socket or TCP; `HELLO` (both
//! ends' nonces, and the engine's pid for Yama) and, over TCP, `AUTH`/`AUTH_OK` (each end proves
//! the session key derived from the job's secret and both hellos; every later message carries a
//! MAC: `ringcast_offload::ctl::session`) where needed; `RDMA_CONNECT` for the `rdma` backend (queue pair addresses exchanged); then
//! `ATTACH` with engine-built (mapped) or host-owned rings (`cma`, `rdma`: built here, in this
//! process's memory, with the nonce in their header; `rdma`: registered with the device). See docs/architecture.md, "Control
//! path".
use crate::error::{Error, Result};
use crate::rdma::RdmaEnd;
use ringcast_abi::ctl::{CtlKind, CtlMsg, CtlStatus};
use ringcast_abi::ABI_VERSION;
use ringcast_offload::config::{DmaMode, LocalRank};
use ringcast_offload::ctl::{self, session, CtlSock, Role, SessionKeys};
use ringcast_offload::Config;
use ringcast_ring::attach::{self, HostRings};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Options for [`crate::Host::attach_with`]: what the handshake asks the engine for.
#[derive(Clone, Debug, Default)]
pub struct AttachOptions {
    /// Ring entries to ask for (power of two); 0 takes the engine's `ring_entries`.
    pub ring_entries: u32,
    /// Most operations outstanding before `try_post` says `WouldBlock`. `None`: the completion
    /// ring's capacity, so completions can never back up. A larger value is allowed — the engine
    /// then stops taking descriptors while the completion ring is full (engine-side
    /// back-pressure) — for hosts that reap completions on another schedule.
    pub max_in_flight: Option<usize>,
    /// Limit on each control request; `None`: the `ctl_timeout_ms` tunable.
    pub ctl_timeout: Option<Duration>,
}

/// What a successful handshake leaves.
pub(crate) struct Attached {
    pub(crate) sock: CtlSock,
    pub(crate) rings: HostRings,
    /// The rings are this process's own and its memory registers by address.
    pub(crate) host_owned: bool,
    /// The engine's `ATTACH_OK`.
    pub(crate) reply: CtlMsg,
    /// The next request's sequence number.
    pub(crate) next_seq: u64,
    /// The RDMA end the engine reaches this process's memory through (`rdma` backend).
    pub(crate) rdma: Option<RdmaEnd>,
}

/// Connects to `name` (`tcp://ip:port`, or an engine name) and attaches.
pub(crate) fn attach(
    name: &str,
    config: &Config,
    opts: &AttachOptions,
    ctl_timeout: Duration,
) -> Result<Attached> {
    // The RDMA end first: no device is said before the engine is bothered.
    let mut rdma = match config.runner.dma {
        DmaMode::Rdma => Some(RdmaEnd::open(&config.verbs)?),
        _ => None,
    };
    // Bounded like every request: a stopped engine's full backlog must not hold a host for ever.
    let mut sock = CtlSock::connect_within(name, Some(ctl_timeout))
        .map_err(|source| Error::Connect { name: name.to_string(), source })?;
    // Over TCP nothing can be mapped: the engine is across the PCIe boundary.
    let host_owned = sock.is_tcp() || matches!(config.runner.dma, DmaMode::Cma | DmaMode::Rdma);
    let refused = |reply: &CtlMsg, request: &'static str| match reply.status {
        CtlStatus::ABI_MISMATCH => Error::AbiMismatch { engine: reply.b, library: ABI_VERSION },
        status => Error::Refused { request, status },
    };
    let mut seq = 1;
    // Numbers `req` (the caller keeps the message as sent: a hello is part of the transcript).
    let mut request = |sock: &mut CtlSock, req: &mut CtlMsg, what: &'static str| {
        req.seq = seq;
        seq += 1;
        call(sock, req, None, ctl_timeout, what, &mut |_| {})
    };
    // The nonces: to prove the job's secret over TCP, and host-owned rings as ours.
    let mut nonce = 0;
    let mut transcript = None;
    if host_owned {
        let mut hello = session::hello(std::process::id());
        let (reply, _) = request(&mut sock, &mut hello, "hello")?;
        if reply.kind != CtlKind::HELLO_OK {
            return Err(refused(&reply, "hello"));
        }
        nonce = reply.c;
        transcript = Some((hello, reply));
        // The engine reaches our memory by cross-memory attach: where Yama restricts ptrace
        // to descendants, this lets that one process (and no other) in, as registering
        // memory with an RDMA NIC grants it a key. Best effort: without Yama there is
        // nothing to set.
        if rdma.is_none() {
            ctl::let_engine_in(reply.d);
        }
    }
    if sock.is_tcp() {
        let Some(secret) = config.topology.job_secret.0 else {
            return Err(Error::Protocol("an engine over TCP needs the job's secret (RINGCAST_JOB_SECRET)"));
        };
        let Some((hello, hello_ok)) = transcript else {
            return Err(Error::Protocol("no HELLO before AUTH"));
        };
        // Both ends prove the key of this connection's transcript: a relay without the secret
        // that changed a hello leaves the two with different keys, and can pass later messages
        // only unchanged.
        let keys = SessionKeys::derive(&secret, &hello, &hello_ok);
        let mut auth = CtlMsg::new(CtlKind::AUTH);
        (auth.d, auth.e) = keys.host_proof();
        let (reply, _) = request(&mut sock, &mut auth, "auth")?;
        if reply.kind != CtlKind::AUTH_OK {
            return Err(refused(&reply, "auth"));
        }
        if !keys.proves(Role::Engine, (reply.d, reply.e)) {
            return Err(Error::Unauthentic("the engine did not prove the job's secret over this connection"));
        }
        sock.start_session(keys, Role::Host);
    }
    if let Some(end) = rdma.as_mut() {
        // The engine's queue pair is connected to ours before it reads anything of ours.
        let mut req = CtlMsg::new(CtlKind::RDMA_CONNECT);
        end.address()?.put(&mut req);
        let (reply, _) = request(&mut sock, &mut req, "rdma connect")?;
        if reply.kind != CtlKind::RDMA_CONNECT_OK {
            return Err(refused(&reply, "rdma connect"));
        }
        let engine =
            ctl::QpAddress::get(&reply).ok_or(Error::Protocol("RDMA_CONNECT_OK without an address"))?;
        end.connect(&engine)?;
    }
    let mut req = CtlMsg::new(CtlKind::ATTACH);
    req.a = std::process::id();
    req.b = opts.ring_entries;
    req.c = match config.topology.local_rank {
        LocalRank::Auto => 0,
        LocalRank::Fixed(l) => u64::from(l) + 1,
        LocalRank::None => u64::MAX,
    };
    let owned = if host_owned {
        let entries = if opts.ring_entries == 0 { config.limits.ring_entries } else { opts.ring_entries };
        let mut rings = attach::create_host_owned(entries, nonce)?;
        // The engine's ends are DMA copies: indices are mirrored (ringcast_abi::ring).
        rings.sq.set_mirrored();
        rings.cq.set_mirrored();
        req.b = entries;
        req.d = rings.segment.as_non_null().as_ptr() as u64;
        req.e = rings.header.total_len;
        if let Some(end) = rdma.as_mut() {
            // Exposed to the engine's queue pair: `a` is its key (a pid means nothing there).
            req.a = end.expose_rings(req.d, req.e)?;
        }
        Some(rings)
    } else {
        None
    };
    let (reply, fd) = request(&mut sock, &mut req, "attach")?;
    if reply.kind == CtlKind::ERROR {
        return Err(refused(&reply, "attach"));
    }
    let rings = match (reply.kind, fd, owned) {
        (CtlKind::ATTACH_OK, None, Some(rings)) => rings,
        (CtlKind::ATTACH_OK, Some(fd), None) => attach::open(fd)?,
        _ => return Err(Error::Protocol("attach reply does not match the rings asked for")),
    };
    Ok(Attached { sock, rings, host_owned, reply, next_seq: seq, rdma })
}

pub(crate) fn call(
    sock: &mut CtlSock,
    msg: &CtlMsg,
    fd: Option<std::os::fd::BorrowedFd<'_>>,
    timeout: Duration,
    request: &'static str,
    stale: &mut dyn FnMut(CtlMsg),
) -> Result<(CtlMsg, Option<OwnedFd>)> {
    sock.call(msg, fd, timeout, stale).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionReset => Error::EngineGone,
        std::io::ErrorKind::TimedOut => Error::Timeout { request, timeout },
        std::io::ErrorKind::PermissionDenied => {
            Error::Unauthentic("a control message failed its MAC: changed, replayed or reordered on the way")
        }
        _ => Error::Io(e),
    })
}
