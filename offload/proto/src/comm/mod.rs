//! A communicator as the protocol sees it: members, this rank, the cookie and multicast group
//! every frame is checked against, and the topologies the broadcast uses.
//!
//! Topologies are pure functions of (size, root, rank), so every member derives the same ones
//! without exchanging anything:
//! * **ring** (Hoefler et al., stage 2): rank `r` forwards to `r + 1 mod P`; the link into the
//!   root is omitted, so the chain ends at the root's predecessor;
//! * **binomial** tree rooted at `root` (small communicators);
//! * **linear** (root sends to everyone; ≤ 4 ranks);
//! * **sync tree**: a balanced binary tree rooted at rank 0 (the "manager" of Yu et al.) for the
//!   UP (combine ACK/NACK) and DOWN (result) phases.
pub mod auth;
pub mod ident;
mod layout;
pub mod links;
mod world;

use alloc::sync::Arc;
pub use layout::Layout;
use ringcast_abi::frame::DropReason;
pub use world::{World, WorldError, MAX_WORLD};

/// Rank within a communicator.
pub type Rank = u32;

/// Fabric address of a member, as the runner knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// 112-bit multicast group id (docs/design.md §3.1).
pub type GroupId = [u8; 14];

/// How a broadcast's data travels after (or instead of) multicast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    /// Ring successor (multicast algorithm, stage 2).
    Ring,
    /// Binomial tree rooted at the broadcast's root.
    Binomial,
    /// Root to every rank.
    Linear,
}

/// What a member knows of its communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommSpec {
    /// Random per communicator; in every frame header.
    pub cookie: u64,
    /// Multicast group of the communicator.
    pub group: GroupId,
    /// Fabric address of each rank (shared: a simulator with a million members holds one list).
    pub members: Arc<[PeerId]>,
    /// This member's rank.
    pub my_rank: Rank,
    /// Seed agreed at creation (randomized root delay).
    pub seed: u64,
    /// The communicator's secret: keys the tag of every frame and the message MAC
    /// ([`auth`]). Members receive it with the identity; it never travels on the fabric.
    pub key: auth::Secret,
    /// Where the ranks sit (nodes, sites): the hierarchical and multi-site algorithms and the
    /// algorithm choice use it. [`Layout::FLAT`] when unknown.
    pub layout: Layout,
}

/// What every member of a communicator knows alike: its [`CommSpec`] but `my_rank`. A protocol
/// holds it behind an `Arc` beside its own rank (`transfer::state::Spec`), so the ranks of one
/// communicator a simulator runs share one copy (`Protocol::create_comm_shared`): 8 bytes a rank,
/// not 96.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommShared {
    /// See [`CommSpec::cookie`].
    pub cookie: u64,
    /// See [`CommSpec::group`].
    pub group: GroupId,
    /// See [`CommSpec::members`].
    pub members: Arc<[PeerId]>,
    /// See [`CommSpec::seed`].
    pub seed: u64,
    /// See [`CommSpec::key`].
    pub key: auth::Secret,
    /// See [`CommSpec::layout`].
    pub layout: Layout,
}

impl CommShared {
    /// Communicator size.
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }
}

impl CommSpec {
    /// Its shared part, and `my_rank`.
    pub fn split(self) -> (CommShared, Rank) {
        let CommSpec { cookie, group, members, my_rank, seed, key, layout } = self;
        (CommShared { cookie, group, members, seed, key, layout }, my_rank)
    }

    /// Communicator size.
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }

    /// Rank of a member's address (linear scan; used only to authenticate senders).
    pub fn rank_of(&self, peer: PeerId) -> Option<Rank> {
        self.members.iter().position(|&p| p == peer).map(|r| r as Rank)
    }
}

/// Ranks a broadcast rooted at `root` forwards to from `me`, in `topo`, written to `out`;
/// returns how many (at most `out.len()`; a binomial node has at most log2(P) children).
pub fn children(topo: Topology, size: u32, root: Rank, me: Rank, out: &mut [Rank]) -> usize {
    let rel = (me + size - root) % size;
    let mut n = 0;
    let mut push = |r: Rank, n: &mut usize| {
        if *n < out.len() {
            out[*n] = r;
            *n += 1;
        }
    };
    match topo {
        Topology::Ring => {
            if rel + 1 < size {
                push((me + 1) % size, &mut n);
            }
        }
        Topology::Linear => {
            if rel == 0 {
                for k in 1..size {
                    push((root + k) % size, &mut n);
                }
            }
        }
        Topology::Binomial => {
            // Children of relative rank `rel`: rel + 2^k for every 2^k below rel's lowest set
            // bit (all powers for the root), while inside the communicator. Largest subtree first.
            let limit = if rel == 0 { size.next_power_of_two() } else { rel & rel.wrapping_neg() };
            let mut step = limit >> 1;
            while step > 0 {
                if rel + step < size {
                    push((rel + step + root) % size, &mut n);
                }
                step >>= 1;
            }
        }
    }
    n
}

