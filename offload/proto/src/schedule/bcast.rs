//! The broadcast algorithms, as per-fragment routing rules.
//!
//! Every algorithm the engine ships is the same state machine ([`crate::transfer::protocol`]) with a
//! different answer to two questions: *to whom does a rank forward fragment `seq` once it holds
//! it* ([`forward`]), and *whom does it ask when `seq` is missing* ([`source`]). Forwarding each
//! fragment as soon as it arrives is what pipelines the trees and the chain; fragments travel
//! through the engine's one send path, so loss repair, digests, channels and the delayed
//! synchronization apply to all of them alike.
//!
//! * [`Algorithm::Multicast`] — Hoefler et al.: multicast, then ring repair (this module only
//!   routes the ring; the multicast itself is the root's);
//! * [`Algorithm::Linear`], [`Algorithm::Binomial`] — the root sends to everyone / the binomial
//!   tree;
//! * [`Algorithm::Chain`] — pipelined chain `root → root+1 → …`;
//! * [`Algorithm::BinaryTree`] — pipelined binary tree, one NIC lane per child;
//! * [`Algorithm::ScatterAllgather`] — van de Geijn: fragment `seq` belongs to rank
//!   `owner(seq)`; it goes down the binomial tree towards its owner only (scatter), then from the
//!   owner along a binomial tree rooted there (the allgather by recursive doubling, per block);
//! * [`Algorithm::DualTree`] — Chiba et al.: the ranks but the root split into halves A and B,
//!   each a binary tree; even fragments go down tree A, odd ones down tree B, each child on its
//!   own lane; the leaves of A hand A's fragments to B's nodes (and vice versa: the leaf swap),
//!   so every NIC lane sends and receives. Any rank count (not only `4n − 1`); across sites, each
//!   site runs the pair of trees and the last node of each tree feeds the next site's tree
//!   (chained, so a WAN link carries the message once);
//! * [`Algorithm::Hierarchical`] — Mamidala et al.: one leader per node (the root on its node);
//!   scatter to the leaders by recursive halving, ring allgather among them, and each leader
//!   copies every fragment to its node's other ranks as it arrives (overlapped).
//!
//! A fragment can reach a rank twice in scatter–allgather (once passing through in the scatter,
//! once in the allgather): the allgather copy must still be forwarded, so data frames carry
//! their [`Phase`].
use crate::comm::{children, parent, Layout, Rank, Topology};

/// A broadcast algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Multicast plus ring repair (Hoefler et al.).
    Multicast,
    /// Root sends to every rank.
    Linear,
    /// Binomial tree.
    Binomial,
    /// Pipelined chain.
    Chain,
    /// Pipelined binary tree.
    BinaryTree,
    /// Van de Geijn: binomial scatter, then allgather.
    ScatterAllgather,
    /// Multi-lane dual binary trees with leaf swap (Chiba et al.), chained across sites.
    DualTree,
    /// Leader-based: scatter and ring allgather among node leaders, intra-node copy (Mamidala).
    Hierarchical,
}

impl Algorithm {
    /// Every algorithm, in a stable order.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::Multicast,
        Algorithm::Linear,
        Algorithm::Binomial,
        Algorithm::Chain,
        Algorithm::BinaryTree,
        Algorithm::ScatterAllgather,
        Algorithm::DualTree,
        Algorithm::Hierarchical,
    ];

    /// Short name (command lines, tunables, tables).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Multicast => "multicast",
            Algorithm::Linear => "linear",
            Algorithm::Binomial => "binomial",
            Algorithm::Chain => "chain",
            Algorithm::BinaryTree => "binary",
            Algorithm::ScatterAllgather => "scatter-allgather",
            Algorithm::DualTree => "dual-tree",
            Algorithm::Hierarchical => "hierarchical",
        }
    }

    /// The algorithm called `name` (see [`Algorithm::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether repair of this algorithm may be selective (only the multicast's ring forwards
    /// data that most ranks already hold).
    pub fn uses_multicast(self) -> bool {
        self == Algorithm::Multicast
    }
}

impl core::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a data fragment travels: tree-like algorithms ignore it; scatter–allgather forwards an
/// allgather copy even where the scatter already passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The algorithm's normal forwarding (and repair answers, which are never forwarded as
    /// allgather copies).
    Tree = 0,
    /// Scatter towards the fragment's owner.
    Scatter = 1,
    /// Allgather from the fragment's owner.
    Allgather = 2,
}

