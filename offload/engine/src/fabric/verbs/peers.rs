//! Member discovery and the address-handle table of the `verbs` fabric, in safe code with no
//! verbs in it: who each member is on the fabric (GID, LID, QP number, incarnation) and the
//! address handle that sends to it.
//!
//! # Why discovery
//!
//! A UD send names its destination by address handle (GID/LID) plus QP number and Q_Key. The
//! launcher numbers the members (`RINGCAST_NODE`), but a QP number exists only once the QP is
//! created, so it cannot be in the configuration. Every engine therefore announces itself:
//!
//! * A HELLO ([`super::wire::Hello`]: GID, LID, QP number, and a bitmap of the members its
//!   sender can send to; the header carries the member number and incarnation) is multicast on
//!   the job's discovery group ([`super::group::discovery_group`]) at start and then, while this
//!   member misses any other member, flagged [`HELLO_NEED`](super::wire::HELLO_NEED), at
//!   intervals growing from `verbs_hello_ms` by doubling up to
//!   [`HELLO_BACKOFF_CAP_NS`](super::HELLO_BACKOFF_CAP_NS) (1 s), back to `verbs_hello_ms`
//!   whenever a new member (or incarnation) appears. So a member missing for good costs each
//!   live member about one multicast a second, not one per `verbs_hello_ms`.
//! * A member that hears a NEED answers with a unicast HELLO
//!   ([`HELLO_REPLY`](super::wire::HELLO_REPLY)) only if the NEED's bitmap says its sender does
//!   not know it — at most once per half `verbs_hello_ms` per asker ([`Peers::reply_due`]) — or,
//!   when the bitmap does not reach its number, at most once per back-off cap per asker and
//!   incarnation. A NEED from a member that knows everyone who is up is answered by nobody. So
//!   a member that starts late learns the others from their answers, and everyone learns it
//!   from its own NEED; a lost HELLO is repeated at the next NEED of whoever still misses
//!   someone. Once every member is known, nothing more is sent.
//! * A HELLO installs or refreshes the member's entry, from which the fabric creates an address
//!   handle. A member counts as known ([`Peers::known`], [`Peers::complete`]) only once its
//!   entry has one: an entry whose handle could not be created is retried from the fabric's
//!   periodic tick ([`Peers::unrouted`]), and discovery goes on meanwhile. Sends to a member not
//!   known yet are dropped and counted: the fabric is unreliable by contract, and the
//!   protocol's repair retries.
//!
//! # Identity rules ([`Peers::on_hello`], [`Peers::on_data`])
//!
//! Every frame carries (member, incarnation); the completion gives the sending QP number.
//! * A member number outside `0..nodes`: [`Reject::Member`].
//! * This member's own number: its own frame looped back ([`Reject::Own`]) if incarnation and QP
//!   number are its own, else another process claims it ([`Reject::Impostor`]).
//! * A larger incarnation than the entry's: the member restarted; the old entry (and its
//!   address handle, handed back for destruction) is replaced by the HELLO, or dropped by a DATA
//!   frame (whose sender's address is not known yet: a HELLO will follow).
//! * A smaller incarnation: a frame of the member's earlier life still in flight
//!   ([`Reject::Stale`]).
//! * The same incarnation with another QP number, or a HELLO whose announced QP is not the one
//!   that sent it: [`Reject::Conflict`] (the first entry stays).
//! * DATA from a member not known yet is delivered (its header says who it is; the protocol's
//!   cookie and CRC guard the rest) — only replies to it wait for its HELLO.
//!
//! The table has one entry per member, fixed at start (`nodes`): nothing grows.
use super::nic::AhId;
use super::wire::{Hello, Reject};

/// One member's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The incarnation its HELLO carried.
    pub incarnation: u64,
    /// Its address.
    pub addr: Hello,
    /// The address handle sending to it, once created.
    pub ah: Option<AhId>,
    /// When this member last answered its HELLO (nanoseconds of the fabric's clock).
    last_reply: Option<u64>,
}

/// What a HELLO did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// A member not known before.
    New,
    /// A known member with a new incarnation (it restarted): the old address handle, if any,
    /// is to be destroyed.
    Restarted {
        /// The previous entry's address handle.
        old: Option<AhId>,
    },
    /// Nothing new.
    Same,
}

