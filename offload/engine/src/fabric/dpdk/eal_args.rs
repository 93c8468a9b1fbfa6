//! The EAL command line the `dpdk` fabric initialises DPDK with, built from the engine's
//! configuration in safe code (no DPDK in it; unit-tested without the EAL).
//!
//! Contract of [`eal_args`]: the arguments make an EAL that touches nothing it was not told
//! to — no PCI scan unless a device is named (`--no-pci`), no telemetry socket
//! (`--no-telemetry`), no shared configuration or hugepage files (`--no-shconf` with
//! `--no-huge`, `--in-memory` with hugepages), a runtime directory of its own
//! (`--file-prefix`, unique per engine: [`file_prefix`]), one lcore mapped onto every CPU the
//! process may use (`--lcores=0@(...)`, so the EAL's pinning of its main thread changes
//! nothing: the runner's `pin_cpu` stays in charge), quiet logging. The virtual device
//! (`dpdk_vdev`) is one `--vdev`; `dpdk_eal_args` come last, and each option they name
//! replaces the one this module would have added (a user's `-l` drops `--lcores`, an `-a`
//! allow-listing a PCI device drops `--no-pci`, and so on).
use std::fmt;
use std::str::FromStr;

/// Whether the EAL uses hugepages (`dpdk_hugepages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hugepages {
    /// `--no-huge`: ordinary anonymous memory, sized by `-m`. Always works; what tests use.
    #[default]
    Off,
    /// Hugepages, required: initialisation fails unless hugetlbfs is mounted with enough free
    /// pages.
    On,
    /// Hugepages when hugetlbfs is mounted with enough free pages, else `Off`.
    Auto,
}

impl FromStr for Hugepages {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Hugepages::Off),
            "on" => Ok(Hugepages::On),
            "auto" => Ok(Hugepages::Auto),
            _ => Err(format!("expected off, on or auto, got {s:?}")),
        }
    }
}

impl fmt::Display for Hugepages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hugepages::Off => "off",
            Hugepages::On => "on",
            Hugepages::Auto => "auto",
        })
    }
}

/// What the EAL of one engine needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EalSpec {
    /// `--vdev` (empty: none; the port is then a device `extra` allow-lists).
    pub vdev: String,
    /// Extra arguments, whitespace-separated, appended last.
    pub extra: String,
    /// Hugepages or not (already resolved: [`resolve_hugepages`]).
    pub hugepages: bool,
    /// Memory the EAL reserves without hugepages, in MiB (`-m`).
    pub mem_mb: u64,
    /// `--file-prefix`.
    pub prefix: String,
    /// The engine's `log_level` (0 silent, 1 normal, 2 verbose).
    pub log_level: u8,
    /// CPUs the process may run on.
    pub cpus: Vec<usize>,
}

/// Longest job name part of a file prefix (the prefix names a directory under
/// `/var/run/dpdk/`).
const PREFIX_JOB_CHARS: usize = 24;

/// DPDK's `RTE_MAX_LCORE` in Debian's build: CPU ids an lcore may be mapped to are below it.
const MAX_LCORE_CPU: usize = 128;

/// `rc-<job>-<node>-<pid>`: unique per engine on a machine (the job name is cut to 24
/// characters; node and process id keep it unique).
pub fn file_prefix(job: &str, node: u32, pid: u32) -> String {
    let job: String = job
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(PREFIX_JOB_CHARS)
        .collect();
    format!("rc-{job}-{node}-{pid}")
}

/// Memory (MiB) the EAL must reserve for a pool of `mbufs` buffers of `data_room` bytes
/// each: the pool (mbuf header 128 bytes and the mempool's per-object overhead included),
/// plus 64 MiB for the rest (rings, the AF_XDP driver's own frames in copy mode: 16 MiB);
/// at least 128 MiB.
pub fn mem_mb(mbufs: u32, data_room: u32) -> u64 {
    let per = u64::from(data_room) + 128 + 64;
    (u64::from(mbufs) * per).div_ceil(1 << 20).saturating_add(64).max(128)
}

