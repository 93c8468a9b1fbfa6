//! The multicast log of the `shm` fabric (docs/design.md §4): one shared-memory segment per group,
//! written by any number of writers, each datagram written once and read by every member at
//! its own cursor. A reader that falls behind by more than the log's length loses datagrams —
//! counted, never delivered torn — as on a real NIC without posted receives.
//!
//! Layout: an array of 8-byte words, every one of them accessed only as an `AtomicU64`.
//!
//! | words          | content                                                             |
//! |----------------|---------------------------------------------------------------------|
//! | 0              | magic [`LOG_MAGIC`]                                                  |
//! | 1              | version [`LOG_VERSION`]                                              |
//! | 2              | `slot_words`: words per slot (`3 + payload_capacity / 8`)            |
//! | 3              | `slots`: slot count, a power of two in `2..=`[`MAX_LOG_SLOTS`]       |
//! | 4..16          | reserved, zero                                                       |
//! | 16 (byte 128)  | `write_seq`: free-running count of claimed sequences (own line)      |
//! | 17..32         | reserved, zero                                                       |
//! | 32 + k·slot_words | slot `k`: `seq` word, `meta` word (`len` low 32 bits, sender id high 32 bits), `check` word, then the payload, byte `i` in byte `i % 8` of word `i / 8` (little-endian) |
//!
//! Concurrency contract (a seqlock per slot, Boehm's formulation, with multiple writers):
//! * the slot word of sequence `s` is `2s + 1` while being written ("busy") and `2s + 2` once
//!   published; `0` means never written. A slot word only ever grows;
//! * a writer claims `s = write_seq.fetch_add(1)`, then slot `s % slots` by a CAS of its word
//!   from an older value to `busy(s)` — it gives up (the datagram is lost, and says so) if the
//!   slot already holds a newer sequence, or is busy with a writer less than [`TAKEOVER_LAPS`]
//!   laps older (a writer that died while busy is taken over after that); then a `Release`
//!   fence, the meta and payload words (`Relaxed`), and a CAS `busy(s) → published(s)`
//!   (`Release`) which fails if it was taken over meanwhile;
//! * a reader at cursor `c` loads the slot word (`Acquire`); if it is `published(c)` it copies
//!   meta and payload (`Relaxed`), issues an `Acquire` fence and re-loads the word: unchanged
//!   means no writer touched the slot during the copy (a writer's busy mark precedes its
//!   release fence, which synchronises with our acquire fence if we saw any of its words);
//!   changed means torn — counted lost. A newer sequence in the slot means the reader was
//!   lapped: it counts the lost datagrams and jumps to `write_seq - slots`, the oldest
//!   possibly still valid. An older one means "not yet published": if nobody claimed `c` the
//!   log is empty; otherwise it is skipped as lost once `write_seq` is more than `slots` past
//!   it or after a bounded number of polls (a writer that died after claiming `c` must not
//!   stop readers forever);
//! * takeover has one hole the seqlock cannot close: the presumed-dead writer may wake up and
//!   store stale words into a slot its successor has since published, without touching the slot
//!   word. So every slot also carries a `check` word — a hash of its sequence, meta and payload
//!   words, stored by the writer before it publishes — and a reader delivers only content whose
//!   hash matches the sequence it expects; anything else is counted lost (a stale writer hashes
//!   its own, older sequence, so its words can never pass for the successor's);
//! * nothing a writer leaves in the segment can make a reader panic, index outside the
//!   segment or loop without bound: the geometry is validated once at attach and kept
//!   privately (never re-read), lengths are checked against it, sequence arithmetic wraps, and
//!   one [`McastReader::recv`] call examines a bounded number of positions.
//!
//! Because every access is atomic there is no data race even with a hostile writer in the same
//! process; the cost is a copy word by word (whole words, hashed in four chains at once)
//! instead of `memcpy`.
//! Under `cfg(loom)` the words are loom atomics on the heap ([`McastLog::new_heap`]) and the
//! same algorithm code runs.
use crate::primitive::{AtomicU64, Ordering};
use crate::slot_check::{copy_out, Check, LANES};
use core::ptr::NonNull;
#[cfg(not(loom))]
use core::sync::atomic::fence;
#[cfg(loom)]
use loom::sync::atomic::fence;
use std::sync::Arc;

