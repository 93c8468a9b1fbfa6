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
//! * Batches ([`Fabric::send_batch`], [`Fabric::poll`]): several datagrams per system call.
//!   Sending (`tx.rs`): up to `udp.batch` datagrams at a time, a run of one destination and one
//!   size (a root's fragments) as one UDP GSO send (`UDP_SEGMENT`) where the kernel has it,
//!   the rest in one `sendmmsg`, each datagram gathered from its parts without a copy; a GSO
//!   send the kernel refuses turns GSO off and goes by `sendmmsg`. Receiving (`rx.rs`): one
//!   `recvmmsg` of up to `udp.batch` datagrams per socket that holds something — a poll first
//!   asks the fabric's readiness set (`ready.rs`, one `epoll_wait` that does not wait) which
//!   sockets do, so an idle poll is one system call however many groups are joined — and with
//!   UDP GRO (`UDP_GRO`, probed per socket) a buffer of several datagrams of one sender in one
//!   slot. A batch the kernel
//!   takes in part is never counted whole: [`UdpStats::tx_datagrams`] is what it reported sent,
//!   and the rest is [`UdpStats::tx_dropped`] or [`UdpStats::tx_errors`]. How many datagrams one
//!   call carried is `tx_datagrams / tx_calls` and `received / rx_calls`.
//! * A sleeping engine is woken by the fabric's doorbell thread (`waker.rs`): it watches the
//!   sockets (`epoll`) only while the engine sleeps and rings once per sleep, so the engine
//!   sleeps on its hosts' doorbells and this bell at once, as on `shm`, instead of napping; no
//!   datagram wakes anything while the engine is awake. While every host of a daemon engine
//!   waits on an operation in flight, the engine sleeps on the sockets itself instead
//!   ([`Fabric::wait`], the readiness set's `epoll_wait`, `runner/engine_loop.rs`): the kernel
//!   wakes it when a datagram lands, with no thread between the socket and the engine.
//! * The datagram size comes from the path ([`path_datagram`]: the least route MTU to the
//!   members and the groups, less the IP and UDP headers — 1472 on 1500-byte Ethernet, the
//!   protocol's 65000 on loopback, whose MTU is 64 KiB) unless `RINGCAST_MTU` says otherwise;
//!   every member must use the same (a frame of another size is dropped by the protocol).
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
//! * `SO_SNDBUF` — sized like `SO_RCVBUF` ([`UdpOptions::sndbuf`]): a batch the interface queue
//!   holds back stays charged to the socket until it leaves, and a smaller buffer would refuse
//!   the batch's tail. Both default to a window: twice the largest message
//!   ([`FabricSetup::window`]), at least [`DEFAULT_RCVBUF`].
//! * `UDP_GRO` (when `udp.offload` is `auto` and the kernel has it) — coalesced receive.
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
//! * `SO_RCVBUF`, `SO_RXQ_OVFL`, `UDP_GRO`, `IPV6_V6ONLY` as above.
//!
//! # What works where (Linux 6.x)
//!
//! IPv6 multicast on `lo` does not: `lo` has no `MULTICAST` flag and no `ff00::/8` route, and
//! sending fails with `ENETUNREACH` (counted in [`UdpStats::tx_errors`]); even with both added,
//! nothing is delivered. IPv4 multicast on `lo` works. Across veth pairs joined by a Linux bridge
//! both families work. Tests on one host therefore use IPv4 on `lo`; see
//! `tests/fabric_udp.rs`.
use super::{Datagram, Dest, Fabric, FabricCounters};
use nix::sys::socket::SockaddrStorage;
use ringcast_proto::comm::ident::{group_ip, IpFamily};
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::ledger::{Ledger, Side};
use rustix::net::addr::SocketAddrArg;
use rustix::net::{self as rnet, sockopt, SocketAddrAny};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

mod options;
mod ready;
mod rx;
mod sock;
mod tx;
mod waker;

pub use options::{buffer_for, job_port, open, section_datagram, UdpOffload, UdpOptions};
pub use sock::path_datagram;
pub use tx::{GSO_MAX_SEGMENTS, MAX_BATCH};

