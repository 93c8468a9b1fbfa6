//! The `udp` fabric's socket set-up: sockets and their options, the multicast interface, what
//! the kernel offers (UDP GSO and GRO, probed), and the path's datagram size. Everything here
//! runs once per socket or once per engine, never per datagram.
use super::{step, Interface, UdpError, MAX_UDP_PAYLOAD_V4, MAX_UDP_PAYLOAD_V6};
use nix::sys::socket::{self as nsock};
use ringcast_proto::comm::ident::IpFamily;
use rustix::net::{self as rnet, sockopt, AddressFamily, SocketFlags, SocketType};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::OwnedFd;

/// IPv4 header without options, and IPv6's fixed header: what a route's MTU holds besides the
/// UDP datagram.
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
/// The UDP header.
const UDP_HEADER: usize = 8;

/// The resolved multicast interface.
#[derive(Clone, Copy, Debug)]
pub(super) enum McastIf {
    V6(u32),
    V4 { addr: Ipv4Addr, index: u32 },
}

/// `a` as the kernel reports a source: no flow label, a scope id only where it matters
/// (link-local unicast), so a member list entry and a received source compare equal.
pub(super) fn normalize(a: SocketAddr) -> SocketAddr {
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
pub(super) fn ipv6_ifindex(addr: &Ipv6Addr) -> io::Result<u32> {
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
pub(super) fn new_socket(family: IpFamily) -> Result<OwnedFd, UdpError> {
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

/// Sets `SO_RCVBUF` to `request` (forcing past `rmem_max` where permitted), `SO_RXQ_OVFL`
/// and, when `gro`, `UDP_GRO`; returns the effective buffer size the kernel reports and whether
/// GRO is on (a kernel without it refuses the option: the socket then receives datagram by
/// datagram).
pub(super) fn set_receive_options(
    fd: &OwnedFd,
    request: usize,
    gro: bool,
) -> Result<(usize, bool), UdpError> {
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
    // Coalesced receive: the kernel hands several datagrams of one sender, of one size, in one
    // buffer with their size in a control message. Refused (ENOPROTOOPT) before Linux 5.0 and
    // by qemu-user: the socket then receives datagram by datagram.
    let gro = gro && nsock::setsockopt(fd, nsock::sockopt::UdpGroSegment, &true).is_ok();
    Ok((effective, gro))
}

/// Sets `SO_SNDBUF` to `request` (forcing past `wmem_max` where permitted): a batch the
/// interface queue holds back stays charged to the socket until it leaves, and a buffer
/// smaller than the batch would refuse its tail (`EAGAIN`). Returns the effective size.
pub(super) fn set_send_buffer(fd: &OwnedFd, request: usize) -> Result<usize, UdpError> {
    step("SO_SNDBUF", sockopt::set_socket_send_buffer_size(fd, request))?;
    let mut effective = step("SO_SNDBUF (read back)", sockopt::socket_send_buffer_size(fd))?;
    if effective < request.saturating_mul(2)
        && sockopt::set_socket_send_buffer_size_force(fd, request).is_ok()
    {
        effective = step("SO_SNDBUF (read back)", sockopt::socket_send_buffer_size(fd))?;
    }
    Ok(effective)
}

/// Whether the kernel has UDP GSO (`UDP_SEGMENT`, Linux 4.18): reading the option works only
/// where it exists. Whether the path can use it is learnt at the first segmented send (the
/// kernel refuses one it cannot carry, and the fabric then stops segmenting).
pub(super) fn probe_gso(fd: &OwnedFd) -> bool {
    nsock::getsockopt(fd, nsock::sockopt::UdpGsoSegment).is_ok()
}

/// The multicast interface `interface` names, for `family`, resolved on `fd`'s namespace.
pub(super) fn resolve_mcast_if(
    fd: &OwnedFd,
    interface: &Interface,
    family: IpFamily,
) -> Result<McastIf, UdpError> {
    Ok(match (interface, family) {
        (Interface::Index(i), IpFamily::V6) => McastIf::V6(*i),
        (Interface::Index(i), IpFamily::V4) => McastIf::V4 { addr: Ipv4Addr::UNSPECIFIED, index: *i },
        (Interface::Name(n), f) => {
            let index = step("interface name", rnet::netdevice::name_to_index(fd, n))?;
            match f {
                IpFamily::V6 => McastIf::V6(index),
                IpFamily::V4 => McastIf::V4 { addr: Ipv4Addr::UNSPECIFIED, index },
            }
        }
        (Interface::Addr(IpAddr::V6(a)), IpFamily::V6) => {
            McastIf::V6(step("interface address", ipv6_ifindex(a))?)
        }
        (Interface::Addr(IpAddr::V4(a)), IpFamily::V4) => McastIf::V4 { addr: *a, index: 0 },
        (Interface::Addr(a), f) => {
            return Err(UdpError::Invalid(format!("interface address {a} is not {f:?}")))
        }
    })
}

/// Multicast out of `mcast_if`, on the link only, looped back to this host's members.
pub(super) fn set_mcast_options(fd: &OwnedFd, mcast_if: McastIf, hops: u32) -> Result<(), UdpError> {
    match mcast_if {
        McastIf::V6(index) => {
            step("IPV6_MULTICAST_IF", sockopt::set_ipv6_multicast_if(fd, index))?;
            step("IPV6_MULTICAST_HOPS", sockopt::set_ipv6_multicast_hops(fd, hops))?;
            step("IPV6_MULTICAST_LOOP", sockopt::set_ipv6_multicast_loop(fd, true))?;
        }
        McastIf::V4 { addr, index } => {
            let any = Ipv4Addr::UNSPECIFIED;
            step("IP_MULTICAST_IF", sockopt::set_ip_multicast_if_with_ifindex(fd, &any, &addr, index))?;
            step("IP_MULTICAST_TTL", sockopt::set_ip_multicast_ttl(fd, hops))?;
            step("IP_MULTICAST_LOOP", sockopt::set_ip_multicast_loop(fd, true))?;
        }
    }
    Ok(())
}

/// The largest UDP payload one unfragmented IP packet to `dest` carries from a socket set up
/// as the fabric's (`mcast_if` for a group): the route's MTU (`IP_MTU` / `IPV6_MTU` of a
/// socket connected to `dest`, the interface's, or less where path MTU discovery learnt less)
/// less the IP and UDP headers. Connecting a UDP socket sends nothing: it only looks the route
/// up.
fn route_payload(family: IpFamily, mcast_if: McastIf, dest: SocketAddr) -> Result<usize, UdpError> {
    let fd = new_socket(family)?;
    set_mcast_options(&fd, mcast_if, super::MULTICAST_HOPS)?;
    step("connect (path MTU)", rnet::connect(&fd, &dest))?;
    let (mtu, header) = match family {
        IpFamily::V4 => (step("IP_MTU", sockopt::ip_mtu(&fd))?, IPV4_HEADER),
        IpFamily::V6 => (step("IPV6_MTU", sockopt::ipv6_mtu(&fd))?, IPV6_HEADER),
    };
    Ok((mtu as usize).saturating_sub(header + UDP_HEADER))
}

/// The datagram size every path of member `own` carries without IP fragmentation: the least,
/// over the routes to the other `members` and to the multicast groups out of `interface`, of
/// the route's MTU less the IP and UDP headers (1472 on 1500-byte Ethernet over IPv4, 65507
/// on loopback, whose MTU is 64 KiB), at most the family's largest UDP payload.
pub fn path_datagram(
    family: IpFamily,
    interface: &Interface,
    own: SocketAddr,
    members: &[SocketAddr],
) -> Result<usize, UdpError> {
    let probe = new_socket(family)?;
    let mcast_if = resolve_mcast_if(&probe, interface, family)?;
    // Any group of the family takes the route every group takes (`ff15::/16`, `239/8`).
    let group = match family {
        IpFamily::V4 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 255, 0, 1)), 9),
        IpFamily::V6 => SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0xff15, 0, 0, 0, 0, 0, 0, 1)), 9),
    };
    let largest = match family {
        IpFamily::V4 => MAX_UDP_PAYLOAD_V4,
        IpFamily::V6 => MAX_UDP_PAYLOAD_V6,
    };
    let mut least = largest;
    // A lone member has no route to another: its own address's route stands for the link.
    let others = members.iter().filter(|&&m| m != own);
    for dest in others.chain(std::iter::once(&own).filter(|_| members.len() <= 1)) {
        least = least.min(route_payload(family, mcast_if, *dest)?);
    }
    // IPv6 multicast may have no route at all (`lo`, see the module doc): the unicast routes
    // then decide.
    if let Ok(m) = route_payload(family, mcast_if, group) {
        least = least.min(m);
    }
    Ok(least)
}
