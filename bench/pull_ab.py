#!/usr/bin/env python3
"""Two builds of `modelcas pull`, side by side (see bench/pull_ab.sh).

An upstream `modelcas serve` (build B) holds r1..r4 of the series. Each round, each build in
turn (the order alternates) pulls r1, then r2, r3, r4 by sha into an empty store of its own.
r1 is downloaded whole; r2..r4 share weight shards with the revisions before them, which
the store already holds (their sha256 is stated upstream): that is where a change to how
pull reuses stored files shows. Rows: medians over the rounds of r1's pull, of r2..r4's
pulls together, and B/A ratios; every store ends byte-identical (sha256 of every file).

usage: pull_ab.py BIN_A BIN_B SERIES_DIR WORK_DIR ROUNDS
"""
import json, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from net_common import free_port, wait_port  # noqa: E402

A, B, SERIES, WORK, ROUNDS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
EXP = json.load(open(f"{SERIES}/expected.json"))
COMMIT = {r["name"]: r["commit"] for r in EXP["revisions"]}
REPO = EXP["repo"]
REVS = ("r1", "r2", "r3", "r4")


def mc(binary, store, *args, **kw):
    env = dict(os.environ, MODELCAS_STORE=f"{WORK}/{store}", MODELCAS_INDEX=f"{WORK}/{store}-index")
    return subprocess.run([binary, "-q", *args], env=env, check=True, **kw)


def files(binary, store, rev):
    out = mc(binary, store, "ls", f"{REPO}@{COMMIT[rev]}", "--json", capture_output=True).stdout
    return sorted((f["path"], f["sha256"]) for f in json.loads(out)["files"])


def one_pull(binary, url):
    """Pulls r1..r4 into a fresh store: (seconds for r1, seconds for r2..r4)."""
    for d in ("p", "p-index"):
        shutil.rmtree(f"{WORK}/{d}", ignore_errors=True)
    os.makedirs(f"{WORK}/p")
    mc(binary, "p", "init", stdout=subprocess.DEVNULL)
    times = []
    for r in REVS:
        os.sync()
        t = time.perf_counter()
        mc(binary, "p", "pull", f"{REPO}@{COMMIT[r]}", "--endpoint", url, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    for r in REVS:
        assert files(binary, "p", r) == files(B, "up", r), (binary, r)
    return times[0], sum(times[1:])


for d in ("up", "up-index"):
    shutil.rmtree(f"{WORK}/{d}", ignore_errors=True)
for r in REVS:
    mc(B, "up", "ingest", f"{SERIES}/plain/{r}", "--repo", REPO, "--revision", COMMIT[r], "--ref", r,
       stdout=subprocess.DEVNULL)
port = free_port()
env = dict(os.environ, MODELCAS_STORE=f"{WORK}/up", MODELCAS_INDEX=f"{WORK}/up-index")
srv = subprocess.Popen([B, "serve", "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL)
wait_port(port)
url = f"http://127.0.0.1:{port}"
res = {A: [], B: []}
try:
    for i in range(ROUNDS):
        for binary in ((A, B) if i % 2 == 0 else (B, A)):
            res[binary].append(one_pull(binary, url))
finally:
    srv.kill(); srv.wait()

med = lambda xs: statistics.median(xs)
print(f"| pull from an upstream serve, {ROUNDS} rounds (medians) | A (s) | B (s) | B / A |")
print("|---|---|---|---|")
for label, k in (("r1 (all downloaded)", 0), ("r2..r4 (held shards reused)", 1)):
    a, b = med([x[k] for x in res[A]]), med([x[k] for x in res[B]])
    print(f"| {label} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
print()
for binary, name in ((A, "A"), (B, "B")):
    print(name, binary, " ".join(f"{x:.2f}+{y:.2f}" for x, y in res[binary]))
