#!/usr/bin/env bash
# The reliability figures of docs/RELIABILITY.md: SIGKILLs at crash steps of ingest, import
# and gc on the local store and on Garage, and injected corruptions of packs, manifests,
# refs and bundles read back through cat, checkout, export, serve and the mount.
#   bench/reliability.sh [KILLS_PER_COMMAND] [CORRUPTIONS]   (default 36 and 1000: 216 kills)
#   bench/reliability.sh --short                             (CI: 4 and 45)
# Needs root and /dev/fuse (the mount reader); builds Garage when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--short" ]; then kills=4; corr=45; else kills="${1:-36}"; corr="${2:-1000}"; fi
. bench/lib.sh
BENCH_FAILPOINTS=1 bench_setup 16
g="$work/garage"
trap 'bash tests/garage.sh stop "$g" || true; rm -rf "$work"' EXIT
bash tests/garage.sh start "$g" >/dev/null
"$MODELCAS_PYTHON" bench/reliability.py "$bin" "$series" "$work/r" \
  --kills "$kills" --corruptions "$corr" --s3-env "$g/env"
