//! Which transfers and reductions each engine takes in an allreduce or an allgather between
//! the node leaders (`doubling.rs` carries them out): recursive doubling for short messages,
//! Rabenseifner's reduce-scatter + allgather for long ones, the allgather's recursive
//! doubling of node parts ([`gather_step_of`]) and its ring ([`ring_step_of`]) — pure functions of the engine's number, the
//! engine count, the length and the element size (the parts' places), so both ends of every
//! pair compute the same steps.
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
use super::pairs::power_below;
use crate::model::compose;

/// Bytes `[off, off + len)` of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub off: u64,
    pub len: u64,
}

/// One step of an engine's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the partial result's span to the partner.
    Send(u32, Span),
    /// Receive the partner's bytes for the span into the scratch block (a reduction follows).
    Receive(u32, Span),
    /// Receive the final result's span from the partner into the partial result.
    ReceiveResult(u32, Span),
    /// Send the partial result's `send` span; receive the partner's `recv` span into the
    /// scratch block (a reduction follows) or, `into_partial`, into its place in the partial
    /// result. The lower engine's transfer first, at both ends.
    Swap { partner: u32, send: Span, recv: Span, into_partial: bool },
    /// The partial result's span ← *lower ⊕ upper* of it and the scratch block's first bytes.
    Reduce(u32, Span),
    /// A ring's step: send the partial result's `send` span to `to` and receive `from`'s
    /// `recv` span into its place in the partial result, both at once (on two engines `to` and
    /// `from` are one partner: the lower engine's transfer first, as in a swap).
    Shift { to: u32, send: Span, from: u32, recv: Span },
}

/// What an engine's schedule depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// This engine's number and the engine count.
    pub me: u32,
    pub engines: u32,
    /// Bytes of the block, and of one element.
    pub len: u64,
    pub elem: u64,
    /// Rabenseifner's reduce-scatter + allgather instead of recursive doubling.
    pub halving: bool,
}

impl Shape {
    /// The schedule of engine `me` of `engines` for a block of `len` bytes of `elem`-byte
    /// elements: Rabenseifner's where `halving` (the call's exchange, [`compose::allreduce`])
    /// and it can run ([`compose::can_halve`]).
    pub(crate) fn new(me: u32, engines: u32, len: u64, elem: u64, halving: bool) -> Shape {
        let halving = halving && compose::can_halve(engines, len, elem);
        Shape { me, engines, len, elem: elem.max(1), halving }
    }

