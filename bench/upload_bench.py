#!/usr/bin/env python3
"""Bytes sent and stored by uploads through `modelcas serve` (issue 41).

usage: upload_bench.py BIN SERIES_DIR WORK_DIR [lfs|xet]

One serve on a fresh store, a token with write scope. Uploads with
`HfApi.upload_folder` (each in a process of its own, as `hf upload` runs), each timed, each
followed by a byte-exact download check:
  full       r1 of the series into a new repository (everything is new)
  one-shard  r1 with its last shard replaced by r2's (a fine-tune that touched one shard),
             from the machine that uploaded r1 (with hf_xet: its cache of what it sent)
  fine-tune  r2 whole (the last quarter of the layers changed: two shards differ)
  other shard, another machine   r1 with its third shard replaced by r2's, into a second
             repository holding r1, from a client with an empty cache (a CI runner's first
             upload; before the fine-tune, so that the store lacks that shard)
For each: the bytes the client sent (serve's `upload_bytes_received`: object and commit
bodies), the bytes the store grew by (packs and manifests), and the time. Prints a
Markdown table and one JSON line.
"""
import hashlib, json, os, shutil, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(__file__))
from net_common import free_port, wait_port  # noqa: E402

BIN, SERIES, WORK = sys.argv[1:4]
MODE = sys.argv[4] if len(sys.argv) > 4 else "lfs"
REPO = "team/tiny-llm"
TOKEN = "bench-writer-0123456789"
exp = json.load(open(os.path.join(SERIES, "expected.json")))
revs = {r["name"]: r for r in exp["revisions"]}

store, spool = f"{WORK}/store", f"{WORK}/spool"
tokens = f"{WORK}/tokens"
open(tokens, "w").write(f"{TOKEN}  write=team/*  # bench\n")
env = dict(os.environ, MODELCAS_STORE=store, MODELCAS_INDEX=f"{WORK}/index")
port = free_port()
url = f"http://127.0.0.1:{port}"
srv = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}", "--token-file", tokens,
                        "--upload-dir", spool], env=env, stderr=open(f"{WORK}/serve.log", "w"))
wait_port(port)

os.environ.update(HF_ENDPOINT=url, HF_HUB_CACHE=f"{WORK}/hf-cache", HF_HOME=f"{WORK}/hf-home",
                  HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
if MODE == "lfs":
    os.environ["HF_HUB_DISABLE_XET"] = "1"
from huggingface_hub import HfApi, snapshot_download  # noqa: E402

api = HfApi(endpoint=url, token=TOKEN)
UPLOAD = """
import sys
from huggingface_hub import HfApi
url, token, repo, folder, msg = sys.argv[1:6]
print(HfApi(endpoint=url, token=token).upload_folder(repo_id=repo, folder_path=folder, commit_message=msg).oid)
"""


def upload(repo, folder, msg, home):
    env = dict(os.environ, HF_HOME=home)
    out = subprocess.run([sys.executable, "-c", UPLOAD, url, TOKEN, repo, folder, msg], env=env,
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def received():
    text = subprocess.run(["curl", "-sf", f"{url}/metrics"], capture_output=True, text=True, check=True).stdout
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith("modelcas_serve_upload_bytes_received"))


def store_bytes():
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store) for f in fs)


def sha(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def tree(root):
    """sha256 by path, without a local_dir's `.cache/` (the client's own records)."""
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(os.path.join(d, f), root)
            if rel.split(os.sep)[0] != ".cache":
                out[rel] = sha(os.path.join(d, f))
    return out


one = f"{WORK}/one-shard"
shutil.copytree(f"{SERIES}/plain/r1", one)
last = max(f["path"] for f in revs["r2"]["files"] if f["path"].endswith(".safetensors"))
shutil.copy(f"{SERIES}/plain/r2/{last}", f"{one}/{last}")
REPO2 = "team/tiny-llm-2"
home_a, home_b, home_c = f"{WORK}/home-a", f"{WORK}/home-b", f"{WORK}/home-c"
cases = [("full", REPO, f"{SERIES}/plain/r1", home_a), ("one-shard", REPO, one, home_a),
         ("fine-tune", REPO, f"{SERIES}/plain/r2", home_a)]
api.create_repo(REPO, exist_ok=True)
# Another shard changed (r2's third, which no upload sent yet), from a client whose cache
# is empty, into a second repository holding r1: what it sends is what the store lacks.
other = f"{WORK}/other-shard"
shutil.copytree(f"{SERIES}/plain/r1", other)
third = sorted(f["path"] for f in revs["r2"]["files"] if f["path"].endswith(".safetensors"))[-2]
shutil.copy(f"{SERIES}/plain/r2/{third}", f"{other}/{third}")
cases.insert(2, ("other shard, another machine", REPO2, other, home_b))
rows = []
try:
    for name, repo, folder, home in cases:
        if repo == REPO2:
            # The second repository holds r1 first, uploaded by a third client (so that no
            # measured client's cache knows it).
            upload(REPO2, f"{SERIES}/plain/r1", "base", home_c)
        r0, s0, t0 = received(), store_bytes(), time.monotonic()
        oid = upload(repo, folder, name, home)
        secs = time.monotonic() - t0
        r1, s1 = received(), store_bytes()
        got = snapshot_download(repo, revision=oid, local_dir=f"{WORK}/dl-{len(rows)}", token=TOKEN)
        a, b = tree(got), tree(folder)
        assert a == b, f"{name}: downloaded files differ: {sorted(set(a.items()) ^ set(b.items()))}"
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
        rows.append({"case": name, "files_bytes": size, "sent": int(r1 - r0), "stored": s1 - s0, "seconds": round(secs, 2)})
finally:
    srv.terminate()
    srv.wait()

mb = lambda b: f"{b / 1e6:.1f} MB"  # noqa: E731
print(f"| upload ({MODE}) | model bytes | sent by the client | store grew by | time |")
print("|---|---|---|---|---|")
for r in rows:
    print(f"| {r['case']} | {mb(r['files_bytes'])} | {mb(r['sent'])} ({r['sent'] / r['files_bytes']:.2f}) "
          f"| {mb(r['stored'])} ({r['stored'] / r['files_bytes']:.2f}) | {r['seconds']} s |")
print(json.dumps(rows))
