//! QUIC transport for Parcae (work in progress).