    /// Bytes of segments `[a, b)` of the block cut into `p` segments of whole elements.
    fn segments(&self, p: u32, a: u32, b: u32) -> Span {
        let elems = self.len / self.elem;
        let at = |s: u32| u64::from(s) * elems / u64::from(p) * self.elem;
        let end = |s: u32| if s == p { self.len } else { at(s) };
        Span { off: at(a), len: end(b) - at(a) }
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

/// Step `n` of engine `me`'s allgather between the leaders of `engines` engines, or `None`
/// past the last: node `k`'s part is bytes `[at(k), at(k + 1))` of the result (`at(engines)` its
/// end; the parts side by side in node order, uneven). With `P` the largest power of two not
/// above `engines`:
/// * **fold**: an engine `i ≥ P` sends its part to `i − P` and receives the whole result from
///   it at the end; an engine `i < E − P` first receives part `i + P` into its place;
/// * **recursive doubling**: for `d = 1, 2, …, P/2`, engines `i` and `i ^ d` swap what they
///   hold — the parts of the run of `d` engines from `i & !(d − 1)` and, in a second swap, the
///   folded parts of the engines `P` above them (empty where none folded) — each into its place;
/// * **unfold**: an engine `i < E − P` sends the whole result to `i + P`.
///
/// Each engine of the doubling receives every part it lacks once, in `log₂ P` levels of one or
/// two swaps (the second empty without folds) — the bytes the multicast allgather's `E − 1`
/// remote parts bring it, plus a fold's part.
pub(crate) fn gather_step_of(me: u32, engines: u32, at: impl Fn(u32) -> u64, n: u32) -> Option<Step> {
    let p = power_below(engines);
    let span = |a: u32, b: u32| {
        let (a, b) = (a.min(engines), b.min(engines));
        Span { off: at(a), len: at(b).saturating_sub(at(a)) }
    };
    let whole = span(0, engines);
    if me >= p {
        return [Step::Send(me - p, span(me, me + 1)), Step::ReceiveResult(me - p, whole)]
            .get(n as usize)
            .copied();
    }
    let fold = me + p < engines;
    let mut n = n;
    if fold {
        if n == 0 {
            return Some(Step::ReceiveResult(me + p, span(me + p, me + p + 1)));
        }
        n -= 1;
    }
    let levels = p.trailing_zeros();
    if n < 2 * levels {
        let d = 1 << (n / 2);
        let partner = me ^ d;
        let (mine, theirs) = (me & !(d - 1), partner & !(d - 1));
        let high = if n.is_multiple_of(2) { 0 } else { p };
        let send = span(mine + high, mine + high + d);
        let recv = span(theirs + high, theirs + high + d);
        return Some(Step::Swap { partner, send, recv, into_partial: true });
    }
    n -= 2 * levels;
    (fold && n == 0).then_some(Step::Send(me + p, whole))
}

/// Step `n` of engine `me`'s allgather round a ring of `engines` engines, or `None` past the
/// last (node `k`'s part at bytes `[at(k), at(k + 1))`, as for [`gather_step_of`]): for
/// `n = 0 … E − 2`, engine `i` sends part `i − n` to `i + 1` and receives part `i − n − 1` from
/// `i − 1` (mod `E`) — each part travels the ring once, every engine sends and receives `E − 1`
/// parts over its two neighbours' pairs, whatever `E`. Recursive doubling needs `log₂ P` steps
/// but, where `E` is not a power of two, its folds add a part to the folding engines and a
/// whole result from the engines they fold into.
pub(crate) fn ring_step_of(me: u32, engines: u32, at: impl Fn(u32) -> u64, n: u32) -> Option<Step> {
    if engines < 2 || me >= engines || n + 1 >= engines {
        return None;
    }
    let part = |k: u32| Span { off: at(k), len: at(k + 1).saturating_sub(at(k)) };
    let (to, from) = ((me + 1) % engines, (me + engines - 1) % engines);
    let (sent, got) = ((me + engines - n) % engines, (me + 2 * engines - n - 1) % engines);
    Some(Step::Shift { to, send: part(sent), from, recv: part(got) })
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// (root is the lower engine, bytes) of the transfers between `me` and `other` in
    /// `schedule`, in order; empty transfers are not posted.
    fn on_pair(schedule: &[Step], me: u32, other: u32) -> Vec<(bool, u64)> {
        let lower = me.min(other);
        // Both directions on one pair: the lower engine's transfer first.
        let swap = |send: Span, recv: Span| {
            let (mine, theirs) = ((me == lower, send.len), (other == lower, recv.len));
            if me == lower {
                alloc::vec![mine, theirs]
            } else {
                alloc::vec![theirs, mine]
            }
        };
        schedule
            .iter()
            .flat_map(|&s| match s {
                Step::Send(p, x) if p == other => alloc::vec![(me == lower, x.len)],
                Step::Receive(p, x) | Step::ReceiveResult(p, x) if p == other => {
                    alloc::vec![(other == lower, x.len)]
                }
                Step::Swap { partner, send, recv, .. } if partner == other => swap(send, recv),
                Step::Shift { to, send, from, recv } if to == other && from == other => swap(send, recv),
                Step::Shift { to, send, .. } if to == other => alloc::vec![(me == lower, send.len)],
                Step::Shift { from, recv, .. } if from == other => alloc::vec![(other == lower, recv.len)],
                _ => alloc::vec![],
            })
            .filter(|&(_, len)| len > 0)
            .collect()
    }

    /// The allgather's doubling: both ends of every pair agree, and every engine ends holding
    /// every part, each received once, from an engine that held it.
    #[test]
    fn allgather_doubling_delivers_every_part_once() {
        gather_schedule_delivers_every_part_once(
            |me, engines, at, n| gather_step_of(me, engines, at, n),
            true,
        );
    }

    /// The same of the ring, which has no folds: every engine receives every part once.
    #[test]
    fn allgather_ring_delivers_every_part_once() {
        gather_schedule_delivers_every_part_once(
            |me, engines, at, n| ring_step_of(me, engines, at, n),
            false,
        );
        let at = |k: u32| u64::from(k) * 10;
        let ring: Vec<Step> = (0..).map_while(|n| ring_step_of(1, 3, at, n)).collect();
        let part = |k: u64| Span { off: k * 10, len: 10 };
        assert_eq!(
            ring,
            [
                Step::Shift { to: 2, send: part(1), from: 0, recv: part(0) },
                Step::Shift { to: 2, send: part(0), from: 0, recv: part(2) },
            ]
        );
    }

    /// Runs every engine's schedule of `step_of` as message passing (each transfer queued per
    /// direction of its pair) for 2–17 engines of uneven parts: both ends of every pair agree,
    /// no engine sends a part it lacks, every engine ends holding every part — once, unless
    /// `folds` lets the engines past the largest power of two receive the whole result.
    fn gather_schedule_delivers_every_part_once(
        step_of: impl Fn(u32, u32, &dyn Fn(u32) -> u64, u32) -> Option<Step>,
        folds: bool,
    ) {
        for engines in 2..18u32 {
            // Uneven parts: node k holds k % 3 + 1 ranks of 10 bytes.
            let mut at = alloc::vec![0u64];
            for k in 0..engines {
                at.push(at[k as usize] + 10 * u64::from(k % 3 + 1));
            }
            let at = |k: u32| at[k as usize];
            let schedules: Vec<Vec<Step>> =
                (0..engines).map(|me| (0..).map_while(|n| step_of(me, engines, &at, n)).collect()).collect();
            for a in 0..engines {
                for b in (a + 1)..engines {
                    let (x, y) =
                        (on_pair(&schedules[a as usize], a, b), on_pair(&schedules[b as usize], b, a));
                    assert_eq!(x, y, "engines {a}, {b} of {engines}");
                }
            }
            // Run the schedules as the engines would, each transfer queued per direction of its pair.
            let parts = |x: Span| {
                (0..engines)
                    .filter(move |&k| at(k) < at(k + 1) && at(k) >= x.off && at(k + 1) <= x.off + x.len)
            };
            let mut held: Vec<Vec<u32>> =
                (0..engines).map(|me| (0..engines).map(|k| u32::from(k == me)).collect()).collect();
            let mut queues =
                alloc::collections::BTreeMap::<(u32, u32), alloc::collections::VecDeque<Span>>::new();
            let (mut pc, mut sent) =
                (alloc::vec![0usize; engines as usize], alloc::vec![false; engines as usize]);
            let mut progress = true;
            while progress {
                progress = false;
                for me in 0..engines {
                    let i = me as usize;
                    let Some(&step) = schedules[i].get(pc[i]) else { continue };
                    let (to, send, from, recv) = match step {
                        Step::Send(p, x) => (p, x, p, Span { off: 0, len: 0 }),
                        Step::ReceiveResult(p, x) => (p, Span { off: 0, len: 0 }, p, x),
                        Step::Swap { partner, send, recv, .. } => (partner, send, partner, recv),
                        Step::Shift { to, send, from, recv } => (to, send, from, recv),
                        other => panic!("{other:?} in an allgather"),
                    };
                    if send.len > 0 && !sent[i] {
                        for k in parts(send) {
                            assert!(held[i][k as usize] > 0, "{me} sends part {k} it lacks ({engines})");
                        }
                        queues.entry((me, to)).or_default().push_back(send);
                        sent[i] = true;
                        progress = true;
                    }
                    if recv.len > 0 {
                        let Some(x) = queues.entry((from, me)).or_default().pop_front() else { continue };
                        assert_eq!(x, recv, "{me} from {from} of {engines}");
                        for k in parts(x) {
                            held[i][k as usize] += 1;
                        }
                    }
                    (pc[i], sent[i], progress) = (pc[i] + 1, false, true);
                }
            }
            let p = power_below(engines);
            for me in 0..engines {
                let i = me as usize;
                assert_eq!(pc[i], schedules[i].len(), "engine {me} of {engines} stuck");
                assert!(held[i].iter().all(|&h| h > 0), "engine {me} of {engines} misses a part");
                if me < p || !folds {
                    assert!(held[i].iter().all(|&h| h == 1), "{me} of {engines} received a part twice");
                }
            }
        }
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
