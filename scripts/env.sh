# Sourced by the scripts: where the build goes and which Python runs the tests, the demo
# generator and the benchmarks (the venv scripts/install-deps.sh makes).
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/modelcas/target}"
export MODELCAS_VENV="${MODELCAS_VENV:-$HOME/.cache/modelcas/venv}"
export MODELCAS_PYTHON="${MODELCAS_PYTHON:-$MODELCAS_VENV/bin/python}"
