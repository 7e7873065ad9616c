#!/usr/bin/env bash
# The serve fuzz soak: N arbitrary inputs (default 1,000,000), a third each through the
# router (arbitrary methods, paths, Range and Authorization values against a small store),
# the whole HTTP stack (arbitrary bytes and requests built from arbitrary parts, through
# hyper on an in-memory connection) and the decoders. Fails on any panic or malformed reply;
# prints the inputs tried and the handler panics counted (0).
#   bench/serve_fuzz.sh [N]
# CI runs the same properties with 2,000 cases each (`cargo test -p modelcas-serve --test fuzz`).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
SERVE_FUZZ_INPUTS="$n" cargo test --release -p modelcas-serve --test fuzz -- \
  --ignored soak --nocapture --test-threads 1
