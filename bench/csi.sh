#!/usr/bin/env bash
# A second pod on a node (issue 38): r3 of the series published as CSI volumes through the
# real plugin and mountd (driven as kubelet does, by the `kubelet` example of the csi
# crate): the first pod's volume read cold from the store, then each later pod's new volume
# read with the page cache dropped (the node's file cache full), beside the plain directory
# read cold in the same rounds. Needs root (drop_caches) and /dev/fuse.
#   bench/csi.sh [SIZE_MIB] [ROUNDS]    (default 512 MiB, 5 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
. bench/lib.sh
bench_setup "$size"
cargo build --release -q -p modelcas-csi --examples
export MODELCAS_STORE="$work/store" MODELCAS_INDEX="$work/index" MODELCAS_FILE_CACHE="$work/files"
c3=$("$MODELCAS_PYTHON" -c "import json;print([x['commit'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='r3'][0])")
"$bin" -q ingest "$series/plain/r3" --repo demo-org/demo-llm --revision "$c3" --ref r3 >/dev/null
"$MODELCAS_PYTHON" bench/csi_bench.py "$bin" "$CARGO_TARGET_DIR/release/examples/kubelet" \
  "$series" "$work" "${2:-5}"
