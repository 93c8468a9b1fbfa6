//! The kernel UDP fabric (docs/design.md §4): multicast to an IPv6 `ff15::` group derived from the
//! communicator's 112-bit group id ([`group_ipv6`]), or to an IPv4 `239/8` group
//! ([`group_ipv4`]) when asked to, and unicast between members — the portable Ethernet path and
//! the baseline the bypass fabrics are measured against.
//!
//! # Contract
//!
//! * Members are numbered `0..n` by the launcher, which hands every engine the same list of
//!   unicast socket addresses (index = [`PeerId`]). A member's unicast socket is bound to its
//!   entry, and it sends its multicast datagrams from that socket too, so every datagram — unicast
//!   or multicast — arrives with its sender's listed address as source. [`UdpFabric::poll`] maps
//!   the source back to a `PeerId`; a datagram from any other address is refused and counted,
//!   never handed to the protocol under a made-up member id. (UDP cannot stop a host on the
//!   link from spoofing a member's address: the keyed tag every frame carries is what stops a
//!   forger — `proto::auth`, tested with a spoofing forger in `host/cli/tests/forged_udp.rs`.)
//! * Nothing blocks: every socket is non-blocking; a full send buffer drops the datagram and
//!   counts it ([`UdpStats::tx_dropped`]); the kernel's receive-queue drops are read from
//!   `SO_RXQ_OVFL` and reported as [`FabricCounters::overrun`] (where the kernel offers it:
//!   `qemu-user` does not emulate it, and under it the count stays 0).
//! * Datagrams above the MTU are refused in both directions.
//! * Faults (`RINGCAST_FAULT_*`) are not this fabric's business: the engine wraps it in
//!   [`crate::fabric::faulty::Faulty`] like every other fabric (`runner/net.rs`), so the
//!   injector — and its generator — is one piece of code for every fabric. The wrapper sees a
//!   datagram after this fabric's own checks on receipt (member source, MTU, own loopback) and
//!   before them on sending (an over-MTU datagram bypasses it), as when the fabric injected
//!   faults itself.
//! * Multicast never leaves the link (hop limit 1) and loops back to the sending host, so members
//!   sharing a host hear each other; a member discards its own looped-back datagrams.
//!
//! # Sockets and options
//!
//! One unicast socket per member, bound to its listed address, which also sends multicast:
//! * `IPV6_V6ONLY` — one family per fabric; a dual-stack socket would report IPv4 peers as
//!   v4-mapped IPv6 addresses that match no member entry.
//! * `IPV6_MULTICAST_IF` / `IP_MULTICAST_IF` — the configured interface: without it the kernel
//!   picks the route to `ff00::/8` or `239/8`, which on a multi-homed host is rarely the fabric.
//! * `IPV6_MULTICAST_HOPS` / `IP_MULTICAST_TTL` = 1 — the group is the job's link; a datagram
//!   must never be routed beyond it.
//! * `IPV6_MULTICAST_LOOP` / `IP_MULTICAST_LOOP` on — members on one host (tests, several ranks
//!   per node) receive each other's multicast only through the loopback copy; the sender drops
//!   its own copy by source address.
//! * `SO_RCVBUF` — the receive queue absorbs a multicast burst while the polling loop is busy
//!   elsewhere; the default (`net.core.rmem_default`, ~200 KiB) holds ~100 full datagrams. The
//!   request is [`UdpOptions::rcvbuf`]; if `net.core.rmem_max` caps it, `SO_RCVBUFFORCE` is
//!   tried (needs `CAP_NET_ADMIN`, which a NIC-offload daemon often has). The effective value
//!   (as the kernel reports it: twice the request, for its bookkeeping) is
//!   [`UdpFabric::rcvbuf`].
//! * `SO_RXQ_OVFL` — the kernel attaches its per-socket drop count to every datagram: the only
//!   way to count datagrams lost to a full receive queue.
//!
//! One socket per joined group, bound to `[group]:port`:
//! * `SO_REUSEADDR` + `SO_REUSEPORT` before `bind` — several members on one host bind the same
//!   group and port; the kernel gives every such socket its own copy of a multicast datagram
//!   (`SO_REUSEPORT` load balancing applies to unicast only). Both are set so a member coexists
//!   with sockets that set only one of them.
//! * bound to the group address, not the wildcard — the socket then receives only datagrams sent
//!   to that group. Bound to the wildcard it would also receive every other group any process on
//!   the host joined on this port (Linux's `IP_MULTICAST_ALL` default).
//! * `IPV6_JOIN_GROUP` / `IP_ADD_MEMBERSHIP` on the configured interface; closing the socket
//!   (on [`Fabric::leave`] or drop) leaves the group.
//! * `SO_RCVBUF`, `SO_RXQ_OVFL`, `IPV6_V6ONLY` as above.
//!
//! # What works where (Linux 6.x)
//!
//! IPv6 multicast on `lo` does not: `lo` has no `MULTICAST` flag and no `ff00::/8` route, and
//! sending fails with `ENETUNREACH` (counted in [`UdpStats::tx_errors`]); even with both added,
//! nothing is delivered. IPv4 multicast on `lo` works. Across veth pairs joined by a Linux bridge
//! both families work. Tests on one host therefore use IPv4 on `lo`; see
//! `tests/fabric_udp.rs`.
use super::{Fabric, FabricCounters, FabricSetup};
use crate::config::UdpConfig;
use nix::sys::socket::{self as nsock, ControlMessageOwned, MsgFlags, SockaddrStorage};
use ringcast_proto::comm::ident::{group_ip, IpFamily};
use ringcast_proto::comm::{GroupId, PeerId};
use rustix::net::{self as rnet, sockopt, AddressFamily, SocketFlags, SocketType};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

