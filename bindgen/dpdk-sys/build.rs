//! Build script of `ringcast-dpdk-sys`: finds DPDK with `pkg-config libdpdk` (which also emits the
//! link flags: every `-lrte_*` the .pc lists, dynamically), compiles the C shims of
//! `src/wrapper.c`, and runs bindgen over `src/wrapper.h` with the allow-lists below, writing
//! `$OUT_DIR/bindings.rs`.
//!
//! Contract: no hard-coded library list or include path. Only the include paths and defines of the
//! .pc's Cflags reach clang and the C compiler — the pkg-config crate parses out nothing else, and
//! that is wanted: the .pc's CPU flags (Debian's x86-64 one carries `-march=corei7`) would pin the
//! build to one CPU family and break an aarch64 build (`-include rte_config.h` is lost too,
//! harmlessly: `rte_common.h` includes it). What the headers do need is DPDK's instruction-set
//! floor for the target architecture (`isa_floor`): on x86-64 the inline mbuf/mempool code uses
//! SSSE3 and DPDK requires SSE4.2, so the shims are compiled with `-msse4.2` there — a feature
//! flag, not a CPU model, chosen from `CARGO_CFG_TARGET_ARCH`, never from the build machine. Enums
//! are bound as newtypes: a driver may report a value this header did not know.

use std::env;
use std::path::PathBuf;

/// Functions the project calls. Fast-path and mbuf helpers are `static inline` in DPDK and come
/// from the `rc_` shims of `src/wrapper.c`.
const FUNCTIONS: &[&str] = &[
    // EAL
    "rte_eal_init",
    "rte_eal_cleanup",
    "rte_eal_get_runtime_dir",
    "rte_socket_id",
    "rte_strerror",
    // ethdev
    "rte_eth_dev_count_avail",
    "rte_eth_dev_configure",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_macaddr_get",
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_mtu",
    "rte_eth_dev_set_mc_addr_list",
    "rte_eth_allmulticast_enable",
    "rte_eth_allmulticast_disable",
    "rte_eth_allmulticast_get",
    "rte_eth_promiscuous_enable",
    "rte_eth_promiscuous_disable",
    "rte_eth_promiscuous_get",
    "rte_eth_dev_info_get",
    "rte_eth_dev_socket_id",
    "rte_eth_stats_get",
    // mbuf pools
    "rte_pktmbuf_pool_create",
    "rte_mempool_free",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    // shims over static inline functions and macros
    "rc_rte_eth_rx_burst",
    "rc_rte_eth_tx_burst",
    "rc_rte_pktmbuf_alloc",
    "rc_rte_pktmbuf_free",
    "rc_rte_pktmbuf_append",
    "rc_rte_pktmbuf_mtod",
    "rc_rte_pktmbuf_data_len",
    "rc_rte_pktmbuf_pkt_len",
    "rc_rte_lcore_id",
    "rc_rte_errno",
];

/// Types the project names directly (everything they reference is pulled in as well, so that
/// every layout is complete and checked).
const TYPES: &[&str] = &[
    "rte_ether_hdr",
    "rte_ether_addr",
    "rte_mbuf",
    "rte_mempool",
    "rte_eth_conf",
    "rte_eth_rxconf",
    "rte_eth_txconf",
    "rte_eth_dev_info",
    "rte_eth_stats",
];

/// Build-time constants of this DPDK build that the project sizes things by.
const VARS: &[&str] = &[
    "RTE_MAX_ETHPORTS",
    "RTE_ETHER_ADDR_LEN",
    "RTE_ETHER_HDR_LEN",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_MBUF_DEFAULT_BUF_SIZE",
    "LCORE_ID_ANY",
    "SOCKET_ID_ANY",
];

fn anchored(names: &[&str]) -> String {
    format!("^({})$", names.join("|"))
}

/// The instruction-set extensions DPDK requires of every CPU of `arch` (DPDK refuses to build
/// for less: `config/x86/meson.build` errors out without SSE4.2). aarch64's floor (NEON) is the
/// architecture's own baseline.
fn isa_floor(arch: &str) -> &'static [&'static str] {
    match arch {
        "x86_64" => &["-msse4.2"],
        _ => &[],
    }
}

fn main() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH is set by cargo");
    let dpdk = pkg_config::Config::new().probe("libdpdk").expect("pkg-config libdpdk (libdpdk-dev)");

    // The .pc's Cflags as pkg-config parsed them: include paths and defines only.
    let mut cflags: Vec<String> = dpdk.include_paths.iter().map(|p| format!("-I{}", p.display())).collect();
    for (name, value) in &dpdk.defines {
        cflags.push(match value {
            Some(value) => format!("-D{name}={value}"),
            None => format!("-D{name}"),
        });
    }
    cflags.extend(isa_floor(&arch).iter().map(|f| f.to_string()));

    println!("cargo:rerun-if-changed=src/wrapper.h");
    println!("cargo:rerun-if-changed=src/wrapper.c");

    let mut shims = cc::Build::new();
    shims.file("src/wrapper.c").warnings(true).extra_warnings(true);
    for flag in &cflags {
        shims.flag(flag);
    }
    shims.compile("dpdk_sys_wrapper");

    let bindings = bindgen::Builder::default()
        .header("src/wrapper.h")
        .clang_args(&cflags)
        .allowlist_function(anchored(FUNCTIONS))
        .allowlist_type(anchored(TYPES))
        .allowlist_var(anchored(VARS))
        .default_enum_style(bindgen::EnumVariation::NewType { is_bitfield: false, is_global: false })
        // C comments would become rustdoc, and rustdoc would run their indented text as doctests.
        .generate_comments(false)
        .layout_tests(true)
        .derive_default(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen over src/wrapper.h");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo")).join("bindings.rs");
    bindings.write_to_file(&out).expect("write bindings.rs");
}
