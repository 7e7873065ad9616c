#!/usr/bin/env bash
# The store benchmark of issue 2, in one run beside borg and restic on the same data:
# ingest time of r1 and of r2..r4, stored bytes against the unique floor, checkout
# throughput, peak memory; plus `cp -r` of r1 as the copy baseline. Every figure that is a
# target is printed as a ratio against a baseline measured in this same invocation.
#   bench/ingest.sh [SIZE_MIB]     (default 512; the series is cached under ~/.cache/modelcas)
# Needs borgbackup, restic and GNU time (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
for p in borgbackup:borg restic:restic time:/usr/bin/time; do
  command -v "${p#*:}" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${p%%:*}" >/dev/null; }
done
bash scripts/install-deps.sh
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p modelcas
bin="$(realpath "$target/release/modelcas")"
series="${BENCH_SERIES_DIR:-$HOME/.cache/modelcas/bench-series-$size}"
[ -f "$series/expected.json" ] || python3 bench/gen_revisions.py "$series" --size-mib "$size" >/dev/null
work="${BENCH_WORK:-$(mktemp -d -p "${BENCH_TMP:-/var/tmp}")}"; trap 'rm -rf "$work"' EXIT
commit() { python3 -c "import json;print([x['commit'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='$1'][0])"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
warm() { cat "$series"/plain/*/* > /dev/null; }
# t LABEL CMD... : runs CMD under GNU time; records seconds and peak RSS (KiB)
declare -A SECS RSS
t() {
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time" "$@" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
  read -r s m < "$work/time"; SECS[$label]=$s; RSS[$label]=$m
}
sum() { python3 -c "import sys;print(sum(float(x) for x in sys.argv[1:]))" "$@"; }

export MODELCAS_STORE="$work/mc" MODELCAS_INDEX="$work/mc-index" BORG_REPO="$work/borg" \
  BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes RESTIC_REPOSITORY="$work/restic" RESTIC_PASSWORD=bench
warm
t cp cp -r "$series/plain/r1" "$work/cp-r1"; rm -rf "$work/cp-r1"; sync
t cpsync sh -c "cp -r '$series/plain/r1' '$work/cp-r1' && sync"; rm -rf "$work/cp-r1"; sync
for r in r1 r2 r3 r4; do
  t "mc-$r" "$bin" -q ingest "$series/plain/$r" --repo demo-org/demo-llm --revision "$(commit "$r")" --ref "$r"
done
borg init --encryption=none "$BORG_REPO"
for r in r1 r2 r3 r4; do cd "$series/plain/$r"; t "borg-$r" borg create --compression zstd,3 "::$r" .; cd - >/dev/null; done
restic init -q >/dev/null
for r in r1 r2 r3 r4; do cd "$series/plain/$r"; t "restic-$r" restic backup -q .; cd - >/dev/null; done
drop; t mc-checkout "$bin" -q checkout demo-org/demo-llm@r4 "$work/co-mc"
drop; mkdir -p "$work/co-borg"; cd "$work/co-borg"; t borg-extract borg extract ::r4; cd - >/dev/null
cmp -s "$work/co-mc/model-00001-of-00003.safetensors" "$work/co-borg/model-00001-of-00003.safetensors"
rev4=$(python3 -c "import json;print([x['bytes'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='r4'][0])")
floor=$(python3 -c "import json;print(json.load(open('$series/expected.json'))['unique_bytes_floor'])")
mc_bytes=$("$bin" stats --json | python3 -c "import json,sys;print(json.load(sys.stdin)['stored_bytes'])")
borg_bytes=$(du -sb "$BORG_REPO" | cut -f1); restic_bytes=$(du -sb "$RESTIC_REPOSITORY" | cut -f1)
mc_rest=$(sum "${SECS[mc-r2]}" "${SECS[mc-r3]}" "${SECS[mc-r4]}")
borg_rest=$(sum "${SECS[borg-r2]}" "${SECS[borg-r3]}" "${SECS[borg-r4]}")
restic_rest=$(sum "${SECS[restic-r2]}" "${SECS[restic-r3]}" "${SECS[restic-r4]}")
python3 - <<PY
floor=$floor; mb=$mc_bytes; bb=$borg_bytes; rb=$restic_bytes
s={k: float(v) for k, v in dict(mc1="${SECS[mc-r1]}", mcr="$mc_rest", b1="${SECS[borg-r1]}", br="$borg_rest",
   r1="${SECS[restic-r1]}", rr="$restic_rest", cp="${SECS[cp]}", cps="${SECS[cpsync]}", mco="${SECS[mc-checkout]}", bx="${SECS[borg-extract]}").items()}
rss=max(int(x) for x in "${RSS[mc-r1]} ${RSS[mc-r2]} ${RSS[mc-r3]} ${RSS[mc-r4]}".split())
co_rss=int("${RSS[mc-checkout]}")
print(f"series: $size MiB, unique floor {floor/2**20:.1f} MiB, r4 {$rev4/2**20:.1f} MiB")
print("| tool | ingest r1 (s) | ingest r2..r4 (s) | stored bytes / floor |")
print("|---|---|---|---|")
print(f"| modelcas | {s['mc1']:.2f} | {s['mcr']:.2f} | {mb/floor:.3f} |")
print(f"| borg 1.2 zstd,3 | {s['b1']:.2f} | {s['br']:.2f} | {bb/floor:.3f} |")
print(f"| restic | {s['r1']:.2f} | {s['rr']:.2f} | {rb/floor:.3f} |")
print(f"| cp -r r1 | {s['cp']:.2f} | | |")
print(f"| cp -r r1 && sync | {s['cps']:.2f} | | |")
print()
print("| target | measured |")
print("|---|---|")
print(f"| ingest r1..r4 at least 3x faster than borg | {(s['b1']+s['br'])/(s['mc1']+s['mcr']):.2f}x (r1 {s['b1']/s['mc1']:.2f}x, r2..r4 {s['br']/s['mcr']:.2f}x) |")
print(f"| stored bytes at most 0.72x the floor | {mb/floor:.3f}x (borg {bb/floor:.3f}x, restic {rb/floor:.3f}x) |")
print(f"| ingest of r1 within 2x of cp -r | {s['mc1']/s['cp']:.2f}x the time of cp -r; {s['mc1']/s['cps']:.2f}x the time of cp -r && sync (ingest syncs its packs) |")
print(f"| checkout at least 10x faster than borg extract | {s['bx']/s['mco']:.2f}x ({$rev4/s['mco']/1e6:.0f} MB/s vs {$rev4/s['bx']/1e6:.0f} MB/s, page cache dropped) |")
print(f"| peak memory under 1 GiB | ingest {rss/1024:.0f} MiB, checkout {co_rss/1024:.0f} MiB |")
PY
