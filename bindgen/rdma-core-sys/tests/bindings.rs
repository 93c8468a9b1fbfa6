//! Tests of `rdma-core-sys` beyond bindgen's compile-time layout assertions (which every build of
//! this crate, this test included, evaluates):
//! * the device list round trip through the real libibverbs — on a machine without RDMA hardware
//!   it finds no device (or fails with errno set), both valid answers; with a device it is opened
//!   and its first port queried through the `rc_ibv_query_port` shim, its first GID's type
//!   through `rc_ibv_query_gid_ex`;
//! * the data-path shims (`rc_ibv_post_send`, `rc_ibv_post_recv`, `rc_ibv_poll_cq`,
//!   `rc_ibv_req_notify_cq`) dispatch through the provider's ops table exactly as verbs.h's static
//!   inline functions do: driven against a fake provider whose ops record their arguments, which
//!   also checks that Rust and C agree on where `context` and `ops.*` live;
//! * sizes fixed by the wire or the verbs ABI, and that the layout assertions cover the structs
//!   the fabric code will hand to a provider;
//! * the message functions the fabric's errors use (`ibv_wc_status_str`, `rdma_event_str`).

use std::ffi::CStr;
use std::mem::{offset_of, size_of};
use std::os::raw::c_int;
use std::ptr;

use rdma_core_sys::*;

#[test]
fn device_list_round_trip() {
    let mut count: c_int = -1;
    // SAFETY: `count` is a valid out-pointer; the list is freed below with ibv_free_device_list.
    let list = unsafe { ibv_get_device_list(&mut count) };
    if list.is_null() {
        // rdma-core reports failure (e.g. no uverbs ABI in sysfs) as NULL with errno set.
        let err = std::io::Error::last_os_error();
        assert_ne!(err.raw_os_error(), Some(0), "NULL device list without errno");
        return;
    }
    assert!(count >= 0, "device count {count}");
    for i in 0..count as usize {
        // SAFETY: the list holds `count` device pointers followed by a NULL.
        let dev = unsafe { *list.add(i) };
        assert!(!dev.is_null(), "device {i} of {count} is NULL");
        // SAFETY: a listed device is valid until the list is freed; `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*dev).name.as_ptr()) };
        assert!(!name.to_bytes().is_empty(), "device {i} has no name");
    }
    // SAFETY: as above: the array is NULL-terminated after `count` entries.
    assert!(unsafe { *list.add(count as usize) }.is_null(), "device list not NULL-terminated");
    if count > 0 {
        // SAFETY: device 0 is listed and the list is still alive.
        let ctx = unsafe { ibv_open_device(*list) };
        assert!(!ctx.is_null(), "ibv_open_device: {}", std::io::Error::last_os_error());
        let mut port = ibv_port_attr::default();
        // SAFETY: `ctx` is an open context; ports are numbered from 1.
        assert_eq!(unsafe { rc_ibv_query_port(ctx, 1, &mut port) }, 0, "query port 1");
        assert!(port.gid_tbl_len > 0, "port 1 has no GID table");
        let mut entry = ibv_gid_entry::default();
        // SAFETY: open context, valid out-pointer; GID index 0 exists (the table is not empty).
        assert_eq!(unsafe { rc_ibv_query_gid_ex(ctx, 1, 0, &mut entry, 0) }, 0, "GID 0 of port 1");
        assert!(entry.gid_type <= 2, "gid type {}", entry.gid_type);
        // SAFETY: `ctx` was opened above and is closed once.
        assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
}

// The fake provider: each op answers with a value derived from every argument it was handed (and
// writes through its out-pointers), so a shim that dropped, swapped or misrouted one would fail.

unsafe extern "C" fn fake_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the test passes live objects; `bad` is a valid out-pointer.
    unsafe {
        *bad = wr;
        (*qp).qp_num as c_int + (*wr).wr_id as c_int
    }
}

unsafe extern "C" fn fake_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in fake_post_send.
    unsafe {
        *bad = wr;
        (*qp).qp_num as c_int - (*wr).wr_id as c_int
    }
}

unsafe extern "C" fn fake_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the test passes a live CQ and room for `num_entries` completions.
    unsafe {
        for i in 0..num_entries {
            let wc = &mut *wc.add(i as usize);
            wc.wr_id = 1000 + i as u64;
            wc.status = ibv_wc_status::IBV_WC_SUCCESS;
            wc.opcode = ibv_wc_opcode::IBV_WC_RECV;
            wc.byte_len = (*cq).cqe as u32;
        }
    }
    num_entries
}

unsafe extern "C" fn fake_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the test passes a live CQ.
    unsafe { (*cq).cqe * 10 + solicited_only }
}

