//! The schedules of an allgather between the node leaders: recursive doubling of the node parts
//! ([`gather_step_of`]) and the ring ([`ring_step_of`]) — pure functions of the engine's number,
//! the engine count and the parts' places, so both ends of every pair compute the same steps
//! (`exchange.rs` carries them out).
use crate::comm::links::power_below;
use crate::engine::exchange::{post_step, ExchangeRun, Schedule, Span, Step, Stop};
use crate::engine::hands::Hands;
use crate::engine::ids::ExchangeId;
use crate::Nanos;
use ringcast_abi::StatusKind;

/// An allgather's exchange between the leaders: recursive doubling of the node parts, or the
/// ring ([`ExchangeRun::ring`]), each part into its place in the leader's receive buffer.
#[derive(Debug)]
pub(crate) struct Leaders;

/// The one [`Leaders`] every allgather's exchange runs by.
pub(crate) static LEADERS: Leaders = Leaders;

impl Schedule for Leaders {
    fn post(
        &self,
        key: ExchangeId,
        run: &mut ExchangeRun,
        h: &mut Hands<'_>,
        now: Nanos,
    ) -> Result<Option<u32>, Stop> {
        let step = {
            // Node `k`'s part starts at its first rank's block: `Err` when the communicator
            // went away.
            let stop = |status| Stop { status, breaks: false };
            let node = h.node.as_ref().ok_or(stop(StatusKind::UnknownCommunicator))?;
            let (ranges, _) = node.ranges(run.comm).ok_or(stop(StatusKind::CommunicatorBroken))?;
            let at = |k: u32| ranges.get(k as usize).map_or(run.len, |r| u64::from(r.0) * run.block);
            let (me, engines) = (run.shape.me, run.shape.engines);
            match run.ring {
                true => ring_step_of(me, engines, at, run.step),
                false => gather_step_of(me, engines, at, run.step),
            }
        };
        match step {
            Some(step) => post_step(key, run, step, h, now),
            None => Ok(None),
        }
    }
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
    use crate::engine::exchange::on_pair;
    use alloc::vec::Vec;

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
}
