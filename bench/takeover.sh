#!/usr/bin/env bash
# The takeover benchmark of issue 38: readers that check every byte through `modelcas mount`
# while its FUSE server is killed (SIGKILL) and upgraded (SIGHUP) again and again; the pause
# each change costs a reader, next to the same readers' slowest reads with no change, in one
# run. Needs root (drop_caches) and /dev/fuse.
#   bench/takeover.sh [KILLS] [SIZE_MIB]    (default 20 kills, the 256 MiB series)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_setup "${2:-256}"
"$MODELCAS_PYTHON" bench/takeover_bench.py "$bin" "$series" "$work" "${1:-20}"
