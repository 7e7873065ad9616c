#!/usr/bin/env bash
# The store benchmark of issue 2: ingest time for r1 and r2..r4, stored bytes against the
# unique floor, checkout throughput and peak memory, beside borg 1.2 and restic and a
# `cp -r` baseline, all in one run (bench/ingest_bench.py says how).
#   bench/ingest.sh [SIZE_MIB] [ROUNDS]     (default 512 MiB, 3 rounds; needs root for drop_caches)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"; rounds="${2:-3}"
. bench/lib.sh
need_debs borgbackup:borg restic:restic time:/usr/bin/time
bench_setup "$size"
borg --version; restic version | head -1
"$MODELCAS_PYTHON" bench/ingest_bench.py "$bin" "$series" "$work" "$rounds"