/// Magic of a multicast log ("RCMCLOG1" little-endian).
pub const LOG_MAGIC: u64 = u64::from_le_bytes(*b"RCMCLOG1");
/// Layout version of this module.
pub const LOG_VERSION: u64 = 3;
/// Most slots a log may have (bounds the memory an attacker-chosen header makes us accept).
pub const MAX_LOG_SLOTS: u32 = 1 << 20;
/// Largest payload a slot may hold.
pub const MAX_LOG_PAYLOAD: usize = 64 * 1024;
/// A writer busy on a slot is taken over by a writer this many laps (× `slots` sequences)
/// younger: it is presumed dead. A writer that stalls that long and then resumes copying
/// could tear the taker's datagram undetectably — the residual risk, left to the protocol's
/// CRC — whereas never taking over would lose every `slots`-th datagram forever after a crash.
pub const TAKEOVER_LAPS: u64 = 2;
/// Default number of [`McastReader::recv`] calls a reader waits on a claimed but unpublished
/// sequence before it skips it as lost (see [`McastReader::set_stall_limit`]).
pub const DEFAULT_STALL_POLLS: u32 = 1 << 12;
/// How many times a writer retries its claim CAS against concurrent writers before giving up.
const CLAIM_ATTEMPTS: u32 = 8;

const HEADER_WORDS: usize = 32;
const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_SLOT_WORDS: usize = 2;
const W_SLOTS: usize = 3;
const W_WRITE_SEQ: usize = 16;
/// Slot header: the seq word, the meta word and the check word.
const SLOT_HEADER_WORDS: usize = 3;
/// Index of the check word in a slot.
const CHECK_WORD: usize = 2;

static_assertions::const_assert_eq!(W_WRITE_SEQ * 8, 128);
static_assertions::const_assert_eq!(HEADER_WORDS * 8, 256);
static_assertions::const_assert!(MAX_LOG_PAYLOAD & 7 == 0);

/// Slot word of sequence `s` while its writer is copying.
fn busy(s: u64) -> u64 {
    s.wrapping_mul(2).wrapping_add(1)
}

/// Slot word of sequence `s` once published.
fn published(s: u64) -> u64 {
    s.wrapping_mul(2).wrapping_add(2)
}

/// Why a log could not be created or attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogError {
    /// The magic word is not [`LOG_MAGIC`].
    BadMagic,
    /// Another layout version.
    Version(u64),
    /// Slot count not a power of two in `2..=MAX_LOG_SLOTS`.
    BadSlots(u64),
    /// Payload capacity not in `1..=MAX_LOG_PAYLOAD` (the header's `slot_words` as read).
    BadSlotSize(u64),
    /// The memory is shorter than the geometry needs.
    TooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The memory is not 8-byte aligned.
    Misaligned,
}

impl core::fmt::Display for LogError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            LogError::BadMagic => write!(f, "multicast log has a bad magic"),
            LogError::Version(v) => write!(f, "multicast log version {v}, expected {LOG_VERSION}"),
            LogError::BadSlots(n) => {
                write!(f, "multicast log slot count {n} is not a power of two in 2..={MAX_LOG_SLOTS}")
            }
            LogError::BadSlotSize(w) => {
                write!(f, "multicast log slot of {w} words has no valid payload size")
            }
            LogError::TooSmall { need, have } => {
                write!(f, "multicast log needs {need} bytes, memory has {have}")
            }
            LogError::Misaligned => write!(f, "multicast log memory is not 8-byte aligned"),
        }
    }
}

impl std::error::Error for LogError {}

