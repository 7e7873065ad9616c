#!/usr/bin/env bash
# The README's quickstart from nothing but Rust, as on a new machine, without a new machine:
# a fresh clone at REV with a fresh HOME (a new cargo registry, downloaded from crates.io; a
# new target directory, venv from PyPI and demo), the toolchain from rustup only (RUSTUP_HOME
# kept), then the tests' build in the same home. Debian packages already installed stay
# installed (their apt step is not measured). Prints the seconds of each.
#   bench/quickstart_fresh.sh NAME REV      (work in /tmp/qs-NAME; a few GiB; ~25 min on 2 cores)
set -euo pipefail
name=$1 rev=$2
repo="$(cd "$(dirname "$0")/.." && pwd)"
F=/tmp/qs-$name
rm -rf "$F"; mkdir -p "$F/home" "$F/tmp" "$F/bin"
# The rustup proxies alone on PATH (no cargo-deny or other tools of this machine's ~/.cargo).
for b in cargo rustc rustup rustdoc cargo-clippy cargo-fmt rustfmt clippy-driver; do
  ln -s "${CARGO_HOME:-$HOME/.cargo}/bin/$b" "$F/bin/$b"
done
git clone -q "$repo" "$F/src"; git -C "$F/src" checkout -q "$rev"
cd "$F/src"
run() {
  env -i HOME="$F/home" TMPDIR="$F/tmp" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
    PATH="$F/home/.cargo/bin:$F/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    LANG=C.UTF-8 SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt bash -c "$1"
}
t=$(date +%s)
run 'bash scripts/quickstart.sh' > "$F/quickstart.log" 2>&1
echo "$name ($rev) quickstart: $(( $(date +%s) - t )) s"
t=$(date +%s)
run '. scripts/env.sh; cargo build --release --workspace --bins --tests --features modelcas-store/failpoints' \
  > "$F/testbuild.log" 2>&1
echo "$name ($rev) then the tests' build: $(( $(date +%s) - t )) s"
