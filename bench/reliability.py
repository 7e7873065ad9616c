#!/usr/bin/env python3
"""Reliability figures of docs/RELIABILITY.md: kills and corruptions.

usage: reliability.py MODELCAS_BIN SERIES_DIR WORK_DIR [--kills N] [--corruptions N]
                      [--s3-env FILE] [--seed S]

Kills (per backend: the local directory, and S3 when --s3-env names the settings that
tests/garage.sh wrote): N SIGKILLs for each of ingest, import and gc, each at a crash step
(`MODELCAS_CRASH_AT_STEP`, repo/src/failpoint.rs: just before the k-th object-store
mutation), k drawn over the steps a full run makes. After every kill: `fsck` is clean and
every revision `ls` shows verifies; every fourth, the command is rerun and must complete.

Corruptions: N corruptions, each of a fresh copy of a local store holding the series: a bit
flip, a truncation or two swapped frames in a pack; a bit flip or truncation of a manifest or
a ref; or a bit flip or truncation of a bundle (then imported). With --s3-env, also of a node
cache filled by reading an S3 store: one entry flipped, truncated, or replaced by another
chunk's (valid) frame, read back by the readers that use the cache (all but export). Each
must be detected (`fsck --read-data` fails, the import is
refused, or the damaged cache entry is dropped once used), and the reader of that round
(cat, checkout, export + import, serve, mount; in turn) must return the right bytes or an
error, never wrong bytes.

Prints one JSON object with the counts; exits 1 if any check failed.
"""
import argparse, hashlib, json, os, random, shutil, signal, socket, subprocess, sys, time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("series")
ap.add_argument("work")
ap.add_argument("--kills", type=int, default=36, help="per command and backend")
ap.add_argument("--corruptions", type=int, default=1000)
ap.add_argument("--s3-env", help="the env file tests/garage.sh wrote")
ap.add_argument("--seed", type=int, default=1)
A = ap.parse_args()
EXP = json.load(open(f"{A.series}/expected.json"))
REPO = EXP["repo"] if "repo" in EXP else "demo-org/demo-llm"
CACHE_REPO = f"{A.series}/hub/models--{REPO.replace('/', '--')}"
rng = random.Random(A.seed)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, file=sys.stderr)


