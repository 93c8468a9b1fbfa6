//! Which *links* a communicator's engines derive: the pair communicators (two engines each,
//! point to point) its algorithms exchange on between the node leaders — recursive doubling's
//! partners, the ring's neighbours, every other engine for the pairwise alltoall — as pure
//! functions of the configuration and the engine count, alike at every engine
//! (`engine/links.rs` creates them and carries their transfers).
use alloc::vec::Vec;

/// Which pair communicators a communicator's engines derive beyond recursive doubling's: the
/// configuration's, alike at every engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkSet {
    /// Communicators of up to this many engines pair every two (the pairwise alltoall,
    /// `protocol.pairwise_engines`; 0 without it).
    pub all_up_to: u32,
    /// Every engine pairs with its two ring neighbours (the ring allgather).
    pub ring: bool,
}

impl LinkSet {
    /// The pairs `protocol` needs.
    pub fn of(p: &crate::config::ProtocolConfig) -> LinkSet {
        let all_up_to = match p.alltoall_between {
            crate::config::AlltoallBetween::Pairwise | crate::config::AlltoallBetween::Auto => {
                p.pairwise_engines
            }
            crate::config::AlltoallBetween::Multicast => 0,
        };
        LinkSet { all_up_to, ring: p.allgather_between == crate::config::AllgatherBetween::Ring }
    }

    /// The most pair communicators one communicator of engines among `nodes` brings:
    /// `⌈log₂ nodes⌉ + 1`, plus the two ring neighbours, or one per other engine where every
    /// pair has one. (A created communicator spans at most the world's engines.)
    pub fn per_comm(&self, nodes: u32) -> usize {
        let doubling = (32 - nodes.max(2).saturating_sub(1).leading_zeros()) as usize + 1;
        let ring = if self.ring { 2 } else { 0 };
        let all = nodes.min(self.all_up_to).saturating_sub(1) as usize;
        (doubling + ring).max(all)
    }
}

/// The engines engine `me` of `engines` has a pair communicator with: recursive doubling's
/// ([`doubling_partners`]), its ring neighbours (`set.ring`) and, on communicators of up to
/// `set.all_up_to` engines, every other engine (the pairwise alltoall).
pub fn partners(me: u32, engines: u32, set: LinkSet) -> Vec<u32> {
    let mut all = doubling_partners(me, engines);
    let mut add = |e: u32| {
        if e != me && e < engines && !all.contains(&e) {
            all.push(e);
        }
    };
    if set.ring && engines >= 2 {
        add((me + 1) % engines);
        add((me + engines - 1) % engines);
    }
    if engines <= set.all_up_to {
        (0..engines).for_each(&mut add);
    }
    all
}

/// The engines engine `me` of `engines` exchanges with in recursive doubling (module doc), in
/// the order the algorithm meets them.
pub fn doubling_partners(me: u32, engines: u32) -> Vec<u32> {
    let p = power_below(engines);
    if me >= p {
        return alloc::vec![me - p];
    }
    let fold = (me + p < engines).then_some(me + p);
    fold.into_iter().chain((0..p.trailing_zeros()).map(|k| me ^ (1 << k))).collect()
}

/// The largest power of two not above `n` (1 for 0 and 1).
pub fn power_below(n: u32) -> u32 {
    match n {
        0 | 1 => 1,
        n => 1 << (31 - n.leading_zeros()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_those_of_recursive_doubling_with_a_fold() {
        assert_eq!(power_below(1), 1);
        assert_eq!(power_below(5), 4);
        assert_eq!(power_below(8), 8);
        assert_eq!(doubling_partners(0, 2), [1]);
        assert_eq!(doubling_partners(1, 2), [0]);
        // Five engines: 4 folds into 0; 0..4 double among themselves.
        assert_eq!(doubling_partners(0, 5), [4, 1, 2]);
        assert_eq!(doubling_partners(3, 5), [2, 1]);
        assert_eq!(doubling_partners(4, 5), [0]);
        // Every pair is known at both ends; up to `pairwise` engines every pair exists.
        for e in 2..20u32 {
            for a in 0..e {
                for b in doubling_partners(a, e) {
                    assert!(doubling_partners(b, e).contains(&a), "{a} <-> {b} of {e}");
                }
                let set = LinkSet { all_up_to: 16, ring: false };
                let all = partners(a, e, set);
                for b in &all {
                    assert!(partners(*b, e, set).contains(&a), "{a} <-> {b} of {e}");
                }
                let want = if e <= 16 { e as usize - 1 } else { doubling_partners(a, e).len() };
                assert_eq!(all.len(), want, "{a} of {e}");
                assert!(want <= set.per_comm(e), "{a} of {e}: the protocol table's share");
                // The ring adds the two neighbours, at both ends, where doubling lacks them.
                let ring = LinkSet { all_up_to: 0, ring: true };
                let with_ring = partners(a, e, ring);
                for b in [(a + 1) % e, (a + e - 1) % e] {
                    assert!(with_ring.contains(&b) && partners(b, e, ring).contains(&a), "{a} ~ {b} of {e}");
                }
                assert!(with_ring.len() <= ring.per_comm(e), "{a} of {e}: the protocol table's share");
            }
        }
    }
}
