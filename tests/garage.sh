#!/usr/bin/env bash
# Starts a single-node Garage S3 server on loopback for the tests, with a bucket, a
# read-write key and a read-only key, and writes the settings as shell exports.
#   tests/garage.sh start DIR    -> DIR/env (source it), server log in DIR/garage.log
#   tests/garage.sh stop DIR
# Installs Garage $GARAGE_VERSION with `cargo install garage@$GARAGE_VERSION --locked` when
# that version is not on PATH (about 11 minutes on a 2-core machine; the binary lands in
# ~/.cargo/bin where later runs find it). The cluster, bucket and keys are set up through
# Garage's admin API (`garage json-api`), whose JSON answers are read field by field.
# GARAGE_COMPRESSION=none|LEVEL sets Garage's block compression (default: its own, 1).
set -euo pipefail
GARAGE_VERSION=2.5.0
cmd="${1:?start|stop}"; dir="${2:?DIR}"
export PATH="$HOME/.cargo/bin:$PATH"
wait_up() { for _ in $(seq 150); do garage -c "$dir/garage.toml" status >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
case "$cmd" in
stop)
  if [ -f "$dir/pid" ]; then
    pid=$(cat "$dir/pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$dir/pid"
  fi
  exit 0 ;;
restart)
  garage -c "$dir/garage.toml" server >> "$dir/garage.log" 2>&1 &
  echo $! > "$dir/pid"
  wait_up || { echo "garage.sh: server did not come back" >&2; exit 1; }
  # the S3 API answers a moment after the RPC layer
  . "$dir/env"
  port=${MODELCAS_TEST_S3_ENDPOINT##*:}
  for _ in $(seq 50); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" 2>/dev/null && break
    sleep 0.1
  done
  exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
if ! garage --version 2>/dev/null | grep -qE "[:v ]${GARAGE_VERSION//./\\.}([^0-9.]|$)"; then
  echo "garage.sh: installing Garage $GARAGE_VERSION (cargo install garage@$GARAGE_VERSION --locked, sqlite only)" >&2
  # Only what the tests use (the sqlite engine, its bundled C libraries): about 11 minutes
  # on 2 cores instead of 17 for the default features.
  cargo install "garage@$GARAGE_VERSION" --locked --quiet --no-default-features \
    --features bundled-libs,sqlite
fi
mkdir -p "$dir/meta" "$dir/data"
# Garage's own zstd of its data blocks: its default (1) unless GARAGE_COMPRESSION says
# otherwise (a level, or none).
compression="${GARAGE_COMPRESSION:-1}"
[ "$compression" = none ] && compression='"none"'
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
s3_port=$(free_port); rpc_port=$(free_port); admin_port=$(free_port)
cat > "$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "sqlite"
replication_factor = 1
compression_level = $compression
rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3_port"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$admin_port"
TOML
# api ENDPOINT [JSON]: one admin API call (no JSON for requests without fields); its answer, JSON, on stdout.
api() { garage -c "$dir/garage.toml" json-api "$@"; }
# field PATH: reads JSON on stdin and prints the value at PATH (keys and indexes, dotted).
field() { python3 -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(v)' "$1"; }
garage -c "$dir/garage.toml" server > "$dir/garage.log" 2>&1 &
echo $! > "$dir/pid"
wait_up || true
node=$(api GetClusterStatus 2>/dev/null | field nodes.0.id) || node=""
[ -n "$node" ] || { echo "garage.sh: server did not start:" >&2; cat "$dir/garage.log" >&2; exit 1; }
api UpdateClusterLayout "{\"roles\": [{\"id\": \"$node\", \"zone\": \"dc1\", \"capacity\": 1000000000, \"tags\": []}]}" >/dev/null
api ApplyClusterLayout '{"version": 1}' >/dev/null
bucket=$(api CreateBucket '{"globalAlias": "modelcas"}' | field id)
# key NAME READ WRITE: creates a key allowed on the bucket; prints "ID SECRET".
key() {
  local k id
  k=$(api CreateKey "{\"name\": \"$1\"}")
  id=$(echo "$k" | field accessKeyId)
  api AllowBucketKey "{\"bucketId\": \"$bucket\", \"accessKeyId\": \"$id\", \"permissions\": {\"read\": $2, \"write\": $3, \"owner\": $3}}" >/dev/null
  echo "$id $(echo "$k" | field secretAccessKey)"
}
read -r rw_id rw_secret < <(key modelcas-rw true true)
read -r ro_id ro_secret < <(key modelcas-ro true false)
[ -n "$rw_secret" ] && [ -n "$ro_secret" ] || { echo "garage.sh: key creation failed" >&2; exit 1; }
cat > "$dir/env" <<ENV
export MODELCAS_TEST_S3_ENDPOINT=http://127.0.0.1:$s3_port
export MODELCAS_TEST_S3_BUCKET=modelcas
export MODELCAS_TEST_S3_REGION=garage
export MODELCAS_TEST_S3_KEY_ID=$rw_id
export MODELCAS_TEST_S3_SECRET=$rw_secret
export MODELCAS_TEST_S3_RO_KEY_ID=$ro_id
export MODELCAS_TEST_S3_RO_SECRET=$ro_secret
export MODELCAS_TEST_GARAGE_DIR=$dir
ENV
echo "garage.sh: Garage on 127.0.0.1:$s3_port (bucket modelcas); settings in $dir/env" >&2
