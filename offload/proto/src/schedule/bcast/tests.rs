//! Every algorithm delivers every fragment to every rank, from any root, under any placement;
//! the trees without a second phase deliver each fragment exactly once; repair sources are
//! ranks that do forward the fragment.
use super::*;
use crate::comm::{Layout, Rank};
use proptest::prelude::*;
use std::collections::VecDeque;

/// Runs the routing alone (no loss): per rank and fragment, how many copies arrived.
fn flood(alg: Algorithm, shape: &Shape) -> Vec<Vec<u32>> {
    let (n, c) = (shape.size as usize, shape.count as usize);
    let mut got = vec![vec![0u32; c]; n];
    let mut queue = VecDeque::new();
    for seq in 0..shape.count {
        got[shape.root as usize][seq as usize] = 1;
        forward(alg, shape, shape.root, seq, Phase::Scatter, true, &mut |h: Hop| {
            queue.push_back((h.to, seq, h.phase))
        });
    }
    let mut budget = 8 * n * c + 64;
    while let Some((to, seq, phase)) = queue.pop_front() {
        budget = budget.checked_sub(1).expect("routing does not terminate");
        let fresh = got[to as usize][seq as usize] == 0;
        got[to as usize][seq as usize] += 1;
        if fresh || phase == Phase::Allgather {
            forward(alg, shape, to, seq, phase, fresh, &mut |h: Hop| queue.push_back((h.to, seq, h.phase)));
        }
    }
    got
}

fn layout_strategy() -> impl Strategy<Value = Layout> {
    (1u32..9, any::<bool>(), 1u32..5).prop_map(|(ppn, cyclic, sites)| Layout { ppn, cyclic, sites })
}

#[test]
fn dual_tree_matches_the_papers_figure_for_4n_minus_1() {
    // P = 7 (n = 2): A = 1,2,3 and B = 4,5,6; A1 → A2, A3; leaves A2, A3 feed B's nodes.
    let shape = Shape { size: 7, root: 0, layout: Layout::FLAT, count: 2 };
    let mut root_hops = vec![];
    forward(Algorithm::DualTree, &shape, 0, 0, Phase::Scatter, true, &mut |h: Hop| root_hops.push(h.to));
    forward(Algorithm::DualTree, &shape, 0, 1, Phase::Scatter, true, &mut |h: Hop| root_hops.push(h.to));
    assert_eq!(root_hops, vec![1, 4]);
    let mut a1 = vec![];
    forward(Algorithm::DualTree, &shape, 1, 0, Phase::Tree, true, &mut |h: Hop| a1.push((h.to, h.lane)));
    assert_eq!(a1, vec![(2, lanes(0, 0)), (3, lanes(1, 0))], "one lane per child");
    let mut leaf = vec![];
    forward(Algorithm::DualTree, &shape, 2, 0, Phase::Tree, true, &mut |h: Hop| leaf.push(h.to));
    assert_eq!(leaf, vec![4, 5], "leaf A2 swaps A's half into B1, B2");
    let got = flood(Algorithm::DualTree, &shape);
    assert!(got.iter().flatten().all(|&k| k == 1));
}

#[test]
fn layout_places_block_and_cyclic() {
    let block = Layout { ppn: 4, cyclic: false, sites: 1 };
    let cyclic = Layout { ppn: 4, cyclic: true, sites: 1 };
    assert_eq!((block.node_of(16, 5), cyclic.node_of(16, 5)), (1, 1));
    assert_eq!((block.node_of(16, 4), cyclic.node_of(16, 4)), (1, 0));
    let mut ranks = vec![];
    cyclic.for_ranks_of_node(16, 1, |r| ranks.push(r));
    assert_eq!(ranks, vec![1, 5, 9, 13]);
    assert_eq!(block.nodes(16), 4);
    let sites = Layout { ppn: 2, cyclic: false, sites: 2 };
    assert_eq!((sites.site_of(32, 15), sites.site_of(32, 16)), (0, 1));
    assert_eq!(sites.nodes(32), 16);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_algorithm_reaches_everyone(
        size in 1u32..70,
        root_pick in 0u32..70,
        count in 1u32..20,
        layout in layout_strategy(),
    ) {
        let shape = Shape { size, root: root_pick % size, layout, count };
        for alg in Algorithm::ALL {
            let got = flood(alg, &shape);
            for (r, frags) in got.iter().enumerate() {
                for (seq, &k) in frags.iter().enumerate() {
                    prop_assert!(k >= 1, "{alg}: rank {r} never got fragment {seq} ({shape:?})");
                    let exact = !matches!(alg, Algorithm::ScatterAllgather | Algorithm::Hierarchical);
                    prop_assert!(!exact || k == 1, "{alg}: rank {r} got fragment {seq} {k} times");
                    let me = r as Rank;
                    if me == shape.root {
                        prop_assert_eq!(source(alg, &shape, me, seq as u32), None);
                        continue;
                    }
                    let src = source(alg, &shape, me, seq as u32);
                    prop_assert!(src.is_some_and(|s| s < size && s != me));
                    if exact {
                        // The repair source is the rank that forwards this fragment here.
                        let s = src.unwrap_or(0);
                        let mut hit = false;
                        let ph = if s == shape.root { Phase::Scatter } else { Phase::Tree };
                        forward(alg, &shape, s, seq as u32, ph, true, &mut |h: Hop| hit |= h.to == me);
                        prop_assert!(hit, "{alg}: source {s} of rank {me} does not forward {seq}");
                    }
                }
            }
        }
    }
}