/// What a DATA frame's source is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A known member, as its entry says.
    Known,
    /// A member whose HELLO has not arrived.
    Unknown,
    /// A known member with a new incarnation: its entry was dropped (destroy `old`).
    Restarted {
        /// The dropped entry's address handle.
        old: Option<AhId>,
    },
}

/// The member table; see the module doc.
#[derive(Clone, Debug)]
pub struct Peers {
    local: u32,
    incarnation: u64,
    qpn: u32,
    entries: Vec<Option<Entry>>,
    /// Entries with an address handle.
    known: u32,
    /// Entries (with a handle or not).
    learned: u32,
}

impl Peers {
    /// Member `local` of `nodes`, with its own incarnation and QP number.
    pub fn new(local: u32, nodes: u32, incarnation: u64, qpn: u32) -> Result<Peers, String> {
        if local >= nodes {
            return Err(format!("member {local} of {nodes}"));
        }
        Ok(Peers { local, incarnation, qpn, entries: vec![None; nodes as usize], known: 0, learned: 0 })
    }

    /// Members, this one included.
    pub fn nodes(&self) -> u32 {
        self.entries.len() as u32
    }

    /// Other members known: their address is, and an address handle sends to them.
    pub fn known(&self) -> u32 {
        self.known
    }

    /// Other members whose address is known but whose address handle is not made yet.
    pub fn unrouted(&self) -> u32 {
        self.learned - self.known
    }

    /// Other members not known (no entry, or no address handle).
    pub fn missing(&self) -> u32 {
        self.nodes() - 1 - self.known
    }

    /// Every other member is known (has an address handle).
    pub fn complete(&self) -> bool {
        self.missing() == 0
    }

    /// The known-members bitmap of this member's HELLOs ([`super::wire::known`]): this member
    /// and every member with an address handle, as far as `bitmap` reaches (zeroed first).
    pub fn fill_known(&self, bitmap: &mut [u8]) {
        bitmap.fill(0);
        super::wire::set_known(bitmap, self.local);
        for (m, e) in self.entries.iter().enumerate() {
            if e.is_some_and(|e| e.ah.is_some()) {
                super::wire::set_known(bitmap, m as u32);
            }
        }
    }

    /// Member `m`'s entry.
    pub fn entry(&self, m: u32) -> Option<&Entry> {
        self.entries.get(m as usize)?.as_ref()
    }

    /// Where to send to member `m`: its address handle and QP number.
    pub fn route(&self, m: u32) -> Option<(AhId, u32)> {
        let e = self.entry(m)?;
        Some((e.ah?, e.addr.qpn))
    }

    /// Records the address handle created for member `m`'s current entry (which had none).
    pub fn set_ah(&mut self, m: u32, ah: AhId) {
        if let Some(Some(e)) = self.entries.get_mut(m as usize) {
            if e.ah.is_none() {
                self.known += 1;
            }
            e.ah = Some(ah);
        }
    }

    /// The checks every frame's source passes (member range, this member's own number).
    fn check(&self, member: u32, incarnation: u64, src_qp: u32) -> Result<(), Reject> {
        if member >= self.nodes() {
            return Err(Reject::Member);
        }
        if member == self.local {
            return Err(if incarnation == self.incarnation && src_qp == self.qpn {
                Reject::Own
            } else {
                Reject::Impostor
            });
        }
        Ok(())
    }

    /// A HELLO from `member` (`incarnation`, announcing `addr`) received from QP `src_qp`.
    pub fn on_hello(
        &mut self,
        member: u32,
        incarnation: u64,
        addr: Hello,
        src_qp: u32,
    ) -> Result<Learned, Reject> {
        self.check(member, incarnation, src_qp)?;
        if addr.qpn != src_qp {
            return Err(Reject::Conflict);
        }
        let fresh = Entry { incarnation, addr, ah: None, last_reply: None };
        let slot = &mut self.entries[member as usize];
        match slot {
            None => {
                *slot = Some(fresh);
                self.learned += 1;
                Ok(Learned::New)
            }
            Some(e) if incarnation > e.incarnation => {
                let old = e.ah;
                *e = fresh;
                self.known -= u32::from(old.is_some());
                Ok(Learned::Restarted { old })
            }
            Some(e) if incarnation < e.incarnation => Err(Reject::Stale),
            Some(e) if e.addr == addr => Ok(Learned::Same),
            Some(_) => Err(Reject::Conflict),
        }
    }

