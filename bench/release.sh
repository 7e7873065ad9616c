#!/usr/bin/env bash
# The release check's benchmark (issue 39; docs/design/release-check.md §9): what the check
# costs an ingest of r1..r4 (BIN_A, a build before the check, against BIN_B, one with it,
# alternating), `modelcas check` of each of r1..r4 warm and cold, and a shard of 100,000
# tensors and a 40 MB tokenizer.json (time and peak RSS); bench/release_bench.py says what
# each row is.
#   bench/release.sh BIN_A BIN_B [ROUNDS] [--parts=ingest,check,stress]
#                    (default 5 rounds; the 512 MiB series)
# BIN_A: e.g. the main before issue 39, built apart:
#   git worktree add --detach /tmp/base 5b81496 && cd /tmp/base &&
#   CARGO_TARGET_DIR=$HOME/.cache/modelcas/target-base cargo build --release --bin modelcas
# Needs root (drop_caches) and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"; shift 2
rounds=5
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then rounds="$1"; shift; fi
. bench/lib.sh
need_debs time:/usr/bin/time
BENCH_BIN="$b" bench_setup 512
"$MODELCAS_PYTHON" bench/release_bench.py "$a" "$b" "$series" "$work" "$rounds" "$@"
