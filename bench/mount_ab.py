#!/usr/bin/env python3
"""Two builds of modelcas side by side on the mount's first cold start, in one invocation,
beside the plain directory: which change to the read path did what (issue 15).

usage: mount_ab.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS]

Rows, every one cold (page cache dropped, a fresh mount with an empty node file cache, so no
read is a passthrough read), plain / A / B alternating round by round (the load drifts),
medians of the rounds:
  dd        `dd bs=1M` of the largest shard of r3: MB/s, and the CPU seconds (user + system,
            all threads, /proc/PID/stat) the mount process spent on it
  mmap      a walk of that shard through a memory mapping, one byte a page: MB/s and mount CPU
  st        safe_open + get_tensor of every tensor of that shard in name order, the load of
            vLLM's default loader: MB/s and mount CPU
  walk      open and read every file of a repository of 20,000 files of 1-16 KiB in 100
            directories (made once, as bench/scale_bench.py makes it): seconds and mount CPU
  first     the first byte of config.json of r3, its directory listed first: ms
The walk also runs with B and the node file cache off (B0): what filling the file cache
with every small file read costs the first start.
Both builds read one store (made by B; the store format is the same). Needs root.
"""
import os, random, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_common import children, dd_read as dd, drop_caches, mmap_walk, mounted, st_walk  # noqa: E402

BIN_A, BIN_B, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 5
REPO, SMALL = "demo-org/demo-llm", "bench/small-files"
N_FILES = 20_000


def env(extra=None):
    return dict(os.environ, MODELCAS_STORE=f"{WORK}/store", MODELCAS_INDEX=f"{WORK}/index", **(extra or {}))


