//! Build script of `rdma-core-sys`: finds libibverbs and librdmacm with pkg-config (which also
//! emits the link flags), compiles the C shims of `src/wrapper.c`, and runs bindgen over
//! `src/wrapper.h` with the allow-lists below, writing `$OUT_DIR/bindings.rs`.
//!
//! Contract: nothing is hard-coded about where rdma-core lives; a missing library or header fails
//! the build with pkg-config's or clang's message. Enums are bound as newtypes (hardware and newer
//! providers may hand back values this header did not know), flag enums as bitfield newtypes.

use std::env;
use std::path::PathBuf;

/// Functions the project calls. The data-path verbs are `static inline` in verbs.h and come from
/// the `rc_` shims of `src/wrapper.c`; so do `ibv_query_port` and `ibv_query_gid_ex` (see
/// wrapper.h).
const FUNCTIONS: &[&str] = &[
    // verbs: devices, protection domains, completion queues, queue pairs
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_create_qp",
    "ibv_destroy_qp",
    "ibv_modify_qp",
    "ibv_query_gid",
    "ibv_create_ah",
    "ibv_destroy_ah",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_attach_mcast",
    "ibv_detach_mcast",
    // messages for errors
    "ibv_wc_status_str",
    // shims over static inline functions
    "rc_ibv_post_send",
    "rc_ibv_post_recv",
    "rc_ibv_poll_cq",
    "rc_ibv_req_notify_cq",
    "rc_ibv_query_port",
    "rc_ibv_query_gid_ex",
    // rdmacm: event channel, ids, address resolution, multicast joins
    "rdma_create_event_channel",
    "rdma_destroy_event_channel",
    "rdma_create_id",
    "rdma_destroy_id",
    "rdma_bind_addr",
    "rdma_resolve_addr",
    "rdma_join_multicast",
    "rdma_leave_multicast",
    "rdma_get_cm_event",
    "rdma_ack_cm_event",
    "rdma_event_str",
];

/// Types the project names directly (everything they reference is pulled in as well, so that
/// every layout is complete and checked).
const TYPES: &[&str] = &[
    "ibv_qp_init_attr",
    "ibv_qp_attr",
    "ibv_qp_attr_mask",
    "ibv_send_wr",
    "ibv_recv_wr",
    "ibv_sge",
    "ibv_wc",
    "ibv_wc_status",
    "ibv_wc_opcode",
    "ibv_wc_flags",
    "ibv_wr_opcode",
    "ibv_send_flags",
    "ibv_access_flags",
    "ibv_ah_attr",
    "ibv_port_attr",
    "ibv_port_state",
    "ibv_device_attr",
    "ibv_mtu",
    "ibv_gid",
    "ibv_gid_entry",
    "ibv_gid_type",
    "ibv_qp_type",
    "ibv_qp_state",
    "rdma_cm_event",
    "rdma_cm_event_type",
    "rdma_cm_id",
    "rdma_ud_param",
    "rdma_port_space",
];

/// Constants outside any named enum: link layers (an anonymous enum, bound as plain constants:
/// `ibv_port_attr::link_layer` is a `u8`) and the well-known Q_Key rdmacm gives UD multicast groups.
const VARS: &[&str] = &["IBV_LINK_LAYER_.*", "RDMA_UDP_QKEY"];

/// Enums whose values are OR-ed together: newtypes with `BitOr`/`BitAnd`.
const BITFIELD_ENUMS: &[&str] = &["ibv_access_flags", "ibv_send_flags", "ibv_qp_attr_mask", "ibv_wc_flags"];

fn anchored(names: &[&str]) -> String {
    format!("^({})$", names.join("|"))
}

fn main() {
    let verbs =
        pkg_config::Config::new().probe("libibverbs").expect("pkg-config libibverbs (libibverbs-dev)");
    let rdmacm = pkg_config::Config::new().probe("librdmacm").expect("pkg-config librdmacm (librdmacm-dev)");
    let include_paths: Vec<PathBuf> =
        verbs.include_paths.iter().chain(&rdmacm.include_paths).cloned().collect();

    println!("cargo:rerun-if-changed=src/wrapper.h");
    println!("cargo:rerun-if-changed=src/wrapper.c");

    cc::Build::new()
        .file("src/wrapper.c")
        .includes(&include_paths)
        .warnings(true)
        .extra_warnings(true)
        .compile("rdma_core_sys_wrapper");

    let bindings = bindgen::Builder::default()
        .header("src/wrapper.h")
        .clang_args(include_paths.iter().map(|p| format!("-I{}", p.display())))
        .allowlist_function(anchored(FUNCTIONS))
        .allowlist_type(anchored(TYPES))
        .allowlist_var(anchored(VARS))
        .default_enum_style(bindgen::EnumVariation::NewType { is_bitfield: false, is_global: false })
        .bitfield_enum(anchored(BITFIELD_ENUMS))
        // An anonymous enum is matched by its variants' names.
        .constified_enum("^IBV_LINK_LAYER_.*$")
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
