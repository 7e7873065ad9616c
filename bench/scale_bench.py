#!/usr/bin/env python3
"""Scale benchmarks of issue 15: a big series, many small files, and 1,000 revisions, each
against a baseline measured in the same invocation.

usage: scale_bench.py MODELCAS_BIN WORK_DIR PART [BIG_MIB] [ROUNDS]
  PART big    r1 and r2 of the generator's series at 512 MiB and at BIG_MIB (default 8192):
              ingest r1, ingest r2, checkout r2, a cold read of every file of r2 through a
              fresh mount, and a cold `cat` of the plain r2 (the disk's own rate); time per
              GiB at each size, the ratio big/512, peak RSS of ingest and of the mount.
              The 512 MiB rounds are split around the single big round (medians of ROUNDS).
              Both series are written by `gen_plain` below, which streams the generator's
              exact bytes (checked against gen_revisions.py's expected.json of the 512 MiB
              series) without holding the model in memory and writes the plain r1 and r2
              only: gen_revisions.py keeps all four revisions in memory (about 4x the size)
              and writes the hub layout beside the plain one (about 6.5x the size on disk).
  PART files  a hub cache of 50 repositories (gen_revisions.py, 1-4 MiB, four revisions each)
              and one repository of 20,000 files of 1-16 KiB: modelcas ingest against
              `borg create --compression zstd,3`, checkout against `borg extract`, and a cold
              walk-and-read of every file through a fresh mount against the plain directory.
  PART revs   one repository with 1,000 revisions (a 2.2 MiB model whose revisions differ in
              one small file) plus 3 other repositories, beside a store where the same
              repository has 10: `ls`, mount start, gc (expire all but the last 10; all but
              the last 1 in the 10-revision store) time and peak memory.
BENCH_HUB_REPOS, BENCH_SMALL_FILES and BENCH_REVS change the counts (for trying it out).
Needs root (drop_caches, mounts), /dev/fuse, borg and /usr/bin/time. Prints markdown tables;
raw figures go to WORK_DIR/scale_<part>.json.
"""
import hashlib, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import gen_revisions as G  # noqa: E402

# Run as a script, the arguments; imported (bench/ingest_ab.py uses the data generators and
# `timed`), the importer sets WORK.
ARGS = sys.argv[1:] if __name__ == "__main__" else ["", "", ""]
BIN, WORK, PART = ARGS[0], ARGS[1], ARGS[2]
BIG = int(ARGS[3]) if len(ARGS) > 3 else 8192
ROUNDS = int(ARGS[4]) if len(ARGS) > 4 else 3
GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen_revisions.py")
GIB = 2**30
# smaller counts for trying the script out; the figures in docs/BENCHMARKS.md use the defaults
N_REPOS = int(os.environ.get("BENCH_HUB_REPOS", 50))
N_FILES = int(os.environ.get("BENCH_SMALL_FILES", 20000))
N_REVS = int(os.environ.get("BENCH_REVS", 1000))


# ---------------------------------------------------------------- helpers

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def env(store):
    return dict(os.environ, MODELCAS_STORE=f"{store}/store", MODELCAS_INDEX=f"{store}/index",
                BORG_REPO=f"{store}/borg", BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes")


def timed(cmd, store, cwd=None, cold=True, out=False):
    """Seconds, peak RSS (MiB) and stdout of cmd; page cache dropped first when cold."""
    drop_caches() if cold else os.sync()
    tf = f"{WORK}/time.txt"
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tf] + cmd, cwd=cwd, env=env(store),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.decode()[-4000:]}")
    rss = int(open(tf).read().split()[-1]) / 1024
    return secs, rss, (p.stdout.decode() if out else None)


def mc(store, *args):
    return subprocess.run([BIN, "-q", *args], env=env(store), check=True, capture_output=True, text=True).stdout


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(l.split(" ")[4] == os.path.realpath(path) for l in f)


