//! Predicted times of the exchanges between the engines of a leader-based allreduce or
//! allgather, and of an alltoall — what [`super::compose`] minimises when a `*_between` setting
//! is `auto` (the default).
//!
//! # The terms
//!
//! A message of `n` bytes is `k = ⌈n / payload⌉` fragments (at least one). One end of it costs
//! its engine `c(n) = m + k·o + n·O`: the per-message work `m` (`model.message_ns`: its slot,
//! its completion, its share of the synchronization), LogGP's `o` per datagram and `O` per byte
//! (`model.engine_ns_per_byte`: CRC32C, the message MAC, the copies). It occupies a lane for
//! `k·max(w·G, g)`. Reducing `n` bytes costs `n·R` (`model.reduce_ns_per_byte`). A *swap* —
//! two engines sending each other `n` bytes at once — takes `s + max(2·c(n), lane) + n·R` (the
//! reduction only in an allreduce), where `s` is a step's start: `L`, plus `W`
//! (`model.wake_ns`) when the engines share CPUs (below).
//!
//! * **Recursive doubling** (`P` the largest power of two ≤ `E`, `r = log₂ P`): `r` swaps of the
//!   whole block (allreduce) or of `m·2ⁱ` (allgather, `m` the largest node part); the `E − P`
//!   engines past `P` first send their part to a partner and last receive the result from it.
//! * **Rabenseifner**: `r` swaps of `n/2, n/4, …` reducing (reduce-scatter by halving), then
//!   the same `r` swaps not reducing (allgather by doubling), and the same folds.
//! * **Multicast**: every engine's part broadcast once, every engine receiving the `E − 1`
//!   others (and, in an allreduce, reducing them). Below `protocol.small_comm` engines the parts
//!   go point to point (the broadcast's own rule): each travels `E − 1` edges, a send and a
//!   receive each, over `⌈log₂ E⌉` steps; from it, one multicast send and `E − 1` receives
//!   after one step and the switch.
//! * **Pairwise** (an alltoall): `E − 1` swaps, all posted at once (one step), each of an
//!   engine's blocks for one other engine — `q²` messages of one block (`q` ranks per engine),
//!   or one of `q²` blocks aggregated; against
//!   the multicast alltoall, in which every engine multicasts its node's send buffers (`q·N`
//!   blocks) and receives every other engine's.
//!
//! Each exchange is priced twice: its critical path (the busiest engine's steps and work, the
//! engines on their own cores) and, when the job's engines share `C = model.engine_cpus` CPUs
//! with fewer CPUs than engines, the work of all engines together divided by `C`; the larger
//! is the prediction. Sharing CPUs is what turns the choice around on one machine: there a
//! multicast allreduce's every engine receives and reduces `E − 1` blocks where doubling's
//! receives `log₂ E` (docs/performance.md, "Recursive doubling between the leaders").
//!
//! # What is not modelled
//!
//! Loss and repair; the rendezvous a pair transfer past its window waits for; the pipelining of
//! a long part's broadcast through chains and trees (every point-to-point algorithm moves each
//! byte over `E − 1` edges, which is all the work term sees); the host processes' own CPU time
//! beside the engines'. Only `+ − × ÷`, `ceil`, `min` and `max` on `f64` (all exact or
//! correctly rounded) from identical inputs: every rank predicts the same bits, so every rank
//! given the same call picks the same exchange.
use super::compose::Exchange;
use super::LogGp;
use crate::config::EngineConfig;

/// The parameters an exchange is priced with: the inter-node LogGP class and fragment payload
/// of the broadcast's cost model, and the engine's own costs (`model.*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExchangeModel {
    /// The inter-node link (`model.latency_ns`, `overhead_ns`, `ns_per_byte`).
    pub link: LogGp,
    /// Payload bytes per fragment (`protocol.mtu` less the frame's overhead).
    pub payload: u32,
    /// `O`: engine time per byte sent or received.
    pub byte_ns: f64,
    /// `R`: engine time per byte reduced.
    pub reduce_ns: f64,
    /// `m`: engine time per message sent or received.
    pub message_ns: f64,
    /// `C`: CPUs the engines share; 0 for a core each.
    pub cpus: u32,
    /// `W`: a sequential step's wait for a CPU when they share them.
    pub wake_ns: f64,
    /// Communicators of fewer engines broadcast point to point (`protocol.small_comm`).
    pub small_comm: u32,
    /// Extra latency of a multicast (`model.switch_ns`).
    pub switch_ns: f64,
}

