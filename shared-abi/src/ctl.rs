//! Control messages between a host library and an engine, over a `SOCK_SEQPACKET` Unix socket
//! on one machine or a TCP connection across the PCIe boundary (a BlueField's ARM cores).
//!
//! The data path is the rings; the control path carries what rings cannot: the job secret and
//! the attach proof, shared-memory file descriptors (`SCM_RIGHTS`, Unix socket and `mapped` DMA
//! only) or host addresses (`cma`) for the rings and registered regions, the ABI version
//! handshake and, for hosts the engine cannot wake through shared memory, wake-ups. Every
//! message is one fixed-size [`CtlMsg`] (on TCP, back to back: the stream is cut every 64
//! bytes); the meaning of the generic fields depends on [`CtlKind`] and is listed there. The
//! socket's hang-up tells the engine that a host died, with or without descriptors in flight.
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"RCCT"` little-endian.
pub const CTL_MAGIC: u32 = u32::from_le_bytes(*b"RCCT");

/// Kind of a control message. Field use per kind (`a`, `b`: u32; `c`, `d`, `e`: u64):
///
/// | kind             | dir  | fd              | a            | b           | c           | d         | e      |
/// |------------------|------|-----------------|--------------|-------------|-------------|-----------|--------|
/// | HELLO            | h→e  | –               | host pid     | –           | nonce lo    | –         | nonce hi |
/// | HELLO_OK         | e→h  | –               | –            | –           | nonce lo    | engine pid| nonce hi |
/// | AUTH             | h→e  | –               | –            | –           | –           | proof lo  | proof hi |
/// | AUTH_OK          | e→h  | –               | –            | –           | –           | proof lo  | proof hi |
/// | RDMA_CONNECT     | h→e  | –               | QP number    | first PSN   | GID[0..8]   | GID[8..16]| LID, MTU<<16 |
/// | RDMA_CONNECT_OK  | e→h  | –               | QP number    | first PSN   | GID[0..8]   | GID[8..16]| LID, MTU<<16 |
/// | ATTACH           | h→e  | –               | host pid (rings rkey²) | sq entries  | local rank+1| rings addr| rings len |
/// | ATTACH_OK        | e→h  | attach segment¹ | host id      | engine pid  | segment len | local rank+1 | engine CPU+1 |
/// | REGISTER         | h→e  | region segment  | access bits  | –           | segment len | offset    | length |
/// | REGISTER_ADDR    | h→e  | –               | access bits  | rkey²       | address     | –         | length |
/// | WAKE             | e→h  | –               | –            | –           | –           | –         | –      |
/// | REGISTER_OK      | e→h  | –               | region key   | –           | –           | –         | –      |
/// | DEREGISTER       | h→e  | –               | region key   | –           | –           | –         | –      |
/// | DEREGISTER_OK    | e→h  | –               | region key   | –           | –           | –         | –      |
/// | DETACH           | h→e  | –               | –            | –           | –           | –         | –      |
/// | ERROR            | e→h  | –               | request kind | –           | –           | –         | –      |
/// | STATS            | h→e  | –               | –            | –           | –           | –         | –      |
/// | STATS_OK         | e→h  | –               | hosts now    | hosts lost  | ok count    | err count | dropped|
/// | NET_STATS        | h→e  | –               | –            | –           | –           | –         | –      |
/// | NET_STATS_OK     | e→h  | –               | syncs        | overruns    | CRC drops   | other drops | repair frames |
/// | COMMS            | h→e  | –               | –            | –           | –           | –         | –      |
/// | COMMS_OK         | e→h  | –               | alive now    | groups now  | created     | dropped   | freeing|
///
/// ¹ Only for a mapped attach. `ATTACH`'s `d`/`e` are 0 for a mapped attach (the engine builds
/// the rings and passes their segment); non-zero, they name host-owned rings (the `cma` backend):
/// a [`crate::SegmentHeader`] and both rings at that address of the host's memory, which the
/// engine reads and writes only by DMA, and whose header carries the `HELLO_OK` nonce.
///
/// ² The `rdma` backend: after `RDMA_CONNECT`, the region's rkey (the host registered it for
/// remote read and write on the device it connected with).
///
/// `HELLO` carries the host's fresh 128-bit nonce and pid and asks for the engine's (`HELLO_OK`:
/// its nonce and pid). Over TCP the two hellos, whole, are the transcript a session key is
/// derived from with the job's secret; `AUTH` carries the host's proof of that key and the
/// engine, once it checked it, answers `AUTH_OK` with its own — mutual, and bound to this
/// connection — and from then on every message either way carries a MAC in [`CtlMsg::mac`]
/// over a per-direction message counter (`ringcast_offload::ctl::session`; docs/architecture.md,
/// "Control path"). A TCP connection must pass `AUTH` before `ATTACH` (a Unix-socket one is
/// trusted by its peer's user id instead). The engine nonce's low half (`c`) is also what
/// host-owned rings carry as their attach proof. `WAKE` (engine → host, `seq` 0) tells a host-owned-ring
/// host sleeping on its socket that completions were published; a host ignores it elsewhere.
///
/// `ATTACH`'s `b` asks for a submission ring size (0 = engine default; the completion ring has
/// the same size); its `c` claims a local rank among the engine's processes (`rank + 1`; 0 = the
/// lowest free one; `u64::MAX` = none, an observer such as `ringcast stats`), and `ATTACH_OK`'s
/// `d` says which the host holds (0 = none: every local rank was taken, or none was claimed; the
/// host can COPY but not broadcast), its `e` the CPU the engine's thread is pinned to (`cpu + 1`; 0 = unpinned). `ERROR` carries a [`CtlStatus`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct CtlKind(pub u32);

impl CtlKind {
    /// Host asks to attach.
    pub const ATTACH: CtlKind = CtlKind(1);
    /// Engine accepted; the attach segment's fd comes with it.
    pub const ATTACH_OK: CtlKind = CtlKind(2);
    /// Host registers a region of a shared segment (fd attached).
    pub const REGISTER: CtlKind = CtlKind(3);
    /// Engine registered the region; `a` is the key.
    pub const REGISTER_OK: CtlKind = CtlKind(4);
    /// Host deregisters a key.
    pub const DEREGISTER: CtlKind = CtlKind(5);
    /// Engine dropped the key.
    pub const DEREGISTER_OK: CtlKind = CtlKind(6);
    /// Host detaches cleanly.
    pub const DETACH: CtlKind = CtlKind(7);
    /// Engine refused the request; `status` says why.
    pub const ERROR: CtlKind = CtlKind(8);
    /// Ask for the engine's counters.
    pub const STATS: CtlKind = CtlKind(9);
    /// Counters: `a` hosts attached now, `b` hosts lost (died without DETACH), `c` descriptors
    /// completed ok, `d` completed with an error, `e` descriptors dead hosts left in flight.
    pub const STATS_OK: CtlKind = CtlKind(10);
    /// Ask for the broadcast side's counters (an engine without a fabric answers `ERROR`).
    pub const NET_STATS: CtlKind = CtlKind(11);
    /// Broadcast counters: `a` synchronization epochs completed, `b` datagrams the fabric lost
    /// before the engine read them (saturating), `c` frames dropped for a bad CRC, `d` frames
    /// dropped for any other reason, `e` repair datagrams sent.
    pub const NET_STATS_OK: CtlKind = CtlKind(12);
    /// Ask for the communicators' life (an engine without a fabric answers `ERROR`).
    pub const COMMS: CtlKind = CtlKind(13);
    /// Communicators: `a` alive now (the world included), `b` multicast groups the fabric has
    /// joined now, `c` created since start (the world included), `d` dropped since start, `e`
    /// alive ones every local member freed, waiting for the protocol to settle them.
    pub const COMMS_OK: CtlKind = CtlKind(14);
    /// Host gives its nonce (`c` low, `e` high) and pid (`a`) and asks for the engine's (to
    /// authenticate, and to prove host-owned rings).
    pub const HELLO: CtlKind = CtlKind(15);
    /// Engine's nonce (`c` low, `e` high), fresh per connection, and its pid (`d`).
    pub const HELLO_OK: CtlKind = CtlKind(16);
    /// Host proves the session key derived from the job's secret and both hellos: `d`, `e`.
    pub const AUTH: CtlKind = CtlKind(17);
    /// Engine accepted the host's proof and proves the same key in turn: `d`, `e`.
    pub const AUTH_OK: CtlKind = CtlKind(18);
    /// Host registers `e` bytes of its own memory at address `c` (the `cma` backend: nothing is
    /// mapped, the engine reaches the range by DMA); `a` the access bits.
    pub const REGISTER_ADDR: CtlKind = CtlKind(19);
    /// Engine → host: completions were published while the host slept (host-owned rings).
    pub const WAKE: CtlKind = CtlKind(20);
    /// Host asks for an RDMA connection (the `rdma` backend), before `ATTACH`: its RC queue
    /// pair's address — `a` QP number, `b` first PSN, `c` and `d` the GID's first and last 8
    /// bytes (little-endian), `e` the LID in bits 0..16 and the active MTU (`enum ibv_mtu`) in
    /// bits 16..24. The host then attaches with host-owned rings in memory it registered for
    /// remote access, `ATTACH.a` carrying that region's rkey, and registers memory with
    /// `REGISTER_ADDR`, `b` carrying the rkey.
    pub const RDMA_CONNECT: CtlKind = CtlKind(21);
    /// Engine connected its queue pair for this host: its address, encoded as in
    /// `RDMA_CONNECT`.
    pub const RDMA_CONNECT_OK: CtlKind = CtlKind(22);
    /// Ask for counters `a`, `a + 1`, `a + 2` of [`crate::counters::ALL`] (every counter the
    /// engine keeps, for `ringcast stats`).
    pub const COUNTERS: CtlKind = CtlKind(23);
    /// Counters: `a` the first index (echoed), `b` how many counters the engine has, `c`, `d`,
    /// `e` the values (zero past the end).
    pub const COUNTERS_OK: CtlKind = CtlKind(24);
    /// Ask for communicator `a` (0 = the first alive, the world) of the engine's table, page
    /// `b` (0 or 1), for `ringcast stats`.
    pub const COMM_LIST: CtlKind = CtlKind(25);
    /// Communicator `a` (echoed) of `b` alive. Page 0: `c` its handle, `d` ranks (low 32 bits)
    /// and engines it spans (high), `e` broadcast ids posted here (low) and synchronization
    /// epochs completed (high). Page 1: `c` its ranks on this engine, `d` flags
    /// ([`COMM_BROKEN`], [`COMM_CLOSING`], [`COMM_FREEING`], [`COMM_FAILED_OVER`]), `e` its
    /// handle again (the table may change between the two requests). Past the
    /// end: `ERROR` `BAD_REQUEST` with `b` the count.
    pub const COMM_LIST_OK: CtlKind = CtlKind(26);
}

impl CtlKind {
    /// Host → engine: this process finalized (`ringcast_finalize`, `MPI_Finalize`): it posts
    /// nothing more on the world. Once every local process of the world did, the engine closes
    /// the world so its last, partial synchronization epoch settles (no padding); a process
    /// that merely detaches (a crash, a replacement) does not close it. Answered `FINALIZE_OK`.
    pub const FINALIZE: CtlKind = CtlKind(27);
    /// Engine noted the finalization.
    pub const FINALIZE_OK: CtlKind = CtlKind(28);
}

/// `COMM_LIST_OK` flag: a member was declared unreachable (or a local process left
/// mid-collective).
pub const COMM_BROKEN: u64 = 1;
/// `COMM_LIST_OK` flag: closed here (freed, or the world finalized); its last epoch settles.
pub const COMM_CLOSING: u64 = 2;
/// `COMM_LIST_OK` flag: every local member freed it; dropped once settled.
pub const COMM_FREEING: u64 = 4;
/// `COMM_LIST_OK` flag: multicast failed over to point-to-point.
pub const COMM_FAILED_OVER: u64 = 8;

/// Why a control request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(transparent)]
pub struct CtlStatus(pub u32);

impl CtlStatus {
    /// Accepted.
    pub const OK: CtlStatus = CtlStatus(0);
    /// The host's ABI version differs from the engine's (`version` holds the host's).
    pub const ABI_MISMATCH: CtlStatus = CtlStatus(1);
    /// The engine serves `max_hosts` already.
    pub const TOO_MANY_HOSTS: CtlStatus = CtlStatus(2);
    /// The host holds `max_regions` registrations already.
    pub const TOO_MANY_REGIONS: CtlStatus = CtlStatus(3);
    /// Malformed request (bad magic, kind, size, missing fd, range outside the segment…).
    pub const BAD_REQUEST: CtlStatus = CtlStatus(4);
    /// The engine could not map the segment the host passed.
    pub const MAP_FAILED: CtlStatus = CtlStatus(5);
    /// Deregistration of a key that is not registered.
    pub const UNKNOWN_REGION: CtlStatus = CtlStatus(6);
    /// The request is valid but exceeds a configured limit (ring size, region or segment size,
    /// the host's mapped-memory budget).
    pub const LIMIT: CtlStatus = CtlStatus(7);
    /// The local rank the host claimed at attach is held by another attached host, or is not
    /// below the engine's processes per node.
    pub const RANK_TAKEN: CtlStatus = CtlStatus(8);
    /// The connection did not prove it belongs to the engine's job (no `AUTH` before `ATTACH`
    /// over TCP, or a wrong tag), or its host-owned rings did not carry the engine's nonce.
    pub const UNAUTHORIZED: CtlStatus = CtlStatus(9);
    /// The engine does not serve this DMA backend (a `cma`-only engine refuses mapped attaches
    /// and segments; a host attached by `cma` registers by address), or the host memory it
    /// named could not be reached by DMA.
    pub const BACKEND: CtlStatus = CtlStatus(10);
    /// The connection sent no `ATTACH` within the engine's `attach_timeout_ms`, or was the
    /// oldest of `max_pending_conns` connections not attached yet when another came: closed.
    pub const IDLE: CtlStatus = CtlStatus(11);

    /// One-line description.
    pub const fn message(self) -> &'static str {
        match self.0 {
            0 => "ok",
            1 => "ABI version mismatch",
            2 => "engine serves its maximum number of hosts",
            3 => "host holds its maximum number of registered regions",
            4 => "malformed control request",
            5 => "engine could not map the shared-memory segment",
            6 => "region key is not registered",
            7 => "request exceeds a configured engine limit",
            8 => "local rank already held by another host, or outside the engine's processes per node",
            9 => "connection not authorized: missing or wrong job secret, or bad attach proof",
            10 => "DMA backend not served by this engine, or host memory unreachable by DMA",
            11 => "connection closed: no ATTACH in time, or pushed out by newer connections",
            _ => "unknown control status",
        }
    }
}

/// One control message (64 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct CtlMsg {
    /// [`CTL_MAGIC`].
    pub magic: u32,
    /// Sender's [`crate::ABI_VERSION`]. The engine answers a request of another version with
    /// `ERROR` [`CtlStatus::ABI_MISMATCH`] (its own version in `b`), whatever its kind.
    pub version: u32,
    /// What this message is.
    pub kind: CtlKind,
    /// Result (engine → host).
    pub status: CtlStatus,
    /// Kind-specific; see [`CtlKind`].
    pub a: u32,
    /// Kind-specific; see [`CtlKind`].
    pub b: u32,
    /// Kind-specific; see [`CtlKind`].
    pub c: u64,
    /// Kind-specific; see [`CtlKind`].
    pub d: u64,
    /// Kind-specific; see [`CtlKind`].
    pub e: u64,
    /// Request sequence number chosen by the host; the engine echoes it in the reply, so a
    /// reply to an earlier request (one the host stopped waiting for) is never taken for this one.
    pub seq: u64,
    /// On an authenticated TCP session (after `AUTH_OK`): the first 8 bytes of keyed BLAKE3,
    /// under the direction's session key, over the message counter and the 56 bytes before this
    /// field — checked and cleared by the receiving transport. Elsewhere (the Unix socket, a
    /// TCP connection before `AUTH_OK`) zero: a request with it set is refused with `ERROR`
    /// [`CtlStatus::BAD_REQUEST`].
    pub mac: u64,
}

impl CtlMsg {
    /// A message of `kind` with this build's magic and version and all other fields zero.
    pub const fn new(kind: CtlKind) -> Self {
        CtlMsg {
            magic: CTL_MAGIC,
            version: crate::ABI_VERSION,
            kind,
            status: CtlStatus::OK,
            a: 0,
            b: 0,
            c: 0,
            d: 0,
            e: 0,
            seq: 0,
            mac: 0,
        }
    }

    /// Why a request must be refused whatever its kind: another ABI version
    /// ([`CtlStatus::ABI_MISMATCH`]) or a MAC where none is due — or one the transport did not
    /// check and clear ([`CtlStatus::BAD_REQUEST`]).
    /// `None` when neither.
    pub const fn header_error(&self) -> Option<CtlStatus> {
        if self.version != crate::ABI_VERSION {
            Some(CtlStatus::ABI_MISMATCH)
        } else if self.mac != 0 {
            Some(CtlStatus::BAD_REQUEST)
        } else {
            None
        }
    }

    /// An `ERROR` reply to `req`.
    pub const fn error(req: &CtlMsg, status: CtlStatus) -> Self {
        let mut m = Self::reply(req, CtlKind::ERROR);
        m.status = status;
        m.a = req.kind.0;
        m
    }

    /// A reply of `kind` to `req` (echoing its sequence number).
    pub const fn reply(req: &CtlMsg, kind: CtlKind) -> Self {
        let mut m = Self::new(kind);
        m.seq = req.seq;
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_version_or_an_unchecked_mac_is_a_header_error() {
        assert_eq!(CtlMsg::new(CtlKind::STATS).header_error(), None);
        let mut m = CtlMsg::new(CtlKind::STATS);
        m.version = crate::ABI_VERSION + 1;
        assert_eq!(m.header_error(), Some(CtlStatus::ABI_MISMATCH));
        let mut m = CtlMsg::new(CtlKind::STATS);
        m.mac = 1 << 63;
        assert_eq!(m.header_error(), Some(CtlStatus::BAD_REQUEST));
    }
}
