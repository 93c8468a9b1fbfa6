//! What the engine asks its driver to do, in order: frames to send, multicast groups to join and
//! leave, DMA jobs on host memory, and completions to publish — and the one id the driver
//! answers with ([`JobId`]).
//!
//! Frames are written once, into the outbox's arena, by the code that builds them; an
//! [`Action::Send`] or [`Action::Multicast`] lends the driver that slice until it polls the
//! next action, so queueing a frame costs no copy. A data fragment's payload is not even
//! written there: its header and trailer are, around a [`ChannelRange`] of the channel that
//! holds the payload, and the action lends the three parts ([`Gather`]) for the driver to
//! write into the wire in one pass — a NIC's send gather. The range is resolved as the action
//! is polled; one whose broadcast has left its channel since is not sent (see
//! [`ChannelRange`]). The arena grows to the largest burst one event produces (a root's
//! headers and trailers for its whole message, at worst) and is reused after every drain.
use crate::comm::{GroupId, PeerId};
pub use crate::engine::ids::JobId;
use crate::intake::regions::Resolved;
use crate::intake::HostId;
use crate::transfer::protocol::{ChannelRange, Dest, Protocol};
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use ringcast_abi::{Completion, RegionKey, StatusKind};

/// A frame lent in its parts, to be written out in order as one datagram: the header, the
/// payload where it lies (a channel), the trailer — or the whole frame in the first part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gather<'a> {
    /// The parts, in order (unused ones empty).
    pub parts: [&'a [u8]; 3],
}

impl<'a> Gather<'a> {
    /// A frame of one part.
    pub fn whole(frame: &'a [u8]) -> Self {
        Gather { parts: [frame, &[], &[]] }
    }

    /// The frame's length: the parts' sum.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the frame's bytes to `out` (a driver with no gather: a copy).
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        self.parts.iter().for_each(|p| out.extend_from_slice(p));
    }

    /// The frame's bytes in one buffer (tests and simulations).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.extend_into(&mut v);
        v
    }
}

/// A host-memory transfer. On a DPU it is a DMA descriptor; on the emulation runners, a copy
/// between the host's mapped segments (and the engine's staging).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dma {
    /// Host memory to host memory (a COPY descriptor; the intra-node delivery of a broadcast).
    Copy {
        /// The host the operation belongs to (a driver moves a large copy over several passes,
        /// host by host, so none waits behind another's).
        host: HostId,
        /// Source.
        src: Resolved,
        /// Destination.
        dst: Resolved,
        /// Bytes.
        len: u64,
        /// The regions of source and destination, when a descriptor named them
        /// ([`RegionKey::NONE`] otherwise): deregistering one fails the copy still moving.
        keys: [RegionKey; 2],
    },
    /// Host memory into the engine's staging ([`crate::engine::Engine::staging`]): a root's message, a
    /// communicator's creation record.
    Load {
        /// Source.
        src: Resolved,
        /// Bytes (the staging slice's length).
        len: u64,
    },
    /// The engine's staging out to host memory: a receiver's delivered message.
    Store {
        /// Destination.
        dst: Resolved,
        /// Bytes (the staging slice's length).
        len: u64,
    },
}

/// What a job that could not be made ends with, where it is made: one end of it is no memory
/// (a buffer `None`, `engine/participation/`), so the bytes a collective
/// needed from there cannot be had — `RootFailed` for whoever needed them, as a remote rank
/// whose part could not be read; the call on no memory itself ends with its own status.
pub(crate) const NO_MEMORY: StatusKind = StatusKind::RootFailed;

impl Dma {
    /// A copy between `src` and `dst`, when both are memory (`None`: one is not — a call at
    /// this rank on no memory, `engine/participation/` — and no job can move it).
    pub(crate) fn copy(
        host: HostId,
        src: Option<Resolved>,
        dst: Option<Resolved>,
        len: u64,
        keys: [RegionKey; 2],
    ) -> Option<Dma> {
        Some(Dma::Copy { host, src: src?, dst: dst?, len, keys })
    }
}