impl Phase {
    /// Phase from the 2 bits data frames carry.
    pub fn from_bits(b: u16) -> Phase {
        match b & 3 {
            1 => Phase::Scatter,
            2 => Phase::Allgather,
            _ => Phase::Tree,
        }
    }
}

/// The lane a send uses when an algorithm does not pick one: all of a node's NICs aggregated.
pub const LANE_ANY: u8 = u8::MAX;

/// A lane choice for both ends: the sender's NIC (`tx`, low nibble) and the receiver's (`rx`,
/// high nibble) — the sender picks its NIC, and which of the receiver's addresses it sends to
/// picks the receiving one. The dual trees need both: a node sends to its two children on two
/// lanes, and receives its own tree's half and the swapped half on two lanes.
pub fn lanes(tx: u8, rx: u8) -> u8 {
    (tx & 0x0f) | (rx & 0x0f) << 4
}

/// The sending lane of a [`lanes`] value (`None`: aggregated).
pub fn tx_lane(lane: u8) -> Option<u8> {
    (lane != LANE_ANY).then_some(lane & 0x0f)
}

/// The receiving lane of a [`lanes`] value (`None`: aggregated).
pub fn rx_lane(lane: u8) -> Option<u8> {
    (lane != LANE_ANY).then_some(lane >> 4)
}

/// One forwarding step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// Destination rank.
    pub to: Rank,
    /// NIC lanes at both ends ([`lanes`]), or [`LANE_ANY`].
    pub lane: u8,
    /// Phase the copy travels in.
    pub phase: Phase,
}

/// The shape of one broadcast: communicator size, root, placement, fragment count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Ranks.
    pub size: u32,
    /// Root rank.
    pub root: Rank,
    /// Placement.
    pub layout: Layout,
    /// Fragments of the message.
    pub count: u32,
}

/// The hops of one fragment are handed to a callback: a linear root has `size − 1` of them, and
/// the caller sends each at once (no buffer, no allocation).
struct Out<'a, F: FnMut(Hop)> {
    emit: &'a mut F,
    n: usize,
}

impl<F: FnMut(Hop)> Out<'_, F> {
    fn push(&mut self, to: Rank, lane: u8, phase: Phase) {
        (self.emit)(Hop { to, lane, phase });
        self.n += 1;
    }
}

/// Where rank `me`, holding fragment `seq` of broadcast `shape` (received in `phase`; `fresh`
/// when it is the first copy here), forwards it. The root calls it with `Phase::Scatter`,
/// `fresh = true` for each fragment to start the broadcast. Each hop goes to `emit`; returns
/// how many.
pub fn forward(
    alg: Algorithm,
    shape: &Shape,
    me: Rank,
    seq: u32,
    phase: Phase,
    fresh: bool,
    emit: &mut impl FnMut(Hop),
) -> usize {
    let mut o = Out { emit, n: 0 };
    let Shape { size, root, .. } = *shape;
    if size <= 1 || me >= size || root >= size {
        return 0;
    }
    let rel = (me + size - root) % size;
    let simple = |topo, o: &mut Out<'_, _>| {
        if topo == Topology::Linear {
            // Not through `children`: a forced linear broadcast may have any size.
            if rel == 0 {
                (1..size).for_each(|k| o.push((root + k) % size, LANE_ANY, Phase::Tree));
            }
            return;
        }
        let mut kids = [0; 33]; // a binomial node has at most 32 children
        let n = children(topo, size, root, me, &mut kids);
        for &k in &kids[..n] {
            o.push(k, LANE_ANY, Phase::Tree);
        }
    };
    match alg {
        Algorithm::Multicast | Algorithm::Chain if fresh => simple(Topology::Ring, &mut o),
        Algorithm::Linear if fresh => simple(Topology::Linear, &mut o),
        Algorithm::Binomial if fresh => simple(Topology::Binomial, &mut o),
        Algorithm::BinaryTree if fresh => {
            for (lane, c) in [2 * rel + 1, 2 * rel + 2].into_iter().enumerate() {
                if c < size {
                    o.push((c + root) % size, lanes(lane as u8, 0), Phase::Tree);
                }
            }
        }
        Algorithm::ScatterAllgather => {
            let owner = owner(seq, shape.count, size);
            let emit = &mut |r, ph| o.push((r + root) % size, LANE_ANY, ph);
            scatter_allgather(size, rel, owner, phase, Gather::Binomial, emit);
        }
        Algorithm::DualTree if fresh => dual_forward(shape, me, seq, &mut o),
        Algorithm::Hierarchical => hier_forward(shape, me, seq, phase, fresh, &mut o),
        _ => {}
    }
    o.n
}

