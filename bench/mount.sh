#!/usr/bin/env bash
# The mount benchmark of issue 3: the largest shard and a whole revision of the series, read
# from a plain directory (page cache dropped), through `modelcas mount` cold and warm, and
# through `borg mount`, in one run; and (issue 15) the shard read cold with `dd` and
# mountpoint-s3's fio read jobs from the plain directory, through a no-op FUSE filesystem
# over it (bench/stubfs, built with the workspace) and through the mount. Needs root
# (drop_caches) and /dev/fuse.
#   bench/mount.sh [SIZE_MIB] [ROUNDS]    (default 512 MiB, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512}"
. bench/lib.sh
need_debs borgbackup:borg fio:fio
python3 -c 'import llfuse' 2>/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-llfuse >/dev/null; }
bench_setup "$size"
export MODELCAS_STORE="$work/store" MODELCAS_INDEX="$work/index" BORG_REPO="$work/borg" BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes
c3=$("$MODELCAS_PYTHON" -c "import json;print([x['commit'] for x in json.load(open('$series/expected.json'))['revisions'] if x['name']=='r3'][0])")
"$bin" -q ingest "$series/plain/r3" --repo demo-org/demo-llm --revision "$c3" --ref r3 >/dev/null
borg init --encryption=none "$BORG_REPO"
(cd "$series/plain/r3" && borg create --compression zstd,3 ::r3 .)
"$MODELCAS_PYTHON" bench/mount_bench.py "$bin" "$series" "$work" "${2:-3}"