/// Default receive buffer request per socket: 4 MiB, ~2800 full 1472-byte datagrams of payload
/// (fewer in practice: the kernel charges each datagram's whole buffer). Enough for several
/// broadcasts' multicast fragments to wait while the polling loop serves hosts.
pub const DEFAULT_RCVBUF: usize = 4 << 20;

/// Multicast hop limit / TTL: the link only.
pub const MULTICAST_HOPS: u32 = 1;

/// Largest UDP payload over IPv4 (65535 − 20 IP − 8 UDP).
pub const MAX_UDP_PAYLOAD_V4: usize = 65_507;

/// Largest UDP payload over IPv6 without jumbograms (65535 − 8 UDP).
pub const MAX_UDP_PAYLOAD_V6: usize = 65_527;

/// The interface multicast is sent and received on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interface {
    /// By index; `0` lets the kernel choose (the route to the group).
    Index(u32),
    /// By name (`eth0`), resolved in the fabric's network namespace.
    Name(String),
    /// By one of its addresses (an IPv6 address is resolved to its interface index through
    /// `/proc/net/if_inet6`).
    Addr(IpAddr),
}

/// How to build a [`UdpFabric`]: what the launcher decides beyond the member list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpOptions {
    /// Address family of the members and groups.
    pub family: IpFamily,
    /// Interface for multicast.
    pub interface: Interface,
    /// UDP port every member's group sockets bind (the same for all members).
    pub mcast_port: u16,
    /// Largest datagram, both directions.
    pub mtu: usize,
    /// `SO_RCVBUF` request for every socket, in bytes.
    pub rcvbuf: usize,
    /// Groups joined at once (one socket each).
    pub max_groups: usize,
}

impl UdpOptions {
    /// IPv6 on the kernel's choice of interface, `mcast_port`, the frame size `mtu` and at most
    /// `max_groups` groups, [`DEFAULT_RCVBUF`].
    pub fn new(mcast_port: u16, mtu: u32, max_groups: u32) -> Self {
        UdpOptions {
            family: IpFamily::V6,
            interface: Interface::Index(0),
            mcast_port,
            mtu: mtu as usize,
            rcvbuf: DEFAULT_RCVBUF,
            max_groups: max_groups as usize,
        }
    }
}

