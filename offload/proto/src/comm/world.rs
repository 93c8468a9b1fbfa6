//! The job's world communicator: how many host processes each node (engine) serves, and so
//! where every process rank lives.
//!
//! Ranks are numbered node by node: node 0's processes first, then node 1's, and so on. A
//! uniform world has `ppn` processes on every node (rank = `node·ppn + local`); an uneven one
//! has a count per node (`RINGCAST_NODE_RANKS`, e.g. 30 ranks on 4 nodes as `8,8,7,7`) — what
//! a launcher filling nodes unevenly produces. Every part of the engine that maps a world rank
//! to its node asks this type, so the gather, communicator creation, the intake's rank checks
//! and the host library agree.
use alloc::sync::Arc;
use alloc::vec::Vec;

/// Most processes a world may hold.
pub const MAX_WORLD: u32 = 1 << 24;

/// The shape of the world communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum World {
    /// `ppn` processes on each of `nodes` nodes.
    Uniform {
        /// Nodes (engines).
        nodes: u32,
        /// Processes per node (≥ 1).
        ppn: u32,
    },
    /// A count per node: `starts[n]` is node `n`'s first rank, `starts[nodes]` the world size
    /// (strictly increasing: every node serves at least one process).
    Uneven {
        /// Prefix sums of the counts, `nodes + 1` entries.
        starts: Arc<[u32]>,
    },
}

/// Why a list of counts does not make a world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorldError {
    /// No nodes, or a node with no process.
    Empty,
    /// More than [`MAX_WORLD`] processes.
    TooLarge,
}

impl World {
    /// The world with `counts[n]` processes on node `n`; uniform counts give a
    /// [`World::Uniform`].
    pub fn from_counts(counts: &[u32]) -> Result<World, WorldError> {
        if counts.is_empty() || counts.contains(&0) {
            return Err(WorldError::Empty);
        }
        let mut starts = Vec::with_capacity(counts.len() + 1);
        let mut total = 0u32;
        starts.push(0);
        for &c in counts {
            total = total.checked_add(c).filter(|&t| t <= MAX_WORLD).ok_or(WorldError::TooLarge)?;
            starts.push(total);
        }
        if counts.iter().all(|&c| c == counts[0]) {
            return Ok(World::Uniform { nodes: counts.len() as u32, ppn: counts[0] });
        }
        Ok(World::Uneven { starts: starts.into() })
    }

    /// Nodes (engines).
    pub fn nodes(&self) -> u32 {
        match self {
            World::Uniform { nodes, .. } => *nodes,
            World::Uneven { starts } => starts.len() as u32 - 1,
        }
    }

    /// Processes in all.
    pub fn size(&self) -> u32 {
        match self {
            World::Uniform { nodes, ppn } => nodes * ppn,
            World::Uneven { starts } => starts.last().copied().unwrap_or(0),
        }
    }

    /// Node `node`'s first rank (the world size past the last node).
    pub fn start(&self, node: u32) -> u32 {
        match self {
            World::Uniform { nodes, ppn } => node.min(*nodes) * ppn,
            World::Uneven { starts } => starts.get(node as usize).copied().unwrap_or_else(|| self.size()),
        }
    }

    /// Processes on node `node` (0 for a node outside the world).
    pub fn count(&self, node: u32) -> u32 {
        if node >= self.nodes() {
            return 0;
        }
        self.start(node + 1) - self.start(node)
    }

    /// The most processes any node serves.
    pub fn max_count(&self) -> u32 {
        (0..self.nodes()).map(|n| self.count(n)).max().unwrap_or(0)
    }

    /// Whether every node serves the same number of processes.
    pub fn is_uniform(&self) -> bool {
        matches!(self, World::Uniform { .. })
    }

    /// The rank of node `node`'s local process `local`, if both exist.
    pub fn rank(&self, node: u32, local: u32) -> Option<u32> {
        (local < self.count(node)).then(|| self.start(node) + local)
    }

    /// The node holding rank `r`, if it is in the world.
    pub fn node_of(&self, r: u32) -> Option<u32> {
        if r >= self.size() {
            return None;
        }
        Some(match self {
            World::Uniform { ppn, .. } => r / ppn,
            // The last start not above `r` (starts strictly increase).
            World::Uneven { starts } => starts.partition_point(|&s| s <= r) as u32 - 1,
        })
    }

    /// Rank `r`'s node and its local rank there.
    pub fn locate(&self, r: u32) -> Option<(u32, u32)> {
        let n = self.node_of(r)?;
        Some((n, r - self.start(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_counts_make_a_uniform_world() {
        let w = World::from_counts(&[4, 4, 4]).unwrap();
        assert_eq!(w, World::Uniform { nodes: 3, ppn: 4 });
        assert_eq!((w.size(), w.nodes(), w.max_count()), (12, 3, 4));
        assert_eq!(w.locate(9), Some((2, 1)));
        assert_eq!((w.rank(1, 3), w.rank(1, 4), w.rank(3, 0)), (Some(7), None, None));
        assert_eq!(w.node_of(12), None);
    }

    #[test]
    fn an_uneven_world_numbers_ranks_node_by_node() {
        // 30 ranks on 4 nodes.
        let w = World::from_counts(&[8, 8, 7, 7]).unwrap();
        assert!(!w.is_uniform());
        assert_eq!((w.size(), w.nodes(), w.max_count()), (30, 4, 8));
        assert_eq!((w.count(2), w.count(4)), (7, 0));
        let located: Vec<_> = (0..30).map(|r| w.locate(r).unwrap()).collect();
        for (r, &(n, l)) in located.iter().enumerate() {
            assert_eq!(w.rank(n, l), Some(r as u32), "rank {r} round-trips");
        }
        assert_eq!((located[7], located[8], located[22], located[23]), ((0, 7), (1, 0), (2, 6), (3, 0)));
        assert_eq!((w.locate(30), w.rank(2, 7)), (None, None));
        let small = World::from_counts(&[2, 1]).unwrap();
        assert_eq!((0..4).map(|r| small.node_of(r)).collect::<Vec<_>>(), [Some(0), Some(0), Some(1), None]);
    }

    #[test]
    fn empty_nodes_and_huge_worlds_are_refused() {
        assert_eq!(World::from_counts(&[]), Err(WorldError::Empty));
        assert_eq!(World::from_counts(&[3, 0, 2]), Err(WorldError::Empty));
        assert_eq!(World::from_counts(&[MAX_WORLD, 1]), Err(WorldError::TooLarge));
        assert_eq!(World::from_counts(&[u32::MAX, u32::MAX]), Err(WorldError::TooLarge));
    }
}
