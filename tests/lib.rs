//! End-to-end tests of the `modelcas` binary live beside this file: `e2e.rs` is one test
//! binary whose modules are the suites (`roundtrip.rs`, `bad_input.rs`, `crash.rs`, ...),
//! `s3.rs` another (the S3-only tests), with shared helpers in `common/`. They run the
//! release binary (built by `cargo build --release` before `cargo test --release`; the
//! helpers find it next to the test executables, or at `$MODELCAS_BIN`).
