//! What the engine asks its driver to do, in order: frames to send, multicast groups to join and
//! leave, DMA jobs on host memory, and completions to publish — and the one id the driver
//! answers with ([`JobId`]).
//!
//! Frames are written once, into the outbox's arena, by the code that builds them; an
//! [`Action::Send`] or [`Action::Multicast`] lends the driver that slice until it polls the
//! next action, so queueing a frame costs no copy. The arena grows to the largest burst one
//! event produces (a root's whole message, at worst) and is reused after every drain.
use crate::comm::{GroupId, PeerId};
pub use crate::engine::ids::JobId;
use crate::intake::regions::Resolved;
use crate::intake::HostId;
use crate::Nanos;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use ringcast_abi::{Completion, RegionKey};

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
        frame: &'a [u8],
    },
    /// Multicast `frame` to `group`.
    Multicast {
        /// The communicator's group.
        group: GroupId,
        /// The sealed frame.
        frame: &'a [u8],
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
    /// Publish `cqe` on `host`'s completion ring (`engine_ns`: now − `started`). Each host's
    /// completions come in the order its descriptors were taken.
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
    Send { to: PeerId, lane: u8, at: usize, len: usize },
    Multicast { group: GroupId, at: usize, len: usize },
    Join { job: JobId, group: GroupId },
    Leave { group: GroupId },
    Dma { job: JobId, dma: Dma },
    Complete { host: HostId, cqe: Completion, started: Nanos },
}

/// The actions queued and not yet polled, with the frames they carry.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: VecDeque<Queued>,
    /// The queued frames' bytes, `used` of them live; never shrunk, so a frame built in place
    /// writes over old bytes instead of zeroing first.
    arena: Vec<u8>,
    used: usize,
    /// Jobs on a refused call's buffers ([`Resolved::REFUSED`]): they fail in the engine, at
    /// once, and never reach the driver.
    refused: VecDeque<JobId>,
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
            self.queue.push_back(Queued::Send { to, lane, at, len });
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
            self.queue.push_back(Queued::Multicast { group, at, len });
        }
    }

    pub(crate) fn join(&mut self, job: JobId, group: GroupId) {
        self.queue.push_back(Queued::Join { job, group });
    }

    pub(crate) fn leave(&mut self, group: GroupId) {
        self.queue.push_back(Queued::Leave { group });
    }

    pub(crate) fn dma(&mut self, job: JobId, dma: Dma) {
        let refused = match dma {
            Dma::Copy { src, dst, .. } => src.is_refused() || dst.is_refused(),
            Dma::Load { src, .. } => src.is_refused(),
            Dma::Store { dst, .. } => dst.is_refused(),
        };
        if refused {
            self.refused.push_back(job);
        } else {
            self.queue.push_back(Queued::Dma { job, dma });
        }
    }

    /// The oldest job [`Outbox::dma`] failed and nobody answered yet (to answer as failed).
    /// Popped one at a time, so the queue keeps its capacity: no allocation once it has grown.
    pub(crate) fn pop_refused(&mut self) -> Option<JobId> {
        self.refused.pop_front()
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
    pub(crate) fn poll_frames(&mut self) -> Frames<'_> {
        Frames { queue: &mut self.queue, arena: &self.arena }
    }

    pub(crate) fn poll(&mut self) -> Option<Action<'_>> {
        let q = self.queue.pop_front()?;
        Some(match q {
            Queued::Send { to, lane, at, len } => Action::Send { to, lane, frame: &self.arena[at..at + len] },
            Queued::Multicast { group, at, len } => {
                Action::Multicast { group, frame: &self.arena[at..at + len] }
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
#[derive(Debug)]
pub struct Frames<'a> {
    queue: &'a mut VecDeque<Queued>,
    arena: &'a [u8],
}

impl<'a> Iterator for Frames<'a> {
    type Item = Action<'a>;

    fn next(&mut self) -> Option<Action<'a>> {
        let arena = self.arena;
        let action = match self.queue.front()? {
            Queued::Send { to, lane, at, len } => {
                Action::Send { to: *to, lane: *lane, frame: arena.get(*at..at + len)? }
            }
            Queued::Multicast { group, at, len } => {
                Action::Multicast { group: *group, frame: arena.get(*at..at + len)? }
            }
            _ => return None,
        };
        self.queue.pop_front();
        Some(action)
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
            .poll_frames()
            .map(|a| match a {
                Action::Send { to, frame, .. } => (Some(to), frame.to_vec()),
                Action::Multicast { frame, .. } => (None, frame.to_vec()),
                other => panic!("not a frame: {other:?}"),
            })
            .collect();
        assert_eq!(run, vec![(Some(PeerId(1)), b"one".to_vec()), (None, b"two".to_vec())]);
        assert_eq!(out.poll_frames().count(), 0, "the head is not a frame");
        assert_eq!(out.poll(), Some(Action::Leave { group: group(9) }));
        assert!(matches!(
            out.poll_frames().next(),
            Some(Action::Send { to: PeerId(2), frame: b"three", .. })
        ));
        assert!(
            matches!(out.poll(), Some(Action::Send { to: PeerId(3), frame: b"four", .. })),
            "a frame the run did not yield stays queued"
        );
        assert_eq!(out.poll(), None);
    }
}
