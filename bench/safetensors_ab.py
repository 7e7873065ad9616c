#!/usr/bin/env python3
"""A/B of loader-aware read-ahead (issue 15) in one binary: MODELCAS_SAFETENSORS_ORDER=off
(the sequential read-ahead of before) against the default (the loader's walk in name order),
rounds alternated so that both see the same machine; every read cold (a fresh mount, page
cache dropped), and the plain directory beside them.

usage: safetensors_ab.py MODELCAS_BIN SERIES_DIR WORK_DIR   (run from the repository root;
WORK_DIR holds a store with r3 ingested as demo-org/demo-llm@r3, see bench/mount.sh)
env: ROUNDS (5), SHARD (model-00001-of-00003)"""
import os, statistics, sys
sys.argv = ["mount_bench.py", sys.argv[1], sys.argv[2], sys.argv[3], "1"]
sys.path.insert(0, "bench")
import mount_bench as mb
rounds = int(os.environ.get("ROUNDS", "5"))
shard = os.environ.get("SHARD", "model-00001-of-00003") + ".safetensors"
p = f"{mb.SERIES}/plain/r3/{shard}"
q = f"{mb.REPO}/r3/{shard}"
mb.PLAIN_SHARD = p
tests = [("seq", mb.seq_read), ("mmap", mb.mmap_walk), ("st_file", mb.st_walk("file")), ("st_name", mb.st_walk("name")), ("rand4k", mb.random_4k)]
res = {}
rss = []
for r in range(rounds):
    for name, fn in tests:
        res.setdefault(("plain", name), []).append(mb.cold_plain(fn, p))
        for mode in (["off", "name"] if r % 2 == 0 else ["name", "off"]):
            res.setdefault((mode, name), []).append(mb.cold_mount(fn, q, rss, extra_env={"MODELCAS_SAFETENSORS_ORDER": mode}))
print(f"{shard}, medians of {rounds} rounds")
print("| read | plain | mount, read-ahead as before (off) | mount, loader-aware (name) | off / plain | name / plain |")
print("|---|---|---|---|---|---|")
for name, _ in tests:
    pl, off, nm = (statistics.median(res[(m, name)]) for m in ("plain", "off", "name"))
    unit = "/s" if name == "rand4k" else " MB/s"
    print(f"| {name} | {pl:.0f}{unit} | {off:.0f}{unit} | {nm:.0f}{unit} | {off/pl:.2f} | {nm/pl:.2f} |")
print("raw:", {f"{k[0]}/{k[1]}": [round(x) for x in v] for k, v in res.items()})
print("peak rss MiB", max(rss))
