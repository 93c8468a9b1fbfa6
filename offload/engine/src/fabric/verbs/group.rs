//! From a communicator's 112-bit group id to what the `verbs` fabric joins: the IP multicast
//! address rdmacm is asked to join, and the 128-bit multicast GID (MGID) the queue pair is
//! attached to — pure functions, unit-tested without a device.
//!
//! # The mappings
//!
//! * **The IP group** ([`join_ip`]) is the `udp` fabric's, shared rather than written twice
//!   ([`ringcast_proto::comm::ident::group_ipv6`] / [`ringcast_proto::comm::ident::group_ipv4`]): IPv6
//!   `ff15::/16` + the 112 bits when the fabric's address ([`JoinSpec::family`]) is IPv6,
//!   IPv4 `239/8` from a hash of them when it is IPv4. rdmacm (`rdma_join_multicast`) is
//!   handed this address; the kernel turns it into an MGID and, on RoCE, sends the IGMP/MLD
//!   report so snooping switches forward the group.
//! * **The MGID on InfiniBand** ([`rdmacm_mgid`] with [`LinkLayer::Infiniband`]): the kernel's
//!   rdma_cm maps an IP group like IP-over-IB does (`ip_ib_mc_map`, `ipv6_ib_mc_map`) with the
//!   RDMA-CM signature for the UDP port space: `ff1S:6001:PPPP:` + the low 80 bits of the
//!   IPv6 group (`S` the IPoIB broadcast address's scope, 2 = link-local; `PPPP` the partition
//!   key), or `ff1S:4001:PPPP::` + the low 28 bits of the IPv4 group. The SA creates the group
//!   on the first join and assigns its MLID. So on IB 80 of the 112 bits reach the wire (a
//!   collision of two communicators' groups costs only filtered datagrams: the frame's job tag
//!   and the protocol's cookie keep them apart).
//! * **The MGID on RoCE** ([`rdmacm_mgid`] with [`LinkLayer::Ethernet`]): the IP group itself —
//!   an IPv6 group as is, an IPv4 group v4-mapped (`::ffff:239.x.y.z`) on RoCE v2 or as
//!   `ff0e::ffff:239.x.y.z` on RoCE v1. The NIC derives the destination MAC from it
//!   (`33:33:…` or `01:00:5e:…`), as the kernel would for the IP group.
//!   Note: Linux's rdma_cm refuses IPv6 multicast joins on RoCE v2 ports (`ENOTSUPP`: it sends
//!   IGMP for IPv4 groups only), so RoCE v2 fabrics use an IPv4 address (and `239/8` groups);
//!   the fabric says so when a join fails that way.
//! * **Attach mode** ([`JoinMode::Attach`], RoCE only): no rdmacm, no IGMP/MLD, no SA: the QP is
//!   attached to [`attach_mgid`] — the same MGID rdmacm would use on RoCE v2 — with
//!   `ibv_attach_mcast`. For links whose switches flood multicast (or one host). InfiniBand
//!   needs the SA to route a group, so attach mode is refused there.
//! * **Discovery** ([`discovery_group`]): every engine of a job joins one more group, derived
//!   from the job name, on which members announce their unicast addresses (see
//!   [`super::peers`]).
//!
//! The fabric always attaches and sends with the MGID and MLID the join event reports (the
//! kernel and the SA are authoritative); the prediction here is compared with it and a
//! difference counted ([`super::VerbsStats::mgid_mismatch`]), and it is what attach mode uses.
use ringcast_proto::comm::ident::{group_ip, IpFamily};
use ringcast_proto::comm::GroupId;
use sha2::{Digest, Sha256};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The scope of IPoIB's default broadcast address (link-local), which rdma_cm copies into
/// IB MGIDs.
pub const IPOIB_LINK_SCOPE: u8 = 2;

/// How the fabric joins multicast groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JoinMode {
    /// Through rdmacm (`rdma_join_multicast`): an SA join on InfiniBand, IGMP/MLD on RoCE.
    #[default]
    Rdmacm,
    /// `ibv_attach_mcast` to [`attach_mgid`] only (RoCE without snooping switches).
    Attach,
}