/// The multicast port of a job whose `udp.port` is 0, derived from the job name (in
/// `20000..40000`): every engine of a job computes the same one without being told.
pub fn job_port(job: &str) -> u16 {
    let h = Sha256::digest(format!("ringcast udp port of job {job}").as_bytes());
    20_000 + u16::from_le_bytes([h[0], h[1]]) % 20_000
}

impl UdpOptions {
    /// What the `udp` section says for the job of `setup`, for a member whose listed address
    /// is `own`: groups of `own`'s family, the section's port (or [`job_port`]), the section's
    /// interface (an index, a name, or when empty the interface holding `own`), the job's
    /// datagram size and one group per communicator.
    pub fn from_section(setup: &FabricSetup, section: &UdpConfig, own: IpAddr) -> UdpOptions {
        let port = match section.port {
            0 => job_port(&setup.job),
            p => p,
        };
        UdpOptions {
            family: IpFamily::of(own),
            interface: match section.interface.as_str() {
                "" => Interface::Addr(own),
                i => i.parse().map(Interface::Index).unwrap_or_else(|_| Interface::Name(i.to_string())),
            },
            mcast_port: port,
            mtu: setup.mtu,
            rcvbuf: DEFAULT_RCVBUF,
            max_groups: setup.max_groups,
        }
    }
}

/// The UDP fabric of member `setup.node` of the section's member list, with
/// [`UdpOptions::from_section`].
pub fn open(setup: &FabricSetup, section: &UdpConfig) -> Result<UdpFabric, UdpError> {
    let members = section.member_addrs().map_err(|e| UdpError::Invalid(e.to_string()))?;
    let own = members
        .get(setup.node.0 as usize)
        .ok_or_else(|| UdpError::Invalid(format!("udp.members has no address for node {}", setup.node.0)))?;
    let opts = UdpOptions::from_section(setup, section, own.ip());
    UdpFabric::new(setup.node, members, &opts)
}

/// Why a [`UdpFabric`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    /// The options or the member list are inconsistent.
    #[error("udp fabric: invalid configuration: {0}")]
    Invalid(String),
    /// A socket call failed.
    #[error("udp fabric: {op}: {source}")]
    Io {
        /// The failing step (`bind`, `IPV6_JOIN_GROUP`, ...).
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl From<UdpError> for io::Error {
    fn from(e: UdpError) -> io::Error {
        match e {
            UdpError::Invalid(m) => io::Error::new(io::ErrorKind::InvalidInput, m),
            UdpError::Io { op, source } => io::Error::new(source.kind(), format!("{op}: {source}")),
        }
    }
}

/// Names the failing step of a socket call.
fn step<T>(op: &'static str, r: Result<T, impl Into<io::Error>>) -> Result<T, UdpError> {
    r.map_err(|e| UdpError::Io { op, source: e.into() })
}

/// What the UDP fabric counts beyond [`FabricCounters`] (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Refused on receipt: the source is not a member (included in `refused`).
    pub foreign: u64,
    /// Refused on receipt: larger than the MTU (included in `refused`).
    pub oversize: u64,
    /// Refused on send: larger than the MTU or to an unknown member (included in `refused`).
    pub tx_refused: u64,
    /// This member's own multicast datagrams looped back by the kernel and discarded.
    pub own: u64,
    /// Datagrams not sent because the socket's send queue was full (`EAGAIN`, `ENOBUFS`).
    pub tx_dropped: u64,
    /// Datagrams not sent for another reason (`ENETUNREACH`, a firewall's `EPERM`, ...).
    pub tx_errors: u64,
    /// Receive calls that failed for a reason other than an empty queue.
    pub rx_errors: u64,
}

/// A receiving socket and the kernel's drop count last seen on it.
#[derive(Debug)]
struct Endpoint {
    sock: UdpSocket,
    drops_seen: u32,
    rcvbuf: usize,
}