/// One thing for the driver to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Send `frame` to one engine (on NIC lane `lane`; fabrics with one lane ignore it).
    Send {
        /// Destination.
        to: PeerId,
        /// Lane ([`crate::schedule::bcast::LANE_ANY`]: any).
        lane: u8,
        /// The sealed frame.
        frame: Gather<'a>,
    },
    /// Multicast `frame` to `group`.
    Multicast {
        /// The communicator's group.
        group: GroupId,
        /// The sealed frame.
        frame: Gather<'a>,
    },
    /// Start receiving `group`; answer with [`crate::engine::Engine::handle_join_done`].
    Join {
        /// The job to answer.
        job: JobId,
        /// The group.
        group: GroupId,
    },
    /// Stop receiving `group` (no communicator of this engine uses it any more).
    Leave {
        /// The group.
        group: GroupId,
    },
    /// Move bytes; answer with [`crate::engine::Engine::handle_dma_done`].
    Dma {
        /// The job to answer.
        job: JobId,
        /// What to move.
        dma: Dma,
    },
    /// Publish `cqe` on `host`'s completion ring (`engine_ns`: now − `started`). Each goes out
    /// as its operation ends, not in the order the host's descriptors were taken
    /// (`Engine::publish`: non-blocking calls complete in any order).
    Complete {
        /// Recipient.
        host: HostId,
        /// The entry.
        cqe: Completion,
        /// When its descriptor was taken in.
        started: Nanos,
    },
}

#[derive(Debug)]
enum Queued {
    /// `payload`: the frame's payload stays in a channel, `len` bytes of header and trailer
    /// around it in the arena (split after the header).
    Send {
        to: PeerId,
        lane: u8,
        at: usize,
        len: usize,
        payload: Option<ChannelRange>,
    },
    Multicast {
        group: GroupId,
        at: usize,
        len: usize,
        payload: Option<ChannelRange>,
    },
    Join {
        job: JobId,
        group: GroupId,
    },
    Leave {
        group: GroupId,
    },
    Dma {
        job: JobId,
        dma: Dma,
    },
    Complete {
        host: HostId,
        cqe: Completion,
        started: Nanos,
    },
}

/// The actions queued and not yet polled, with the frames they carry.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: VecDeque<Queued>,
    /// The queued frames' bytes, `used` of them live; never shrunk, so a frame built in place
    /// writes over old bytes instead of zeroing first.
    arena: Vec<u8>,
    used: usize,
    /// Frames dropped from the queue unsent because their payload's broadcast left its channel
    /// before the driver took them (`frames_unsent_total`).
    unsent: u64,
}

impl Outbox {
    /// Actions queued and not yet polled by the driver (frames, mostly).
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn send(&mut self, to: PeerId, lane: u8, frame: &[u8]) {
        self.send_with(to, lane, frame.len(), &mut |out| {
            out.copy_from_slice(frame);
            frame.len()
        });
    }

    pub(crate) fn multicast(&mut self, group: GroupId, frame: &[u8]) {
        self.multicast_with(group, frame.len(), &mut |out| {
            out.copy_from_slice(frame);
            frame.len()
        });
    }

    /// Queues a send of the frame `build` writes into `len` bytes of the arena (it returns the
    /// length it used; 0 queues nothing): the protocol seals its fragments here directly.
    pub(crate) fn send_with(
        &mut self,
        to: PeerId,
        lane: u8,
        len: usize,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        if let Some((at, len)) = self.put_with(len, build) {
            self.queue.push_back(Queued::Send { to, lane, at, len, payload: None });
        }
    }

    /// As [`Outbox::send_with`], for a multicast.
    pub(crate) fn multicast_with(
        &mut self,
        group: GroupId,
        len: usize,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) {
        if let Some((at, len)) = self.put_with(len, build) {
            self.queue.push_back(Queued::Multicast { group, at, len, payload: None });
        }
    }

