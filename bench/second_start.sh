#!/usr/bin/env bash
# A pod's second start on a node (issue 40): a new mount process reading the largest shard
# of r3 from the node file cache the first one filled, two builds side by side in one run
# against the plain disk (bench/second_start.py says how).
#   bench/second_start.sh BIN_A BIN_B [ROUNDS]    (default 5 rounds; the 512 MiB series)
# Needs root (drop_caches) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"
. bench/lib.sh
BENCH_BIN="$b" bench_setup 512
"$MODELCAS_PYTHON" bench/second_start.py "$a" "$b" "$series" "$work" "${3:-5}"
