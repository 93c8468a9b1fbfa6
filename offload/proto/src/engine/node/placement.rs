//! Where a communicator's ranks live, as one engine needs to know it: which engine (protocol
//! rank) holds a rank and its index among that engine's members ([`Placement`]), and each
//! engine's ranks grouped ([`Members`]) — what an exchange between the engines needs to know
//! of a placement that need not be consecutive (a communicator of every other rank of a block
//! world puts ranks 0, 2, 4, … on one engine and 1, 3, 5, … on the next; a cyclic world the
//! same for the world itself).
//!
//! [`Placement::ranges`] is `None` for such a communicator — a leader-based allgather or the
//! multicast alltoall's node parts need a node's blocks side by side in the result — but the
//! pairwise alltoall (`alltoall/pairwise.rs`) needs only which ranks each engine holds: its
//! blocks go to their places one run of consecutive ranks at a time.
use crate::comm::World;
use alloc::sync::Arc;
use alloc::vec::Vec;

/// Where a communicator's ranks live, as one engine needs to know it: which engine (protocol
/// rank) holds a rank, and whether it is one of this engine's local members.
#[derive(Clone, Debug)]
pub enum Placement {
    /// The world: ranks numbered node by node ([`World`]).
    World {
        /// This engine's node.
        node: u32,
        /// The world's shape.
        world: World,
    },
    /// Any membership: per rank, its engine's protocol rank and its index among that engine's
    /// members.
    Table {
        /// This engine's protocol rank.
        me: u32,
        /// Rank → protocol rank of its engine.
        node_of: Arc<[u32]>,
        /// Rank → index among its engine's members.
        index_of: Arc<[u32]>,
    },
}

impl Placement {
    /// This engine's protocol rank.
    pub fn me(&self) -> u32 {
        match self {
            Placement::World { node, .. } => *node,
            Placement::Table { me, .. } => *me,
        }
    }

    /// The protocol rank (engine) of rank `r`.
    pub fn node(&self, r: u32) -> u32 {
        match self {
            Placement::World { world, .. } => world.node_of(r).unwrap_or(u32::MAX),
            Placement::Table { node_of, .. } => node_of.get(r as usize).copied().unwrap_or(u32::MAX),
        }
    }

    /// Each engine's ranks as one range (first rank, count), in protocol-rank order — `None`
    /// when some engine's ranks are not consecutive (a communicator of every third rank): a
    /// leader-based allgather needs a node's blocks side by side.
    pub fn ranges(&self) -> Option<Vec<(u32, u32)>> {
        match self {
            Placement::World { world, .. } => {
                Some((0..world.nodes()).map(|n| (world.start(n), world.count(n))).collect())
            }
            Placement::Table { node_of, .. } => {
                let mut ranges: Vec<(u32, u32)> = Vec::new();
                for (r, &n) in node_of.iter().enumerate() {
                    let seen = ranges.len();
                    if seen > 0 && n as usize == seen - 1 {
                        ranges[seen - 1].1 += 1; // the current engine goes on
                    } else if n as usize == seen {
                        ranges.push((r as u32, 1)); // engines are numbered by first rank
                    } else {
                        return None; // an engine seen before comes back: not consecutive
                    }
                }
                Some(ranges)
            }
        }
    }

    /// Rank `r`'s local index if it is a member on this engine.
    pub fn local(&self, r: u32) -> Option<u32> {
        match self {
            Placement::World { node, world } => world.locate(r).filter(|l| l.0 == *node).map(|l| l.1),
            Placement::Table { me, node_of, index_of } => {
                (node_of.get(r as usize) == Some(me)).then(|| index_of.get(r as usize).copied()).flatten()
            }
        }
    }
}

/// Engine `j`'s ranks are `ranks[start[j] .. start[j + 1]]`, ascending; engines in
/// protocol-rank order. For a consecutive placement `start[j]` is engine `j`'s first rank and
/// `ranks` is `0, 1, …, size − 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    ranks: Vec<u32>,
    start: Vec<u32>,
}

impl Members {
    /// The grouping of `placement`; `None` when a rank names no engine of it.
    pub fn of(placement: &Placement) -> Option<Members> {
        let (engines, size) = match placement {
            Placement::World { world, .. } => (world.nodes(), world.size()),
            Placement::Table { node_of, .. } => {
                (node_of.iter().copied().max().map_or(Some(0), |m| m.checked_add(1))?, node_of.len() as u32)
            }
        };
        if engines > size {
            return None; // engines are numbered by first rank: each holds one at least
        }
        // Count per engine, then place each rank after its engine's earlier ones.
        let mut start = alloc::vec![0u32; engines as usize + 1];
        for r in 0..size {
            let n = placement.node(r);
            if n >= engines {
                return None;
            }
            start[n as usize + 1] += 1;
        }
        if start[1..].contains(&0) {
            return None; // an engine holding none: not a placement the engine makes
        }
        for j in 0..engines as usize {
            start[j + 1] += start[j];
        }
        let mut fill: Vec<u32> = start[..engines as usize].to_vec();
        let mut ranks = alloc::vec![0u32; size as usize];
        for r in 0..size {
            let n = placement.node(r) as usize;
            ranks[fill[n] as usize] = r;
            fill[n] += 1;
        }
        Some(Members { ranks, start })
    }

