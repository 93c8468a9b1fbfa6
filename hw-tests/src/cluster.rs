//! Engines of one fabric in a [`Lab`] — one real `ringcast-engine` daemon per node namespace —
//! and one broadcast host per node in the same namespace (abstract Unix sockets, which hosts
//! attach through, are per network namespace), driven through the line protocol of
//! [`crate::roles`].
//!
//! [`Cluster`] owns the processes: dropping it stops the hosts, then SIGTERMs the engines and
//! removes DPDK runtime directories an engine that had to be killed left behind.
use crate::netns::Lab;
use crate::proc::{self, Child, Engine};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The fabric of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// `dpdk` over `net_af_xdp` on each node's `eth0` (in a [`Lab`]).
    DpdkAfXdp,
    /// `dpdk` over `net_memif`: two nodes, node 0 the memif server, node 1 the client, linked
    /// through an abstract Unix socket named after the job (no namespaces needed).
    DpdkMemif,
    /// `udp` (IPv4) on each node's `eth0` (in a [`Lab`]).
    Udp,
    /// `shm`: the shared-memory fabric between engines on this machine (no namespaces; the
    /// job's segments are unlinked when the cluster is dropped). The DPU-emulation test runs
    /// engines of two architectures on it.
    Shm,
    /// `verbs`: every engine on this machine with a UD queue pair of its own on one RDMA port
    /// (no lab). The device, port, GID index and address come from the caller's
    /// `RINGCAST_VERBS_*` variables (inherited); the datagram MTU is [`VERBS_MTU`] unless
    /// `RINGCAST_MTU` is set.
    Verbs,
}

/// The datagram MTU of [`Net::Verbs`] clusters: with the fabric's 24-byte header, 1024 bytes —
/// the smallest active MTU of a RoCE port on 1500-byte Ethernet — so the test runs on any port.
pub const VERBS_MTU: u32 = 1000;

/// The memif virtual device of node `node` (0: server, 1: client) of `job`, with the node's MAC.
pub fn memif_vdev(job: &str, node: usize) -> String {
    let role = if node == 0 { "server" } else { "client" };
    format!(
        "net_memif0,role={role},id=0,socket=/run/ringcast-{job}.memif,socket-abstract=yes,mac={}",
        Lab::mac(node)
    )
}

/// The AF_XDP virtual device on a namespace's `eth0`: one queue, the first; no preferred busy
/// polling (`busy_budget=0`: the driver would otherwise make a system call on polls that find
/// the ring empty, and the engine polls all the time).
pub const AF_XDP_VDEV: &str = "net_af_xdp0,iface=eth0,start_queue=0,queue_count=1,busy_budget=0";

/// The AF_XDP device the clusters and fabric members use: `RINGCAST_HW_AF_XDP_VDEV` if set (to
/// compare driver options with the bench), else [`AF_XDP_VDEV`].
pub fn af_xdp_vdev() -> String {
    std::env::var("RINGCAST_HW_AF_XDP_VDEV").unwrap_or_else(|_| AF_XDP_VDEV.to_string())
}

