#!/usr/bin/env python3
"""Two builds of modelcas side by side on the writers' benchmarks, in one invocation, beside
borg: which change to ingest or checkout did what (issue 15).

usage: ingest_ab.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS]

Rows, each a median of ROUNDS; every round runs borg, A and B in turn on each row (the load
drifts), each in a fresh store, the page cache dropped before every timed step except the
r1..r4 row (its sources are read into the page cache first, as bench/ingest_bench.py does):
  hub      ingest of a hub cache of 50 repositories (4 revisions each, 1-4 MiB; the data of
           bench/scale_bench.py's `files` part) against `borg create --compression zstd,3`
  hub again  the same ingest again into the store the hub row made (nothing changed since),
           against a second `borg create` into the same borg repository (its files cache)
  small    ingest of 20,000 files of 1-16 KiB in 100 directories, against `borg create`
  checkout checkout of those 20,000 files against `borg extract`, into the same directory
           each time (removed before: ext4 then allocates inodes among those just freed,
           which it scans slowly; most of either tool's time goes there)
  checkout on a fresh fs  the same into a newly made ext4 filesystem each time (a loop
           device: no history of deletions), the cost of the writes themselves
  r1..r4   ingest of r1, then r2, r3 and r4 of the series (one ingest each), against one
           `borg create` each
Needs root (drop_caches, loop mounts), mkfs.ext4, borg and /usr/bin/time.
"""
import json, os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale_bench as S  # noqa: E402
from fs_common import on_fresh_ext4  # noqa: E402

BIN_A, BIN_B, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 3
S.WORK = WORK
REV = "5" * 40


def borg_init(st):
    subprocess.run(["borg", "init", "--encryption=none"], env=S.env(st), check=True)


def fresh(st):
    shutil.rmtree(st, ignore_errors=True)
    os.makedirs(st)


def warm(dirs):
    for d in dirs:
        for f in os.listdir(d):
            with open(f"{d}/{f}", "rb") as h:
                while h.read(1 << 24):
                    pass


def row_ingest(tool, st, src, args):
    fresh(st)
    if tool == "borg":
        borg_init(st)
        return S.timed(["borg", "create", "--compression", "zstd,3", "::x", "."], st, cwd=src)[0]
    return S.timed([tool, "-q", "ingest", src, *args], st)[0]


def row_again(tool, st, src, args):
    """The ingest of row_ingest again, into the store it made."""
    if tool == "borg":
        return S.timed(["borg", "create", "--compression", "zstd,3", "::again", "."], st, cwd=src)[0]
    return S.timed([tool, "-q", "ingest", src, *args], st)[0]


def row_checkout(tool, st, co):
    shutil.rmtree(co, ignore_errors=True)
    if tool == "borg":
        os.makedirs(co)
        return S.timed(["borg", "extract", "::small"], st, cwd=co)[0]
    return S.timed([tool, "-q", "checkout", f"bench/small-files@{REV}", co], st)[0]


def row_checkout_fresh_fs(tool, st, d):
    """row_checkout into a new ext4 filesystem (a 2 GiB loop device), unmounted after."""
    return on_fresh_ext4(d, lambda mnt: row_checkout(tool, st, f"{mnt}/co"))


def row_series(tool, st, commits):
    fresh(st)
    revs = ["r1", "r2", "r3", "r4"]
    dirs = [f"{SERIES}/plain/{r}" for r in revs]
    warm(dirs)
    if tool == "borg":
        borg_init(st)
        return sum(S.timed(["borg", "create", "--compression", "zstd,3", f"::{r}", "."], st, cwd=d, cold=False)[0]
                   for r, d in zip(revs, dirs))
    return sum(S.timed([tool, "-q", "ingest", d, "--repo", "demo-org/demo-llm", "--revision", commits[r], "--ref", r],
                       st, cold=False)[0] for r, d in zip(revs, dirs))


def main():
    d = f"{WORK}/ab"
    os.makedirs(d, exist_ok=True)
    hub, _ = S.make_hub(d)
    small, _ = S.make_small_files(d)
    commits = {r["name"]: r["commit"] for r in json.load(open(f"{SERIES}/expected.json"))["revisions"]}
    # The store the checkout rows read: made once, by B (the store format is the same).
    src = f"{d}/co-src"
    fresh(src)
    subprocess.run([BIN_B, "-q", "ingest", small, "--repo", "bench/small-files", "--revision", REV],
                   env=S.env(src), check=True, stdout=subprocess.DEVNULL)
    borg_init(src)
    subprocess.run(["borg", "create", "--compression", "zstd,3", "::small", "."], env=S.env(src), cwd=small, check=True)
    rows = {r: {t: [] for t in ("borg", "A", "B")}
            for r in ("hub", "hub again", "small", "checkout", "checkout on a fresh fs", "r1..r4")}
    tools = (("borg", "borg"), ("A", BIN_A), ("B", BIN_B))
    for _ in range(ROUNDS):
        for tag, tool in tools:
            rows["hub"][tag].append(row_ingest(tool, f"{d}/st", hub, []))
            rows["hub again"][tag].append(row_again(tool, f"{d}/st", hub, []))
            rows["small"][tag].append(row_ingest(tool, f"{d}/st", small, ["--repo", "bench/small-files", "--revision", REV]))
            rows["checkout"][tag].append(row_checkout(tool, src, f"{d}/co"))
            rows["checkout on a fresh fs"][tag].append(row_checkout_fresh_fs(tool, src, d))
            rows["r1..r4"][tag].append(row_series(tool, f"{d}/st", commits))
    shutil.rmtree(d)
    print(f"A = {BIN_A}\nB = {BIN_B}\n{ROUNDS} rounds, medians (s); load average now {open('/proc/loadavg').read().split()[:3]}")
    print("| step | borg | A | B | borg / A | borg / B | A / B |\n|---|---|---|---|---|---|---|")
    for r, v in rows.items():
        m = {t: statistics.median(x) for t, x in v.items()}
        base = "`borg extract`" if r.startswith("checkout") else "`borg create`"
        print(f"| {r} vs {base} | {m['borg']:.2f} | {m['A']:.2f} | {m['B']:.2f} | {m['borg'] / m['A']:.2f}x | "
              f"{m['borg'] / m['B']:.2f}x | {m['A'] / m['B']:.2f}x |")
    print("\nevery round (s):")
    for r, v in rows.items():
        print(f"  {r}: " + "; ".join(f"{t} " + " ".join(f"{x:.2f}" for x in xs) for t, xs in v.items()))


if __name__ == "__main__":
    main()
