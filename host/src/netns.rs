//! A lab of network namespaces (for `ringcast run --netns` and the hardware-in-the-loop tests): a Linux bridge in a namespace of its own (multicast snooping
//! off, so multicast is flooded to every port as by a small switch without snooping) and one
//! namespace per node, each with `eth0` on a veth pair whose other end is a bridge port. Node
//! `i`'s `eth0` has a fixed MAC ([`Lab::mac`], locally administered) and IPv4 address
//! ([`Lab::ip`], `10.213.8.0/24`, no route anywhere else), so the `dpdk` fabric (members by MAC)
//! and the `udp` fabric (members by address) run on the same links.
//!
//! Nothing touches the machine's own namespace: bridge ports are created in the bridge's
//! namespace and node ends directly in the node namespaces; deleting a namespace destroys its
//! interfaces. [`Lab`]'s `Drop` deletes every namespace it created (also after a half-finished
//! set-up); processes inside must be stopped first (their guards are created after the lab, so
//! they drop before it). A lab's namespaces are named after its process (`rch<pid>-…`): a
//! process that dies without dropping its lab leaves them to its namespace reaper (the CLI's
//! launchers start one) or to [`reclaim_stale`], which deletes the labs of processes that are
//! gone.
use std::net::Ipv4Addr;
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

/// Names of the network namespaces that exist now.
pub fn namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The pid a lab namespace is named after (`rch<pid>-<seq>-…`, [`Lab::create`]).
fn lab_owner(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix("rch")?.split_once('-')?;
    let (seq, _) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(seq)).then(|| pid.parse().ok()).flatten()
}

/// Deletes the namespaces of labs whose process is gone (no `/proc/<pid>`, or a zombie): what
/// a launcher killed together with its namespace reaper left. Pids are judged in this pid
/// namespace; returns how many it deleted.
pub fn reclaim_stale() -> usize {
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z') || r.starts_with('X'))
        })
    };
    namespaces()
        .into_iter()
        .filter(|n| lab_owner(n).is_some_and(gone))
        .filter(|n| ip(&["netns", "del", n]).is_ok())
        .count()
}

/// The bridge namespace and the node namespaces; deleted on drop.
pub struct Lab {
    /// Name prefix of every namespace of this lab.
    pub prefix: String,
    /// Node namespaces (index = node).
    pub nodes: Vec<String>,
    created: Vec<String>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            // Never panic in Drop; a failure is reported for the operator.
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

impl Lab {
    /// Creates `<prefix>-br` and `<prefix>-n<i>` for `nodes` nodes, with prefix
    /// `rch<pid>-<seq>-<tag>`.
    pub fn create(tag: &str, nodes: usize) -> Result<Lab, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        if nodes == 0 || nodes > 200 {
            return Err(format!("a lab has 1..=200 nodes, not {nodes}"));
        }
        let prefix = format!("rch{}-{}-{tag}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let mut lab = Lab { prefix: prefix.clone(), nodes: Vec::new(), created: Vec::new() };
        let br = format!("{prefix}-br");
        ip(&["netns", "add", &br])?;
        lab.created.push(br.clone());
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..nodes {
            let ns = format!("{prefix}-n{i}");
            ip(&["netns", "add", &ns])?;
            lab.created.push(ns.clone());
            lab.nodes.push(ns.clone());
            let port = format!("p{i}");
            let mac = Lab::mac(i);
            ip(&[
                "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "address", &mac,
                "netns", &ns,
            ])?;
            ip(&["-n", &br, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Lab::ip(i)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(lab)
    }

    /// Node `i`'s MAC: `02:72:63:68:xx:yy` (locally administered, unicast), `xxyy` = `i + 1`.
    pub fn mac(i: usize) -> String {
        let n = u16::try_from(i + 1).unwrap_or(u16::MAX);
        format!("02:72:63:68:{:02x}:{:02x}", n >> 8, n & 0xff)
    }

    /// Node `i`'s IPv4 address.
    pub fn ip(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, 8, u8::try_from(i + 1).unwrap_or(u8::MAX))
    }

    /// Every node's MAC, comma-separated (`dpdk_members`), for the first `n` nodes.
    pub fn macs(n: usize) -> String {
        (0..n).map(Lab::mac).collect::<Vec<_>>().join(",")
    }

    /// `program` with `args` run in node `i`'s namespace (`ip netns exec`, which execs the
    /// program: the child's pid is the program's).
    pub fn command(&self, i: usize, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.nodes[i]]).arg(program);
        c
    }

    /// A prepared `command` (program, arguments, environment) to run in node `i`'s namespace.
    pub fn wrap(&self, i: usize, command: Command) -> Command {
        let mut c = self.command(i, std::path::Path::new(command.get_program()));
        c.args(command.get_args());
        for (k, v) in command.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    /// Every namespace of this lab that exists now.
    pub fn existing(prefix: &str) -> Vec<String> {
        namespaces().into_iter().filter(|n| n.starts_with(prefix)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_name_their_process() {
        assert_eq!(lab_owner("rch123-0-run-br"), Some(123));
        assert_eq!(lab_owner("rch123-45-dpu-n3"), Some(123));
        assert_eq!(lab_owner("rch123-run-br"), None);
        assert_eq!(lab_owner("rchx-0-run"), None);
        assert_eq!(lab_owner("other"), None);
    }
}