impl FromStr for JoinMode {
    type Err = String;
    fn from_str(s: &str) -> Result<JoinMode, String> {
        match s {
            "rdmacm" => Ok(JoinMode::Rdmacm),
            "attach" => Ok(JoinMode::Attach),
            _ => Err(format!("expected rdmacm or attach, got {s:?}")),
        }
    }
}

impl fmt::Display for JoinMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinMode::Rdmacm => "rdmacm",
            JoinMode::Attach => "attach",
        })
    }
}

/// The port's link layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: LIDs, an SM and SA.
    Infiniband,
    /// Ethernet (RoCE).
    Ethernet,
}

/// RoCE's version on the port (the GID type rdma_cm uses by default: v2 on current kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoceVersion {
    /// RoCE v1 (Ethernet frames, EtherType 0x8915).
    V1,
    /// RoCE v2 (UDP/IP, port 4791).
    V2,
}

/// What the address family and link of a fabric are, for the mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinSpec {
    /// IPv6 groups (else IPv4): the family of the fabric's IP address.
    pub family: IpFamily,
    /// The port's link layer.
    pub link: LinkLayer,
    /// On Ethernet: the RoCE version.
    pub roce: RoceVersion,
    /// On InfiniBand: the partition key and the IPoIB broadcast scope.
    pub pkey: u16,
    /// See [`JoinSpec::pkey`].
    pub scope: u8,
}

/// The MGID Linux's rdma_cm derives from IP group `ip` on a port described by `spec` (see the
/// module doc).
pub fn rdmacm_mgid(ip: IpAddr, spec: &JoinSpec) -> [u8; 16] {
    match (spec.link, ip) {
        (LinkLayer::Infiniband, IpAddr::V6(a)) => {
            let a = a.octets();
            let [p0, p1] = spec.pkey.to_be_bytes();
            let mut m = [0xff, 0x10 | (spec.scope & 0xf), 0x60, 0x01, p0, p1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            m[6..].copy_from_slice(&a[6..]);
            m
        }
        (LinkLayer::Infiniband, IpAddr::V4(a)) => {
            let a = a.octets();
            let [p0, p1] = spec.pkey.to_be_bytes();
            [
                0xff,
                0x10 | (spec.scope & 0xf),
                0x40,
                0x01,
                p0,
                p1,
                0,
                0,
                0,
                0,
                0,
                0,
                a[0] & 0x0f,
                a[1],
                a[2],
                a[3],
            ]
        }
        (LinkLayer::Ethernet, IpAddr::V6(a)) => a.octets(),
        (LinkLayer::Ethernet, IpAddr::V4(a)) => {
            let mut m = a.to_ipv6_mapped().octets();
            if spec.roce == RoceVersion::V1 {
                m[0] = 0xff;
                m[1] = 0x0e;
            }
            m
        }
    }
}

/// The MGID attach mode uses for `group` (RoCE v2's for the family's IP group).
pub fn attach_mgid(group: &GroupId, family: IpFamily) -> [u8; 16] {
    let spec = JoinSpec {
        family,
        link: LinkLayer::Ethernet,
        roce: RoceVersion::V2,
        pkey: DEFAULT_PKEY,
        scope: IPOIB_LINK_SCOPE,
    };
    rdmacm_mgid(group_ip(group, family), &spec)
}

/// Whether `gid` is a multicast GID: `ff00::/8` (IB and IPv6 groups) or a v4-mapped IPv4
/// multicast address (RoCE v2's IPv4 groups).
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    let v6 = Ipv6Addr::from(*gid);
    v6.is_multicast() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast())
}