impl ExchangeModel {
    /// The model `c` describes.
    pub fn from_config(c: &EngineConfig) -> Self {
        let link = super::select::fabric_from_config(c).intra_site;
        ExchangeModel {
            link,
            payload: super::select::fragment_payload(c.protocol.mtu).max(1),
            byte_ns: c.model.engine_ns_per_byte,
            reduce_ns: c.model.reduce_ns_per_byte,
            message_ns: c.model.message_ns,
            cpus: c.model.engine_cpus,
            wake_ns: c.model.wake_ns,
            small_comm: c.protocol.small_comm,
            switch_ns: c.model.switch_ns,
        }
    }

    fn frags(&self, n: f64) -> f64 {
        let k = (n / f64::from(self.payload)).ceil();
        if k < 1.0 {
            1.0
        } else {
            k
        }
    }

    /// One end of an `n`-byte message: `c(n)`.
    fn end(&self, n: f64) -> f64 {
        self.message_ns + self.frags(n) * self.link.overhead_ns + n * self.byte_ns
    }

    /// A lane's time for an `n`-byte message.
    fn lane(&self, n: f64) -> f64 {
        let w = n.min(f64::from(self.payload)) + f64::from(super::cost::FRAME_OVERHEAD);
        self.frags(n) * (w * self.link.ns_per_byte).max(self.link.gap_ns)
    }

    fn shared(&self, engines: u32) -> bool {
        self.cpus > 0 && engines > self.cpus
    }

    /// A step's start on `engines` engines: `L`, plus a wake-up where they share CPUs.
    fn step(&self, engines: u32) -> f64 {
        self.link.latency_ns + if self.shared(engines) { self.wake_ns } else { 0.0 }
    }

    /// The prediction from a critical path and the work of all engines.
    fn time(&self, engines: u32, path: f64, work: f64) -> f64 {
        if self.shared(engines) {
            path.max(work / f64::from(self.cpus))
        } else {
            path
        }
    }

    /// Path and work of the `r` swaps of recursive doubling or Rabenseifner among `p` engines,
    /// the swap `i` moving `len(i)` bytes each way and reducing `red(i)`.
    fn swaps(
        &self,
        e: u32,
        p: u32,
        r: u32,
        len: impl Fn(u32) -> f64,
        red: impl Fn(u32) -> f64,
    ) -> (f64, f64) {
        let (mut path, mut work) = (0.0, 0.0);
        for i in 0..r {
            let (n, x) = (len(i), red(i));
            path += self.step(e) + (2.0 * self.end(n)).max(self.lane(n)) + x * self.reduce_ns;
            work += f64::from(p) * (2.0 * self.end(n) + x * self.reduce_ns);
        }
        (path, work)
    }

    /// The folds of the `E − P` engines past `P`: their part in (`part` bytes, reduced by the
    /// partner in an allreduce), the result out (`result` bytes).
    fn folds(&self, e: u32, p: u32, part: f64, reduce: bool, result: f64) -> (f64, f64) {
        if e <= p {
            return (0.0, 0.0);
        }
        let x = if reduce { part * self.reduce_ns } else { 0.0 };
        // One way each: the two ends' work overlaps as the fragments stream.
        let path = 2.0 * self.step(e) + self.end(part) + x + self.end(result);
        (path, f64::from(e - p) * (2.0 * self.end(part) + x + 2.0 * self.end(result)))
    }

    /// Every engine's `n`-byte part broadcast to the others, plus `local` more engine work per
    /// engine (an allreduce's: every part stored into each local rank's buffer and reduced
    /// there).
    fn parts(&self, e: u32, n: f64, local: f64) -> f64 {
        let (ef, others) = (f64::from(e), f64::from(e - 1));
        if e >= self.small_comm {
            let path = self.step(e) + self.switch_ns + (ef * self.end(n)).max(others * self.lane(n)) + local;
            return self.time(e, path, ef * (ef * self.end(n) + local));
        }
        let depth = super::cost::ceil_log2(u64::from(e));
        let busy = others * (2.0 * self.end(n)).max(self.lane(n)) + local;
        self.time(e, depth * self.step(e) + busy, ef * (others * 2.0 * self.end(n) + local))
    }

