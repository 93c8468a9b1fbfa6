//! Runners: what drives the sans-IO engine (`ringcast_proto::engine`) against real memory and
//! sockets. Two of them, one loop:
//! [`spawn_thread`] (pinned polling thread in the host process) and [`run_daemon`] (separate
//! process, DPU emulation). Both run [`EngineLoop`].
mod accept;
mod clock;
mod closer;
mod control;
mod counters;
mod daemon;
pub mod dma;
mod engine_loop;
pub mod idle;
pub mod log;
pub mod net;
mod notify;
mod pin;
mod thread;

pub use clock::Clock;
pub use daemon::run_daemon;
pub use engine_loop::EngineLoop;
pub use idle::Idle;
pub use pin::{pin_current_thread, Pinned};
pub use thread::{spawn_thread, Driver, ThreadEngine};