#[test]
fn data_path_shims_dispatch_through_the_provider_ops() {
    let mut ctx = ibv_context::default();
    ctx.ops.post_send = Some(fake_post_send);
    ctx.ops.post_recv = Some(fake_post_recv);
    ctx.ops.poll_cq = Some(fake_poll_cq);
    ctx.ops.req_notify_cq = Some(fake_req_notify_cq);
    let mut qp = ibv_qp { context: &mut ctx, qp_num: 500, ..Default::default() };
    let mut cq = ibv_cq { context: &mut ctx, cqe: 7, ..Default::default() };

    let mut send = ibv_send_wr { wr_id: 20, ..Default::default() };
    let mut bad_send: *mut ibv_send_wr = ptr::null_mut();
    // SAFETY: `qp`, `send` and `bad_send` are live; the fake ops touch nothing else.
    assert_eq!(unsafe { rc_ibv_post_send(&mut qp, &mut send, &mut bad_send) }, 520);
    assert_eq!(bad_send, &mut send as *mut _);

    let mut recv = ibv_recv_wr { wr_id: 3, ..Default::default() };
    let mut bad_recv: *mut ibv_recv_wr = ptr::null_mut();
    // SAFETY: as above.
    assert_eq!(unsafe { rc_ibv_post_recv(&mut qp, &mut recv, &mut bad_recv) }, 497);
    assert_eq!(bad_recv, &mut recv as *mut _);

    let mut wcs = [ibv_wc::default(); 3];
    // SAFETY: `cq` is live and `wcs` has room for the 2 completions asked for.
    assert_eq!(unsafe { rc_ibv_poll_cq(&mut cq, 2, wcs.as_mut_ptr()) }, 2);
    assert_eq!(
        wcs.map(|wc| (wc.wr_id, wc.opcode, wc.byte_len)),
        [
            (1000, ibv_wc_opcode::IBV_WC_RECV, 7),
            (1001, ibv_wc_opcode::IBV_WC_RECV, 7),
            (0, ibv_wc_opcode(0), 0)
        ]
    );

    // SAFETY: `cq` is live.
    assert_eq!(unsafe { rc_ibv_req_notify_cq(&mut cq, 1) }, 71);
}

#[test]
fn abi_fixed_layouts_and_constants() {
    // A GID is 16 raw bytes; a scatter/gather element is addr(8) + length(4) + lkey(4).
    assert_eq!(size_of::<ibv_gid>(), 16);
    assert_eq!(size_of::<ibv_sge>(), 16);
    assert_eq!(offset_of!(ibv_sge, lkey), 12);
    // The Q_Key rdmacm assigns to UD multicast groups, and the link layer codes.
    assert_eq!(RDMA_UDP_QKEY, 0x0123_4567);
    assert_eq!((IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET), (1, 2));
    assert_eq!(rdma_port_space::RDMA_PS_UDP.0, 0x0111);
    // Enums are open newtypes: any value a provider writes is representable.
    let unknown = ibv_wc_status(0xdead);
    assert_ne!(unknown, ibv_wc_status::IBV_WC_SUCCESS);
    let flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
    assert_eq!(flags.0, 1 | 4);
    // A UD receive completion says whether its first 40 bytes hold a GRH.
    assert_eq!(ibv_wc_flags::IBV_WC_GRH.0, 1);
    assert_eq!((ibv_mtu::IBV_MTU_256.0, ibv_mtu::IBV_MTU_4096.0), (1, 5));
    // The GID types the verbs fabric maps to RoCE versions (fabric::verbs::group::roce_version).
    assert_eq!(
        (
            ibv_gid_type::IBV_GID_TYPE_IB.0,
            ibv_gid_type::IBV_GID_TYPE_ROCE_V1.0,
            ibv_gid_type::IBV_GID_TYPE_ROCE_V2.0
        ),
        (0, 1, 2)
    );
    // struct ibv_gid_entry: GID (16), then gid_index, port_num, gid_type, ndev_ifindex (u32 each).
    assert_eq!((size_of::<ibv_gid_entry>(), offset_of!(ibv_gid_entry, gid_type)), (32, 24));
}

#[test]
fn messages_for_statuses_and_events() {
    // SAFETY: both return pointers to static NUL-terminated strings, for any value.
    let (wc, ev) = unsafe {
        (
            CStr::from_ptr(ibv_wc_status_str(ibv_wc_status::IBV_WC_WR_FLUSH_ERR)),
            CStr::from_ptr(rdma_event_str(rdma_cm_event_type::RDMA_CM_EVENT_MULTICAST_JOIN)),
        )
    };
    assert!(wc.to_string_lossy().to_lowercase().contains("flush"), "{wc:?}");
    assert_eq!(ev.to_string_lossy(), "RDMA_CM_EVENT_MULTICAST_JOIN");
    // SAFETY: as above; an unknown value has a message too.
    let unknown = unsafe { CStr::from_ptr(ibv_wc_status_str(ibv_wc_status(0xdead))) };
    assert!(!unknown.to_bytes().is_empty());
}

#[test]
fn layout_assertions_cover_the_fabric_structs() {
    let bindings = include_str!(concat!(env!("OUT_DIR"), "/bindings.rs"));
    for ty in [
        "ibv_qp_init_attr",
        "ibv_qp_attr",
        "ibv_send_wr",
        "ibv_recv_wr",
        "ibv_sge",
        "ibv_wc",
        "ibv_ah_attr",
        "ibv_port_attr",
        "ibv_device_attr",
        "ibv_gid",
        "ibv_gid_entry",
        "ibv_context",
        "ibv_context_ops",
        "rdma_cm_event",
        "rdma_cm_id",
        "rdma_ud_param",
    ] {
        for what in ["Size", "Alignment"] {
            let needle = format!("[\"{what} of {ty}\"]");
            assert!(bindings.contains(&needle), "no layout assertion {needle}");
        }
    }
}
