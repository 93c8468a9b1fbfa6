//! A root's load with its payload CRCs: the driver's DMA computes each fragment's payload
//! CRC32C as it moves the message into the channel — a NIC's CRC as the bytes move — and the
//! root's frames are then sealed from those sums (`transfer::seal`) instead of a second pass
//! over the channel per fragment. Optional for a driver: one that only copies
//! ([`Protocol::staging`]) leaves the sums to the seal, as before; the frames are the same
//! bytes either way. (issue 40's engine core, docs/performance.md.)
use crate::ledger::Side;
use crate::transfer::env::DmaToken;
use crate::transfer::protocol::Protocol;
use crate::transfer::state::{Comm, State};
use alloc::vec::Vec;

/// Bytes a driver reads in one go before it sums the fragments among them ([`SummedLoad::fill`]):
/// within a core's L1 data cache (32–48 KiB on current x86 and Arm server cores).
const READ_RUN: usize = 32 << 10;

/// A root's message load with room for its fragments' payload CRCs
/// ([`Protocol::staging_summed`]).
pub struct SummedLoad<'a> {
    /// Where the message goes (the root's channel): what [`Protocol::staging`] lends.
    pub bytes: &'a mut [u8],
    /// Fragment `k`'s payload is `bytes[k · stride ..]`, `stride` bytes long (the last one
    /// what is left).
    pub stride: usize,
    /// Fragment `k`'s payload CRC32C goes in `sums[k]`: one per fragment, every one to be
    /// written before the driver reports the job summed ([`Protocol::summed`]).
    pub sums: &'a mut [u32],
}

impl SummedLoad<'_> {
    /// Moves the message in with `read(offset, into)` (false: the job failed), a run of whole
    /// fragments at a time, each fragment's sum computed with `crc` right after its run lands,
    /// while its bytes are in L1: what a driver whose DMA is a CPU copy does. Returns whether
    /// every fragment was read (and summed).
    pub fn fill(self, crc: fn(&[u8]) -> u32, mut read: impl FnMut(usize, &mut [u8]) -> bool) -> bool {
        let SummedLoad { bytes, stride, sums } = self;
        if stride == 0 || sums.len() != bytes.len().div_ceil(stride) {
            return false;
        }
        // Read in runs of fragments that fit in a core's L1 together (one large copy is faster
        // per byte than one per fragment), each run's fragments summed while it is there.
        let run = (READ_RUN / stride).max(1) * stride;
        for (r, (part, sums)) in bytes.chunks_mut(run).zip(sums.chunks_mut(run / stride)).enumerate() {
            if !read(r * run, part) {
                return false;
            }
            for (fragment, sum) in part.chunks(stride).zip(sums.iter_mut()) {
                *sum = crc(fragment);
            }
        }
        true
    }
}

impl Protocol {
    /// [`Protocol::staging`] for a root's whole-message load (the job `post` hands its
    /// driver), with its fragments' sum slots; `None` for any other job or an empty message
    /// (nothing to sum: its driver copies, [`Protocol::staging`]).
    pub fn staging_summed(&mut self, t: DmaToken) -> Option<SummedLoad<'_>> {
        let c = self.loading_root(t)?;
        let slot = t.slot as usize;
        let op = c.ops.get(slot)?.as_ref()?;
        let (count, stride) = (op.geo.count() as usize, op.geo.payload as usize);
        if c.sums.len() <= slot {
            // Once per channel, the first time a driver sums there.
            c.sums.vec().resize_with(slot + 1, Vec::new);
        }
        let sums = &mut c.sums[slot];
        if sums.len() < count {
            // Grows once to the largest message loaded in this channel; never shrinks.
            sums.resize(count, 0);
        }
        let bytes = c.channels.get_mut(slot)?.get_mut(..t.len as usize)?;
        Some(SummedLoad { bytes, stride, sums: &mut sums[..count] })
    }

    /// The driver moved every byte of job `t` ([`Protocol::staging_summed`]) and wrote every
    /// fragment's sum: the root seals its frames from them. Before `dma_done(t, true, ..)`. The
    /// ledger counts the message CRC'd once, here, where the driver's load did it.
    pub fn summed(&mut self, t: DmaToken) {
        let Some(op) = self.loading_root(t).and_then(|c| c.ops.get_mut(t.slot as usize)?.as_mut()) else {
            return;
        };
        op.summed = true;
        self.counters.ledger.crcd(Side::Send, u64::from(t.len));
    }

    /// The communicator whose root `t` loads its whole, non-empty message now: the one job
    /// [`Protocol::staging_summed`] lends and [`Protocol::summed`] answers.
    fn loading_root(&mut self, t: DmaToken) -> Option<&mut Comm> {
        let c = self.comms.get_mut(t.comm.0 as usize)?.as_mut().filter(|c| c.generation == t.generation)?;
        let op = c.ops.get(t.slot as usize)?.as_ref()?;
        let whole = op.bid == t.bid && op.state == State::Loading && t.off == 0 && t.len == op.geo.total;
        (whole && t.len > 0).then_some(c)
    }
}