    /// An allreduce's exchange of `len`-byte node results of `elem`-byte elements on `engines`,
    /// the largest holding `largest` ranks. Multicast, every rank's buffer receives every
    /// engine's result and is reduced there (`largest · E` blocks stored and `largest · (E − 1)`
    /// reduced per engine); doubling and Rabenseifner's store the result once per rank.
    pub fn allreduce(&self, x: Exchange, engines: u32, largest: u32, len: u64, elem: u64) -> f64 {
        let (e, n, q) = (engines.max(1), len as f64, f64::from(largest.max(1)));
        if e < 2 {
            return 0.0;
        }
        let p = crate::comm::links::power_below(e);
        let r = p.trailing_zeros();
        let (ef, others) = (f64::from(e), f64::from(e - 1));
        let stores = q * n * self.byte_ns;
        // The folds, then the result stored into every local rank's buffer.
        let (fold_path, fold_work) = self.folds(e, p, n, true, n);
        let (tail_path, tail_work) = (fold_path + stores, fold_work + ef * stores);
        match x {
            Exchange::Multicast => {
                self.parts(e, n, q * (ef * n * self.byte_ns + others * n * self.reduce_ns))
            }
            Exchange::Rabenseifner => {
                let elems = (len / elem.max(1)) as f64;
                let seg = |i: u32| (elems / f64::from(2u32 << i)).ceil() * elem.max(1) as f64;
                let (a, b) = self.swaps(e, p, r, seg, seg);
                let (c, d) = self.swaps(e, p, r, seg, |_| 0.0);
                self.time(e, a + c + tail_path, b + d + tail_work)
            }
            _ => {
                let (a, b) = self.swaps(e, p, r, |_| n, |_| n);
                self.time(e, a + tail_path, b + tail_work)
            }
        }
    }

    /// An allgather's exchange on `engines` whose largest node part is `largest` bytes.
    pub fn allgather(&self, x: Exchange, engines: u32, largest: u64) -> f64 {
        let (e, m) = (engines.max(1), largest as f64);
        if e < 2 {
            return 0.0;
        }
        match x {
            Exchange::Multicast => self.parts(e, m, 0.0),
            Exchange::Ring => {
                let one = (2.0 * self.end(m)).max(self.lane(m));
                let others = f64::from(e - 1);
                self.time(e, others * (self.step(e) + one), f64::from(e) * others * 2.0 * self.end(m))
            }
            _ => {
                let p = crate::comm::links::power_below(e);
                let (a, b) = self.swaps(e, p, p.trailing_zeros(), |i| m * f64::from(1u32 << i), |_| 0.0);
                let (c, d) = self.folds(e, p, m, false, m * f64::from(e));
                self.time(e, a + c, b + d)
            }
        }
    }

