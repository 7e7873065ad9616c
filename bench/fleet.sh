#!/usr/bin/env bash
# Fleet start through a hub (issue 43): N nodes start one revision at once straight from a
# Garage bucket and through one cold hub, with the bucket's egress counted by a relay in
# front of Garage (bench/fleet_bench.py says what is measured). Needs root (drop_caches),
# /dev/fuse and Garage (installed by tests/garage.sh when missing).
#   bench/fleet.sh [SIZE_MIB] [ROUNDS] [NODES] [REV]    (default 512 3 8 r2)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
rounds="${2:-3}"
nodes="${3:-8}"
rev="${4:-r2}"
. bench/lib.sh
bench_setup "$size"
trap 'bash tests/garage.sh stop "$work/garage"; rm -rf "$work"' EXIT
mkdir -p "$work/garage"
bash tests/garage.sh start "$work/garage"
"$MODELCAS_PYTHON" bench/fleet_bench.py "$bin" "$series" "$work" "$work/garage/env" "$rounds" "$nodes" "$rev"
