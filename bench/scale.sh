#!/usr/bin/env bash
# The scale benchmarks of issue 15 (bench/scale_bench.py says what each part measures):
#   big    r1 and r2 of an 8 GiB series beside the 512 MiB one: ingest, checkout and a cold
#          read through the mount, time per GiB and peak memory at both sizes
#   files  a hub cache of 50 repositories and a repository of 20,000 files of 1-16 KiB,
#          against borg create / borg extract and the plain directory
#   revs   a store with 1,000 revisions of one repository beside one with 10: ls, mount
#          start, gc time and memory
#   bench/scale.sh [big|files|revs|all] [BIG_MIB] [ROUNDS]   (default all, 8192 MiB, 3 rounds)
# Needs root (drop_caches), /dev/fuse, and for `big` about 3.2x BIG_MIB of free disk under
# $BENCH_TMP (default /var/tmp) beyond 15 GB. BENCH_BIN=PATH runs a prebuilt binary;
# BENCH_JSON_DIR=DIR keeps the raw figures (scale_<part>.json).
set -euo pipefail
cd "$(dirname "$0")/.."
part="${1:-all}"; big="${2:-8192}"; rounds="${3:-3}"
. bench/lib.sh
need_debs borgbackup:borg time:/usr/bin/time
bench_setup 512
echo "date: $(date -u +%FT%TZ); load average: $(cut -d' ' -f1-3 /proc/loadavg); binary: $bin"
parts=("$part"); [ "$part" = all ] && parts=(big files revs)
for p in "${parts[@]}"; do
  echo; echo "### $p"
  "$MODELCAS_PYTHON" bench/scale_bench.py "$bin" "$work" "$p" "$big" "$rounds"
  [ -n "${BENCH_JSON_DIR:-}" ] && cp "$work/scale_$p.json" "$BENCH_JSON_DIR/"
  echo "load average after $p: $(cut -d' ' -f1-3 /proc/loadavg)"
done
