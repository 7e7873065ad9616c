#!/usr/bin/env bash
# Makes the binary to install or ship from a release build: $CARGO_TARGET_DIR/dist/modelcas
# without debug sections (tens of MB rather than hundreds), and beside it modelcas.debug
# with the line tables and symbols, linked by a .gnu_debuglink section so that gdb, perf
# and addr2line find it when it sits next to the binary or under /usr/lib/debug.
#   scripts/dist.sh [RELEASE_BINARY] -> prints the path of the stripped binary
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
src="${1:-$CARGO_TARGET_DIR/release/modelcas}"
out="$(dirname "$src")/../dist"
mkdir -p "$out"
objcopy --only-keep-debug "$src" "$out/modelcas.debug"
objcopy --strip-debug --strip-unneeded --add-gnu-debuglink="$out/modelcas.debug" "$src" "$out/modelcas.tmp"
mv "$out/modelcas.tmp" "$out/modelcas"
realpath "$out/modelcas"
