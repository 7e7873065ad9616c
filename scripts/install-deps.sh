#!/usr/bin/env bash
# Installs what building and testing modelcas needs on a Debian 12 machine, when missing,
# and fails loudly (naming the step) when anything cannot be installed:
#   1. Debian packages: libclang-dev (the rocksdb crate's bindgen), g++ (RocksDB is C++),
#      fuse3 (the mount), python3 and python3-venv, chromium (the headless browser that
#      tests/ui.rs renders serve's pages with), nginx (the cache in front of a hub that
#      tests/fleet.rs starts; Debian's package starts no service here).
#   2. The Rust toolchain named in rust-toolchain.toml: checked, never guessed.
#   3. A Python virtual environment, $MODELCAS_VENV (default ~/.cache/modelcas/venv), with
#      the exact packages of scripts/requirements.txt (the demo generator, the tests with the
#      real huggingface_hub client, the format reader, the deploy checks). Debian 12 refuses
#      system-wide pip installs (PEP 668), so nothing is installed outside the venv.
#   4. The lint gates' tools (.ci/run): the toolchain's clippy and rustfmt components, and
#      cargo-deny at the version pinned below (built once, with its own lock file).
# Safe to run repeatedly: a second run checks and does nothing (a second or two).
# Prints nothing but problems and what it installs; `. scripts/env.sh` then points
# MODELCAS_PYTHON at the venv's interpreter.
#   scripts/install-deps.sh          everything above (the tests, CI)
#   scripts/install-deps.sh --main   only what building and running the main job needs
#                                    (scripts/quickstart.sh): steps 1 (without chromium
#                                    and the venv) and 2; a later run without --main adds
#                                    the rest
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "install-deps: FAILED at step '$1': $2" >&2; exit 1; }
main_only=false
case "${1:-}" in
  --main) main_only=true ;;
  "") ;;
  *) fail args "unknown argument '$1' (usage: install-deps.sh [--main])" ;;
esac

# 1. Debian packages.
need_apt=()
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
dpkg -s python3-venv >/dev/null 2>&1 || python3 -c 'import ensurepip, venv' >/dev/null 2>&1 \
  || need_apt+=(python3-venv)
$main_only || command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# nginx: the HTTP cache between nodes and hubs that tests/fleet.rs puts in front of a hub.
$main_only || command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
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
if $main_only; then
  # The main job's one package: numpy, for the demo generator (bench/gen_revisions.py),
  # at the version requirements.txt pins.
  if ! "$venv/bin/python" -c 'import numpy' >/dev/null 2>&1; then
    echo "install-deps: numpy (the demo generator) into $venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" || fail venv "python3 -m venv $venv failed (is python3-venv installed?)"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$(grep '^numpy==' "$req")" \
      || fail pip "pip install numpy into $venv failed"
  fi
  exit 0
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: Python packages of $req into $venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" || fail venv "python3 -m venv $venv failed (is python3-venv installed?)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" \
    || fail pip "pip install -r $req into $venv failed"
  "$venv/bin/python" -c 'import numpy, safetensors, ml_dtypes, huggingface_hub, zstandard, kubernetes_validate, tokenizers, sentencepiece' \
    || fail pip "the venv at $venv cannot import the packages of $req"
  echo "$want" > "$stamp"
fi

# 4. The lint gates' tools: clippy and rustfmt for the pinned toolchain (rustup, run here,
#    picks it from rust-toolchain.toml), and cargo-deny, built outside the project's target
#    directory.
deny_version=0.20.2
if command -v rustup >/dev/null 2>&1; then
  installed=$(rustup component list --installed 2>/dev/null) || fail lint-tools "rustup component list failed"
  need_comp=()
  grep -q '^clippy' <<<"$installed" || need_comp+=(clippy)
  grep -q '^rustfmt' <<<"$installed" || need_comp+=(rustfmt)
  if [ ${#need_comp[@]} -gt 0 ]; then
    echo "install-deps: rustup component add ${need_comp[*]}"
    rustup component add "${need_comp[@]}" || fail lint-tools "rustup component add ${need_comp[*]} failed"
  fi
elif ! cargo clippy --version >/dev/null 2>&1 || ! cargo fmt --version >/dev/null 2>&1; then
  fail lint-tools "cargo clippy or cargo fmt is missing and there is no rustup to add them"
fi
if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $deny_version" ]; then
  echo "install-deps: cargo install cargo-deny $deny_version (a few minutes, once)"
  env -u CARGO_TARGET_DIR cargo install --quiet --locked --version "$deny_version" cargo-deny \
    || fail lint-tools "cargo install cargo-deny $deny_version failed"
fi
