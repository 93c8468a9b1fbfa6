//! Allreduce and reduce (placeholder: filled below).
pub(crate) mod schedule;