    /// Queues a data frame whose payload stays in the channel (`range`): `build` writes its
    /// header and trailer into `len` bytes of the arena (`emit_around`; 0 queues nothing).
    /// Returns the frame's length, payload included (0: nothing queued).
    pub(crate) fn send_around(
        &mut self,
        to: Dest<'_>,
        range: ChannelRange,
        len: usize,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> usize {
        let Some((at, len)) = self.put_with(len, build) else { return 0 };
        let payload = Some(range);
        self.queue.push_back(match to {
            Dest::Peer(to, lane) => Queued::Send { to, lane, at, len, payload },
            Dest::Group(&group) => Queued::Multicast { group, at, len, payload },
        });
        len + range.len as usize
    }

    pub(crate) fn join(&mut self, job: JobId, group: GroupId) {
        self.queue.push_back(Queued::Join { job, group });
    }

    pub(crate) fn leave(&mut self, group: GroupId) {
        self.queue.push_back(Queued::Leave { group });
    }

    pub(crate) fn dma(&mut self, job: JobId, dma: Dma) {
        self.queue.push_back(Queued::Dma { job, dma });
    }

    pub(crate) fn complete(&mut self, host: HostId, cqe: Completion, started: Nanos) {
        self.queue.push_back(Queued::Complete { host, cqe, started });
    }

    fn put_with(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> usize) -> Option<(usize, usize)> {
        // The arena is reused from the start when the queue drains; it grows once to the
        // largest burst.
        if self.queue.is_empty() {
            self.used = 0;
        }
        let at = self.used;
        if self.arena.len() < at + len {
            self.arena.resize(at + len, 0);
        }
        let n = build(&mut self.arena[at..at + len]).min(len);
        if n == 0 {
            return None;
        }
        self.used = at + n;
        Some((at, n))
    }

    /// The frames at the head of the queue, lent together up to the first action that is not
    /// a frame: each an [`Action::Send`] or [`Action::Multicast`], in order, leaving the queue
    /// as the iterator yields it (what it does not yield stays queued).
    /// `channels`: where queued payloads lie (the protocol, when the engine has one).
    pub(crate) fn poll_frames<'a>(&'a mut self, channels: Option<&'a Protocol>) -> Frames<'a> {
        Frames { queue: &mut self.queue, arena: &self.arena, channels, unsent: &mut self.unsent }
    }

    /// Frames dropped unsent so far: their payload's broadcast left its channel first.
    pub(crate) fn unsent(&self) -> u64 {
        self.unsent
    }

    /// The next action; a frame whose payload's broadcast left its channel is skipped (not
    /// sent: see [`ChannelRange`]).
    pub(crate) fn poll<'a>(&'a mut self, channels: Option<&'a Protocol>) -> Option<Action<'a>> {
        let q = loop {
            let q = self.queue.pop_front()?;
            match q {
                Queued::Send { at, len, payload, .. } | Queued::Multicast { at, len, payload, .. }
                    if gather(&self.arena, at, len, payload, channels).is_none() =>
                {
                    self.unsent += 1;
                }
                q => break q,
            }
        };
        Some(match q {
            Queued::Send { to, lane, at, len, payload } => {
                Action::Send { to, lane, frame: gather(&self.arena, at, len, payload, channels)? }
            }
            Queued::Multicast { group, at, len, payload } => {
                Action::Multicast { group, frame: gather(&self.arena, at, len, payload, channels)? }
            }
            Queued::Join { job, group } => Action::Join { job, group },
            Queued::Leave { group } => Action::Leave { group },
            Queued::Dma { job, dma } => Action::Dma { job, dma },
            Queued::Complete { host, cqe, started } => Action::Complete { host, cqe, started },
        })
    }
}

/// The run of frames at the head of the outbox ([`super::Engine::poll_frames`]): every one
/// lends its bytes from the arena, all at once, so a driver can hand the whole run to its
/// device in one call.
pub struct Frames<'a> {
    queue: &'a mut VecDeque<Queued>,
    arena: &'a [u8],
    channels: Option<&'a Protocol>,
    unsent: &'a mut u64,
}

impl core::fmt::Debug for Frames<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Frames").field("queued", &self.queue.len()).finish()
    }
}

/// A queued frame's parts: the arena's bytes, or — its payload in a channel — header, payload,
/// trailer. `None` when the payload's broadcast left its channel (or the arena range is bad).
fn gather<'a>(
    arena: &'a [u8],
    at: usize,
    len: usize,
    payload: Option<ChannelRange>,
    channels: Option<&'a Protocol>,
) -> Option<Gather<'a>> {
    let frame = arena.get(at..at.checked_add(len)?)?;
    let Some(range) = payload else { return Some(Gather::whole(frame)) };
    let data = channels?.channel_range(range)?;
    let (head, trailer) = frame.split_at_checked(ringcast_abi::wire::WIRE_HEADER_LEN)?;
    Some(Gather { parts: [head, data, trailer] })
}

