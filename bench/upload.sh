#!/usr/bin/env bash
# Uploads to `modelcas serve` with the real huggingface_hub client (issue 41): bytes sent
# and stored by a full upload of r1, then by a second upload that changes one shard (r1
# with its last shard taken from r2, the fine-tune), and by the whole fine-tune r2.
#   bench/upload.sh [SIZE_MIB] [MODE]     (default 256, lfs; MODE xet once Xet uploads land)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-256}"
mode="${2:-lfs}"
bench_setup "$size"
"$MODELCAS_PYTHON" bench/upload_bench.py "$bin" "$series" "$work" "$mode"
