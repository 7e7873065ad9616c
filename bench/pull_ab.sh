#!/usr/bin/env bash
# Two builds of modelcas pulling r1..r4 from the same upstream serve, alternating, in one
# run (bench/pull_ab.py says what each row is): what a change to pull did.
#   bench/pull_ab.sh BIN_A BIN_B [ROUNDS] [SIZE_MIB]    (default 5 rounds, 512 MiB series)
set -euo pipefail
cd "$(dirname "$0")/.."
a="$(realpath "$1")"; b="$(realpath "$2")"
. bench/lib.sh
BENCH_BIN="$b" bench_setup "${4:-512}"
"$MODELCAS_PYTHON" bench/pull_ab.py "$a" "$b" "$series" "$work" "${3:-5}"
