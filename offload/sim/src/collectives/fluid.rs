//! Transfers inside one node as streams sharing bandwidth: each [`Flow`] moves bytes at a rate
//! its core(s) allow, and every resource it crosses (a memory node, a link direction) is
//! shared max-min fairly among the flows crossing it — equal shares, what one flow cannot use
//! going to the others (progressive filling). A flow first spends a fixed setup time (the
//! call, a flag), moving nothing.
//!
//! Each core runs its flows in order; a flow of several cores (a blocking send and its
//! receive) starts when it is next for all of them. Rates change only when a flow starts or
//! ends, so the run jumps from one such moment to the next: exact for this model, and
//! deterministic.

/// One transfer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Flow {
    /// The cores busy with it (each runs its flows in order).
    pub(crate) cores: Vec<usize>,
    /// Bytes to move (0: only the setup).
    pub(crate) bytes: f64,
    /// The fastest it can go, bytes per ns (the core's copy or reduce speed).
    pub(crate) cap: f64,
    /// Resources it crosses, each with the bytes of that resource one byte of the flow takes
    /// (2 for a copy reading and writing the same memory node).
    pub(crate) uses: Vec<(usize, f64)>,
    /// Fixed time before it moves anything, ns.
    pub(crate) setup_ns: f64,
}

/// Flows on cores over shared resources.
pub(crate) struct Program {
    capacity: Vec<f64>,
    flows: Vec<Flow>,
    queues: Vec<Vec<usize>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Waiting,
    Setup { until: f64 },
    Moving { left: f64 },
    Done,
}

impl Program {
    /// `cores` cores and resources of `capacity` bytes per ns each.
    pub(crate) fn new(cores: usize, capacity: Vec<f64>) -> Self {
        Program { capacity, flows: Vec::new(), queues: vec![Vec::new(); cores] }
    }

    /// Appends `flow` to each of its cores' queues.
    pub(crate) fn push(&mut self, flow: Flow) {
        let id = self.flows.len();
        for &c in &flow.cores {
            self.queues[c].push(id);
        }
        self.flows.push(flow);
    }

    /// Every core waits for every other, then `ns` more (a shared-memory barrier).
    pub(crate) fn barrier(&mut self, ns: f64) {
        let cores = (0..self.queues.len()).collect();
        self.push(Flow { cores, bytes: 0.0, cap: f64::INFINITY, uses: Vec::new(), setup_ns: ns });
    }

    /// Runs every flow; the time the last one ends, ns (infinite if the queues deadlock, which
    /// the schedules built here never do).
    pub(crate) fn run(&self) -> f64 {
        let mut state = vec![State::Waiting; self.flows.len()];
        let mut head = vec![0usize; self.queues.len()];
        let mut now = 0.0;
        let mut done = 0;
        while done < self.flows.len() {
            done += self.start_ready(&mut state, &mut head, now);
            if done == self.flows.len() {
                break;
            }
            let moving: Vec<usize> =
                (0..state.len()).filter(|&f| matches!(state[f], State::Moving { .. })).collect();
            let rates = self.allocate(&moving);
            let mut next = f64::INFINITY;
            for (f, s) in state.iter().enumerate() {
                if let State::Setup { until } = *s {
                    next = next.min(until);
                }
                if let Some(i) = moving.iter().position(|&m| m == f) {
                    if let State::Moving { left } = *s {
                        if rates[i] > 0.0 {
                            next = next.min(now + left / rates[i]);
                        }
                    }
                }
            }
            if !next.is_finite() {
                return f64::INFINITY;
            }
            let dt = next - now;
            now = next;
            for (i, &f) in moving.iter().enumerate() {
                if let State::Moving { left } = state[f] {
                    let left = left - rates[i] * dt;
                    // Ends now if what is left would take less than a picosecond.
                    state[f] = if left <= rates[i] * 1e-3 { State::Done } else { State::Moving { left } };
                }
            }
            for (s, flow) in state.iter_mut().zip(&self.flows) {
                if let State::Setup { until } = *s {
                    if until <= now {
                        *s = if flow.bytes > 0.0 { State::Moving { left: flow.bytes } } else { State::Done };
                    }
                }
            }
            for (f, s) in state.iter().enumerate() {
                if *s == State::Done
                    && self.flows[f].cores.iter().any(|&c| self.queues[c].get(head[c]) == Some(&f))
                {
                    for &c in &self.flows[f].cores {
                        head[c] += 1;
                    }
                    done += 1;
                }
            }
        }
        now
    }

