//! The end-to-end tests of the `modelcas` binary, in one test binary (issue 37: 24 binaries,
//! each linked on its own, cost minutes of linking and gigabytes of disk): each module is
//! what was a test binary of its own, and a test's name is `module::test`
//! (`cargo test --release --workspace --features modelcas-store/failpoints --test e2e --
//! gc::`). The S3-only tests are the other binary, `s3` (tests/s3.rs): one of them stops
//! the S3 server, so they run alone, one at a time.
//!
//! The tests of one process share what a process has: the generated series (made once,
//! `common::series`), the environment (only `Env::backend` sets variables, the same values
//! every time), the working directory and umask (no test changes them; a child's umask is
//! set in the child). Anything a test must have alone belongs in its own binary.

mod common;
#[path = "../hubclient/tests/fake/mod.rs"]
mod fake;

mod bad_input;
mod bundle;
mod crash;
mod csi;
mod features;
mod file_cache;
mod fleet;
mod format_reader;
mod gc;
mod gc_races;
mod gc_unused;
mod leases;
mod metrics_exposition;
mod mount;
mod mount_counts;
mod ops;
mod pull;
mod release;
mod roundtrip;
mod serve;
mod sync;
mod takeover;
mod ui;
mod unchanged;
mod upload;
mod upstream;
mod xet;
mod xet_memo;
