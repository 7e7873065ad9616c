#!/usr/bin/env python3
"""Xet against plain HTTP from one `modelcas serve` (issue 28).

usage: xet_bench.py BIN SERIES_DIR WORK_DIR [ROUNDS]

Ingests r4 of the series, starts one serve, then each round (the three in a rotating
order, the page cache warm: what is measured is serving, not the disk) times:
  xet    snapshot_download(repo, revision=r4) with hf_xet (reconstructions, parallel ranges)
  plain  the same with HF_HUB_DISABLE_XET=1 (one HTTP GET per file)
  curl   `curl -o` of every file of r4 in turn from resolve/
each into a fresh directory, byte counts checked. Prints medians and MB/s (of the whole client
process, and of the snapshot_download call alone as the client times it: the interpreter's
start and imports, about 0.2 s, are the same in both arms), the CPU seconds
(user+sys) of the client and of serve per round, and serve's Xet counters.
"""
import json, os, resource, shutil, socket, statistics, subprocess, sys, time

BIN, SERIES, WORK = sys.argv[1:4]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
REPO = "demo-org/demo-llm"
exp = json.load(open(os.path.join(SERIES, "expected.json")))
r4 = [r for r in exp["revisions"] if r["name"] == "r4"][0]
total = sum(f["size"] for f in r4["files"])
env = dict(os.environ, MODELCAS_STORE=f"{WORK}/store", MODELCAS_INDEX=f"{WORK}/index")
subprocess.run([BIN, "-q", "ingest", f"{SERIES}/plain/r4", "--repo", REPO, "--revision",
                r4["commit"], "--ref", "r4"], env=env, check=True, stdout=subprocess.DEVNULL)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
url = f"http://127.0.0.1:{port}"
srv = subprocess.Popen([BIN, "-q", "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                       stderr=open(f"{WORK}/serve.log", "w"))
while True:
    try:
        socket.create_connection(("127.0.0.1", port)).close()
        break
    except OSError:
        time.sleep(0.05)

CLIENT = """
import os, sys, time
from huggingface_hub import snapshot_download
t = time.monotonic()
snapshot_download(sys.argv[1], revision="r4", local_dir=sys.argv[2])
print(time.monotonic() - t)
"""


def run(kind, dest):
    if kind == "curl":
        for f in r4["files"]:
            out = os.path.join(dest, f["path"])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            subprocess.run(["curl", "-sf", "-o", out, f"{url}/{REPO}/resolve/r4/{f['path']}"], check=True)
        return
    e = dict(os.environ, HF_ENDPOINT=url, HF_HUB_CACHE=f"{dest}.cache", HF_HOME=f"{dest}.home",
             HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    if kind == "plain":
        e["HF_HUB_DISABLE_XET"] = "1"
    else:
        e.pop("HF_HUB_DISABLE_XET", None)
    out = subprocess.run([sys.executable, "-c", CLIENT, REPO, dest], env=e, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return float(out.split()[-1])


def client_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def serve_cpu():
    f = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


times = {"xet": [], "plain": [], "curl": []}
calls = {"xet": [], "plain": []}  # the snapshot_download call alone, in the client's clock
cpu = {k: ([], []) for k in times}
kinds = list(times)
try:
    for rnd in range(ROUNDS):
        for kind in kinds[rnd % 3:] + kinds[:rnd % 3]:
            dest = f"{WORK}/dl-{kind}-{rnd}"
            t, c, sv = time.monotonic(), client_cpu(), serve_cpu()
            call = run(kind, dest)
            times[kind].append(time.monotonic() - t)
            if call is not None:
                calls[kind].append(call)
            cpu[kind][0].append(client_cpu() - c)
            cpu[kind][1].append(serve_cpu() - sv)
            got = sum(os.path.getsize(os.path.join(dest, f["path"])) for f in r4["files"])
            assert got == total, (kind, got, total)
            shutil.rmtree(dest, ignore_errors=True)
            for extra in (f"{dest}.cache", f"{dest}.home"):
                shutil.rmtree(extra, ignore_errors=True)
    metrics = subprocess.run(["curl", "-s", f"{url}/metrics"], capture_output=True, text=True).stdout
finally:
    srv.kill()
print(f"r4: {len(r4['files'])} files, {total / 1e6:.0f} MB; {ROUNDS} rounds, medians")
for kind, ts in times.items():
    m = statistics.median(ts)
    print(f"  {kind:6} {m:7.2f} s  {total / m / 1e6:7.0f} MB/s   (rounds: {', '.join(f'{t:.2f}' for t in ts)})"
          f"; CPU s client {statistics.median(cpu[kind][0]):.2f}, serve {statistics.median(cpu[kind][1]):.2f}")
print(f"  xet / plain: {statistics.median(times['plain']) / statistics.median(times['xet']):.2f}x"
      " (whole client processes: Python start, imports and the call)")
for kind, ts in calls.items():
    print(f"  {kind:6} call {statistics.median(ts):5.2f} s   (rounds: {', '.join(f'{t:.2f}' for t in ts)})")
print(f"  xet / plain, the snapshot_download call alone: "
      f"{statistics.median(calls['plain']) / statistics.median(calls['xet']):.2f}x")
for line in metrics.splitlines():
    if 'endpoint="xet-' in line and line.startswith("modelcas_serve_requests_total"):
        print("  " + line)
