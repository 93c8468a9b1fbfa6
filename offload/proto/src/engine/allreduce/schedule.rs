//! The schedule of an allreduce (and a reduce) between the node leaders: which transfers and
//! reductions each engine takes — recursive doubling for short blocks, Rabenseifner's
//! reduce-scatter + allgather for long ones — as pure functions of the engine's number, the
//! engine count, the length and the element size, so both ends of every pair compute the same
//! steps (`exchange.rs` carries them out).
//!
//! With `P` the largest power of two not above the engine count `E` and `L = log₂ P`:
//! * **fold**: an engine `i ≥ P` sends its node result to `i − P` and later receives the final
//!   result from it; an engine `i < E − P` first receives `i + P`'s and reduces it into its own;
//! * **recursive doubling** (short): for `d = P/2, P/4, …, 1` engines `i` and `i ^ d` swap their
//!   whole partial results and both reduce *lower ⊕ upper*;
//! * **Rabenseifner** (long; `halving`): the block is cut into `P` segments of whole elements.
//!   Reduce-scatter by recursive halving — for `d = P/2, …, 1`, of the segments it still holds
//!   (a run of `2d`), engine `i` keeps the half on its side of `d` (`i & d`), sends the other
//!   half to `i ^ d`, receives that engine's copy of its own half and reduces *lower ⊕ upper* —
//!   so engine `i` ends with segment `i` fully reduced; then an allgather by recursive doubling —
//!   for `d = 1, 2, …, P/2` engines `i` and `i ^ d` swap the runs of `d` segments they hold,
//!   each into its place;
//! * **unfold**: an engine `i < E − P` sends the result to `i + P`.
//!
//! Both variants reduce every element in the same tree — the pairs `(i, i + P/2)` first, then
//! `(i, i + P/4)`, …: `((m₀ ⊕ m₂) ⊕ (m₁ ⊕ m₃))` for four engines, after the fold — so the choice
//! between them changes no bit of the result, and needs no agreement beyond the call's length.
//! Recursive doubling receives `L` whole blocks per engine; Rabenseifner about two (`2·(P−1)/P`)
//! in `2L` smaller transfers: fewer bytes once the block is long and the engines many.
use crate::comm::links::power_below;
use crate::engine::exchange::{post_step, ExchangeRun, Schedule, Shape, Span, Step, Stop};
use crate::engine::hands::Hands;
use crate::engine::ids::ExchangeId;
use crate::Nanos;

/// A reduction's exchange between the leaders: recursive doubling, or Rabenseifner's where the
/// run's shape halves ([`Shape::halving`]).
#[derive(Debug)]
pub(crate) struct Leaders;

/// The one [`Leaders`] every allreduce's and reduce's exchange runs by.
pub(crate) static LEADERS: Leaders = Leaders;

impl Schedule for Leaders {
    fn post(
        &self,
        key: ExchangeId,
        run: &mut ExchangeRun,
        h: &mut Hands<'_>,
        now: Nanos,
    ) -> Result<Option<u32>, Stop> {
        match step_of(&run.shape, run.step) {
            Some(step) => post_step(key, run, step, h, now),
            None => Ok(None),
        }
    }
}