/// The resolved multicast interface.
#[derive(Clone, Copy, Debug)]
enum McastIf {
    V6(u32),
    V4 { addr: Ipv4Addr, index: u32 },
}

/// One received datagram's metadata.
struct Recv {
    len: usize,
    src: Option<SocketAddr>,
    drops: Option<u32>,
}

/// The kernel UDP fabric of one member. See the module documentation.
#[derive(Debug)]
pub struct UdpFabric {
    local: PeerId,
    /// `members[local]`.
    own: SocketAddr,
    family: IpFamily,
    /// Normalized member addresses (index = `PeerId`).
    members: Vec<SocketAddr>,
    by_addr: HashMap<SocketAddr, PeerId>,
    mcast_if: McastIf,
    mcast_port: u16,
    mtu: usize,
    rcvbuf_request: usize,
    max_groups: usize,
    unicast: Endpoint,
    groups: Vec<(GroupId, Endpoint)>,
    /// Which socket `poll` reads first (rotates, so a busy socket cannot starve the others).
    next_socket: usize,
    /// Receive buffer, `mtu` bytes.
    buf: Vec<u8>,
    /// Control-message buffer for `SO_RXQ_OVFL`.
    cmsg: Vec<u8>,
    counters: FabricCounters,
    stats: UdpStats,
}

/// `a` as the kernel reports a source: no flow label, a scope id only where it matters
/// (link-local unicast), so a member list entry and a received source compare equal.
fn normalize(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(_) => a,
        SocketAddr::V6(v6) => {
            let link_local = v6.ip().segments()[0] & 0xffc0 == 0xfe80;
            let scope = if link_local { v6.scope_id() } else { 0 };
            SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, scope))
        }
    }
}

/// The interface index owning IPv6 address `addr`, from `/proc/net/if_inet6` (one line per
/// address: 32 hex digits, interface index in hex, prefix length, scope, flags, name).
fn ipv6_ifindex(addr: &Ipv6Addr) -> io::Result<u32> {
    let table = std::fs::read_to_string("/proc/net/if_inet6")?;
    for line in table.lines() {
        let mut fields = line.split_whitespace();
        let (Some(hex), Some(index)) = (fields.next(), fields.next()) else { continue };
        let Ok(bits) = u128::from_str_radix(hex, 16) else { continue };
        if hex.len() == 32 && Ipv6Addr::from(bits) == *addr {
            return u32::from_str_radix(index, 16).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
        }
    }
    Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface has address {addr}")))
}

/// A non-blocking, close-on-exec UDP socket of `family` (v6-only for IPv6).
fn new_socket(family: IpFamily) -> Result<OwnedFd, UdpError> {
    let af = match family {
        IpFamily::V6 => AddressFamily::INET6,
        IpFamily::V4 => AddressFamily::INET,
    };
    let fd = step(
        "socket",
        rnet::socket_with(
            af,
            SocketType::DGRAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            Some(rnet::ipproto::UDP),
        ),
    )?;
    if family == IpFamily::V6 {
        step("IPV6_V6ONLY", sockopt::set_ipv6_v6only(&fd, true))?;
    }
    Ok(fd)
}

/// Sets `SO_RCVBUF` to `request` (forcing past `rmem_max` where permitted) and `SO_RXQ_OVFL`;
/// returns the effective buffer size the kernel reports.
fn set_receive_options(fd: &OwnedFd, request: usize) -> Result<usize, UdpError> {
    step("SO_RCVBUF", sockopt::set_socket_recv_buffer_size(fd, request))?;
    let mut effective = step("SO_RCVBUF (read back)", sockopt::socket_recv_buffer_size(fd))?;
    // The kernel doubles a request it grants in full; less means `net.core.rmem_max` capped it.
    // `SO_RCVBUFFORCE` ignores the cap when the process has CAP_NET_ADMIN; without it, the
    // capped size stands (and is what `rcvbuf()` reports).
    if effective < request.saturating_mul(2)
        && sockopt::set_socket_recv_buffer_size_force(fd, request).is_ok()
    {
        effective = step("SO_RCVBUF (read back)", sockopt::socket_recv_buffer_size(fd))?;
    }
    match nsock::setsockopt(fd, nsock::sockopt::RxqOvfl, &1) {
        // Not emulated by qemu-user (the aarch64 engine of the DPU emulation): the fabric then
        // works without counting the receive queue's drops (`overrun` stays 0; repair still
        // recovers what was dropped).
        Err(nix::errno::Errno::ENOPROTOOPT) => {}
        other => step("SO_RXQ_OVFL", other)?,
    }
    Ok(effective)
}