class Mount:
    """A fresh `modelcas mount` of store at path; t0 is when the process was started."""
    def __init__(self, store, path):
        self.path = path
        os.makedirs(path, exist_ok=True)
        # A first start on a node: an empty file cache of its own (one left by an earlier
        # round would make later rounds passthrough reads).
        self.files = tempfile.mkdtemp(prefix="files-", dir=os.path.dirname(path))
        e = dict(env(store), MODELCAS_FILE_CACHE=self.files)
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([BIN, "mount", path], env=e, stderr=subprocess.DEVNULL)
        while not mounted(path):
            if self.proc.poll() is not None or time.perf_counter() - self.t0 > 60:
                raise SystemExit("mount did not come up")
            time.sleep(0.005)
        self.up = time.perf_counter() - self.t0

    def rss_peak_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for l in f:
                if l.startswith("VmHWM:"):
                    return int(l.split()[1]) / 1024

    def close(self):
        rss = self.rss_peak_mib()
        self.proc.terminate()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.files, ignore_errors=True)
        return rss


def read_tree(root, follow=True):
    """Walk root and read every file whole (1 MiB reads): (files, bytes)."""
    n = nb = 0
    for dp, _, fs in os.walk(root, followlinks=follow):
        for name in fs:
            with open(os.path.join(dp, name), "rb", buffering=0) as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    nb += len(b)
            n += 1
    return n, nb


def sha256_tree(root):
    out = {}
    for dp, _, fs in os.walk(root):
        for name in fs:
            h = hashlib.sha256()
            with open(os.path.join(dp, name), "rb") as f:
                while True:
                    b = f.read(1 << 22)
                    if not b:
                        break
                    h.update(b)
            out[os.path.relpath(os.path.join(dp, name), root)] = h.hexdigest()
    return out


def free_gb():
    st = os.statvfs(WORK)
    return st.f_bavail * st.f_frsize / 1e9


def med(xs):
    return statistics.median(xs)


# ---------------------------------------------------------------- part 1: the big series

def model_spec(size_mib, layers=16):
    """vocab, hidden and tensor list exactly as gen_revisions.py picks them."""
    vocab = 32000 if size_mib >= 128 else 4096
    target = size_mib * 1024 * 1024 / 2
    hidden = 64
    while sum(int(np.prod(s)) for _, s in G.model_tensors(None, layers, hidden + 64, vocab)) <= target:
        hidden += 64
    return vocab, hidden, G.model_tensors(None, layers, hidden, vocab)


def shard_plan(spec, n_shards):
    """gen_revisions.shard's split, from sizes only: [(file name, [(name, shape, nbytes)])]."""
    sizes = [(n, s, int(np.prod(s)) * 2) for n, s in spec]
    total = sum(b for _, _, b in sizes)
    files, cur, cur_bytes, limit = [], [], 0, total / n_shards
    for item in sizes:
        if cur and cur_bytes + item[2] / 2 > limit and len(files) < n_shards - 1:
            files.append(cur); cur, cur_bytes = [], 0
        cur.append(item); cur_bytes += item[2]
    files.append(cur)
    return [(f"model-{i + 1:05d}-of-{len(files):05d}.safetensors", items) for i, items in enumerate(files)], total


def st_header(items):
    header, off = {}, 0
    for name, shape, n in items:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h


def write_hashed(path, chunks):
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for c in chunks:
            f.write(c); h.update(c)
    return h.hexdigest()


def gen_plain(out, size_mib, seed=0, layers=16):
    """The generator's r1 and r2 (plain layout) streamed tensor by tensor: the same rng draws
    in the same order (every base tensor in model order, then every tuned one), so the same
    bytes. r2 is r1 with the tuned tensors replaced: same shapes, same shards, same offsets.
    Returns {rev: {path: sha256}} and {rev: bytes}."""
    rng = np.random.default_rng(seed)
    vocab, hidden, spec = model_spec(size_mib, layers)
    first_tuned = layers - layers // 4
    tuned = {n for n, _ in spec if n == "lm_head.weight"
             or any(n.startswith(f"model.layers.{i}.") for i in range(first_tuned, layers))}
    shards, total = shard_plan(spec, 4)
    texts = G.text_files(np.random.default_rng(seed + 1), layers, hidden, vocab, 0.7)
    weight_map = {name: fname for fname, items in shards for name, _, _ in items}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    small = {**texts, "model.safetensors.index.json": (json.dumps(index, indent=2) + "\n").encode()}
    sums, sizes = {}, {}
    for rev in ("r1", "r2"):
        d = f"{out}/plain/{rev}"
        os.makedirs(d, exist_ok=True)
        sums[rev] = {p: write_hashed(f"{d}/{p}", [data]) for p, data in small.items()}
        for fname, items in shards:
            hdr = st_header(items)
            if rev == "r1":
                body = (G.bf16(rng, shape).tobytes() for _, shape, _ in items)
            else:
                body = r2_body(f"{out}/plain/r1/{fname}", len(hdr), items, tuned, rng)
            sums[rev][fname] = write_hashed(f"{d}/{fname}", [hdr, *body])
        sizes[rev] = sum(os.path.getsize(f"{d}/{p}") for p in sums[rev])
    return sums, sizes


