#!/usr/bin/env bash
# The serve fuzz soak: N arbitrary inputs (default 1,000,000), a fifth each through the
# router (arbitrary methods, paths, Range and Authorization values against a small store),
# the whole HTTP stack (arbitrary bytes and requests built from arbitrary parts, through
# hyper on an in-memory connection), the decoders, and the router and the stack again against
# a hub with an allow-list, a version lock and an upstream (a fake Hub in the process). Fails
# on any panic or malformed reply, or on a policy broken (a fetch outside the allow-list or of
# a locked repository, a locked or inside-only ref moved, two repositories differing only in
# case); prints the inputs tried and the handler panics counted (0).
#   bench/serve_fuzz.sh [N]
# CI runs the same properties with 2,000 cases each (`cargo test -p modelcas-serve --test fuzz`).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000000}"
SERVE_FUZZ_INPUTS="$n" cargo test --release --workspace --features modelcas-store/failpoints \
  --test fuzz -- \
  --ignored soak --nocapture --test-threads 1
