#!/usr/bin/env python3
"""Readers through `modelcas mount` while its FUSE server is replaced (issue 38).

usage: takeover_bench.py BIN SERIES_DIR WORK_DIR [KILLS]

Four readers, one per revision r1..r4, read every file of their revision in 1 MiB reads
over and over (each file's pages dropped first, so reads reach the server) and check each
file's sha256. Every 2 s the server is replaced: KILLS times by SIGKILL, then 5 times by
SIGHUP to the mount (the upgrade path: the binary on disk started again). For each change,
the pause is the longest any read in flight at the change took; the baseline is the
longest read in the 1 s windows before each change (no change in flight). Also: the time
from the kill until a new server process exists, and from then until the first read
completes. Prints one table; any wrong byte or read error fails the run (exit 1).
"""
import hashlib, json, os, signal, statistics, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_common import children  # noqa: E402

BIN, SERIES, WORK = sys.argv[1:4]
KILLS = int(sys.argv[4]) if len(sys.argv) > 4 else 20
REPO = "demo-org/demo-llm"
ENV = dict(os.environ, MODELCAS_STORE=f"{WORK}/store", MODELCAS_INDEX=f"{WORK}/index",
           MODELCAS_FILE_CACHE=f"{WORK}/files")


def mounted(path):
    return any(l.split()[4] == path for l in open("/proc/self/mountinfo"))


def main():
    exp = json.load(open(f"{SERIES}/expected.json"))
    revs = {r["name"]: r for r in exp["revisions"]}
    for name in ["r1", "r2", "r3", "r4"]:
        subprocess.run([BIN, "-q", "ingest", f"{SERIES}/plain/{name}", "--repo", REPO,
                        "--revision", revs[name]["commit"], "--ref", name],
                       env=ENV, check=True, stdout=subprocess.DEVNULL)
    mnt = f"{WORK}/mnt"
    os.makedirs(mnt)
    proc = subprocess.Popen([BIN, "mount", mnt], env=ENV, stderr=subprocess.DEVNULL)
    while not mounted(mnt):
        time.sleep(0.01)
    os.stat(mnt)
    reads, errors, stop, lock = [], [], threading.Event(), threading.Lock()

    def reader(name):
        files = [(f["path"], f["sha256"]) for f in revs[name]["files"]]
        while not stop.is_set():
            for rel, sha in files:
                try:
                    with open(f"{mnt}/{REPO}/{name}/{rel}", "rb") as f:
                        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                        h = hashlib.sha256()
                        while True:
                            t = time.monotonic()
                            b = f.read(1 << 20)
                            with lock:
                                reads.append((t, time.monotonic()))
                            if not b:
                                break
                            h.update(b)
                    if h.hexdigest() != sha:
                        errors.append(f"{name}/{rel}: wrong bytes")
                except OSError as e:
                    errors.append(f"{name}/{rel}: {e}")
                if stop.is_set():
                    return

    threads = [threading.Thread(target=reader, args=(n,)) for n in ["r1", "r2", "r3", "r4"]]
    for t in threads:
        t.start()
    time.sleep(2)
    changes = []
    for i in range(KILLS + 5):
        server = children(proc.pid)[0]
        t = time.monotonic()
        if i < KILLS:
            os.kill(server, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGHUP)
        while not [c for c in children(proc.pid) if c != server]:
            time.sleep(0.001)
        changes.append(("kill" if i < KILLS else "sighup", t, time.monotonic()))
        time.sleep(2)
    stop.set()
    for t in threads:
        t.join()
    proc.terminate()
    proc.wait(timeout=30)

    def longest(a, b):
        return max([e - s for s, e in reads if s <= b and e >= a] or [0])

    rows = {}
    for kind, t, respawn in changes:
        # in flight at the change; first read done after the new server exists
        pause = longest(t, t)
        first = min([e for s, e in reads if e >= respawn] or [respawn]) - respawn
        base = longest(t - 1.0, t - 0.2)
        rows.setdefault(kind, []).append((pause, respawn - t, first, base))
    print(f"{len(reads)} reads, {len(errors)} errors, {KILLS} kills + 5 SIGHUPs; 4 readers")
    print(f"{'change':8} {'n':>3} {'pause med':>10} {'pause max':>10} {'respawn med':>12} "
          f"{'first read med':>15} {'baseline med':>13} {'baseline max':>13}")
    for kind, rs in rows.items():
        p = [r[0] for r in rs]
        print(f"{kind:8} {len(rs):3} {statistics.median(p)*1000:8.0f}ms {max(p)*1000:8.0f}ms "
              f"{statistics.median([r[1] for r in rs])*1000:10.0f}ms "
              f"{statistics.median([r[2] for r in rs])*1000:13.0f}ms "
              f"{statistics.median([r[3] for r in rs])*1000:11.0f}ms {max(r[3] for r in rs)*1000:11.0f}ms")
    for e in errors[:10]:
        print("ERROR", e)
    sys.exit(1 if errors else 0)


main()
