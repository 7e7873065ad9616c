#!/usr/bin/env python3
"""Bundles and `serve` against the manual flow (see bench/transfer.sh). Medians of ROUNDS.

usage: transfer_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR ROUNDS
"""
import json, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from net_common import free_port, wait_port  # noqa: E402

BIN, SERIES, WORK, ROUNDS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
EXP = json.load(open(f"{SERIES}/expected.json"))
COMMIT = {r["name"]: r["commit"] for r in EXP["revisions"]}
REPO = EXP["repo"]


def mc(store, *args, **kw):
    env = dict(os.environ, MODELCAS_STORE=f"{WORK}/{store}", MODELCAS_INDEX=f"{WORK}/{store}-index")
    return subprocess.run([BIN, "-q", *args], env=env, check=True, **kw)


def timed(fn):
    os.sync()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def sh(cmd):
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


# The source store, once.
shutil.rmtree(f"{WORK}/src", ignore_errors=True)
for r in ("r1", "r2", "r3", "r4"):
    mc("src", "ingest", f"{SERIES}/plain/{r}", "--repo", REPO, "--revision", COMMIT[r], "--ref", r)

rows = {k: [] for k in ["export r1", "tar+sha256 r1", "import r1", "untar+check r1",
                        "export r2 --have r1", "tar+sha256 r2", "import r2", "untar+check r2",
                        "serve: snapshot_download r4", "http.server: curl r4",
                        "serve: curl r4"]}
sizes = {}
for rnd in range(ROUNDS):
    for d in ("dst", "b1", "b2", "t", "x"):
        shutil.rmtree(f"{WORK}/{d}", ignore_errors=True)
        shutil.rmtree(f"{WORK}/{d}-index", ignore_errors=True)
    for f in ("r1.mcb", "r2.mcb", "r1.tar", "r2.tar"):
        if os.path.exists(f"{WORK}/{f}"):
            os.remove(f"{WORK}/{f}")
    rows["export r1"].append(timed(lambda: mc("src", "export", f"{REPO}@r1", "-o", f"{WORK}/r1.mcb")))
    rows["tar+sha256 r1"].append(timed(lambda: sh(
        f"cd {SERIES}/plain/r1 && sha256sum * > {WORK}/r1.sha && tar -cf {WORK}/r1.tar . -C {WORK} r1.sha")))
    rows["import r1"].append(timed(lambda: mc("dst", "import", f"{WORK}/r1.mcb")))
    os.makedirs(f"{WORK}/x/r1")
    rows["untar+check r1"].append(timed(lambda: sh(
        f"tar -xf {WORK}/r1.tar -C {WORK}/x/r1 && cd {WORK}/x/r1 && sha256sum -c --quiet r1.sha")))
    rows["export r2 --have r1"].append(timed(lambda: mc(
        "src", "export", f"{REPO}@r2", "--have", f"{REPO}@r1", "-o", f"{WORK}/r2.mcb")))
    rows["tar+sha256 r2"].append(timed(lambda: sh(
        f"cd {SERIES}/plain/r2 && sha256sum * > {WORK}/r2.sha && tar -cf {WORK}/r2.tar . -C {WORK} r2.sha")))
    rows["import r2"].append(timed(lambda: mc("dst", "import", f"{WORK}/r2.mcb")))
    os.makedirs(f"{WORK}/x/r2")
    rows["untar+check r2"].append(timed(lambda: sh(
        f"tar -xf {WORK}/r2.tar -C {WORK}/x/r2 && cd {WORK}/x/r2 && sha256sum -c --quiet r2.sha")))
    sizes = {k: os.path.getsize(f"{WORK}/{k}") for k in ("r1.mcb", "r2.mcb", "r1.tar", "r2.tar")}

    # Serving r4.
    port = free_port()
    env = dict(os.environ, MODELCAS_STORE=f"{WORK}/src", MODELCAS_INDEX=f"{WORK}/src-index")
    srv = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                           stderr=subprocess.DEVNULL)
    wait_port(port)
    code = ("import os,sys; os.environ['HF_ENDPOINT']=sys.argv[1]; os.environ['HF_HUB_DISABLE_PROGRESS_BARS']='1';"
            "from huggingface_hub import snapshot_download as s; s(sys.argv[2], revision='r4', cache_dir=sys.argv[3])")
    rows["serve: snapshot_download r4"].append(timed(lambda: subprocess.run(
        [sys.executable, "-c", code, f"http://127.0.0.1:{port}", REPO, f"{WORK}/t/hf"], check=True)))
    srv.kill(); srv.wait()
    files = [f["path"] for f in [r for r in EXP["revisions"] if r["name"] == "r4"][0]["files"]]
    os.makedirs(f"{WORK}/t/curl", exist_ok=True)
    # The same files with curl from a fresh serve (no decoded chunk in memory): the server's
    # own cost, without the Hub client's.
    port = free_port()
    srv = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                           stderr=subprocess.DEVNULL)
    wait_port(port)
    rows["serve: curl r4"].append(timed(lambda: sh(" && ".join(
        f"curl -sf -o {WORK}/t/curl/{i} http://127.0.0.1:{port}/{REPO}/resolve/r4/{p}"
        for i, p in enumerate(files)))))
    srv.kill(); srv.wait()
    port = free_port()
    plain = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              "--directory", f"{SERIES}/plain/r4"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    wait_port(port)
    rows["http.server: curl r4"].append(timed(lambda: sh(" && ".join(
        f"curl -sf -o {WORK}/t/curl/{i} http://127.0.0.1:{port}/{p}" for i, p in enumerate(files)))))
    plain.kill(); plain.wait()

med = {k: statistics.median(v) for k, v in rows.items()}
print("| step | modelcas (s) | manual flow (s) | ratio manual / modelcas |")
print("|---|---|---|---|")
for a, b in [("export r1", "tar+sha256 r1"), ("import r1", "untar+check r1"),
             ("export r2 --have r1", "tar+sha256 r2"), ("import r2", "untar+check r2"),
             ("serve: snapshot_download r4", "http.server: curl r4"),
             ("serve: curl r4", "http.server: curl r4")]:
    print(f"| {a} / {b} | {med[a]:.2f} | {med[b]:.2f} | {med[b] / med[a]:.2f} |")
print()
print(f"bundle r1 {sizes['r1.mcb'] / 2**20:.1f} MiB vs tar {sizes['r1.tar'] / 2**20:.1f} MiB; "
      f"bundle r2 --have r1 {sizes['r2.mcb'] / 2**20:.1f} MiB vs tar {sizes['r2.tar'] / 2**20:.1f} MiB "
      f"({sizes['r2.tar'] / sizes['r2.mcb']:.1f}x smaller)")
