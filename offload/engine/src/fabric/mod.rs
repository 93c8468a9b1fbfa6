//! Fabrics: what moves the protocol's datagrams between engines (docs/design.md §4). Unreliable by
//! contract — a fabric may drop, and must never corrupt silently (the protocol's CRC and digest
//! catch the rest); the protocol core makes delivery reliable.
//!
//! A fabric is polled, never waited on: the engine's polling loop calls [`Fabric::poll`] with a
//! budget, next to its host rings. It sends what the engine hands it, one datagram
//! ([`Fabric::send`], [`Fabric::multicast`]) or a run of them at once ([`Fabric::send_batch`]:
//! every frame the engine queued in one pass, lent in place, so a fabric that can hands them to
//! its device in one call — `udp`'s `sendmmsg` and GSO). A datagram comes as [`Datagram`]
//! parts the fabric gathers into one (an iovec per part), so a sender never has to build a
//! contiguous frame first. Members are numbered `0..n` ([`PeerId`]) by whoever starts
//! the engines (`ringcast run`), and each fabric resolves that number to its own address (a
//! shared-memory ring, a UDP socket address).
//!
//! * [`shm`] — the polling-thread emulation NIC: a shared-memory multicast log per group, SPSC
//!   rings per directed pair; across processes on one machine.
//! * [`faulty`] — the `RINGCAST_FAULT_*` injector, one wrapper around whichever fabric runs
//!   (`udp` included), drawing from its own generator;
//! * [`udp`] — kernel UDP: IPv6 `ff15::` (or IPv4 `239/8`) multicast groups derived from the
//!   112-bit group id, unicast for repair and synchronization.
//! * [`dpdk`] — Ethernet frames through a DPDK port (`net_af_xdp`, `net_memif`, `net_mlx5`):
//!   multicast MACs derived from the group id, members by MAC (cargo feature `dpdk`, on by
//!   default; its framing and configuration parts build without it).
//! * [`verbs`] — one UD queue pair on an RDMA device (InfiniBand or RoCE, rdma-core): multicast
//!   groups joined through rdmacm, members found by HELLO discovery, `n` pre-posted receives
//!   (cargo feature `verbs`, on by default; its framing, discovery and bookkeeping build and are
//!   unit-tested without it, against a fake NIC; the device path runs where a device exists).
//!
//! # What a fabric is told
//!
//! A fabric is built from its own configuration section ([`crate::config::UdpConfig`],
//! [`crate::config::DpdkConfig`], [`crate::config::VerbsConfig`]; `shm` has none) and a
//! [`FabricSetup`]: the few facts about the job that are not any fabric's to decide — which job,
//! which member of how many, the datagram size — which the composition root derives from its
//! other sections ([`crate::config::Config::fabric_setup`]). No fabric sees the whole
//! configuration or reads the environment: what it depends on is in its constructor's
//! signature, and a test builds one without a `Config`.
//!
//! No fabric has `unsafe` code (the crate forbids it): the device code of [`dpdk`] and
//! [`verbs`] is in crates of their own, `ringcast-dpdk` and `ringcast-verbs` (`offload/dpdk`,
//! `offload/verbs`), safe wrappers over the `bindgen/` crates.
pub mod dpdk;
pub mod faulty;
pub mod shm;
pub mod udp;
pub mod verbs;

use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::ledger::Ledger;

/// What every fabric is told beyond its own section: the job and this engine's place in it.
/// Built by the composition root ([`crate::config::Config::fabric_setup`]) from the sections
/// that own these values (`topology`, `protocol`, `limits`, `runner`), so a fabric depends on
/// these few values and not on the whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricSetup {
    /// The job's name (`topology.job`): every engine of a job derives the same names from it —
    /// `shm` segment names, the `udp` port when none is set, the `verbs` job tag and discovery
    /// group, the `dpdk` EAL file prefix.
    pub job: String,
    /// This engine's member number (`topology.node`).
    pub node: PeerId,
    /// Members of the job (`topology.nodes`).
    pub nodes: u32,
    /// Largest datagram the protocol sends (`protocol.mtu`).
    pub mtu: usize,
    /// The most bytes one broadcast puts on the wire at once — a root multicasts its whole
    /// message in one go (`protocol.max_message_bytes`): what a receive queue must be able to
    /// hold while its engine is busy elsewhere.
    pub window: usize,
    /// Multicast groups joined at once: one per communicator (`limits.max_comms`).
    pub max_groups: usize,
    /// How much the engine reports on stderr (`runner.log_level`): a fabric with a chatty
    /// library underneath (DPDK's EAL) quiets it to match.
    pub log_level: u8,
}

/// Where a [`Datagram`] goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One member ([`Fabric::send`]).
    Peer(PeerId),
    /// Every member of a group but this one ([`Fabric::multicast`]).
    Group(GroupId),
}

/// Most parts one [`Datagram`] is gathered from: a header, a slice of the payload where it
/// lies, a trailer.
pub const MAX_PARTS: usize = 3;

