#!/usr/bin/env bash
# The mount's memory against the number of readers (issue 40), two builds side by side in
# one run: the FUSE server's peak RSS (VmHWM) while 1, 4, 16 and 64 readers read r3 of the
# 512 MiB series cold, and how long each read took (bench/mount_rss.py says how).
#   bench/mount_rss.sh BIN_A BIN_B [ROUNDS]    (default 3 rounds)
# Needs root (drop_caches) and /dev/fuse.
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"
. bench/lib.sh
BENCH_BIN="$b" bench_setup 512
"$MODELCAS_PYTHON" bench/mount_rss.py "$a" "$b" "$series" "$work" "${3:-3}"