/// Step `n` of the schedule of `shape`, or `None` past the last.
pub(crate) fn step_of(shape: &Shape, n: u32) -> Option<Step> {
    let (me, engines) = (shape.me, shape.engines);
    let p = power_below(engines);
    let whole = Span { off: 0, len: shape.len };
    if me >= p {
        return [Step::Send(me - p, whole), Step::ReceiveResult(me - p, whole)].get(n as usize).copied();
    }
    let fold = me + p < engines;
    let mut n = n;
    if fold {
        match n {
            0 => return Some(Step::Receive(me + p, whole)),
            1 => return Some(Step::Reduce(me + p, whole)),
            _ => n -= 2,
        }
    }
    let levels = p.trailing_zeros();
    // Recursive halving (or doubling's whole swaps): `d = P/2, …, 1`, two steps each.
    if n < 2 * levels {
        let d = p >> (n / 2 + 1);
        let partner = me ^ d;
        let (send, keep) = if shape.halving {
            let run = 2 * d;
            let lo = me / run * run;
            let (low, high) = (shape.segments(p, lo, lo + d), shape.segments(p, lo + d, lo + run));
            if me & d == 0 {
                (high, low)
            } else {
                (low, high)
            }
        } else {
            (whole, whole)
        };
        return Some(match n % 2 {
            0 => Step::Swap { partner, send, recv: keep, into_partial: false },
            _ => Step::Reduce(partner, keep),
        });
    }
    n -= 2 * levels;
    // Rabenseifner's allgather: `d = 1, …, P/2`, one swap each.
    if shape.halving {
        if n < levels {
            let d = 1 << n;
            let partner = me ^ d;
            let mine = shape.segments(p, me & !(d - 1), (me & !(d - 1)) + d);
            let theirs = shape.segments(p, partner & !(d - 1), (partner & !(d - 1)) + d);
            return Some(Step::Swap { partner, send: mine, recv: theirs, into_partial: true });
        }
        n -= levels;
    }
    (fold && n == 0).then_some(Step::Send(me + p, whole))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::exchange::on_pair;
    use alloc::vec::Vec;

    fn schedule(shape: &Shape) -> Vec<Step> {
        (0..).map_while(|n| step_of(shape, n)).collect()
    }

    #[test]
    fn short_blocks_double_and_long_ones_halve() {
        let w = |len| Span { off: 0, len };
        let s = Shape::new(0, 3, 100, 4, true);
        assert!(!s.halving, "three engines: a doubling of two cannot halve");
        assert_eq!(
            schedule(&s),
            [
                Step::Receive(2, w(100)),
                Step::Reduce(2, w(100)),
                Step::Swap { partner: 1, send: w(100), recv: w(100), into_partial: false },
                Step::Reduce(1, w(100)),
                Step::Send(2, w(100)),
            ]
        );
        // Four engines, 1 MiB of f64: halves, then quarters, then back.
        let s = Shape::new(1, 4, 1 << 20, 8, true);
        assert!(s.halving);
        let q = |i: u64| Span { off: i << 18, len: 1 << 18 };
        let h = |i: u64| Span { off: i << 19, len: 1 << 19 };
        assert_eq!(
            schedule(&s),
            [
                Step::Swap { partner: 3, send: h(1), recv: h(0), into_partial: false },
                Step::Reduce(3, h(0)),
                Step::Swap { partner: 0, send: q(0), recv: q(1), into_partial: false },
                Step::Reduce(0, q(1)),
                Step::Swap { partner: 0, send: q(1), recv: q(0), into_partial: true },
                Step::Swap { partner: 3, send: h(0), recv: h(1), into_partial: true },
            ]
        );
    }

    /// Every transfer has its counterpart at the partner, of the same length, in the same order
    /// per pair; every engine of the doubling ends holding every segment.
    #[test]
    fn both_ends_of_every_pair_agree() {
        for engines in 2..17u32 {
            for (len, elem) in [(1000u64, 8u64), (1 << 20, 8), ((1 << 20) + 12, 4), (300 << 10, 2), (100, 8)]
            {
                let halving = true; // wherever an element per segment allows
                let shapes: Vec<Shape> =
                    (0..engines).map(|me| Shape::new(me, engines, len, elem, halving)).collect();
                for a in 0..engines {
                    for b in (a + 1)..engines {
                        let on_pair =
                            |me: u32, other: u32| on_pair(&schedule(&shapes[me as usize]), me, other);
                        assert_eq!(on_pair(a, b), on_pair(b, a), "engines {a}, {b} of {engines}, {len} B");
                    }
                }
            }
        }
    }
}