def cpu_s(pid):
    """utime + stime of every thread of pid and of its child processes (since issue 38 the
    mount's FUSE server is a child of the `modelcas mount` process), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_s(k) for k in children(pid))


class Mount:
    def __init__(self, binary, path, extra=None):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.files = tempfile.mkdtemp(prefix="files-", dir=WORK)
        e = env(dict({"MODELCAS_FILE_CACHE": self.files}, **(extra or {})))
        self.proc = subprocess.Popen([binary, "mount", path], env=e, stderr=subprocess.DEVNULL)
        t = time.time()
        while not mounted(path):
            assert self.proc.poll() is None and time.time() - t < 30, "mount did not come up"
            time.sleep(0.01)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.files, ignore_errors=True)


def walk(root):
    t = time.perf_counter()
    n = 0
    for dp, _, fs in os.walk(root):
        for name in fs:
            with open(os.path.join(dp, name), "rb", buffering=0) as f:
                n += len(f.read())
    assert n > 0
    return time.perf_counter() - t


def first_byte(path):
    os.listdir(os.path.dirname(path))
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        assert f.read(1)
    return (time.perf_counter() - t) * 1000


def make_small_files(d, n=N_FILES, seed=7):
    rng = random.Random(seed)
    for i in range(n):
        p = f"{d}/dir{i % 100:03d}/file{i:05d}.bin"
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(rng.randbytes(rng.randint(1024, 16384)))


def main():
    import json
    exp = json.load(open(f"{SERIES}/expected.json"))
    r3 = [r for r in exp["revisions"] if r["name"] == "r3"][0]
    shard = max((f for f in r3["files"] if f["path"].endswith(".safetensors")), key=lambda f: f["size"])["path"]
    small = f"{WORK}/small"
    make_small_files(small)
    for args in (["ingest", f"{SERIES}/plain/r3", "--repo", REPO, "--revision", r3["commit"], "--ref", "r3"],
                 ["ingest", small, "--repo", SMALL, "--ref", "main"]):
        subprocess.run([BIN_B, "-q", *args], check=True, env=env(), stdout=subprocess.DEVNULL)
    rows = {k: {"plain": [], "A": [], "B": [], "B0": []} for k in
            ["dd", "dd_cpu", "mmap", "mmap_cpu", "st", "st_cpu", "walk", "walk_cpu", "first"]}
    plain = f"{SERIES}/plain/r3"
    st = st_walk("name", f"{plain}/{shard}")
    for _ in range(ROUNDS):
        drop_caches(); rows["dd"]["plain"].append(dd(f"{plain}/{shard}"))
        drop_caches(); rows["mmap"]["plain"].append(mmap_walk(f"{plain}/{shard}"))
        drop_caches(); rows["st"]["plain"].append(st(f"{plain}/{shard}"))
        drop_caches(); rows["walk"]["plain"].append(walk(small))
        drop_caches(); rows["first"]["plain"].append(first_byte(f"{plain}/config.json"))
        # B0: B with the node file cache off (no background fills of the files read)
        for tag, binary, extra in (("A", BIN_A, {}), ("B", BIN_B, {}),
                                   ("B0", BIN_B, {"MODELCAS_FILE_CACHE_SIZE": "0"})):
            for row, fn, rel in (("dd", dd, f"{REPO}/r3/{shard}"), ("mmap", mmap_walk, f"{REPO}/r3/{shard}"),
                                 ("st", st, f"{REPO}/r3/{shard}"), ("walk", walk, f"{SMALL}/main"),
                                 ("first", first_byte, f"{REPO}/r3/config.json")):
                if tag == "B0" and row != "walk":
                    continue
                m = Mount(binary, f"{WORK}/mnt", extra)
                try:
                    if row == "first":
                        os.listdir(f"{WORK}/mnt/{REPO}/r3")
                    drop_caches()
                    c0 = cpu_s(m.proc.pid)
                    rows[row][tag].append(fn(f"{WORK}/mnt/{rel}"))
                    if row != "first":
                        rows[f"{row}_cpu"][tag].append(cpu_s(m.proc.pid) - c0)
                finally:
                    m.close()
    med = {k: {t: statistics.median(v) for t, v in r.items() if v} for k, r in rows.items()}
    print(f"A = {BIN_A}\nB = {BIN_B}\n{ROUNDS} rounds, medians; load average now {open('/proc/loadavg').read().split()[:3]}")
    print("| cold read | plain | A | B | A / plain | B / plain | B / A |\n|---|---|---|---|---|---|---|")
    d, w, f = med["dd"], med["walk"], med["first"]
    print(f"| dd bs=1M of {shard} (MB/s) | {d['plain']:.0f} | {d['A']:.0f} | {d['B']:.0f} | "
          f"{d['A']/d['plain']:.2f} | {d['B']/d['plain']:.2f} | {d['B']/d['A']:.2f} |")
    print(f"| mount CPU for that dd (s) | | {med['dd_cpu']['A']:.3f} | {med['dd_cpu']['B']:.3f} | | | {med['dd_cpu']['B']/med['dd_cpu']['A']:.2f} |")
    for row, label in (("mmap", "mmap page walk"), ("st", "safe_open + get_tensor, name order")):
        r = med[row]
        print(f"| {label} of that shard (MB/s) | {r['plain']:.0f} | {r['A']:.0f} | {r['B']:.0f} | "
              f"{r['A']/r['plain']:.2f} | {r['B']/r['plain']:.2f} | {r['B']/r['A']:.2f} |")
        c = med[f"{row}_cpu"]
        print(f"| mount CPU for that load (s) | | {c['A']:.3f} | {c['B']:.3f} | | | {c['B']/c['A']:.2f} |")
    print(f"| walk-and-read {N_FILES} files (s; ratio = plain time / time) | {w['plain']:.2f} | {w['A']:.2f} | {w['B']:.2f} | "
          f"{w['plain']/w['A']:.2f} | {w['plain']/w['B']:.2f} | {w['A']/w['B']:.2f} |")
    print(f"| mount CPU for that walk (s) | | {med['walk_cpu']['A']:.2f} | {med['walk_cpu']['B']:.2f} | | | {med['walk_cpu']['B']/med['walk_cpu']['A']:.2f} |")
    print(f"| the walk with B's file cache off (s; CPU s) | | | {w['B0']:.2f}; {med['walk_cpu']['B0']:.2f} | | "
          f"{w['plain']/w['B0']:.2f} | |")
    print(f"| first byte of config.json (ms) | {f['plain']:.2f} | {f['A']:.2f} | {f['B']:.2f} | | | |")


if __name__ == "__main__":
    main()
