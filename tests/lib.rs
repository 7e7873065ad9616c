//! End-to-end tests of the `modelcas` binary live beside this file (`roundtrip.rs`,
//! `bad_input.rs`, `crash.rs`), with shared helpers in `common/`. They run the release
//! binary (built by `cargo build --release` before `cargo test --release`; the helpers
//! find it next to the test executables, or at `$MODELCAS_BIN`).
