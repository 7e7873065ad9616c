#!/usr/bin/env bash
# The test command: installs missing dependencies (scripts/install-deps.sh), builds the
# release profile once (used by tests and benchmarks alike) into $CARGO_TARGET_DIR
# (default ~/.cache/modelcas/target, outside the clone, so a new clone reuses the build),
# then runs every test of the workspace against it. Arguments narrow the run and go to
# `cargo test --workspace` (e.g. `--test gc -- name`): the package selection stays the whole
# workspace, because selecting one package (-p) unifies dependency features differently
# and so builds the AWS SDK a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# shellcheck source=scripts/env.sh
. scripts/env.sh
cargo build --release --workspace --bins
cargo test --release --workspace --no-fail-fast "$@"