/// Owner (relative rank) of fragment `seq` of `count` among `n` ranks: contiguous blocks, as van
/// de Geijn cuts the message.
fn owner(seq: u32, count: u32, n: u32) -> u32 {
    ((seq as u64 * n as u64) / count.max(1) as u64) as u32 % n.max(1)
}

/// How the allgather after a scatter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gather {
    /// A binomial tree rooted at each block's owner: recursive doubling per block (van de Geijn).
    Binomial,
    /// Around the ring from each block's owner (Mamidala's leaders).
    Ring,
}

/// Scatter by recursive halving towards each fragment's owner, then `gather`, in relative ranks
/// `0..n` (0 = root). A repair answer (`Phase::Tree`) is never forwarded: the ranks below ask
/// for themselves. `emit(rel, phase)`.
fn scatter_allgather(
    n: u32,
    rel: u32,
    owner: u32,
    phase: Phase,
    gather: Gather,
    emit: &mut impl FnMut(u32, Phase),
) {
    let start = |emit: &mut dyn FnMut(u32, Phase)| match gather {
        Gather::Binomial => {
            let mut kids = [0; 33];
            let k = children(Topology::Binomial, n, owner, rel, &mut kids);
            for &c in &kids[..k] {
                emit(c, Phase::Allgather);
            }
        }
        Gather::Ring => {
            let next = (rel + 1) % n;
            if next != owner {
                emit(next, Phase::Allgather);
            }
        }
    };
    match phase {
        Phase::Scatter if rel == owner => start(emit),
        Phase::Scatter => {
            if let Some(next) = scatter_step(n, rel, owner) {
                emit(next, Phase::Scatter);
            }
        }
        Phase::Allgather => start(emit),
        Phase::Tree => {}
    }
}

/// The next hop of a scatter by recursive halving from relative rank `rel` towards `owner`,
/// inside `rel`'s binomial subtree: the child at the highest power of two not past the owner.
fn scatter_step(n: u32, rel: u32, owner: u32) -> Option<u32> {
    let d = owner.wrapping_sub(rel);
    let sub = if rel == 0 { n.next_power_of_two() } else { rel & rel.wrapping_neg() };
    (owner > rel && d < sub).then(|| rel + (1 << (31 - d.leading_zeros())))
}

/// One site's pair of trees: the site's ranks except its root in two halves.
#[derive(Clone, Copy, Debug)]
struct DualSite {
    /// First rank of the site's rotated order (the rank after the root in the root's site).
    start: Rank,
    /// Ranks of the site.
    span: u32,
    /// Whether the broadcast's root lies here (then it is not in either tree).
    has_root: bool,
    /// Sizes of trees A and B.
    a: u32,
    b: u32,
}

impl DualSite {
    fn new(shape: &Shape, site: u32) -> Self {
        let (start, span) = shape.layout.site_range(shape.size, site);
        let has_root = shape.root >= start && shape.root < start + span;
        let n = span - has_root as u32;
        let a = n.div_ceil(2);
        DualSite { start, span, has_root, a, b: n - a }
    }

    /// Rank of position `i` (1-based over A then B) of this site.
    fn rank(&self, root: Rank, i: u32) -> Rank {
        if self.has_root {
            self.start + (root - self.start + i) % self.span
        } else {
            self.start + i - 1
        }
    }

    /// Position (1-based, A first) of rank `r` of this site; 0 for the root.
    fn pos(&self, root: Rank, r: Rank) -> u32 {
        if self.has_root {
            (r + self.span - root) % self.span
        } else {
            r - self.start + 1
        }
    }

    /// Tree (0 = A, 1 = B) fragment `seq` travels in here.
    fn tree(&self, seq: u32) -> u32 {
        if self.b == 0 {
            0
        } else {
            seq % 2
        }
    }

    /// Rank of node `i` (1-based) of tree `t`.
    fn node(&self, root: Rank, t: u32, i: u32) -> Rank {
        self.rank(root, if t == 0 { i } else { self.a + i })
    }

    /// Swap targets of leaf `i` of tree `t` (the other tree's nodes it feeds).
    fn swap_targets(&self, t: u32, i: u32) -> u32 {
        let (len, olen) = (self.len(t), if self.b == 0 { 0 } else { self.len(1 - t) });
        if 2 * i <= len {
            return 0; // internal
        }
        let leaves = len - len / 2;
        let j = i - len / 2 - 1;
        let pair = [2 * j + 1, 2 * j + 2].iter().filter(|&&k| k <= olen).count() as u32;
        let extra = if j + 1 == leaves { olen.saturating_sub(2 * leaves) } else { 0 };
        pair + extra
    }