/// Whether hugepages are used for `mode`, given `/proc/mounts` and `/proc/meminfo` and the
/// bytes needed; `Err` when `On` cannot be honoured.
pub fn resolve_hugepages(mode: Hugepages, need: u64, mounts: &str, meminfo: &str) -> Result<bool, String> {
    if mode == Hugepages::Off {
        return Ok(false);
    }
    let mounted = mounts.lines().any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"));
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let free = field("HugePages_Free").unwrap_or(0) * field("Hugepagesize").unwrap_or(0) * 1024;
    match (mounted && free >= need, mode) {
        (true, _) => Ok(true),
        (false, Hugepages::Auto) => Ok(false),
        (false, _) => Err(format!(
            "dpdk_hugepages=on: {} ({} bytes of free hugepages, {need} needed)",
            if mounted { "not enough free hugepages" } else { "hugetlbfs is not mounted" },
            free
        )),
    }
}

/// `0,2-5,7`: `cpus` (sorted, deduplicated) as DPDK's CPU list syntax.
fn cpu_list(cpus: &[usize]) -> String {
    let mut cpus: Vec<usize> = cpus.iter().copied().filter(|&c| c < MAX_LCORE_CPU).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end += 1;
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    out.join(",")
}

/// The EAL's `argv` (program name first); see the module doc.
pub fn eal_args(spec: &EalSpec) -> Vec<String> {
    let extra: Vec<String> = spec.extra.split_whitespace().map(str::to_string).collect();
    // Whether the user's arguments name one of `opts` (as `-x`, `-xVALUE`, `--opt`, `--opt=...`).
    let given = |opts: &[&str]| {
        extra.iter().any(|a| {
            opts.iter().any(|o| {
                a == o
                    || (o.starts_with("--") && a.starts_with(&format!("{o}=")))
                    || (o.len() == 2 && !o.starts_with("--") && a.starts_with(o))
            })
        })
    };
    let mut args = vec!["ringcast-engine".to_string()];
    if !given(&["--file-prefix"]) {
        args.push(format!("--file-prefix={}", spec.prefix));
    }
    if !given(&["-a", "--allow", "-b", "--block", "--no-pci"]) {
        args.push("--no-pci".into());
    }
    if !given(&["--telemetry", "--no-telemetry"]) {
        args.push("--no-telemetry".into());
    }
    if !given(&["--log-level"]) {
        // DPDK's levels: 3 critical, 4 error, 6 notice.
        let level = match spec.log_level {
            0 => 3,
            1 => 4,
            _ => 6,
        };
        args.push(format!("--log-level={level}"));
    }
    let memory_given =
        given(&["--no-huge", "--in-memory", "--no-shconf", "-m", "--socket-mem", "--legacy-mem"]);
    if !memory_given {
        if spec.hugepages {
            args.push("--in-memory".into());
        } else {
            args.extend([
                "--no-huge".to_string(),
                "--no-shconf".to_string(),
                "-m".to_string(),
                spec.mem_mb.to_string(),
            ]);
        }
    }
    let cpus = cpu_list(&spec.cpus);
    if !given(&["-l", "-c", "--lcores", "--main-lcore"]) && !cpus.is_empty() {
        args.push(format!("--lcores=0@({cpus})"));
    }
    if !spec.vdev.is_empty() {
        args.push(format!("--vdev={}", spec.vdev));
    }
    args.extend(extra);
    args
}

/// The port name DPDK gives the device `vdev` creates: the part before the first comma
/// (`net_af_xdp0,iface=eth0` → `net_af_xdp0`).
pub fn vdev_port_name(vdev: &str) -> &str {
    vdev.split(',').next().unwrap_or("").trim()
}

