//! Multicast joins through librdmacm: on InfiniBand an SA join (the SM creates the group and
//! routes it to the port, and assigns its MLID), on RoCE an IGMP/MLD report from the kernel (so
//! snooping switches forward the group). rdmacm only joins here — the fabric's own UD QP (made
//! with plain verbs, see [`super::device`]) is attached to the MGID the join reports, and sends
//! with an address handle made from the join's address attributes.
//!
//! Contract:
//! * [`McastJoin::join`] binds a fresh rdmacm id to the fabric's IP address (whose interface
//!   decides the device and port), asks to join the IP group, and waits — at most the given
//!   timeout, polling the event channel's non-blocking fd — for this id's
//!   `RDMA_CM_EVENT_MULTICAST_JOIN`; any other outcome is a [`VerbsError`] naming what
//!   happened. Events of other ids that arrive meanwhile are acknowledged and counted.
//! * Every event is acknowledged right after its fields are copied out (`rdma_destroy_id` waits
//!   for the acknowledgement of every event it reported).
//! * Dropping a [`McastJoin`] leaves the group (`rdma_leave_multicast`) and destroys the id;
//!   the event channel goes with its last id ([`EventChannel`] is shared by `Arc`).
//! * A group the SA drops later (an SM failover) is not rejoined: its multicast stops arriving
//!   and the protocol's repair carries the broadcasts (counted as repair traffic).
use crate::device::{destroy_error, report, Keep};
use crate::ffi::{errno, event_str, MinusOne, ToResult};
use crate::VerbsError;
use rdma_core_sys as sys;
use std::ffi::CStr;
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The errno Linux's rdma_cm gives an IPv6 multicast join on a RoCE v2 port (kernel-internal
/// `ENOTSUPP`).
const ENOTSUPP: i32 = 524;

/// An rdmacm event channel with a non-blocking fd.
pub struct EventChannel {
    raw: NonNull<sys::rdma_event_channel>,
}

// SAFETY: an event channel may be used and destroyed from any thread; destroyed once.
unsafe impl Send for EventChannel {}
// SAFETY: the channel is shared through `Arc` — by its user and by every rdmacm id created on
// it (`CmId` holds an Arc only to keep it alive until the id is destroyed). Through `&` it is
// read (`rdma_get_cm_event` in `McastJoin::wait`, `poll` on its fd) and ids are created on it;
// librdmacm serialises both internally (its event read is one `read` on the channel's fd, the
// id lookup under its lock), and each event read is acknowledged by the thread that read it,
// once. Two joins waiting on one channel from two threads would take each other's events (the
// other's join then times out: a wrong answer, not a memory error); the verbs fabric joins from
// its one polling thread.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    /// A new channel.
    pub fn new() -> Result<Arc<EventChannel>, VerbsError> {
        // SAFETY: no arguments; NULL with errno on failure.
        let raw = unsafe { sys::rdma_create_event_channel() }.to_result("rdma_create_event_channel")?;
        let ch = EventChannel { raw };
        let fd = ch.fd();
        let flags =
            rustix::fs::fcntl_getfl(fd).map_err(|e| VerbsError::call("fcntl(F_GETFL)", e.raw_os_error()))?;
        rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| VerbsError::call("fcntl(F_SETFL)", e.raw_os_error()))?;
        Ok(Arc::new(ch))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel's fd is open while the channel lives, which bounds the borrow.
        unsafe { BorrowedFd::borrow_raw((*self.raw.as_ptr()).fd) }
    }

    /// Waits up to `left` for the fd to become readable.
    fn wait(&self, left: Duration) {
        let ts = rustix::time::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let fd = self.fd();
        let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
        // A failed or interrupted poll just means another look at the channel.
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on this channel holds an Arc of it: none is left. Destroyed once.
        unsafe { sys::rdma_destroy_event_channel(self.raw.as_ptr()) }
    }
}

/// An rdmacm id, destroyed on drop.
struct CmId {
    raw: NonNull<sys::rdma_cm_id>,
    /// Its event channel: released after the id is destroyed, leaked if that fails.
    channel: Keep<Arc<EventChannel>>,
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_id, destroyed once; every event reported for it was
        // acknowledged (join acknowledges each one at once).
        let r = unsafe { sys::rdma_destroy_id(self.raw.as_ptr()) };
        self.channel.settle("rdma_destroy_id", r);
    }
}

