#!/usr/bin/env bash
# Ingests a Hugging Face hub cache into the default store (~/.local/share/modelcas/store),
# then lists and verifies what it stored.
#   scripts/quickstart.sh [HUB_CACHE]
# Without an argument it uses ~/.cache/huggingface/hub when that exists, else it generates
# a small demo model (four revisions) and ingests that.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -p modelcas
bin="${CARGO_TARGET_DIR:-target}/release/modelcas"
src="${1:-${HF_HUB_CACHE:-$HOME/.cache/huggingface/hub}}"
if [ ! -d "$src" ]; then
  demo="${TMPDIR:-/tmp}/modelcas-demo"
  [ -f "$demo/expected.json" ] || python3 bench/gen_revisions.py "$demo" --size-mib 64
  src="$demo/hub"
fi
"$bin" ingest "$src"
"$bin" ls
for repo in $("$bin" ls --json | python3 -c 'import json,sys; [print(r["repo"]) for r in json.load(sys.stdin)["repos"]]'); do
  "$bin" ls "$repo"
  for c in $("$bin" ls "$repo" --json | python3 -c 'import json,sys; [print(c["commit"]) for c in json.load(sys.stdin)["commits"]]'); do
    "$bin" verify "$repo@$c"
  done
done
"$bin" stats
