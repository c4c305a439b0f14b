//! End-to-end tests of `parcae-host run` with real worker processes live in
//! `tests/`; this library is empty (the package exists to hold them apart from
//! the sandbox tests, which must not need libtorch).