def r2_body(r1_path, hdr_len, items, tuned, rng):
    with open(r1_path, "rb") as f:
        f.seek(hdr_len)
        for name, shape, n in items:
            if name in tuned:
                f.seek(n, 1)
                yield G.bf16(rng, shape).tobytes()
            else:
                yield f.read(n)


def check_against_generator(sums):
    """The streamed 512 MiB series must be gen_revisions.py's (its cached expected.json)."""
    ref = os.path.expanduser("~/.cache/modelcas/bench-series-512/expected.json")
    if not os.path.exists(ref):
        return "not checked (no cached 512 MiB series)"
    exp = {r["name"]: {f["path"]: f["sha256"] for f in r["files"]} for r in json.load(open(ref))["revisions"]}
    for rev in sums:
        if exp[rev] != sums[rev]:
            raise SystemExit(f"streamed {rev} differs from gen_revisions.py's")
    return "r1 and r2 identical (sha256) to gen_revisions.py's"


def ingest(d, st, rev):
    """Seconds, peak RSS (MiB) and JSON report of ingesting plain/rev of d into store st."""
    secs, rss, rep = timed([BIN, "-q", "ingest", f"{d}/plain/{rev}", "--repo", "demo-org/demo-llm",
                            "--revision", hashlib.sha1(rev.encode()).hexdigest(), "--ref", rev, "--json"], st, out=True)
    return secs, rss, json.loads(rep)


def checkout(d, st, sums):
    co = f"{d}/co"
    shutil.rmtree(co, ignore_errors=True)
    secs, rss, _ = timed([BIN, "-q", "checkout", "demo-org/demo-llm@r2", co], st)
    if sums is not None and sha256_tree(co) != sums["r2"]:
        raise SystemExit("checkout of r2 differs from what was ingested")
    shutil.rmtree(co)
    return secs, rss


def mount_read(d, st, nbytes):
    m = Mount(st, f"{d}/mnt")
    try:
        drop_caches()
        t = time.perf_counter()
        _, nb = read_tree(f"{d}/mnt/demo-org/demo-llm/r2")
        secs = time.perf_counter() - t
    finally:
        rss = m.close()
    if nb != nbytes:
        raise SystemExit(f"read {nb} bytes through the mount, expected {nbytes}")
    return secs, rss


def interleaved(small, big, before):
    """small() `before` times, big() once, small() for the rest of ROUNDS: (smalls, big)."""
    a = [small(i) for i in range(before)]
    b = big()
    return a + [small(i) for i in range(before, ROUNDS)], b


