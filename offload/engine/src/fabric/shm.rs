//! The shared-memory emulation fabric (docs/design.md §4): the polling-thread emulation NIC, across
//! real processes on one machine, in safe code over `ringcast-ring`'s shared-memory types.
//!
//! * Multicast: one [`McastLog`] per group, named `ringcast-<job>-g<group id hex>`. A sender
//!   writes each datagram once; every member reads at its own cursor and loses (counts) what
//!   was overwritten before it got there, as a NIC without posted receives would. A datagram
//!   the engine declines ([`Fabric::poll_keeping`]: a fragment of a broadcast not posted there,
//!   no pre-posted slot free) is put back at the reader's cursor and the log is not read past
//!   it until [`Fabric::resume`] — back-pressure: the log is the group's receive queue.
//! * Point-to-point: one SPSC ring of [`FrameSlot`]s per directed pair, named
//!   `ringcast-<job>-<from>-<to>`. Each member creates its inbound rings when it is created;
//!   a sender opens the peer's ring on first send, and if it does not exist yet counts the
//!   datagram `refused` and drops it (the protocol repairs). A full ring drops (`overrun`).
//! * Order across the two, as a NIC's one receive queue keeps it: a datagram seen at a ring's
//!   head is delivered only after every multicast claimed in the logs when it was seen
//!   (`poll`); the protocol relies on a unicast not overtaking a multicast sent before it.
//! * Receive in place: a ring datagram is handed to the receiver where it lies in its slot
//!   (`ringcast_ring::take_frame`), and the slot is released when the handler returns — a
//!   NIC handing its firmware a descriptor of its receive buffer; the fabric copies nothing.
//!   While held back for the order above, it simply stays in its slot. A multicast log
//!   datagram is still copied out by its reader: a writer lapping the log may overwrite a
//!   slot while it is read, and only the copy can be checked for that (seqlock) before it is
//!   delivered — a torn read is never handed over.
//! * Who removes the names (docs/architecture.md, "Shared-memory segments: names and
//!   reclaim"): every process that maps a segment holds a shared `flock` on it
//!   ([`ShmSegment::unlink_if_unused`]). [`Drop`] unmaps, then removes every segment of the job
//!   that nobody maps any more — the last member out leaves nothing, also after a clean stop of
//!   a lone engine. A member that dies without dropping its fabric (SIGKILL, `abort`,
//!   `_exit`) has a [`Reaper`], started with the fabric: a process that outlives it and, once
//!   it is gone, removes the job's segments nobody maps any more — the last member to die
//!   leaves nothing, with no later start needed. [`reclaim_stale`] (run when a fabric is made,
//!   and by `ringcast run`) still removes
//!   what dead jobs left: segments of jobs named after a process (`run-<pid>`, `mpi-<pid>-…`,
//!   `calibrate-<pid>`) whose process is gone and that nobody maps, and temporaries whose
//!   creator is gone. [`cleanup`] unlinks every segment of a job unconditionally (launcher at
//!   the end of its job, tests).
//!
//! * Doorbells: a member that sleeps is rung at the first datagram an engine pass sends it (it
//!   starts on the pass's first fragment while the rest are written), and datagrams after that
//!   ring it once more, at [`Fabric::flush`] at the pass's end, if it sleeps again by then — not
//!   at each datagram: a member woken but not yet disarmed looks asleep, and rung per datagram a
//!   64 KiB broadcast to a sleeping daemon cost up to 16 futex wakes.
//!
//! Contract: a `ShmFabric` is one member's handle, used by one thread (`Send`, not shared).
//! Nothing another member writes into the segments can make it panic or read outside them:
//! ring frames are length-checked (the length read once, before the frame is lent), log
//! datagrams are seqlock-checked and length-checked, and sender ids are checked against the
//! member count. A log datagram torn by a lapping writer is never delivered; a ring frame is
//! stable while it is read, as long as its sender keeps the ring's SPSC discipline (it writes a
//! slot only once the reader released it) — a process that broke it would be one of the job's
//! own user's, with every right over this process's memory already (docs/protocol.md, the
//! `shm` threat model). Own multicasts are never delivered.
use super::{Datagram, Dest, Fabric, FabricCounters, FabricSetup, Take};
use ringcast_proto::comm::{GroupId, PeerId};
use ringcast_proto::ledger::{Ledger, Side};
use ringcast_ring::{
    frame_ring_consumer, frame_ring_producer, push_frame_parts, take_frame, BellBoard, Consumer, FrameSlot,
    McastLog, McastReader, Producer, Reaper, ShmSegment, WriteError, FRAME_PAYLOAD,
};
use std::io;
use std::sync::atomic::AtomicU32;

