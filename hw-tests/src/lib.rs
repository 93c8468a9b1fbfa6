//! `ringcast-hw-tests`: what the tests and the `ringcast-hw` tool share to run ringcast on real
//! kernel-bypass paths — DPDK over `net_af_xdp` on veth pairs joined by a Linux bridge in
//! network namespaces, DPDK over `net_memif` between processes, and the verbs fabric (UD queue
//! pairs) on an RDMA device where one exists.
//!
//! * [`env`] — why a path cannot run here, if it cannot (the tests then print `SKIP: <reason>`);
//! * [`netns`] — a bridge and member namespaces with fixed MACs and addresses, removed on drop;
//! * [`proc`] — the `ringcast-engine` binary (found, and built if stale), engine processes and
//!   line-protocol children, all stopped on drop;
//! * [`roles`] — what a child process does: a broadcast host (verified, or timed) or a fabric
//!   member (frames verified one by one, or a flood for frames per second);
//! * [`cluster`] — engines of one fabric in a lab plus one host per node, driven through
//!   barriers;
//! * [`dpu`] — the DPU emulation's boundary: engines and hosts in namespaces of their own,
//!   TCP control, DMA-only host memory.
//!
//! Contract: everything a test creates — namespaces, processes, DPDK runtime directories — is
//! owned by a guard whose `Drop` removes it, also when the test fails; nothing is sent anywhere
//! but into namespaces the test created (or between processes of this machine, for memif; over
//! the RDMA port, to this machine's own queue pairs, for verbs).
pub mod cluster;
pub mod dpu;
pub mod env;
/// The namespace lab lives in the host library (`ringcast run --netns` uses it too).
pub use ringcast_host::netns;
pub mod proc;
pub mod roles;
