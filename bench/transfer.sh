#!/usr/bin/env bash
# Closed-network transfer and serving (issue 6), beside the manual flow, in one run:
#   bundles: `modelcas export` / `import` of r1, then of r2 with --have r1, against
#            `tar -c` + `sha256sum` and `tar -x` + `sha256sum -c` of the plain directories;
#   serving: `snapshot_download` of r4 with the huggingface_hub client from `modelcas serve`,
#            and `curl` of the same files from a fresh `modelcas serve`, each against `curl`
#            of the same files from `python3 -m http.server` over a plain copy.
#   bench/transfer.sh [SIZE_MIB] [ROUNDS]     (default 512, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size="${1:-512}"
rounds="${2:-3}"
bench_setup "$size"
"$MODELCAS_PYTHON" bench/transfer_bench.py "$bin" "$series" "$work" "$rounds"