/// Why [`McastLog::write`] did not publish a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// Larger than the log's payload capacity (nothing was claimed).
    TooLarge,
    /// Sequence `seq` was claimed but its slot was held by a newer or a live busy writer, or
    /// taken over during the copy: the datagram is lost (readers count it when they pass it).
    Lost {
        /// The claimed sequence.
        seq: u64,
    },
}

/// Bytes a log with `payload` bytes of capacity per slot (rounded up to 8) and `slots` slots
/// occupies; saturates instead of overflowing.
pub const fn log_footprint(payload: usize, slots: u32) -> usize {
    let slot_words = SLOT_HEADER_WORDS.saturating_add(payload.div_ceil(8));
    let words = HEADER_WORDS.saturating_add(slot_words.saturating_mul(slots as usize));
    words.saturating_mul(8)
}

/// The validated geometry, kept privately by every handle.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    slots: u64,
    slot_words: usize,
}

impl Geometry {
    fn check(payload: usize, slots: u64) -> Result<Geometry, LogError> {
        if !(2..=u64::from(MAX_LOG_SLOTS)).contains(&slots) || !slots.is_power_of_two() {
            return Err(LogError::BadSlots(slots));
        }
        if payload == 0 || payload > MAX_LOG_PAYLOAD {
            return Err(LogError::BadSlotSize((SLOT_HEADER_WORDS + payload.div_ceil(8)) as u64));
        }
        Ok(Geometry { slots, slot_words: SLOT_HEADER_WORDS + payload.div_ceil(8) })
    }

    fn words(&self) -> usize {
        HEADER_WORDS + self.slot_words * self.slots as usize
    }

    fn payload_words(&self) -> usize {
        self.slot_words - SLOT_HEADER_WORDS
    }
}

/// The shared words of one log (does not own them; the `owner` next to it does).
struct Words {
    base: NonNull<AtomicU64>,
    len: usize,
}

impl Words {
    /// Word `i`. Every caller passes an index computed from the validated, private geometry
    /// (`i < len` by construction); the check makes a slip a panic, never a wild access.
    fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "multicast log word index {i} out of {}", self.len);
        // SAFETY: `i < len` (checked), and `base` points to `len` words that are valid and
        // 8-aligned for as long as `self` lives (the owner kept next to it in `Inner` outlives
        // it); every party accesses them only atomically, so a shared reference to an atomic
        // is sound.
        unsafe { self.base.add(i).as_ref() }
    }

    /// Words `start .. start + n`, bounds-checked once (a datagram's payload: one check, not one
    /// per word). Same contract as [`Words::at`].
    fn span(&self, start: usize, n: usize) -> &[AtomicU64] {
        assert!(
            start <= self.len && n <= self.len - start,
            "multicast log words {start}+{n} out of {}",
            self.len
        );
        // SAFETY: `start + n <= len` (checked), and `base` points to `len` valid, 8-aligned
        // words that live as long as `self` (see `at`); they are only accessed atomically, so a
        // shared slice of atomics over them is sound.
        unsafe { core::slice::from_raw_parts(self.base.add(start).as_ptr(), n) }
    }
}

struct Inner {
    words: Words,
    geo: Geometry,
    /// Keeps the memory behind `words` alive.
    _owner: Arc<dyn Send + Sync>,
}

// SAFETY: `Inner` holds a pointer to words that are only accessed atomically and are kept
// alive by the `Send + Sync` owner; sharing or sending it between threads adds no hazard.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// A handle on one multicast log. Cloning is cheap (shared); any clone may write, and any
/// number of [`McastReader`]s may read (see the module documentation).
#[derive(Clone)]
pub struct McastLog {
    inner: Arc<Inner>,
}

impl core::fmt::Debug for McastLog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("McastLog")
            .field("slots", &self.inner.geo.slots)
            .field("payload", &self.max_payload())
            .finish()
    }
}