// The shm fabric's default datagram (`protocol.mtu` unset) is exactly what a ring slot carries.
static_assertions::const_assert_eq!(ringcast_proto::config::SHM_MTU as usize, FRAME_PAYLOAD);

/// Slots of each group's multicast log (the depth a reader may fall behind before it loses).
pub const LOG_SLOTS: u32 = 1024;
/// Slots of each point-to-point ring.
pub const RING_SLOTS: u32 = 1024;
/// Longest job name: keeps every segment name well under the segment-name limit.
pub const MAX_JOB_NAME: usize = 64;
/// Most members a job may have (bounds the rings a member creates: `members - 1`).
pub const MAX_MEMBERS: u32 = 4096;

/// Sizes of the shared structures (defaults: [`LOG_SLOTS`], [`RING_SLOTS`]); the first member
/// to create a log fixes that log's geometry for everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmGeometry {
    /// Slots per multicast log (power of two).
    pub log_slots: u32,
    /// Slots per point-to-point ring (power of two).
    pub ring_slots: u32,
}

impl Default for ShmGeometry {
    fn default() -> Self {
        ShmGeometry { log_slots: LOG_SLOTS, ring_slots: RING_SLOTS }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Checks a job name: 1..=[`MAX_JOB_NAME`] characters of `[A-Za-z0-9_-]`.
fn check_job(job: &str) -> io::Result<()> {
    let ok = !job.is_empty()
        && job.len() <= MAX_JOB_NAME
        && job.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("bad job name {job:?}")))
    }
}

/// Name of the multicast log of `group` in `job`.
pub fn log_name(job: &str, group: &GroupId) -> String {
    let hex: String = group.iter().map(|b| format!("{b:02x}")).collect();
    format!("ringcast-{job}-g{hex}")
}

/// Name of the bell board of `job` (one doorbell per member: see [`BellBoard`]).
pub fn bells_name(job: &str) -> String {
    format!("ringcast-{job}-bells")
}

/// Name of the ring from member `from` to member `to` in `job`.
pub fn ring_name(job: &str, from: PeerId, to: PeerId) -> String {
    format!("ringcast-{job}-{}-{}", from.0, to.0)
}

/// Whether `rest` (a segment name with `ringcast-<job>-` removed) is one of this job's own
/// names, possibly with the `.tmp.<pid>.<n>` suffix of an interrupted creation. Matching the
/// exact shapes keeps `cleanup("a")` away from job `a-b`'s segments.
fn is_job_segment(rest: &str) -> bool {
    let base = rest.split_once(".tmp.").map_or(rest, |(b, _)| b);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if base == "bells" {
        return true;
    }
    if let Some(hex) = base.strip_prefix('g') {
        return hex.len() == 28 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    matches!(base.split_once('-'), Some((a, b)) if digits(a) && digits(b))
}

/// The pid in `.tmp.<pid>.<n>`, the suffix of a segment being created (see
/// [`ShmSegment::create_or_open_named`]).
fn tmp_creator(name: &str) -> Option<i32> {
    name.split_once(".tmp.")?.1.split('.').next()?.parse().ok()
}

/// Prefixes of job names that name their job after a live process: `ringcast run`'s
/// `run-<launcher pid>` (also `ringcast bench` and `ringcast demo`), the MPI interposer's
/// `mpi-<pid of rank 0>-<n>`, `ringcast calibrate`'s `calibrate-<pid>` (and jobs derived from
/// these, e.g. `calibrate-<pid>-w`). While that process lives the job may be live; once it is
/// gone, the job is over.
const OWNED_JOBS: [&str; 3] = ["run-", "mpi-", "calibrate-"];

/// The pid a segment's job is named after (see [`OWNED_JOBS`]), if it is such a job's.
fn job_owner(name: &str) -> Option<i32> {
    let job = name.strip_prefix("ringcast-")?;
    let rest = OWNED_JOBS.iter().find_map(|p| job.strip_prefix(p))?;
    let digits = rest.split_once('-')?.0;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether process `pid` provably no longer exists in this pid namespace: no such process
/// (`ESRCH`), or a zombie (dead, waiting to be reaped). Anything else — alive, another user's
/// (`EPERM`), a pid reused by an unrelated process — counts as alive.
pub fn process_gone(pid: i32) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid) else { return false };
    match rustix::process::test_kill_process(p) {
        Err(rustix::io::Errno::SRCH) => true,
        Err(_) => false,
        Ok(()) => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()))
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