/// Reads one datagram without blocking. With `MSG_TRUNC` the kernel reports a datagram's full
/// length even when it exceeds `buf`, so the caller can refuse it by size.
fn recv_one(sock: &UdpSocket, buf: &mut [u8], cmsg: &mut Vec<u8>) -> io::Result<Recv> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = nsock::recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(cmsg),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
    )?;
    let mut drops = None;
    // A truncated control buffer (never, at its size) only loses the drop count.
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::RxqOvfl(n) = c {
                drops = Some(n);
            }
        }
    }
    let src = msg.address.as_ref().and_then(|a| {
        if let Some(v6) = a.as_sockaddr_in6() {
            Some(SocketAddr::V6(SocketAddrV6::from(*v6)))
        } else {
            a.as_sockaddr_in().map(|v4| SocketAddr::V4(SocketAddrV4::from(*v4)))
        }
    });
    Ok(Recv { len: msg.bytes, src, drops })
}

/// Sends `frame` to `dest` without blocking; a failure is counted, never returned (the fabric
/// is unreliable by contract).
fn transmit(sock: &UdpSocket, dest: SocketAddr, frame: &[u8], stats: &mut UdpStats) {
    match sock.send_to(frame, dest) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(enobufs()) => {
            stats.tx_dropped += 1
        }
        Err(_) => stats.tx_errors += 1,
    }
}

/// `ENOBUFS`: the interface queue is full (a multicast burst on a slow link).
fn enobufs() -> i32 {
    rustix::io::Errno::NOBUFS.raw_os_error()
}