impl<'a> Iterator for Frames<'a> {
    type Item = Action<'a>;

    fn next(&mut self) -> Option<Action<'a>> {
        let (arena, channels) = (self.arena, self.channels);
        loop {
            let action = match self.queue.front()? {
                Queued::Send { to, lane, at, len, payload } => gather(arena, *at, *len, *payload, channels)
                    .map(|frame| Action::Send { to: *to, lane: *lane, frame }),
                Queued::Multicast { group, at, len, payload } => gather(arena, *at, *len, *payload, channels)
                    .map(|frame| Action::Multicast { group: *group, frame }),
                _ => return None,
            };
            self.queue.pop_front();
            // (A frame whose payload left its channel is not sent, but counted: the next one
            // is tried.)
            if action.is_some() {
                return action;
            }
            *self.unsent += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(b: u8) -> GroupId {
        [b; 14]
    }

    /// A run of frames is lent whole, in order, and stops at the first action that is not a
    /// frame, which `poll` then returns; what the iterator did not yield stays queued.
    #[test]
    fn frames_are_lent_as_one_run_up_to_the_next_other_action() {
        let mut out = Outbox::default();
        out.send(PeerId(1), 0, b"one");
        out.multicast(group(7), b"two");
        out.leave(group(9));
        out.send(PeerId(2), 0, b"three");
        out.send(PeerId(3), 0, b"four");
        let run: Vec<(Option<PeerId>, Vec<u8>)> = out
            .poll_frames(None)
            .map(|a| match a {
                Action::Send { to, frame, .. } => (Some(to), frame.to_vec()),
                Action::Multicast { frame, .. } => (None, frame.to_vec()),
                other => panic!("not a frame: {other:?}"),
            })
            .collect();
        assert_eq!(run, vec![(Some(PeerId(1)), b"one".to_vec()), (None, b"two".to_vec())]);
        assert_eq!(out.poll_frames(None).count(), 0, "the head is not a frame");
        assert_eq!(out.poll(None), Some(Action::Leave { group: group(9) }));
        assert!(matches!(
            out.poll_frames(None).next(),
            Some(Action::Send { to: PeerId(2), frame, .. }) if frame.to_vec() == b"three"
        ));
        assert!(
            matches!(out.poll(None), Some(Action::Send { to: PeerId(3), frame, .. }) if frame.to_vec() == b"four"),
            "a frame the run did not yield stays queued"
        );
        assert_eq!(out.poll(None), None);
    }

    /// A frame queued around a channel range whose broadcast is not in that channel (its
    /// communicator gone, here never created) is not lent — neither by `poll` nor in a run of
    /// `poll_frames` — and the frames behind it are; with no protocol to resolve it, likewise.
    /// Each skipped frame is counted (`frames_unsent_total`).
    #[test]
    fn a_frame_whose_payload_left_its_channel_is_skipped() {
        use crate::transfer::protocol::CommHandle;
        let proto = Protocol::new(&crate::config::EngineConfig::default(), crc32c::crc32c);
        let range = ChannelRange { comm: CommHandle(0), generation: 1, slot: 0, bid: 0, off: 0, len: 8 };
        let around = |out: &mut [u8]| {
            out.fill(1);
            out.len()
        };
        for run in [false, true] {
            for channels in [Some(&proto), None] {
                let mut out = Outbox::default();
                assert_eq!(out.send_around(Dest::Peer(PeerId(1), 0), range, 60, &mut { around }), 68);
                assert_eq!(out.send_around(Dest::Group(&group(3)), range, 60, &mut { around }), 68);
                out.send(PeerId(2), 0, b"after");
                let next = match run {
                    true => out.poll_frames(channels).next(),
                    false => out.poll(channels),
                };
                assert!(
                    matches!(next, Some(Action::Send { to: PeerId(2), frame, .. }) if frame.to_vec() == b"after"),
                    "run {run}"
                );
                assert_eq!(out.poll(channels), None);
                assert_eq!(out.unsent(), 2, "both skipped frames counted (run {run})");
            }
        }
    }
}