/// A `sockaddr_storage` holding `ip` (port 0, no scope).
fn sockaddr(ip: IpAddr) -> sys::sockaddr_storage {
    let mut storage = sys::sockaddr_storage::default();
    match ip {
        IpAddr::V4(a) => {
            let sin = sys::sockaddr_in {
                sin_family: rustix::net::AddressFamily::INET.as_raw(),
                sin_port: 0,
                sin_addr: sys::in_addr { s_addr: u32::from_ne_bytes(a.octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_storage is larger than and as aligned as any sockaddr.
            unsafe { std::ptr::write((&mut storage as *mut sys::sockaddr_storage).cast(), sin) }
        }
        IpAddr::V6(a) => {
            let sin6 = sys::sockaddr_in6 {
                sin6_family: rustix::net::AddressFamily::INET6.as_raw(),
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: sys::in6_addr { __in6_u: sys::in6_addr__bindgen_ty_1 { __u6_addr8: a.octets() } },
                sin6_scope_id: 0,
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut storage as *mut sys::sockaddr_storage).cast(), sin6) }
        }
    }
    storage
}

/// What a join reported.
#[derive(Clone, Copy)]
pub struct JoinReply {
    /// Address attributes for sending to the group (MGID, MLID, SGID index, port).
    pub ah_attr: sys::ibv_ah_attr,
    /// The group's Q_Key.
    pub qkey: u32,
}

impl JoinReply {
    /// The group's MGID (the destination GID of its address attributes).
    pub fn mgid(&self) -> [u8; 16] {
        gid_bytes(&self.ah_attr.grh.dgid)
    }
}

/// The 16 bytes of a GID.
pub fn gid_bytes(gid: &sys::ibv_gid) -> [u8; 16] {
    // SAFETY: every member of the GID union is plain bytes (or integers over the same 16
    // bytes); `raw` covers all 16, and any bit pattern is a valid `[u8; 16]`.
    unsafe { gid.raw }
}

/// A joined multicast group, left on drop.
pub struct McastJoin {
    addr: sys::sockaddr_storage,
    /// The reply of the join.
    pub reply: JoinReply,
    /// The device rdmacm resolved the bind address to.
    pub device: String,
    /// Its port.
    pub port: u8,
    /// The join completed (a failure to leave is then worth a message).
    complete: bool,
    // Dropped after Drop::drop left the group.
    id: CmId,
}

// SAFETY: the id is used by its single owner only (leave and destroy on drop).
unsafe impl Send for McastJoin {}

impl McastJoin {
    /// Joins IP group `group` from address `bind` on `channel`, waiting up to `timeout`;
    /// `other_events` counts events of other ids read meanwhile.
    pub fn join(
        channel: &Arc<EventChannel>,
        bind: IpAddr,
        group: IpAddr,
        timeout: Duration,
        other_events: &mut u64,
    ) -> Result<McastJoin, VerbsError> {
        let mut raw: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: live channel; `raw` is a valid out-pointer; no context pointer.
        MinusOne(unsafe {
            sys::rdma_create_id(
                channel.raw.as_ptr(),
                &mut raw,
                std::ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_UDP,
            )
        })
        .to_result("rdma_create_id")?;
        let raw = NonNull::new(raw).ok_or_else(|| VerbsError::call("rdma_create_id", errno()))?;
        let id = CmId { raw, channel: Keep::new(Arc::clone(channel)) };
        let mut bind_addr = sockaddr(bind);
        // SAFETY: live id; the address is valid for the call (rdmacm copies it).
        MinusOne(unsafe {
            sys::rdma_bind_addr(id.raw.as_ptr(), (&mut bind_addr as *mut sys::sockaddr_storage).cast())
        })
        .to_result("rdma_bind_addr")
        .map_err(|e| {
            VerbsError::Invalid(format!(
                "{e}: is {bind} an address of the RDMA device's interface (verbs_addr)?"
            ))
        })?;
        // SAFETY: a bound id has its device context (or NULL) and port number set.
        let (ctx, port) = unsafe { ((*id.raw.as_ptr()).verbs, (*id.raw.as_ptr()).port_num) };
        let device = if ctx.is_null() {
            return Err(VerbsError::Invalid(format!("verbs_addr {bind} is on no RDMA device")));
        } else {
            // SAFETY: a live context's device and its NUL-terminated name outlive the id.
            unsafe { CStr::from_ptr((*(*ctx).device).name.as_ptr()) }.to_string_lossy().into_owned()
        };
        let mut addr = sockaddr(group);
        // SAFETY: live, bound id; the address is valid for the call (rdmacm copies it).
        let joined = MinusOne(unsafe {
            sys::rdma_join_multicast(
                id.raw.as_ptr(),
                (&mut addr as *mut sys::sockaddr_storage).cast(),
                std::ptr::null_mut(),
            )
        })
        .to_result("rdma_join_multicast");
        if let Err(VerbsError::Call { errno: e, .. }) = &joined {
            if *e == ENOTSUPP && group.is_ipv6() {
                return Err(VerbsError::Join {
                    group: group.to_string(),
                    reason: "the kernel's rdma_cm joins no IPv6 group on a RoCE v2 port; give verbs_addr an IPv4 address (groups are then 239/8)".into(),
                });
            }
        }
        joined?;
        // From here on, dropping the McastJoin leaves the group.
        let mut join = McastJoin {
            addr,
            reply: JoinReply { ah_attr: sys::ibv_ah_attr::default(), qkey: 0 },
            device,
            port,
            complete: false,
            id,
        };
        join.reply = join.wait(channel, group, timeout, other_events)?;
        join.complete = true;
        Ok(join)
    }

    /// This id's join event, within `timeout`.
    fn wait(
        &self,
        channel: &EventChannel,
        group: IpAddr,
        timeout: Duration,
        other_events: &mut u64,
    ) -> Result<JoinReply, VerbsError> {
        let deadline = Instant::now() + timeout;
        let again = rustix::io::Errno::AGAIN.raw_os_error();
        loop {
            let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: live channel; `ev` is a valid out-pointer. Non-blocking fd: EAGAIN when
            // nothing is there.
            let r = unsafe { sys::rdma_get_cm_event(channel.raw.as_ptr(), &mut ev) };
            if r != 0 || ev.is_null() {
                let e = errno();
                if e != again && e != 0 && e != rustix::io::Errno::INTR.raw_os_error() {
                    return Err(VerbsError::call("rdma_get_cm_event", e));
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(VerbsError::Join {
                        group: group.to_string(),
                        reason: format!(
                            "no answer within {timeout:?} (is the subnet manager up? verbs_join_timeout_ms)"
                        ),
                    });
                }
                channel.wait(left.min(Duration::from_millis(100)));
                continue;
            }
            // SAFETY: a reported event is valid until acknowledged; `id`, `event` and `status`
            // are plain fields (a pointer compared, never dereferenced, and integers).
            let (id, kind, status) = unsafe { ((*ev).id, (*ev).event, (*ev).status) };
            let mine = id == self.id.raw.as_ptr();
            let joined = mine && kind == sys::rdma_cm_event_type::RDMA_CM_EVENT_MULTICAST_JOIN;
            let reply = joined.then(|| {
                // SAFETY: still unacknowledged, so valid. `param` is a union; for an event of
                // an id whose QP type is UD — this id, created in the UDP port space — librdmacm
                // copies the kernel's UD parameters into its `ud` member (the group's address
                // attributes, QP number, Q_Key), so for this MULTICAST_JOIN event (the only one
                // it is read for) these bytes are initialised. `ud` holds only integers and a
                // pointer (copied, never dereferenced): any bit pattern is a valid value.
                let ud = unsafe { (*ev).param.ud };
                JoinReply { ah_attr: ud.ah_attr, qkey: ud.qkey }
            });
            // SAFETY: acknowledged once, after its fields were copied out.
            unsafe { sys::rdma_ack_cm_event(ev) };
            if !mine {
                *other_events += 1;
                continue;
            }
            if let Some(reply) = reply {
                return Ok(reply);
            }
            return Err(VerbsError::Join {
                group: group.to_string(),
                reason: format!("{} (status {status})", event_str(kind)),
            });
        }
    }
}

impl Drop for McastJoin {
    fn drop(&mut self) {
        // SAFETY: live id that joined (or is joining: leaving cancels it) `addr`; left once (the
        // id is destroyed right after).
        let r = unsafe {
            sys::rdma_leave_multicast(
                self.id.raw.as_ptr(),
                (&mut self.addr as *mut sys::sockaddr_storage).cast(),
            )
        };
        if let Some(e) = destroy_error(r).filter(|_| self.complete) {
            report(format_args!("rdma_leave_multicast: {}", std::io::Error::from_raw_os_error(e)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_are_laid_out_like_the_kernels() {
        let s = sockaddr("10.1.2.3".parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)));
        assert_eq!(s.ss_family, 2, "AF_INET");
        // SAFETY: the storage holds a sockaddr_in (written above), read back as one.
        let sin = unsafe { *(&s as *const sys::sockaddr_storage).cast::<sys::sockaddr_in>() };
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 1, 2, 3]);
        assert_eq!(sin.sin_port, 0);
        let v6: IpAddr = "ff15::1:2".parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let s = sockaddr(v6);
        assert_eq!(s.ss_family, 10, "AF_INET6");
        // SAFETY: as above, a sockaddr_in6.
        let sin6 = unsafe { *(&s as *const sys::sockaddr_storage).cast::<sys::sockaddr_in6>() };
        // SAFETY: every member of the address union is plain bytes.
        let octets = unsafe { sin6.sin6_addr.__in6_u.__u6_addr8 };
        assert_eq!(IpAddr::from(octets), v6);
    }

    #[test]
    fn a_join_reply_names_its_mgid() {
        let mut reply = JoinReply { ah_attr: sys::ibv_ah_attr::default(), qkey: 0 };
        let mgid = [0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 0xe0, 0, 0, 1];
        reply.ah_attr.grh.dgid = sys::ibv_gid { raw: mgid };
        assert_eq!(reply.mgid(), mgid);
        assert_eq!(gid_bytes(&sys::ibv_gid { raw: [7; 16] }), [7; 16]);
    }
}