/// The kernel network device a vdev's driver sits on, if any: `net_af_xdp`'s `iface=`
/// (`net_af_xdp0,iface=eth0,start_queue=0` → `eth0`).
pub fn vdev_kernel_iface(vdev: &str) -> Option<&str> {
    let mut parts = vdev.split(',').map(str::trim);
    let driver = parts.next()?;
    if !driver.starts_with("net_af_xdp") {
        return None;
    }
    parts.find_map(|kv| kv.strip_prefix("iface=")).filter(|i| !i.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EalSpec {
        EalSpec {
            vdev: "net_af_xdp0,iface=eth0,start_queue=0,queue_count=1".into(),
            extra: String::new(),
            hugepages: false,
            mem_mb: 128,
            prefix: file_prefix("job", 2, 77),
            log_level: 1,
            cpus: vec![0, 1, 2, 5],
        }
    }

    #[test]
    fn default_arguments_touch_nothing_shared() {
        assert_eq!(
            eal_args(&spec()),
            [
                "ringcast-engine",
                "--file-prefix=rc-job-2-77",
                "--no-pci",
                "--no-telemetry",
                "--log-level=4",
                "--no-huge",
                "--no-shconf",
                "-m",
                "128",
                "--lcores=0@(0-2,5)",
                "--vdev=net_af_xdp0,iface=eth0,start_queue=0,queue_count=1",
            ]
        );
        let huge = EalSpec { hugepages: true, log_level: 0, ..spec() };
        let args = eal_args(&huge);
        assert!(args.contains(&"--in-memory".to_string()) && !args.contains(&"--no-huge".to_string()));
        assert!(args.contains(&"--log-level=3".to_string()));
    }

    #[test]
    fn user_arguments_replace_ours() {
        let s = EalSpec {
            extra: "-a 0000:03:00.0 -l 3 -d /opt/pmds --log-level=8 -m 512".into(),
            vdev: String::new(),
            ..spec()
        };
        let args = eal_args(&s);
        for gone in ["--no-pci", "--lcores=0@(0-2,5)", "--log-level=4", "--no-huge"] {
            assert!(!args.contains(&gone.to_string()), "{gone} in {args:?}");
        }
        assert!(args.ends_with(
            &["-a", "0000:03:00.0", "-l", "3", "-d", "/opt/pmds", "--log-level=8", "-m", "512"]
                .map(String::from)
        ));
        assert!(!args.iter().any(|a| a.starts_with("--vdev")));
        // `-d` is not `--file-prefix`: ours stays.
        assert!(args.contains(&"--file-prefix=rc-job-2-77".to_string()));
    }

    #[test]
    fn prefixes_are_short_and_unique_per_engine() {
        let p = file_prefix(&"x".repeat(64), 4095, 4_194_304);
        assert!(p.len() <= 3 + PREFIX_JOB_CHARS + 1 + 4 + 1 + 7, "{p}");
        assert_ne!(file_prefix("j", 0, 1), file_prefix("j", 1, 1));
        assert_ne!(file_prefix("j", 0, 1), file_prefix("j", 0, 2));
        assert_eq!(file_prefix("a/b", 0, 1), "rc-ab-0-1", "nothing that is not a plain name character");
    }

    #[test]
    fn cpu_lists_and_memory() {
        assert_eq!(cpu_list(&[3, 1, 2, 2, 7, 9, 10, 200]), "1-3,7,9-10");
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(mem_mb(100, 2176), 128);
        assert_eq!(mem_mb(65535, 2176), (65535u64 * 2368).div_ceil(1 << 20) + 64);
        assert_eq!(vdev_port_name("net_af_xdp0,iface=eth0"), "net_af_xdp0");
        assert_eq!(vdev_port_name("net_null0"), "net_null0");
        assert_eq!(vdev_kernel_iface("net_af_xdp0,iface=eth0,start_queue=0"), Some("eth0"));
        assert_eq!(vdev_kernel_iface("net_af_xdp1, start_queue=0 ,iface=veth3"), Some("veth3"));
        assert_eq!(vdev_kernel_iface("net_af_xdp0,iface="), None);
        assert_eq!(
            vdev_kernel_iface("net_memif0,role=server,iface=eth0"),
            None,
            "memif has no kernel device"
        );
        assert_eq!(vdev_kernel_iface(""), None);
    }

    #[test]
    fn hugepages_only_when_mounted_and_free() {
        let mounted = "none /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n";
        let plenty = "HugePages_Total:    1024\nHugePages_Free:     1000\nHugepagesize:       2048 kB\n";
        let none = "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n";
        assert_eq!(resolve_hugepages(Hugepages::Off, 1, mounted, plenty), Ok(false));
        assert_eq!(resolve_hugepages(Hugepages::Auto, 1 << 20, mounted, plenty), Ok(true));
        assert_eq!(resolve_hugepages(Hugepages::Auto, 1 << 20, "", plenty), Ok(false));
        assert_eq!(resolve_hugepages(Hugepages::Auto, 1 << 20, mounted, none), Ok(false));
        assert_eq!(resolve_hugepages(Hugepages::On, 1 << 20, mounted, plenty), Ok(true));
        assert!(resolve_hugepages(Hugepages::On, 1 << 20, "", plenty).unwrap_err().contains("not mounted"));
        assert!(resolve_hugepages(Hugepages::On, 1 << 40, mounted, plenty)
            .unwrap_err()
            .contains("not enough"));
        for m in [Hugepages::Off, Hugepages::On, Hugepages::Auto] {
            assert_eq!(m.to_string().parse::<Hugepages>(), Ok(m));
        }
        assert!("yes".parse::<Hugepages>().is_err());
    }
}