impl UdpFabric {
    /// Member `local` of `members` (unicast addresses, index = [`PeerId`]).
    ///
    /// Binds the unicast socket to `members[local]`; groups are joined later
    /// ([`Fabric::join`]).
    pub fn new(local: PeerId, members: Vec<SocketAddr>, opts: &UdpOptions) -> Result<UdpFabric, UdpError> {
        let bad = |m: String| Err(UdpError::Invalid(m));
        let members: Vec<SocketAddr> = members.into_iter().map(normalize).collect();
        let Some(&own) = members.get(local.0 as usize) else {
            return bad(format!("member {} of a list of {}", local.0, members.len()));
        };
        let max_payload = match opts.family {
            IpFamily::V6 => MAX_UDP_PAYLOAD_V6,
            IpFamily::V4 => MAX_UDP_PAYLOAD_V4,
        };
        if opts.mtu == 0 || opts.mtu > max_payload {
            return bad(format!("mtu {} outside 1..={max_payload}", opts.mtu));
        }
        if opts.mcast_port == 0 {
            return bad("multicast port 0 (members must agree on one port)".into());
        }
        let mut by_addr = HashMap::with_capacity(members.len());
        for (i, a) in members.iter().enumerate() {
            // Every source must identify exactly one member: no wildcard, no port 0, one family,
            // no duplicates.
            let family_ok = matches!(
                (opts.family, a),
                (IpFamily::V6, SocketAddr::V6(_)) | (IpFamily::V4, SocketAddr::V4(_))
            );
            if !family_ok || a.ip().is_unspecified() || a.ip().is_multicast() || a.port() == 0 {
                return bad(format!(
                    "member {i}: {a} is not a {:?} unicast address with a port",
                    opts.family
                ));
            }
            let id = PeerId(u32::try_from(i).map_err(|_| UdpError::Invalid("too many members".into()))?);
            if by_addr.insert(*a, id).is_some() {
                return bad(format!("member {i}: address {a} listed twice"));
            }
        }

        let fd = new_socket(opts.family)?;
        let rcvbuf = set_receive_options(&fd, opts.rcvbuf)?;
        let mcast_if = match (&opts.interface, opts.family) {
            (Interface::Index(i), IpFamily::V6) => McastIf::V6(*i),
            (Interface::Index(i), IpFamily::V4) => McastIf::V4 { addr: Ipv4Addr::UNSPECIFIED, index: *i },
            (Interface::Name(n), f) => {
                let index = step("interface name", rnet::netdevice::name_to_index(&fd, n))?;
                match f {
                    IpFamily::V6 => McastIf::V6(index),
                    IpFamily::V4 => McastIf::V4 { addr: Ipv4Addr::UNSPECIFIED, index },
                }
            }
            (Interface::Addr(IpAddr::V6(a)), IpFamily::V6) => {
                McastIf::V6(step("interface address", ipv6_ifindex(a))?)
            }
            (Interface::Addr(IpAddr::V4(a)), IpFamily::V4) => McastIf::V4 { addr: *a, index: 0 },
            (Interface::Addr(a), f) => return bad(format!("interface address {a} is not {f:?}")),
        };
        match mcast_if {
            McastIf::V6(index) => {
                step("IPV6_MULTICAST_IF", sockopt::set_ipv6_multicast_if(&fd, index))?;
                step("IPV6_MULTICAST_HOPS", sockopt::set_ipv6_multicast_hops(&fd, MULTICAST_HOPS))?;
                step("IPV6_MULTICAST_LOOP", sockopt::set_ipv6_multicast_loop(&fd, true))?;
            }
            McastIf::V4 { addr, index } => {
                let any = Ipv4Addr::UNSPECIFIED;
                step("IP_MULTICAST_IF", sockopt::set_ip_multicast_if_with_ifindex(&fd, &any, &addr, index))?;
                step("IP_MULTICAST_TTL", sockopt::set_ip_multicast_ttl(&fd, MULTICAST_HOPS))?;
                step("IP_MULTICAST_LOOP", sockopt::set_ip_multicast_loop(&fd, true))?;
            }
        }
        step("bind", rnet::bind(&fd, &own))?;

        Ok(UdpFabric {
            local,
            own,
            family: opts.family,
            members,
            by_addr,
            mcast_if,
            mcast_port: opts.mcast_port,
            mtu: opts.mtu,
            rcvbuf_request: opts.rcvbuf,
            max_groups: opts.max_groups,
            unicast: Endpoint { sock: UdpSocket::from(fd), drops_seen: 0, rcvbuf },
            groups: Vec::with_capacity(opts.max_groups.min(1024)),
            next_socket: 0,
            buf: vec![0; opts.mtu],
            cmsg: nix::cmsg_space!(u32),
            counters: FabricCounters::default(),
            stats: UdpStats::default(),
        })
    }

    /// The multicast destination of `group`: its derived address and the fabric's port.
    pub fn group_addr(&self, group: &GroupId) -> SocketAddr {
        SocketAddr::new(group_ip(group, self.family), self.mcast_port)
    }

    /// This member's unicast address.
    pub fn local_addr(&self) -> SocketAddr {
        self.own
    }

    /// Effective `SO_RCVBUF` of the unicast socket, as the kernel reports it (twice the granted
    /// request; less than twice [`UdpOptions::rcvbuf`] when `net.core.rmem_max` capped it and
    /// forcing was not permitted).
    pub fn rcvbuf(&self) -> usize {
        self.unicast.rcvbuf
    }

    /// Effective `SO_RCVBUF` of the socket of `group`, if joined.
    pub fn group_rcvbuf(&self, group: &GroupId) -> Option<usize> {
        self.groups.iter().find(|(g, _)| g == group).map(|(_, e)| e.rcvbuf)
    }

