//! The verbs fabric (docs/design.md §4): the protocol's datagrams as messages of one unreliable
//! datagram (UD) queue pair per engine, through rdma-core (libibverbs, librdmacm) on an
//! InfiniBand or RoCE port — multicast groups for stage-1 multicast, address handles for
//! point-to-point, `n` pre-posted receives, completions polled in bursts.
//!
//! # Contract
//!
//! * **Members** are numbered by the launcher (`RINGCAST_NODE` of `RINGCAST_NODES`), and find
//!   each other's UD addresses at run time: every engine multicasts a HELLO (GID, LID, QP
//!   number, the members it knows) on its job's discovery group until it knows every member —
//!   at intervals backing off from `verbs_hello_ms` to [`HELLO_BACKOFF_CAP_NS`] — and the
//!   members a HELLO says its sender misses answer it ([`peers`] has the rules: back-off,
//!   answers, restarts, duplicates, impostors). A member counts as known once an address handle
//!   to it exists; handles that could not be made are retried from the periodic tick. A send to
//!   a member not known yet is dropped and counted ([`VerbsStats::tx_unknown`],
//!   [`FabricCounters::refused`]); DATA from such a member is delivered (its frame says who it
//!   is).
//! * **Framing** ([`wire`]): a 24-byte header (magic, version, kind, job tag, member,
//!   incarnation, length) before the protocol's datagram. A received message is delivered only
//!   if it parses, belongs to this job, comes from another member whose QP number fits its
//!   incarnation, and its datagram is within the MTU; anything else is counted by reason
//!   ([`VerbsStats::rejected`], [`Reject`]) and, except this member's own multicast echoes, as
//!   [`FabricCounters::refused`].
//! * **Groups** ([`group`]): a communicator's 112-bit id becomes the `udp` fabric's IP group
//!   (IPv6 `ff15::` + id, or IPv4 `239/8`, by the family of the fabric's address), joined
//!   through rdmacm (`rdma_join_multicast`: an SA join on InfiniBand, IGMP/MLD on RoCE), the QP
//!   attached to the MGID the join reports (`ibv_attach_mcast`), or, in attach mode on RoCE, to
//!   a computed MGID without rdmacm. Groups that map to one MGID share one attachment, detached
//!   when the last of them leaves ([`nic::Attachments`]). A join whose address uses another
//!   source GID index than `verbs_gid_index` fails, naming the index to set (the first join,
//!   of the discovery group, happens when the fabric is built). Join is idempotent; leave of a
//!   group not joined does nothing. Multicast to a group not joined is refused and counted.
//!   Multicast excludes this
//!   member: the NIC may loop a multicast back to the sending QP, and the fabric drops its own
//!   frames ([`Reject::Own`], not counted as refused).
//! * **MTU**: the engine's `mtu` plus the header must fit the port's active MTU (a UD message
//!   is one packet), else construction fails with the numbers. Larger datagrams are refused.
//! * **Receives** ([`slots`]): `verbs_recv_slots` buffers, each sized for the port's active MTU
//!   (a member with a larger `RINGCAST_MTU` is rejected as [`Reject::Oversize`], never a length
//!   error), posted as one receive, taken back by completion, handed to the protocol in place
//!   (no copy), and posted again after the poll callback returns. UD drops a message that finds
//!   no posted receive without telling anyone: polls that find none posted are counted (`dry`,
//!   part of [`FabricCounters::overrun`], as are receive errors other than flushes).
//! * **The error state**: an error completion puts the queue pair out of service
//!   ([`nic::Nic::failed`], counted in [`VerbsStats::qp_failures`]): nothing is reposted, sends
//!   are refused and counted ([`VerbsStats::tx_down`], [`FabricCounters::refused`]). The
//!   fabric's tick then tries to recover it — RESET → INIT → RTR → RTS, every receive posted
//!   again, every group re-attached — at once and then at most once per
//!   [`QP_RECOVERY_INTERVAL_NS`]. While it stays failed the protocol's peer timeouts turn the
//!   silence into typed errors.
//! * **Sends** never block: the frame is copied into one of `verbs_send_depth` registered send
//!   buffers (inline in the work request when it is small) and posted at once; a completion is
//!   requested every `depth / 4` sends, and a send that finds every buffer in flight is dropped
//!   and counted ([`VerbsStats::tx_full`]).
//! * **Reliability** for repair is the engine's: ring repair, retransmission with back-off and
//!   the synchronization run over unicast UD like every other fabric's point-to-point (the
//!   protocol core needs no reliable transport). RC queue pairs would cost one connection per
//!   peer and connection management for reliability the core already has; one UD QP serves
//!   every peer and every group with one receive pool.
//! * Polling: at most `budget` messages per [`Fabric::poll`], taken from the completion queue
//!   in bursts of [`POLL_BURST`]; HELLOs, address-handle retries and queue-pair recovery are
//!   done from `poll` and `flush` when due, on the fabric's own monotonic clock.
//! * Faults (`RINGCAST_FAULT_*`) are injected by wrapping the fabric in
//!   [`crate::fabric::faulty::Faulty`] (`runner/net.rs`), as for every fabric.
//! * **Configuration**: the fabric is built from its section (`verbs.*`) and the job's
//!   [`FabricSetup`] (member, members, datagram size, groups, job name), never from the whole
//!   configuration (`open`, [`VerbsOptions::new`], [`FabricSpec::new`]).
//! * Nothing panics; errors name the failing verb and carry its errno ([`VerbsError`]). No
//!   device: [`VerbsError::NoDevice`] ("no RDMA device (ibv_get_device_list returned 0)").
//!
//! # Limitations
//!
//! * `ibv_create_ah` runs on the data path (a member's first HELLO, a restart) and may block on
//!   RoCE while the kernel resolves the peer's MAC address (neighbour discovery).
//! * The queue pair uses P_Key index 0 only: an IPoIB child interface (another partition) needs
//!   its P_Key's index, which the fabric does not look up.
//! * The incarnation is the wall clock at start ([`incarnation_now`]): a member restarted on a
//!   host whose clock stepped back is rejected by the others as stale ([`Reject::Stale`]) until
//!   it starts with a later incarnation.
//! * An rdmacm join blocks the engine loop for up to `verbs_join_timeout_ms`; rdmacm events that
//!   arrive outside a join (`RDMA_CM_EVENT_MULTICAST_ERROR` after an SM failover,
//!   `RDMA_CM_EVENT_DEVICE_REMOVAL`) are only counted, when the next join reads them.
//!
//! # What is tested where
//!
//! The fabric's logic is [`VerbsFabric`], generic over the [`nic::Nic`] trait. Its unit tests
//! run it — several members at once, frames in and out, hellos, restarts, slot reposting, a full
//! send queue — against an in-memory fake NIC (`fake.rs`, tests only). The real NIC
//! ([`qp::UdNic`]) runs only where `ibv_get_device_list` finds a device: `hw-tests`'
//! `verbs_bcast` then broadcasts through real engine daemons; elsewhere it prints a SKIP line.
//!
//! # Where the device code is
//!
//! In the `ringcast-verbs` crate (`offload/verbs`, feature `verbs`, which links libibverbs and
//! librdmacm through `rdma-core-sys`): the verbs resources, rdmacm joins, and the UD queue pair
//! with its registered region ([`ringcast_verbs::UdQueue`]) — the only `unsafe` code of this
//! fabric. This module is safe (the engine crate forbids `unsafe`): [`qp`] drives the device
//! through that crate; [`wire`], [`group`], [`peers`], [`slots`] and [`nic`] are verbs-free and
//! built without the feature (the configuration parses `verbs_join` with [`group::JoinMode`]).

