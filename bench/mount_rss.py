#!/usr/bin/env python3
"""The mount's memory against the number of readers (issue 40): two builds side by side.

usage: mount_rss.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS]

For each reader count N in 1, 4, 16, 64 and each build (A and B alternating, ROUNDS rounds):
a fresh mount with an empty node file cache, the page cache dropped, then N threads read
the safetensors shards of r3 (1 MiB preads), the shards cut into at least N slices dealt
round-robin, so that every byte is read once; every slice's SHA-256 is compared with the
plain copy's. Reported per N and build: the median of the FUSE server's VmHWM (the mount's
child process since issue 38; /proc/PID/status), and the median seconds of the read.
The target (issue 40): under 160 MiB at any N. Needs root.
"""
import hashlib, json, os, shutil, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_common import children, drop_caches, mounted  # noqa: E402

BIN_A, BIN_B, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 3
REPO = "demo-org/demo-llm"
READERS = [1, 4, 16, 64]


def env(extra=None):
    return dict(os.environ, MODELCAS_STORE=f"{WORK}/store", MODELCAS_INDEX=f"{WORK}/index", **(extra or {}))


def server_of(holder):
    t = time.time()
    while not children(holder):
        assert time.time() - t < 30, "no FUSE server process"
        time.sleep(0.01)
    return children(holder)[0]


def hwm_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def slices(paths, n):
    per = -(-n // len(paths))
    out = []
    for p in paths:
        size = os.path.getsize(p)
        step = -(-size // per)
        out += [(p, k * step, min(size, (k + 1) * step)) for k in range(per) if k * step < size]
    jobs = [[] for _ in range(n)]
    for i, s in enumerate(out):
        jobs[i % n].append(s)
    return jobs


def digest(path, a, b):
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        off = a
        while off < b:
            d = os.pread(fd, min(1 << 20, b - off), off)
            assert d, f"{path}: short read at {off}"
            h.update(d)
            off += len(d)
    finally:
        os.close(fd)
    return h.hexdigest()


def one(binary, mnt, names, plain, n, want):
    files = tempfile.mkdtemp(prefix="files-", dir=WORK)
    holder = subprocess.Popen([binary, "mount", mnt], env=env({"MODELCAS_FILE_CACHE": files}),
                              stderr=subprocess.DEVNULL)
    try:
        t = time.time()
        while not mounted(mnt):
            assert holder.poll() is None and time.time() - t < 30, "mount did not come up"
            time.sleep(0.01)
        server = server_of(holder.pid)
        root = f"{mnt}/{REPO}/r3"
        os.listdir(root)
        drop_caches()
        jobs = slices([f"{root}/{n_}" for n_ in names], n)
        bad = []

        def reader(job):
            for p, a, b in job:
                if digest(p, a, b) != want[(os.path.basename(p), a, b)]:
                    bad.append((p, a, b))

        t = time.perf_counter()
        ts = [threading.Thread(target=reader, args=(j,)) for j in jobs]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        secs = time.perf_counter() - t
        assert not bad, f"bytes differ: {bad[:3]}"
        return hwm_mib(server), secs
    finally:
        holder.terminate()
        holder.wait(timeout=30)
        shutil.rmtree(files, ignore_errors=True)


def main():
    exp = json.load(open(f"{SERIES}/expected.json"))
    r3 = [r for r in exp["revisions"] if r["name"] == "r3"][0]
    names = sorted(f["path"] for f in r3["files"] if f["path"].endswith(".safetensors"))
    subprocess.run([BIN_B, "-q", "ingest", f"{SERIES}/plain/r3", "--repo", REPO, "--revision",
                    r3["commit"], "--ref", "r3"], check=True, env=env(), stdout=subprocess.DEVNULL)
    plain = f"{SERIES}/plain/r3"
    want = {}
    for n in READERS:
        for job in slices([f"{plain}/{x}" for x in names], n):
            for p, a, b in job:
                want[(os.path.basename(p), a, b)] = digest(p, a, b)
    mnt = f"{WORK}/mnt"
    os.makedirs(mnt, exist_ok=True)
    res = {(n, b): [] for n in READERS for b in "AB"}
    for r in range(ROUNDS):
        for n in READERS:
            for b in ("AB" if r % 2 == 0 else "BA"):
                res[(n, b)].append(one(BIN_A if b == "A" else BIN_B, mnt, names, plain, n, want))
    total = sum(os.path.getsize(f"{plain}/{x}") for x in names)
    print(f"r3 shards: {len(names)} files, {total / 1e6:.0f} MB; {ROUNDS} rounds, medians")
    print("| readers | A VmHWM MiB | B VmHWM MiB | A read s | B read s | B / A time |")
    print("|---|---|---|---|---|---|")
    for n in READERS:
        med = lambda b, i: statistics.median(x[i] for x in res[(n, b)])
        print(f"| {n} | {med('A', 0):.1f} | {med('B', 0):.1f} | {med('A', 1):.2f} | {med('B', 1):.2f} "
              f"| {med('B', 1) / med('A', 1):.2f} |")
    print("all VmHWM (A, B):", {f"{n}{b}": [round(x[0]) for x in res[(n, b)]] for n in READERS for b in "AB"})


if __name__ == "__main__":
    main()
