//! The barrier on the delayed synchronization's tree against the barrier it replaced — one
//! one-byte broadcast rooted at each engine — on bare protocols ([`crate::world`]), the
//! latency-only fabric, no loss: latency and datagrams received per barrier against the number
//! of engines `E` (`ringcast paper`, study 7; docs/protocol.md, Barrier).
//!
//! Every engine posts round `k` at the same virtual instant, once the last engine finished
//! round `k − 1` (the barrier's own pacing); a round's latency is from that instant to the last
//! engine's completion. The tree needs `2 ⌊log₂ E⌋` one-way hops and `2 (E − 1)` datagrams;
//! the broadcasts one multicast hop each, but `E (E − 1)` datagrams received, plus their own
//! delayed synchronization — which is why the broadcast variant is run to 64 engines only.
use super::experiments::{fabric, one_comm, paper_config};
use super::world::World;
use ringcast_abi::StatusKind;
use ringcast_proto::intake::regions::{Resolved, SegmentHandle};
use ringcast_proto::rng::SimRng;
use ringcast_proto::transfer::protocol::{Post, PostError};
use ringcast_proto::Nanos;

/// How the barrier is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `Protocol::post_barrier`: an epoch of the synchronization cut short.
    Tree,
    /// `E` one-byte broadcasts, one rooted at each engine (the composition before).
    Broadcasts,
}

/// What `rounds` barriers on `engines` engines measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BarrierCost {
    /// Mean latency of a barrier, ns.
    pub latency_ns: f64,
    /// Datagrams received per barrier, over all engines.
    pub frames: f64,
    /// Completions that were not `Ok` (0 on a clean fabric).
    pub errors: usize,
}

/// Runs `rounds` barriers of `shape` on `engines` engines, one rank each, link latency
/// `latency`.
pub fn barrier_cost(engines: usize, rounds: usize, shape: Shape, latency: Nanos, seed: u64) -> BarrierCost {
    let config = paper_config();
    let protos =
        (0..engines).map(|_| ringcast_proto::transfer::protocol::Protocol::new(&config, crc32c::crc32c));
    let mut rng = SimRng::new(seed);
    let mut world = World::new(protos, fabric(latency, 0.0), rng.fork(), crc32c::crc32c);
    let handles = one_comm(&mut world, 0xba44, seed, Default::default());
    for node in world.nodes.iter_mut() {
        node.mem.insert(1, vec![0; engines]);
    }
    // Parts of the current round each engine still has to post (broadcasts: roots in order),
    // and completions it still waits for.
    let parts = if shape == Shape::Tree { 1 } else { engines };
    let mut next_part = vec![0usize; engines];
    let mut left = vec![parts; engines];
    let mut round = 0usize;
    let (mut start, mut total, mut errors) = (0 as Nanos, 0 as Nanos, 0usize);
    let post = |world: &mut World, r: usize, next_part: &mut [usize], round: usize| {
        while next_part[r] < parts {
            let j = next_part[r];
            let token = (round * parts + j) as u64;
            let h = handles[r];
            let res = world.with_node(r, |proto, now, env| {
                let mut env = env;
                match shape {
                    Shape::Tree => proto.post_barrier(h, token, 0x7, now, &mut env),
                    Shape::Broadcasts => {
                        let buf = Resolved { segment: SegmentHandle(1), offset: j as u64 };
                        let p = Post {
                            comm: h,
                            root: j as u32,
                            rank_root: j as u32,
                            slot: 0,
                            buf: Some(buf),
                            len: 1,
                            token,
                            context: 0x7,
                            window: 0,
                        };
                        proto.post_bcast(p, now, &mut env)
                    }
                }
            });
            match res {
                Err(PostError::WouldBlock) => return, // its channel is still held: later
                Ok(()) | Err(PostError::Refused(_)) => next_part[r] += 1,
            }
        }
    };
    for r in 0..engines {
        post(&mut world, r, &mut next_part, round);
    }
    let before = world.delivered();
    let mut cursor = 0;
    while round < rounds {
        let Some(step) = world.step() else { break };
        if let Some(r) = step {
            post(&mut world, r, &mut next_part, round);
        }
        while cursor < world.done().len() {
            let d = world.done()[cursor];
            cursor += 1;
            if d.outcome.status != StatusKind::Ok {
                errors += 1;
            }
            left[d.node] -= 1;
        }
        if left.iter().all(|&l| l == 0) {
            total += world.now() - start;
            round += 1;
            start = world.now();
            left.fill(parts);
            next_part.fill(0);
            if round < rounds {
                for r in 0..engines {
                    post(&mut world, r, &mut next_part, round);
                }
            }
        }
    }
    let n = round.max(1) as f64;
    BarrierCost {
        latency_ns: total as f64 / n,
        frames: (world.delivered() - before) as f64 / n,
        errors: errors + (rounds - round) * engines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree's datagrams are exactly its edges, up and down; the broadcasts' at least one
    /// per ordered pair of engines: the counts the module doc states, on a clean fabric.
    #[test]
    fn the_tree_sends_one_frame_per_edge_each_way() {
        for e in [2usize, 5, 16] {
            let t = barrier_cost(e, 6, Shape::Tree, 1_000, 1);
            assert_eq!(t.errors, 0);
            assert_eq!(t.frames, 2.0 * (e as f64 - 1.0), "{e} engines: {t:?}");
            let depth = (e as f64).log2().floor();
            assert!(t.latency_ns >= 2.0 * depth * 1_000.0, "{e} engines: {t:?}");
            let b = barrier_cost(e, 6, Shape::Broadcasts, 1_000, 1);
            assert_eq!(b.errors, 0);
            assert!(b.frames >= (e * (e - 1)) as f64, "{e} engines: {b:?}");
        }
    }
}
