//! The boundary between the `verbs` fabric's logic ([`super::VerbsFabric`]) and the device: the
//! [`Nic`] trait, safe, small, and implemented twice — by the real UD queue pair
//! ([`super::qp::UdNic`], feature `verbs`, over the `ringcast-verbs` crate, where the `unsafe`
//! code is) and, in unit
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
//! * An error completion of a work request the NIC holds (any status: a flush too, which the
//!   device produces only in the error state) marks the queue pair failed ([`Nic::failed`],
//!   counted once per failure in [`NicStats::qp_failures`]): from then on nothing is posted —
//!   sends are refused with [`SendError::Down`], released receive slots wait — until
//!   [`Nic::recover`] resets the queue pair, posts every receive again and re-attaches every
//!   group. Flushes of work requests from before a reset match nothing and are only counted.
//! * Multicast attachments are counted by (MGID, MLID) ([`Attachments`]): the kernel keeps one
//!   attachment per (QP, MGID, MLID), so two groups mapping to one MGID share it.
//! * Nothing panics.
use super::group::JoinSpec;
use super::slots::{RecvStats, SendStats};
use super::wire::Hello;
use super::VerbsError;
use ringcast_proto::comm::GroupId;

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
    /// The queue pair is in the error state (see [`Nic::failed`]).
    Down,
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
    /// The source GID index the join's address attributes carry (rdmacm: the kernel's choice
    /// for the bind address); `None` when the NIC made them itself (attach mode).
    pub sgid_index: Option<u8>,
}

/// The port and QP as the fabric needs to know them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// This QP's unicast address, as HELLOs announce it.
    pub address: Hello,
    /// The GID table index of that address (`verbs_gid_index`): unicast address handles use it.
    pub gid_index: u8,
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
    /// Receive completions with an error status other than a flush (each a message lost).
    pub rx_errors: u64,
    /// Receives flushed (the queue pair was in the error state, or was reset).
    pub rx_flushed: u64,
    /// Send completions with an error status other than a flush.
    pub tx_errors: u64,
    /// Sends flushed.
    pub tx_flushed: u64,
    /// Sends the device refused at post time.
    pub post_errors: u64,
    /// `ibv_poll_cq` failures.
    pub cq_errors: u64,
    /// Times the queue pair was found in the error state.
    pub qp_failures: u64,
    /// Address handles kept for sends that may still name them.
    pub retired_now: u32,
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
    /// Whether the queue pair is in the error state (an error completion came back) and was not
    /// recovered since.
    fn failed(&self) -> bool;
    /// Brings a failed queue pair back: RESET → INIT → RTR → RTS, every receive slot posted
    /// again, every multicast attachment made again. Nothing happens if it has not failed. On
    /// an error it stays failed.
    fn recover(&mut self) -> Result<(), VerbsError>;
}

/// What identifies a multicast attachment: the MGID and the multicast LID.
pub type AttachKey = ([u8; 16], u16);

/// The multicast attachments of one queue pair, counted by [`AttachKey`]: attaching a QP to a
/// group it is attached to already adds nothing in the kernel, and one detach removes the
/// attachment, so groups that map to one MGID (IPv4 groups are a 24-bit hash into 239/8)
/// share one attachment, made by the first join and undone by the last leave. `T` is what
/// detaches on drop (the device's attachment; nothing in the fake).
#[derive(Debug)]
pub struct Attachments<T> {
    entries: Vec<(AttachKey, u32, T)>,
}

impl<T> Default for Attachments<T> {
    fn default() -> Attachments<T> {
        Attachments { entries: Vec::new() }
    }
}

impl<T> Attachments<T> {
    /// None.
    pub fn new() -> Attachments<T> {
        Attachments::default()
    }

    /// One more group on `key`: attaches with `attach` if it is the first (an error leaves
    /// nothing counted).
    pub fn acquire<E>(&mut self, key: AttachKey, attach: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
        if let Some(e) = self.entries.iter_mut().find(|e| e.0 == key) {
            e.1 += 1;
            return Ok(());
        }
        let t = attach()?;
        self.entries.push((key, 1, t));
        Ok(())
    }

    /// One group fewer on `key`: the attachment, to detach, when it was the last; `None` while
    /// other groups still use it (or for a key not held).
    pub fn release(&mut self, key: AttachKey) -> Option<T> {
        let i = self.entries.iter().position(|e| e.0 == key)?;
        self.entries[i].1 -= 1;
        if self.entries[i].1 > 0 {
            return None;
        }
        Some(self.entries.swap_remove(i).2)
    }

    /// Groups using `key`.
    pub fn refs(&self, key: AttachKey) -> u32 {
        self.entries.iter().find(|e| e.0 == key).map_or(0, |e| e.1)
    }

    /// Distinct attachments.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No attachment.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every attachment (to make them again after a reset).
    pub fn iter(&self) -> impl Iterator<Item = (AttachKey, &T)> + '_ {
        self.entries.iter().map(|e| (e.0, &e.2))
    }

    /// Drops every attachment (detaching them), in the order they were made.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_groups_share_one_attachment_until_the_last_leaves() {
        let mut a: Attachments<&str> = Attachments::new();
        let m = ([0xff; 16], 0xc001);
        let mut made = 0;
        let mut attach = |name| {
            made += 1;
            Ok::<_, ()>(name)
        };
        // Two groups whose IP addresses map to one MGID, and one other.
        assert_eq!(a.acquire(m, || attach("m")), Ok(()));
        assert_eq!(a.acquire(m, || attach("m again")), Ok(()));
        assert_eq!(a.acquire(([1; 16], 0), || attach("other")), Ok(()));
        assert_eq!((made, a.len(), a.refs(m)), (2, 2, 2), "attached once");
        // The first leave keeps the attachment: the other group still hears its multicast.
        assert_eq!(a.release(m), None);
        assert_eq!(a.refs(m), 1);
        assert_eq!(a.release(m), Some("m"), "the last leave detaches");
        assert_eq!((a.release(m), a.refs(m)), (None, 0), "not held any more");
        // Another MLID is another attachment (InfiniBand).
        assert_eq!(a.acquire(([1; 16], 7), || Err("refused")), Err("refused"));
        assert_eq!(a.refs(([1; 16], 7)), 0, "a failed attach counts nothing");
        assert_eq!(a.iter().map(|(k, t)| (k, *t)).collect::<Vec<_>>(), [(([1; 16], 0), "other")]);
        a.clear();
        assert!(a.is_empty());
    }
}