    /// An alltoall of `block`-byte blocks among `size` ranks on `engines`, the largest engine
    /// holding `largest`, pairwise (`aggregated` or not) or by the multicast alltoall.
    pub fn alltoall(
        &self,
        x: Exchange,
        engines: u32,
        size: u32,
        largest: u32,
        block: u64,
        aggregated: bool,
    ) -> f64 {
        let (e, b, q) = (engines.max(1), block as f64, f64::from(largest.max(1)));
        if e < 2 {
            return 0.0;
        }
        match x {
            Exchange::Pairwise => {
                let one = if aggregated {
                    // One transfer of q² blocks each way, staged and scattered by local copies.
                    (2.0 * self.end(q * q * b)).max(self.lane(q * q * b)) + 2.0 * q * q * b * self.byte_ns
                } else {
                    (2.0 * q * q * self.end(b)).max(q * q * self.lane(b))
                };
                // Every transfer is posted at once (the pairs' queues keep the order): one step,
                // then the busiest engine's work.
                let others = f64::from(e - 1);
                self.time(e, self.step(e) + others * one, f64::from(e) * others * one)
            }
            _ => self.parts(e, q * f64::from(size) * b, 0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(cpus: u32) -> ExchangeModel {
        let mut c = EngineConfig::default();
        c.model.engine_cpus = cpus;
        c.protocol.mtu = 4088;
        ExchangeModel::from_config(&c)
    }

    #[test]
    fn any_input_gives_a_finite_non_negative_time() {
        let m = model(2);
        for e in [0, 1, 2, 3, 4, 7, 8, 64, 1024, u32::MAX] {
            for len in [0, 1, 8, 4096, 1 << 20, u64::MAX] {
                for x in [Exchange::Doubling, Exchange::Rabenseifner, Exchange::Multicast, Exchange::Ring] {
                    let a = m.allreduce(x, e, 1, len, 8);
                    let g = m.allgather(x, e, len);
                    assert!(a.is_finite() && a >= 0.0 && g.is_finite() && g >= 0.0, "{x} {e} {len}");
                }
                for agg in [false, true] {
                    let t = m.alltoall(Exchange::Pairwise, e, e.saturating_mul(2), 2, len, agg);
                    assert!(t.is_finite() && t >= 0.0);
                }
            }
        }
    }

    #[test]
    fn sharing_cpus_charges_all_engines_work() {
        // On its own cores a multicast allreduce of 8 engines costs its busiest engine 7
        // receptions; sharing 2 CPUs, all 8 engines' work queue for them.
        let own = model(0).allreduce(Exchange::Multicast, 8, 1, 1 << 20, 8);
        let shared = model(2).allreduce(Exchange::Multicast, 8, 1, 1 << 20, 8);
        assert!(shared > 3.0 * own, "{shared} against {own}");
        assert_eq!(model(16).allreduce(Exchange::Multicast, 8, 1, 1 << 20, 8), own);
    }

    /// The choices against what `ringcast bench` measured on this 2-core machine's `shm`
    /// (docs/performance.md: "Recursive doubling between the leaders", "Rabenseifner between
    /// the leaders", "Allgather between the leaders", "The ring between the leaders",
    /// "Pairwise alltoall", "Which exchange: the cost model"), every case where one exchange was
    /// 1.3× or more faster, on engines sharing two CPUs as `ringcast run` and `ringcast bench`
    /// tell them (23 of 26 picked); `model.engine_ns_per_byte` and `model.wake_ns` are fitted to these (every
    /// case holds from 0.6 ns/B with steps up to 5 µs; with a sleeping wake-up's 25 µs, a 4 KiB
    /// allreduce on three engines goes multicast). Three cases the model cannot tell, allgathers
    /// of long node parts where the parts' pipelined broadcasts outran doubling by 1.3–1.45×:
    /// it sees the same bytes moved either way and predicts them within 20 % of each other.
    #[test]
    fn the_model_picks_what_was_measured_faster_here() {
        use crate::model::compose::{allgather, allreduce, alltoall};
        use Exchange::*;
        let mut c = EngineConfig::default();
        c.protocol.mtu = 4088;
        c.model.engine_cpus = 2;
        let k = 1024u64;
        for (e, len, want) in [
            (3, 4 * k, Doubling),
            (3, 64 * k, Doubling),
            (2, 1 << 20, Doubling),
            (4, 64 * k, Rabenseifner),
            (4, 1 << 20, Rabenseifner),
            (4, 4 << 20, Rabenseifner),
            (8, 64 * k, Rabenseifner),
            (8, 1 << 20, Rabenseifner),
            (8, 4 << 20, Rabenseifner),
        ] {
            // (At 64 KiB doubling was measured against multicast only: not multicast.)
            assert_eq!(allreduce(&c, e, 1, len, 8), want, "allreduce on {e} engines, {len} B");
        }
        for (e, part, want) in [
            (8, 64 * k, Doubling),
            (8, 128 * k, Doubling),
            (4, 64 * k, Doubling),
            (3, 128 * k, Multicast),
            (6, 64 * k, Doubling),
        ] {
            assert_eq!(allgather(&c, e, part), want, "allgather on {e} engines, {part} B node parts");
        }
        let m = ExchangeModel::from_config(&c);
        for (e, part) in [(5, 128 * k), (4, 256 * k), (6, 128 * k)] {
            let (d, x) = (m.allgather(Doubling, e, part), m.allgather(Multicast, e, part));
            assert!(d.max(x) < 1.2 * d.min(x), "{e} engines, {part} B: {d} against {x}");
        }
        for (e, size, q, block) in [
            (2, 4, 2, 64 * k),
            (4, 4, 1, 8),
            (4, 4, 1, 4 * k),
            (4, 4, 1, 64 * k),
            (8, 8, 1, 4 * k),
            (8, 8, 1, 64 * k),
            (4, 8, 2, 4 * k),
            (4, 8, 2, 64 * k),
        ] {
            let got = alltoall(&c, e, size, q, block);
            assert_eq!(got, Pairwise, "alltoall {e} engines x {q}, {block} B blocks");
        }
        // Unaggregated, 2 x 2 at 8 B: the multicast alltoall's one message per node was 1.5x
        // faster than four per pair of engines.
        c.protocol.alltoall_aggregate = false;
        assert_eq!(alltoall(&c, 2, 4, 2, 8), Multicast);
    }

    /// On engines with a core each and a switch that replicates (from `small_comm` engines),
    /// a long allgather's parts are multicast once — each engine receives what doubling would,
    /// without sending its `P − 1` parts — and a long allreduce halves.
    #[test]
    fn engines_with_their_own_cores_multicast_long_parts() {
        use crate::model::compose::{allgather, allreduce};
        let c = EngineConfig::default();
        assert_eq!(allgather(&c, 64, 1 << 20), Exchange::Multicast);
        assert_eq!(
            allgather(&c, 64, 8),
            Exchange::Doubling,
            "short: log2 E steps against one multicast and E - 1 messages"
        );
        assert_eq!(allreduce(&c, 64, 1, 4 << 20, 8), Exchange::Rabenseifner);
        assert_eq!(allreduce(&c, 2, 1, 4 << 20, 8), Exchange::Doubling, "halving needs four engines");
    }
}