/// Settings every process of a cluster shares: more pollers (engines and hosts) than cores back
/// off to sleeping quickly, as `ringcast run` does, or the process a poller waits for never
/// runs; no pinning, so the kernel spreads them.
pub fn poll_env(pollers: usize) -> Vec<(String, String)> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (spins, yields, sleep_us) = if pollers > cpus { (50, 10, 20) } else { (2000, 20000, 50) };
    [
        ("RINGCAST_POLL_MODE", "spin-yield".to_string()),
        ("RINGCAST_IDLE_SPINS", spins.to_string()),
        ("RINGCAST_IDLE_YIELDS", yields.to_string()),
        ("RINGCAST_IDLE_SLEEP_US", sleep_us.to_string()),
        ("RINGCAST_PIN_CPU", "none".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The environment of node `node`'s engine.
pub fn engine_env(net: Net, job: &str, nodes: usize, node: usize) -> Vec<(String, String)> {
    let mut env = poll_env(nodes * 2);
    let (fabric, vdev) = match net {
        Net::DpdkAfXdp => ("dpdk", af_xdp_vdev()),
        Net::DpdkMemif => ("dpdk", memif_vdev(job, node)),
        Net::Udp => ("udp", String::new()),
        Net::Shm => ("shm", String::new()),
        Net::Verbs => ("verbs", String::new()),
    };
    if net == Net::Verbs && std::env::var_os("RINGCAST_MTU").is_none() {
        env.push(("RINGCAST_MTU".to_string(), VERBS_MTU.to_string()));
    }
    env.extend(
        [
            ("RINGCAST_FABRIC", fabric.to_string()),
            ("RINGCAST_JOB", job.to_string()),
            ("RINGCAST_NODES", nodes.to_string()),
            ("RINGCAST_NODE", node.to_string()),
            ("RINGCAST_ENGINE", format!("{job}-{node}")),
            ("RINGCAST_LOG_LEVEL", "1".to_string()),
            ("RINGCAST_DPDK_VDEV", vdev),
            ("RINGCAST_DPDK_MEMBERS", Lab::macs(nodes)),
            (
                "RINGCAST_UDP_MEMBERS",
                (0..nodes).map(|i| format!("{}:7470", Lab::ip(i))).collect::<Vec<_>>().join(","),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v)),
    );
    env
}

/// Engines and hosts of one job; see the module doc.
pub struct Cluster {
    /// Job name.
    pub job: String,
    /// Hosts (index = node); dropped (killed) before the engines.
    pub hosts: Vec<Child>,
    /// Engines (index = node).
    pub engines: Vec<Engine>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.hosts.clear();
        for e in &mut self.engines {
            e.signal_stop();
        }
        self.engines.clear();
        proc::remove_dpdk_leftovers(&self.job);
        // Engines never unlink the job's shared-memory fabric (a peer may still use it): the
        // launcher does, once every engine is gone.
        let _ = ringcast_offload::fabric::shm::cleanup(&self.job);
    }
}

impl Cluster {
    /// Starts an engine per node on `net` — in the node namespaces of `lab`, or, without a lab,
    /// `nodes` engines in this namespace (memif, shm, verbs) — then a host per node beside its engine
    /// running `tool host <host_args...>` (the `ringcast-hw` binary), and waits until every
    /// host attached (`READY`). An engine that exits meanwhile fails the start with its log.
    pub fn start(
        lab: Option<&Lab>,
        nodes: usize,
        net: Net,
        job: &str,
        tool: &Path,
        host_args: &[String],
    ) -> Result<Cluster, String> {
        let engine_bin = proc::engine_binary()?;
        let engine = |_node: usize| Command::new(&engine_bin);
        Cluster::start_with(lab, nodes, net, job, tool, host_args, &engine)
    }

    /// [`Cluster::start`] with each node's engine command line given by `engine(node)` (the
    /// environment of [`engine_env`] is added to it): the DPU-emulation test runs some engines
    /// as aarch64 binaries under `qemu-aarch64`.
    pub fn start_with(
        lab: Option<&Lab>,
        nodes: usize,
        net: Net,
        job: &str,
        tool: &Path,
        host_args: &[String],
        engine: &dyn Fn(usize) -> Command,
    ) -> Result<Cluster, String> {
        if lab.is_some_and(|lab| lab.nodes.len() != nodes) {
            return Err(format!("a lab of another size for a cluster of {nodes}"));
        }
        let needs_lab = matches!(net, Net::DpdkAfXdp | Net::Udp);
        if needs_lab != lab.is_some() || (net == Net::DpdkMemif && nodes != 2) {
            return Err(format!(
                "{net:?}: memif links two nodes, shm and verbs any number without a lab; AF_XDP and UDP need a lab"
            ));
        }
        let in_node = |node: usize, cmd: Command| match lab {
            Some(lab) => lab.wrap(node, cmd),
            None => cmd,
        };
        let command = |node: usize, program: &Path| in_node(node, Command::new(program));
        let mut c = Cluster { job: job.to_string(), hosts: Vec::new(), engines: Vec::new() };
        for node in 0..nodes {
            let mut cmd = in_node(node, engine(node));
            cmd.envs(engine_env(net, job, nodes, node));
            c.engines.push(Engine::spawn(&format!("{job}-{node}"), cmd)?);
            let mut cmd: Command = command(node, tool);
            cmd.arg("host")
                .args(host_args)
                .args(["--engine", &format!("{job}-{node}"), "--node", &node.to_string()])
                .args(["--nodes", &nodes.to_string()])
                .envs(poll_env(nodes * 2));
            c.hosts.push(Child::spawn(&format!("host {node}"), cmd)?);
            if net == Net::DpdkMemif && node == 0 {
                // DPDK's memif client connects once, when its port starts, and gives up if the
                // server's port is not started yet ("ID not found"): the server's engine must
                // be up first. An engine answers its host's attach only after its fabric started.
                c.expect_from(0..1, "READY", Duration::from_secs(60))?;
            }
        }
        let first = if net == Net::DpdkMemif { 1 } else { 0 };
        c.expect_from(first..nodes, "READY", Duration::from_secs(60))?;
        Ok(c)
    }

    /// Waits for `prefix` from every host, failing early with an engine's log if one exits.
    pub fn expect_all(&mut self, prefix: &str, timeout: Duration) -> Result<Vec<String>, String> {
        self.expect_from(0..self.hosts.len(), prefix, timeout)
    }

    /// Waits for `prefix` from the hosts `range`, failing early with an engine's log if one
    /// exits.
    fn expect_from(
        &mut self,
        range: std::ops::Range<usize>,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(range.len());
        for i in range {
            loop {
                if let Some(dead) = self.engines.iter_mut().position(|e| !e.running()) {
                    let e = self.engines.remove(dead);
                    let name = e.name.clone();
                    let (status, log) = e.stop();
                    return Err(format!(
                        "engine {name} exited ({status:?}) while hosts waited for {prefix:?}:\n{log}"
                    ));
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(format!("host {i}: no {prefix:?} within {timeout:?}"));
                }
                if let Some(rest) = self.hosts[i].try_expect(prefix, left.min(Duration::from_millis(500)))? {
                    out.push(rest);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Sends `line` to every host.
    pub fn send_all(&mut self, line: &str) -> Result<(), String> {
        proc::all(&mut self.hosts, |h| h.send(line)).map(|_| ())
    }

    /// Lets every host pass barrier `name` (all reached it, then all go).
    pub fn barrier(&mut self, name: &str, timeout: Duration) -> Result<(), String> {
        let got = self.expect_all("BARRIER", timeout)?;
        if let Some(other) = got.iter().find(|g| *g != name) {
            return Err(format!("barrier {name:?}: a host is at {other:?}"));
        }
        self.send_all("GO")
    }

    /// Waits for every host to exit successfully, then stops the engines: each must exit
    /// successfully after SIGTERM (port closed, EAL ended). Returns the engines' logs.
    pub fn shut_down(mut self, timeout: Duration) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        for (i, h) in std::mem::take(&mut self.hosts).into_iter().enumerate() {
            let (status, err) = h.finish(timeout);
            if !status.is_some_and(|s| s.success()) {
                problems.push(format!("host {i} ended {status:?}: {err}"));
            }
        }
        let mut logs = Vec::new();
        for e in &mut self.engines {
            e.signal_stop();
        }
        for (i, e) in std::mem::take(&mut self.engines).into_iter().enumerate() {
            let (status, log) = e.stop();
            if !status.is_some_and(|s| s.success()) {
                problems.push(format!("engine {i} ended {status:?}:\n{log}"));
            }
            logs.push(log);
        }
        if problems.is_empty() {
            Ok(logs)
        } else {
            Err(problems.join("\n"))
        }
    }
}

/// The arguments of `ringcast-hw host verify` for broadcasts of `sizes`, `passes` times over.
pub fn verify_args(sizes: &[usize], passes: u32) -> Vec<String> {
    let list = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    vec!["verify".into(), "--sizes".into(), list, "--counts".into(), passes.to_string()]
}

/// Runs the `verify` schedule on a cluster started with [`verify_args`]`(sizes, passes)`: lets
/// the hosts go, checks every host's `RESULT` (the number of broadcasts and the bytes they
/// carried: each was checked byte for byte by the host), then shuts hosts and engines down,
/// each engine having to report a clean stop. Returns the results (index = node) and the
/// engines' logs.
pub fn run_verify(
    mut cluster: Cluster,
    sizes: &[usize],
    passes: u32,
) -> Result<(Vec<String>, Vec<String>), String> {
    cluster.send_all("GO")?;
    let results = cluster.expect_all("RESULT", Duration::from_secs(600))?;
    let broadcasts = sizes.len() as u64 * u64::from(passes);
    let bytes = sizes.iter().sum::<usize>() as u64 * u64::from(passes);
    for (node, r) in results.iter().enumerate() {
        println!("node {node}: {r}");
        let got = (crate::roles::field::<u64>(r, "broadcasts"), crate::roles::field::<u64>(r, "bytes"));
        if got != (Some(broadcasts), Some(bytes)) {
            return Err(format!(
                "node {node}: {r}: expected {broadcasts} broadcasts of {bytes} bytes in all"
            ));
        }
    }
    let logs = cluster.shut_down(Duration::from_secs(120))?;
    for (node, log) in logs.iter().enumerate() {
        if !log.contains("stopped;") {
            return Err(format!("engine {node} did not report a clean stop:\n{log}"));
        }
    }
    Ok((results, logs))
}