def s3_settings(path):
    env = {}
    for line in open(path):
        if line.startswith("export "):
            k, v = line[7:].strip().split("=", 1)
            env[k] = v
    return {
        "AWS_ACCESS_KEY_ID": env["MODELCAS_TEST_S3_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["MODELCAS_TEST_S3_SECRET"],
        "MODELCAS_ENDPOINT_URL": env["MODELCAS_TEST_S3_ENDPOINT"],
        "MODELCAS_REGION": env["MODELCAS_TEST_S3_REGION"],
    }, env["MODELCAS_TEST_S3_BUCKET"]


class Store:
    """One store (a local directory or an S3 prefix) with its own index and cache."""
    n = 0

    def __init__(self, backend):
        Store.n += 1
        self.dir = f"{A.work}/s{Store.n}"
        os.makedirs(self.dir, exist_ok=True)
        self.env = dict(os.environ, MODELCAS_INDEX=f"{self.dir}/index",
                        MODELCAS_CACHE_DIR=f"{self.dir}/cache")
        if backend == "local":
            self.env["MODELCAS_STORE"] = f"{self.dir}/store"
        else:
            settings, bucket = backend
            self.env.update(settings)
            self.env["MODELCAS_STORE"] = f"s3://{bucket}/rel-{os.getpid()}-{Store.n}"

    def run(self, *args, extra=None, check=False, timeout=600, stdout=subprocess.PIPE):
        env = dict(self.env, **(extra or {}))
        r = subprocess.run([A.bin, "-q", *args], env=env, stdout=stdout,
                           stderr=subprocess.PIPE, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{args}: {r.stderr.decode(errors='replace')}")
        return r

    def steps(self, *args):
        f = f"{self.dir}/steps"
        self.run(*args, extra={"MODELCAS_STEP_COUNT": f}, check=True)
        return int(open(f).read())

    def killed_at(self, k, *args):
        r = self.run(*args, extra={"MODELCAS_CRASH_AT_STEP": str(k)})
        return r.returncode == -signal.SIGKILL

    def consistent(self, what):
        r = self.run("fsck", "--json")
        if r.returncode != 0 and b"no modelcas store at" in r.stderr:
            return  # killed before the store's config was written: an empty store
        if r.returncode != 0:
            fail(f"{what}: fsck: {r.stdout.decode()[:400]} {r.stderr.decode()[:400]}")
        repos = json.loads(self.run("ls", "--json", check=True).stdout)["repos"]
        for repo in repos:
            info = json.loads(self.run("ls", repo["repo"], "--json", check=True).stdout)
            for c in info["commits"]:
                v = self.run("verify", f"{repo['repo']}@{c['commit']}")
                if v.returncode != 0:
                    fail(f"{what}: {repo['repo']}@{c['commit']} is visible and does not verify")

    def commits(self):
        out = self.run("ls", REPO, "--json")
        return [] if out.returncode else json.loads(out.stdout)["commits"]


def kill_points(total, n):
    return [rng.randint(1, total) for _ in range(n)]


def kills(backend, label):
    done = {"ingest": 0, "import": 0, "gc": 0}
    # A bundle of the whole series, for the import rounds.
    src = Store(backend)
    src.run("ingest", CACHE_REPO, check=True)
    bundle = f"{A.work}/series-{label}.mcb"
    src.run("export", f"{REPO}@main", *[f"{REPO}@{r['commit']}" for r in EXP["revisions"]],
            "-o", bundle, check=True)
    gc_args = ("gc", "--keep-last", "0", "--grace", "0s", "--rewrite-below", "1")

    def gc_ready():  # a store where gc has packs to condemn, rewrite and then delete
        s = Store(backend)
        s.run("ingest", CACHE_REPO, check=True)
        for r in EXP["revisions"][:-1]:
            s.run("rm", f"{REPO}@{r['commit']}", check=True)
        return s

    probe = {"ingest": Store(backend).steps("ingest", CACHE_REPO),
             "import": Store(backend).steps("import", bundle)}
    g = gc_ready()
    g1 = g.steps(*gc_args)
    probe["gc"] = g1 + g.steps(*gc_args)
    for what, total in probe.items():
        for i, k in enumerate(kill_points(total, A.kills)):
            if what == "gc":
                s = gc_ready()
                if k > g1:
                    s.run(*gc_args, check=True)
                hit = s.killed_at(k if k <= g1 else k - g1, *gc_args)
            else:
                s = Store(backend)
                args = ("ingest", CACHE_REPO) if what == "ingest" else ("import", bundle)
                hit = s.killed_at(k, *args)
            if not hit:
                continue  # the run made fewer mutations than the probe (it happens on S3)
            done[what] += 1
            s.consistent(f"{label} {what} killed at step {k}/{total}")
            if i % 4 == 0:
                rerun = gc_args if what == "gc" else args
                s.run(*rerun, check=True)
                if what == "gc":
                    s.run(*gc_args, check=True)
                s.consistent(f"{label} {what} rerun after a kill at {k}")
                want = 1 if what == "gc" else len(EXP["revisions"])
                if len(s.commits()) != want:
                    fail(f"{label} {what}: {len(s.commits())} revisions after the rerun, want {want}")
            shutil.rmtree(s.dir, ignore_errors=True)
    return done


# ---- corruptions ----

def files_of(rev):
    return [(f["path"], f["sha256"]) for f in rev["files"]]


def frames(pack):
    """(offset, length) of every frame of a pack, walking the frame headers."""
    flen = int.from_bytes(pack[-12:-8], "little")
    end = len(pack) - 12 - flen
    at, out = 16, []
    while at + 16 <= end:
        body = int.from_bytes(pack[at + 8:at + 12], "little")
        out.append((at, 16 + body))
        at += 16 + body
    return out


def corrupt_file(path, kind):
    b = bytearray(open(path, "rb").read())
    if kind == "flip":
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(len(b))]
    elif kind == "swap":
        fr = frames(bytes(b))
        if len(fr) < 2:
            return corrupt_file(path, "flip")
        (a, la), (c, lc) = sorted(rng.sample(fr, 2))
        b = b[:a] + b[c:c + lc] + b[a + la:c] + b[a:a + la] + b[c + lc:]
    open(path, "wb").write(bytes(b))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, what, limit=30):
    t = time.time()
    while not pred():
        if time.time() - t > limit:
            raise RuntimeError(f"{what} did not happen")
        time.sleep(0.05)


