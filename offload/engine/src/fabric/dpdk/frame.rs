//! The `dpdk` fabric's Ethernet framing, in safe code with no DPDK in it (unit-tested without the
//! EAL): MAC addresses, the group → multicast MAC mapping, and the encoding and checked decoding
//! of one frame.
//!
//! # Frame
//!
//! ```text
//!  0      6      12          14        16                16+len      ≥ 60
//!  | dst  | src  | 0x88B5 BE | len BE  | datagram (len)   | zero padding |
//! ```
//!
//! * `dst`: the peer's unicast MAC (point-to-point) or the group's multicast MAC ([`group_mac`]).
//! * `src`: the sender's MAC, which is how a receiver knows the sender: members are identified
//!   by their MAC (`dpdk_members`, index = node), never by anything inside the frame.
//! * EtherType [`ETHERTYPE`] `0x88B5`, IEEE 802 "local experimental": a frame with any other
//!   EtherType is not ours.
//! * `len`: the datagram's length. Ethernet pads short frames to 60 bytes (without FCS), and a
//!   NIC may do so on transmit: the length field tells the datagram from the padding, so the
//!   protocol's CRC trailer stays at the datagram's end. The encoder pads to [`MIN_FRAME`]
//!   itself, so every frame is a well-formed Ethernet frame on any link.
//!
//! # Multicast MAC of a group
//!
//! A group id is 112 bits; the `udp` fabric puts it in the IPv6 group `ff15::/16` + id. The
//! Ethernet mapping is the one IPv6 uses for that group (RFC 2464 §7): `33:33` followed by the
//! last 32 bits of the IPv6 address, i.e. the last 4 bytes of the group id. So the same
//! communicator lands on the same MAC on both fabrics, and two communicators share a MAC only
//! when their ids agree in those 32 bits — then both members receive both groups' frames, and
//! the frame cookie in the protocol header keeps them apart (as with IPv4's 23-bit mapping,
//! `01:00:5e` + 23 bits of `239.x.y.z`, which this fabric does not use: it collides more).
//!
//! # Contract of [`Station::accept`]
//!
//! Given any byte string (a frame from the wire, possibly hostile), it returns either the
//! sending member and the datagram — a sub-slice of the input, no copy — or a [`Reject`] reason.
//! It never panics. A frame is accepted only if it has our EtherType, a length field that fits
//! the frame and the MTU, a destination that is this station's MAC or a joined group's MAC, and
//! a source that is a listed member other than this station.
use ringcast_proto::comm::{GroupId, PeerId};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// The fabric's EtherType: IEEE 802 local experimental EtherType 1.
pub const ETHERTYPE: u16 = 0x88B5;
/// Ethernet header: destination, source, EtherType.
pub const ETH_HEADER_LEN: usize = 14;
/// The fabric's header: the Ethernet header and the datagram length (`u16`, big-endian).
pub const HEADER_LEN: usize = ETH_HEADER_LEN + 2;
/// Shortest Ethernet frame without FCS; shorter frames are padded with zeros.
pub const MIN_FRAME: usize = 60;
/// Largest datagram the length field can describe.
pub const MAX_DATAGRAM: usize = u16::MAX as usize;

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The group bit (I/G): set for multicast and broadcast addresses.
    pub fn is_multicast(self) -> bool {
        self.0[0] & 1 == 1
    }

    /// A unicast address other than all zeros: what a member may be.
    pub fn is_member_address(self) -> bool {
        !self.is_multicast() && self.0 != [0; 6]
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl FromStr for Mac {
    type Err = String;
    /// Six hexadecimal octets separated by `:` or `-` (`02:00:5e:10:00:01`).
    fn from_str(s: &str) -> Result<Mac, String> {
        let mut mac = [0u8; 6];
        let mut parts = s.trim().split([':', '-']);
        for byte in &mut mac {
            let part = parts.next().ok_or_else(|| format!("{s:?} is not a MAC address (six octets)"))?;
            if part.is_empty() || part.len() > 2 {
                return Err(format!("{s:?} is not a MAC address (octet {part:?})"));
            }
            *byte = u8::from_str_radix(part, 16)
                .map_err(|_| format!("{s:?} is not a MAC address (octet {part:?})"))?;
        }
        if parts.next().is_some() {
            return Err(format!("{s:?} is not a MAC address (more than six octets)"));
        }
        Ok(Mac(mac))
    }
}

/// The multicast MAC of `group`: `33:33` + the group id's last 4 bytes (see the module doc).
pub fn group_mac(group: &GroupId) -> Mac {
    let [.., a, b, c, d] = *group;
    Mac([0x33, 0x33, a, b, c, d])
}

/// Parses a comma-separated member list (index = node): every entry a unicast, non-zero MAC,
/// no entry twice.
pub fn parse_members(list: &str) -> Result<Vec<Mac>, String> {
    let macs: Vec<Mac> = list
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("dpdk_members: {e}"))?;
    for (i, m) in macs.iter().enumerate() {
        if !m.is_member_address() {
            return Err(format!("dpdk_members: node {i}: {m} is not a unicast address"));
        }
        if macs[..i].contains(m) {
            return Err(format!("dpdk_members: node {i}: {m} listed twice"));
        }
    }
    Ok(macs)
}