    /// The node (tree, index) that feeds half `h` (0: even fragments, 1: odd) to the next
    /// site: one with an idle uplink, so the WAN stream does not share a lane — an internal node
    /// with a single child, or a leaf with fewer than two swap targets. Each half gets its own
    /// when there are two; otherwise the half's tree's last node (which then carries a third
    /// stream; Chiba's `4n − 1` sizing always leaves the idle links).
    fn feeder(&self, h: u32) -> (u32, u32) {
        let mut idle = [(0, 0); 4];
        let mut n = 0;
        for t in 0..2u32 {
            let len = self.len(t);
            if t == 1 && self.b == 0 {
                break;
            }
            if len >= 2 && len.is_multiple_of(2) {
                idle[n] = (t, len / 2);
                n += 1;
            }
            if len >= 1 && self.swap_targets(t, len) < 2 {
                idle[n] = (t, len);
                n += 1;
            }
        }
        let own = if self.b == 0 { 0 } else { h };
        match n {
            0 => (own, self.len(own)),
            1 if idle[0].0 == own => idle[0],
            1 => (own, self.len(own)),
            _ => idle[h as usize % 2],
        }
    }

    fn len(&self, t: u32) -> u32 {
        if t == 0 {
            self.a
        } else {
            self.b
        }
    }
}

/// Site order of a chained multi-site broadcast: the root's site first.
fn site_after(shape: &Shape, site: u32, k: u32) -> u32 {
    (site + k) % shape.layout.site_count(shape.size)
}

fn dual_forward<F: FnMut(Hop)>(shape: &Shape, me: Rank, seq: u32, o: &mut Out<'_, F>) {
    let (root, lay) = (shape.root, shape.layout);
    let sites = lay.site_count(shape.size);
    let my_site = lay.site_of(shape.size, me);
    let root_site = lay.site_of(shape.size, root);
    let ds = DualSite::new(shape, my_site);
    let order = (my_site + sites - root_site) % sites;
    let next = (order + 1 < sites).then(|| DualSite::new(shape, site_after(shape, root_site, order + 1)));
    let pos = ds.pos(root, me);
    let t = ds.tree(seq);
    let head_of = |s: &DualSite, t: u32| -> Option<Rank> {
        let t = if s.b == 0 { 0 } else { t };
        (s.len(t) > 0).then(|| s.node(root, t, 1))
    };
    if pos == 0 {
        // The root: each half to its tree's head, one lane each; if the root is alone in its
        // site, straight to the next site.
        match head_of(&ds, seq % 2) {
            Some(h) => o.push(h, lanes(t as u8, t as u8), Phase::Tree),
            None => {
                if let Some(h) = next.as_ref().and_then(|n| head_of(n, seq % 2)) {
                    o.push(h, lanes(t as u8, t as u8), Phase::Tree);
                }
            }
        }
        return;
    }
    let (mine, i) = if pos <= ds.a { (0, pos) } else { (1, pos - ds.a) };
    if ds.feeder(seq % 2) == (mine, i) {
        // This node feeds the next site's tree (chained sites) on an idle uplink.
        if let Some(h) = next.as_ref().and_then(|n| head_of(n, seq % 2)) {
            o.push(h, lanes(1, (seq % 2) as u8), Phase::Tree);
        }
    }
    if mine != t {
        // A copy of the other tree's half, through the leaf swap: this rank is its leaf there.
        return;
    }
    let len = ds.len(t);
    // One sending lane per child; every receiver takes tree A's half on lane 0 and B's on 1.
    let rx = t as u8;
    for (lane, c) in [2 * i, 2 * i + 1].into_iter().enumerate() {
        if c <= len {
            o.push(ds.node(root, t, c), lanes(lane as u8, rx), Phase::Tree);
        }
    }
    let other = 1 - t;
    let olen = if ds.b == 0 { 0 } else { ds.len(other) };
    if 2 * i > len && olen > 0 {
        // Leaf swap: leaf ordinal j covers the other tree's nodes 2j+1 and 2j+2; the last leaf
        // also takes any node beyond what the leaves cover (at most one, when A has one node
        // more than B).
        let leaves = len - len / 2;
        let j = i - len / 2 - 1;
        for (lane, k) in [2 * j + 1, 2 * j + 2].into_iter().enumerate() {
            if k <= olen {
                o.push(ds.node(root, other, k), lanes(lane as u8, rx), Phase::Tree);
            }
        }
        if j + 1 == leaves {
            for k in 2 * leaves + 1..=olen {
                o.push(ds.node(root, other, k), lanes(0, rx), Phase::Tree);
            }
        }
    }
}