/// Checks the source GID index of a join's address attributes (the GID the kernel picked for
/// the rdmacm bind address) against `configured` (`verbs_gid_index`, which unicast address
/// handles and HELLOs use). They differ when, say, `verbs_gid_index` names a RoCE v1 GID
/// (`fe80::`, index 0 on mlx5) and the join a RoCE v2 one: multicast and unicast would leave
/// with different source GIDs (and RoCE versions), and members would not reach each other.
pub fn check_join_sgid(joined: u8, configured: u8) -> Result<(), String> {
    if joined == configured {
        return Ok(());
    }
    Err(format!(
        "the multicast join's address uses GID index {joined} (the GID of verbs_addr the kernel picked), but unicast uses verbs_gid_index {configured}: set RINGCAST_VERBS_GID_INDEX={joined} (show_gids lists the port's GIDs)"
    ))
}

/// The RoCE version of a GID of type `gid_type` (`enum ibv_gid_type`: 0 InfiniBand, 1 RoCE v1,
/// 2 RoCE v2); `None` for InfiniBand and unknown types.
pub fn roce_version(gid_type: u32) -> Option<RoceVersion> {
    match gid_type {
        1 => Some(RoceVersion::V1),
        2 => Some(RoceVersion::V2),
        _ => None,
    }
}

/// The group every engine of `job` joins to announce its address (see [`super::peers`]).
pub fn discovery_group(job: &str) -> GroupId {
    let h = Sha256::digest(format!("ringcast verbs discovery group of job {job}").as_bytes());
    let mut g: GroupId = [0; 14];
    g.copy_from_slice(&h[..14]);
    g
}

/// The IP address a RoCE GID stands for, if it can serve as rdmacm's bind address: a
/// v4-mapped GID gives its IPv4 address; a global IPv6 GID itself. Link-local GIDs (every IB
/// GID, and RoCE's `fe80::` entries) need an interface scope and give `None`, as does zero.
pub fn gid_ip(gid: &[u8; 16]) -> Option<IpAddr> {
    let v6 = Ipv6Addr::from(*gid);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return (!v4.is_unspecified()).then_some(IpAddr::V4(v4));
    }
    let link_local = gid[0] == 0xfe && gid[1] & 0xc0 == 0x80;
    (!v6.is_unspecified() && !link_local && !v6.is_multicast()).then_some(IpAddr::V6(v6))
}