mod error;
pub mod group;
pub mod nic;
pub mod peers;
pub mod slots;
mod spec;
pub mod wire;

#[cfg(test)]
mod fake;
#[cfg(feature = "verbs")]
pub mod qp;

use crate::config::VerbsConfig;
use crate::fabric::{send_gathered, Datagram, Fabric, FabricCounters, FabricSetup};
pub use error::{devices, VerbsError, NO_DEVICE};
use nic::{Dest, McastId, Nic, PortInfo, Received, SendError};
use peers::{Learned, Peers, Source};
use ringcast_proto::comm::ident::group_ip;
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::ledger::{Ledger, Side};
pub use spec::{FabricSpec, VerbsOptions, VerbsStats};
pub use wire::Reject;
use wire::{Header, Kind, HEADER_LEN, HELLO_LEN, HELLO_NEED, HELLO_REPLY};

/// Completions taken from the completion queue per `ibv_poll_cq` (and receive completions per
/// [`Nic::poll`]).
pub const POLL_BURST: usize = 32;

/// The longest interval between two HELLOs asking for answers (the back-off's cap; the
/// interval starts at `verbs_hello_ms` and doubles after each), and the shortest between two
/// answers to one asker whose HELLO does not say whether it knows this member.
pub const HELLO_BACKOFF_CAP_NS: u64 = 1_000_000_000;

