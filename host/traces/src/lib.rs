//! Spot-instance availability traces (being written).
