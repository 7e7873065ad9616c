#!/usr/bin/env python3
"""A pod's second start on a node (issue 40), two builds side by side.

usage: second_start.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS]

Each build gets a node file cache of its own, filled by a first mount that reads r3 whole
and waits for the cache to hold every file of 1 MiB or more, then stops. Each round then
starts, for plain, A and B in turn (the order rotating), a fresh mount process on that
file cache with the page cache dropped, and reads the largest shard of r3 with
open, 1 MiB reads and close timed together (passthrough: the kernel reads the cache's file; before issue 40 the new
process first read and hashed the entry at its first open). The shard's SHA-256 is
compared with the plain copy's after each build's rounds. Reported: the median MB/s of
each, B / plain and A / plain (target ≥ 0.95), and how many entry checks each build's
last mount ran (its metrics). Needs root.
"""
import hashlib, json, os, shutil, statistics, subprocess, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_common import drop_caches, mounted  # noqa: E402

BIN_A, BIN_B, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 5
REPO = "demo-org/demo-llm"
MIN_FILE_BYTES = 1 << 20


def env(files):
    return dict(os.environ, MODELCAS_STORE=f"{WORK}/store", MODELCAS_INDEX=f"{WORK}/index",
                MODELCAS_FILE_CACHE=files)


def entries_bytes(files):
    n = 0
    for dp, ds, fs in os.walk(files):
        ds[:] = [d for d in ds if not d.startswith(".")]
        n += sum(os.path.getsize(os.path.join(dp, f)) for f in fs if not f.startswith("."))
    return n


class Mount:
    def __init__(self, binary, files, port):
        self.path = f"{WORK}/mnt"
        os.makedirs(self.path, exist_ok=True)
        self.port = port
        self.proc = subprocess.Popen([binary, "mount", self.path, "--metrics-listen", f"127.0.0.1:{port}"],
                                     env=env(files), stderr=subprocess.DEVNULL)
        t = time.time()
        while not mounted(self.path):
            assert self.proc.poll() is None and time.time() - t < 30, "mount did not come up"
            time.sleep(0.01)

    def checks(self):
        page = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics").read().decode()
        for line in page.splitlines():
            if line.startswith("modelcas_file_cache_checks_total"):
                return float(line.split()[-1])
        return 0.0

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def timed_read(path):
    """MB/s of open + 1 MiB reads to the end + close: the open counts (the check of an
    entry at its first open runs there, and reads the file into the page cache)."""
    t = time.perf_counter()
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while d := os.read(fd, 1 << 20):
            n += len(d)
    finally:
        os.close(fd)
    return n / (time.perf_counter() - t) / 1e6


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    return h.hexdigest()


def main():
    exp = json.load(open(f"{SERIES}/expected.json"))
    r3 = [r for r in exp["revisions"] if r["name"] == "r3"][0]
    shard = max((f for f in r3["files"] if f["path"].endswith(".safetensors")), key=lambda f: f["size"])
    want_bytes = sum(f["size"] for f in r3["files"] if f["size"] >= MIN_FILE_BYTES)
    subprocess.run([BIN_B, "-q", "ingest", f"{SERIES}/plain/r3", "--repo", REPO, "--revision", r3["commit"],
                    "--ref", "r3"], check=True, env=env(f"{WORK}/files-none"), stdout=subprocess.DEVNULL)
    plain = f"{SERIES}/plain/r3/{shard['path']}"
    bins = {"A": BIN_A, "B": BIN_B}
    caches = {k: f"{WORK}/files-{k}" for k in bins}
    for k, b in bins.items():
        shutil.rmtree(caches[k], ignore_errors=True)
        m = Mount(b, caches[k], 19300)
        try:
            root = f"{m.path}/{REPO}/r3"
            for f in r3["files"]:
                with open(f"{root}/{f['path']}", "rb") as fh:
                    while fh.read(1 << 20):
                        pass
            t = time.time()
            while entries_bytes(caches[k]) < want_bytes:
                assert time.time() - t < 600, "the file cache did not fill"
                time.sleep(0.2)
        finally:
            m.close()
    res = {"plain": [], "A": [], "B": []}
    checks = {}
    order = ["plain", "A", "B"]
    for r in range(ROUNDS):
        for k in order[r % 3:] + order[:r % 3]:
            drop_caches()
            if k == "plain":
                res[k].append(timed_read(plain))
                continue
            m = Mount(bins[k], caches[k], 19301)
            try:
                res[k].append(timed_read(f"{m.path}/{REPO}/r3/{shard['path']}"))
                checks[k] = m.checks()
                if r == ROUNDS - 1:
                    assert sha256(f"{m.path}/{REPO}/r3/{shard['path']}") == shard["sha256"], f"{k}: bytes differ"
            finally:
                m.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"second start: open + read (1 MiB) of {shard['path']} ({shard['size'] / 1e6:.0f} MB) through a new mount process, "
          f"node file cache full, page cache dropped; {ROUNDS} rounds, medians; load {load}")
    print("| plain MB/s | A MB/s | B MB/s | A / plain | B / plain | B / A | entry checks in the last mount (A, B) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {med['plain']:.0f} | {med['A']:.0f} | {med['B']:.0f} | {med['A'] / med['plain']:.2f} | "
          f"{med['B'] / med['plain']:.2f} | {med['B'] / med['A']:.2f} | {checks.get('A'):.0f}, {checks.get('B'):.0f} |")
    print("all MB/s:", {k: [round(x) for x in v] for k, v in res.items()})


if __name__ == "__main__":
    main()