def part_big():
    need = 3.2 * BIG * 2**20 / 1e9 + 3
    if free_gb() - need < 15:
        raise SystemExit(f"{BIG} MiB needs about {need:.0f} GB and {free_gb():.0f} GB are free (15 GB must stay free)")
    sd, bd = f"{WORK}/big-512", f"{WORK}/big-{BIG}"
    t = time.perf_counter()
    sums_s, sizes_s = gen_plain(sd, 512)
    check = check_against_generator(sums_s)
    t_s = time.perf_counter() - t
    t = time.perf_counter()
    sums_b, sizes_b = gen_plain(bd, BIG)
    t_b = time.perf_counter() - t
    stores = [f"{sd}/st{i}" for i in range(ROUNDS)]
    for st in stores + [f"{bd}/st"]:
        os.makedirs(st)
    before = (ROUNDS + 1) // 2
    small, big = {}, {}
    # ingest: one fresh store per 512 MiB round, the big series once
    for rev in ("r1", "r2"):
        small[rev], big[rev] = interleaved(lambda i: ingest(sd, stores[i], rev), lambda: ingest(bd, f"{bd}/st", rev), before)
    shutil.rmtree(f"{bd}/plain/r1")
    stored_s = json.loads(mc(stores[0], "stats", "--json"))["stored_bytes"]
    stored_b = json.loads(mc(f"{bd}/st", "stats", "--json"))["stored_bytes"]
    # reads: ROUNDS rounds at both sizes, alternated
    cat = lambda d: timed(["sh", "-c", f"cat '{d}/plain/r2'/* >/dev/null"], f"{d}/st")[:2]
    for k, fs, fb in [("cat", lambda i: cat(sd), lambda: cat(bd)),
                      ("checkout", lambda i: checkout(sd, stores[i], sums_s if i == 0 else None),
                       lambda: checkout(bd, f"{bd}/st", sums_b if not big["checkout"] else None)),
                      ("mount", lambda i: mount_read(sd, stores[i], sizes_s["r2"]), lambda: mount_read(bd, f"{bd}/st", sizes_b["r2"]))]:
        small[k], big[k] = [], []
        for i in range(ROUNDS):
            small[k].append(fs(i))
            big[k].append(fb())
        if k == "cat":
            shutil.rmtree(f"{bd}/plain/r2")  # the checkout is checked against the sha256 sums
    shutil.rmtree(sd); shutil.rmtree(bd)
    res = {"check": check, "gen_secs": [t_s, t_b], "sizes": [sizes_s, sizes_b], "stored": [stored_s, stored_b],
           "small": small, "big": big}
    json.dump(res, open(f"{WORK}/scale_big.json", "w"), indent=1)
    print(f"series r1+r2 streamed by scale_bench.gen_plain ({check}); r1 {sizes_s['r1'] / GIB:.3f} GiB and "
          f"{sizes_b['r1'] / GIB:.3f} GiB; ingest: 512 MiB median of {ROUNDS} fresh stores ({before} before the big "
          f"one, the rest after), {BIG} MiB once; reads: medians of {ROUNDS} rounds, sizes alternated; page cache "
          "dropped before every step")
    print(f"| step | 512 MiB: s per GiB | {BIG} MiB: s per GiB | big / 512 |")
    print("|---|---|---|---|")
    ratios = {}
    for k, label, rev in [("cat", "cold `cat` of the plain r2 (the disk)", "r2"), ("r1", "ingest r1", "r1"),
                          ("r2", "ingest r2 (after r1)", "r2"), ("checkout", "checkout r2, cold", "r2"),
                          ("mount", "cold read of every file of r2 through a fresh mount", "r2")]:
        a = med(x[0] for x in small[k]) / (sizes_s[rev] / GIB)
        b = (big[k][0] if k in ("r1", "r2") else med(x[0] for x in big[k])) / (sizes_b[rev] / GIB)
        ratios[k] = b / a
        print(f"| {label} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    print()
    print(f"| peak RSS (MiB) | 512 MiB | {BIG} MiB | big / 512 |")
    print("|---|---|---|---|")
    for k, label in [("r1", "ingest r1"), ("r2", "ingest r2"), ("checkout", "checkout r2"),
                     ("mount", "mount (VmHWM after reading r2)")]:
        a = max(x[1] for x in small[k])
        b = big[k][1] if k in ("r1", "r2") else max(x[1] for x in big[k])
        print(f"| {label} | {a:.0f} | {b:.0f} | {b / a:.2f} |")
    print(f"\nstored bytes after r1+r2: {stored_s / GIB:.3f} GiB and {stored_b / GIB:.3f} GiB; "
          f"generation took {t_s:.0f} s and {t_b:.0f} s")


# ---------------------------------------------------------------- part 2: many small files

def make_hub(d, repos=N_REPOS):
    """A hub cache of `repos` repositories (four revisions each, 1-4 MiB); {repo: [commits]}."""
    hub = f"{d}/hub"
    os.makedirs(hub, exist_ok=True)
    commits = {}
    for i in range(repos):
        repo = f"org{i % 7}/model-{i}"
        tmp = f"{d}/gen-{i}"
        subprocess.run([sys.executable, GEN, tmp, "--size-mib", str(1 + i % 4), "--seed", str(100 + i),
                        "--repo", repo, "--layers", "4"], check=True, stdout=subprocess.DEVNULL)
        exp = json.load(open(f"{tmp}/expected.json"))
        commits[repo] = [r["commit"] for r in exp["revisions"]]
        for name in os.listdir(f"{tmp}/hub"):
            os.rename(f"{tmp}/hub/{name}", f"{hub}/{name}")
        shutil.rmtree(tmp)
    return hub, commits


def make_small_files(d, n=N_FILES, seed=7):
    """n files of 1-16 KiB of random bytes in 20 x 5 nested directories."""
    root = f"{d}/small"
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1024, 16 * 1024 + 1, size=n)
    for i, sz in enumerate(sizes):
        sub = f"{root}/part-{i % 20:02d}/group-{i // 20 % 5}"
        if i < 100:
            os.makedirs(sub, exist_ok=True)
        with open(f"{sub}/file-{i:05d}.bin", "wb") as f:
            f.write(rng.bytes(int(sz)))
    return root, int(sizes.sum())