/// Removes what dead jobs left in `/dev/shm` (the rule of the module documentation): a
/// `ringcast-*` segment whose job is named after a process that is gone (see [`OWNED_JOBS`]),
/// or a temporary whose creator is gone, and that no process maps. Returns how many it
/// removed. Never touches a segment someone maps, nor one of a job whose naming process lives.
pub fn reclaim_stale() -> io::Result<usize> {
    let mut removed = 0;
    for name in ShmSegment::list_named("ringcast-")? {
        let dead = |pid: Option<i32>| pid.is_some_and(process_gone);
        if (dead(tmp_creator(&name)) || dead(job_owner(&name)))
            && ShmSegment::unlink_if_unused(&name).unwrap_or(false)
        {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The names of `job`'s segments in `/dev/shm` (logs, rings, bells, temporaries being created).
fn job_segments(job: &str) -> io::Result<Vec<String>> {
    check_job(job)?;
    let prefix = format!("ringcast-{job}-");
    let mut names = ShmSegment::list_named(&prefix)?;
    names.retain(|n| is_job_segment(&n[prefix.len()..]));
    Ok(names)
}

/// Unlinks every segment of `job` that no process maps any more (the last member out; see the
/// module documentation); a temporary only once its creator is gone. Returns how many.
pub fn release_unused(job: &str) -> io::Result<usize> {
    let mut removed = 0;
    for name in job_segments(job)? {
        if tmp_creator(&name).is_some_and(|pid| !process_gone(pid)) {
            continue; // being created right now
        }
        if ShmSegment::unlink_if_unused(&name).unwrap_or(false) {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Unlinks every shared-memory segment of `job` (logs, rings, leftover temporaries); returns
/// how many. Mappings that members still hold stay valid until they drop them.
pub fn cleanup(job: &str) -> io::Result<usize> {
    let mut removed = 0;
    for name in job_segments(job)? {
        match ShmSegment::unlink_named(&name) {
            Ok(()) => removed += 1,
            // Another cleaner got there first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// A joined group (or one only sent to, then `reader` is `None`).
struct Group {
    id: GroupId,
    log: McastLog,
    reader: Option<McastReader>,
    /// While a ring datagram is held ([`ShmFabric::held`]): the log's sequences claimed when it
    /// was taken, which are read before it is delivered.
    fence: u64,
    /// The receiver declined the datagram at this log's cursor ([`Fabric::poll_keeping`]): it
    /// and everything after it stay in the log, unread, until [`Fabric::resume`].
    declined: bool,
}

/// One member's endpoint of the shared-memory fabric (see the module documentation).
pub struct ShmFabric {
    job: String,
    me: PeerId,
    members: u32,
    mtu: usize,
    geometry: ShmGeometry,
    /// Inbound rings, one per other member (`from`, consumer); `None` once found corrupt.
    inbound: Vec<(PeerId, Option<Consumer<FrameSlot>>)>,
    /// Outbound rings by destination, opened on first send.
    outbound: Vec<Option<Producer<FrameSlot>>>,
    groups: Vec<Group>,
    /// The inbound ring the next `poll` takes from first.
    next_ring: usize,
    /// The group the next round over the logs starts with.
    next_group: usize,
    /// The inbound ring (index into `inbound`) whose head datagram is held: seen and fenced,
    /// still in its slot, delivered (in place) once every log is read up to its `fence`.
    held: Option<usize>,
    counters: FabricCounters,
    /// The copies into the rings and logs and out of the logs ([`Fabric::ledger`]; a ring
    /// datagram is read in its slot, no copy).
    ledger: Ledger,
    /// Log datagrams lost by readers of groups since left.
    left_lost: u64,
    /// Every member's doorbell, rung for a member that sleeps (see the module doc; `None` only
    /// while dropping).
    bells: Option<BellBoard>,
    /// Per member, since the last `flush`: 1 rung, 2 rung and sent more since (owed a ring at
    /// the flush); 0 neither. Sized at creation.
    rung: Vec<u8>,
    /// Whether any member is owed a ring at the next `flush`.
    owed: bool,
    /// This member's reaper: removes the job's unused segments if this process dies without
    /// dropping the fabric (`None` where it could not be started: see [`ShmFabric::new`]).
    reaper: Option<Reaper>,
}

impl Drop for ShmFabric {
    /// Unmaps everything, then removes the job's segments nobody maps any more: when the last
    /// member of a job goes — a clean stop, or any drop — nothing of it is left in `/dev/shm`.
    fn drop(&mut self) {
        // Doorbells still owed for the last datagrams.
        Fabric::flush(self);
        self.inbound.clear();
        self.outbound.clear();
        self.groups.clear();
        self.bells = None;
        let _ = release_unused(&self.job);
        // Done by hand: the reaper has nothing left to do.
        self.reaper = None;
    }
}

impl ShmFabric {
    /// The fabric of member `setup.node` of the job `setup` describes (the `shm` fabric has
    /// no section of its own: the job name, the members and the datagram size are all it
    /// needs), default geometry.
    pub fn open(setup: &FabricSetup) -> io::Result<ShmFabric> {
        Self::new(&setup.job, setup.node, setup.nodes, setup.mtu)
    }

    /// Member `me` of `members` in `job`, carrying datagrams of up to `mtu` bytes; creates
    /// this member's inbound rings (from every other member). Default geometry.
    pub fn new(job: &str, me: PeerId, members: u32, mtu: usize) -> io::Result<ShmFabric> {
        Self::with_geometry(job, me, members, mtu, ShmGeometry::default())
    }

    /// [`ShmFabric::new`] with explicit log and ring sizes.
    pub fn with_geometry(
        job: &str,
        me: PeerId,
        members: u32,
        mtu: usize,
        geometry: ShmGeometry,
    ) -> io::Result<ShmFabric> {
        check_job(job)?;
        if members == 0 || members > MAX_MEMBERS || me.0 >= members {
            return Err(invalid(format!("member {} of {members} (at most {MAX_MEMBERS})", me.0)));
        }
        if mtu == 0 || mtu > FRAME_PAYLOAD {
            return Err(invalid(format!("mtu {mtu} outside 1..={FRAME_PAYLOAD}")));
        }
        // What dead jobs left (their members are gone, nobody maps it): removed before this
        // job adds its own.
        let _ = reclaim_stale();
        // Before this member maps anything: if it dies without dropping the fabric, its reaper
        // removes what of the job nobody maps any more. Best effort (no pidfd before Linux
        // 5.3, no fork under some sandboxes): without one, a crash's leftovers wait for
        // `reclaim_stale`.
        let reaper = Reaper::spawn(&format!("ringcast-{job}-"), |rest| {
            std::str::from_utf8(rest).is_ok_and(is_job_segment)
        })
        .ok();
        let mut inbound = Vec::with_capacity(members as usize - 1);
        for from in (0..members).map(PeerId).filter(|&p| p != me) {
            let ring = frame_ring_consumer(&ring_name(job, from, me), geometry.ring_slots)?;
            inbound.push((from, Some(ring)));
        }
        Ok(ShmFabric {
            job: job.to_string(),
            me,
            members,
            mtu,
            geometry,
            inbound,
            outbound: (0..members).map(|_| None).collect(),
            groups: Vec::new(),
            next_ring: 0,
            next_group: 0,
            held: None,
            counters: FabricCounters::default(),
            ledger: Ledger::default(),
            left_lost: 0,
            bells: Some(BellBoard::create_or_open_named(&bells_name(job), members)?),
            rung: vec![0; members as usize],
            owed: false,
            reaper,
        })
    }

    /// The job this member belongs to.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Tries to open the ring to `to` now; whether it is open (i.e. `to` has been created).
    /// Lets a launcher or test wait until every peer exists before sending.
    pub fn connect(&mut self, to: PeerId) -> bool {
        self.producer(to).is_some()
    }

    fn producer(&mut self, to: PeerId) -> Option<&mut Producer<FrameSlot>> {
        if to == self.me {
            return None;
        }
        let slot = self.outbound.get_mut(to.0 as usize)?;
        if slot.is_none() {
            // Not there yet (NotFound) or unusable: stay closed and retry on a later send.
            *slot = frame_ring_producer(&ring_name(&self.job, self.me, to)).ok();
        }
        slot.as_mut()
    }

    /// The log of `group`, created or opened on first use.
    fn group(&mut self, id: &GroupId) -> io::Result<&mut Group> {
        let i = match self.groups.iter().position(|g| g.id == *id) {
            Some(i) => i,
            None => {
                let name = log_name(&self.job, id);
                let log = McastLog::create_or_open_named(&name, self.mtu, self.geometry.log_slots)?;
                if log.max_payload() < self.mtu {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("log {name} carries {} bytes, mtu is {}", log.max_payload(), self.mtu),
                    ));
                }
                self.groups.push(Group { id: *id, log, reader: None, fence: 0, declined: false });
                self.groups.len() - 1
            }
        };
        Ok(&mut self.groups[i])
    }

    /// Finds the next inbound ring, from `next_ring` on, with a datagram at its head — seen,
    /// not taken: it stays in its slot — and sets every log's fence to what was claimed in it
    /// by then: whatever was multicast before that datagram was pushed (its sender read or
    /// wrote it first) is below the fence. Returns the ring's index.
    fn hold_from_rings(&mut self) -> Option<usize> {
        let rings = self.inbound.len();
        for k in 0..rings {
            let r = (self.next_ring + k) % rings;
            let Some((_, Some(consumer))) = self.inbound.get_mut(r) else { continue };
            match consumer.is_empty() {
                Ok(true) => continue,
                Ok(false) => {
                    self.next_ring = r + 1;
                    for g in &mut self.groups {
                        g.fence = g.log.write_seq();
                    }
                    return Some(r);
                }
                Err(_) => {
                    // Impossible indices: the sender is broken; stop reading this ring.
                    self.counters.refused += 1;
                    self.inbound[r].1 = None;
                }
            }
        }
        None
    }

    /// Delivers the datagram held at the head of inbound ring `r` where it lies in its slot
    /// (`take_frame`: `rx` reads the slot, which is released when it returns — the datagram's
    /// bytes are not copied by the fabric); whether one was delivered. A slot whose sender or
    /// length is impossible is consumed and refused.
    fn deliver_held(&mut self, r: usize, rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take) -> bool {
        let mtu = self.mtu;
        let Some((from, Some(consumer))) = self.inbound.get_mut(r) else { return false };
        let from = *from;
        let (mut delivered, mut resume) = (false, false);
        let taken = take_frame(consumer, mtu, |sender, bytes| {
            if sender == from.0 {
                // Taken whatever the answer: a ring is one sender's, in order, and holding its
                // head would hold that sender's repairs and requests behind it.
                resume = rx(from, bytes, false) == Take::Resume;
                delivered = true;
            }
        });
        if resume {
            Fabric::resume(self);
        }
        match taken {
            Ok(Some(_)) if delivered => self.counters.received += 1,
            // Seen a moment ago; the only consumer is us, so it cannot have gone.
            Ok(None) => {}
            Ok(Some(_)) => self.counters.refused += 1,
            Err(_) => {
                self.counters.refused += 1;
                self.inbound[r].1 = None;
            }
        }
        delivered
    }

    /// Delivers one datagram of group `g`'s log (`below_fence`: only one claimed before the
    /// held ring datagram was taken); whether one was delivered.
    /// A datagram the receiver declines (`rx` answers false) is put back: it stays at the
    /// log's cursor, and the log is not read again until [`Fabric::resume`].
    fn take_from_log(
        &mut self,
        g: usize,
        below_fence: bool,
        rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take,
    ) -> bool {
        let (members, mtu) = (self.members, self.mtu);
        let Some(group) = self.groups.get_mut(g) else { return false };
        let fence = group.fence;
        let Some(reader) = group.reader.as_mut().filter(|_| !group.declined) else { return false };
        if below_fence && reader.cursor() >= fence {
            return false;
        }
        let Some(d) = reader.recv() else { return false };
        if d.from >= members || d.payload.len() > mtu {
            self.counters.refused += 1;
            return false;
        }
        // The reader copied it out of the log (a seqlock read checks a copy, not the slot).
        self.ledger.copied(Side::Receive, d.payload.len() as u64);
        let seq = d.seq;
        match rx(PeerId(d.from), d.payload, true) {
            Take::Declined => {
                reader.unread(seq);
                group.declined = true;
                return false;
            }
            Take::Resume => Fabric::resume(self),
            Take::Taken => {}
        }
        self.counters.received += 1;
        true
    }
}

impl ShmFabric {
    /// Sends the datagram made of `parts` to `to`, written into the ring slot in place.
    fn send_parts(&mut self, to: PeerId, parts: &[&[u8]]) {
        self.counters.sent += 1;
        let me = self.me.0;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.mtu.min(FRAME_PAYLOAD) {
            self.counters.refused += 1;
            return;
        }
        let Some(producer) = self.producer(to) else {
            self.counters.refused += 1;
            return;
        };
        // Written into the ring slot in place, part by part: the datagram's bytes once
        // (`push_frame_parts`).
        if push_frame_parts(producer, me, parts).is_err() {
            self.counters.overrun += 1;
            return;
        }
        self.ledger.copied(Side::Send, len as u64);
        self.ring(to.0);
    }

    /// After a datagram for `m` is published: rings `m` if it sleeps, unless it was rung this
    /// pass already — then it is owed one ring at the pass's end (`flush`).
    fn ring(&mut self, m: u32) {
        let Some(state) = self.rung.get_mut(m as usize) else { return };
        match *state {
            0 => {
                if self.bells.as_ref().is_some_and(|b| b.ring(m)) {
                    *state = 1;
                }
            }
            _ => {
                *state = 2;
                self.owed = true;
            }
        }
    }

    /// Multicasts the datagram made of `parts`, written into the group's log in place.
    fn multicast_parts(&mut self, group: &GroupId, parts: &[&[u8]]) {
        self.counters.multicast += 1;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.mtu {
            self.counters.refused += 1;
            return;
        }
        let me = self.me.0;
        let result = match self.group(group) {
            Ok(g) => g.log.write_parts(me, parts),
            Err(_) => {
                self.counters.refused += 1;
                return;
            }
        };
        match result {
            Ok(_) => {
                // Written once into the log, whatever the number of readers.
                self.ledger.copied(Side::Send, len as u64);
                for m in (0..self.members).filter(|&m| m != me) {
                    self.ring(m);
                }
            }
            Err(WriteError::Lost { .. }) => self.counters.overrun += 1,
            Err(WriteError::TooLarge) => self.counters.refused += 1,
        }
    }
}

impl Fabric for ShmFabric {
    fn local(&self) -> PeerId {
        self.me
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn join(&mut self, group: &GroupId) -> io::Result<()> {
        let me = self.me.0;
        let g = self.group(group)?;
        if g.reader.is_none() {
            g.reader = Some(g.log.reader(Some(me)));
        }
        Ok(())
    }

    /// Unmaps the group's log and unlinks its name. Every member leaves a communicator's group
    /// only once the protocol settled the communicator with its peers (or gave up on them), so
    /// nobody still reads it; a member that joins after the unlink (it created the communicator
    /// late and will free it at once) gets a fresh log of its own, which it unlinks in turn.
    /// Without this, each communicator ever created would keep a log of `log_slots` MTUs in
    /// `/dev/shm` until the job's [`cleanup`].
    fn leave(&mut self, group: &GroupId) {
        if let Some(i) = self.groups.iter().position(|g| g.id == *group) {
            let g = self.groups.swap_remove(i);
            if let Some(r) = g.reader {
                self.left_lost += r.lost();
            }
            // Unlinked while still mapped (so while this member's lock is held: a reclaimer
            // cannot have taken the name for abandoned and a new log be made under it in
            // between). Already gone when another member unlinked it first.
            let _ = ShmSegment::unlink_named(&log_name(&self.job, group));
            drop(g.log);
        }
    }

    fn groups(&self) -> usize {
        self.groups.iter().filter(|g| g.reader.is_some()).count()
    }

    fn send(&mut self, to: PeerId, frame: &[u8]) {
        self.send_parts(to, &[frame]);
    }

    fn multicast(&mut self, group: &GroupId, frame: &[u8]) {
        self.multicast_parts(group, &[frame]);
    }

    /// Each datagram gathered from its parts straight into the ring slot or the multicast
    /// log: a fragment's payload goes from the sender's channel into the wire in one copy.
    fn send_batch(&mut self, batch: &mut dyn Iterator<Item = Datagram<'_>>) {
        for d in batch {
            match d.dest {
                Dest::Peer(p) => self.send_parts(p, &d.parts),
                Dest::Group(g) => self.multicast_parts(&g, &d.parts),
            }
        }
    }

    /// The pass's end: rings each member owed a ring (sent datagrams after its ring this
    /// pass) if it sleeps now, and forgets who was rung.
    fn flush(&mut self) {
        let owed = std::mem::take(&mut self.owed);
        for (m, state) in self.rung.iter_mut().enumerate() {
            if std::mem::take(state) == 2 && owed {
                if let Some(b) = &self.bells {
                    b.ring(m as u32);
                }
            }
        }
    }

    fn arm(&self) -> Option<u32> {
        self.bells.as_ref()?.arm(self.me.0)
    }

    fn bell(&self) -> Option<&AtomicU32> {
        self.bells.as_ref()?.bell(self.me.0)
    }

    fn disarm(&self) {
        if let Some(b) = &self.bells {
            b.disarm(self.me.0);
        }
    }

    fn poll(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8])) -> usize {
        self.poll_keeping(budget, &mut |from, d, _| {
            rx(from, d);
            Take::Taken
        })
    }

    /// Back-pressure on the multicast logs: a log datagram the receiver declines (a fragment
    /// of a broadcast it has not posted, no pre-posted slot free) stays at that log's cursor
    /// with everything after it — the log is the group's receive queue, 1,024 datagrams deep
    /// — until [`Fabric::resume`], instead of being dropped and repaired point-to-point (8
    /// nodes, 1 MiB: receivers not yet posted when the root's 257 fragments came dropped all
    /// past their 64 slots). A declined log no longer holds back a ring datagram's delivery:
    /// what it holds is for a broadcast not posted here, which nothing on the rings needs
    /// first — until a datagram's handler posts it (`Take::Resume`): the logs are resumed at
    /// once, so the next ring datagram is fenced behind them again (a have-all that overtook
    /// the fragments still in the log drew 197 of them by repair). Ring datagrams are always
    /// taken.
    fn poll_keeping(&mut self, budget: usize, rx: &mut dyn FnMut(PeerId, &[u8], bool) -> Take) -> usize {
        // A multicast before a unicast sent after it, as a NIC's one receive queue delivers
        // them, and the protocol relies on that: a ring predecessor's have-all (unicast)
        // overtaking the multicast this member had not read yet made it ask for, and get, the
        // whole message again (8 nodes, 1 MiB: more fragments by repair than by multicast).
        // So a datagram seen at a ring's head is held until every log is read up to what had been
        // claimed in it by then (its fence). Only up to the fence, held across polls: logs that
        // keep filling cannot starve the rings. With no ring datagram, the logs take turns,
        // one datagram each per round. A held datagram stays in its ring slot (`held` names the
        // ring); it is handed to `rx` there, never copied.
        let groups = self.groups.len();
        let mut delivered = 0;
        while delivered < budget {
            if self.held.is_none() {
                self.held = self.hold_from_rings();
            }
            let Some(r) = self.held else {
                let mut any = false;
                for k in 0..groups {
                    if delivered < budget && self.take_from_log((self.next_group + k) % groups, false, rx) {
                        delivered += 1;
                        any = true;
                    }
                }
                self.next_group = (self.next_group + 1) % groups.max(1);
                if !any {
                    break;
                }
                continue;
            };
            for g in 0..groups {
                while delivered < budget && self.take_from_log(g, true, rx) {
                    delivered += 1;
                }
            }
            if delivered == budget {
                break; // the fences and the held datagram (in its slot) wait for the next poll
            }
            self.held = None;
            if self.deliver_held(r, rx) {
                delivered += 1;
            }
        }
        delivered
    }

    fn resume(&mut self) {
        for g in &mut self.groups {
            g.declined = false;
        }
    }

    fn ledger(&self) -> Ledger {
        self.ledger
    }

    fn counters(&self) -> FabricCounters {
        let log_lost: u64 = self.groups.iter().filter_map(|g| g.reader.as_ref()).map(|r| r.lost()).sum();
        FabricCounters { overrun: self.counters.overrun + self.left_lost + log_lost, ..self.counters }
    }
}

#[cfg(test)]
#[path = "shm_tests.rs"]
mod tests;
