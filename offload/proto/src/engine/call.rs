//! The collectives the engine dispatches over, one variant each: what the dispatcher holds for
//! a call while it runs (`calls` in [`super::Engine`]), and hands every event of the call to,
//! whatever the collective. Each variant's type and its `start` live in the collective's folder;
//! a new collective adds a folder, a variant here and an arm of the planner (`planner.rs`).
use crate::engine::allgather::Allgather;
use crate::engine::allreduce::Allreduce;
use crate::engine::alltoall::Alltoall;
use crate::engine::barrier::Barrier;
use crate::engine::bcast::Bcast;
use crate::engine::cx::{Collective, Cx, Progress};
use crate::engine::ids::OpId;
use crate::engine::scan::Scan;
use crate::transfer::protocol::Outcome;

/// One collective call in progress at this engine.
#[derive(Debug)]
pub(crate) enum Call {
    Bcast(Bcast),
    Barrier(Barrier),
    Allgather(Allgather),
    /// An allreduce or a reduce.
    Allreduce(Allreduce),
    Alltoall(Alltoall),
    /// A scan or an exscan.
    Scan(Scan),
}

impl Call {
    fn inner(&mut self) -> &mut dyn Collective {
        match self {
            Call::Bcast(c) => c,
            Call::Barrier(c) => c,
            Call::Allgather(c) => c,
            Call::Allreduce(c) => c,
            Call::Alltoall(c) => c,
            Call::Scan(c) => c,
        }
    }

    fn get(&self) -> &dyn Collective {
        match self {
            Call::Bcast(c) => c,
            Call::Barrier(c) => c,
            Call::Allgather(c) => c,
            Call::Allreduce(c) => c,
            Call::Alltoall(c) => c,
            Call::Scan(c) => c,
        }
    }

    /// The host operation it completes.
    pub(crate) fn op(&self) -> OpId {
        self.get().op()
    }

    /// Whether it counts among its process's composed calls in flight ([`Collective::in_window`]).
    pub(crate) fn in_window(&self) -> bool {
        self.get().in_window()
    }

    /// One of its parts ended ([`Collective::part_done`]).
    pub(crate) fn part_done(&mut self, outcome: Outcome, cx: &mut Cx<'_>) -> Progress {
        self.inner().part_done(outcome, cx)
    }
}
