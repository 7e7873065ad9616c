#!/usr/bin/env python3
"""`serve --upstream` against direct downloads (see bench/mirror.sh). Medians of ROUNDS.

usage: mirror_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR ROUNDS
"""
import json, os, shutil, socket, statistics, subprocess, sys, time, urllib.request

BIN, SERIES, WORK, ROUNDS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
EXP = json.load(open(f"{SERIES}/expected.json"))
REVS = {r["name"]: r for r in EXP["revisions"]}
REPO = EXP["repo"]
CLIENTS = 8


def env_of(store):
    return dict(os.environ, MODELCAS_STORE=f"{WORK}/{store}", MODELCAS_INDEX=f"{WORK}/{store}-index")


def mc(store, *args):
    subprocess.run([BIN, "-q", *args], env=env_of(store), check=True, stdout=subprocess.DEVNULL)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def serve(store, *args):
    port = free_port()
    p = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}", *args], env=env_of(store),
                         stderr=subprocess.DEVNULL)
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("serve did not start")


def metric(url, name):
    text = urllib.request.urlopen(f"{url}/metrics").read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name))


CODE = ("import os,sys; os.environ['HF_ENDPOINT']=sys.argv[1]; os.environ['HF_HUB_DISABLE_PROGRESS_BARS']='1';"
        "os.environ['HF_HUB_DISABLE_XET']='1';"
        "from huggingface_hub import snapshot_download as s; s(sys.argv[2], revision=sys.argv[3], cache_dir=sys.argv[4])")


def download(url, rev, cache):
    return subprocess.Popen([sys.executable, "-c", CODE, url, REPO, rev, cache])


def timed_download(url, rev, cache):
    t = time.perf_counter()
    if download(url, rev, cache).wait() != 0:
        raise RuntimeError("snapshot_download failed")
    return time.perf_counter() - t


def fresh(*names):
    for n in names:
        shutil.rmtree(f"{WORK}/{n}", ignore_errors=True)
        shutil.rmtree(f"{WORK}/{n}-index", ignore_errors=True)


fresh("up")
mc("up", "ingest", f"{SERIES}/plain/r1", "--repo", REPO, "--revision", REVS["r1"]["commit"], "--ref", "main")
mc("up", "ingest", f"{SERIES}/plain/r2", "--repo", REPO, "--revision", REVS["r2"]["commit"], "--ref", "r2")
up, up_url = serve("up")
rows = {k: [] for k in ["direct r1", "mirror first r1", "mirror second r1", f"{CLIENTS} clients r2"]}
ratio = []
try:
    for rnd in range(ROUNDS):
        fresh("mirror", "mirror2", "hf")
        mc("mirror", "init"); mc("mirror2", "init")
        rows["direct r1"].append(timed_download(up_url, "main", f"{WORK}/hf/direct"))
        m, m_url = serve("mirror", "--upstream", up_url)
        rows["mirror first r1"].append(timed_download(m_url, "main", f"{WORK}/hf/first"))
        rows["mirror second r1"].append(timed_download(m_url, "main", f"{WORK}/hf/second"))
        m.kill(); m.wait()
        # A fresh mirror: 8 clients of r2 at once.
        m, m_url = serve("mirror2", "--upstream", up_url)
        sent = metric(up_url, "modelcas_serve_bytes_sent_total")
        t = time.perf_counter()
        procs = [download(m_url, "r2", f"{WORK}/hf/c{i}") for i in range(CLIENTS)]
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("a client failed")
        rows[f"{CLIENTS} clients r2"].append(time.perf_counter() - t)
        upstream_bytes = metric(up_url, "modelcas_serve_bytes_sent_total") - sent
        one_copy = sum(f["size"] for f in REVS["r2"]["files"])
        ratio.append(upstream_bytes / one_copy)
        m.kill(); m.wait()
finally:
    up.kill(); up.wait()

med = {k: statistics.median(v) for k, v in rows.items()}
mib = sum(f["size"] for f in REVS["r1"]["files"]) / 2**20
print(f"r1: {mib:.0f} MiB in {len(REVS['r1']['files'])} files; medians of {ROUNDS} rounds")
print("| what | seconds |")
print("|---|---|")
for k, v in med.items():
    print(f"| {k} | {v:.2f} |")
print()
print(f"first through the mirror / direct: {med['mirror first r1'] / med['direct r1']:.2f}; "
      f"second (hit) / first: {med['mirror second r1'] / med['mirror first r1']:.2f}; "
      f"{CLIENTS} clients of r2: upstream sent {statistics.median(ratio):.3f} copies of r2")
