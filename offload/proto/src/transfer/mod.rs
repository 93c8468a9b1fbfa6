//! The reliable-transfer layer: fragment bitmaps and geometry ([`bitmap`]) and the protocol state
//! machine ([`protocol`]: fragmentation, CRC and MAC, repair and retransmission, channels and
//! delayed synchronization, liveness and typed failure; see `docs/protocol.md`).
pub mod bitmap;
pub mod protocol;