/// Writes a fresh header and zero slot words.
fn format_words(words: &Words, geo: Geometry) {
    for i in 0..words.len {
        // Relaxed: the log is not shared yet; publication (link, Arc, thread spawn) orders it.
        words.at(i).store(0, Ordering::Relaxed);
    }
    words.at(W_VERSION).store(LOG_VERSION, Ordering::Relaxed);
    words.at(W_SLOT_WORDS).store(geo.slot_words as u64, Ordering::Relaxed);
    words.at(W_SLOTS).store(geo.slots, Ordering::Relaxed);
    // Release: an attacher that Acquire-loads the magic sees the geometry written before it.
    words.at(W_MAGIC).store(LOG_MAGIC, Ordering::Release);
}

/// Reads and validates the header.
fn validate_words(words: &Words) -> Result<Geometry, LogError> {
    if words.len < HEADER_WORDS {
        return Err(LogError::TooSmall { need: HEADER_WORDS * 8, have: words.len * 8 });
    }
    // Acquire: pairs with the Release store of the magic in `format_words`.
    if words.at(W_MAGIC).load(Ordering::Acquire) != LOG_MAGIC {
        return Err(LogError::BadMagic);
    }
    let version = words.at(W_VERSION).load(Ordering::Relaxed);
    if version != LOG_VERSION {
        return Err(LogError::Version(version));
    }
    let slot_words = words.at(W_SLOT_WORDS).load(Ordering::Relaxed);
    let slots = words.at(W_SLOTS).load(Ordering::Relaxed);
    let payload_words = slot_words
        .checked_sub(SLOT_HEADER_WORDS as u64)
        .filter(|w| (1..=(MAX_LOG_PAYLOAD / 8) as u64).contains(w))
        .ok_or(LogError::BadSlotSize(slot_words))?;
    let geo = Geometry::check(payload_words as usize * 8, slots)?;
    if geo.words() > words.len {
        return Err(LogError::TooSmall { need: geo.words() * 8, have: words.len * 8 });
    }
    Ok(geo)
}

impl McastLog {
    fn from_words(words: Words, owner: Arc<dyn Send + Sync>) -> Result<McastLog, LogError> {
        let geo = validate_words(&words)?;
        Ok(McastLog { inner: Arc::new(Inner { words, geo, _owner: owner }) })
    }

    /// Writes a fresh log header (all slots empty, `write_seq` 0) into `len` bytes at `mem`
    /// for `payload` bytes per datagram (rounded up to 8) and `slots` slots.
    ///
    /// # Safety
    /// `mem` is valid for reads and writes of `len` bytes, and nobody else accesses them while
    /// this runs (the memory is not yet shared).
    #[cfg(not(loom))]
    pub unsafe fn init(mem: NonNull<u8>, len: usize, payload: usize, slots: u32) -> Result<(), LogError> {
        let geo = Geometry::check(payload, u64::from(slots))?;
        let words = Self::words_at(mem, len)?;
        if geo.words() > words.len {
            return Err(LogError::TooSmall { need: geo.words() * 8, have: len });
        }
        format_words(&Words { base: words.base, len: geo.words() }, geo);
        Ok(())
    }