/// One datagram to send, as up to [`MAX_PARTS`] byte slices the fabric gathers into one in
/// order (empty parts are skipped): the frame the engine sealed in its outbox today; a header,
/// a payload slice where the bytes already lie and a trailer once the data path writes
/// straight into the wire (no contiguous copy to build first).
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Destination.
    pub dest: Dest,
    /// The bytes, in order.
    pub parts: [&'a [u8]; MAX_PARTS],
}

impl<'a> Datagram<'a> {
    /// A datagram of one contiguous frame.
    pub fn whole(dest: Dest, frame: &'a [u8]) -> Self {
        Datagram { dest, parts: [frame, &[], &[]] }
    }

    /// Its length: the parts' sum.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Sends what `batch` yields through `f`'s [`Fabric::send`] and [`Fabric::multicast`], for a
/// fabric that cannot write a datagram's parts into the wire one after the other: a datagram of
/// several parts is gathered into `buf` first (it grows once, to the largest). Returns the
/// bytes so gathered: a copy the caller counts in its ledger.
pub fn send_gathered<F: Fabric + ?Sized>(
    f: &mut F,
    buf: &mut Vec<u8>,
    batch: &mut dyn Iterator<Item = Datagram<'_>>,
) -> u64 {
    let mut copied = 0;
    for d in batch {
        let frame = match d.parts {
            [whole, [], []] => whole,
            parts => {
                buf.clear();
                parts.iter().for_each(|p| buf.extend_from_slice(p));
                copied += buf.len() as u64;
                &buf[..]
            }
        };
        match d.dest {
            Dest::Peer(p) => f.send(p, frame),
            Dest::Group(g) => f.multicast(&g, frame),
        }
    }
    copied
}

/// Counters every fabric keeps (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricCounters {
    /// Datagrams handed to the fabric point-to-point / by multicast.
    pub sent: u64,
    /// See `sent`.
    pub multicast: u64,
    /// Datagrams delivered by `poll`.
    pub received: u64,
    /// Datagrams lost before this member read them (a multicast log overwritten under a slow
    /// reader, a full ring, a full socket buffer the kernel reported).
    pub overrun: u64,
    /// Datagrams refused: larger than the fabric's MTU, to an unknown member, or malformed in
    /// the fabric's own framing.
    pub refused: u64,
    /// Calls into the device that sent (a system call, a burst): with `sent + multicast`, how
    /// many datagrams one call carries. 0 where a fabric has no such call (`shm` writes its
    /// rings in place).
    pub tx_calls: u64,
    /// Calls into the device that received (as `tx_calls`).
    pub rx_calls: u64,
}

/// What a receiver did with a datagram [`Fabric::poll_keeping`] offered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Taken.
    Taken,
    /// Declined: the fabric keeps it where it lies, with what follows it, until resumed.
    Declined,
    /// Taken, and what it declined before may be taken now: the fabric resumes at once, before
    /// the next datagram (the one taken made a post, which a later datagram may rely on — a
    /// have-all from the ring must not overtake the fragments still in the log).
    Resume,
}