fn hier_forward<F: FnMut(Hop)>(
    shape: &Shape,
    me: Rank,
    seq: u32,
    phase: Phase,
    fresh: bool,
    o: &mut Out<'_, F>,
) {
    let (size, root, lay) = (shape.size, shape.root, shape.layout);
    let nodes = lay.nodes(size);
    let root_node = lay.node_of(size, root);
    let my_node = lay.node_of(size, me);
    let leader = leader_of(shape, my_node);
    if me != leader {
        return;
    }
    // Leaders in leader space: 0 = the root's node.
    let rel = (my_node + nodes - root_node) % nodes;
    let owner = owner(seq, shape.count, nodes);
    scatter_allgather(nodes, rel, owner, phase, Gather::Ring, &mut |l, ph| {
        let node = (l + root_node) % nodes;
        o.push(leader_of(shape, node), LANE_ANY, ph);
    });
    if fresh {
        // The intra-node copy, overlapped with the inter-node traffic.
        lay.for_ranks_of_node(size, my_node, |r| {
            if r != me {
                o.push(r, LANE_ANY, Phase::Tree);
            }
        });
    }
}

/// The leader of `node`: the root on its own node, else the node's first rank.
fn leader_of(shape: &Shape, node: u32) -> Rank {
    if shape.layout.node_of(shape.size, shape.root) == node {
        return shape.root;
    }
    shape.layout.first_of_node(shape.size, node)
}

/// Whom rank `me` asks for missing fragment `seq`: the rank that forwards it there (the root
/// when the route is long or unknown). `None` at the root.
pub fn source(alg: Algorithm, shape: &Shape, me: Rank, seq: u32) -> Option<Rank> {
    let Shape { size, root, layout, .. } = *shape;
    if me == root || me >= size {
        return None;
    }
    let rel = (me + size - root) % size;
    Some(match alg {
        Algorithm::Multicast | Algorithm::Chain => parent(Topology::Ring, size, root, me)?,
        Algorithm::Linear => root,
        Algorithm::Binomial => parent(Topology::Binomial, size, root, me)?,
        Algorithm::BinaryTree => ((rel - 1) / 2 + root) % size,
        Algorithm::DualTree => dual_source(shape, me, seq).unwrap_or(root),
        Algorithm::ScatterAllgather => root,
        Algorithm::Hierarchical => {
            let node = layout.node_of(size, me);
            let leader = leader_of(shape, node);
            if leader == me {
                root
            } else {
                leader
            }
        }
    })
}

fn dual_source(shape: &Shape, me: Rank, seq: u32) -> Option<Rank> {
    // The forwarder of `seq` to `me`: search the few candidates (tree parent, cross parent,
    // previous site's tails) by asking `forward` — one rule, so source and route never disagree.
    let (size, root, lay) = (shape.size, shape.root, shape.layout);
    let site = lay.site_of(size, me);
    let ds = DualSite::new(shape, site);
    let pos = ds.pos(root, me);
    // Tree parent, swap parent, and the previous site's two feeders; the root by default.
    let mut cands = [root; 4];
    if pos > 0 {
        let (t, i) = if pos <= ds.a { (0, pos) } else { (1, pos - ds.a) };
        if i > 1 {
            cands[0] = ds.node(root, t, i / 2);
        }
        let other = 1 - t;
        let olen = ds.len(other);
        if olen > 0 {
            let leaves = olen - olen / 2;
            let j = ((i - 1) / 2).min(leaves - 1);
            cands[1] = ds.node(root, other, olen / 2 + 1 + j);
        }
    }
    let sites = lay.site_count(size);
    if sites > 1 {
        let prev = DualSite::new(shape, (site + sites - 1) % sites);
        for h in 0..2 {
            let (t, i) = prev.feeder(h);
            cands[2 + h as usize] = if prev.len(t) > 0 { prev.node(root, t, i) } else { root };
        }
    }
    cands.into_iter().find(|&c| {
        let mut hit = false;
        forward(Algorithm::DualTree, shape, c, seq, Phase::Scatter, true, &mut |h: Hop| hit |= h.to == me);
        hit
    })
}

#[cfg(test)]
mod tests;