    /// Attaches to the log at `mem` after validating its header (magic, version, geometry,
    /// `len`, alignment). `owner` keeps the memory alive as long as any handle or reader does.
    ///
    /// # Safety
    /// `mem` is valid for reads and writes of `len` bytes while `owner` lives, and every party
    /// accesses those bytes only as atomic 8-byte words (this module's contract).
    #[cfg(not(loom))]
    pub unsafe fn attach(
        mem: NonNull<u8>,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> Result<McastLog, LogError> {
        let words = Self::words_at(mem, len)?;
        Self::from_words(words, owner)
    }

    #[cfg(not(loom))]
    fn words_at(mem: NonNull<u8>, len: usize) -> Result<Words, LogError> {
        if mem.as_ptr() as usize & (core::mem::align_of::<AtomicU64>() - 1) != 0 {
            return Err(LogError::Misaligned);
        }
        Ok(Words { base: mem.cast::<AtomicU64>(), len: len / 8 })
    }

    /// A log on the heap (in-process use, tests, Miri and loom).
    pub fn new_heap(payload: usize, slots: u32) -> Result<McastLog, LogError> {
        let geo = Geometry::check(payload, u64::from(slots))?;
        let cells: Arc<[AtomicU64]> = (0..geo.words()).map(|_| AtomicU64::new(0)).collect();
        let base = NonNull::new(cells.as_ptr() as *mut AtomicU64).ok_or(LogError::Misaligned)?;
        let words = Words { base, len: cells.len() };
        format_words(&words, geo);
        let owner: Arc<dyn Send + Sync> = Arc::new(cells);
        Self::from_words(words, owner)
    }

    /// Opens the named log `name` (see [`crate::ShmSegment::create_or_open_named`]) or creates
    /// it with `payload` bytes per datagram and `slots` slots. An existing log keeps its own
    /// geometry: callers check [`McastLog::max_payload`].
    #[cfg(not(loom))]
    pub fn create_or_open_named(name: &str, payload: usize, slots: u32) -> std::io::Result<McastLog> {
        let invalid = |e: LogError| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        let geo = Geometry::check(payload, u64::from(slots)).map_err(invalid)?;
        let len = geo.words() * 8;
        let (seg, _created) = crate::ShmSegment::create_or_open_named(name, len, |seg| {
            // SAFETY: the fresh segment is mapped for `seg.len()` bytes and not published yet.
            unsafe { Self::init(seg.as_non_null(), seg.len(), payload, slots) }.map_err(invalid)
        })?;
        let seg = Arc::new(seg);
        // SAFETY: the mapping lives as long as the `Arc` owner; every ringcast process accesses
        // a log segment only through this module, i.e. atomically.
        unsafe { Self::attach(seg.as_non_null(), seg.len(), seg.clone()) }.map_err(invalid)
    }

    /// Opens the existing named log `name`.
    #[cfg(not(loom))]
    pub fn open_named(name: &str) -> std::io::Result<McastLog> {
        let seg = Arc::new(crate::ShmSegment::open_named(name)?);
        // SAFETY: as in `create_or_open_named`.
        unsafe { Self::attach(seg.as_non_null(), seg.len(), seg.clone()) }
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Largest datagram this log carries.
    pub fn max_payload(&self) -> usize {
        self.inner.geo.payload_words() * 8
    }

    /// Number of slots.
    pub fn slots(&self) -> u64 {
        self.inner.geo.slots
    }

    /// Sequences claimed so far (the next writer's sequence).
    pub fn write_seq(&self) -> u64 {
        // Relaxed: an observation; it orders nothing.
        self.words().at(W_WRITE_SEQ).load(Ordering::Relaxed)
    }

    fn words(&self) -> &Words {
        &self.inner.words
    }

    /// Index of the first word of the slot of sequence `seq`.
    fn slot_base(&self, seq: u64) -> usize {
        // Masked with the private geometry: always a slot inside the log.
        HEADER_WORDS + (seq & (self.inner.geo.slots - 1)) as usize * self.inner.geo.slot_words
    }

    /// Claims sequence `s`'s slot: CAS of its word to `busy(s)` from an older sequence's value.
    fn claim(&self, seq_word: &AtomicU64, s: u64) -> bool {
        let mine = busy(s);
        let takeover = TAKEOVER_LAPS.wrapping_mul(self.inner.geo.slots);
        // Relaxed: the value only decides whether to claim; the Release fence after a
        // successful claim orders our later words behind the busy mark.
        let mut cur = seq_word.load(Ordering::Relaxed);
        for _ in 0..CLAIM_ATTEMPTS {
            if cur >= mine {
                return false; // A newer sequence owns the slot; ours is already overwritten.
            }
            if cur % 2 == 1 {
                let holder = (cur - 1) / 2;
                if s.wrapping_sub(holder) < takeover {
                    return false; // A writer is (presumably still) copying into this slot.
                }
            }
            // Relaxed on both sides: see above; failure re-examines the fresh value.
            match seq_word.compare_exchange(cur, mine, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        false
    }

    /// Writes one datagram from sender `from`; returns its sequence. Never blocks.
    pub fn write(&self, from: u32, payload: &[u8]) -> Result<u64, WriteError> {
        self.write_parts(from, &[payload])
    }

    /// Writes one datagram made of `parts`, in order, straight into its slot (a send gather:
    /// the parts are never made contiguous first); returns its sequence. Never blocks.
    pub fn write_parts(&self, from: u32, parts: &[&[u8]]) -> Result<u64, WriteError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_payload() {
            return Err(WriteError::TooLarge);
        }
        let words = self.words();
        // Relaxed: `write_seq` only hands out distinct sequences; data is published through
        // the slot word.
        let s = words.at(W_WRITE_SEQ).fetch_add(1, Ordering::Relaxed);
        let base = self.slot_base(s);
        let seq_word = words.at(base);
        if !self.claim(seq_word, s) {
            return Err(WriteError::Lost { seq: s });
        }
        // Release fence after the busy mark: a reader whose Relaxed loads see any word we store
        // below, and then runs its Acquire fence, also sees the busy mark (or later) on re-check.
        fence(Ordering::Release);
        self.store_body(base, s, from, parts);
        // Release: pairs with the reader's Acquire load of the slot word; meta and payload
        // stores above are visible to a reader that sees `published(s)`. Fails if a younger
        // writer took the slot over (we were presumed dead): the datagram is lost.
        match seq_word.compare_exchange(busy(s), published(s), Ordering::Release, Ordering::Relaxed) {
            Ok(_) => Ok(s),
            Err(_) => Err(WriteError::Lost { seq: s }),
        }
    }

    /// Stores meta, payload (the concatenation of `parts`) and check words of sequence `seq`'s
    /// slot at `base` (Relaxed; ordered by the caller).
    fn store_body(&self, base: usize, seq: u64, from: u32, parts: &[&[u8]]) {
        const GROUP: usize = 8 * LANES;
        let words = self.words();
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let meta = len as u64 | (u64::from(from) << 32);
        words.at(base + 1).store(meta, Ordering::Relaxed);
        let mut check = Check::new(seq, meta);
        let out = words.span(base + SLOT_HEADER_WORDS, len.div_ceil(8));
        let mut out = out.iter();
        // Whole groups of LANES words (8-byte loads, a chain each) straight from each part; a
        // group that straddles two parts is assembled in `carry` (at most GROUP bytes per
        // part boundary); then the rest, its last word zero-padded.
        let store_group = |group: &[u8], check: &mut Check, out: &mut core::slice::Iter<'_, AtomicU64>| {
            let w: [u64; LANES] = core::array::from_fn(|j| {
                u64::from_le_bytes(group[8 * j..8 * j + 8].try_into().unwrap_or([0; 8]))
            });
            check.group(&w);
            for (&v, slot) in w.iter().zip(&mut *out) {
                slot.store(v, Ordering::Relaxed);
            }
        };
        let mut carry = [0u8; GROUP];
        let mut have = 0;
        for part in parts {
            let mut p = *part;
            if have > 0 {
                let take = (GROUP - have).min(p.len());
                carry[have..have + take].copy_from_slice(&p[..take]);
                have += take;
                p = &p[take..];
                if have == GROUP {
                    store_group(&carry, &mut check, &mut out);
                    have = 0;
                }
            }
            if p.is_empty() {
                continue;
            }
            // (`have` is 0 here: a partial carry took all of `p` above.)
            let (groups, rest) = p.split_at(p.len() / GROUP * GROUP);
            for group in groups.chunks_exact(GROUP) {
                store_group(group, &mut check, &mut out);
            }
            carry[..rest.len()].copy_from_slice(rest);
            have = rest.len();
        }
        let mut w = [0u64; LANES];
        for (j, chunk) in carry[..have].chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w[j] = u64::from_le_bytes(b);
        }
        let tail = have.div_ceil(8);
        check.group(&w[..tail]);
        for (&v, slot) in w[..tail].iter().zip(&mut out) {
            slot.store(v, Ordering::Relaxed);
        }
        words.at(base + CHECK_WORD).store(check.finish(), Ordering::Relaxed);
    }

    /// A deliberately broken writer for the loom model: publishes *before* writing the body
    /// and never marks the slot busy. Loom must find a reader that delivers stale bytes.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn write_planted_bug(&self, from: u32, payload: &[u8]) -> Result<u64, WriteError> {
        let s = self.words().at(W_WRITE_SEQ).fetch_add(1, Ordering::Relaxed);
        let base = self.slot_base(s);
        self.words().at(base).store(published(s), Ordering::Release);
        self.store_body(base, s, from, &[payload]);
        Ok(s)
    }