def read_back(s, reader):
    """Reads every file of every revision with `reader`; returns the number of files that
    came back with wrong bytes (an error is fine). Sets s.good to the number that came back
    byte-exact."""
    wrong = 0
    good = []

    def check(data, sha):
        ok = hashlib.sha256(data).hexdigest() == sha
        good.append(ok)
        return 0 if ok else 1
    revs = EXP["revisions"]
    if reader == "cat":
        for r in revs:
            for p, sha in files_of(r):
                out = s.run("cat", f"{REPO}@{r['commit']}", p)
                if out.returncode == 0:
                    wrong += check(out.stdout, sha)
    elif reader == "checkout":
        for r in revs:
            d = f"{s.dir}/co-{r['name']}"
            s.run("checkout", f"{REPO}@{r['commit']}", d)
            for p, sha in files_of(r):
                if os.path.isfile(f"{d}/{p}"):
                    wrong += check(open(f"{d}/{p}", "rb").read(), sha)
    elif reader == "export":
        out = f"{s.dir}/x.mcb"
        if s.run("export", *[f"{REPO}@{r['commit']}" for r in revs], "-o", out).returncode == 0:
            t = Store("local")
            if t.run("import", out).returncode == 0:
                for r in revs:
                    for p, sha in files_of(r):
                        o = t.run("cat", f"{REPO}@{r['commit']}", p)
                        if o.returncode == 0:
                            wrong += check(o.stdout, sha)
            shutil.rmtree(t.dir, ignore_errors=True)
    elif reader == "serve":
        port = free_port()
        p = subprocess.Popen([A.bin, "-q", "serve", "--listen", f"127.0.0.1:{port}"], env=s.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def up():
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    return True
                except OSError:
                    return p.poll() is not None
            wait_for(up, "serve listening")
            for r in revs:
                for path, sha in files_of(r):
                    url = f"http://127.0.0.1:{port}/{REPO}/resolve/{r['commit']}/{path}"
                    try:
                        with urllib.request.urlopen(url, timeout=30) as resp:
                            body = resp.read()
                        wrong += check(body, sha)
                    except Exception:
                        pass  # an error, not wrong bytes
        finally:
            p.kill()
            p.wait()
    elif reader == "mount":
        mnt = f"{s.dir}/mnt"
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.Popen([A.bin, "-q", "mount", mnt], env=s.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: os.path.isdir(f"{mnt}/{REPO}") or p.poll() is not None, "mount")
            for r in revs:
                for path, sha in files_of(r):
                    try:
                        data = open(f"{mnt}/{REPO}/{r['commit']}/{path}", "rb").read()
                        wrong += check(data, sha)
                    except OSError:
                        pass
        finally:
            subprocess.run([A.bin, "umount", mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    s.good = sum(good)
    return wrong


def cache_entries(d):
    """The node cache's entry files (named by a 64-hex chunk id) under directory d."""
    out = []
    for root, _, fs in os.walk(d):
        for f in fs:
            if len(f) == 64 and all(c in "0123456789abcdef" for c in f):
                out.append(os.path.relpath(f"{root}/{f}", d))
    return sorted(out)


def node_cache_store():
    """An S3 store holding the series, with a node cache filled by reading every file."""
    s = Store(s3_settings(A.s3_env))
    s.run("ingest", CACHE_REPO, check=True)
    if read_back(s, "cat"):
        raise RuntimeError("the pristine S3 store read back wrong bytes")
    s.entries = cache_entries(f"{s.dir}/cache")
    if not s.entries:
        raise RuntimeError("reading from S3 left no node-cache entries")
    return s


def node_cache_round(node, s, how, reader):
    """Damages one entry of a copy of `node`'s cache, reads everything back through
    `reader` with that cache: (detected, wrong files). Detected: the damaged entry is gone or
    replaced once read (the cache checks each entry's BLAKE3 when it uses it)."""
    s.env.update({k: v for k, v in node.env.items()
                  if k.startswith(("AWS_", "MODELCAS_ENDPOINT", "MODELCAS_REGION"))})
    s.env["MODELCAS_STORE"] = node.env["MODELCAS_STORE"]
    shutil.copytree(f"{node.dir}/cache", f"{s.dir}/cache")
    shutil.copytree(f"{node.dir}/index", f"{s.dir}/index")
    rel = rng.choice(node.entries)
    path = f"{s.dir}/cache/{rel}"
    if how == "other":  # a valid frame of another chunk under this chunk's name
        other = rng.choice([e for e in node.entries if e != rel])
        shutil.copy(f"{s.dir}/cache/{other}", path)
    else:
        corrupt_file(path, how)
    damaged = open(path, "rb").read()
    wrong = read_back(s, reader)
    detected = not os.path.exists(path) or open(path, "rb").read() != damaged
    total = sum(len(r["files"]) for r in EXP["revisions"])
    if s.good != total:  # the bucket is intact: a damaged cache must cost nothing but a GET
        fail(f"node-cache {how}: {reader} read {s.good} of {total} files byte-exact")
    return detected, wrong


def corruptions(n):
    pristine = Store("local")
    pristine.run("ingest", CACHE_REPO, check=True)
    root = f"{pristine.dir}/store"
    bundle = f"{A.work}/c.mcb"
    pristine.run("export", *[f"{REPO}@{r['commit']}" for r in EXP["revisions"]],
                 f"{REPO}@main", "-o", bundle, check=True)
    objs = {"pack": [], "manifest": [], "ref": []}
    for d, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(f"{d}/{f}", root)
            kind = ("pack" if rel.startswith("packs/") else "manifest" if "/manifests/" in rel
                    else "ref" if "/refs/" in rel else None)
            if kind:
                objs[kind].append(rel)
    plans = [("pack", "flip"), ("pack", "truncate"), ("pack", "swap"), ("manifest", "flip"),
             ("manifest", "truncate"), ("ref", "flip"), ("ref", "truncate"), ("bundle", "flip"),
             ("bundle", "truncate")]
    readers = ["cat", "checkout", "export", "serve", "mount"]
    node = node_cache_store() if A.s3_env else None
    if node:
        plans += [("node-cache", "flip"), ("node-cache", "truncate"), ("node-cache", "other")]
    stats = {"tried": 0, "detected": 0, "wrong_bytes": 0, "by_kind": {}}
    for i in range(n):
        target, how = plans[i % len(plans)]
        key = f"{target}-{how}"
        k = stats["by_kind"].setdefault(key, {"tried": 0, "detected": 0})
        s = Store("local")
        if target == "node-cache":
            # export reads runs of frames straight from the bucket, not through the cache
            cache_readers = [r for r in readers if r != "export"]
            reader = cache_readers[(i // len(plans)) % len(cache_readers)]
            detected, wrong = node_cache_round(node, s, how, reader)
            if not detected:
                fail(f"{key}: a damaged node-cache entry was used and kept ({reader})")
            if wrong:
                fail(f"{key}: {reader} returned {wrong} wrong files")
            stats["wrong_bytes"] += wrong
        elif target == "bundle":
            b = f"{s.dir}/b.mcb"
            shutil.copy(bundle, b)
            corrupt_file(b, how)
            r = s.run("import", b)
            detected = r.returncode != 0 and not s.commits()
            if r.returncode == 0:
                fail(f"corrupted bundle ({how}) imported")
        else:
            shutil.copytree(root, f"{s.dir}/store")
            rel = rng.choice(objs[target])
            corrupt_file(f"{s.dir}/store/{rel}", how)
            detected = s.run("fsck", "--read-data").returncode != 0
            if not detected:
                fail(f"{key} of {rel} not detected by fsck --read-data")
            wrong = read_back(s, readers[i % len(readers)])
            if wrong:
                fail(f"{key} of {rel}: {readers[i % len(readers)]} returned {wrong} wrong files")
            stats["wrong_bytes"] += wrong
        stats["tried"] += 1
        k["tried"] += 1
        if detected:
            stats["detected"] += 1
            k["detected"] += 1
        shutil.rmtree(s.dir, ignore_errors=True)
    return stats


def main():
    os.makedirs(A.work, exist_ok=True)
    t = time.time()
    report = {"kills": {"local": kills("local", "local")}}
    if A.s3_env:
        report["kills"]["s3"] = kills(s3_settings(A.s3_env), "s3")
    report["kills_total"] = sum(sum(v.values()) for v in report["kills"].values())
    report["corruptions"] = corruptions(A.corruptions)
    report["failures"] = len(failures)
    report["failure_examples"] = failures[:20]
    report["seconds"] = round(time.time() - t)
    print(json.dumps(report, indent=1))
    sys.exit(1 if failures else 0)


main()
