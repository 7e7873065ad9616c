#!/usr/bin/env bash
# The node's whole-file cache and FUSE passthrough (issue 15): r3 of the series read cold
# through a mount whose file cache is empty (the first start on a node), then, once the
# cache is full, through fresh mounts with the page cache dropped (the next pod start on
# the node): with passthrough, with whole files read through the mount (--no-passthrough),
# and with the file cache off (chunks decoded, as before), beside the plain directory.
# Needs root (drop_caches) and /dev/fuse.
#   bench/passthrough.sh [SIZE_MIB] [ROUNDS]    (default 512 MiB, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
. bench/lib.sh
bench_setup "$size"
export MODELCAS_STORE="$work/store" MODELCAS_INDEX="$work/index"
c3=$("$MODELCAS_PYTHON" -c "import json;print([x['commit'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='r3'][0])")
"$bin" -q ingest "$series/plain/r3" --repo demo-org/demo-llm --revision "$c3" --ref r3 >/dev/null
"$MODELCAS_PYTHON" bench/passthrough_bench.py "$bin" "$series" "$work" "${2:-3}"
