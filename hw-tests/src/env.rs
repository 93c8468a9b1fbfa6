//! Whether a kernel-bypass path can run on this machine, and if not, why — the reason a test
//! prints as `SKIP: <reason>` before returning. Each check looks at one requirement: root
//! (namespaces, AF_XDP), iproute2, the kernel's AF_XDP sockets, and DPDK's driver plugins
//! (Debian installs them as shared objects the EAL loads from
//! `/usr/lib/<triplet>/dpdk/pmds-<abi>/`, one package per driver: `librte-net-af-xdp23`,
//! `librte-net-memif23`), and an RDMA device for the verbs fabric (asked of libibverbs through
//! the engine's safe [`ringcast_offload::fabric::verbs::devices`]: this crate has no `unsafe`).
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Directories DPDK's driver plugins are installed in (Debian and `/usr/local` builds).
pub fn plugin_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for base in ["/usr/lib", "/usr/local/lib", "/usr/lib64", "/usr/local/lib64"] {
        let mut candidates = vec![PathBuf::from(base).join("dpdk")];
        if let Ok(entries) = std::fs::read_dir(base) {
            // Multiarch: /usr/lib/x86_64-linux-gnu/dpdk.
            candidates.extend(entries.flatten().map(|e| e.path().join("dpdk")));
        }
        for c in candidates {
            if let Ok(entries) = std::fs::read_dir(&c) {
                dirs.extend(
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pmds-"))),
                );
            }
        }
    }
    dirs.sort();
    dirs
}

/// The plugin of DPDK driver `driver` (`net_af_xdp`), if installed.
pub fn plugin(driver: &str) -> Option<PathBuf> {
    let stem = format!("librte_{driver}.so");
    plugin_dirs().into_iter().find_map(|d| {
        std::fs::read_dir(&d)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&stem)))
    })
}

/// Why DPDK driver `driver` cannot be used (its plugin is missing), naming the package.
pub fn missing_plugin(driver: &str, package: &str) -> Option<String> {
    plugin(driver).is_none().then(|| {
        format!(
            "DPDK's {driver} driver plugin is not installed (Debian: {package}; searched {:?})",
            plugin_dirs()
        )
    })
}

/// Why network namespaces cannot be created, if they cannot.
pub fn no_namespaces() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces and AF_XDP need CAP_SYS_ADMIN and CAP_NET_RAW".into());
    }
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    None
}

/// Why AF_XDP sockets cannot be opened, if they cannot (kernel without `CONFIG_XDP_SOCKETS`).
pub fn no_af_xdp() -> Option<String> {
    match rustix::net::socket(rustix::net::AddressFamily::XDP, rustix::net::SocketType::RAW, None) {
        Ok(_) => None,
        Err(e) => Some(format!("this kernel opens no AF_XDP socket ({e}): CONFIG_XDP_SOCKETS is off")),
    }
}

/// Why DPDK over AF_XDP in namespaces cannot run here, if it cannot.
pub fn af_xdp_unavailable() -> Option<String> {
    no_namespaces().or_else(no_af_xdp).or_else(|| missing_plugin("net_af_xdp", "librte-net-af-xdp23"))
}

/// Why DPDK over memif cannot run here, if it cannot.
pub fn memif_unavailable() -> Option<String> {
    missing_plugin("net_memif", "librte-net-memif23")
}

/// The Rust target of the BlueField DPU's ARM cores.
pub const DPU_TARGET: &str = "aarch64-unknown-linux-gnu";

/// Where `qemu-aarch64` finds the aarch64 C library and loader (Debian's `libc6-arm64-cross`).
pub const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Why the DPU emulation — the engine cross-built for aarch64 and run under `qemu-aarch64` —
/// cannot run here, if it cannot: the emulator, the cross C library, the cross linker, or the
/// Rust target is missing (`scripts/deps.sh` installs all four).
pub fn dpu_emulation_unavailable() -> Option<String> {
    let runs = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !runs("qemu-aarch64", &["--version"]) {
        return Some("qemu-aarch64 is not installed (Debian: qemu-user)".into());
    }
    if !std::path::Path::new(AARCH64_SYSROOT).join("lib/ld-linux-aarch64.so.1").exists() {
        return Some(format!("no aarch64 C library in {AARCH64_SYSROOT} (Debian: libc6-dev-arm64-cross)"));
    }
    if !runs("aarch64-linux-gnu-gcc", &["--version"]) {
        return Some("no aarch64 cross linker (Debian: gcc-aarch64-linux-gnu)".into());
    }
    let libdir = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", DPU_TARGET])
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let has_std = libdir.as_ref().and_then(|d| std::fs::read_dir(d).ok()).is_some_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("libstd-")))
    });
    if !has_std {
        return Some(format!(
            "the Rust target {DPU_TARGET} is not installed (rustup target add {DPU_TARGET})"
        ));
    }
    None
}

/// Why the verbs fabric cannot run here, if it cannot: no RDMA device — the reason is then
/// exactly `no RDMA device (ibv_get_device_list returned 0)` — or an engine built without the
/// `verbs` feature, or libibverbs failing otherwise.
pub fn verbs_unavailable() -> Option<String> {
    ringcast_offload::fabric::verbs::devices().err().map(|e| e.to_string())
}