/// A datagram fabric.
pub trait Fabric {
    /// This member's number.
    fn local(&self) -> PeerId;
    /// Largest datagram this fabric carries.
    fn mtu(&self) -> usize;
    /// Starts receiving multicast group `group` (idempotent).
    fn join(&mut self, group: &GroupId) -> std::io::Result<()>;
    /// Stops receiving `group` and releases what joining it took (sockets, filter entries,
    /// mappings): a long-running engine creates and frees communicators — each with its own
    /// group — without end, so nothing may accumulate per group ever joined.
    fn leave(&mut self, group: &GroupId);
    /// Groups joined now (what the engine reports with `COMMS`, and tests check returns to
    /// its baseline after communicators are freed).
    fn groups(&self) -> usize;
    /// Sends `frame` to member `to` (unreliable; never blocks).
    fn send(&mut self, to: PeerId, frame: &[u8]);
    /// Sends `frame` to every member of `group`, this member excluded (unreliable; never
    /// blocks).
    fn multicast(&mut self, group: &GroupId, frame: &[u8]);
    /// Sends every datagram `batch` yields, in order (unreliable; never blocks): what the
    /// engine queued in one pass, lent in place. A fabric that can hands them to its device in
    /// as few calls as it can (`udp`: `sendmmsg`, GSO); the default sends them one by one,
    /// gathering a datagram of several parts into one buffer first. Takes every item: one not
    /// taken would stay in the engine's queue.
    fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
        send_gathered(self, &mut Vec::new(), batch);
    }

    /// Hands at most `budget` waiting datagrams to `rx(from, frame)`; returns how many.
    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize;
    /// [`Fabric::poll`] with back-pressure: `rx(from, frame, keepable)` answers what it did with
    /// the datagram ([`Take`]), and may decline one the fabric can keep where it lies
    /// (`keepable`): that datagram, and what came after it the same way, then stay there — a
    /// receive queue the receiver has not drained — until [`Fabric::resume`] or an answer
    /// [`Take::Resume`]; a lapping writer may still overwrite them (lost, counted, repaired as
    /// before). Returns the datagrams taken. `shm` keeps its multicast log's (the log is the
    /// receive queue); the default keeps nothing (`keepable` is false, and a declined datagram
    /// is gone, as on a NIC whose receive was not posted).
    fn poll_keeping(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take) -> usize {
        self.poll(budget, &mut |from, frame| {
            let _ = rx(from, frame, false);
        })
    }
    /// The receiver may take what it declined now ([`Fabric::poll_keeping`]): offer it again.
    fn resume(&mut self) {}
    /// Hands datagrams the fabric batched to the device now (a doorbell). A fabric that sends
    /// at once has nothing to do; the engine calls it at the end of every pass.
    fn flush(&mut self) {}
    /// Counters so far.
    fn counters(&self) -> FabricCounters;
    /// The fabric's own payload copies so far ([`Ledger`]: a datagram's bytes written into the
    /// wire on a send are [`Side::Send`](ringcast_proto::ledger::Side::Send), read out of it on
    /// a receive [`Side::Receive`](ringcast_proto::ledger::Side::Receive); whole datagrams,
    /// header and trailer included — the fabric does not parse them). Counted where the bytes
    /// move: `shm` at its ring slot and multicast log writes and its log reads (a ring datagram
    /// is handed over in its slot: no copy), `udp` at the kernel's copy in each system call,
    /// `dpdk` into the mbuf and `verbs` into the registered send slot (both hand a received
    /// datagram over where the device wrote it: no copy). Required, with no default:
    /// a wrapper that forgot to forward it would show no copy at all (as `Box<dyn Fabric>`
    /// did). A fabric that cannot write a datagram's parts into the wire one after the other
    /// gathers them first ([`send_gathered`]) and counts that copy too (`verbs`); the default
    /// [`Fabric::send_batch`]'s gather is not counted (only the fault injector takes it, which
    /// copies every datagram anyway, to corrupt it).
    fn ledger(&self) -> Ledger;
    /// The engine is about to sleep until this fabric has something for it: returns the value
    /// to sleep on with [`Fabric::bell`] (`ringcast_ring::doorbell`), after which the engine
    /// re-checks its inputs once more. `None`: this fabric cannot wake a sleeper (a NIC
    /// without an interrupt line here), and the engine naps for `idle_sleep_us` instead. (`udp`
    /// has one: a thread of its own watches the sockets while the engine sleeps.)
    fn arm(&self) -> Option<u32> {
        None
    }
    /// The word [`Fabric::arm`]'s value refers to.
    fn bell(&self) -> Option<&std::sync::atomic::AtomicU32> {
        None
    }
    /// Awake again: senders need not ring any more.
    fn disarm(&self) {}
    /// Waits, at most `limit`, until this fabric has something to receive, in the calling
    /// thread — no doorbell between the device and the engine. The engine waits so while every
    /// host it serves sleeps on an operation of its own with nothing unread (a broadcast in
    /// flight: the next work is a datagram, not a post), for whole milliseconds and only when
    /// no protocol timer is due sooner (`runner/engine_loop.rs`, `wait_on_fabric`). `None`: this fabric cannot (the engine parks on its
    /// doorbells); else whether something came. (`udp`: `epoll_wait` on its sockets.)
    fn wait(&self, limit: std::time::Duration) -> Option<bool> {
        let _ = limit;
        None
    }
}

/// A boxed fabric is a fabric: the runner picks one at run time and wraps whichever it is in
/// the one fault injector ([`faulty::wrap`]). Every method forwards, the provided ones too
/// (a default here would hide the fabric's own `flush` or doorbell).
impl<F: Fabric + ?Sized> Fabric for Box<F> {
    fn local(&self) -> PeerId {
        (**self).local()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn join(&mut self, group: &GroupId) -> std::io::Result<()> {
        (**self).join(group)
    }
    fn leave(&mut self, group: &GroupId) {
        (**self).leave(group)
    }
    fn groups(&self) -> usize {
        (**self).groups()
    }
    fn send(&mut self, to: PeerId, frame: &[u8]) {
        (**self).send(to, frame)
    }
    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        (**self).multicast(group, frame)
    }
    fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
        (**self).send_batch(batch)
    }
    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        (**self).poll(budget, rx)
    }
    fn poll_keeping(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take) -> usize {
        (**self).poll_keeping(budget, rx)
    }
    fn resume(&mut self) {
        (**self).resume()
    }
    fn flush(&mut self) {
        (**self).flush()
    }
    fn counters(&self) -> FabricCounters {
        (**self).counters()
    }
    fn ledger(&self) -> Ledger {
        (**self).ledger()
    }
    fn arm(&self) -> Option<u32> {
        (**self).arm()
    }
    fn bell(&self) -> Option<&std::sync::atomic::AtomicU32> {
        (**self).bell()
    }
    fn disarm(&self) {
        (**self).disarm()
    }
    fn wait(&self, limit: std::time::Duration) -> Option<bool> {
        (**self).wait(limit)
    }
}
