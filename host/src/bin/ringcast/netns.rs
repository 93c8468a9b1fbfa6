//! Network namespaces for a local cluster on a real (virtual) network: one namespace per node,
//! each with `eth0` on a veth pair whose other end is a port of a Linux bridge in a namespace of
//! its own, so multicast frames are really flooded by a switch. Created with `ip` (iproute2)
//! under names unique to the run, and deleted when the [`Netns`] is dropped, whatever happened.
//!
//! Nothing touches the machine's own namespace: bridge ports are created in the bridge's
//! namespace and the node ends directly in the node namespaces, and deleting a namespace
//! destroys every interface in it. Addresses are private (`10.213.x.y/24`, or `fd52:…/64` for
//! IPv6) and no namespace has a route anywhere else, so traffic never leaves the project's own
//! namespaces.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};

/// Runs `ip args...`; the error carries the command and its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
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

/// Why namespaces cannot be created here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}

/// The bridge namespace and one namespace per node; deleted on drop.
pub struct Netns {
    /// Node namespaces (index = node).
    pub nodes: Vec<String>,
    /// Every namespace created so far, deleted on drop (also after a half-finished setup).
    created: Vec<String>,
    v6: bool,
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            // Never panic in Drop; a failure is reported for the operator.
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("ringcast: cleanup: {e}");
            }
        }
    }
}

impl Netns {
    /// Creates the namespaces `<prefix>-br` and `<prefix>-n<i>`, node `i` at [`Netns::addr`].
    pub fn create(prefix: &str, nodes: u32, v6: bool) -> Result<Netns, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        let mut set = Netns { nodes: Vec::new(), created: Vec::new(), v6 };
        let br = format!("{prefix}-br");
        ip(&["netns", "add", &br])?;
        set.created.push(br.clone());
        // Snooping off: there is no MLD/IGMP querier on this bridge, so with snooping its
        // forwarding would depend on when reports happen to be seen; a small switch without
        // snooping floods multicast to every port.
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..nodes {
            let ns = format!("{prefix}-n{i}");
            ip(&["netns", "add", &ns])?;
            set.created.push(ns.clone());
            set.nodes.push(ns.clone());
            let port = format!("p{i}");
            ip(&["-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let addr = match set.addr(i) {
                // `nodad`: no duplicate address detection, which would keep the address
                // "tentative" (unusable) for a second or more.
                IpAddr::V6(a) => vec![format!("{a}/64"), "nodad".to_string()],
                IpAddr::V4(a) => vec![format!("{a}/24")],
            };
            let mut args = vec!["-n", ns.as_str(), "addr", "add"];
            args.extend(addr.iter().map(String::as_str));
            args.extend(["dev", "eth0"]);
            ip(&args)?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(set)
    }

    /// Node `i`'s address on the bridge.
    pub fn addr(&self, i: u32) -> IpAddr {
        let host = u8::try_from(i + 1).unwrap_or(u8::MAX);
        if self.v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd52, 0x7263, 0x7275, 0x6e00, 0, 0, 0, u16::from(host)))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, 213, 9, host))
        }
    }

    /// `command` wrapped to run in node `i`'s namespace.
    pub fn wrap(&self, i: u32, command: Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.nodes[i as usize]]);
        c.arg(command.get_program());
        c.args(command.get_args());
        for (k, v) in command.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
}
