//! The native worker (work in progress).