def files_round(d, hub, commits, small):
    st = f"{d}/st"
    shutil.rmtree(st, ignore_errors=True)
    os.makedirs(st)
    res = {}
    rev = "5" * 40
    res["mc_ingest_hub"], res["mc_ingest_hub_rss"], _ = timed([BIN, "-q", "ingest", hub], st)
    res["mc_ingest_small"], res["mc_ingest_small_rss"], _ = timed(
        [BIN, "-q", "ingest", small, "--repo", "bench/small-files", "--revision", rev], st)
    subprocess.run(["borg", "init", "--encryption=none"], env=env(st), check=True)
    res["borg_create_hub"], _, _ = timed(["borg", "create", "--compression", "zstd,3", "::hub", "."], st, cwd=hub)
    res["borg_create_small"], _, _ = timed(["borg", "create", "--compression", "zstd,3", "::small", "."], st, cwd=small)
    co = f"{d}/co"
    res["mc_checkout"], res["mc_checkout_rss"], _ = timed([BIN, "-q", "checkout", f"bench/small-files@{rev}", co], st)
    shutil.rmtree(co)
    os.makedirs(co)
    res["borg_extract"], _, _ = timed(["borg", "extract", "::small"], st, cwd=co)
    shutil.rmtree(co)
    drop_caches()
    t = time.perf_counter(); res["plain_walk_files"] = read_tree(small); res["plain_walk"] = time.perf_counter() - t
    hub_dirs = [f"{hub}/models--{r.replace('/', '--')}/snapshots/{c}" for r, cs in commits.items() for c in cs]
    drop_caches()
    t = time.perf_counter(); res["plain_hub_files"] = [sum(x) for x in zip(*map(read_tree, hub_dirs))]
    res["plain_hub"] = time.perf_counter() - t
    m = Mount(st, f"{d}/mnt")
    try:
        drop_caches()
        t = time.perf_counter()
        res["mount_walk_files"] = read_tree(f"{d}/mnt/bench/small-files/{rev}")
        res["mount_walk"] = time.perf_counter() - t
    finally:
        res["mount_rss"] = m.close()
    m = Mount(st, f"{d}/mnt")
    try:
        drop_caches()
        t = time.perf_counter()
        res["mount_hub_files"] = [sum(x) for x in zip(*(read_tree(f"{d}/mnt/{r}/{c}") for r, cs in commits.items() for c in cs))]
        res["mount_hub"] = time.perf_counter() - t
    finally:
        res["mount_hub_rss"] = m.close()
    assert res["mount_walk_files"] == res["plain_walk_files"], (res["mount_walk_files"], res["plain_walk_files"])
    assert res["mount_hub_files"] == res["plain_hub_files"], (res["mount_hub_files"], res["plain_hub_files"])
    shutil.rmtree(st)
    return res