/// Least receive (and send) buffer request per socket: 4 MiB, ~2800 full 1472-byte datagrams of
/// payload (fewer in practice: the kernel charges each datagram's whole buffer). Enough for
/// several broadcasts' multicast fragments to wait while the polling loop serves hosts.
pub const DEFAULT_RCVBUF: usize = 4 << 20;

/// Multicast hop limit / TTL: the link only.
pub const MULTICAST_HOPS: u32 = 1;

/// Largest UDP payload over IPv4 (65535 − 20 IP − 8 UDP).
pub const MAX_UDP_PAYLOAD_V4: usize = 65_507;

/// Largest UDP payload over IPv6 without jumbograms (65535 − 8 UDP).
pub const MAX_UDP_PAYLOAD_V6: usize = 65_527;

/// A GRO receive buffer: the most one coalesced read returns (one IP packet's worth).
const GRO_BUFFER: usize = 65_535;

/// The receive slab's size: buffers of one `recvmmsg` (at most [`MAX_BATCH`], at least one).
const RX_SLAB: usize = 1 << 20;

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
    /// Datagrams the kernel reported sent.
    pub tx_datagrams: u64,
    /// Send system calls (`sendmmsg`, GSO `sendmsg`): `tx_datagrams / tx_calls` datagrams each.
    pub tx_calls: u64,
    /// GSO sends: runs of datagrams the kernel cut up.
    pub gso_sends: u64,
    /// GSO sends the kernel refused (GSO is off after the first).
    pub gso_refused: u64,
    /// `recvmmsg` calls, empty ones included (a socket is read only when the readiness check
    /// reported it, so an empty call is rare: a datagram taken by an earlier call of the
    /// same poll).
    pub rx_calls: u64,
    /// Readiness checks (`epoll_wait` without waiting, `ready.rs`): one per poll that had read
    /// out its last batch — an idle engine's pass costs this one system call.
    pub ready_checks: u64,
    /// Receive buffers that held several datagrams (GRO).
    pub gro_buffers: u64,
    /// Times the fabric's doorbell thread woke the sleeping engine (at most once per sleep,
    /// however many datagrams arrived).
    pub rings: u64,
}

/// A receiving socket and the kernel's drop count last seen on it.
#[derive(Debug)]
struct Endpoint {
    sock: UdpSocket,
    drops_seen: u32,
    rcvbuf: usize,
}

/// A destination's address in both forms the send calls take.
#[derive(Debug)]
struct TxAddr {
    any: SocketAddrAny,
    nix: SockaddrStorage,
}

impl TxAddr {
    fn of(a: SocketAddr) -> TxAddr {
        TxAddr { any: a.as_any(), nix: SockaddrStorage::from(a) }
    }
}

/// A group datagrams were sent to: its address, and whether it is joined (an entry for a group
/// sent to but never joined is forgotten when too many gather).
#[derive(Debug)]
struct TxGroup {
    id: GroupId,
    addr: TxAddr,
    joined: bool,
}

/// The receive side: the slab the kernel writes into, what the last `recvmmsg` put there, and
/// how far `poll` has handed it out (a poll whose budget ends inside a batch leaves the rest for
/// the next).
#[derive(Debug)]
struct RxState {
    slab: Vec<u8>,
    /// Bytes per buffer: the MTU, or [`GRO_BUFFER`] with GRO.
    buf: usize,
    /// Buffers per `recvmmsg`.
    slots: usize,
    metas: Vec<rx::Meta>,
    /// The next buffer of `metas` to hand out, and the next datagram in it.
    next: usize,
    segment: usize,
    /// Whether `metas` came from a group socket.
    multicast: bool,
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
    /// The same, as the send calls take them.
    members_tx: Vec<TxAddr>,
    by_addr: HashMap<SocketAddr, PeerId>,
    mcast_if: sock::McastIf,
    mcast_port: u16,
    mtu: usize,
    rcvbuf_request: usize,
    max_groups: usize,
    /// GRO asked for (`udp.offload`); each socket reports whether the kernel has it.
    gro_wanted: bool,
    unicast: Endpoint,
    /// GRO on the unicast socket.
    gro: bool,
    groups: Vec<(GroupId, Endpoint)>,
    /// Addresses of the groups sent to (joined ones, and a few others).
    tx_groups: Vec<TxGroup>,
    tx: tx::Tx,
    rx: RxState,
    /// Which socket `poll` reads first (rotates, so a busy socket cannot starve the others).
    next_socket: usize,
    /// The doorbell a sleeping engine is woken by when a socket becomes readable.
    waker: waker::Waker,
    /// Which sockets `poll` reads: those this set reports readable (`ready.rs`).
    ready: ready::Ready,
    counters: FabricCounters,
    /// The kernel's copies in the system calls ([`Fabric::ledger`]): of each datagram handed to
    /// it, and of each one delivered (its own looped-back multicasts and refused datagrams,
    /// copied too, are not the data path's and are left out).
    ledger: Ledger,
    stats: UdpStats,
}

