#!/usr/bin/env bash
# The reliability figures of docs/RELIABILITY.md: SIGKILLs at crash steps of ingest, import,
# gc, pull, sync, serve --upstream, an ingest taking unchanged files unread and a pull
# completing a partial commit, on the local store and on Garage; power losses (an ext4 on a
# loop device shut down without its log flushed) at crash steps of the same commands and of
# an ingest's source; and injected corruptions of packs, manifests, refs, bundles, the node
# caches, the local index and gc's run record, read back through cat, checkout, export,
# serve, the mount and Xet; and issue 36's rounds: Xet URLs across a replaced commit, pull
# against a stored commit (refused when it differs, killed while completing a partial one)
# and the file cache held open; and the hub matrix of issue 43 (nodes reading through hubs
# that flip bytes, are dead, are killed mid-read, or hold damaged cache entries).
#   bench/reliability.sh [KILLS_PER_COMMAND] [CORRUPTIONS] [POWER_LOSSES_PER_COMMAND]
#                        [ISSUE36_ROUNDS] [HUB_ROUNDS]
#                         (default 36, 1000, 12, 24 and 12: 576 kills, 108 power losses)
#   bench/reliability.sh --short        (CI: 4, 76, 2, 4 and 2)
# RELIABILITY_LOCAL_ONLY=1 leaves out the S3 half (no Garage: the kills on S3 and the
# corruptions of its node chunk cache). Needs root, /dev/fuse (the mount reader) and loop
# devices (the power losses; POWER_LOSSES_PER_COMMAND 0 leaves them out); builds Garage when
# it is missing and the S3 half runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--short" ]; then kills=4; corr=76; power=2; i36=6; hub=2; else
  kills="${1:-36}"; corr="${2:-1000}"; power="${3:-12}"; i36="${4:-24}"; hub="${5:-12}"; fi
. bench/lib.sh
[ "$power" = 0 ] || need_debs e2fsprogs:mkfs.ext4 e2fsprogs:e2fsck mount:losetup
BENCH_FAILPOINTS=1 bench_setup 16
# The loop-device file systems of the power losses, if a run was cut short, then the rest.
unmount_all() { awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | xargs -r umount -l; }
trap 'unmount_all; rm -rf "$work"' EXIT
s3=()
if [ "${RELIABILITY_LOCAL_ONLY:-}" != 1 ]; then
  g="$work/garage"
  trap 'bash tests/garage.sh stop "$g" || true; unmount_all; rm -rf "$work"' EXIT
  bash tests/garage.sh start "$g" >/dev/null
  s3=(--s3-env "$g/env")
fi
"$MODELCAS_PYTHON" bench/reliability.py "$bin" "$series" "$work/r" \
  --kills "$kills" --corruptions "$corr" --power-loss "$power" --issue36 "$i36" --hub "$hub" \
  "${s3[@]}"