/// Length of the frame that carries a datagram of `len` bytes (header, datagram, padding).
pub fn frame_len(len: usize) -> usize {
    (HEADER_LEN + len).max(MIN_FRAME)
}

/// Writes the frame carrying `datagram` from `src` to `dst` into `out`, which must be exactly
/// [`frame_len`]`(datagram.len())` bytes long; returns `false` (and writes nothing) when it is
/// not, or when the datagram is longer than [`MAX_DATAGRAM`].
pub fn encode(dst: Mac, src: Mac, datagram: &[u8], out: &mut [u8]) -> bool {
    encode_parts(dst, src, &[datagram], out)
}

/// [`encode`] of the datagram made of `parts`, in order, each written straight into `out` (the
/// mbuf: a send gather, the parts never made contiguous first).
pub fn encode_parts(dst: Mac, src: Mac, parts: &[&[u8]], out: &mut [u8]) -> bool {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let Ok(len) = u16::try_from(total) else { return false };
    if out.len() != frame_len(total) {
        return false;
    }
    let (header, rest) = out.split_at_mut(HEADER_LEN);
    let (mut body, pad) = rest.split_at_mut(total);
    header[0..6].copy_from_slice(&dst.0);
    header[6..12].copy_from_slice(&src.0);
    header[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    header[14..16].copy_from_slice(&len.to_be_bytes());
    for part in parts {
        let (here, later) = body.split_at_mut(part.len());
        here.copy_from_slice(part);
        body = later;
    }
    pad.fill(0);
    true
}

/// Why a received frame was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than the fabric's header.
    Short,
    /// Another protocol's EtherType (the kernel's IPv6 neighbour discovery, LLDP, ...).
    EtherType,
    /// The length field exceeds the bytes that follow it.
    Length,
    /// The datagram is longer than the MTU.
    Oversize,
    /// For another station (a bridge floods unicast it has not learnt, and promiscuous mode
    /// shows everything), or for a group this station has not joined.
    NotOurs,
    /// Sent by this station (a looped-back copy).
    Own,
    /// The source MAC is not a member.
    Foreign,
}

impl Reject {
    /// Every reason, in counter order ([`Reject::index`]).
    pub const ALL: [Reject; 7] = [
        Reject::Short,
        Reject::EtherType,
        Reject::Length,
        Reject::Oversize,
        Reject::NotOurs,
        Reject::Own,
        Reject::Foreign,
    ];

    /// Position in [`Reject::ALL`] (counter arrays).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// An accepted frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted<'a> {
    /// The sending member.
    pub from: PeerId,
    /// Sent to a group (else to this station).
    pub multicast: bool,
    /// The datagram, inside the frame.
    pub datagram: &'a [u8],
}

/// One member's view of the link: its own MAC, the members' MACs, and the groups it joined.
#[derive(Clone, Debug)]
pub struct Station {
    own: Mac,
    members: Vec<Mac>,
    by_mac: HashMap<Mac, PeerId>,
    groups: Vec<Mac>,
    mtu: usize,
}

impl Station {
    /// Member `local` of `members` (index = node), taking datagrams of at most `mtu` bytes.
    pub fn new(local: PeerId, members: Vec<Mac>, mtu: usize) -> Result<Station, String> {
        let Some(&own) = members.get(local.0 as usize) else {
            return Err(format!("node {} of a member list of {}", local.0, members.len()));
        };
        if mtu == 0 || mtu > MAX_DATAGRAM {
            return Err(format!("mtu {mtu} outside 1..={MAX_DATAGRAM}"));
        }
        let mut by_mac = HashMap::with_capacity(members.len());
        for (i, m) in members.iter().enumerate() {
            if !m.is_member_address() {
                return Err(format!("member {i}: {m} is not a unicast address"));
            }
            let id = PeerId(u32::try_from(i).map_err(|_| "too many members".to_string())?);
            if by_mac.insert(*m, id).is_some() {
                return Err(format!("member {i}: {m} listed twice"));
            }
        }
        Ok(Station { own, members, by_mac, groups: Vec::new(), mtu })
    }