    /// A DATA frame from `member` (`incarnation`) received from QP `src_qp`.
    pub fn on_data(&mut self, member: u32, incarnation: u64, src_qp: u32) -> Result<Source, Reject> {
        self.check(member, incarnation, src_qp)?;
        let slot = &mut self.entries[member as usize];
        match slot {
            None => Ok(Source::Unknown),
            Some(e) if incarnation > e.incarnation => {
                let old = e.ah;
                *slot = None;
                self.learned -= 1;
                self.known -= u32::from(old.is_some());
                Ok(Source::Restarted { old })
            }
            Some(e) if incarnation < e.incarnation => Err(Reject::Stale),
            Some(e) if e.addr.qpn == src_qp => Ok(Source::Known),
            Some(_) => Err(Reject::Conflict),
        }
    }

    /// Whether to answer member `m`'s HELLO now (at `now`): not if it was answered less than
    /// `gap` ago. Marks it answered.
    pub fn reply_due(&mut self, m: u32, now: u64, gap: u64) -> bool {
        let Some(Some(e)) = self.entries.get_mut(m as usize) else { return false };
        if e.last_reply.is_some_and(|t| now.saturating_sub(t) < gap) {
            return false;
        }
        e.last_reply = Some(now);
        true
    }

    /// Every address handle in the table (for the owner to destroy at the end).
    pub fn ahs(&self) -> impl Iterator<Item = AhId> + '_ {
        self.entries.iter().flatten().filter_map(|e| e.ah)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u32 = 1;
    const MY_INC: u64 = 1000;
    const MY_QPN: u32 = 0x11;

    fn addr(qpn: u32) -> Hello {
        Hello { gid: [qpn as u8; 16], qpn, lid: qpn as u16 }
    }

    fn table() -> Peers {
        Peers::new(ME, 4, MY_INC, MY_QPN).expect("table")
    }

    #[test]
    fn hellos_fill_the_table_until_complete() {
        let mut p = table();
        assert_eq!((p.nodes(), p.known(), p.missing(), p.complete()), (4, 0, 3, false));
        for (m, qpn) in [(0, 0x20), (2, 0x22), (3, 0x23)] {
            assert_eq!(p.on_hello(m, 5, addr(qpn), qpn), Ok(Learned::New));
            assert_eq!(p.route(m), None, "no address handle yet");
            assert_eq!(p.unrouted(), 1);
            assert!(!p.complete(), "an entry without a handle is no route");
            p.set_ah(m, AhId(m));
            assert_eq!(p.route(m), Some((AhId(m), qpn)));
            assert_eq!(p.unrouted(), 0);
        }
        assert!(p.complete());
        assert_eq!(p.ahs().collect::<Vec<_>>(), [AhId(0), AhId(2), AhId(3)]);
        assert_eq!(p.route(ME), None);
        assert_eq!(p.route(9), None);
        p.set_ah(9, AhId(9)); // out of range: ignored
    }

    #[test]
    fn duplicate_hellos_change_nothing() {
        let mut p = table();
        assert_eq!(p.on_hello(0, 5, addr(0x20), 0x20), Ok(Learned::New));
        p.set_ah(0, AhId(7));
        assert_eq!(p.on_hello(0, 5, addr(0x20), 0x20), Ok(Learned::Same));
        assert_eq!(p.route(0), Some((AhId(7), 0x20)), "the handle stays");
        assert_eq!(p.known(), 1);
    }

    #[test]
    fn own_frames_and_impostors() {
        let mut p = table();
        assert_eq!(p.on_hello(ME, MY_INC, addr(MY_QPN), MY_QPN), Err(Reject::Own));
        assert_eq!(p.on_data(ME, MY_INC, MY_QPN), Err(Reject::Own));
        assert_eq!(p.on_hello(ME, MY_INC + 1, addr(0x99), 0x99), Err(Reject::Impostor));
        assert_eq!(p.on_data(ME, MY_INC, 0x99), Err(Reject::Impostor));
        assert_eq!(p.known(), 0);
    }

    #[test]
    fn foreign_members_are_out_of_bounds() {
        let mut p = table();
        assert_eq!(p.on_hello(4, 1, addr(0x30), 0x30), Err(Reject::Member));
        assert_eq!(p.on_data(u32::MAX, 1, 0x30), Err(Reject::Member));
        assert!(Peers::new(4, 4, 0, 0).is_err());
        assert!(Peers::new(0, 0, 0, 0).is_err());
        let single = Peers::new(0, 1, 0, 0).expect("one member");
        assert!(single.complete(), "alone: nobody to discover");
    }