    /// A reader starting at the current write position: it sees datagrams written from now on.
    /// With `skip_from = Some(id)` it silently passes over datagrams sent by `id` (its own).
    pub fn reader(&self, skip_from: Option<u32>) -> McastReader {
        let start = self.write_seq();
        self.reader_at(start, skip_from)
    }

    /// A reader starting at sequence `cursor`.
    pub fn reader_at(&self, cursor: u64, skip_from: Option<u32>) -> McastReader {
        McastReader {
            log: self.clone(),
            cursor,
            lost: 0,
            skip_from,
            stall_polls: 0,
            stall_limit: DEFAULT_STALL_POLLS,
            verify: true,
            buf: vec![0; self.max_payload()].into_boxed_slice(),
        }
    }
}

/// One datagram handed out by [`McastReader::recv`]; `payload` borrows the reader's buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Its sequence in the log.
    pub seq: u64,
    /// The sender id the writer gave.
    pub from: u32,
    /// The bytes, exactly as written.
    pub payload: &'a [u8],
}

/// What examining the position at the cursor found.
enum Step {
    Deliver {
        from: u32,
        len: usize,
    },
    /// Move the cursor to `to`, counting `to - cursor` datagrams lost.
    Lose {
        to: u64,
    },
    Empty,
    Stalled,
}