def part_files():
    d = f"{WORK}/files"
    os.makedirs(d, exist_ok=True)
    hub, commits = make_hub(d)
    small, small_bytes = make_small_files(d)
    hub_links = sum(len(fs) for dp, _, fs in os.walk(hub) if "/snapshots/" in dp)
    hub_blobs = sum(len(os.listdir(f"{hub}/{m}/blobs")) for m in os.listdir(hub))
    hub_bytes = sum(os.path.getsize(f"{hub}/{m}/blobs/{b}") for m in os.listdir(hub) for b in os.listdir(f"{hub}/{m}/blobs"))
    rounds = [files_round(d, hub, commits, small) for _ in range(ROUNDS)]
    shutil.rmtree(d)
    m = {k: med(r[k] for r in rounds) for k in rounds[0] if not k.endswith("_files")}
    json.dump({"rounds": rounds, "hub_links": hub_links, "hub_blobs": hub_blobs, "hub_bytes": hub_bytes,
               "small_bytes": small_bytes}, open(f"{WORK}/scale_files.json", "w"), indent=1)
    n = N_FILES
    us = lambda s, k: s / k * 1e6
    print(f"hub cache: {N_REPOS} repositories, {sum(map(len, commits.values()))} revisions, {hub_links} snapshot files, "
          f"{hub_blobs} blobs, {hub_bytes / 2**20:.0f} MiB of blobs; small files: {n} files of 1-16 KiB in 100 directories, "
          f"{small_bytes / 2**20:.0f} MiB; medians of {ROUNDS} rounds, page cache dropped before every step")
    print("| step | modelcas | baseline | per file: modelcas / baseline (µs) | speed: modelcas vs baseline |")
    print("|---|---|---|---|---|")
    for label, a, b, k in [("ingest hub cache vs `borg create` (per snapshot file)", "mc_ingest_hub", "borg_create_hub", hub_links),
                           (f"ingest {n} files vs `borg create`", "mc_ingest_small", "borg_create_small", n),
                           (f"checkout {n} files vs `borg extract`", "mc_checkout", "borg_extract", n),
                           (f"walk-and-read {n} files: mount vs plain dir", "mount_walk", "plain_walk", n),
                           ("walk-and-read every revision of the hub cache: mount vs plain (via snapshots/)", "mount_hub", "plain_hub", hub_links)]:
        print(f"| {label} | {m[a]:.2f} s | {m[b]:.2f} s | {us(m[a], k):.0f} / {us(m[b], k):.0f} | {m[b] / m[a]:.2f}x |")
    print(f"\npeak RSS: ingest hub {max(r['mc_ingest_hub_rss'] for r in rounds):.0f} MiB, ingest small files "
          f"{max(r['mc_ingest_small_rss'] for r in rounds):.0f} MiB, checkout {max(r['mc_checkout_rss'] for r in rounds):.0f} MiB, "
          f"mount {max(max(r['mount_rss'], r['mount_hub_rss']) for r in rounds):.0f} MiB")


# ---------------------------------------------------------------- part 3: 1,000 revisions

REPO = "bench/many-revs"


def build_revs_store(d, base, others, n):
    """A store with REPO at n revisions (base + a step.json that differs) and the others."""
    st = f"{d}/st-{n}"
    shutil.rmtree(st, ignore_errors=True)
    os.makedirs(st)
    for i, o in enumerate(others):
        mc(st, "ingest", o, "--repo", f"bench/other-{i}", "--revision", hashlib.sha1(f"other{i}".encode()).hexdigest(), "--ref", "main")
    work = f"{d}/rev-dir"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    times, commits = [], []
    for i in range(n):
        with open(f"{work}/step.json", "w") as f:
            json.dump({"step": i * 100, "loss": 2.0 / (1 + i)}, f)
        c = hashlib.sha1(f"rev{i}".encode()).hexdigest()
        t = time.perf_counter()
        mc(st, "ingest", work, "--repo", REPO, "--revision", c, "--ref", "main")
        times.append(time.perf_counter() - t)
        commits.append(c)
    shutil.rmtree(work)
    return st, times, commits


def mount_start(st, d, newest):
    """Seconds from starting a mount (page cache dropped) until it is mounted, until the
    repository's directory lists, and until a file of the newest revision reads."""
    drop_caches()
    m = Mount(st, f"{d}/mnt")
    try:
        listing = os.listdir(f"{d}/mnt/{REPO}")
        t_list = time.perf_counter() - m.t0
        with open(f"{d}/mnt/{REPO}/{newest}/config.json", "rb") as f:
            f.read()
        t_read = time.perf_counter() - m.t0
    finally:
        rss = m.close()
    return m.up, t_list, t_read, len(listing), rss


