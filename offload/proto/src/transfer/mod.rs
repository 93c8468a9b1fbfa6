//! The reliable-transfer layer (see `docs/protocol.md`): fragment bitmaps and geometry
//! ([`bitmap`]), what the layer asks of its surroundings ([`env`](mod@env)) and the driver of
//! a test or the simulator that answers its DMA jobs itself ([`host_driver`]), and the protocol
//! ([`protocol`]: communicators, frames in, DMA jobs done) with its parts, one file each: the
//! state (`state.rs`), ring repair (`repair.rs`), the delayed synchronization (`sync.rs`), the
//! barrier on its tree (`barrier.rs`), timers (`timers.rs`), the seal every frame leaves with
//! (`seal.rs`), the message MAC computed as the bytes move (`mac.rs`), a root's load whose
//! driver sums each fragment's payload as it moves it ([`summed`]) and the frames that tell an
//! engine what a call it could not read was (`call_shape.rs`). The broadcast's own data path
//! is [`crate::schedule::bcast`]'s. What a protocol holds is kept small for the simulator's
//! million ranks: its immutable configuration shared (`tunables.rs`), its counters with the
//! rare ones boxed (`counts.rs`), tables that are one word until first grown (`boxed_vec.rs`),
//! optional moments in one word (`when.rs`), all held to a budget (`footprint.rs`).
pub(crate) mod barrier;
pub mod bitmap;
pub(crate) mod boxed_vec;
pub mod call_shape;
pub(crate) mod counts;
pub mod env;
#[cfg(test)]
mod footprint;
pub mod host_driver;
pub(crate) mod mac;
pub mod protocol;
mod repair;
pub(crate) mod seal;
pub(crate) mod state;
pub mod summed;
pub(crate) mod sync;
mod timers;
pub(crate) mod tunables;
pub(crate) mod when;
