//! A composed collective — an allgather, allreduce, reduce or alltoall the engine builds from
//! its reliable broadcast (`allgather.rs`, `alltoall.rs`) — while its
//! parts run: the host operation it completes, the parts not over yet, the first failure, the
//! parts' counters summed, and the step some take once every part is over (an allreduce's
//! reduction, an alltoall's copies into place). Each part names its call ([`PartOf::Call`]),
//! so the one path that finishes broadcasts finishes parts too ([`Engine::finish_part`]).
use crate::engine::ids::{CallId, OpId, PartOf};
use crate::engine::reduction::Then;
use crate::engine::{failed, Dma, Engine, Job};
use crate::intake::regions::Resolved;
use crate::intake::HostId;
use crate::transfer::protocol::{OpCounters, Outcome};
use ringcast_abi::{DataType, ReduceOp, RegionKey, StatusKind};

/// A composed collective in progress: the host operation it completes and what is left.
#[derive(Debug)]
pub(crate) struct Call {
    /// The host operation.
    pub(crate) parent: OpId,
    /// Parts not over yet.
    remaining: u32,
    /// The first failure, else `Ok`.
    status: StatusKind,
    /// Bytes reported on success.
    bytes: u64,
    /// The parts' counters, summed.
    pub(crate) counters: OpCounters,
    /// An allreduce: what is reduced once every part is over.
    pub(crate) reduce: Option<Reduce>,
    /// An alltoall: which blocks are copied into place once every part is over.
    pub(crate) scatter: Option<Scatter>,
}

/// An allreduce's last step: the parts gathered in `work` — `size` blocks of `len` bytes
/// side by side (one per rank), or one block per node at its leader's place (`by_node`, the
/// leader-based composition: `len` bytes at `first · len` for each node's first rank `first`)
/// — reduced with `spec` in rank (node) order into its first block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reduce {
    pub(crate) spec: (DataType, ReduceOp),
    pub(crate) work: Resolved,
    pub(crate) len: u64,
    pub(crate) size: u32,
    /// The communicator whose nodes' leaders hold the parts, when they are per node.
    pub(crate) by_node: Option<u64>,
}

/// The context a composed collective's parts carry ([`crate::transfer::protocol::Post::context`]):
/// its opcode, and an allreduce's element type and operation — so ranks that posted different
/// calls (an allgather against an allreduce, another type or operation) fail with
/// `DigestMismatch` instead of reducing each other's bytes their own way.
pub(crate) fn call_context(opcode: ringcast_abi::Opcode, reduce: Option<(DataType, ReduceOp)>) -> u64 {
    let (t, o) = reduce.map_or((0, 0), |(t, o)| (t.0, o.0));
    u64::from(opcode.0) | u64::from(t) << 8 | u64::from(o) << 16
}

impl Call {
    /// A composed collective completing host operation `parent` after `parts` parts, with
    /// `bytes` on success.
    pub(crate) fn new(parent: OpId, parts: u32, bytes: u64) -> Self {
        Call {
            parent,
            remaining: parts,
            status: StatusKind::Ok,
            bytes,
            counters: OpCounters::default(),
            reduce: None,
            scatter: None,
        }
    }
}

/// An alltoall's last step: the blocks to copy into place once every part is over.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scatter {
    pub(crate) host: HostId,
    pub(crate) send: Resolved,
    pub(crate) work: Resolved,
    pub(crate) len: u64,
    pub(crate) size: u32,
    pub(crate) me: u32,
    /// The send and work buffers' regions.
    pub(crate) keys: [RegionKey; 2],
}

/// `base` moved `by` bytes on.
pub(crate) fn at(base: Resolved, by: u64) -> Resolved {
    Resolved { segment: base.segment, offset: base.offset + by }
}

impl Engine {
    /// One part of call `key` ended with `outcome`; the last one finishes its host
    /// operation.
    pub(crate) fn finish_part(&mut self, key: CallId, outcome: Outcome) {
        let Some(c) = self.calls.get_mut(key) else { return };
        c.remaining = c.remaining.saturating_sub(1);
        if outcome.status != StatusKind::Ok && c.status == StatusKind::Ok {
            c.status = outcome.status;
        }
        c.counters.absorb(outcome.counters);
        if c.remaining > 0 {
            return;
        }
        let Some(c) = self.calls.remove(key) else { return };
        if let (StatusKind::Ok, Some(s)) = (c.status, c.scatter) {
            return self.scatter_blocks(c.parent, s, c.counters);
        }
        if let (StatusKind::Ok, Some(r)) = (c.status, c.reduce) {
            // Every part is in the work buffer: read them back and reduce them.
            let then = Then::Complete { op: c.parent, counters: c.counters };
            let mut sources = core::mem::take(&mut self.reduce_sources);
            sources.clear();
            match (r.by_node, self.node.as_ref()) {
                (None, _) => sources.push((r.work, r.size)),
                (Some(comm), Some(node)) => {
                    // One block per node, at its first rank's place (`allgather.rs`).
                    let nodes = node.ranges(comm).map_or(&[][..], |(n, _)| n);
                    sources.extend(nodes.iter().map(|&(first, _)| (at(r.work, u64::from(first) * r.len), 1)));
                }
                (Some(_), None) => {}
            }
            if sources.is_empty() {
                // The communicator went away meanwhile.
                self.reduce_sources = sources;
                return self.finish_collective(c.parent, failed(StatusKind::UnknownCommunicator));
            }
            self.reduce_into(r.spec, r.len, &sources, r.work, then);
            self.reduce_sources = sources;
            return;
        }
        let bytes = if c.status == StatusKind::Ok { c.bytes } else { 0 };
        self.finish_collective(c.parent, Outcome { status: c.status, bytes, counters: c.counters });
    }

    /// Composed collectives `host` has in flight (the one being started included), on any
    /// communicator: how many calls a root of their parts may be ahead of a receiver
    /// ([`crate::transfer::env::Post::window`]; an over-count only makes a rendezvous likelier).
    pub(crate) fn calls_in_flight(&self, host: HostId) -> u32 {
        let mine = self.calls.values().filter(|c| self.ops.get(c.parent).is_some_and(|o| o.host == host));
        (mine.count() as u32).max(1)
    }

    /// The host whose operation `part` completes.
    pub(crate) fn host_of(&self, part: PartOf) -> Option<HostId> {
        let op = match part {
            PartOf::Call(call) => self.calls.get(call)?.parent,
            PartOf::Op(op) => op,
        };
        self.ops.get(op).map(|o| o.host)
    }

    /// Every part of host operation `parent`'s alltoall is over: copy block `me` of each into
    /// its place; the last copy completes the operation (with the parts' `counters`).
    pub(crate) fn scatter_blocks(&mut self, parent: OpId, s: Scatter, counters: OpCounters) {
        let whole = s.len * u64::from(s.size);
        let mut composite = Call::new(parent, s.size, whole);
        composite.counters = counters;
        let call = self.calls.insert(composite);
        let mine = u64::from(s.me) * s.len;
        for r in 0..s.size {
            let (src, src_key) = match r == s.me {
                true => (at(s.send, mine), s.keys[0]),
                false => (at(s.work, (1 + u64::from(r)) * whole + mine), s.keys[1]),
            };
            let dst = at(s.work, u64::from(r) * s.len);
            let job = self.jobs.insert(Job::Part { call });
            self.out.dma(job, Dma::Copy { host: s.host, src, dst, len: s.len, keys: [src_key, s.keys[1]] });
        }
    }
}
