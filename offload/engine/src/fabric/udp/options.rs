//! How a [`UdpFabric`] is set up: [`UdpOptions`], what the `udp` section and the job's
//! [`FabricSetup`] make of them, and the datagram size the section's member list gives
//! ([`section_datagram`]).
use super::{path_datagram, Interface, UdpError, UdpFabric, DEFAULT_RCVBUF, MAX_BATCH};
use crate::config::UdpConfig;
use crate::fabric::FabricSetup;
use ringcast_proto::comm::ident::IpFamily;
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Buffers each socket requests per byte of the window it must hold: the kernel charges a
/// datagram's whole buffer (about 1.6 times a 1472-byte payload), and reports twice the request.
const WINDOW_FACTOR: usize = 2;

/// Whether the fabric uses the kernel's UDP segmentation offloads (`udp.offload`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UdpOffload {
    /// GSO on sending and GRO on receiving where the kernel has them (probed at start; GSO
    /// dropped at the first segmented send the kernel refuses).
    #[default]
    Auto,
    /// Neither: one datagram per buffer each way (still several per `sendmmsg`/`recvmmsg`).
    Off,
}

impl FromStr for UdpOffload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(UdpOffload::Auto),
            "off" => Ok(UdpOffload::Off),
            _ => Err(format!("expected auto or off, got {s:?}")),
        }
    }
}

impl fmt::Display for UdpOffload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpOffload::Auto => "auto",
            UdpOffload::Off => "off",
        })
    }
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
    /// `SO_SNDBUF` request for the sending socket, in bytes.
    pub sndbuf: usize,
    /// Groups joined at once (one socket each).
    pub max_groups: usize,
    /// Most datagrams per `sendmmsg`/`recvmmsg` (1..=[`MAX_BATCH`]; 1: one per system call).
    pub batch: usize,
    /// GSO and GRO.
    pub offload: UdpOffload,
}

impl UdpOptions {
    /// IPv6 on the kernel's choice of interface, `mcast_port`, the frame size `mtu` and at most
    /// `max_groups` groups, [`DEFAULT_RCVBUF`] both ways, full batches, offloads where the
    /// kernel has them.
    pub fn new(mcast_port: u16, mtu: u32, max_groups: u32) -> Self {
        UdpOptions {
            family: IpFamily::V6,
            interface: Interface::Index(0),
            mcast_port,
            mtu: mtu as usize,
            rcvbuf: DEFAULT_RCVBUF,
            sndbuf: DEFAULT_RCVBUF,
            max_groups: max_groups as usize,
            batch: MAX_BATCH,
            offload: UdpOffload::Auto,
        }
    }
}

/// The multicast port of a job whose `udp.port` is 0, derived from the job name (in
/// `20000..40000`): every engine of a job computes the same one without being told.
pub fn job_port(job: &str) -> u16 {
    let h = Sha256::digest(format!("ringcast udp port of job {job}").as_bytes());
    20_000 + u16::from_le_bytes([h[0], h[1]]) % 20_000
}

/// The socket buffer request for a window of `window` bytes (see [`WINDOW_FACTOR`]), at least
/// [`DEFAULT_RCVBUF`].
pub fn buffer_for(window: usize) -> usize {
    window.saturating_mul(WINDOW_FACTOR).max(DEFAULT_RCVBUF)
}

impl UdpOptions {
    /// What the `udp` section says for the job of `setup`, for a member whose listed address
    /// is `own`: groups of `own`'s family, the section's port (or [`job_port`]), the section's
    /// interface (an index, a name, or when empty the interface holding `own`), the job's
    /// datagram size, one group per communicator, socket buffers of `udp.buffer_bytes` (or sized
    /// to the window, [`buffer_for`]), the section's batch and offloads.
    pub fn from_section(setup: &FabricSetup, section: &UdpConfig, own: IpAddr) -> UdpOptions {
        let port = match section.port {
            0 => job_port(&setup.job),
            p => p,
        };
        let buffers = match section.buffer_bytes {
            0 => buffer_for(setup.window),
            b => b as usize,
        };
        UdpOptions {
            family: IpFamily::of(own),
            interface: section_interface(section, own),
            mcast_port: port,
            mtu: setup.mtu,
            rcvbuf: buffers,
            sndbuf: buffers,
            max_groups: setup.max_groups,
            batch: section.batch as usize,
            offload: section.offload,
        }
    }
}

/// The interface `section` names (an index, a name), or when empty the one holding `own`.
fn section_interface(section: &UdpConfig, own: IpAddr) -> Interface {
    match section.interface.as_str() {
        "" => Interface::Addr(own),
        i => i.parse().map(Interface::Index).unwrap_or_else(|_| Interface::Name(i.to_string())),
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

/// The datagram size of member `node` of the section's member list ([`path_datagram`]),
/// within the protocol's `64..=max`: what `protocol.mtu` is on `udp` when `RINGCAST_MTU` is
/// not set. `None` when the list has no such member or no route is known.
pub fn section_datagram(section: &UdpConfig, node: u32, max: usize) -> Option<usize> {
    let members = section.member_addrs().ok()?;
    let own = *members.get(node as usize)?;
    let size =
        path_datagram(IpFamily::of(own.ip()), &section_interface(section, own.ip()), own, &members).ok()?;
    (size >= 64).then_some(size.min(max))
}
