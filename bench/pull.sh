#!/usr/bin/env bash
# `modelcas pull` from an upstream Hub against the manual flow, in one run (issue 14):
#   upstream: `modelcas serve` on a store holding r1..r4 of the series;
#   pull:     `modelcas pull ORG/NAME@<sha>` of r1..r4 into an empty store;
#   baseline: `hf download --revision <sha>` of r1..r4 (huggingface_hub's CLI,
#             HF_ENDPOINT at the same serve) into a fresh HF cache, then
#             `modelcas ingest` of that cache into another empty store.
# Wall time of each, and peak extra disk: the growth of the store and its index (and of
# the HF cache for the baseline), sampled every 0.2 s while the commands run.
#   bench/pull.sh [SIZE_MIB]     (default 512)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-512}"
bench_setup "$size"
"$MODELCAS_PYTHON" bench/pull_bench.py "$bin" "$series" "$work"