impl UdpFabric {
    /// Member `local` of `members` (unicast addresses, index = [`PeerId`]).
    ///
    /// Binds the unicast socket to `members[local]`; groups are joined later
    /// ([`Fabric::join`]).
    pub fn new(local: PeerId, members: Vec<SocketAddr>, opts: &UdpOptions) -> Result<UdpFabric, UdpError> {
        let bad = |m: String| Err(UdpError::Invalid(m));
        let members: Vec<SocketAddr> = members.into_iter().map(sock::normalize).collect();
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
        if !(1..=MAX_BATCH).contains(&opts.batch) {
            return bad(format!("batch {} outside 1..={MAX_BATCH}", opts.batch));
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

        let offload = opts.offload == UdpOffload::Auto;
        let fd = sock::new_socket(opts.family)?;
        let (rcvbuf, gro) = sock::set_receive_options(&fd, opts.rcvbuf, offload)?;
        sock::set_send_buffer(&fd, opts.sndbuf)?;
        let gso = offload && sock::probe_gso(&fd);
        let mcast_if = sock::resolve_mcast_if(&fd, &opts.interface, opts.family)?;
        sock::set_mcast_options(&fd, mcast_if, MULTICAST_HOPS)?;
        step("bind", rnet::bind(&fd, &own))?;
        let waker = step("doorbell thread", waker::Waker::new())?;
        step("epoll (doorbell)", waker.watch(&fd))?;
        let ready = step("epoll (readiness)", ready::Ready::new())?;
        step("epoll (readiness)", ready.watch(&fd))?;

        // One GRO buffer holds one IP packet's worth; without GRO a buffer is one datagram.
        let buf = if offload { GRO_BUFFER.max(opts.mtu) } else { opts.mtu };
        let slots = (RX_SLAB / buf).clamp(1, opts.batch);
        Ok(UdpFabric {
            local,
            own,
            family: opts.family,
            members_tx: members.iter().map(|&a| TxAddr::of(a)).collect(),
            members,
            by_addr,
            mcast_if,
            mcast_port: opts.mcast_port,
            mtu: opts.mtu,
            rcvbuf_request: opts.rcvbuf,
            max_groups: opts.max_groups,
            gro_wanted: offload,
            unicast: Endpoint { sock: UdpSocket::from(fd), drops_seen: 0, rcvbuf },
            gro,
            groups: Vec::with_capacity(opts.max_groups.min(1024)),
            tx_groups: Vec::with_capacity(opts.max_groups.min(1024) + 1),
            tx: tx::Tx { gso, batch: opts.batch },
            rx: RxState {
                slab: vec![0; buf * slots],
                buf,
                slots,
                metas: Vec::with_capacity(MAX_BATCH),
                next: 0,
                segment: 0,
                multicast: false,
            },
            next_socket: 0,
            waker,
            ready,
            counters: FabricCounters::default(),
            ledger: Ledger::default(),
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

    /// Effective `SO_SNDBUF` of the sending socket, as the kernel reports it (as
    /// [`UdpFabric::rcvbuf`]).
    pub fn sndbuf(&self) -> usize {
        sockopt::socket_send_buffer_size(&self.unicast.sock).unwrap_or(0)
    }

    /// Effective `SO_RCVBUF` of the socket of `group`, if joined.
    pub fn group_rcvbuf(&self, group: &GroupId) -> Option<usize> {
        self.groups.iter().find(|(g, _)| g == group).map(|(_, e)| e.rcvbuf)
    }

    /// Whether GSO is in use for sending (asked for, the kernel has it, and no send was
    /// refused) and GRO for receiving on the unicast socket.
    pub fn offloads(&self) -> (bool, bool) {
        (self.tx.gso, self.gro)
    }

    /// Counters beyond [`FabricCounters`].
    pub fn stats(&self) -> UdpStats {
        UdpStats { rings: self.waker.rings(), ..self.stats }
    }

    /// A group socket: reusable address and port, bound to the group, joined on the interface.
    fn open_group(&self, group: &GroupId) -> Result<Endpoint, UdpError> {
        let fd = sock::new_socket(self.family)?;
        step("SO_REUSEADDR", sockopt::set_socket_reuseaddr(&fd, true))?;
        step("SO_REUSEPORT", sockopt::set_socket_reuseport(&fd, true))?;
        let (rcvbuf, _) = sock::set_receive_options(&fd, self.rcvbuf_request, self.gro_wanted)?;
        let addr = self.group_addr(group);
        step("bind (group)", rnet::bind(&fd, &addr))?;
        match (self.mcast_if, addr.ip()) {
            (sock::McastIf::V6(index), IpAddr::V6(g)) => {
                step("IPV6_JOIN_GROUP", sockopt::set_ipv6_add_membership(&fd, &g, index))?
            }
            (sock::McastIf::V4 { addr, index }, IpAddr::V4(g)) => {
                step("IP_ADD_MEMBERSHIP", sockopt::set_ip_add_membership_with_ifindex(&fd, &g, &addr, index))?
            }
            // `group_addr` follows `family`, and `mcast_if` was resolved for it.
            _ => return Err(UdpError::Invalid("interface and group families differ".into())),
        }
        Ok(Endpoint { sock: UdpSocket::from(fd), drops_seen: 0, rcvbuf })
    }

    /// The send-side entry of `group`, added if missing (marked joined or not). Entries of groups
    /// never joined are forgotten once more than `max_groups` of them gather.
    fn tx_group(&mut self, group: &GroupId, joined: bool) -> usize {
        if let Some(i) = self.tx_groups.iter().position(|g| g.id == *group) {
            self.tx_groups[i].joined |= joined;
            return i;
        }
        if self.tx_groups.len() > 2 * self.max_groups.max(1) {
            self.tx_groups.retain(|g| g.joined);
        }
        let addr = TxAddr::of(self.group_addr(group));
        self.tx_groups.push(TxGroup { id: *group, addr, joined });
        self.tx_groups.len() - 1
    }

    /// Sends one window of at most `tx.batch` datagrams (already checked against the MTU).
    fn send_window(&mut self, window: &[Datagram<'_>]) {
        for d in window {
            if let Dest::Group(g) = d.dest {
                self.tx_group(&g, false);
            }
        }
        let n = self.members_tx.len();
        let mut out: heapless::Vec<tx::Outgoing<'_>, MAX_BATCH> = heapless::Vec::new();
        for d in window {
            let to = match d.dest {
                Dest::Peer(p) => self.members_tx.get(p.0 as usize).map(|a| tx::Target {
                    any: &a.any,
                    nix: &a.nix,
                    key: p.0 as usize,
                }),
                Dest::Group(g) => self
                    .tx_groups
                    .iter()
                    .enumerate()
                    .find(|(_, e)| e.id == g)
                    .map(|(i, e)| tx::Target { any: &e.addr.any, nix: &e.addr.nix, key: n + i }),
            };
            // Every destination was resolved above (members checked by the caller); a group
            // entry forgotten meanwhile (more unjoined groups in one window than the table
            // keeps) is counted, never silently lost.
            match to {
                Some(to) => {
                    let _ = out.push(tx::Outgoing { to, d: *d, len: d.len() });
                }
                None => self.stats.tx_errors += 1,
            }
        }
        tx::send_window(&self.unicast.sock, &out, &mut self.tx, &mut self.stats);
    }

    /// Hands out the datagrams of the last `recvmmsg` from where the previous poll stopped, as
    /// long as `taken < budget`: refuses or drops a buffer it cannot deliver, cuts a GRO buffer
    /// into its datagrams. Returns how many it delivered.
    fn hand_out(&mut self, budget: usize, taken: &mut usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let mut delivered = 0;
        while *taken < budget {
            let Some(&meta) = self.rx.metas.get(self.rx.next) else { break };
            let base = self.rx.next * self.rx.buf;
            let seg = meta.seg.unwrap_or(meta.len).max(1);
            let count = meta.len.div_ceil(seg).max(1);
            if self.rx.segment == 0 && count > 1 {
                self.stats.gro_buffers += 1;
            }
            let peer = meta.src.map(sock::normalize).and_then(|s| self.by_addr.get(&s)).copied();
            let verdict = match peer {
                _ if meta.len > self.rx.buf || seg > self.mtu => Err(true),
                None => Err(false),
                Some(p) if self.rx.multicast && p == self.local => {
                    // Our own multicast, looped back for the other members on this host.
                    self.stats.own += count as u64;
                    Ok(None)
                }
                Some(p) => Ok(Some(p)),
            };
            match verdict {
                Err(oversize) => {
                    let n = (count - self.rx.segment) as u64;
                    self.counters.refused += n;
                    if oversize {
                        self.stats.oversize += n;
                    } else {
                        self.stats.foreign += n;
                    }
                    *taken += 1;
                }
                Ok(None) => *taken += 1,
                Ok(Some(p)) => {
                    while self.rx.segment < count && *taken < budget {
                        let at = self.rx.segment * seg;
                        let len = seg.min(meta.len - at.min(meta.len));
                        let Some(frame) = self.rx.slab.get(base + at..base + at + len) else { break };
                        self.counters.received += 1;
                        // The kernel copied it into the slab (`recvmmsg`).
                        self.ledger.copied(Side::Receive, len as u64);
                        delivered += 1;
                        *taken += 1;
                        self.rx.segment += 1;
                        rx(p, frame);
                    }
                    if self.rx.segment < count {
                        // The budget ends inside this buffer: the next poll goes on from here.
                        return delivered;
                    }
                }
            }
            self.rx.next += 1;
            self.rx.segment = 0;
        }
        delivered
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
        self.waker.watch(&endpoint.sock)?;
        if let Err(e) = self.ready.watch(&endpoint.sock) {
            self.waker.unwatch(&endpoint.sock);
            return Err(e);
        }
        self.groups.push((*group, endpoint));
        self.tx_group(group, true);
        Ok(())
    }

    fn groups(&self) -> usize {
        self.groups.len()
    }

    fn leave(&mut self, group: &GroupId) {
        // Closing the socket drops its membership.
        for (_, e) in self.groups.iter().filter(|(g, _)| g == group) {
            self.waker.unwatch(&e.sock);
            self.ready.unwatch(&e.sock);
        }
        self.groups.retain(|(g, _)| g != group);
        self.tx_groups.retain(|g| g.id != *group);
    }

    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.send_batch(&mut std::iter::once(Datagram::whole(Dest::Peer(to), frame)));
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.send_batch(&mut std::iter::once(Datagram::whole(Dest::Group(*group), frame)));
    }

    /// Windows of up to `udp.batch` datagrams, each in as few system calls as the kernel
    /// allows (see the module doc); a datagram above the MTU or to an unknown member is
    /// refused and counted, and never reaches the kernel.
    fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
        let mut window: heapless::Vec<Datagram<'_>, MAX_BATCH> = heapless::Vec::new();
        for d in batch {
            let known = match d.dest {
                Dest::Peer(p) => (p.0 as usize) < self.members.len(),
                Dest::Group(_) => true,
            };
            if !known || d.len() > self.mtu {
                self.counters.refused += 1;
                self.stats.tx_refused += 1;
                continue;
            }
            match d.dest {
                Dest::Peer(_) => self.counters.sent += 1,
                Dest::Group(_) => self.counters.multicast += 1,
            }
            // The kernel copies it out of the iovec into its buffer (`sendmmsg`, GSO alike).
            self.ledger.copied(Side::Send, d.len() as u64);
            let _ = window.push(d);
            if window.len() >= self.tx.batch {
                self.send_window(&window);
                window.clear();
            }
        }
        if !window.is_empty() {
            self.send_window(&window);
        }
    }

    /// Reads the sockets in turn — those of the unicast socket and one per group that the
    /// readiness set reports readable (`ready.rs`: one `epoll_wait` instead of an empty
    /// `recvmmsg` per socket; every socket if the check fails), starting with a different one
    /// each call — a `recvmmsg` at a time, until `budget` datagrams have been
    /// read (delivered, refused or dropped alike, so a flood of foreign traffic cannot keep the
    /// loop here) or every socket is empty. A GRO buffer the budget ends inside is finished by
    /// the next call, before any socket is read again.
    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let mut taken = 0;
        let mut delivered = self.hand_out(budget, &mut taken, rx);
        if self.rx.next < self.rx.metas.len() {
            return delivered;
        }
        self.stats.ready_checks += 1;
        let ready = self.ready.check();
        if ready.as_ref().is_some_and(|r| r.is_empty()) {
            return delivered;
        }
        let sockets = 1 + self.groups.len();
        let start = self.next_socket % sockets;
        self.next_socket = self.next_socket.wrapping_add(1);
        for k in 0..sockets {
            let idx = (start + k) % sockets;
            if let Some(ready) = &ready {
                let fd = match idx.checked_sub(1) {
                    None => self.unicast.sock.as_raw_fd(),
                    Some(g) => self.groups.get(g).map_or(-1, |(_, e)| e.sock.as_raw_fd()),
                };
                if !ready.contains(&fd) {
                    continue;
                }
            }
            while taken < budget {
                let endpoint = match idx.checked_sub(1) {
                    None => &mut self.unicast,
                    Some(g) => match self.groups.get_mut(g) {
                        Some((_, e)) => e,
                        None => break,
                    },
                };
                let slots = (budget - taken).min(self.rx.slots);
                self.stats.rx_calls += 1;
                let got =
                    rx::recv_batch(&endpoint.sock, &mut self.rx.slab, self.rx.buf, slots, &mut self.rx.metas);
                match got {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        taken += 1;
                        continue;
                    }
                    Err(_) => {
                        self.stats.rx_errors += 1;
                        break;
                    }
                }
                for d in self.rx.metas.iter().filter_map(|m| m.drops) {
                    // Cumulative per socket, a u32 that wraps.
                    self.counters.overrun += u64::from(d.wrapping_sub(endpoint.drops_seen));
                    endpoint.drops_seen = d;
                }
                let read = self.rx.metas.len();
                self.rx.next = 0;
                self.rx.segment = 0;
                self.rx.multicast = idx != 0;
                delivered += self.hand_out(budget, &mut taken, rx);
                if self.rx.next < self.rx.metas.len() {
                    return delivered;
                }
                if read < slots {
                    // Fewer than asked for: the socket was empty (saves a call that finds
                    // nothing).
                    break;
                }
            }
        }
        delivered
    }

    fn ledger(&self) -> Ledger {
        self.ledger
    }

    fn counters(&self) -> FabricCounters {
        FabricCounters { tx_calls: self.stats.tx_calls, rx_calls: self.stats.rx_calls, ..self.counters }
    }

    /// The engine sleeps on the doorbell thread's bell (see `waker.rs`).
    fn arm(&self) -> Option<u32> {
        Some(self.waker.arm())
    }

    fn bell(&self) -> Option<&std::sync::atomic::AtomicU32> {
        Some(self.waker.bell())
    }

    fn disarm(&self) {
        self.waker.disarm();
    }

    /// `epoll_wait` on the readiness set (`ready.rs`): the kernel wakes the waiting engine
    /// itself when a datagram lands, one wake-up where the doorbell thread made two.
    fn wait(&self, limit: std::time::Duration) -> Option<bool> {
        // A batch the last poll's budget ended inside is still to hand out: no waiting.
        if self.rx.next < self.rx.metas.len() {
            return Some(true);
        }
        Some(self.ready.wait(limit))
    }
}

#[cfg(test)]
mod tests;
