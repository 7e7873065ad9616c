#!/usr/bin/env bash
# The test command: installs missing dependencies, builds the release profile once (used
# by tests and benchmarks alike), then runs every test of the workspace against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --workspace --bins
cargo test --release --workspace "$@"
