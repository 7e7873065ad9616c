#!/usr/bin/env bash
# Two builds of modelcas on the writers' benchmarks (hub cache and small-file ingest, a
# checkout of small files, r1..r4 of the series), side by side with borg in one run
# (bench/ingest_ab.py says what each row is): which change to ingest or checkout did what.
#   bench/ingest_ab.sh BIN_A BIN_B [ROUNDS]    (default 3 rounds; the 512 MiB series)
# Needs root (drop_caches, loop mounts) and mkfs.ext4.
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"
. bench/lib.sh
need_debs borgbackup:borg time:/usr/bin/time
BENCH_BIN="$b" bench_setup 512
"$MODELCAS_PYTHON" bench/ingest_ab.py "$a" "$b" "$series" "$work" "${3:-3}"
