//! The kernel UDP fabric (being written).
