#!/usr/bin/env bash
# Installs what building and testing modelcas needs on a Debian 12 machine, when missing,
# and fails loudly (naming the step) when anything cannot be installed:
#   1. Debian packages: libclang-dev (the rocksdb crate's bindgen), g++ (RocksDB is C++),
#      fuse3 (the mount), python3 and python3-venv.
#   2. The Rust toolchain named in rust-toolchain.toml: checked, never guessed.
#   3. A Python virtual environment, $MODELCAS_VENV (default ~/.cache/modelcas/venv), with
#      the exact packages of scripts/requirements.txt (the demo generator, the tests with the
#      real huggingface_hub client, the format reader, the deploy checks). Debian 12 refuses
#      system-wide pip installs (PEP 668), so nothing is installed outside the venv.
# Safe to run repeatedly: a second run checks and does nothing (a second or two).
# Prints nothing but problems and what it installs; `. scripts/env.sh` then points
# MODELCAS_PYTHON at the venv's interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "install-deps: FAILED at step '$1': $2" >&2; exit 1; }

# 1. Debian packages.
need_apt=()
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
dpkg -s python3-venv >/dev/null 2>&1 || python3 -c 'import ensurepip, venv' >/dev/null 2>&1 \
  || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 \
    || fail apt "missing ${need_apt[*]} and no apt-get here: install them with your package manager"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq || fail apt "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null \
    || fail apt "apt-get install ${need_apt[*]} failed"
fi

# 2. Rust: the version rust-toolchain.toml names (rustup installs it on first use).
bash scripts/check-toolchain.sh || fail rust "see above"

# 3. Python packages, in a venv of their own.
venv="${MODELCAS_VENV:-$HOME/.cache/modelcas/venv}"
req=scripts/requirements.txt
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: Python packages of $req into $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" || fail venv "python3 -m venv $venv failed (is python3-venv installed?)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" \
    || fail pip "pip install -r $req into $venv failed"
  "$venv/bin/python" -c 'import numpy, safetensors, ml_dtypes, huggingface_hub, zstandard, kubernetes_validate' \
    || fail pip "the venv at $venv cannot import the packages of $req"
  echo "$want" > "$stamp"
fi