    /// The engines.
    pub fn engines(&self) -> u32 {
        self.start.len().saturating_sub(1) as u32
    }

    /// The communicator's size.
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Engine `j`'s ranks, ascending (empty past the last engine).
    pub fn of_engine(&self, j: u32) -> &[u32] {
        match (self.start.get(j as usize), self.start.get(j as usize + 1)) {
            (Some(&a), Some(&b)) => &self.ranks[a as usize..b as usize],
            _ => &[],
        }
    }

    /// How many ranks engine `j` holds.
    pub fn count(&self, j: u32) -> u32 {
        self.of_engine(j).len() as u32
    }

    /// How many ranks the engines before `j` hold: where engine `j`'s blocks start in a layout
    /// grouped by engine.
    pub fn offset(&self, j: u32) -> u32 {
        self.start.get(j as usize).copied().unwrap_or(0)
    }

    /// The most ranks one engine holds.
    pub fn largest(&self) -> u32 {
        self.start.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
    }

    /// Engine `j`'s ranks as maximal runs of consecutive ranks: `(first rank, count, index of
    /// the first among the engine's ranks)` — one run for a consecutive placement.
    pub fn runs(&self, j: u32) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let ranks = self.of_engine(j);
        let mut i = 0usize;
        core::iter::from_fn(move || {
            let first = *ranks.get(i)?;
            let at = i;
            while ranks.get(i + 1) == Some(&(ranks[i] + 1)) {
                i += 1;
            }
            i += 1;
            Some((first, (i - at) as u32, at as u32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::World;
    use alloc::sync::Arc;

    #[test]
    fn a_block_world_is_one_run_per_engine() {
        let world = World::from_counts(&[2, 3, 1]).unwrap();
        let m = Members::of(&Placement::World { node: 1, world }).unwrap();
        assert_eq!((m.engines(), m.size(), m.largest()), (3, 6, 3));
        assert_eq!(m.of_engine(1), &[2, 3, 4]);
        assert_eq!((m.offset(0), m.offset(1), m.offset(2)), (0, 2, 5));
        assert_eq!(m.runs(1).collect::<Vec<_>>(), [(2, 3, 0)]);
        assert!(m.of_engine(3).is_empty());
    }

    #[test]
    fn a_table_groups_ranks_by_engine_in_runs() {
        // Ranks 0..7 on engines 0 1 0 0 1 2 1: engine 0 holds 0, 2, 3; engine 1 holds 1, 4, 6.
        let node_of: Arc<[u32]> = Arc::from(alloc::vec![0, 1, 0, 0, 1, 2, 1]);
        let index_of: Arc<[u32]> = Arc::from(alloc::vec![0, 0, 1, 2, 1, 0, 2]);
        let m = Members::of(&Placement::Table { me: 0, node_of, index_of }).unwrap();
        assert_eq!(m.of_engine(0), &[0, 2, 3]);
        assert_eq!(m.of_engine(1), &[1, 4, 6]);
        assert_eq!(m.of_engine(2), &[5]);
        assert_eq!((m.offset(1), m.offset(2), m.largest()), (3, 6, 3));
        assert_eq!(m.runs(0).collect::<Vec<_>>(), [(0, 1, 0), (2, 2, 1)]);
        assert_eq!(m.runs(1).collect::<Vec<_>>(), [(1, 1, 0), (4, 1, 1), (6, 1, 2)]);
    }

    #[test]
    fn a_rank_naming_no_engine_is_refused() {
        let node_of: Arc<[u32]> = Arc::from(alloc::vec![0, u32::MAX]);
        let index_of: Arc<[u32]> = Arc::from(alloc::vec![0, 0]);
        assert!(Members::of(&Placement::Table { me: 0, node_of, index_of }).is_none());
        // Engines 0 and 2, none on 1.
        let node_of: Arc<[u32]> = Arc::from(alloc::vec![0, 2, 0]);
        let index_of: Arc<[u32]> = Arc::from(alloc::vec![0, 0, 1]);
        assert!(Members::of(&Placement::Table { me: 0, node_of, index_of }).is_none());
    }
}
