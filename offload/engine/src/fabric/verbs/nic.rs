//! The boundary between the `verbs` fabric's logic ([`super::VerbsFabric`]) and the device: the
//! [`Nic`] trait, safe, small, and implemented twice — by the real UD queue pair
//! ([`super::qp::UdNic`], feature `verbs`, the only code behind it that is `unsafe`) and, in unit
//! tests, by an in-memory fake (`fake.rs`) that moves frames between several fabrics of one
//! test. Everything above this trait — framing, discovery, the member table, reject counters,
//! hello timing, group bookkeeping — is therefore tested without a device; what is below it on
//! the real path runs only where `ibv_get_device_list` finds a device.
//!
//! Contract of an implementation:
//! * [`Nic::send`] copies `header` and `body` into a send buffer of its own before it returns
//!   (the caller's slices need not outlive the call) or refuses the send; it never blocks.
//! * [`Nic::poll`] returns receive completions only (it handles send completions itself), each
//!   naming a slot whose bytes stay readable through [`Nic::received`] — and unchanged — until
//!   the caller hands the slot back with [`Nic::release`]. Released slots are posted again by
//!   [`Nic::repost`] (batched), or at the latest by the next [`Nic::poll`].
//! * Handles ([`AhId`], [`McastId`]) are indices into the implementation's own tables: a stale
//!   or made-up handle makes a send fail ([`SendError::Invalid`]), never touch freed memory.
//! * [`Nic::now`] is the fabric's clock (monotonic nanoseconds; settable in the fake).
//! * Nothing panics.
use super::group::JoinSpec;
use super::slots::{RecvStats, SendStats};
use super::wire::Hello;
use super::VerbsError;
use crate::proto::comm::GroupId;

/// An address handle of the NIC (unicast to one member).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AhId(pub u32);

/// A multicast group the NIC joined (its QP attached, a multicast address handle made).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct McastId(pub u32);

/// Where a send goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One member's QP through an address handle.
    Unicast {
        /// The handle.
        ah: AhId,
        /// The member's QP number.
        qpn: u32,
    },
    /// Every QP attached to a joined group.
    Multicast(McastId),
}

/// A receive completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// The slot holding the message (GRH area first).
    pub slot: u32,
    /// Bytes in the slot, GRH area included (the completion's `byte_len`).
    pub len: u32,
    /// The sending QP's number.
    pub src_qp: u32,
}

/// Why a send did not go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Every send buffer is in flight (the send queue is full).
    Full,
    /// Unknown handle, or a frame larger than a send buffer.
    Invalid,
    /// The device refused the post (errno).
    Post(i32),
}

/// A joined group as the NIC sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Joined {
    /// Handle for sends and [`Nic::leave`].
    pub id: McastId,
    /// The MGID the QP is attached to.
    pub mgid: [u8; 16],
    /// The group's multicast LID (InfiniBand; 0 on RoCE).
    pub mlid: u16,
}

/// The port and QP as the fabric needs to know them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// This QP's unicast address, as HELLOs announce it.
    pub address: Hello,
    /// Largest UD message (the port's active MTU in bytes).
    pub max_message: usize,
    /// Link layer, address family, RoCE version, partition: for the group mappings.
    pub spec: JoinSpec,
    /// How groups are joined.
    pub mode: super::group::JoinMode,
}

/// What the NIC counted (monotonic, except the `*_now` fields inside).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Receive slots.
    pub recv: RecvStats,
    /// Send ring.
    pub send: SendStats,
    /// Receive completions with an error status (flushes included).
    pub rx_errors: u64,
    /// Send completions with an error status.
    pub tx_errors: u64,
    /// Sends the device refused at post time.
    pub post_errors: u64,
    /// `ibv_poll_cq` failures.
    pub cq_errors: u64,
}

/// The device below the fabric; see the module doc.
pub trait Nic {
    /// The port and QP.
    fn port(&self) -> PortInfo;
    /// Monotonic nanoseconds.
    fn now(&self) -> u64;
    /// Joins `group` (see [`super::group`] for the address it is joined under).
    fn join(&mut self, group: &GroupId) -> Result<Joined, VerbsError>;
    /// Leaves a joined group (detach, leave, destroy its address handle); unknown ids are
    /// ignored.
    fn leave(&mut self, id: McastId);
    /// An address handle to `peer`.
    fn create_ah(&mut self, peer: &Hello) -> Result<AhId, VerbsError>;
    /// Destroys an address handle (unknown ids are ignored).
    fn destroy_ah(&mut self, ah: AhId);
    /// Sends `header` then `body` as one message to `dest`.
    fn send(&mut self, dest: Dest, header: &[u8], body: &[u8]) -> Result<(), SendError>;
    /// Up to `out.len()` receive completions; returns how many.
    fn poll(&mut self, out: &mut [Received]) -> usize;
    /// The first `len` bytes of held slot `slot` (`None` if it is not held or `len` exceeds it).
    fn received(&self, slot: u32, len: u32) -> Option<&[u8]>;
    /// Hands a slot back for reposting.
    fn release(&mut self, slot: u32);
    /// Posts released slots again.
    fn repost(&mut self);
    /// Counters.
    fn stats(&self) -> NicStats;
}