/// One member's read position in a log (see the module documentation). Owns a copy buffer of
/// the log's payload size, allocated once.
pub struct McastReader {
    log: McastLog,
    cursor: u64,
    lost: u64,
    skip_from: Option<u32>,
    stall_polls: u32,
    stall_limit: u32,
    /// Check each datagram's hash (always, except in the loom model that proves the seqlock
    /// alone correct).
    verify: bool,
    buf: Box<[u8]>,
}

impl McastReader {
    /// The next sequence this reader will examine.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Datagrams passed over without delivery so far: overwritten before we read them, torn
    /// while we copied them, never published by their (dead or overtaken) writer, or carrying
    /// an impossible length. Own datagrams skipped by the `skip_from` filter are not counted.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Puts back datagram `seq`, the one the last [`McastReader::recv`] returned: the next call
    /// examines its slot again, and what follows it stays in the log, unread — a receive queue
    /// not drained (back-pressure: the reader could not take it yet). If a writer laps the
    /// reader meanwhile, the next call counts it lost as any overwritten datagram. Any other
    /// `seq` is ignored (false).
    pub fn unread(&mut self, seq: u64) -> bool {
        if self.cursor != seq.wrapping_add(1) {
            return false;
        }
        self.cursor = seq;
        self.stall_polls = 0;
        true
    }

    /// How many calls of [`McastReader::recv`] may find the cursor's sequence claimed but not
    /// published before it is skipped as lost. Smaller skips a slow live writer sooner; larger
    /// waits longer behind a writer that died after claiming.
    pub fn set_stall_limit(&mut self, polls: u32) {
        self.stall_limit = polls.max(1);
    }

    /// Turns the check-word verification off — only for the loom model, which shows the seqlock
    /// by itself delivers no torn datagram when no slot is taken over (and that a planted
    /// ordering bug is then caught as wrong bytes, which the check would otherwise mask).
    #[doc(hidden)]
    pub fn set_verify(&mut self, on: bool) {
        self.verify = on;
    }

