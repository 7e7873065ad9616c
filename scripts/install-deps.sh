#!/usr/bin/env bash
# Installs what building and testing modelcas needs on a Debian machine, when missing:
# libclang (the rocksdb crate's bindgen), a C++ compiler, fuse3 (the mount tests), Python
# with numpy and safetensors (the test-data generator and the safetensors tests).
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

need_apt=()
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v fusermount3 >/dev/null 2>&1 || need_apt+=(fuse3)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! python3 -c 'import numpy, safetensors, ml_dtypes, huggingface_hub, kubernetes_validate' >/dev/null 2>&1; then
  echo "install-deps: pip install numpy safetensors ml_dtypes huggingface_hub kubernetes-validate"
  python3 -m pip install -q numpy safetensors ml_dtypes huggingface_hub kubernetes-validate 2>&1 | grep -v -i 'warning: running pip as' || true
fi