    #[test]
    fn conflicting_hellos_keep_the_first() {
        let mut p = table();
        assert_eq!(p.on_hello(2, 5, addr(0x22), 0x22), Ok(Learned::New));
        // Same incarnation, another QP: two processes claim member 2.
        assert_eq!(p.on_hello(2, 5, addr(0x44), 0x44), Err(Reject::Conflict));
        // A HELLO naming a QP other than its sender's.
        assert_eq!(p.on_hello(3, 5, addr(0x23), 0x24), Err(Reject::Conflict));
        assert_eq!(p.entry(2).map(|e| e.addr.qpn), Some(0x22));
        assert_eq!(p.entry(3), None);
        // DATA from the conflicting QP.
        assert_eq!(p.on_data(2, 5, 0x44), Err(Reject::Conflict));
        assert_eq!(p.on_data(2, 5, 0x22), Ok(Source::Known));
    }

    #[test]
    fn a_restarted_member_replaces_its_entry() {
        let mut p = table();
        assert_eq!(p.on_hello(2, 5, addr(0x22), 0x22), Ok(Learned::New));
        p.set_ah(2, AhId(3));
        // Restart announced by HELLO: new QP, old handle handed back.
        assert_eq!(p.on_hello(2, 6, addr(0x52), 0x52), Ok(Learned::Restarted { old: Some(AhId(3)) }));
        assert_eq!(p.route(2), None);
        assert_eq!((p.known(), p.unrouted()), (0, 1), "known again once it has a handle");
        p.set_ah(2, AhId(4));
        assert_eq!(p.known(), 1);
        // Frames of the earlier life still in flight.
        assert_eq!(p.on_hello(2, 5, addr(0x22), 0x22), Err(Reject::Stale));
        assert_eq!(p.on_data(2, 5, 0x22), Err(Reject::Stale));
        // Restart noticed by DATA first: the entry goes, its HELLO will follow.
        assert_eq!(p.on_data(2, 7, 0x62), Ok(Source::Restarted { old: Some(AhId(4)) }));
        assert_eq!((p.entry(2), p.known(), p.unrouted()), (None, 0, 0));
        assert_eq!(p.on_data(2, 7, 0x62), Ok(Source::Unknown));
        assert_eq!(p.on_hello(2, 7, addr(0x62), 0x62), Ok(Learned::New));
        assert_eq!((p.known(), p.unrouted()), (0, 1));
        p.set_ah(2, AhId(5));
        p.set_ah(2, AhId(6)); // a second handle for the same entry: counted once
        assert_eq!((p.known(), p.unrouted()), (1, 0));
    }

    #[test]
    fn the_known_bitmap_names_this_member_and_the_routable_ones() {
        let mut p = table();
        assert_eq!(p.on_hello(0, 5, addr(0x20), 0x20), Ok(Learned::New));
        assert_eq!(p.on_hello(3, 5, addr(0x23), 0x23), Ok(Learned::New));
        p.set_ah(3, AhId(1));
        let mut bitmap = [0xffu8; 1];
        p.fill_known(&mut bitmap);
        assert_eq!(bitmap, [0b1010], "itself (1) and 3; 0 has no handle yet");
        p.fill_known(&mut []); // nothing to fill
    }

    #[test]
    fn replies_are_rate_limited_per_member() {
        let mut p = table();
        assert!(!p.reply_due(0, 0, 10), "unknown member: nowhere to reply");
        assert_eq!(p.on_hello(0, 5, addr(0x20), 0x20), Ok(Learned::New));
        assert_eq!(p.on_hello(2, 5, addr(0x22), 0x22), Ok(Learned::New));
        assert!(p.reply_due(0, 100, 10));
        assert!(!p.reply_due(0, 105, 10));
        assert!(p.reply_due(2, 105, 10), "per member");
        assert!(p.reply_due(0, 110, 10));
        // A restart resets it.
        assert_eq!(p.on_hello(0, 6, addr(0x30), 0x30), Ok(Learned::Restarted { old: None }));
        assert!(p.reply_due(0, 111, 10));
    }
}
