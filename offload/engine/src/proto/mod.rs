//! The reliable broadcast protocol (issue 3), sans-IO like the rest of the core: fragment
//! bookkeeping, and — as it lands — communicators, the two-stage multicast broadcast with ring
//! repair, channels and delayed synchronization.
pub mod bitmap;
pub mod comm;
pub mod protocol;