/// The shortest interval between two attempts to recover a queue pair in the error state.
pub const QP_RECOVERY_INTERVAL_NS: u64 = 1_000_000_000;

/// The verbs fabric of one member, over a NIC. See the module documentation.
pub struct VerbsFabric<N: Nic> {
    spec: FabricSpec,
    port: PortInfo,
    peers: Peers,
    /// The discovery group's handle (none with a single member).
    discovery: Option<McastId>,
    groups: Vec<(GroupId, McastId)>,
    /// When the next HELLO asking for answers is due, and the interval after it (back-off).
    next_hello: u64,
    hello_interval: u64,
    /// When to try again to make the address handles that could not be made.
    next_ah_retry: u64,
    /// When recovery of the failed queue pair was last tried, and why it failed.
    last_recovery: Option<u64>,
    recovery_error: Option<String>,
    /// This member's HELLO body: its address, then its known-members bitmap (sized at start).
    hello_body: Vec<u8>,
    /// Members whose HELLO asked for an answer, not answered yet (each at most once).
    replies: Vec<u32>,
    counters: FabricCounters,
    /// The datagrams copied into registered send slots ([`Fabric::ledger`]; a received one is
    /// handed over in the receive slot the HCA wrote, no copy).
    ledger: Ledger,
    /// A datagram of several parts gathered for the NIC's send (`send_gathered`).
    gather: Vec<u8>,
    stats: VerbsStats,
    burst: [Received; POLL_BURST],
    // Last: its resources go after everything else is done.
    nic: N,
}

impl<N: Nic> std::fmt::Debug for VerbsFabric<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFabric")
            .field("local", &self.spec.local)
            .field("gid", &group::gid_str(&self.port.address.gid))
            .field("qpn", &self.port.address.qpn)
            .field("known", &self.peers.known())
            .finish()
    }
}

/// What to do about a received message once its buffer is released.
enum After {
    Nothing,
    Forget(Option<nic::AhId>),
    /// A HELLO: header, address, whether it says its sender knows this member, sending QP.
    Hello(Header, wire::Hello, Option<bool>, u32),
}

/// Joins `group` on `nic`, refusing (and leaving again) a join whose address attributes use a
/// source GID index other than the port's (see [`group::check_join_sgid`]).
fn join_checked<N: Nic>(nic: &mut N, port: &PortInfo, group: &GroupId) -> Result<nic::Joined, VerbsError> {
    let joined = nic.join(group)?;
    if let Some(sgid) = joined.sgid_index {
        if let Err(e) = group::check_join_sgid(sgid, port.gid_index) {
            nic.leave(joined.id);
            return Err(VerbsError::Invalid(e));
        }
    }
    Ok(joined)
}

