#!/usr/bin/env bash
# Checks that `cargo` exists and is at least the `rust-version` of Cargo.toml, with a
# message that says what to do otherwise. rustup picks the version of rust-toolchain.toml
# by itself; a cargo from elsewhere (Debian's, say) is checked here rather than failing
# twenty minutes into the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
want=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
pinned=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if ! command -v cargo >/dev/null 2>&1; then
  echo "check-toolchain: cargo not found. Install Rust with rustup (https://rustup.rs), then rerun;" >&2
  echo "  rustup will use Rust $pinned as rust-toolchain.toml says (at least $want is needed)." >&2
  exit 1
fi
if ! have=$(cargo --version 2>&1); then
  echo "check-toolchain: 'cargo --version' failed: $have" >&2
  echo "  rust-toolchain.toml asks for Rust $pinned: 'rustup toolchain install $pinned'." >&2
  exit 1
fi
have=$(echo "$have" | awk '{print $2}')
older=$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)
if [ "$older" != "$want" ]; then
  echo "check-toolchain: cargo $have is older than $want, the least the locked dependencies build with." >&2
  echo "  Install Rust with rustup (it then uses $pinned from rust-toolchain.toml)." >&2
  exit 1
fi
