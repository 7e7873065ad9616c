#!/usr/bin/env bash
# The test command: installs missing dependencies (scripts/install-deps.sh), builds the
# release profile once (used by tests and benchmarks alike) into $CARGO_TARGET_DIR
# (default ~/.cache/modelcas/target, outside the clone, so a new clone reuses the build),
# then runs every test of the workspace against it. Arguments narrow the run and go to
# `cargo test --workspace` (e.g. `--test e2e -- gc::`: the end-to-end suites are modules of
# one test binary, tests/e2e.rs, and `--test s3` is the S3-only one): the package selection
# stays the whole workspace, because selecting one package (-p) unifies dependency features
# differently and so builds the AWS SDK a second time. The build has the test hooks (pause points and
# crash steps, the `failpoints` feature of the store); release binaries do not.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# shellcheck source=scripts/env.sh
. scripts/env.sh
features=modelcas-store/failpoints
cargo build --release --workspace --bins --features "$features"
cargo test --release --workspace --features "$features" --no-fail-fast "$@"