impl<N: Nic> VerbsFabric<N> {
    /// Member `spec.local` on `nic`: checks the MTU, joins the discovery group (with more than
    /// one member) and sends the first HELLO.
    pub fn new(mut nic: N, spec: FabricSpec) -> Result<VerbsFabric<N>, VerbsError> {
        let port = nic.port();
        if spec.mtu == 0 || spec.mtu > wire::MAX_BODY {
            return Err(VerbsError::Invalid(format!("mtu {} outside 1..={}", spec.mtu, wire::MAX_BODY)));
        }
        if spec.mtu + HEADER_LEN > port.max_message {
            return Err(VerbsError::Invalid(format!(
                "mtu {} needs UD messages of {} bytes (datagram + {HEADER_LEN}-byte header); the port's active MTU is {}: set RINGCAST_MTU to at most {}",
                spec.mtu,
                spec.mtu + HEADER_LEN,
                port.max_message,
                port.max_message.saturating_sub(HEADER_LEN)
            )));
        }
        let peers = Peers::new(spec.local.0, spec.nodes, spec.incarnation, port.address.qpn)
            .map_err(VerbsError::Invalid)?;
        let discovery =
            if spec.nodes > 1 { Some(join_checked(&mut nic, &port, &spec.discovery)?.id) } else { None };
        let now = nic.now();
        let bitmap = wire::bitmap_len(spec.nodes).min(spec.mtu.saturating_sub(HELLO_LEN));
        let mut hello_body = vec![0u8; HELLO_LEN + bitmap];
        hello_body[..HELLO_LEN].copy_from_slice(&port.address.encode());
        let mut f = VerbsFabric {
            groups: Vec::with_capacity(spec.max_groups.min(1024)),
            replies: Vec::with_capacity(spec.nodes as usize),
            next_hello: now,
            hello_interval: spec.hello_ns.max(1),
            next_ah_retry: now,
            last_recovery: None,
            recovery_error: None,
            hello_body,
            spec,
            port,
            peers,
            discovery,
            counters: FabricCounters::default(),
            ledger: Ledger::default(),
            gather: Vec::new(),
            stats: VerbsStats::default(),
            burst: [Received::default(); POLL_BURST],
            nic,
        };
        f.tick();
        Ok(f)
    }

    /// This member's address (GID, QP number, LID).
    pub fn address(&self) -> wire::Hello {
        self.port.address
    }

    /// The port as the fabric sees it.
    pub fn port(&self) -> PortInfo {
        self.port
    }

    /// The member table.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// The NIC.
    pub fn nic(&self) -> &N {
        &self.nic
    }

    /// Counters beyond [`FabricCounters`].
    pub fn stats(&self) -> VerbsStats {
        let n = self.nic.stats();
        VerbsStats {
            tx_full: n.send.full,
            tx_errors: n.tx_errors + n.post_errors,
            // The NIC's error completions, and the fabric's own count of slots it did not hold.
            rx_errors: n.rx_errors + self.stats.rx_errors,
            rx_flushed: n.rx_flushed,
            rx_dry: n.recv.dry,
            qp_failures: n.qp_failures,
            known_now: self.peers.known(),
            posted_now: n.recv.posted_now,
            in_flight_now: (n.send.posts - n.send.completed) as u32,
            retired_now: n.retired_now,
            ..self.stats
        }
    }

    /// Why the last attempt to recover the queue pair failed (`None` if none has failed).
    pub fn recovery_error(&self) -> Option<&str> {
        self.recovery_error.as_deref()
    }

    /// The interval HELLOs asking for answers back off to.
    fn hello_cap(&self) -> u64 {
        HELLO_BACKOFF_CAP_NS.max(self.spec.hello_ns)
    }

    /// A member (or a new incarnation) appeared: others may be starting too, so ask at the
    /// first interval again.
    fn reset_backoff(&mut self, now: u64) {
        self.hello_interval = self.spec.hello_ns.max(1);
        self.next_hello = self.next_hello.min(now.saturating_add(self.hello_interval));
    }

    /// Tries to recover a failed queue pair, at most once per [`QP_RECOVERY_INTERVAL_NS`].
    fn recover(&mut self, now: u64) {
        if self.last_recovery.is_some_and(|t| now.saturating_sub(t) < QP_RECOVERY_INTERVAL_NS) {
            return;
        }
        self.last_recovery = Some(now);
        match self.nic.recover() {
            Ok(()) => self.stats.qp_recoveries += 1,
            Err(e) => {
                self.stats.qp_recovery_failures += 1;
                self.recovery_error = Some(e.to_string());
            }
        }
    }

