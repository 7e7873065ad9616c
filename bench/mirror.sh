#!/usr/bin/env bash
# The pull-through mirror (issue 14), `modelcas serve --upstream` in front of a second
# `modelcas serve` (the upstream), with the huggingface_hub client:
#   (a) the first snapshot_download of r1 through the mirror (a miss: pulled, then served)
#       against a direct snapshot_download from the upstream;
#   (b) the second snapshot_download through the mirror (a hit) against the first;
#   (c) 8 clients starting snapshot_download of a new revision (r2) at once through a fresh
#       mirror: wall time, and the bytes the upstream sent against one copy of r2.
#   bench/mirror.sh [SIZE_MIB] [ROUNDS]     (default 64, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-64}"
rounds="${2:-3}"
bench_setup "$size"
"$MODELCAS_PYTHON" bench/mirror_bench.py "$bin" "$series" "$work" "$rounds"