    /// Starts every flow that is next on all its cores; returns how many ended at once (no
    /// setup, no bytes), which may let further flows start.
    fn start_ready(&self, state: &mut [State], head: &mut [usize], now: f64) -> usize {
        let mut ended = 0;
        loop {
            let mut changed = false;
            for c in 0..self.queues.len() {
                let Some(&f) = self.queues[c].get(head[c]) else { continue };
                let flow = &self.flows[f];
                if state[f] != State::Waiting
                    || !flow.cores.iter().all(|&k| self.queues[k].get(head[k]) == Some(&f))
                {
                    continue;
                }
                changed = true;
                state[f] = if flow.setup_ns > 0.0 {
                    State::Setup { until: now + flow.setup_ns }
                } else if flow.bytes > 0.0 {
                    State::Moving { left: flow.bytes }
                } else {
                    for &k in &flow.cores {
                        head[k] += 1;
                    }
                    ended += 1;
                    State::Done
                };
            }
            if !changed {
                return ended;
            }
        }
    }

    /// Max-min fair rates of the `moving` flows: all rise together until a flow reaches its
    /// cap or a resource fills; those stop rising; repeat.
    fn allocate(&self, moving: &[usize]) -> Vec<f64> {
        let mut rate = vec![0.0; moving.len()];
        let mut frozen = vec![false; moving.len()];
        let mut used = vec![0.0; self.capacity.len()];
        while frozen.iter().any(|f| !f) {
            let mut weight = vec![0.0; self.capacity.len()];
            let mut step = f64::INFINITY;
            for (i, &f) in moving.iter().enumerate() {
                if !frozen[i] {
                    step = step.min(self.flows[f].cap - rate[i]);
                    for &(r, w) in &self.flows[f].uses {
                        weight[r] += w;
                    }
                }
            }
            for (r, &w) in weight.iter().enumerate() {
                if w > 0.0 {
                    step = step.min((self.capacity[r] - used[r]) / w);
                }
            }
            if !step.is_finite() {
                break;
            }
            let step = step.max(0.0);
            for (r, &w) in weight.iter().enumerate() {
                used[r] += step * w;
            }
            let full: Vec<bool> =
                (0..self.capacity.len()).map(|r| used[r] >= self.capacity[r] * (1.0 - 1e-12)).collect();
            for (i, &f) in moving.iter().enumerate() {
                if frozen[i] {
                    continue;
                }
                rate[i] += step;
                let flow = &self.flows[f];
                if rate[i] >= flow.cap * (1.0 - 1e-12) || flow.uses.iter().any(|&(r, _)| full[r]) {
                    frozen[i] = true;
                }
            }
        }
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(core: usize, bytes: f64, cap: f64, uses: Vec<(usize, f64)>) -> Flow {
        Flow { cores: vec![core], bytes, cap, uses, setup_ns: 0.0 }
    }

    #[test]
    fn flows_share_a_resource_and_keep_their_caps() {
        // Two flows of 100 bytes on a 1 byte/ns resource: 200 ns. One capped at 0.25 leaves the
        // other 0.75 until it is done.
        let mut p = Program::new(2, vec![1.0]);
        p.push(flow(0, 100.0, 10.0, vec![(0, 1.0)]));
        p.push(flow(1, 100.0, 10.0, vec![(0, 1.0)]));
        assert!((p.run() - 200.0).abs() < 1e-6);
        let mut p = Program::new(2, vec![1.0]);
        p.push(flow(0, 25.0, 0.25, vec![(0, 1.0)]));
        p.push(flow(1, 100.0, 10.0, vec![(0, 1.0)]));
        // 0..100 ns: 0.25 and 0.75 (75 bytes); then the second alone at 1.0: 25 ns more.
        assert!((p.run() - 125.0).abs() < 1e-6);
    }

    #[test]
    fn cores_run_in_order_and_barriers_wait_for_all() {
        let mut p = Program::new(2, vec![f64::INFINITY]);
        p.push(flow(0, 100.0, 1.0, vec![]));
        p.push(Flow { setup_ns: 50.0, ..flow(0, 100.0, 1.0, vec![]) });
        p.barrier(10.0);
        p.push(flow(1, 10.0, 1.0, vec![]));
        // Core 0: 100 + 50 + 100; the barrier: 10; core 1: 10.
        assert!((p.run() - 270.0).abs() < 1e-6);
    }

    #[test]
    fn a_two_core_flow_waits_for_both() {
        let mut p = Program::new(2, vec![f64::INFINITY]);
        p.push(flow(1, 30.0, 1.0, vec![]));
        p.push(Flow { cores: vec![0, 1], ..flow(0, 10.0, 1.0, vec![]) });
        assert!((p.run() - 40.0).abs() < 1e-6);
    }
}