    /// Makes the address handles that could not be made when their HELLO came, at most once
    /// per `verbs_hello_ms`.
    fn retry_ahs(&mut self, now: u64) {
        if self.peers.unrouted() == 0 || now < self.next_ah_retry {
            return;
        }
        self.next_ah_retry = now.saturating_add(self.spec.hello_ns.max(1));
        for m in 0..self.spec.nodes {
            let Some(e) = self.peers.entry(m) else { continue };
            if e.ah.is_some() {
                continue;
            }
            let addr = e.addr;
            match self.nic.create_ah(&addr) {
                Ok(ah) => self.peers.set_ah(m, ah),
                Err(_) => self.stats.ah_errors += 1,
            }
        }
    }

    /// Does what is due: recovery of a failed queue pair; address handles to retry; a HELLO
    /// asking for answers while members are missing (backing off); the answers owed.
    fn tick(&mut self) {
        let now = self.nic.now();
        if self.nic.failed() {
            self.recover(now);
            if self.nic.failed() {
                return; // nothing leaves a failed queue pair
            }
        }
        self.retry_ahs(now);
        if let Some(d) = self.discovery {
            if !self.peers.complete() && now >= self.next_hello {
                self.next_hello = now.saturating_add(self.hello_interval);
                self.hello_interval = self.hello_interval.saturating_mul(2).min(self.hello_cap());
                if self.hello(Dest::Multicast(d), HELLO_NEED) {
                    self.stats.hellos_sent += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.replies.len() {
            let m = self.replies[i];
            let Some((ah, qpn)) = self.peers.route(m) else {
                i += 1; // no address handle yet: answered once it has one
                continue;
            };
            self.replies.swap_remove(i);
            if self.hello(Dest::Unicast { ah, qpn }, HELLO_REPLY) {
                self.stats.replies_sent += 1;
            }
        }
    }

    /// Sends this member's HELLO (address and known-members bitmap) to `dest`; whether it
    /// went out.
    fn hello(&mut self, dest: Dest, flags: u16) -> bool {
        self.peers.fill_known(&mut self.hello_body[HELLO_LEN..]);
        let header = self.header(Kind::Hello, self.hello_body.len(), flags);
        self.nic.send(dest, &header, &self.hello_body).is_ok()
    }

    fn header(&self, kind: Kind, len: usize, flags: u16) -> [u8; HEADER_LEN] {
        Header {
            kind,
            job: self.spec.job,
            member: self.spec.local.0,
            incarnation: self.spec.incarnation,
            len: len as u16,
            flags,
        }
        .encode()
    }

    /// A frame out to `dest`, counted by outcome.
    fn transmit(&mut self, dest: Dest, frame: &[u8]) {
        let header = self.header(Kind::Data, frame.len(), 0);
        match self.nic.send(dest, &header, frame) {
            // Copied (with its header) into a registered send slot.
            Ok(()) => self.ledger.copied(Side::Send, frame.len() as u64),
            // Counted by the NIC (full ring, post errors); a bad handle is a fabric bug,
            // counted as refused rather than assumed away.
            Err(SendError::Full) | Err(SendError::Post(_)) => {}
            Err(SendError::Down) => {
                self.counters.refused += 1;
                self.stats.tx_down += 1;
            }
            Err(SendError::Invalid) => {
                self.counters.refused += 1;
                self.stats.tx_refused += 1;
            }
        }
    }

    fn reject(&mut self, r: Reject) {
        self.stats.rejected[r.index()] += 1;
        if r != Reject::Own {
            self.counters.refused += 1;
        }
    }

    /// A HELLO from `h.member` announcing `hello`, sent from QP `src_qp`; `knows_us`: what its
    /// bitmap says about this member.
    fn on_hello(&mut self, h: Header, hello: wire::Hello, knows_us: Option<bool>, src_qp: u32) {
        let now = self.nic.now();
        match self.peers.on_hello(h.member, h.incarnation, hello, src_qp) {
            Err(r) => return self.reject(r),
            Ok(Learned::New) => {
                self.stats.peers_learned += 1;
                self.reset_backoff(now);
            }
            Ok(Learned::Restarted { old }) => {
                self.stats.peers_learned += 1;
                self.stats.peers_restarted += 1;
                if let Some(ah) = old {
                    self.nic.destroy_ah(ah);
                }
                self.reset_backoff(now);
            }
            Ok(Learned::Same) => {}
        }
        self.stats.hellos_received += 1;
        if self.peers.route(h.member).is_none() {
            match self.nic.create_ah(&hello) {
                Ok(ah) => self.peers.set_ah(h.member, ah),
                Err(_) => {
                    // Retried from the tick (and at its next HELLO).
                    self.stats.ah_errors += 1;
                    self.next_ah_retry = now.saturating_add(self.spec.hello_ns.max(1));
                }
            }
        }
        if h.flags & HELLO_NEED == 0 || self.replies.contains(&h.member) {
            return;
        }
        // Only members the asker misses answer; when its bitmap does not say, at most once per
        // back-off cap and incarnation.
        let gap = match knows_us {
            Some(true) => return,
            Some(false) => self.spec.hello_ns / 2,
            None => self.hello_cap(),
        };
        if self.peers.reply_due(h.member, now, gap) {
            self.replies.push(h.member);
        }
    }
}

impl<N: Nic> Fabric for VerbsFabric<N> {
    fn local(&self) -> PeerId {
        self.spec.local
    }

    fn mtu(&self) -> usize {
        self.spec.mtu
    }

    fn join(&mut self, group: &GroupId) -> std::io::Result<()> {
        if self.groups.iter().any(|(g, _)| g == group)
            || (self.discovery.is_some() && *group == self.spec.discovery)
        {
            return Ok(());
        }
        if self.groups.len() >= self.spec.max_groups {
            return Err(std::io::Error::other(format!(
                "verbs fabric: {} groups joined already",
                self.groups.len()
            )));
        }
        let joined = join_checked(&mut self.nic, &self.port, group)?;
        let expected = match self.port.mode {
            group::JoinMode::Rdmacm => {
                group::rdmacm_mgid(group_ip(group, self.port.spec.family), &self.port.spec)
            }
            group::JoinMode::Attach => group::attach_mgid(group, self.port.spec.family),
        };
        if joined.mgid != expected {
            self.stats.mgid_mismatch += 1;
        }
        self.groups.push((*group, joined.id));
        Ok(())
    }

    /// Communicators' groups (the job's discovery group is the fabric's own, not counted).
    fn groups(&self) -> usize {
        self.groups.len()
    }

    fn leave(&mut self, group: &GroupId) {
        if let Some(i) = self.groups.iter().position(|(g, _)| g == group) {
            let (_, id) = self.groups.swap_remove(i);
            self.nic.leave(id);
        }
    }

    fn send(&mut self, to: PeerId, frame: &[u8]) {
        if frame.len() > self.spec.mtu || to == self.spec.local || to.0 >= self.spec.nodes {
            self.counters.refused += 1;
            self.stats.tx_refused += 1;
            return;
        }
        let Some((ah, qpn)) = self.peers.route(to.0) else {
            self.counters.refused += 1;
            self.stats.tx_unknown += 1;
            return;
        };
        if self.nic.failed() {
            self.counters.refused += 1;
            self.stats.tx_down += 1;
            return;
        }
        self.counters.sent += 1;
        self.transmit(Dest::Unicast { ah, qpn }, frame);
    }

    fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
        // (The NIC takes a header and one body: parts are gathered, and that copy counted.)
        let mut buf = std::mem::take(&mut self.gather);
        let gathered = send_gathered(self, &mut buf, batch);
        self.gather = buf;
        self.ledger.copied(Side::Send, gathered);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        if frame.len() > self.spec.mtu {
            self.counters.refused += 1;
            self.stats.tx_refused += 1;
            return;
        }
        let Some(&(_, id)) = self.groups.iter().find(|(g, _)| g == group) else {
            self.counters.refused += 1;
            self.stats.tx_not_joined += 1;
            return;
        };
        if self.nic.failed() {
            self.counters.refused += 1;
            self.stats.tx_down += 1;
            return;
        }
        self.counters.multicast += 1;
        self.transmit(Dest::Multicast(id), frame);
    }

    /// Takes receive completions in bursts until `budget` messages were taken (delivered or
    /// rejected alike) or none is waiting; reposts the slots; sends the HELLOs that are due.
    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        let mut taken = 0;
        let mut delivered = 0;
        while taken < budget {
            let want = (budget - taken).min(POLL_BURST);
            let got = self.nic.poll(&mut self.burst[..want]).min(want);
            for i in 0..got {
                let r = self.burst[i];
                let after = {
                    let VerbsFabric { nic, peers, spec, counters, stats, .. } = &mut *self;
                    match nic.received(r.slot, r.len) {
                        None => {
                            stats.rx_errors += 1; // the NIC named a slot it does not hold
                            After::Nothing
                        }
                        Some(bytes) => match wire::parse_received(bytes, spec.job, spec.mtu) {
                            Err(e) => {
                                stats.rejected[e.index()] += 1;
                                counters.refused += 1;
                                After::Nothing
                            }
                            Ok((h, body)) if h.kind == Kind::Data => {
                                match peers.on_data(h.member, h.incarnation, r.src_qp) {
                                    Err(e) => {
                                        stats.rejected[e.index()] += 1;
                                        counters.refused += u64::from(e != Reject::Own);
                                        After::Nothing
                                    }
                                    Ok(source) => {
                                        counters.received += 1;
                                        delivered += 1;
                                        rx(PeerId(h.member), body);
                                        match source {
                                            Source::Restarted { old } => After::Forget(old),
                                            Source::Known | Source::Unknown => After::Nothing,
                                        }
                                    }
                                }
                            }
                            Ok((h, body)) => match wire::Hello::decode(body) {
                                Ok(hello) => {
                                    After::Hello(h, hello, wire::known(body, spec.local.0), r.src_qp)
                                }
                                Err(e) => {
                                    stats.rejected[e.index()] += 1;
                                    counters.refused += 1;
                                    After::Nothing
                                }
                            },
                        },
                    }
                };
                self.nic.release(r.slot);
                match after {
                    After::Nothing => {}
                    After::Forget(old) => {
                        self.stats.peers_restarted += 1;
                        if let Some(ah) = old {
                            self.nic.destroy_ah(ah);
                        }
                    }
                    After::Hello(h, hello, knows_us, src_qp) => self.on_hello(h, hello, knows_us, src_qp),
                }
            }
            taken += got;
            if got < want {
                break;
            }
        }
        self.nic.repost();
        self.tick();
        delivered
    }

    fn flush(&mut self) {
        self.nic.repost();
        self.tick();
    }

    /// `overrun` adds the NIC's dry polls and its receive errors other than flushes (a message
    /// lost each); flushed receives held no message.
    fn ledger(&self) -> Ledger {
        self.ledger
    }

    fn counters(&self) -> FabricCounters {
        let n = self.nic.stats();
        FabricCounters { overrun: self.counters.overrun + n.recv.dry + n.rx_errors, ..self.counters }
    }
}

/// The incarnation of a fabric started now: wall-clock nanoseconds (larger after a restart,
/// unless the clock went back), never 0.
pub fn incarnation_now() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// The fabric of member `setup.node` of `setup.nodes` on the device, port and GID of the
/// `verbs` section (see [`VerbsOptions::new`]), started now ([`incarnation_now`]).
#[cfg(feature = "verbs")]
pub fn open(setup: &FabricSetup, section: &VerbsConfig) -> Result<VerbsFabric<qp::UdNic>, VerbsError> {
    let opts = VerbsOptions::new(setup, section)?;
    let nic = qp::UdNic::open(&opts)?;
    VerbsFabric::new(nic, FabricSpec::new(setup, section, incarnation_now()))
}

#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod tests;
