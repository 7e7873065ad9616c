# Shared set-up of the benchmark scripts; source it from the repository root.
#   need_debs PKG:COMMAND...   installs the Debian packages whose command is missing
#   bench_setup SIZE_MIB       builds the release binary and generates the series (cached
#                              under ~/.cache/modelcas); sets $bin, $series and $work (a
#                              temporary directory under /var/tmp, removed at exit unless the
#                              caller sets its own EXIT trap that does so); sources
#                              scripts/env.sh, so $MODELCAS_PYTHON is the venv's Python;
#                              with BENCH_FAILPOINTS=1 the binary has the test hooks
#                              (crash steps, pause points) that release binaries lack;
#                              with BENCH_BIN=PATH that binary is used and nothing is built

need_debs() {
  local missing=() p
  for p in "$@"; do command -v "${p#*:}" >/dev/null 2>&1 || missing+=("${p%%:*}"); done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

bench_setup() {
  local size="$1"
  bash scripts/install-deps.sh
  . scripts/env.sh
  local features=()
  [ "${BENCH_FAILPOINTS:-}" = 1 ] && features=(--features modelcas-store/failpoints)
  if [ -n "${BENCH_BIN:-}" ]; then
    bin="$(realpath "$BENCH_BIN")"
  else
    cargo build --release -q --workspace --bins "${features[@]}"
    bin="$(realpath "$CARGO_TARGET_DIR/release/modelcas")"
  fi
  series="${BENCH_SERIES_DIR:-$HOME/.cache/modelcas/bench-series-$size}"
  [ -f "$series/expected.json" ] || "$MODELCAS_PYTHON" bench/gen_revisions.py "$series" --size-mib "$size" >/dev/null
  work="$(mktemp -d -p "${BENCH_TMP:-/var/tmp}")"
  trap 'rm -rf "$work"' EXIT
}
