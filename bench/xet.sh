#!/usr/bin/env bash
# Xet downloads from `modelcas serve` (issue 28), in one run, rounds alternated:
# `snapshot_download` of r4 with Xet (huggingface_hub + hf_xet), the same with
# HF_HUB_DISABLE_XET=1 (plain HTTP), and `curl` of the same files, all from one serve.
#   bench/xet.sh [SIZE_MIB] [ROUNDS]     (default 512, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-512}"
rounds="${2:-3}"
bench_setup "$size"
"$MODELCAS_PYTHON" bench/xet_bench.py "$bin" "$series" "$work" "$rounds"
