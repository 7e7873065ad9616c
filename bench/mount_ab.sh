#!/usr/bin/env bash
# Two builds of modelcas on the mount's first cold start, side by side in one run (bench/mount_ab.py
# says what each row is): which change to the read path did what.
#   bench/mount_ab.sh BIN_A BIN_B [ROUNDS]    (default 5 rounds; the 512 MiB series)
# Needs root (drop_caches) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"
. bench/lib.sh
BENCH_BIN="$b" bench_setup 512
"$MODELCAS_PYTHON" bench/mount_ab.py "$a" "$b" "$series" "$work" "${3:-5}"