/// Formats a GID like an IPv6 address (how `show_gids` and rdma-core print them).
pub fn gid_str(gid: &[u8; 16]) -> String {
    Ipv6Addr::from(*gid).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringcast_proto::comm::ident::{group_ipv4, group_ipv6};
    use std::net::Ipv4Addr;

    const G: GroupId = [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d];

    fn spec(link: LinkLayer, family: IpFamily) -> JoinSpec {
        JoinSpec { family, link, roce: RoceVersion::V2, pkey: DEFAULT_PKEY, scope: IPOIB_LINK_SCOPE }
    }

    #[test]
    fn ip_groups_are_the_udp_fabrics() {
        let v6 = group_ip(&G, IpFamily::V6);
        assert_eq!(v6, IpAddr::V6(group_ipv6(&G)));
        assert_eq!(v6.to_string(), "ff15:1011:1213:1415:1617:1819:1a1b:1c1d");
        let v4 = group_ip(&G, IpFamily::V4);
        assert_eq!(v4, IpAddr::V4(group_ipv4(&G)));
        assert!(v4.is_multicast());
        assert!(matches!(v4, IpAddr::V4(a) if a.octets()[0] == 239), "239/8");
        assert_eq!(IpFamily::of(v4), IpFamily::V4);
        assert_eq!(IpFamily::of(v6), IpFamily::V6);
    }

    #[test]
    fn infiniband_mgids_follow_rdma_cm() {
        // IPv6: ff12:6001:ffff + the low 80 bits of ff15:1011:1213:1415:1617:1819:1a1b:1c1d.
        let m = rdmacm_mgid(group_ip(&G, IpFamily::V6), &spec(LinkLayer::Infiniband, IpFamily::V6));
        assert_eq!(gid_str(&m), "ff12:6001:ffff:1415:1617:1819:1a1b:1c1d");
        assert_eq!(m[6..], G[4..], "80 of the 112 bits");
        // IPv4 239.a.b.c: ff12:4001:ffff::0a.b.c (low 28 bits).
        let ip = IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3));
        let m = rdmacm_mgid(ip, &spec(LinkLayer::Infiniband, IpFamily::V4));
        assert_eq!(gid_str(&m), "ff12:4001:ffff::f01:203");
        // A partition and scope of another IPoIB broadcast address.
        let s = JoinSpec { pkey: 0x8001, scope: 5, ..spec(LinkLayer::Infiniband, IpFamily::V4) };
        assert_eq!(gid_str(&rdmacm_mgid(ip, &s)), "ff15:4001:8001::f01:203");
        for m in [m, rdmacm_mgid(ip, &s)] {
            assert!(is_multicast_gid(&m));
        }
    }

    #[test]
    fn roce_mgids_are_the_ip_group() {
        let v6 = group_ip(&G, IpFamily::V6);
        assert_eq!(rdmacm_mgid(v6, &spec(LinkLayer::Ethernet, IpFamily::V6)), group_ipv6(&G).octets());
        let ip = IpAddr::V4(Ipv4Addr::new(239, 9, 8, 7));
        let v2 = rdmacm_mgid(ip, &spec(LinkLayer::Ethernet, IpFamily::V4));
        assert_eq!(gid_str(&v2), "::ffff:239.9.8.7");
        let v1 =
            rdmacm_mgid(ip, &JoinSpec { roce: RoceVersion::V1, ..spec(LinkLayer::Ethernet, IpFamily::V4) });
        assert_eq!(gid_str(&v1), "ff0e::ffff:ef09:807");
        for m in [v2, v1, group_ipv6(&G).octets()] {
            assert!(is_multicast_gid(&m), "{}", gid_str(&m));
        }
        assert_eq!(
            attach_mgid(&G, IpFamily::V4),
            rdmacm_mgid(group_ip(&G, IpFamily::V4), &spec(LinkLayer::Ethernet, IpFamily::V4))
        );
        assert_eq!(attach_mgid(&G, IpFamily::V6), group_ipv6(&G).octets());
    }

    #[test]
    fn unicast_gids_are_not_multicast_and_map_to_bind_addresses() {
        let ib = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0xc9, 0x03, 0xff, 0xfe, 0x01, 0x02, 0x03];
        assert!(!is_multicast_gid(&ib));
        assert_eq!(gid_ip(&ib), None, "link-local");
        let v4 = Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped().octets();
        assert!(!is_multicast_gid(&v4));
        assert_eq!(gid_ip(&v4), Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))));
        let global: Ipv6Addr = "2001:db8::7".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        assert_eq!(gid_ip(&global.octets()), Some(IpAddr::V6(global)));
        assert_eq!(gid_ip(&[0; 16]), None);
        assert_eq!(gid_ip(&Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets()), None);
        assert_eq!(gid_ip(&group_ipv6(&G).octets()), None, "a group is no bind address");
    }

    #[test]
    fn a_join_with_another_source_gid_names_the_index_to_set() {
        assert_eq!(check_join_sgid(3, 3), Ok(()));
        let e = check_join_sgid(3, 0).expect_err("mismatch");
        assert!(e.contains("RINGCAST_VERBS_GID_INDEX=3") && e.contains("verbs_gid_index 0"), "{e}");
        assert_eq!(
            [0, 1, 2, 3].map(roce_version),
            [None, Some(RoceVersion::V1), Some(RoceVersion::V2), None],
            "ibv_gid_type"
        );
    }

    #[test]
    fn discovery_groups_and_join_modes() {
        assert_eq!(discovery_group("a"), discovery_group("a"));
        assert_ne!(discovery_group("a"), discovery_group("b"));
        assert_ne!(
            discovery_group("a"),
            ringcast_proto::engine::world_identity("a", &Default::default()).group,
            "not the world group"
        );
        for m in [JoinMode::Rdmacm, JoinMode::Attach] {
            assert_eq!(m.to_string().parse::<JoinMode>(), Ok(m));
        }
        assert!("sa".parse::<JoinMode>().is_err());
        assert_eq!(JoinMode::default(), JoinMode::Rdmacm);
    }
}
