#!/usr/bin/env bash
# Dedup found vs metadata cost for several average chunk sizes, on the generated series.
#   bench/chunk_params.sh [SIZE_MIB]      (default 512)
# Prints one row per average chunk size: stored bytes / unique floor, chunks, manifest bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
bash scripts/install-deps.sh
. scripts/env.sh
cargo build --release -q -p modelcas
bin="$CARGO_TARGET_DIR/release/modelcas"
series="${BENCH_SERIES_DIR:-$HOME/.cache/modelcas/bench-series-$size}"
[ -f "$series/expected.json" ] || "$MODELCAS_PYTHON" bench/gen_revisions.py "$series" --size-mib "$size" >/dev/null
floor=$("$MODELCAS_PYTHON" -c "import json;print(json.load(open('$series/expected.json'))['unique_bytes_floor'])")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "| avg chunk | stored / floor | dedup-only bytes / floor | chunks | manifest bytes (4 revs) | metadata / stored |"
echo "|---|---|---|---|---|---|"
for avg in 65536 131072 262144 524288 1048576 2097152; do
  s="$work/s$avg"
  export MODELCAS_STORE="$s" MODELCAS_INDEX="$work/i$avg"
  "$bin" -q init --chunk-avg "$avg" >/dev/null
  for r in r1 r2 r3 r4; do
    c=$("$MODELCAS_PYTHON" -c "import json;print([x['commit'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='$r'][0])")
    "$bin" -q ingest "$series/plain/$r" --repo demo-org/demo-llm --revision "$c" >/dev/null
  done
  "$bin" stats --json > "$work/st.json"
  man=$(du -sb "$s/repos" | cut -f1)
  "$MODELCAS_PYTHON" - "$work/st.json" "$floor" "$avg" "$man" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); floor = int(sys.argv[2]); avg = int(sys.argv[3]); man = int(sys.argv[4])
print(f"| {avg // 1024} KiB | {s['stored_bytes'] / floor:.3f} | {s['unique_bytes'] / floor:.3f} | {s['unique_chunks']} | {man} | {man / s['stored_bytes']:.5f} |")
PY
done
