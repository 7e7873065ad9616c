#!/usr/bin/env bash
# gc cost against store size: time and requests of gc runs over a small store and one four
# times larger (60 revisions of 12 repositories), beside `index rebuild` (which reads every
# pack footer: what a gc that re-reads every pack would pay at least).
#   bench/gc.sh [SIZE_MIB_PER_REPO] [ROUNDS]     (default 8 MiB, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-8}"
rounds="${2:-3}"
bench_setup "$size"
python3 bench/gc_bench.py "$bin" "$work" "$size" "$rounds"
