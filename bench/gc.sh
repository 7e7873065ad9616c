#!/usr/bin/env bash
# gc cost against store size: time and requests of gc runs over a small store and one four
# times larger (60 revisions of 12 repositories), beside `index rebuild` (which reads every
# pack footer: what a gc that re-reads every pack would pay at least).
#   bench/gc.sh [SIZE_MIB_PER_REPO] [ROUNDS] [local|s3]   (default 32 MiB, 3 rounds, local)
# With s3 the stores live on a Garage server started on loopback (tests/garage.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-32}"
rounds="${2:-3}"
backend="${3:-local}"
bench_setup "$size"
if [ "$backend" = s3 ]; then
  trap 'bash tests/garage.sh stop "$work/garage"; rm -rf "$work"' EXIT
  mkdir -p "$work/garage"
  bash tests/garage.sh start "$work/garage" >/dev/null
  . "$work/garage/env"
  export MODELCAS_ENDPOINT_URL="$MODELCAS_TEST_S3_ENDPOINT" MODELCAS_REGION="$MODELCAS_TEST_S3_REGION" \
    AWS_ACCESS_KEY_ID="$MODELCAS_TEST_S3_KEY_ID" AWS_SECRET_ACCESS_KEY="$MODELCAS_TEST_S3_SECRET" \
    MODELCAS_CACHE_DIR="$work/chunk-cache" BENCH_S3_PREFIX="s3://$MODELCAS_TEST_S3_BUCKET/bench"
fi
"$MODELCAS_PYTHON" bench/gc_bench.py "$bin" "$work" "$size" "$rounds"