def part_revs():
    d = f"{WORK}/revs"
    os.makedirs(d, exist_ok=True)
    subprocess.run([sys.executable, GEN, f"{d}/series", "--size-mib", "4"], check=True, stdout=subprocess.DEVNULL)
    others = []
    for i in range(3):
        subprocess.run([sys.executable, GEN, f"{d}/other-{i}", "--size-mib", "4", "--seed", str(10 + i)],
                       check=True, stdout=subprocess.DEVNULL)
        others.append(f"{d}/other-{i}/plain/r1")
    base = f"{d}/series/plain/r1"
    res = {}
    for n in (10, N_REVS):
        st, times, commits = build_revs_store(d, base, others, n)
        r = {"ingest_first10": med(times[:10]), "ingest_last10": med(times[-10:])}
        r["ls_all"] = med(timed([BIN, "-q", "ls"], st, cold=False)[0] for _ in range(5))
        r["ls_repo"] = med(timed([BIN, "-q", "ls", REPO], st, cold=False)[0] for _ in range(5))
        r["ls_all_cold"] = med(timed([BIN, "-q", "ls"], st)[0] for _ in range(3))
        r["ls_repo_cold"] = med(timed([BIN, "-q", "ls", REPO], st)[0] for _ in range(3))
        starts = [mount_start(st, d, commits[-1]) for _ in range(ROUNDS)]
        r["mount_up"], r["mount_list"], r["mount_read"] = (med(s[i] for s in starts) for i in range(3))
        r["mount_entries"], r["mount_rss"] = starts[0][3], max(s[4] for s in starts)
        r["gc_noop"], r["gc_noop_rss"], _ = timed([BIN, "-q", "gc", "--grace", "0s", "--json"], st)
        keep = "1" if n == 10 else "10"
        r["gc_expire"], r["gc_expire_rss"], rep = timed([BIN, "-q", "gc", "--keep-last", keep, "--grace", "0s", "--json"], st, out=True)
        r["gc_expire_report"] = json.loads(rep)
        r["gc_delete"], r["gc_delete_rss"], rep = timed([BIN, "-q", "gc", "--keep-last", keep, "--grace", "0s", "--json"], st, out=True)
        r["gc_delete_report"] = json.loads(rep)
        r["left"] = len([l for l in mc(st, "ls", REPO).splitlines() if l.strip()])
        res[n] = r
        shutil.rmtree(st)
    shutil.rmtree(d)
    json.dump(res, open(f"{WORK}/scale_revs.json", "w"), indent=1)
    a, b = res[10], res[N_REVS]
    print(f"{REPO}: a 2.2 MiB model (gen_revisions.py --size-mib 4, r1) whose revisions differ in step.json, plus 3 other repositories of one revision; "
          f"stores of 10 and {N_REVS} revisions of {REPO}; ls: medians of 5 warm / 3 cold runs; mount: medians of {ROUNDS} "
          "fresh mounts (page cache dropped); gc once (the big store is built once)")
    print(f"| step | 10 revisions | {N_REVS} revisions | {N_REVS} / 10 (time) | per revision: {N_REVS} / 10 |")
    print("|---|---|---|---|---|")
    for k, label in [("ingest_first10", "ingest of one revision (median of the first 10)"),
                     ("ingest_last10", "ingest of one revision (median of the last 10)"),
                     ("ls_all", "`modelcas ls` (everything), warm"), ("ls_all_cold", "`modelcas ls`, cold"),
                     ("ls_repo", f"`modelcas ls {REPO}`, warm"), ("ls_repo_cold", f"`modelcas ls {REPO}`, cold"),
                     ("mount_up", "mount: until mounted"), ("mount_list", "mount: until the repository lists"),
                     ("mount_read", "mount: until config.json of the newest revision reads"),
                     ("gc_noop", "gc, nothing to expire"), ("gc_expire", "gc expiring all but the last 10 (10-store: last 1)"),
                     ("gc_delete", "next gc (deletes what the previous condemned; grace 0)")]:
        print(f"| {label} | {a[k] * 1000:.0f} ms | {b[k] * 1000:.0f} ms | {b[k] / a[k]:.2f} | {b[k] / a[k] / (N_REVS / 10):.4f} |")
    print()
    print(f"| peak RSS (MiB) | 10 revisions | {N_REVS} revisions |")
    print("|---|---|---|")
    for k, label in [("gc_noop_rss", "gc, nothing to expire"), ("gc_expire_rss", "gc expiring"),
                     ("gc_delete_rss", "gc deleting"), ("mount_rss", "mount (after the start steps)")]:
        print(f"| {label} | {a[k]:.0f} | {b[k]:.0f} |")
    print(f"\nrevisions of {REPO} after gc: {a['left']} and {b['left']} (ls lines); entries the mount listed in "
          f"{REPO}/: {a['mount_entries']} and {b['mount_entries']}")


if __name__ == "__main__":
    {"big": part_big, "files": part_files, "revs": part_revs}[PART]()
