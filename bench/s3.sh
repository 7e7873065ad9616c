#!/usr/bin/env bash
# The S3 benchmark of issue 4: uploads and reads through a Garage server on loopback beside
# rclone (bench/s3_bench.py says what is measured). Needs root (drop_caches), /dev/fuse,
# Garage (installed by tests/garage.sh when missing) and rclone (installed when missing).
#   bench/s3.sh [SIZE_MIB]    (default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
. bench/lib.sh
need_debs rclone:rclone
bench_setup "$size"
trap 'bash tests/garage.sh stop "$work/garage"; rm -rf "$work"' EXIT
mkdir -p "$work/garage"
bash tests/garage.sh start "$work/garage"
rclone version | head -1
"$MODELCAS_PYTHON" bench/s3_bench.py "$bin" "$series" "$work" "$work/garage/env"
