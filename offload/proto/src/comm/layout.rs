//! Where a communicator's ranks sit: sites, nodes and ranks per node, block or cyclic — what the
//! hierarchical and multi-site algorithms and the algorithm choice read.
use super::Rank;

/// Where a communicator's ranks sit: `sites` contiguous blocks of ranks (equal but the last),
/// and within each site, nodes of `ppn` ranks placed socket-block (ranks `k·ppn ..` on one
/// node) or socket-cyclic (rank `i` of a site on node `i mod nodes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Ranks per node (≥ 1).
    pub ppn: u32,
    /// Cyclic (true) or block (false) placement of ranks on a site's nodes.
    pub cyclic: bool,
    /// Sites (≥ 1).
    pub sites: u32,
}

impl Default for Layout {
    fn default() -> Self {
        Layout::FLAT
    }
}

impl Layout {
    /// One rank per node, one site.
    pub const FLAT: Layout = Layout { ppn: 1, cyclic: false, sites: 1 };

    fn ppn(&self) -> u32 {
        self.ppn.max(1)
    }

    /// Ranks of a full site.
    fn site_span(&self, size: u32) -> u32 {
        size.div_ceil(self.sites.clamp(1, size.max(1))).max(1)
    }

    /// Sites actually holding ranks.
    pub fn site_count(&self, size: u32) -> u32 {
        size.div_ceil(self.site_span(size)).max(1)
    }

    /// The site of rank `r`.
    pub fn site_of(&self, size: u32, r: Rank) -> u32 {
        r / self.site_span(size)
    }

    /// First rank and rank count of site `s`.
    pub fn site_range(&self, size: u32, s: u32) -> (Rank, u32) {
        let span = self.site_span(size);
        let start = (s * span).min(size);
        (start, (start + span).min(size) - start)
    }

    /// Nodes of a full site.
    fn site_nodes(&self, size: u32) -> u32 {
        self.site_span(size).div_ceil(self.ppn())
    }

    /// Nodes in all.
    pub fn nodes(&self, size: u32) -> u32 {
        let last = self.site_count(size) - 1;
        last * self.site_nodes(size) + self.site_range(size, last).1.div_ceil(self.ppn())
    }

    /// The node of rank `r` (dense numbering, site by site).
    pub fn node_of(&self, size: u32, r: Rank) -> u32 {
        let s = self.site_of(size, r);
        let (start, n) = self.site_range(size, s);
        let i = r - start;
        let nodes = n.div_ceil(self.ppn());
        let local = if self.cyclic { i % nodes } else { i / self.ppn() };
        s * self.site_nodes(size) + local
    }

    /// Calls `f` with each rank of node `node`, in order.
    pub fn for_ranks_of_node(&self, size: u32, node: u32, mut f: impl FnMut(Rank)) {
        let per = self.site_nodes(size);
        let (s, local) = (node / per, node % per);
        let (start, n) = self.site_range(size, s);
        let nodes = n.div_ceil(self.ppn());
        for j in 0..self.ppn() {
            let i = if self.cyclic { local + j * nodes } else { local * self.ppn() + j };
            if i >= n {
                break;
            }
            f(start + i);
        }
    }

    /// The first rank of node `node`.
    pub fn first_of_node(&self, size: u32, node: u32) -> Rank {
        let mut first = None;
        self.for_ranks_of_node(size, node, |r| {
            first.get_or_insert(r);
        });
        first.unwrap_or(0)
    }
}
