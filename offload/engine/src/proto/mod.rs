//! The reliable broadcast protocol, sans-IO like the rest of the core: fragment bitmaps and
//! geometry ([`bitmap`]), communicators and their topologies ([`comm`]), communicator identity
//! ([`ident`]), frame tags and message MACs under the communicator's key ([`auth`]), and the
//! state machine itself ([`protocol`]; see `docs/protocol.md`).
pub mod algo;
pub mod auth;
pub mod bitmap;
pub mod comm;
pub mod ident;
pub mod protocol;
