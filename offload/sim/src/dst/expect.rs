//! The bytes the checker expects of a call, computed once for every rank that reports it.
//!
//! [`super::check`] judges each rank's completion against bytes it computes itself from the
//! scenario (a broadcast's root pattern, an allgather's concatenated blocks, an allreduce's
//! reference reduction), never from what the engines wrote. Those bytes are the same at every
//! rank of the call, and computing them is O(ranks × bytes) for an allgather or an allreduce:
//! once per rank, a sweep at 1,024 ranks spent about a third of its time re-deriving them
//! (docs/protocol.md, "DST speed"). [`Expected`] keeps each call's bytes after the first rank
//! needed them, up to [`BUDGET`] bytes in all (past it, each rank computes its own again, as
//! before: the cache never changes a verdict, only how often the same bytes are derived).
use std::collections::HashMap;
use std::rc::Rc;

/// Most bytes kept for the whole check of one scenario.
pub(super) const BUDGET: usize = 256 << 20;

/// Expected bytes by (communicator, call).
#[derive(Default)]
pub(super) struct Expected {
    map: HashMap<(usize, usize), Rc<Vec<u8>>>,
    bytes: usize,
}

impl Expected {
    /// Call `k` of communicator `c`'s expected bytes: kept ones, or `make`'s (then kept if
    /// they fit the budget).
    pub(super) fn get(&mut self, c: usize, k: usize, make: impl FnOnce() -> Vec<u8>) -> Rc<Vec<u8>> {
        if let Some(v) = self.map.get(&(c, k)) {
            return Rc::clone(v);
        }
        let v = Rc::new(make());
        if self.bytes + v.len() <= BUDGET {
            self.bytes += v.len();
            self.map.insert((c, k), Rc::clone(&v));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_the_generators_low_bytes() {
        for (seed, c, k, len) in [(0u64, 0usize, 0usize, 0u32), (1, 2, 3, 1), (777_000_005_945, 5, 17, 4099)]
        {
            let mut r =
                ringcast_proto::rng::SimRng::new(seed ^ ((c as u64) << 40) ^ ((k as u64) << 20) ^ 0x5eed);
            let want: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
            assert_eq!(super::super::pattern(seed, c, k, len), want);
        }
    }

    #[test]
    fn computed_once_per_call_within_the_budget() {
        let mut e = Expected::default();
        let mut made = 0;
        for _ in 0..3 {
            let v = e.get(1, 2, || {
                made += 1;
                vec![7; 10]
            });
            assert_eq!(*v, vec![7; 10]);
        }
        assert_eq!(made, 1);
        // Past the budget: still right, computed each time.
        let mut big = 0;
        for _ in 0..2 {
            let v = e.get(3, 4, || {
                big += 1;
                vec![1; BUDGET]
            });
            assert_eq!(v.len(), BUDGET);
        }
        assert_eq!(big, 2);
    }
}