    /// The next datagram, if one is ready. `None` means nothing deliverable now. A call
    /// examines at most `2 · slots + 2` positions (skipped own datagrams, lost ones), so it
    /// is bounded whatever the segment holds; the next call continues where it stopped.
    pub fn recv(&mut self) -> Option<Datagram<'_>> {
        let max_steps = self.log.slots().saturating_mul(2).saturating_add(2);
        let mut found = None;
        for _ in 0..max_steps {
            let c = self.cursor;
            match self.examine(c) {
                Step::Deliver { from, len } => {
                    self.cursor = c.wrapping_add(1);
                    self.stall_polls = 0;
                    if self.skip_from == Some(from) {
                        continue;
                    }
                    found = Some((c, from, len));
                    break;
                }
                Step::Lose { to } => {
                    self.lost = self.lost.saturating_add(to.wrapping_sub(c));
                    self.cursor = to;
                    self.stall_polls = 0;
                }
                Step::Empty => break,
                Step::Stalled => {
                    self.stall_polls = self.stall_polls.saturating_add(1);
                    if self.stall_polls < self.stall_limit {
                        break;
                    }
                    // Its writer is presumed dead (or hopelessly slow): give the position up.
                    self.lost = self.lost.saturating_add(1);
                    self.cursor = c.wrapping_add(1);
                    self.stall_polls = 0;
                }
            }
        }
        let (seq, from, len) = found?;
        Some(Datagram { seq, from, payload: &self.buf[..len] })
    }

    /// Where the cursor goes when position `c` is known lost: past it, or — when the writers
    /// are more than a lap ahead — to the oldest sequence that may still be in the log.
    fn skip_target(&self, c: u64, write_seq: u64) -> u64 {
        let slots = self.log.slots();
        if write_seq > c && write_seq - c > slots {
            write_seq - slots
        } else {
            c.wrapping_add(1)
        }
    }

    fn examine(&mut self, c: u64) -> Step {
        let log = &self.log;
        let words = log.words();
        let base = log.slot_base(c);
        // Acquire: pairs with the writer's Release CAS to `published(c)`: its meta and payload
        // stores are visible to the loads below.
        let w1 = words.at(base).load(Ordering::Acquire);
        if w1 == published(c) {
            // Relaxed loads (the seqlock's data reads); validity is decided by the re-check.
            let meta = words.at(base + 1).load(Ordering::Relaxed);
            let stored = words.at(base + CHECK_WORD).load(Ordering::Relaxed);
            let len = (meta & 0xffff_ffff) as usize;
            let from = (meta >> 32) as u32;
            let ok_len = len <= self.buf.len();
            let mut check = Check::new(c, meta);
            if ok_len {
                copy_out(
                    words.span(base + SLOT_HEADER_WORDS, len.div_ceil(8)),
                    &mut self.buf[..len],
                    &mut check,
                );
            }
            // Acquire fence before the re-check: if any load above saw a store of a later
            // writer, that writer's Release fence (after its busy mark) synchronises with this
            // fence, so the re-load below sees its busy mark or later.
            fence(Ordering::Acquire);
            let w2 = words.at(base).load(Ordering::Relaxed);
            if w2 != w1 || !ok_len || (self.verify && check.finish() != stored) {
                // Torn (a newer writer took the slot during the copy), stale words of a writer
                // whose slot was taken over, or an impossible length.
                return Step::Lose { to: c.wrapping_add(1) };
            }
            return Step::Deliver { from, len };
        }
        // Relaxed: `write_seq` is only compared; no data is read on its strength.
        let write_seq = words.at(W_WRITE_SEQ).load(Ordering::Relaxed);
        if w1 > published(c) {
            // A newer lap (or a bogus word: also treated as "ours is gone").
            return Step::Lose { to: self.skip_target(c, write_seq) };
        }
        // Older than ours: not yet published for `c`.
        if write_seq <= c {
            return Step::Empty;
        }
        if write_seq - c > log.slots() {
            // Sequence `c + slots` is claimed: `c` is due to be overwritten anyway.
            return Step::Lose { to: self.skip_target(c, write_seq) };
        }
        Step::Stalled
    }
}
