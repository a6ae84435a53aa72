//! End-to-end tests live in `tests/tests/`; `src/bin/backend.rs` is the backend process they
//! put behind the gateway.