    /// This station's MAC.
    pub fn own(&self) -> Mac {
        self.own
    }

    /// Member `peer`'s MAC.
    pub fn member(&self, peer: PeerId) -> Option<Mac> {
        self.members.get(peer.0 as usize).copied()
    }

    /// Largest datagram.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Receives frames sent to `mac` from now on.
    pub fn add_group(&mut self, mac: Mac) {
        if !self.groups.contains(&mac) {
            self.groups.push(mac);
        }
    }

    /// Stops receiving frames sent to `mac`.
    pub fn remove_group(&mut self, mac: Mac) {
        self.groups.retain(|g| *g != mac);
    }

    /// The multicast MACs this station receives.
    pub fn groups(&self) -> &[Mac] {
        &self.groups
    }

    /// Checks a received frame; see the module doc.
    pub fn accept<'a>(&self, frame: &'a [u8]) -> Result<Accepted<'a>, Reject> {
        let Some((header, rest)) = frame.split_first_chunk::<HEADER_LEN>() else {
            return Err(Reject::Short);
        };
        if u16::from_be_bytes([header[12], header[13]]) != ETHERTYPE {
            return Err(Reject::EtherType);
        }
        let len = usize::from(u16::from_be_bytes([header[14], header[15]]));
        let Some(datagram) = rest.get(..len) else { return Err(Reject::Length) };
        if len > self.mtu {
            return Err(Reject::Oversize);
        }
        let mac = |at: usize| {
            Mac([header[at], header[at + 1], header[at + 2], header[at + 3], header[at + 4], header[at + 5]])
        };
        let (dst, src) = (mac(0), mac(6));
        let multicast = if dst == self.own {
            false
        } else if dst.is_multicast() && self.groups.contains(&dst) {
            true
        } else {
            return Err(Reject::NotOurs);
        };
        if src == self.own {
            return Err(Reject::Own);
        }
        let Some(&from) = self.by_mac.get(&src) else { return Err(Reject::Foreign) };
        Ok(Accepted { from, multicast, datagram })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(s: &str) -> Mac {
        s.parse().expect("test MAC")
    }

    fn three() -> Vec<Mac> {
        vec![mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"), mac("02:00:00:00:00:03")]
    }

    fn frame(dst: Mac, src: Mac, datagram: &[u8]) -> Vec<u8> {
        let mut out = vec![0xEE; frame_len(datagram.len())];
        assert!(encode(dst, src, datagram, &mut out));
        out
    }

    #[test]
    fn macs_parse_print_and_classify() {
        let m = mac("02:0A:ff:00:10:01");
        assert_eq!(m, Mac([2, 0x0a, 0xff, 0, 0x10, 1]));
        assert_eq!(m.to_string(), "02:0a:ff:00:10:01");
        assert_eq!(mac("02-0a-ff-00-10-01"), m);
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "02:00:00:00:00:1g",
            "02:00:00:00:00:100",
            "02::00:00:00:01",
        ] {
            assert!(bad.parse::<Mac>().is_err(), "{bad:?}");
        }
        assert!(m.is_member_address());
        assert!(!Mac([0; 6]).is_member_address());
        assert!(mac("33:33:00:00:00:01").is_multicast() && mac("01:00:5e:00:00:01").is_multicast());
        assert!(mac("ff:ff:ff:ff:ff:ff").is_multicast());
    }

    #[test]
    fn group_mac_is_the_ipv6_mapping_of_the_group_address() {
        let group: GroupId = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xaa, 0xbb, 0xcc, 0xdd];
        let m = group_mac(&group);
        assert_eq!(m, Mac([0x33, 0x33, 0xaa, 0xbb, 0xcc, 0xdd]));
        // RFC 2464: 33:33 + the last 32 bits of the IPv6 group address the udp fabric uses.
        let v6 = ringcast_proto::comm::ident::group_ipv6(&group).octets();
        assert_eq!(m.0[2..], v6[12..]);
        assert!(m.is_multicast() && !m.is_member_address());
    }

    #[test]
    fn member_lists_are_checked() {
        assert_eq!(parse_members(" 02:00:00:00:00:01 , 02:00:00:00:00:02,").expect("two"), three()[..2]);
        assert!(parse_members("02:00:00:00:00:01,33:33:00:00:00:01").unwrap_err().contains("node 1"));
        assert!(parse_members("02:00:00:00:00:01,02:00:00:00:00:01").unwrap_err().contains("twice"));
        assert!(parse_members("00:00:00:00:00:00").is_err());
        assert!(parse_members("nonsense").is_err());
        assert!(Station::new(PeerId(3), three(), 1500).is_err(), "node outside the list");
        assert!(Station::new(PeerId(0), three(), 0).is_err());
    }

    #[test]
    fn frames_round_trip_with_padding_and_exact_length() {
        let members = three();
        let (a, b) = (members[0], members[1]);
        let mut rx = Station::new(PeerId(1), members.clone(), 1498).expect("station");
        for len in [0usize, 1, 2, 43, 44, 45, 100, 1498] {
            let datagram: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let f = frame(b, a, &datagram);
            assert_eq!(f.len(), frame_len(len));
            assert!(f.len() >= MIN_FRAME);
            assert_eq!(&f[12..14], &[0x88, 0xB5]);
            assert!(f[HEADER_LEN + len..].iter().all(|&p| p == 0), "padding is zeros");
            let got = rx.accept(&f).expect("accepted");
            assert_eq!(got, Accepted { from: PeerId(0), multicast: false, datagram: &datagram });
        }
        // A NIC's padding beyond ours, or trailing garbage, is not part of the datagram.
        let mut f = frame(b, a, b"hello");
        f.extend_from_slice(&[9; 30]);
        assert_eq!(rx.accept(&f).expect("accepted").datagram, b"hello");
        // Multicast: only once the group is joined.
        let g = group_mac(&[7; 14]);
        let f = frame(g, members[2], b"to all");
        assert_eq!(rx.accept(&f), Err(Reject::NotOurs));
        rx.add_group(g);
        rx.add_group(g);
        assert_eq!(rx.groups(), &[g]);
        assert_eq!(rx.accept(&f), Ok(Accepted { from: PeerId(2), multicast: true, datagram: b"to all" }));
        rx.remove_group(g);
        assert_eq!(rx.accept(&f), Err(Reject::NotOurs));
    }

    #[test]
    fn encoder_refuses_a_wrong_buffer() {
        let m = three();
        assert!(!encode(m[0], m[1], b"abc", &mut [0u8; 10]));
        assert!(!encode(m[0], m[1], b"abc", &mut [0u8; 61]), "exactly frame_len bytes");
        assert!(!encode(m[0], m[1], &vec![0; MAX_DATAGRAM + 1], &mut vec![0; frame_len(MAX_DATAGRAM + 1)]));
    }

    #[test]
    fn strangers_and_malformed_frames_are_refused_with_a_reason() {
        let members = three();
        let mut rx = Station::new(PeerId(0), members.clone(), 100).expect("station");
        let g = group_mac(&[1; 14]);
        rx.add_group(g);
        let me = members[0];
        let stranger = mac("02:66:66:66:66:66");
        assert_eq!(rx.accept(&frame(me, stranger, b"x")), Err(Reject::Foreign));
        assert_eq!(rx.accept(&frame(g, stranger, b"x")), Err(Reject::Foreign));
        assert_eq!(rx.accept(&frame(g, me, b"x")), Err(Reject::Own));
        assert_eq!(rx.accept(&frame(members[2], members[1], b"x")), Err(Reject::NotOurs));
        assert_eq!(rx.accept(&frame(Mac([0xff; 6]), members[1], b"x")), Err(Reject::NotOurs), "broadcast");
        assert_eq!(rx.accept(&frame(me, members[1], &[0; 101])), Err(Reject::Oversize));
        let mut other = frame(me, members[1], b"x");
        other[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
        assert_eq!(rx.accept(&other), Err(Reject::EtherType));
        let mut long = frame(me, members[1], b"x");
        let too_long = (long.len() as u16).to_be_bytes();
        long[14..16].copy_from_slice(&too_long);
        assert_eq!(rx.accept(&long), Err(Reject::Length));
        assert_eq!(rx.accept(&[0; HEADER_LEN - 1]), Err(Reject::Short));
        assert_eq!(rx.accept(&[]), Err(Reject::Short));
        assert_eq!(Reject::ALL.iter().map(|r| r.index()).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn no_input_makes_accept_panic() {
        // Every short prefix and every header byte flipped, over a valid frame.
        let members = three();
        let mut rx = Station::new(PeerId(1), members.clone(), 64).expect("station");
        rx.add_group(group_mac(&[3; 14]));
        let f = frame(members[1], members[0], &[0x5a; 40]);
        for cut in 0..=f.len() {
            let _ = rx.accept(&f[..cut]);
        }
        for i in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut g = f.clone();
                g[i] ^= 1 << bit;
                if let Ok(a) = rx.accept(&g) {
                    assert!(a.datagram.len() <= 64);
                }
            }
        }
    }
}
