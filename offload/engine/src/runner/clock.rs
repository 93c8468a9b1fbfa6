//! The runners' clock: monotonic nanoseconds since the runner started. The core never reads it;
//! runners pass `now` in.
use ringcast_proto::Nanos;
use std::time::Instant;

/// Monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// Starts at 0 now.
    pub fn new() -> Self {
        Clock(Instant::now())
    }

    /// Nanoseconds since [`Clock::new`].
    pub fn now(&self) -> Nanos {
        self.0.elapsed().as_nanos() as Nanos
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
