#!/usr/bin/env python3
"""CPU seconds of `modelcas ingest`, two builds side by side in one invocation (issue 28:
what computing the Xet hash costs ingest).

usage: ingest_cpu_ab.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS] [REVISIONS]

REVISIONS: the revisions to ingest, comma-separated (default r1,r2,r3,r4); `r1` alone is a
first ingest, where every byte is new.

Each round ingests r1, then r2, r3 and r4 of the series (plain directories, one ingest
each) into a fresh store and index, with A then B (B then A in odd rounds: the load
drifts), the sources read into the page cache first so that the disk is not measured.
Prints, per build, the medians over rounds of the user, system and user+sys CPU seconds of
the four ingests together and their wall time, then B / A of each.
"""
import json, os, shutil, statistics, subprocess, sys, time

BIN_A, BIN_B, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 5
REPO = "demo-org/demo-llm"
exp = json.load(open(os.path.join(SERIES, "expected.json")))
revs = exp["revisions"]
if len(sys.argv) > 6:
    want = sys.argv[6].split(",")
    revs = [r for r in revs if r["name"] in want]


def warm():
    for r in revs:
        for d, _, fs in os.walk(os.path.join(SERIES, "plain", r["name"])):
            for f in fs:
                with open(os.path.join(d, f), "rb") as fh:
                    while fh.read(1 << 20):
                        pass


def ingest_all(binary):
    """(user, sys, wall) of ingesting r1..r4 into a fresh store."""
    st = os.path.join(WORK, "st")
    shutil.rmtree(st, ignore_errors=True)
    env = dict(os.environ, MODELCAS_STORE=f"{st}/store", MODELCAS_INDEX=f"{st}/index")
    user = sys_ = wall = 0.0
    for r in revs:
        t = time.monotonic()
        p = subprocess.Popen([binary, "-q", "ingest", os.path.join(SERIES, "plain", r["name"]),
                              "--repo", REPO, "--revision", r["commit"]], env=env,
                             stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall += time.monotonic() - t
        if status != 0:
            sys.exit(f"{binary}: ingest of {r['name']} failed ({status})")
        user += ru.ru_utime
        sys_ += ru.ru_stime
    shutil.rmtree(st, ignore_errors=True)
    return user, sys_, wall


os.makedirs(WORK, exist_ok=True)
warm()
got = {"A": [], "B": []}
for rnd in range(ROUNDS):
    order = [("A", BIN_A), ("B", BIN_B)]
    for name, b in order if rnd % 2 == 0 else order[::-1]:
        got[name].append(ingest_all(b))
total = sum(f["size"] for r in revs for f in r["files"])
print(f"{','.join(r['name'] for r in revs)}: {total / 1e6:.0f} MB ingested per round; {ROUNDS} rounds, medians")
med = {}
for name in "AB":
    u = statistics.median(x[0] for x in got[name])
    s = statistics.median(x[1] for x in got[name])
    us = statistics.median(x[0] + x[1] for x in got[name])
    w = statistics.median(x[2] for x in got[name])
    med[name] = (u, s, us, w)
    print(f"  {name}: user {u:.2f} s, sys {s:.2f} s, user+sys {us:.2f} s, wall {w:.2f} s")
a, b = med["A"], med["B"]
print(f"  B / A: user {b[0] / a[0]:.3f}, user+sys {b[2] / a[2]:.3f}, wall {b[3] / a[3]:.3f}")
