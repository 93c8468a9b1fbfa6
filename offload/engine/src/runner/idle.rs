//! What a polling loop does when a pass found no work: spin, then yield, then sleep briefly.
//!
//! A dedicated core (DPU ARM core, isolated host core) wants pure spinning. A machine with fewer
//! cores than pollers (this 2-core CI box runs an engine and its hosts) must give the CPU away,
//! or the host the engine waits for never runs: `spin-yield` spins `idle_spins` passes, yields
//! for `idle_yields` more, then sleeps `idle_sleep_us` per pass until work appears.
use crate::config::{Config, PollMode};
use std::time::Duration;

/// Idle back-off state of one loop.
#[derive(Debug)]
pub struct Idle {
    mode: PollMode,
    spins: u32,
    yields: u32,
    sleep: Duration,
    empty: u32,
}

impl Idle {
    /// Back-off per `config` (`Auto` resolved for this machine).
    pub fn new(config: &Config) -> Self {
        Idle {
            mode: config.runner.poll_mode.resolve(),
            spins: config.runner.idle_spins,
            yields: config.runner.idle_yields,
            sleep: Duration::from_micros(config.runner.idle_sleep_us as u64),
            empty: 0,
        }
    }

    /// The mode in force.
    pub fn mode(&self) -> PollMode {
        self.mode
    }

    /// True once the back-off has reached its sleeping stage.
    pub fn sleeping(&self) -> bool {
        self.mode == PollMode::SpinYield && self.empty > self.spins.saturating_add(self.yields)
    }

    /// A pass found work.
    pub fn busy(&mut self) {
        self.empty = 0;
    }

    /// A pass found nothing: back off one step.
    pub fn idle(&mut self) {
        self.empty = self.empty.saturating_add(1);
        match self.mode {
            PollMode::SpinYield if self.empty > self.spins.saturating_add(self.yields) => {
                std::thread::sleep(self.sleep)
            }
            PollMode::SpinYield if self.empty > self.spins => std::thread::yield_now(),
            _ => std::hint::spin_loop(),
        }
    }
}
