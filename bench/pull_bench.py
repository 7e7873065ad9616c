#!/usr/bin/env python3
"""`modelcas pull` of r1..r4 against `hf download` of r1..r4 + `modelcas ingest` of the
cache (see bench/pull.sh): wall time and peak extra disk of each, one run.

usage: pull_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR
"""
import json, os, shutil, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from net_common import free_port, wait_port  # noqa: E402

BIN, SERIES, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
EXP = json.load(open(f"{SERIES}/expected.json"))
COMMIT = {r["name"]: r["commit"] for r in EXP["revisions"]}
REPO = EXP["repo"]
REVS = ("r1", "r2", "r3", "r4")
HF = os.path.join(os.path.dirname(sys.executable), "hf")


def mc(store, *args, **kw):
    env = dict(os.environ, MODELCAS_STORE=f"{WORK}/{store}", MODELCAS_INDEX=f"{WORK}/{store}-index")
    return subprocess.run([BIN, "-q", *args], env=env, check=True, **kw)


def disk(paths):
    """Bytes allocated under `paths` (what `du` counts)."""
    total = 0
    for top in paths:
        for d, _, files in os.walk(top):
            for f in files:
                try:
                    total += os.lstat(os.path.join(d, f)).st_blocks * 512
                except FileNotFoundError:
                    pass  # removed meanwhile (a temp file)
    return total


def measured(paths, fn):
    """Runs fn; returns (seconds, peak bytes under paths above what they held before)."""
    os.sync()
    base = disk(paths)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            peak[0] = max(peak[0], disk(paths))

    t = threading.Thread(target=sample)
    t.start()
    start = time.perf_counter()
    fn()
    secs = time.perf_counter() - start
    done.set()
    t.join()
    peak[0] = max(peak[0], disk(paths))
    return secs, peak[0] - base


for d in ("up", "up-index", "pull", "pull-index", "hf", "ing", "ing-index"):
    shutil.rmtree(f"{WORK}/{d}", ignore_errors=True)
for r in REVS:
    mc("up", "ingest", f"{SERIES}/plain/{r}", "--repo", REPO, "--revision", COMMIT[r], "--ref", r,
       stdout=subprocess.DEVNULL)
port = free_port()
env = dict(os.environ, MODELCAS_STORE=f"{WORK}/up", MODELCAS_INDEX=f"{WORK}/up-index")
srv = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                       stderr=subprocess.DEVNULL)
wait_port(port)
url = f"http://127.0.0.1:{port}"
try:
    for d in ("pull", "pull-index", "hf", "ing", "ing-index"):
        os.makedirs(f"{WORK}/{d}")
    mc("pull", "init", stdout=subprocess.DEVNULL)
    mc("ing", "init", stdout=subprocess.DEVNULL)

    def pull():
        for r in REVS:
            mc("pull", "pull", f"{REPO}@{COMMIT[r]}", "--endpoint", url, stdout=subprocess.DEVNULL)

    phase = {}

    def hf_then_ingest():
        start = time.perf_counter()
        hf_env = dict(os.environ, HF_ENDPOINT=url, HF_HUB_DISABLE_PROGRESS_BARS="1",
                      HF_HUB_DISABLE_TELEMETRY="1")
        for r in REVS:
            subprocess.run([HF, "download", REPO, "--revision", COMMIT[r], "--cache-dir",
                            f"{WORK}/hf", "--quiet"], env=hf_env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        phase["hf download"] = time.perf_counter() - start
        mc("ing", "ingest", f"{WORK}/hf", stdout=subprocess.DEVNULL)
        phase["ingest"] = time.perf_counter() - start - phase["hf download"]

    p_secs, p_disk = measured([f"{WORK}/pull", f"{WORK}/pull-index"], pull)
    b_secs, b_disk = measured([f"{WORK}/hf", f"{WORK}/ing", f"{WORK}/ing-index"], hf_then_ingest)
finally:
    srv.kill(); srv.wait()

# Both stores hold the same four revisions.
for r in REVS:
    a = subprocess.run([BIN, "-q", "ls", f"{REPO}@{COMMIT[r]}", "--json"], capture_output=True,
                       check=True, env=dict(os.environ, MODELCAS_STORE=f"{WORK}/pull")).stdout
    b = subprocess.run([BIN, "-q", "ls", f"{REPO}@{COMMIT[r]}", "--json"], capture_output=True,
                       check=True, env=dict(os.environ, MODELCAS_STORE=f"{WORK}/ing")).stdout
    files = lambda v: sorted((f["path"], f["sha256"]) for f in json.loads(v)["files"])
    assert files(a) == files(b), r

store_after = disk([f"{WORK}/pull"])
index_after = disk([f"{WORK}/pull-index"])
hf_cache = disk([f"{WORK}/hf"])
mib = lambda n: n / 2**20
print("| r1..r4 from an upstream serve | wall (s) | peak extra disk (MiB) |")
print("|---|---|---|")
print(f"| modelcas pull | {p_secs:.1f} | {mib(p_disk):.0f} |")
print(f"| hf download + modelcas ingest | {b_secs:.1f} | {mib(b_disk):.0f} |")
print(f"| ratio baseline / pull | {b_secs / p_secs:.2f} | {b_disk / p_disk:.2f} |")
print()
print(f"baseline: hf download {phase['hf download']:.1f} s, ingest {phase['ingest']:.1f} s")
print(f"after pull: store {mib(store_after):.0f} MiB, index {mib(index_after):.0f} MiB; "
      f"HF cache {mib(hf_cache):.0f} MiB; r1..r4 {mib(EXP['total_bytes']):.0f} MiB of files")
