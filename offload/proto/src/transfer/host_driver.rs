//! A driver that reaches host memory itself — a test, a fuzz target, the simulator — and
//! answers the protocol's DMA jobs the way every driver does, asynchronously: [`Env::dma`]
//! only queues a job; once the handler that handed it over has returned, the driver carries
//! it out against the job's staging and answers ([`Protocol::answer_jobs`]), at the same
//! `now` — a DMA engine with no latency. The protocol is never re-entered from inside
//! [`Env::dma`], and it has one way to learn a job is over: [`Protocol::dma_done`].
use crate::transfer::env::{DmaJob, Env};
use crate::transfer::protocol::Protocol;
use crate::Nanos;
use alloc::collections::VecDeque;

/// An [`Env`] whose driver carries its DMA jobs out itself: its [`Env::dma`] pushes the job
/// at the back of [`HostDriver::jobs`], and whoever drives the protocol calls
/// [`Protocol::answer_jobs`] after each handler ([`Protocol::post_bcast`],
/// [`Protocol::on_frame`], [`Protocol::on_timeout`]).
pub trait HostDriver: Env {
    /// The jobs handed over and not answered yet, oldest first.
    fn jobs(&mut self) -> &mut VecDeque<DmaJob>;
    /// Moves `job`'s bytes between host memory and `stage`, its staging: `true` if every byte
    /// moved, `false` (nothing moved) if its host range is not there. One flat buffer:
    /// [`DmaJob::carry_out`].
    fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool;
}

impl Protocol {
    /// Answers every job `driver` holds, oldest first, with any that the answers hand over:
    /// each carried out against its staging ([`Protocol::staging`]) and answered with
    /// [`Protocol::dma_done`] at `now`. A job whose broadcast ended since it was handed over
    /// has no staging: it moves nothing and its answer (`false`) is ignored as stale. Returns
    /// the jobs answered.
    pub fn answer_jobs(&mut self, now: Nanos, driver: &mut impl HostDriver) -> usize {
        let mut answered = 0;
        while let Some(job) = driver.jobs().pop_front() {
            let ok = match self.staging(job.token) {
                Some(stage) => driver.carry_out(&job, stage),
                None => false,
            };
            self.dma_done(job.token, ok, now, driver);
            answered += 1;
        }
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::auth::Secret;
    use crate::comm::{CommSpec, GroupId, Layout, PeerId};
    use crate::config::EngineConfig;
    use crate::intake::regions::{Resolved, SegmentHandle};
    use crate::transfer::env::{CommHandle, DmaDir, Outcome, Post};
    use alloc::vec::Vec;
    use ringcast_abi::StatusKind;

    #[derive(Default)]
    struct Host {
        mem: Vec<u8>,
        sent: usize,
        done: Vec<Outcome>,
        jobs: VecDeque<DmaJob>,
    }

    impl Env for Host {
        fn send(&mut self, _: PeerId, _: &[u8]) {
            self.sent += 1;
        }
        fn multicast(&mut self, _: &GroupId, _: &[u8]) {
            self.sent += 1;
        }
        fn dma(&mut self, job: DmaJob) {
            self.jobs.push_back(job);
        }
        fn complete(&mut self, _: u64, outcome: Outcome) {
            self.done.push(outcome);
        }
    }

    impl HostDriver for Host {
        fn jobs(&mut self) -> &mut VecDeque<DmaJob> {
            &mut self.jobs
        }
        fn carry_out(&mut self, job: &DmaJob, stage: &mut [u8]) -> bool {
            job.carry_out(&mut self.mem, stage)
        }
    }

    /// A root's post hands its load over and returns: nothing completes, nothing is sent and
    /// the channel holds nothing of the message until the driver answers — then the request
    /// completes `Ok` (Yu et al.: the message is in the channel) and the job is over. A load whose host range is not there
    /// completes `OutOfBounds` on its answer, as before.
    #[test]
    fn a_roots_load_is_answered_only_after_its_post_returns() {
        let config = EngineConfig::default();
        let mut p = Protocol::new(&config, crc32c::crc32c);
        let spec = CommSpec {
            cookie: 0x5a,
            group: [0x5a; 14],
            members: (0..2).map(PeerId).collect(),
            my_rank: 0,
            seed: 1,
            layout: Layout::FLAT,
            key: Secret([0x5a; 32]),
        };
        let comm = p.create_comm(spec).unwrap();
        assert_eq!(comm, CommHandle(0));
        let msg: Vec<u8> = (0..100u8).collect();
        let mut host = Host { mem: msg, ..Host::default() };
        let buf = Resolved { segment: SegmentHandle(1), offset: 0 };
        p.post_bcast(Post::plain(comm, 0, buf, 100, 1), 0, &mut host).unwrap();
        assert!(host.done.is_empty(), "no answer inside the post");
        assert_eq!(host.sent, 0, "nothing sent before the message is loaded");
        assert_eq!(host.jobs.len(), 1);
        let job = host.jobs[0];
        assert_eq!((job.dir, job.len), (DmaDir::Load, 100));
        assert!(p.staging(job.token).is_some_and(|s| s.iter().all(|&b| b == 0)), "not loaded yet");
        assert_eq!(p.answer_jobs(5, &mut host), 1);
        assert!(host.jobs.is_empty());
        assert_eq!(host.done.len(), 1);
        assert_eq!((host.done[0].status, host.done[0].bytes), (StatusKind::Ok, 100));
        assert!(p.staging(job.token).is_none(), "the load is over: the job has no staging any more");

        // The next broadcast's host range lies past the host's memory.
        let far = Resolved { segment: SegmentHandle(1), offset: 1 << 20 };
        p.post_bcast(Post::plain(comm, 0, far, 100, 2), 10, &mut host).unwrap();
        assert_eq!(host.done.len(), 1);
        assert_eq!(p.answer_jobs(10, &mut host), 1);
        assert_eq!(host.done[1].status, StatusKind::OutOfBounds);
    }
}
