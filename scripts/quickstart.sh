#!/usr/bin/env bash
# Installs what is missing (scripts/install-deps.sh), builds modelcas, installs it as
# ~/.local/bin/modelcas (debug sections split off into modelcas.debug beside the build),
# then ingests a Hugging Face hub cache into the default store
# (~/.local/share/modelcas/store), lists it and verifies every revision.
#   scripts/quickstart.sh [HUB_CACHE]
# Without an argument it uses $HF_HUB_CACHE or ~/.cache/huggingface/hub when that exists,
# else it generates a small demo model (four revisions, 64 MiB) and ingests that.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the main job needs (no browser, lint tools or test packages: scripts/test.sh
# installs those), and the build of the whole workspace's binaries, so that the tests'
# build (scripts/test.sh: the same workspace, plus the store's test hooks) reuses every
# dependency built here and rebuilds only the store and what depends on it.
bash scripts/install-deps.sh --main
. scripts/env.sh
cargo build --release --workspace --bins
dist=$(bash scripts/dist.sh)
mkdir -p "$HOME/.local/bin"
install -m 0755 "$dist" "$HOME/.local/bin/modelcas"
bin="$HOME/.local/bin/modelcas"
echo "quickstart: installed $bin ($(du -h "$bin" | cut -f1))"
src="${1:-${HF_HUB_CACHE:-$HOME/.cache/huggingface/hub}}"
if [ ! -d "$src" ]; then
  demo="${TMPDIR:-/tmp}/modelcas-demo"
  [ -f "$demo/expected.json" ] || "$MODELCAS_PYTHON" bench/gen_revisions.py "$demo" --size-mib 64
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