    /// Counters beyond [`FabricCounters`].
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// A group socket: reusable address and port, bound to the group, joined on the interface.
    fn open_group(&self, group: &GroupId) -> Result<Endpoint, UdpError> {
        let fd = new_socket(self.family)?;
        step("SO_REUSEADDR", sockopt::set_socket_reuseaddr(&fd, true))?;
        step("SO_REUSEPORT", sockopt::set_socket_reuseport(&fd, true))?;
        let rcvbuf = set_receive_options(&fd, self.rcvbuf_request)?;
        let addr = self.group_addr(group);
        step("bind (group)", rnet::bind(&fd, &addr))?;
        match (self.mcast_if, addr.ip()) {
            (McastIf::V6(index), IpAddr::V6(g)) => {
                step("IPV6_JOIN_GROUP", sockopt::set_ipv6_add_membership(&fd, &g, index))?
            }
            (McastIf::V4 { addr, index }, IpAddr::V4(g)) => {
                step("IP_ADD_MEMBERSHIP", sockopt::set_ip_add_membership_with_ifindex(&fd, &g, &addr, index))?
            }
            // `group_addr` follows `family`, and `mcast_if` was resolved for it.
            _ => return Err(UdpError::Invalid("interface and group families differ".into())),
        }
        Ok(Endpoint { sock: UdpSocket::from(fd), drops_seen: 0, rcvbuf })
    }

    /// Takes the datagram `recv` put in `buf`, from a group socket if `multicast`: refuses it,
    /// drops it (this member's own looped-back multicast), or delivers it. Returns the
    /// deliveries (0 or 1).
    fn accept(&mut self, recv: &Recv, multicast: bool, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        if recv.len > self.mtu {
            self.counters.refused += 1;
            self.stats.oversize += 1;
            return 0;
        }
        let Some(&peer) = recv.src.map(normalize).and_then(|s| self.by_addr.get(&s)) else {
            self.counters.refused += 1;
            self.stats.foreign += 1;
            return 0;
        };
        if multicast && peer == self.local {
            // Our own multicast, looped back for the other members on this host.
            self.stats.own += 1;
            return 0;
        }
        let Some(frame) = self.buf.get(..recv.len) else { return 0 };
        self.counters.received += 1;
        rx(peer, frame);
        1
    }
}

