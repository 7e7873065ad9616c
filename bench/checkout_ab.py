#!/usr/bin/env python3
"""Two builds of `modelcas checkout` of the small-files repository (20,000 files of 1-16 KiB,
as bench/scale_bench.py makes it) into a newly made ext4 file system each time, the order
of A and B alternating round by round: ingest_ab.py's "checkout on a fresh fs" row alone,
with more rounds and no fixed order (the row that moves most between runs).

usage: checkout_ab.py BIN_A BIN_B WORK_DIR [ROUNDS]    (root: loop mounts, drop_caches)
"""
import os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale_bench as S  # noqa: E402
from fs_common import on_fresh_ext4  # noqa: E402

BIN_A, BIN_B, WORK = sys.argv[1:4]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 10
REV = "5" * 40
S.WORK = WORK


def checkout_fresh_fs(tool, st, d):
    co = f"bench/small-files@{REV}"
    return on_fresh_ext4(d, lambda mnt: S.timed([tool, "-q", "checkout", co, f"{mnt}/co"], st)[0])


def main():
    d = f"{WORK}/co-ab"
    os.makedirs(d, exist_ok=True)
    small, _ = S.make_small_files(d)
    src = f"{d}/co-src"
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    subprocess.run([BIN_B, "-q", "ingest", small, "--repo", "bench/small-files", "--revision", REV],
                   env=S.env(src), check=True, stdout=subprocess.DEVNULL)
    times = {"A": [], "B": []}
    for i in range(ROUNDS):
        order = (("A", BIN_A), ("B", BIN_B)) if i % 2 == 0 else (("B", BIN_B), ("A", BIN_A))
        for tag, tool in order:
            times[tag].append(checkout_fresh_fs(tool, src, d))
    shutil.rmtree(d)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    print(f"A = {BIN_A}\nB = {BIN_B}\n{ROUNDS} rounds, alternating, medians")
    print("| checkout of 20,000 small files into a new ext4 | A (s) | B (s) | B / A |\n|---|---|---|---|")
    print(f"| | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    for t, xs in times.items():
        print(f"  {t}: " + " ".join(f"{x:.2f}" for x in xs))


main()
