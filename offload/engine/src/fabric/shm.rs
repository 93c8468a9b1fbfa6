//! The shared-memory emulation fabric (being written).
