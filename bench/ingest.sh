#!/usr/bin/env bash
# The store benchmark of issue 2: ingest time for r1 and r2..r4, stored bytes against the
# unique floor, checkout throughput and peak memory, beside borg 1.2 and restic and a
# `cp -r` baseline, all in one run (bench/ingest_bench.py says how).
#   bench/ingest.sh [SIZE_MIB] [ROUNDS]     (default 512 MiB, 3 rounds; needs root for drop_caches)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"; rounds="${2:-3}"
need=()
command -v borg >/dev/null || need+=(borgbackup)
command -v restic >/dev/null || need+=(restic)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; fi
bash scripts/install-deps.sh
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p modelcas
bin="$(realpath "$target/release/modelcas")"
series="${BENCH_SERIES_DIR:-$HOME/.cache/modelcas/bench-series-$size}"
[ -f "$series/expected.json" ] || python3 bench/gen_revisions.py "$series" --size-mib "$size" >/dev/null
work="$(mktemp -d -p "${BENCH_TMP:-/var/tmp}")"; trap 'rm -rf "$work"' EXIT
borg --version; restic version | head -1
python3 bench/ingest_bench.py "$bin" "$series" "$work" "$rounds"
