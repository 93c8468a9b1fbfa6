//! Network namespaces for the UDP fabric tests: a Linux bridge in a namespace of its own and
//! member namespaces attached to it by veth pairs, all created with `ip` (iproute2) under names
//! unique to the test run, and deleted by a guard's `Drop` even when the test fails.
//!
//! Nothing touches the host's namespace: the bridge and the bridge ends of the veth pairs are
//! created in the bridge namespace, the other ends directly in the member namespaces (`ip link
//! add ... peer ... netns`), so no interface ever appears in the root namespace; deleting a
//! namespace destroys every interface in it.
#![allow(dead_code)]
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `ip args...`; the error carries the command and its stderr.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}: {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why namespaces cannot be created here, if they cannot (not root, no `ip`).
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}

/// A bridge namespace and `members` member namespaces, each with `eth0` on the bridge; deleted
/// on drop.
pub struct BridgedNamespaces {
    /// The bridge's namespace.
    pub bridge: String,
    /// The members' namespaces (index = member).
    pub members: Vec<String>,
    /// Every namespace created so far (deleted on drop, even after a half-finished setup).
    created: Vec<String>,
}

impl Drop for BridgedNamespaces {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            // Never panic in Drop; a failure here is reported and left for the operator.
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// The address of member `i` in `family` (`true`: IPv6) on the test link.
pub fn member_ip(v6: bool, i: usize) -> IpAddr {
    let host = u8::try_from(i + 1).unwrap_or(u8::MAX);
    if v6 {
        // fd00::/8 (unique local): never routed on the host's real networks.
        IpAddr::V6(Ipv6Addr::new(0xfd52, 0x7263, 0x7564, 0x7000, 0, 0, 0, u16::from(host)))
    } else {
        // 10/8 private; the namespaces have no route anywhere else.
        IpAddr::V4(Ipv4Addr::new(10, 213, 7, host))
    }
}

impl BridgedNamespaces {
    /// Creates the namespaces, named `rcu<pid>-<seq>-<tag>-{br,m0,m1,...}`, with member `i`
    /// at [`member_ip`]`(v6, i)` on its `eth0`.
    pub fn create(tag: &str, members: usize, v6: bool) -> Result<BridgedNamespaces, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let prefix = format!("rcu{}-{}-{tag}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let mut set = BridgedNamespaces {
            bridge: format!("{prefix}-br"),
            members: (0..members).map(|i| format!("{prefix}-m{i}")).collect(),
            created: Vec::new(),
        };
        ip(&["netns", "add", &set.bridge])?;
        set.created.push(set.bridge.clone());
        let br = set.bridge.clone();
        // Snooping off: the test bridge has no MLD/IGMP querier, so with snooping its
        // forwarding would depend on when the members' reports happen to be seen; flooding
        // every multicast to every port is what a small switch without snooping does.
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for (i, ns) in set.members.clone().iter().enumerate() {
            ip(&["netns", "add", ns])?;
            set.created.push(ns.clone());
            let port = format!("p{i}");
            ip(&["-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            let addr = match member_ip(v6, i) {
                // `nodad`: skip duplicate address detection, which would leave the address
                // unusable ("tentative") for a second or more.
                IpAddr::V6(a) => vec![format!("{a}/64"), "nodad".to_string()],
                IpAddr::V4(a) => vec![format!("{a}/24")],
            };
            let mut args = vec!["-n", ns, "addr", "add"];
            args.extend(addr.iter().map(String::as_str));
            args.extend(["dev", "eth0"]);
            ip(&args)?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        Ok(set)
    }
}