impl Fabric for UdpFabric {
    fn local(&self) -> PeerId {
        self.local
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn join(&mut self, group: &GroupId) -> io::Result<()> {
        if self.groups.iter().any(|(g, _)| g == group) {
            return Ok(());
        }
        if self.groups.len() >= self.max_groups {
            return Err(io::Error::other(format!("udp fabric: {} groups joined already", self.groups.len())));
        }
        let endpoint = self.open_group(group)?;
        self.groups.push((*group, endpoint));
        Ok(())
    }

    fn groups(&self) -> usize {
        self.groups.len()
    }

    fn leave(&mut self, group: &GroupId) {
        // Closing the socket drops its membership.
        self.groups.retain(|(g, _)| g != group);
    }

    fn send(&mut self, to: PeerId, frame: &[u8]) {
        let dest = self.members.get(to.0 as usize).copied();
        match dest {
            Some(dest) if frame.len() <= self.mtu => {
                self.counters.sent += 1;
                transmit(&self.unicast.sock, dest, frame, &mut self.stats);
            }
            _ => {
                self.counters.refused += 1;
                self.stats.tx_refused += 1;
            }
        }
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        if frame.len() > self.mtu {
            self.counters.refused += 1;
            self.stats.tx_refused += 1;
            return;
        }
        self.counters.multicast += 1;
        let dest = self.group_addr(group);
        transmit(&self.unicast.sock, dest, frame, &mut self.stats);
    }

    /// Reads the sockets in turn — the unicast socket and one per group, starting with a
    /// different one each call — until `budget` datagrams have been read (delivered, refused or
    /// dropped alike, so a flood of foreign traffic cannot keep the loop here) or every socket
    /// is empty.
    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let mut delivered = 0;
        let mut taken = 0;
        let sockets = 1 + self.groups.len();
        let start = self.next_socket % sockets;
        self.next_socket = self.next_socket.wrapping_add(1);
        for k in 0..sockets {
            let idx = (start + k) % sockets;
            while taken < budget {
                let endpoint = match idx.checked_sub(1) {
                    None => &mut self.unicast,
                    Some(g) => match self.groups.get_mut(g) {
                        Some((_, e)) => e,
                        None => break,
                    },
                };
                let recv = match recv_one(&endpoint.sock, &mut self.buf, &mut self.cmsg) {
                    Ok(r) => r,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        taken += 1;
                        continue;
                    }
                    Err(_) => {
                        self.stats.rx_errors += 1;
                        break;
                    }
                };
                taken += 1;
                if let Some(d) = recv.drops {
                    // Cumulative per socket, a u32 that wraps.
                    self.counters.overrun += u64::from(d.wrapping_sub(endpoint.drops_seen));
                    endpoint.drops_seen = d;
                }
                delivered += self.accept(&recv, idx != 0, rx);
            }
        }
        delivered
    }

    fn counters(&self) -> FabricCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_compare_equal_to_member_entries() {
        let listed: SocketAddr = "[fd00::1]:9000".parse().expect("addr");
        let received = SocketAddr::V6(SocketAddrV6::new("fd00::1".parse().expect("ip"), 9000, 0x1234, 3));
        assert_eq!(normalize(received), listed, "flow label and a global address's scope ignored");
        let ll = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().expect("ip"), 9000, 0, 3));
        assert_eq!(normalize(ll), ll, "a link-local address keeps its scope");
        let v4: SocketAddr = "10.0.0.1:9".parse().expect("addr");
        assert_eq!(normalize(v4), v4);
    }

    #[test]
    fn ipv6_addresses_resolve_to_their_interface() {
        // `::1` is on `lo`, index 1, wherever IPv6 is enabled.
        if let Ok(index) = ipv6_ifindex(&Ipv6Addr::LOCALHOST) {
            assert_eq!(index, 1);
        }
        assert!(ipv6_ifindex(&"2001:db8::dead".parse().expect("ip")).is_err(), "documentation prefix");
    }

    #[test]
    fn options_follow_the_section_and_the_setup() {
        let setup = FabricSetup {
            job: "unit".into(),
            node: PeerId(1),
            nodes: 2,
            mtu: 9000,
            max_groups: 7,
            log_level: 0,
        };
        let v4: IpAddr = "10.0.0.2".parse().expect("ip");
        let o = UdpOptions::from_section(&setup, &UdpConfig::default(), v4);
        assert_eq!((o.family, o.mtu, o.max_groups, o.rcvbuf), (IpFamily::V4, 9000, 7, DEFAULT_RCVBUF));
        assert_eq!((o.mcast_port, o.interface.clone()), (job_port("unit"), Interface::Addr(v4)));
        assert!((20_000..40_000).contains(&o.mcast_port));
        let named = UdpConfig { port: 4000, interface: "eth1".into(), ..Default::default() };
        let o = UdpOptions::from_section(&setup, &named, "fd00::2".parse().expect("ip"));
        assert_eq!(
            (o.family, o.mcast_port, o.interface.clone()),
            (IpFamily::V6, 4000, Interface::Name("eth1".into()))
        );
        let indexed = UdpConfig { interface: "3".into(), ..Default::default() };
        assert_eq!(UdpOptions::from_section(&setup, &indexed, v4).interface, Interface::Index(3));
        let bad = UdpOptions { mcast_port: 0, ..o };
        let members = vec!["[::1]:4001".parse().expect("addr")];
        assert!(matches!(UdpFabric::new(PeerId(0), members, &bad), Err(UdpError::Invalid(_))));
        // A node the list has no address for.
        let one = UdpConfig { members: "127.0.0.1:4001".into(), ..Default::default() };
        assert!(matches!(open(&setup, &one), Err(UdpError::Invalid(m)) if m.contains("node 1")));
    }
}