/// The rank a broadcast rooted at `root` reaches `me` from (its repair source), or `None` for
/// the root.
pub fn parent(topo: Topology, size: u32, root: Rank, me: Rank) -> Option<Rank> {
    let rel = (me + size - root) % size;
    if rel == 0 {
        return None;
    }
    let prel = match topo {
        Topology::Ring => rel - 1,
        Topology::Linear => 0,
        Topology::Binomial => rel & (rel - 1), // clear the lowest set bit
    };
    Some((prel + root) % size)
}

/// Parent of `me` in the sync tree (balanced binary tree over ranks, manager = rank 0).
pub fn sync_parent(me: Rank) -> Option<Rank> {
    (me > 0).then(|| (me - 1) / 2)
}

/// Children of `me` in the sync tree.
pub fn sync_children(size: u32, me: Rank) -> impl Iterator<Item = Rank> {
    [2 * me + 1, 2 * me + 2].into_iter().filter(move |&c| c < size)
}

/// Checks a frame's sender against the communicator: known rank at the claimed address.
pub fn authenticate(members: &[PeerId], src_rank: Rank, from: PeerId) -> Result<Rank, DropReason> {
    match members.get(src_rank as usize) {
        Some(&p) if p == from => Ok(src_rank),
        _ => Err(DropReason::BadRank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all_children(topo: Topology, size: u32, root: Rank, me: Rank) -> Vec<Rank> {
        let mut buf = [0; 64];
        let n = children(topo, size, root, me, &mut buf);
        buf[..n].to_vec()
    }

    #[test]
    fn ring_omits_the_link_into_the_root() {
        assert_eq!(all_children(Topology::Ring, 5, 2, 2), vec![3]);
        assert_eq!(all_children(Topology::Ring, 5, 2, 4), vec![0]);
        assert_eq!(all_children(Topology::Ring, 5, 2, 1), Vec::<Rank>::new(), "root's predecessor");
        assert_eq!(parent(Topology::Ring, 5, 2, 3), Some(2));
        assert_eq!(parent(Topology::Ring, 5, 2, 2), None);
    }

    #[test]
    fn binomial_matches_the_textbook_tree() {
        // Root 0, P = 8: 0 → 4, 2, 1; 4 → 6, 5; 2 → 3; 6 → 7.
        assert_eq!(all_children(Topology::Binomial, 8, 0, 0), vec![4, 2, 1]);
        assert_eq!(all_children(Topology::Binomial, 8, 0, 4), vec![6, 5]);
        assert_eq!(all_children(Topology::Binomial, 8, 0, 2), vec![3]);
        assert_eq!(all_children(Topology::Binomial, 8, 0, 7), Vec::<Rank>::new());
        assert_eq!(parent(Topology::Binomial, 8, 0, 6), Some(4));
    }

    proptest! {
        /// Every topology is a spanning tree rooted at `root`: each non-root rank has exactly one
        /// parent, is the child of that parent, and is reachable from the root.
        #[test]
        fn topologies_are_spanning_trees(size in 1u32..300, root_pick in 0u32..300, t in 0u8..3) {
            let root = root_pick % size;
            let topo = [Topology::Ring, Topology::Binomial, Topology::Linear][t as usize];
            let mut reached = vec![false; size as usize];
            let mut stack = vec![root];
            reached[root as usize] = true;
            let mut buf = vec![0; size as usize];
            while let Some(r) = stack.pop() {
                let n = children(topo, size, root, r, &mut buf);
                for &c in &buf[..n] {
                    prop_assert!(!reached[c as usize], "{c} reached twice");
                    prop_assert_eq!(parent(topo, size, root, c), Some(r));
                    reached[c as usize] = true;
                    stack.push(c);
                }
            }
            prop_assert!(reached.iter().all(|&x| x));
        }

        #[test]
        fn sync_tree_is_a_spanning_tree(size in 1u32..1000) {
            let mut seen = 0;
            for r in 0..size {
                for c in sync_children(size, r) {
                    prop_assert_eq!(sync_parent(c), Some(r));
                    seen += 1;
                }
            }
            prop_assert_eq!(seen, size - 1);
        }
    }
}
