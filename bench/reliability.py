#!/usr/bin/env python3
"""Reliability figures of docs/RELIABILITY.md: kills, power losses and corruptions.

usage: reliability.py MODELCAS_BIN SERIES_DIR WORK_DIR [--kills N] [--power-loss N]
                      [--corruptions N] [--issue36 N] [--hub N] [--release N]
                      [--only issue36|hub|release|corruptions] [--s3-env FILE] [--seed S]

Kills (per backend: the local directory, and S3 when --s3-env names the settings that
tests/garage.sh wrote): N SIGKILLs for each command of the kill matrix (ingest, import, gc,
pull, sync, serve --upstream, an ingest that takes unchanged files unread, and a pull that
completes a commit an earlier `pull --include` stored partial), each at a
crash step (`MODELCAS_CRASH_AT_STEP`, repo/src/failpoint.rs: just before the k-th
object-store mutation), k drawn over the steps a full run makes. pull, sync and serve
--upstream read from an upstream that is a second `modelcas serve` over a pristine store.
After every kill: `fsck` is clean and every revision `ls` shows verifies; every fourth, the
command is rerun and must complete with the right content.

Power losses (--power-loss N, local store, root): the same commands, N each, with the
store, its index and caches (and the source directory of the unchanged-file ingest) on an
ext4 on a loop device; at step k the command shuts that file system down without flushing
its log (`MODELCAS_CRASH_SHUTDOWN`) and is killed. The file system is unmounted, mounted
again (the journal replayed) and must pass `e2fsck -fn`; then `fsck` and every visible
revision are checked as after a kill, and every second time the command is rerun and must
complete. Also N rounds of the source's power loss: a file ingest has stamped is
overwritten in place and fdatasync'ed (its data durable, its new times not), the file
system shut down and remounted; the next ingest must publish the bytes the file now holds.

Corruptions: N corruptions, each of a fresh copy of a local store holding the series: a bit
flip, a truncation or two swapped frames in a pack; a bit flip or truncation of a manifest or
a ref; a bit flip or truncation of a bundle (then imported); an entry of the node file cache
(whole files the mount keeps; a bit flip, a truncation, or another file's entry under its
name) read back by the mount with and without passthrough; the same cache filled in place,
so that its check records are believed (issue 40), with an entry flipped or truncated in
place, its record flipped, or another entry's record put in its place; a file of the local index
(RocksDB: a bit flip or a truncation) read back by every reader and by a new ingest; the
record of the last gc run (runs/gc: a bit flip or a truncation): serve's store page still
answers, nothing is lost, the next gc succeeds and leaves a readable record. With --s3-env,
also of a node chunk cache filled by reading an S3 store: one entry flipped, truncated, or
replaced by another chunk's (valid) frame, read back by the readers that use the cache (all
but export). Each store corruption must be detected (`fsck --read-data` fails, the import is
refused); a damaged cache entry must be dropped or replaced once used and cost no failed
read; a damaged index may fail a command but never a read once `index rebuild` ran. The
reader of each round (cat, checkout, export + import, serve, the mount, and Xet through a
client written here, in turn) must return the right bytes or an error, never wrong bytes.
Every reader has a private, empty file cache of its own, so that no read comes from a
pristine copy.

Issue 36 (--issue36 N, each): Xet URLs across manifest replacement (every signed fetch URL
of a commit handed out, the commit replaced by `rm --force` and an ingest of other files
under the same sha, sometimes gc'ed: each old URL answers 404 or the bytes of its file;
or serve restarted with nothing changed: each URL answers its bytes, and restarted with its
kept key cut short: each is refused);
pull against a stored commit (a small file or an LFS file changed at equal length, or a
file the upstream lacks: the pull fails naming it, refs unchanged; an unchanged copy as the
control; and, issue 37, a commit pulled again after another machine removed it and ran gc,
so this machine's index records held files whose packs are gone: the pull completes with
the upstream's bytes), and the pull completing a partial commit killed at a random time (then rerun:
it verifies and holds the upstream's bytes); the file cache held open (a large file held
open through the mount, its entry damaged in place, another process reads it: its bytes or
EIO). `--only issue36` runs just those and the pull-partial kills on the local store.
`--only corruptions` runs just the corruptions (`--corruptions N` of them).

Hub (--hub N, each kind; issue 43): nodes read the series through hubs (`serve
--node-token-file`), each node with its own empty caches and no bucket access; a reader
(checkout, cat of every file, verify) must give the right bytes or an error, never wrong
bytes. Kinds: a hub that flips a byte of every block ahead of a good one (the read must
succeed), that hub alone (the read must fail), a dead address first, a hub killed while a
node reads through it and a second, an entry of the hub's chunk cache flipped, truncated or
replaced by another chunk's frame, and a hub started again on that damaged cache. `--only
hub` runs just these.

Release (--release N rounds of each kind, default: as many as --issue36, so that
reliability.sh's short CI run makes 4 of each and its long run 24; issue 39): the check
record (checks/<commit>) is a shortcut, a cached verdict trusted only while its commit and
files digest are the manifest's, and the sync guard must never take a forged or damaged one
for a pass. Kinds, each on a store holding the series with its records: a record bit-flipped
or truncated, another commit's record copied under the key, another commit's record
re-sealed with this commit (a valid envelope of other files), this record re-sealed with
another files digest: `ls --json` must show that commit `not checked` and every other
commit as before, `verify` must pass on bytes, `fsck` must fail naming the key when the
record does not decode, and `modelcas check` must record the verdict again (fsck clean);
`sync` of a list whose entry moves `stable` to a revision failing its check, SIGKILLed at a
crash step or at a random time: the ref must be unmoved (and the series entry's ref unset
or on a revision with a passing record), the rerun held back (exit 1, ref unmoved), again
after the failing revision's record is replaced by a forged passing one (copied or
re-sealed), and every fourth round `sync --force` must move it; two `label` commands at
once on one revision (distinct keys: both kept; one key: one of the two values), and a
`label` SIGKILLed at a random time (its label absent or whole, fsck clean). `--only release`
runs just these.

Prints one JSON object with the counts; exits 1 if any check failed.
"""
import argparse, fcntl, hashlib, json, os, random, shutil, signal, socket, struct, subprocess
import sys, time
import urllib.error, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("series")
ap.add_argument("work")
ap.add_argument("--kills", type=int, default=36, help="per command and backend")
ap.add_argument("--power-loss", type=int, default=0, help="per command (local store, root)")
ap.add_argument("--corruptions", type=int, default=1000)
ap.add_argument("--s3-env", help="the env file tests/garage.sh wrote")
ap.add_argument("--issue36", type=int, default=24,
                help="rounds of each of issue 36's three (Xet URLs, pull, file cache held)")
ap.add_argument("--hub", type=int, default=0,
                help="rounds of each kind of the hub matrix (issue 43)")
ap.add_argument("--release", type=int,
                help="rounds of each kind of the release matrix (issue 39); default: --issue36's")
ap.add_argument("--only", choices=["issue36", "hub", "release", "corruptions", "upload"],
                help="issue36: only the pull-partial kills (local) and issue 36's rounds; "
                     "upload: only the serve-upload kills (local)")
ap.add_argument("--seed", type=int, default=1)
A = ap.parse_args()
EXP = json.load(open(f"{A.series}/expected.json"))
REPO = EXP["repo"] if "repo" in EXP else "demo-org/demo-llm"
REVS = EXP["revisions"]
CACHE_REPO = f"{A.series}/hub/models--{REPO.replace('/', '--')}"
SKIP_REPO = "demo-org/skip"  # the repository of the unchanged-file ingests
rng = random.Random(A.seed)
failures = []

# The mount keeps whole only files of at least this size (read::file_cache::MIN_FILE_BYTES).
FILE_CACHE_MIN = 1 << 20
# EXT4_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN) and EXT4_GOING_FLAGS_NOLOGFLUSH.
FS_IOC_SHUTDOWN, NOLOGFLUSH = 0x8004587D, 2
# Seconds a command run for a power loss may take before it counts as hung (a failure).
POWER_LOSS_TIMEOUT = 180


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
    """One store (a local directory or an S3 prefix) with its own index, chunk cache and
    file cache, all under `base` (the work directory, or a loop-device file system)."""
    n = 0

    def __init__(self, backend, base=None):
        Store.n += 1
        self.dir = f"{base or A.work}/s{Store.n}"
        os.makedirs(self.dir, exist_ok=True)
        self.env = dict(os.environ, MODELCAS_INDEX=f"{self.dir}/index",
                        MODELCAS_CACHE_DIR=f"{self.dir}/cache",
                        MODELCAS_FILE_CACHE=f"{self.dir}/files",
                        # ingest stamps files just written (test builds only)
                        MODELCAS_TEST_SETTLE_MS="0")
        if backend == "local":
            self.env["MODELCAS_STORE"] = f"{self.dir}/store"
        else:
            settings, bucket = backend
            self.env.update(settings)
            self.env["MODELCAS_STORE"] = f"s3://{bucket}/rel-{os.getpid()}-{Store.n}"

    def run(self, *args, extra=None, check=False, timeout=600, stdout=subprocess.PIPE):
        env = dict(self.env, **(extra or {}))
        if "MODELCAS_CRASH_SHUTDOWN" in env:  # a power loss that does not end the process
            timeout = min(timeout, POWER_LOSS_TIMEOUT)
        r = subprocess.run([A.bin, "-q", *args], env=env, stdout=stdout,
                           stderr=subprocess.PIPE, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{args}: {r.stderr.decode(errors='replace')}")
        return r

    def consistent(self, what):
        r = self.run("fsck", "--json")
        if r.returncode != 0 and b"no modelcas store at" in r.stderr:
            return  # killed before the store's config was written: an empty store
        if r.returncode != 0:
            fail(f"{what}: fsck: {r.stdout.decode()[:400]} {r.stderr.decode()[:400]}")
        out = self.run("ls", "--json")
        if out.returncode != 0:
            fail(f"{what}: ls: {out.stderr.decode()[:400]}")
            return
        for repo in json.loads(out.stdout)["repos"]:
            info = json.loads(self.run("ls", repo["repo"], "--json", check=True).stdout)
            for c in info["commits"]:
                v = self.run("verify", f"{repo['repo']}@{c['commit']}")
                if v.returncode != 0:
                    fail(f"{what}: {repo['repo']}@{c['commit']} is visible and does not verify")

    def commits(self, repo=REPO):
        out = self.run("ls", repo, "--json")
        return [] if out.returncode else json.loads(out.stdout)["commits"]

    def same_bytes(self, rev, files, what):
        """Fails unless `cat` of every (path, sha256) of rev gives those bytes."""
        for p, sha in files:
            out = self.run("cat", rev, p)
            if out.returncode != 0:
                fail(f"{what}: cat {rev} {p}: {out.stderr.decode()[:300]}")
            elif hashlib.sha256(out.stdout).hexdigest() != sha:
                fail(f"{what}: {rev} {p} has other bytes than its source")


def files_of(rev):
    return [(f["path"], f["sha256"]) for f in rev["files"]]


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


class Serve:
    """`modelcas serve` of a store, listening on a free port of the loopback."""

    def __init__(self, s, *args, extra=None, port=None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(s.env, **(extra or {}))
        # Its log goes to a file: a pipe nobody reads fills up, and the server then blocks.
        self.log = open(f"{A.work}/serve-{self.port}.log", "ab")
        self.p = subprocess.Popen([A.bin, "-q", "serve", "--listen", f"127.0.0.1:{self.port}",
                                   *args], env=env, stdout=subprocess.DEVNULL,
                                  stderr=self.log)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return True
            except OSError:
                return self.p.poll() is not None
        wait_for(up, "serve listening")

    def get(self, repo, rev, path, timeout=120):
        """The body of a download, or None when it failed."""
        try:
            with urllib.request.urlopen(f"{self.url}/{repo}/resolve/{rev}/{path}",
                                        timeout=timeout) as resp:
                return resp.read()
        except Exception:
            return None

    def fetch(self, url, headers=None, timeout=60):
        """(status, headers, body) of a GET; an HTTP error is returned, not raised."""
        req = urllib.request.Request(url, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def xet_get_all(self, repo, rev):
        """{path: bytes or None} of every file of a revision downloaded through Xet, as
        hf_xet does (docs/format/xet.md): the tree's xetHash, a read token, one
        reconstruction per file, its signed chunk URLs fetched with their ranges, chunk
        records unpacked. A file that fails anywhere is None; a revision whose listing or
        token fails gives {}."""
        try:
            st, _, body = self.fetch(f"{self.url}/api/models/{repo}/tree/{rev}?recursive=true")
            if st != 200:
                return {}
            entries = [e for e in json.loads(body) if e.get("type") == "file"]
            st, _, body = self.fetch(f"{self.url}/api/models/{repo}/xet-read-token/{rev}")
            if st != 200:
                return {}
            tok = json.loads(body)
        except Exception:
            return {}
        out = {}
        for e in entries:
            try:
                out[e["path"]] = self.xet_file(tok, e)
            except Exception:
                out[e["path"]] = None
        return out

    def xet_file(self, tok, entry):
        if entry["size"] == 0:
            return b""
        auth = {"Authorization": f"Bearer {tok['accessToken']}"}
        # v2, as hf_xet asks first; its per-xorb fetches in v1's shape
        st, _, body = self.fetch(f"{tok['casUrl']}/v2/reconstructions/{entry['xetHash']}", auth)
        if st != 200:
            return None
        r = json.loads(body)
        fetch_info = {h: [{"url": f["url"], "range": g["chunks"], "url_range": g["bytes"]}
                          for f in fs for g in f["ranges"]] for h, fs in r["xorbs"].items()}
        data = bytearray()
        for t in r["terms"]:
            info = next(i for i in fetch_info[t["hash"]]
                        if i["range"]["start"] <= t["range"]["start"]
                        and t["range"]["end"] <= i["range"]["end"])
            a, b = info["url_range"]["start"], info["url_range"]["end"]
            st, _, blob = self.fetch(info["url"], {"Range": f"bytes={a}-{b}"})
            if st != 206 or len(blob) != b - a + 1:
                return None
            recs, at = [], 0
            while at < len(blob):  # chunk records: version, 3-byte lengths, scheme none
                h = blob[at:at + 8]
                n = int.from_bytes(h[1:4], "little")
                if len(h) < 8 or h[0] != 0 or h[4] != 0 or h[5:8] != h[1:4]:
                    return None
                recs.append(blob[at + 8:at + 8 + n])
                at += 8 + n
            k0 = t["range"]["start"] - info["range"]["start"]
            part = b"".join(recs[k0:k0 + t["range"]["end"] - t["range"]["start"]])
            if len(part) != t["unpacked_length"]:
                return None
            data += part
        skip = r["offset_into_first_range"]
        return bytes(data[skip:skip + entry["size"]])

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.p.wait()
        self.log.close()
        return self.p.returncode


# ---- a file system that can lose power: ext4 on a loop device ----

class LoopFs:
    """A fresh ext4 on a loop device, mounted at <work>/loop-N/mnt."""
    n = 0

    def __init__(self, mib=384):
        LoopFs.n += 1
        d = f"{A.work}/loop-{LoopFs.n}"
        os.makedirs(f"{d}/mnt", exist_ok=True)
        self.img, self.mnt = f"{d}/img", f"{d}/mnt"
        with open(self.img, "wb") as f:
            f.truncate(mib << 20)
        # 256-byte inodes: nanosecond times, as on the ext4 of a real node (a small file
        # system gets 128-byte inodes and whole seconds by default)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "256", "-b", "4096", self.img], check=True)
        self.mount()

    def mount(self):
        subprocess.run(["mount", "-o", "loop", self.img, self.mnt], check=True)

    def umount(self):
        subprocess.run(["umount", self.mnt], check=True)

    def sync(self):
        fd = os.open(self.mnt, os.O_RDONLY)
        try:
            os.syncfs(fd) if hasattr(os, "syncfs") else subprocess.run(["sync", "-f", self.mnt])
        finally:
            os.close(fd)

    def power_loss(self):
        """What MODELCAS_CRASH_SHUTDOWN does, from here."""
        fd = os.open(self.mnt, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", NOLOGFLUSH))
        finally:
            os.close(fd)

    def power_back(self, what):
        """Unmounts the shut-down file system, mounts it again (the journal replayed) and
        checks it with e2fsck; False (and a failure) when it is damaged."""
        self.umount()
        self.mount()
        self.umount()
        r = subprocess.run(["e2fsck", "-fn", self.img], capture_output=True)
        self.mount()
        if r.returncode != 0:
            fail(f"{what}: e2fsck after the power loss: {r.stdout.decode()[-400:]}")
            return False
        return True

    def remove(self):
        subprocess.run(["umount", self.mnt], capture_output=True)
        shutil.rmtree(os.path.dirname(self.img), ignore_errors=True)


# ---- the kill matrix ----

class Upstream:
    """A pristine local store holding the series, and bundles of it, served over HTTP as
    the upstream Hub of pull, sync and serve --upstream."""

    def __init__(self):
        self.store = Store("local")
        self.store.run("ingest", CACHE_REPO, check=True)
        self.serve = Serve(self.store)
        self.bundle = f"{A.work}/series.mcb"
        self.store.run("export", f"{REPO}@main", *[f"{REPO}@{r['commit']}" for r in REVS],
                       "-o", self.bundle, check=True)
        self.bundle_r1 = f"{A.work}/series-r1.mcb"
        self.store.run("export", f"{REPO}@{REVS[0]['commit']}", "-o", self.bundle_r1,
                       check=True)


class Case:
    """One command of the kill matrix: `prepare` makes the store it starts from, `act`
    runs it (with the crash settings in `extra`: returns its exit status, negative for a
    signal), `check` says whether the state after a complete rerun is right."""
    phases = 1

    def __init__(self, up):
        self.up = up

    def prepare(self, s, phase=0):
        pass

    def check(self, s, what):
        if len(s.commits()) != len(REVS):
            fail(f"{what}: {len(s.commits())} revisions after the rerun, want {len(REVS)}")


class Ingest(Case):
    name = "ingest"

    def act(self, s, extra, phase=0):
        return s.run("ingest", CACHE_REPO, extra=extra).returncode


class Import(Case):
    name = "import"

    def act(self, s, extra, phase=0):
        return s.run("import", self.up.bundle, extra=extra).returncode


class Gc(Case):
    """Three revisions removed; one run condemns and rewrites, the second deletes."""
    name, phases = "gc", 2
    args = ("gc", "--keep-last", "0", "--grace", "0s", "--rewrite-below", "1")

    def prepare(self, s, phase=0):
        s.run("ingest", CACHE_REPO, check=True)
        for r in REVS[:-1]:
            s.run("rm", f"{REPO}@{r['commit']}", check=True)
        if phase == 1:
            s.run(*self.args, check=True)

    def act(self, s, extra, phase=0):
        r = s.run(*self.args, extra=extra).returncode
        if r == 0 and not extra:  # a rerun runs both phases
            r = s.run(*self.args).returncode
        return r

    def check(self, s, what):
        if len(s.commits()) != 1:
            fail(f"{what}: {len(s.commits())} revisions after the rerun, want 1")
        s.same_bytes(f"{REPO}@{REVS[-1]['commit']}", files_of(REVS[-1]), what)


class Pull(Case):
    """`pull REPO` (main: the last revision) into a store that holds the first."""
    name = "pull"

    def prepare(self, s, phase=0):
        s.run("import", self.up.bundle_r1, check=True)

    def act(self, s, extra, phase=0):
        return s.run("pull", REPO, "--endpoint", self.up.serve.url, extra=extra).returncode

    def check(self, s, what):
        s.same_bytes(f"{REPO}@main", files_of(REVS[-1]), what)


class Sync(Case):
    """A prefetch list of the other three revisions (two by sha, one by `main`) into a
    store that holds the first."""
    name = "sync"

    def prepare(self, s, phase=0):
        s.run("import", self.up.bundle_r1, check=True)
        self.list = f"{A.work}/sync.toml"
        entries = [f'[[model]]\nrepo = "{REPO}"\nrevision = "{r["commit"]}"\n'
                   for r in REVS[1:-1]]
        entries.append(f'[[model]]\nrepo = "{REPO}"\nrevision = "main"\nrefs = ["stable"]\n')
        with open(self.list, "w") as f:
            f.write(f'endpoint = "{self.up.serve.url}"\n\n' + "\n".join(entries))

    def act(self, s, extra, phase=0):
        return s.run("sync", self.list, extra=extra).returncode

    def check(self, s, what):
        super().check(s, what)
        for r in REVS[1:]:
            s.same_bytes(f"{REPO}@{r['commit']}", files_of(r), what)
        s.same_bytes(f"{REPO}@stable", files_of(REVS[-1]), what)


class ServeUpstream(Case):
    """`serve --upstream` over a store that holds the first revision; a client downloads
    every file of the other three (by sha) and of `main`, one at a time, until the server
    dies. Its exit status is the command's."""
    name = "serve-upstream"

    def prepare(self, s, phase=0):
        s.run("import", self.up.bundle_r1, check=True)

    def requests(self):
        out = [(r["commit"], p, sha) for r in REVS[1:] for p, sha in files_of(r)]
        return out + [("main", p, sha) for p, sha in files_of(REVS[-1])]

    def mirror_args(self, s):
        """`--upstream` and a config whose `upstream_repos` names the repository: its first
        revision was imported (set inside), so without it the mirror would never look the
        repository up upstream (dependency confusion, issue 26 point 4)."""
        cfg = f"{s.dir}/mirror.toml"
        with open(cfg, "w") as f:
            f.write(f'[serve]\nupstream_repos = ["{REPO}"]\n')
        return ("--config", cfg, "--upstream", self.up.serve.url)

    def act(self, s, extra, phase=0):
        srv = Serve(s, *self.mirror_args(s), extra=extra)
        wrong = 0
        for rev, p, sha in self.requests():
            body = srv.get(REPO, rev, p)
            if srv.p.poll() is not None:
                break
            if body is None or hashlib.sha256(body).hexdigest() != sha:
                wrong += 1
        if srv.p.poll() is None:
            srv.stop()
            return 1 if wrong else 0
        return srv.stop()

    def check(self, s, what):
        super().check(s, what)
        srv = Serve(s, *self.mirror_args(s))
        try:
            for rev, p, sha in self.requests():
                body = srv.get(REPO, rev, p)
                if body is None:
                    fail(f"{what}: serve --upstream failed {rev}/{p}")
                elif hashlib.sha256(body).hexdigest() != sha:
                    fail(f"{what}: serve --upstream returned wrong bytes for {rev}/{p}")
        finally:
            srv.stop()


UPLOAD_TOKEN = "reliability-writer-token"
UPLOAD_CLIENT = """
import sys
from huggingface_hub import HfApi
url, token, folder, repo = sys.argv[1:5]
HfApi(endpoint=url, token=token).upload_folder(repo_id=repo, folder_path=folder, commit_message="up")
"""


class ServeUpload(Case):
    """Uploads through serve (issue 41): a store whose `main` is the first revision; the
    real huggingface_hub client uploads the second revision's folder onto `main` (plain
    LFS: object PUTs into the spool, then the commit that publishes them through ingest)
    until the server dies. A kill or a power loss at any step leaves `main` at the first
    revision or at the second, never a revision with missing data; the rerun uploads
    again. The server's exit status is the command's."""
    name = "serve-upload"
    xet = False

    def prepare(self, s, phase=0):
        s.run("import", self.up.bundle_r1, check=True)
        s.run("ref", REPO, "main", REVS[0]["commit"], check=True)

    def act(self, s, extra, phase=0):
        tokens = f"{s.dir}/tokens"
        with open(tokens, "w") as f:
            f.write(f"{UPLOAD_TOKEN}  write=*\n")
        srv = Serve(s, "--token-file", tokens, "--upload-dir", f"{s.dir}/spool", extra=extra)
        env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HOME=f"{s.dir}/hf-home", HF_XET_CLIENT_RETRY_BASE_DELAY="100ms",
                   HF_XET_CLIENT_RETRY_MAX_ATTEMPTS="1")
        env.pop("HF_TOKEN", None)
        if self.xet:
            env.pop("HF_HUB_DISABLE_XET", None)
        else:
            env["HF_HUB_DISABLE_XET"] = "1"
        folder = f"{A.series}/plain/{REVS[1]['name']}"
        client = subprocess.run([sys.executable, "-c", UPLOAD_CLIENT, srv.url, UPLOAD_TOKEN,
                                 folder, REPO], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=POWER_LOSS_TIMEOUT)
        if srv.p.poll() is None:
            srv.stop()
            return client.returncode
        return srv.stop()

    def check(self, s, what):
        s.same_bytes(f"{REPO}@main", files_of(REVS[1]), what)


class ServeUploadXet(ServeUpload):
    """`serve-upload` with hf_xet (xorbs, a shard, the global dedup query, then the
    commit): killed at every crash step of the same commit."""
    name = "serve-upload-xet"
    xet = True


def overwrite_in_place(path, sync=True):
    """Writes 4 KiB of new bytes at a random offset of `path`, in place (same size)."""
    size = os.path.getsize(path)
    at = rng.randrange(0, max(1, size - 4096))
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(4096)
        f.seek(at)
        f.write(bytes(b ^ 0xA5 for b in old))
        f.flush()
        if sync:
            os.fdatasync(f.fileno())


def source_files(src):
    out = []
    for root, _, fs in os.walk(src):
        for f in fs:
            p = f"{root}/{f}"
            out.append((os.path.relpath(p, src), hashlib.sha256(open(p, "rb").read()).hexdigest()))
    return sorted(out)


class Skip(Case):
    """The unchanged-file skip: a plain directory ingested once (its files stamped), one
    shard overwritten in place, then ingested again (the other files taken unread)."""
    name = "unchanged-skip"
    ingest_args = ("--repo", SKIP_REPO, "--ref", "main")

    def prepare(self, s, phase=0):
        s.src = f"{s.dir}/src"
        shutil.copytree(f"{A.series}/plain/{REVS[-1]['name']}", s.src)
        s.run("ingest", s.src, *self.ingest_args, check=True)
        big = sorted(p for p, _ in source_files(s.src)
                     if os.path.getsize(f"{s.src}/{p}") >= FILE_CACHE_MIN)
        overwrite_in_place(f"{s.src}/{rng.choice(big)}")

    def act(self, s, extra, phase=0):
        return s.run("ingest", s.src, *self.ingest_args, extra=extra).returncode

    def check(self, s, what):
        if len(s.commits(SKIP_REPO)) != 2:
            fail(f"{what}: {len(s.commits(SKIP_REPO))} revisions of {SKIP_REPO}, want 2")
        s.same_bytes(f"{SKIP_REPO}@main", source_files(s.src), what)


class PullPartial(Case):
    """`pull REPO` (main: the last revision) completing a partial commit: the store holds
    that commit pulled with `--include` (the JSON files and the first shard), so the pull
    compares every stored file with the upstream's (issue 36 point 3) before it adds the
    rest."""
    name = "pull-partial"
    include = ("--include", "*.json", "--include", "model-00001-*")

    def prepare(self, s, phase=0):
        s.run("pull", REPO, "--endpoint", self.up.serve.url, *self.include, check=True)

    def act(self, s, extra, phase=0):
        return s.run("pull", REPO, "--endpoint", self.up.serve.url, extra=extra).returncode

    def check(self, s, what):
        s.same_bytes(f"{REPO}@main", files_of(REVS[-1]), what)
        if s.run("verify", f"{REPO}@main").returncode != 0:
            fail(f"{what}: {REPO}@main does not verify")


def steps(case, backend):
    """The crash steps of each phase of a full run of `case`."""
    out = []
    for phase in range(case.phases):
        s = Store(backend)
        case.prepare(s, phase)
        f = f"{s.dir}/steps"
        st = case.act(s, {"MODELCAS_STEP_COUNT": f}, phase)
        if st != 0:
            raise RuntimeError(f"{case.name}: the probe run failed ({st})")
        out.append(int(open(f).read()))
        shutil.rmtree(s.dir, ignore_errors=True)
    return out


def kill_round(case, backend, label, k, counts, rerun, fs=None):
    """One kill (or, with fs, one power loss) of `case` at step k over all its phases'
    steps; returns whether the command was hit."""
    phase = 0
    while k > counts[phase]:
        k -= counts[phase]
        phase += 1
    s = Store(backend, base=fs.mnt if fs else None)
    case.prepare(s, phase)
    extra = {"MODELCAS_CRASH_AT_STEP": str(k)}
    if fs:
        fs.sync()  # what the store held before the command is durable
        extra["MODELCAS_CRASH_SHUTDOWN"] = fs.mnt
    what = f"{label} {case.name} {'power loss' if fs else 'killed'} at step {k} of phase {phase}"
    try:
        st = case.act(s, extra, phase)
    except subprocess.TimeoutExpired:  # killed by subprocess.run
        fail(f"{what}: neither finished nor died within {POWER_LOSS_TIMEOUT} s")
        st = -signal.SIGKILL
    if st != -signal.SIGKILL:
        if fs and st == -signal.SIGABRT:
            fail(f"{what}: the file system could not be shut down (see MODELCAS_CRASH_SHUTDOWN)")
        shutil.rmtree(s.dir, ignore_errors=True)
        return False  # the run made fewer mutations than the probe (it happens on S3)
    if fs and not fs.power_back(what):
        return True
    s.consistent(what)
    if rerun:
        if case.act(s, {}, phase) != 0:
            fail(f"{what}: the rerun failed")
        s.consistent(f"{what}, rerun")
        case.check(s, f"{what}, rerun")
    shutil.rmtree(s.dir, ignore_errors=True)
    return True


CASES = [Ingest, Import, Gc, Pull, Sync, ServeUpstream, Skip, PullPartial, ServeUpload,
         ServeUploadXet]


def kills(backend, label, up, cases=None):
    done = {}
    for cls in cases or CASES:
        case = cls(up)
        counts = steps(case, backend)
        done[case.name] = 0
        for i in range(A.kills):
            k = rng.randint(1, sum(counts))
            done[case.name] += kill_round(case, backend, label, k, counts, i % 4 == 0)
    return done


def power_losses(up):
    """--power-loss: each command of the matrix, and the source's power loss."""
    done = {}
    for cls in CASES:
        case = cls(up)
        counts = steps(case, "local")
        done[case.name] = 0
        for i in range(A.power_loss):
            fs = LoopFs()
            try:
                k = rng.randint(1, sum(counts))
                done[case.name] += kill_round(case, "local", "power", k, counts, i % 2 == 0,
                                              fs)
            finally:
                fs.remove()
    done["source-power-loss"], done["source-power-loss-wrong"] = 0, 0
    for _ in range(A.power_loss):
        fs = LoopFs()
        try:
            done["source-power-loss-wrong"] += source_power_loss(fs)
            done["source-power-loss"] += 1
        finally:
            fs.remove()
    return done


def source_power_loss(fs):
    """Issue 26's second case: a stamped file overwritten in place and fdatasync'ed (its
    bytes durable, its new times not), then the power lost. After the remount the next
    ingest must publish what the file holds. Returns 1 when it published other bytes."""
    s = Store("local", base=fs.mnt)
    s.src = f"{s.dir}/src"
    shutil.copytree(f"{A.series}/plain/{REVS[-1]['name']}", s.src)
    s.run("ingest", s.src, *Skip.ingest_args, check=True)
    fs.sync()
    big = sorted(p for p, _ in source_files(s.src)
                 if os.path.getsize(f"{s.src}/{p}") >= FILE_CACHE_MIN)
    victim = rng.choice(big)
    overwrite_in_place(f"{s.src}/{victim}")
    fs.power_loss()
    what = f"source power loss ({victim} overwritten in place)"
    if not fs.power_back(what):
        return 0
    r = s.run("ingest", s.src, *Skip.ingest_args)
    if r.returncode != 0:
        fail(f"{what}: the ingest after the power loss failed: {r.stderr.decode()[:300]}")
        return 0
    before = len(failures)
    s.same_bytes(f"{SKIP_REPO}@main", source_files(s.src), what)
    return 1 if len(failures) > before else 0


# ---- corruptions ----

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
    if kind == "flip" and b:
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(max(1, len(b)))]
    elif kind == "swap":
        fr = frames(bytes(b))
        if len(fr) < 2:
            return corrupt_file(path, "flip")
        (a, la), (c, lc) = sorted(rng.sample(fr, 2))
        b = b[:a] + b[c:c + lc] + b[a + la:c] + b[a:a + la] + b[c + lc:]
    open(path, "wb").write(bytes(b))


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
    if reader == "cat":
        for r in REVS:
            for p, sha in files_of(r):
                out = s.run("cat", f"{REPO}@{r['commit']}", p)
                if out.returncode == 0:
                    wrong += check(out.stdout, sha)
    elif reader == "checkout":
        for r in REVS:
            d = f"{s.dir}/co-{r['name']}"
            s.run("checkout", f"{REPO}@{r['commit']}", d)
            for p, sha in files_of(r):
                if os.path.isfile(f"{d}/{p}"):
                    wrong += check(open(f"{d}/{p}", "rb").read(), sha)
    elif reader == "export":
        out = f"{s.dir}/x.mcb"
        if s.run("export", *[f"{REPO}@{r['commit']}" for r in REVS], "-o", out).returncode == 0:
            t = Store("local")
            if t.run("import", out).returncode == 0:
                for r in REVS:
                    for p, sha in files_of(r):
                        o = t.run("cat", f"{REPO}@{r['commit']}", p)
                        if o.returncode == 0:
                            wrong += check(o.stdout, sha)
            shutil.rmtree(t.dir, ignore_errors=True)
    elif reader == "serve":
        srv = Serve(s)
        try:
            for r in REVS:
                for path, sha in files_of(r):
                    body = srv.get(REPO, r["commit"], path, timeout=30)
                    if body is not None:
                        wrong += check(body, sha)
        finally:
            srv.stop()
    elif reader == "xet":
        srv = Serve(s)
        try:
            for r in REVS:
                got = srv.xet_get_all(REPO, r["commit"])
                for path, sha in files_of(r):
                    if got.get(path) is not None:
                        wrong += check(got[path], sha)
        finally:
            srv.stop()
    elif reader in ("mount", "mount-no-passthrough"):
        for r, path, data in mount_reads(s, reader == "mount"):
            if data is not None:
                wrong += check(data, dict(files_of(r))[path])
    s.good = sum(good)
    return wrong


def mount_reads(s, passthrough=True, before_umount=None):
    """(revision, path, bytes or None) of every file read through `modelcas mount`, with
    the store's own file cache; `before_umount()` runs once every file was read."""
    mnt = f"{s.dir}/mnt"
    os.makedirs(mnt, exist_ok=True)
    args = [] if passthrough else ["--no-passthrough"]
    p = subprocess.Popen([A.bin, "-q", "mount", mnt, *args], env=s.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = []
    try:
        wait_for(lambda: os.path.isdir(f"{mnt}/{REPO}") or p.poll() is not None, "mount")
        for r in REVS:
            for path, _ in files_of(r):
                try:
                    data = open(f"{mnt}/{REPO}/{r['commit']}/{path}", "rb").read()
                except OSError:
                    data = None
                out.append((r, path, data))
        if before_umount:
            before_umount()
    finally:
        mount_stop(p, mnt)
    return out


def cache_entries(d, hexlen=64):
    """The entry files of a cache (named by a 64-hex id) under directory d."""
    out = []
    for root, ds, fs in os.walk(d):
        ds[:] = [x for x in ds if not x.startswith(".")]  # the file cache's `.checked/`
        for f in fs:
            if len(f) == hexlen and all(c in "0123456789abcdef" for c in f):
                out.append(os.path.relpath(f"{root}/{f}", d))
    return sorted(out)


TOTAL_FILES = sum(len(r["files"]) for r in REVS)


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
    if s.good != TOTAL_FILES:  # the bucket is intact: a damaged cache must cost nothing but a GET
        fail(f"node-cache {how}: {reader} read {s.good} of {TOTAL_FILES} files byte-exact")
    return detected, wrong


def file_cache_store(pristine):
    """The node file cache of `pristine` (a local store), filled by a mount that read
    every file: every file of at least FILE_CACHE_MIN kept whole."""
    want = {sha for r in REVS for f in r["files"] if f["size"] >= FILE_CACHE_MIN
            for sha in [f["sha256"]]}
    files = f"{pristine.dir}/files"

    def filled():
        wait_for(lambda: {os.path.basename(e) for e in cache_entries(files)} >= want,
                 "the mount's file cache filled", limit=120)
    for _, _, data in mount_reads(pristine, before_umount=filled):
        if data is None:
            raise RuntimeError("the pristine store failed a read through the mount")
    entries = cache_entries(files)
    sizes = {e: os.path.getsize(f"{files}/{e}") for e in entries}
    return entries, sizes


def file_cache_round(pristine, fc, s, how, reader):
    """Damages one entry of a copy of the node file cache of `pristine`, reads everything
    back through the mount (`reader`): (detected, wrong files). Detected: the damaged entry
    was dropped or replaced once the mount used it."""
    entries, sizes = fc
    shutil.copytree(f"{pristine.dir}/store", f"{s.dir}/store")
    shutil.copytree(f"{pristine.dir}/files", f"{s.dir}/files")
    rel = rng.choice(entries)
    path = f"{s.dir}/files/{rel}"
    if how == "other":  # another file's entry (of the same size when there is one)
        same = [e for e in entries if e != rel and sizes[e] == sizes[rel]]
        other = rng.choice(same or [e for e in entries if e != rel])
        shutil.copy(f"{s.dir}/files/{other}", path)
    else:
        corrupt_file(path, how)
    damaged = open(path, "rb").read()
    wrong = read_back(s, reader)
    detected = not os.path.exists(path) or open(path, "rb").read() != damaged
    if s.good != TOTAL_FILES:  # the store is intact: a damaged entry must cost nothing
        fail(f"file-cache {how} of {rel}: {reader} read {s.good} of {TOTAL_FILES} files "
             "byte-exact")
    return detected, wrong, rel


def file_cache_kept_round(pristine, s, how, reader):
    """Issue 40: a new mount takes an entry unread when the check record an earlier mount
    of this boot left (`.checked/<sha256>`) has the stamp the entry has now. The file cache
    is filled in place by a mount of a copy of `pristine` (so its records are believed by
    the next one), then one entry is damaged in place (`flip`, `truncate`: the stamp moves),
    or its record is damaged (`record-flip`) or replaced by another entry's record
    (`record-other`), and everything is read back by a new mount (`reader`):
    (detected, wrong files, entry). Detected: a damaged entry was dropped or written again;
    for a damaged record, every file came back byte-exact."""
    shutil.copytree(f"{pristine.dir}/store", f"{s.dir}/store")
    files = f"{s.dir}/files"
    want = {f["sha256"] for r in REVS for f in r["files"] if f["size"] >= FILE_CACHE_MIN}

    def filled():
        wait_for(lambda: {os.path.basename(e) for e in cache_entries(files)} >= want
                 and len(os.listdir(f"{files}/.checked")) >= len(want),
                 "the mount's file cache and its records filled", limit=120)
    for _, _, data in mount_reads(s, before_umount=filled):
        if data is None:
            raise RuntimeError("a copy of the pristine store failed a read through the mount")
    entries = cache_entries(files)
    rel = rng.choice(entries)
    path, record = f"{files}/{rel}", f"{files}/.checked/{os.path.basename(rel)}"
    if how == "record-flip":
        corrupt_file(record, "flip")
    elif how == "record-other":
        other = rng.choice([e for e in entries if e != rel])
        shutil.copy(f"{files}/.checked/{os.path.basename(other)}", record)
    else:
        corrupt_file(path, how)
    damaged = open(path, "rb").read()
    wrong = read_back(s, reader)
    if how.startswith("record"):
        detected = s.good == TOTAL_FILES
    else:
        detected = not os.path.exists(path) or open(path, "rb").read() != damaged
    if s.good != TOTAL_FILES:
        fail(f"file-cache-kept {how} of {rel}: {reader} read {s.good} of {TOTAL_FILES} files "
             "byte-exact")
    return detected, wrong, rel


def index_files(d):
    """The files of a RocksDB directory that hold data (not its LOCK or LOGs)."""
    return sorted(f for f in os.listdir(d)
                  if f != "LOCK" and not f.startswith("LOG") and os.path.isfile(f"{d}/{f}"))


def index_round(pristine, up, s, how, reader):
    """Damages one file of a copy of `pristine`'s index, then runs a command that uses the
    index (`reader`: a new ingest of the series, which takes stamped files from the index
    and deduplicates against it, and takes the recorded Xet hash of blobs it knows by name;
    an ingest of a copy of the last revision with one shard changed in place, which follows
    the shards it read before by their first chunk, reusing their recorded Xet hashes, and
    reads the changed one back; or a pull of the last revision, removed from the copy,
    whose weights the third revision holds: the pull reads them back through the index) and
    reads every file back with cat: (wrong files, the damaged file, whether the command
    failed). The index is a cache of the store: a damaged one may make the command fail,
    never publish or return wrong bytes or record a wrong Xet hash (every revision must
    then pass `verify`, which computes the Xet hashes again); after `index rebuild` the
    command must succeed."""
    shutil.copytree(f"{pristine.dir}/store", f"{s.dir}/store")
    shutil.copytree(f"{pristine.dir}/index", f"{s.dir}/index")
    if reader == "pull":  # the last revision (the third's weights) pulled back
        s.run("rm", "--force", f"{REPO}@{REVS[-1]['commit']}", check=True)
    d = f"{s.dir}/index"
    name = rng.choice([f for f in index_files(d) if os.path.getsize(f"{d}/{f}")])
    corrupt_file(f"{d}/{name}", how)

    src = f"{s.dir}/src"
    if reader == "ingest-copy":
        shutil.copytree(f"{A.series}/plain/{REVS[-1]['name']}", src)
        big = sorted(p for p, _ in source_files(src) if os.path.getsize(f"{src}/{p}") >= 1 << 20)
        overwrite_in_place(f"{src}/{rng.choice(big)}")

    def command():
        if reader == "ingest":
            return s.run("ingest", CACHE_REPO)
        if reader == "ingest-copy":
            return s.run("ingest", src, "--repo", SKIP_REPO, "--ref", "main")
        return s.run("pull", REPO, "--endpoint", up.serve.url)
    r = command()
    wrong = read_back(s, "cat")
    if reader == "ingest-copy" and r.returncode == 0:
        s.same_bytes(f"{SKIP_REPO}@main", source_files(src), f"index-{how} of {name}")
    if r.returncode == 0:  # every visible revision verifies: bytes, sha256, Xet hashes
        s.consistent(f"index-{how} of {name} ({reader})")
    failed = r.returncode != 0
    if failed:
        why = r.stderr.decode(errors="replace").strip()[-300:]
        rb = s.run("index", "rebuild")
        if rb.returncode != 0:
            fail(f"index-{how} of {name}: {reader} failed ({why}) and `index rebuild` failed: "
                 f"{rb.stderr.decode(errors='replace').strip()[-300:]}")
        elif command().returncode != 0 or read_back(s, "cat") or s.good != TOTAL_FILES:
            fail(f"index-{how} of {name}: after `index rebuild`, {reader} or a read failed")
    elif s.good != TOTAL_FILES:
        fail(f"index-{how} of {name}: {reader} succeeded, then cat read {s.good} of "
             f"{TOTAL_FILES} files byte-exact")
    return wrong, name, failed


def store_objects(root):
    objs = {"pack": [], "manifest": [], "ref": []}
    for d, _, fs in os.walk(root):
        for f in fs:
            rel = os.path.relpath(f"{d}/{f}", root)
            kind = ("pack" if rel.startswith("packs/") else "manifest" if "/manifests/" in rel
                    else "ref" if "/refs/" in rel else None)
            if kind:
                objs[kind].append(rel)
    return objs


def ui_store_page(s):
    """(status, text) of serve's store page (`/ui/store`) over store `s`."""
    srv = Serve(s)
    try:
        st, _, body = srv.fetch(f"{srv.url}/ui/store")
        return st, body.decode(errors="replace")
    except Exception as e:
        return 0, str(e)
    finally:
        srv.stop()


def run_record_round(root, s, how):
    """A copy of the store with its gc run record (runs/gc) damaged: serve's store page must
    still answer 200 and name the record unreadable (its check covers every field), every
    revision must stay listed, and the next gc must succeed and leave a readable record.
    Returns (held, 1 if the page named the record unreadable)."""
    shutil.copytree(root, f"{s.dir}/store")
    corrupt_file(f"{s.dir}/store/runs/gc", how)
    st, page = ui_store_page(s)
    if st != 200 or 'data-run="gc"' not in page:
        fail(f"run-record-{how}: the store page answered {st} over a damaged runs/gc")
        return False, 0
    unreadable = "unreadable record" in page
    if not unreadable:  # the record's check covers every field: damage is always named
        fail(f"run-record-{how}: a damaged runs/gc was shown as a true record")
        return False, 0
    if s.run("gc", "--keep-last", "1000").returncode != 0:
        fail(f"run-record-{how}: gc failed over a damaged runs/gc")
        return False, int(unreadable)
    if len(s.commits()) != len(REVS):
        fail(f"run-record-{how}: revisions went missing")
        return False, int(unreadable)
    st, page = ui_store_page(s)
    if st != 200 or "unreadable record" in page:
        fail(f"run-record-{how}: the next gc left the record unreadable ({st})")
        return False, int(unreadable)
    return True, int(unreadable)


# ---- issue 41: the uploads' shortcuts ----

def http(method, url, token=None, body=None):
    """(status, body bytes) of one request; an HTTP error is returned, not raised."""
    req = urllib.request.Request(url, data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def upload_round(kind, up, i):
    """One damaged shortcut of the uploads: `spool-flip` (a spooled object changed after
    its PUT was checked: its commit must be refused and the object dropped, main unmoved,
    then the next try whole), `record-flip` and `record-other` (a Xet chunk list record
    damaged, or another file's put in its place, while serve is down: the next serve drops
    or distrusts it, and an upload through it stores the right bytes), `idx-flip` (the
    record offsets beside every spooled xorb damaged: a hint only, the same client's next
    upload, naming those xorbs, stores the right bytes)."""
    s = Store("local")
    s.run("import", up.bundle_r1, check=True)
    s.run("ref", REPO, "main", REVS[0]["commit"], check=True)
    tokens, spool = f"{s.dir}/tokens", f"{s.dir}/spool"
    with open(tokens, "w") as f:
        f.write(f"{UPLOAD_TOKEN}  write=*\n")
    args = ("--token-file", tokens, "--upload-dir", spool)
    what = f"upload {kind} #{i}"
    srv = Serve(s, *args)
    try:
        data = os.urandom(300_000)
        oid = hashlib.sha256(data).hexdigest()
        if kind == "spool-flip":
            batch = json.dumps({"operation": "upload", "objects": [{"oid": oid, "size": len(data)}]}).encode()
            st, b = http("POST", f"{srv.url}/{REPO}.git/info/lfs/objects/batch", UPLOAD_TOKEN, batch)
            href = json.loads(b)["objects"][0]["actions"]["upload"]["href"]
            if http("PUT", href, None, data)[0] != 200:
                fail(f"{what}: the upload was refused")
            obj = [os.path.join(d, n) for d, _, ns in os.walk(f"{spool}/objects") for n in ns if n == oid]
            with open(obj[0], "r+b") as f:
                f.seek(rng.randrange(len(data)))
                c = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([c[0] ^ 0xFF]))
            commit = (json.dumps({"key": "header", "value": {"summary": "s"}}) + "\n" +
                      json.dumps({"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256",
                                                            "oid": oid, "size": len(data)}}) + "\n").encode()
            st, _ = http("POST", f"{srv.url}/api/models/{REPO}/commit/main", UPLOAD_TOKEN, commit)
            if st == 200:
                fail(f"{what}: a commit of a damaged spooled object was answered 200")
            s.same_bytes(f"{REPO}@main", files_of(REVS[0]), f"{what}: main moved")
            if http("PUT", href, None, data)[0] != 200:
                fail(f"{what}: the upload again was refused")
            st, b = http("POST", f"{srv.url}/api/models/{REPO}/commit/main", UPLOAD_TOKEN, commit)
            if st != 200:
                fail(f"{what}: the commit after a new upload failed: {st} {b[:200]}")
        else:
            srv.stop()
            ServeUploadXet(up).act(s, {})  # hf_xet uploads r2: records of its files
            records = f"{spool}/xet-files"
            names = sorted(n for n in os.listdir(records) if not n.startswith("."))
            victim = f"{records}/{rng.choice(names)}"
            if kind == "record-flip":
                corrupt_file(victim, "flip")
            elif kind == "record-other":
                shutil.copy(f"{records}/{rng.choice([n for n in names if n != os.path.basename(victim)] or names)}", victim)
            else:
                # Every xorb's record offsets (a hint) flipped or truncated.
                idx = sorted(n for n in os.listdir(f"{spool}/xorbs") if n.endswith(".idx"))
                if not idx:
                    fail(f"{what}: no record offsets beside the spooled xorbs")
                for n in idx:
                    corrupt_file(f"{spool}/xorbs/{n}", rng.choice(["flip", "truncate"]))
            srv = Serve(s, *args)
            # r3 (the re-shard: the same tensors, other files) uploaded by a fresh client (its
            # dedup answers from the records, the damaged one included), or for `idx-flip` by
            # the same client (its shards name the xorbs it sent, read through the offsets).
            home = "hf-home" if kind == "idx-flip" else "hf-home-2"
            env = dict(os.environ, HF_HOME=f"{s.dir}/{home}", HF_HUB_DISABLE_PROGRESS_BARS="1",
                       HF_XET_CLIENT_RETRY_BASE_DELAY="100ms", HF_XET_CLIENT_RETRY_MAX_ATTEMPTS="1")
            env.pop("HF_HUB_DISABLE_XET", None)
            env.pop("HF_TOKEN", None)
            subprocess.run([sys.executable, "-c", UPLOAD_CLIENT, srv.url, UPLOAD_TOKEN,
                            f"{A.series}/plain/{REVS[2]['name']}", REPO], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=POWER_LOSS_TIMEOUT)
        srv.stop()
        s.consistent(what)
        if kind != "spool-flip":
            # Whatever the upload did, main is r2 or r3 and every byte of it right.
            for r in REVS[1:3]:
                if all(s.run("cat", f"{REPO}@main", p).stdout and
                       hashlib.sha256(s.run("cat", f"{REPO}@main", p).stdout).hexdigest() == sha
                       for p, sha in files_of(r)):
                    break
            else:
                fail(f"{what}: main is neither r2 nor r3, byte for byte")
            if kind == "idx-flip":
                s.same_bytes(f"{REPO}@main", files_of(REVS[2]), f"{what}: damaged offsets failed the upload")
    finally:
        srv.stop()
        shutil.rmtree(s.dir, ignore_errors=True)


def upload_corruptions(up, n):
    done = {}
    for kind in ("spool-flip", "record-flip", "record-other", "idx-flip"):
        for i in range(n):
            upload_round(kind, up, i)
        done[kind] = n
    return done


def corruptions(n, up):
    pristine = Store("local")
    pristine.run("ingest", CACHE_REPO, check=True)
    root = f"{pristine.dir}/store"
    bundle = f"{A.work}/c.mcb"
    pristine.run("export", *[f"{REPO}@{r['commit']}" for r in REVS],
                 f"{REPO}@main", "-o", bundle, check=True)
    # A gc that expires nothing, for its run record (runs/gc, read by serve's store page).
    pristine.run("gc", "--keep-last", "1000", check=True)
    objs = store_objects(root)
    fc = file_cache_store(pristine)
    plans = [("pack", "flip"), ("pack", "truncate"), ("pack", "swap"), ("manifest", "flip"),
             ("manifest", "truncate"), ("ref", "flip"), ("ref", "truncate"), ("bundle", "flip"),
             ("bundle", "truncate"), ("file-cache", "flip"), ("file-cache", "truncate"),
             ("file-cache", "other"), ("file-cache-kept", "flip"),
             ("file-cache-kept", "truncate"), ("file-cache-kept", "record-flip"),
             ("file-cache-kept", "record-other"), ("index", "flip"), ("index", "truncate"),
             ("run-record", "flip"), ("run-record", "truncate")]
    readers = ["cat", "checkout", "export", "serve", "mount", "xet"]
    # The Xet reader is a client written here: on the undamaged store it must return every
    # file byte-exact, or a round that "returned no wrong bytes" would prove nothing.
    s = Store("local")
    shutil.copytree(root, f"{s.dir}/store")
    total = sum(len(files_of(r)) for r in REVS)
    if read_back(s, "xet") or s.good != total:
        fail(f"the xet reader read {s.good} of {total} files of an undamaged store right")
    shutil.rmtree(s.dir, ignore_errors=True)
    node = node_cache_store() if A.s3_env else None
    if node:
        plans += [("node-cache", "flip"), ("node-cache", "truncate"), ("node-cache", "other")]
    stats = {"tried": 0, "detected": 0, "wrong_bytes": 0, "by_kind": {}}
    for i in range(n):
        target, how = plans[i % len(plans)]
        turn = i // len(plans)
        key = f"{target}-{how}"
        k = stats["by_kind"].setdefault(key, {"tried": 0, "detected": 0, "wrong_bytes": 0})
        s = Store("local")
        wrong = 0
        if target == "node-cache":
            # export reads runs of frames straight from the bucket, not through the cache
            cache_readers = [r for r in readers if r != "export"]
            reader = cache_readers[turn % len(cache_readers)]
            detected, wrong = node_cache_round(node, s, how, reader)
            if not detected:
                fail(f"{key}: a damaged node-cache entry was used and kept ({reader})")
            if wrong:
                fail(f"{key}: {reader} returned {wrong} wrong files")
        elif target == "file-cache":  # only the mount keeps whole files
            reader = ["mount", "mount-no-passthrough"][turn % 2]
            detected, wrong, rel = file_cache_round(pristine, fc, s, how, reader)
            if not detected:
                fail(f"{key} of {rel}: a damaged file-cache entry was used and kept ({reader})")
            if wrong:
                fail(f"{key} of {rel}: {reader} returned {wrong} wrong files")
        elif target == "file-cache-kept":  # records a new mount believes (issue 40)
            reader = ["mount", "mount-no-passthrough"][turn % 2]
            detected, wrong, rel = file_cache_kept_round(pristine, s, how, reader)
            if not detected:
                fail(f"{key} of {rel}: a damaged file-cache entry was used and kept ({reader})")
            if wrong:
                fail(f"{key} of {rel}: {reader} returned {wrong} wrong files")
        elif target == "index":  # read back by the commands that use the index
            reader = ["ingest", "ingest-copy", "pull"][turn % 3]
            wrong, name, failed = index_round(pristine, up, s, how, reader)
            # detected: refused (the command failed) or harmless (all right); never wrong
            detected = not wrong
            k["command_failed"] = k.get("command_failed", 0) + failed
            if wrong:
                fail(f"{key} of {name}: {reader} returned {wrong} wrong files")
        elif target == "run-record":  # informational: shown or named unreadable, never fatal
            detected, shown_unreadable = run_record_round(root, s, how)
            k["shown_unreadable"] = k.get("shown_unreadable", 0) + shown_unreadable
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
        k["wrong_bytes"] += wrong
        stats["tried"] += 1
        k["tried"] += 1
        if detected:
            stats["detected"] += 1
            k["detected"] += 1
        shutil.rmtree(s.dir, ignore_errors=True)
    return stats


# ---- issue 36: the shortcuts it removed, in the matrices ----

XET_REPO = "demo-org/xet-urls"  # the repository whose commit the Xet URL rounds replace


def xet_records(blob):
    """The payloads of the chunk records of a fetched xorb range, or None if malformed."""
    recs, at = [], 0
    while at < len(blob):
        h = blob[at:at + 8]
        n = int.from_bytes(h[1:4], "little")
        if len(h) < 8 or h[0] != 0 or h[4] != 0 or h[5:8] != h[1:4] or at + 8 + n > len(blob):
            return None
        recs.append(blob[at + 8:at + 8 + n])
        at += 8 + n
    return recs


def xet_handout(srv, repo, commit, src):
    """Every signed fetch URL a Xet client is handed for the files of repo@commit: a list of
    (path, url, Range header, offset in the file) with the payload of each URL's range
    checked against the file's bytes in `src` (else the round proves nothing)."""
    st, _, body = srv.fetch(f"{srv.url}/api/models/{repo}/tree/{commit}?recursive=true")
    if st != 200:
        raise RuntimeError(f"tree of {repo}@{commit}: {st}")
    entries = [e for e in json.loads(body) if e.get("type") == "file" and e["size"]]
    st, _, body = srv.fetch(f"{srv.url}/api/models/{repo}/xet-read-token/{commit}")
    if st != 200:
        raise RuntimeError(f"xet-read-token of {repo}@{commit}: {st}")
    tok = json.loads(body)
    auth = {"Authorization": f"Bearer {tok['accessToken']}"}
    out = []
    for e in entries:
        data = open(f"{src}/{e['path']}", "rb").read()
        st, _, body = srv.fetch(f"{tok['casUrl']}/v1/reconstructions/{e['xetHash']}", auth)
        if st != 200:
            raise RuntimeError(f"reconstruction of {e['path']}: {st}")
        r = json.loads(body)
        pos = -r["offset_into_first_range"]
        for t in r["terms"]:
            info = next(i for i in r["fetch_info"][t["hash"]]
                        if i["range"]["start"] <= t["range"]["start"]
                        and t["range"]["end"] <= i["range"]["end"])
            # a xorb holds chunks of one file only, in order: the URL's whole range is
            # consecutive bytes of the file, from where the term starts less the chunks
            # of the range before it
            a, b = info["url_range"]["start"], info["url_range"]["end"]
            rng_h = f"bytes={a}-{b}"
            st, _, blob = srv.fetch(info["url"], {"Range": rng_h})
            recs = xet_records(blob) if st == 206 else None
            if recs is None:
                raise RuntimeError(f"fetch of {e['path']}: {st}")
            k0 = t["range"]["start"] - info["range"]["start"]
            at = pos - sum(len(x) for x in recs[:k0])
            payload = b"".join(recs)
            if data[max(at, 0):at + len(payload)] != payload[max(-at, 0):][:len(data)]:
                raise RuntimeError(f"the Xet URL of {e['path']} gave other bytes before "
                                   "the commit was replaced")
            out.append((e["path"], info["url"], rng_h, at))
            pos += t["unpacked_length"]
        if pos < len(data):
            raise RuntimeError(f"the terms of {e['path']} cover {pos} of {len(data)} bytes")
    return out


def xet_url_round(i, st):
    """Issue 36 point 1: serve over a store holding XET_REPO@C; every signed fetch URL of
    every file is handed out, then the commit is replaced (`rm --force`, an ingest of C with
    a file added that sorts first, a file removed, or a shard changed at equal length; every
    fourth time followed by gc, which deletes what only the old commit held) and every old
    URL fetched again: each must answer 404 or the bytes of the file it was handed out for.
    The new commit must then read back byte-exact through Xet. Or serve is restarted on the
    same port with nothing changed: every URL must still answer its bytes (the kept key,
    docs/format/node.md); or restarted with the kept key cut short first (a power cut, a
    stamp that lies): every URL refused (403), never honoured under another key."""
    how = ["added-first", "removed", "changed", "changed+gc", "restarted",
           "restarted-key-cut"][i % 6]
    rev = rng.choice(REVS)
    commit = rev["commit"]
    s = Store("local")
    src, src2 = f"{s.dir}/src1", f"{s.dir}/src2"
    shutil.copytree(f"{A.series}/plain/{rev['name']}", src)
    shutil.copytree(src, src2)
    args = ("--repo", XET_REPO, "--revision", commit, "--ref", "main")
    s.run("ingest", src, *args, check=True)
    srv = Serve(s)
    k = st["by_kind"].setdefault(how, {"tried": 0, "urls": 0, "same_bytes": 0, "not_found": 0,
                                       "wrong_bytes": 0})
    try:
        urls = xet_handout(srv, XET_REPO, commit, src)
        paths = sorted(p for p, _ in source_files(src2))
        big = [p for p in paths if os.path.getsize(f"{src2}/{p}") >= FILE_CACHE_MIN]
        if how.startswith("restarted"):
            srv.stop()
            if how == "restarted-key-cut":
                key = f"{s.dir}/index/xet-secret"
                open(key, "w").write(open(key).read()[:40])
            srv = Serve(s, port=srv.port)
            for path, url, rng_h, at in urls:
                code, _, blob = srv.fetch(url, {"Range": rng_h})
                k["urls"] += 1
                data = open(f"{src}/{path}", "rb").read()
                recs = xet_records(blob) if code == 206 else None
                payload = b"".join(recs) if recs is not None else None
                if how == "restarted" and payload is not None and (
                        data[max(at, 0):at + len(payload)] == payload[max(-at, 0):][:len(data)]):
                    k["same_bytes"] += 1
                elif how == "restarted-key-cut" and code == 403:
                    k["not_found"] += 1  # refused: counted with the URLs that answer nothing
                else:
                    k["wrong_bytes"] += 1
                    fail(f"xet-urls {how} ({rev['name']}): the URL handed out for {path} "
                         f"answered {code} after the restart")
            k["tried"] += 1
            return
        if how == "added-first":  # every file of the list one place further
            with open(f"{src2}/00-added.bin", "wb") as f:
                f.write(rng.randbytes(300_000))
        elif how == "removed":  # the files after it one place nearer
            os.remove(f"{src2}/{rng.choice(paths[:-1])}")
        else:
            overwrite_in_place(f"{src2}/{rng.choice(big)}")
        s.run("rm", "--force", f"{XET_REPO}@{commit}", check=True)
        s.run("ingest", src2, *args, check=True)
        if how.endswith("+gc"):
            for _ in range(2):  # the first run condemns, the second deletes
                s.run("gc", "--keep-last", "0", "--grace", "0s", "--rewrite-below", "1",
                      check=True)
        for path, url, rng_h, at in urls:
            code, _, blob = srv.fetch(url, {"Range": rng_h})
            k["urls"] += 1
            if code == 404:
                k["not_found"] += 1
                continue
            data = open(f"{src}/{path}", "rb").read()
            recs = xet_records(blob) if code == 206 else None
            payload = b"".join(recs) if recs is not None else None
            if payload is not None and (data[max(at, 0):at + len(payload)]
                                        == payload[max(-at, 0):][:len(data)]):
                k["same_bytes"] += 1
                continue
            k["wrong_bytes"] += 1
            fail(f"xet-urls {how} ({rev['name']}): the URL handed out for {path} answered "
                 f"{code} with {len(blob)} bytes that are not its bytes")
        got = srv.xet_get_all(XET_REPO, commit)
        for p, sha in source_files(src2):
            if got.get(p) is None or hashlib.sha256(got[p]).hexdigest() != sha:
                fail(f"xet-urls {how} ({rev['name']}): the new commit's {p} did not read "
                     "back byte-exact through Xet")
    finally:
        srv.stop()
        shutil.rmtree(s.dir, ignore_errors=True)
    k["tried"] += 1


def alter_small(path):
    """Changes one letter or digit of a small file, at equal length (still valid JSON)."""
    b = bytearray(open(path, "rb").read())
    at = rng.choice([j for j, c in enumerate(b) if chr(c).isalnum()])
    c = chr(b[at])
    b[at] = ord(("8" if c == "9" else chr(ord(c) + 1)) if c.isdigit() else
                ("a" if c in "zZ" else chr(ord(c) + 1)))
    open(path, "wb").write(bytes(b))


def pull_stored_round(i, up, st):
    """Issue 36 point 3: the store holds commit C ingested from a copy of the upstream's
    files with one small file changed at equal length, one LFS file changed at equal
    length, or one file the upstream lacks; `pull REPO@C --ref pulled` must fail naming the
    file and leave the refs as they were. Every fifth, the copy is unchanged (the control:
    the pull must complete and give the upstream's bytes). And issue 37's shortcut (a pull
    reuses the files the store holds): `peer-gc` pulls C, another machine (the same store,
    its own index) removes C and runs gc, so this machine's index records files whose packs
    are gone; pulling C again must complete with the upstream's bytes."""
    how = ["small", "lfs", "extra", "unchanged", "peer-gc"][i % 5]
    rev = rng.choice(REVS)
    s = Store("local")
    if how == "peer-gc":
        return pull_after_peer_gc(s, up, rev, st)
    src = f"{s.dir}/src"
    shutil.copytree(f"{A.series}/plain/{rev['name']}", src)
    paths = sorted(p for p, _ in source_files(src))
    big = [p for p in paths if os.path.getsize(f"{src}/{p}") >= FILE_CACHE_MIN]
    victim = None
    if how == "small":
        victim = rng.choice([p for p in paths if p not in big])
        alter_small(f"{src}/{victim}")
    elif how == "lfs":
        victim = rng.choice(big)
        overwrite_in_place(f"{src}/{victim}")
    elif how == "extra":
        victim = "extra.bin"
        open(f"{src}/{victim}", "wb").write(rng.randbytes(50_000))
    s.run("ingest", src, "--repo", REPO, "--revision", rev["commit"], check=True)
    before = json.loads(s.run("ls", REPO, "--json", check=True).stdout)["refs"]
    r = s.run("pull", f"{REPO}@{rev['commit']}", "--endpoint", up.serve.url, "--ref", "pulled")
    after = json.loads(s.run("ls", REPO, "--json", check=True).stdout)["refs"]
    k = st["by_kind"].setdefault(how, {"tried": 0, "refused": 0, "named": 0,
                                       "accepted_wrong": 0})
    k["tried"] += 1
    what = f"pull-stored {how} ({rev['name']}, {victim})"
    if how == "unchanged":
        if r.returncode != 0:
            fail(f"{what}: the pull of an unchanged stored commit failed: "
                 f"{r.stderr.decode(errors='replace')[-300:]}")
        else:
            s.same_bytes(f"{REPO}@pulled", files_of(rev), what)
    elif r.returncode == 0:
        k["accepted_wrong"] += 1
        fail(f"{what}: pull accepted a stored commit other than the upstream's")
    else:
        k["refused"] += 1
        if victim in r.stderr.decode(errors="replace"):
            k["named"] += 1
        else:
            fail(f"{what}: the refusal does not name the file: "
                 f"{r.stderr.decode(errors='replace')[-300:]}")
        if after != before:
            fail(f"{what}: a refused pull changed the refs: {before} -> {after}")
    shutil.rmtree(s.dir, ignore_errors=True)


def pull_after_peer_gc(s, up, rev, st):
    """pull_stored_round's `peer-gc` kind."""
    k = st["by_kind"].setdefault("peer-gc", {"tried": 0, "pulled_right": 0})
    k["tried"] += 1
    target = f"{REPO}@{rev['commit']}"
    s.run("pull", target, "--endpoint", up.serve.url, check=True)
    peer = dict(MODELCAS_INDEX=f"{s.dir}/peer-index", MODELCAS_CACHE_DIR=f"{s.dir}/peer-cache")
    s.run("rm", "--force", target, extra=peer, check=True)
    for _ in range(2):
        s.run("gc", "--grace", "0s", extra=peer, check=True)
    r = s.run("pull", target, "--endpoint", up.serve.url, "--json")
    what = f"pull-stored peer-gc ({rev['name']})"
    if r.returncode != 0:
        fail(f"{what}: the pull after a peer's gc failed: "
             f"{r.stderr.decode(errors='replace')[-300:]}")
    else:
        s.same_bytes(target, files_of(rev), what)
        k["pulled_right"] += 1
    shutil.rmtree(s.dir, ignore_errors=True)


def pull_partial_timed_kills(up, n):
    """kill -9 of the pull that completes a partial commit (PullPartial) at a random time
    of its run, not only at a crash step: then `fsck` and every visible revision must be
    right, and the rerun must complete with the upstream's bytes, `verify` passing."""
    case = PullPartial(up)
    s = Store("local")
    case.prepare(s)
    t = time.time()
    if case.act(s, {}) != 0:
        raise RuntimeError("pull-partial: the probe run failed")
    took = time.time() - t
    shutil.rmtree(s.dir, ignore_errors=True)
    st = {"tried": 0, "killed": 0, "finished_first": 0}
    for _ in range(n):
        s = Store("local")
        case.prepare(s)
        delay = rng.uniform(0, took)
        p = subprocess.Popen([A.bin, "-q", "pull", REPO, "--endpoint", up.serve.url],
                             env=s.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=delay)
            st["finished_first"] += 1
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            st["killed"] += 1
        what = f"pull-partial killed after {delay:.2f} s"
        s.consistent(what)
        if case.act(s, {}) != 0:
            fail(f"{what}: the rerun failed")
        s.consistent(f"{what}, rerun")
        case.check(s, f"{what}, rerun")
        st["tried"] += 1
        shutil.rmtree(s.dir, ignore_errors=True)
    return st


def mount_start(s, args):
    mnt = f"{s.dir}/mnt"
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.Popen([A.bin, "-q", "mount", mnt, *args], env=s.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.isdir(f"{mnt}/{REPO}") or p.poll() is not None, "mount")
    return p, mnt


def mount_stop(p, mnt):
    subprocess.run([A.bin, "umount", mnt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def read_by_another_process(path, data):
    """`cat` of `path` in a process of its own: (wrong bytes, EIO). Bytes that came before
    an error must be the file's too."""
    r = subprocess.run(["cat", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    got = r.stdout
    if r.returncode == 0 and got == data:
        return 0, False
    if r.returncode != 0 and data[:len(got)] == got:
        return 0, True
    n = min(len(got), len(data))
    return sum(1 for x, y in zip(got[:n], data[:n]) if x != y) + abs(len(got) - len(data)), False


def damage_in_place(path, how):
    """A bit flipped, or the file truncated, in place (the same inode), past its first half:
    beyond what the holder's first read and the kernel's read-ahead brought in."""
    size = os.path.getsize(path)
    at = rng.randrange(size // 2, size)
    with open(path, "r+b") as f:
        if how == "truncate":
            f.truncate(at)
        else:
            f.seek(at)
            b = f.read(1)[0] ^ (1 << rng.randrange(8))
            f.seek(at)
            f.write(bytes([b]))
        f.flush()
        os.fsync(f.fileno())


def file_cache_held_round(i, pristine, fc, st):
    """Issue 36 point 5: a mount of a copy of `pristine` with its node file cache; this
    process holds a large file open (read a little), its cache entry is damaged in place
    (a bit flip or a truncation, in its second half), then another process reads the whole
    file through the mount: the file's bytes or EIO, never the damaged bytes; then, the
    holder closed, once more. With passthrough and without."""
    mode = ["passthrough", "no-passthrough"][i % 2]
    how = ["flip", "truncate"][(i // 2) % 2]
    entries, _ = fc
    by_sha = {os.path.basename(e): e for e in entries}
    rev = rng.choice(REVS)
    path, sha = rng.choice([(p, h) for p, h in files_of(rev) if h in by_sha])
    data = open(f"{A.series}/plain/{rev['name']}/{path}", "rb").read()
    s = Store("local")
    shutil.copytree(f"{pristine.dir}/store", f"{s.dir}/store")
    shutil.copytree(f"{pristine.dir}/files", f"{s.dir}/files")
    entry = f"{s.dir}/files/{by_sha[sha]}"
    key = f"{mode}-{how}"
    k = st["by_kind"].setdefault(key, {"tried": 0, "detected": 0, "eio": 0, "wrong_bytes": 0})
    p, mnt = mount_start(s, [] if mode == "passthrough" else ["--no-passthrough"])
    f = f"{mnt}/{REPO}/{rev['commit']}/{path}"
    wrong = 0
    try:
        held = open(f, "rb")
        held.read(4096)
        time.sleep(0.02)  # the damage gets a later ctime than the check of the first open
        damage_in_place(entry, how)
        damaged = open(entry, "rb").read()
        w, eio = read_by_another_process(f, data)
        wrong += w
        k["eio"] += eio
        k["detected"] += not os.path.exists(entry) or open(entry, "rb").read() != damaged
        held.close()
        w, eio = read_by_another_process(f, data)
        wrong += w
        if eio:
            fail(f"file-cache-held {key} of {path}: EIO once no handle was open")
    finally:
        mount_stop(p, mnt)
    if wrong:
        fail(f"file-cache-held {key} of {path} ({rev['name']}): another process read "
             f"{wrong} wrong bytes")
    k["wrong_bytes"] += wrong
    k["tried"] += 1
    shutil.rmtree(s.dir, ignore_errors=True)


def issue36(up, n):
    """The three rounds of issue 36, n each; their counts."""
    out = {}
    st = out["xet_urls"] = {"by_kind": {}}
    for i in range(n):
        xet_url_round(i, st)
    st = out["pull_stored"] = {"by_kind": {}}
    for i in range(n):
        pull_stored_round(i, up, st)
    killed = pull_partial_timed_kills(up, n)
    pristine = Store("local")
    pristine.run("import", up.bundle, check=True)
    fc = file_cache_store(pristine)
    st = out["file_cache_held"] = {"by_kind": {}}
    for i in range(n):
        file_cache_held_round(i, pristine, fc, st)
    shutil.rmtree(pristine.dir, ignore_errors=True)
    for st in out.values():
        for k in st["by_kind"].values():
            for name, v in k.items():
                st[name] = st.get(name, 0) + v
    out["pull_partial_killed"] = killed
    return out


HUB_TOKEN = "reliability-node-token"


def hub_start(s, extra=None):
    """A hub on store `s` with the node token and a chunk cache of its own."""
    d = f"{s.dir}/hub-{free_port()}"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/tokens", "w").write(HUB_TOKEN + "\n")
    h = Serve(s, "--node-token-file", f"{d}/tokens", "--cache-dir", f"{d}/chunks", extra=extra)
    h.cache = f"{d}/chunks"
    return h


def hub_node(addrs):
    """A node reading through `addrs`: its own caches and index, no bucket settings."""
    d = f"{A.work}/node-{free_port()}-{random.randrange(1 << 30)}"
    os.makedirs(d)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MODELCAS_"))}
    env.update(MODELCAS_STORE=addrs, MODELCAS_INDEX=f"{d}/index", MODELCAS_CACHE_DIR=f"{d}/cache",
               MODELCAS_FILE_CACHE=f"{d}/files", HF_TOKEN=HUB_TOKEN, MODELCAS_HUB_RETRY_FOR="20s")
    return d, env


def hub_read(addrs, rev, reader):
    """Reads `rev` through `addrs` with `reader`: "ok", "error" (no byte given), or
    "wrong" (a byte that is not the revision's)."""
    d, env = hub_node(addrs)
    want = dict(files_of(rev))
    run = lambda *a: subprocess.run([A.bin, "-q", *a], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, timeout=300)
    name = f"{REPO}@{rev['commit']}"
    try:
        if reader == "checkout":
            r = run("checkout", name, f"{d}/co")
            if r.returncode != 0:
                return "error"
            for path, sha in want.items():
                if hashlib.sha256(open(f"{d}/co/{path}", "rb").read()).hexdigest() != sha:
                    return "wrong"
            return "ok"
        if reader == "cat":
            outcome = "ok"
            for path, sha in want.items():
                r = run("cat", name, path)
                if r.returncode != 0:
                    outcome = "error"
                elif hashlib.sha256(r.stdout).hexdigest() != sha:
                    return "wrong"
            return outcome
        r = run("verify", name, "--json")
        return "ok" if r.returncode == 0 else "error"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def hub_damage_cache(h, rng):
    """Damages one entry of hub `h`'s chunk cache: a flip, a truncation, or another entry's
    frame under its name."""
    entries = [os.path.join(h.cache, e) for e in cache_entries(h.cache)]
    if len(entries) < 2:
        return None
    path, other = rng.sample(entries, 2)
    how = rng.choice(["flip", "truncate", "swap"])
    data = open(path, "rb").read()
    if how == "flip":
        i = rng.randrange(len(data))
        data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    elif how == "truncate":
        data = data[:rng.randrange(len(data))]
    else:
        data = open(other, "rb").read()
    open(path, "wb").write(data)
    return how


def hub_matrix(up, n):
    """The hub matrix (issue 43), n rounds of each kind; its counts."""
    rng = random.Random(A.seed)
    st = {"by_kind": {}}
    s = up.store
    good = hub_start(s)
    bad = hub_start(s, extra={"MODELCAS_TEST_HUB_FLIP_BLOCKS": "1"})
    readers = ["checkout", "cat", "verify"]

    def count(kind, outcome, want):
        k = st["by_kind"].setdefault(kind, {"rounds": 0, "ok": 0, "error": 0, "wrong": 0})
        k["rounds"] += 1
        k[outcome] += 1
        if outcome == "wrong":
            fail(f"hub {kind}: a wrong byte reached a reader")
        elif outcome != want and want is not None:
            fail(f"hub {kind}: {outcome}, want {want}")

    try:
        for i in range(n):
            rev, reader = rng.choice(REVS), readers[i % len(readers)]
            count("wrong bytes, good hub second", hub_read(f"{bad.url},{good.url}", rev, reader), "ok")
            count("wrong bytes, alone", hub_read(bad.url, rev, reader), "error")
            dead = f"http://127.0.0.1:{free_port()}"
            count("dead address first", hub_read(f"{dead},{good.url}", rev, reader), "ok")
            # A hub killed while a node reads through it and a second one.
            h1 = hub_start(s)
            d, env = hub_node(f"{h1.url},{good.url}")
            p = subprocess.Popen([A.bin, "-q", "checkout", f"{REPO}@{rev['commit']}", f"{d}/co"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.0, 0.5))
            h1.p.kill()
            h1.p.wait()
            ok = p.wait(300) == 0 and all(
                hashlib.sha256(open(f"{d}/co/{f}", "rb").read()).hexdigest() == sha
                for f, sha in files_of(rev))
            count("hub killed mid-read", "ok" if ok else "error", "ok")
            shutil.rmtree(d, ignore_errors=True)
            # The hub's own cache damaged (after a read filled it), used live and after a
            # restart on it.
            h = hub_start(s)
            hub_read(h.url, rev, "verify")
            how = hub_damage_cache(h, rng)
            count(f"cache entry {how}, live", hub_read(h.url, rev, reader), "ok")
            hub_damage_cache(h, rng)
            h.p.kill()
            h.p.wait()
            h2 = Serve(s, "--node-token-file", f"{os.path.dirname(h.cache)}/tokens",
                       "--cache-dir", h.cache)
            count(f"cache entry damaged, restarted", hub_read(h2.url, rev, reader), "ok")
            h2.p.kill()
            h2.p.wait()
    finally:
        for h in (good, bad):
            h.p.kill()
            h.p.wait()
    for k in st["by_kind"].values():
        for name, v in k.items():
            st[name] = st.get(name, 0) + v
    return st


# ---- the release matrix (issue 39) ----

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import format_reader as FR  # noqa: E402  (the envelope's BLAKE3, pure Python)
import zstandard  # noqa: E402

RELEASE_ROUNDS = A.release if A.release is not None else A.issue36
REL_REPO = "demo-org/rel-guard"  # the sync guard's repository: a good and a failing revision
REL_GOOD, REL_BAD = "a1" * 20, "b2" * 20
PASSING = ("passed", "warnings")
rel_notes = {}  # how the kills landed


def note(what):
    rel_notes[what] = rel_notes.get(what, 0) + 1


def check_record(s, repo, commit):
    return f"{s.dir}/store/repos/{repo}/checks/{commit}"


def reseal(data, edit):
    """The check record `data` (envelope MCASCHCK, docs/format/bytes.md) with its payload
    edited by `edit` and sealed again: a valid envelope of other contents."""
    flags = struct.unpack_from("<HH", data, 8)[1]
    payload = data[12:-32]
    if flags & 1:
        payload = FR.zstd_bounded(payload, 1 << 26, "check record")
    payload = edit(bytearray(payload))
    if flags & 1:
        payload = zstandard.ZstdCompressor().compress(bytes(payload))
    body = data[:12] + bytes(payload)
    return body + FR.blake3(body)


def with_commit(commit_hex):
    """A payload edit: CheckObject.commit (its first 20 bytes) set to another commit."""
    def edit(p):
        p[0:20] = bytes.fromhex(commit_hex)
        return p
    return edit


def with_files(digest):
    """A payload edit: CheckObject.files (the 32 bytes after the commit) replaced."""
    def edit(p):
        p[20:52] = digest
        return p
    return edit


def release_state(s, repo):
    """{commit: (verdict, labels, refs)} from `ls REPO --json`."""
    out = s.run("ls", repo, "--json")
    if out.returncode != 0:
        fail(f"release: ls {repo}: {out.stderr.decode()[:300]}")
        return {}
    return {c["commit"]: ((c.get("check") or {}).get("verdict"), c.get("labels") or {},
                          c.get("refs") or [])
            for c in json.loads(out.stdout)["commits"]}


def ref_target(state, ref):
    return next((c for c, (_, _, refs) in state.items() if ref in refs), None)


def release_dirs():
    """A tiny model that passes its check (the series' config and tokenizer, one small
    shard) and the same with a config.json that is no JSON, which fails it."""
    good, bad = f"{A.work}/rel-good", f"{A.work}/rel-bad"
    for d in (good, bad):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(f"{A.series}/plain/r1/{f}", f"{d}/{f}")
        h = json.dumps({"model.embed_tokens.weight": {
            "dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
        h += b" " * (-len(h) % 8)
        open(f"{d}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(64))
    open(f"{bad}/config.json", "w").write("{not json\n")
    return good, bad


def release_record_round(s, kind, rng, count):
    """One damaged or forged check record of a random commit of the series."""
    commits = [r["commit"] for r in REVS]
    c = rng.choice(commits)
    other = rng.choice([x for x in commits if x != c])
    path = check_record(s, REPO, c)
    pristine = open(path, "rb").read()
    theirs = open(check_record(s, REPO, other), "rb").read()
    before = release_state(s, REPO)
    if kind == "flip":
        i = rng.randrange(len(pristine))
        data = pristine[:i] + bytes([pristine[i] ^ (1 << rng.randrange(8))]) + pristine[i + 1:]
    elif kind == "truncate":
        data = pristine[:rng.randrange(len(pristine))]
    elif kind == "another commit's record":
        data = theirs
    elif kind == "other files (re-sealed)":
        data = reseal(theirs, with_commit(c))
    else:  # "another files digest (re-sealed)"
        data = reseal(pristine, with_files(bytes(rng.randrange(256) for _ in range(32))))
    open(path, "wb").write(data)
    what = f"release {kind} of {c[:12]}"
    ok = True
    after = release_state(s, REPO)
    if after.get(c, (None,))[0] != "not checked":
        ok = False
        fail(f"{what}: ls shows {after.get(c, (None,))[0]!r}, want 'not checked'")
    for x in commits:
        if x != c and after.get(x) != before.get(x):
            ok = False
            fail(f"{what}: {x[:12]} changed: {before.get(x)} -> {after.get(x)}")
    v = s.run("verify", f"{REPO}@{c}")
    if v.returncode != 0 or b"not checked" not in v.stdout:
        ok = False
        fail(f"{what}: verify exit {v.returncode}, {v.stdout.decode()[-200:]!r}")
    if kind in ("flip", "truncate", "another commit's record"):
        f = s.run("fsck")
        if f.returncode == 0 or f"checks/{c}".encode() not in f.stdout + f.stderr:
            ok = False
            fail(f"{what}: fsck exit {f.returncode} without naming the record")
    r = s.run("check", f"{REPO}@{c}")
    again = release_state(s, REPO)
    if r.returncode != 0 or again.get(c) != before.get(c):
        ok = False
        fail(f"{what}: check exit {r.returncode} did not repair it: {again.get(c)}")
    f = s.run("fsck")
    if f.returncode != 0:
        ok = False
        fail(f"{what}: fsck after the repair: {f.stdout.decode()[-300:]}")
    open(path, "wb").write(pristine)
    count(kind, ok)


class RelSync:
    """`sync` of a list that moves `stable` of REL_REPO to a failing revision and `stable`
    of the series to its main, into a store whose REL_REPO `stable` is the good one."""

    def __init__(self, up_store, good):
        self.good = good
        self.list = f"{A.work}/rel-sync.toml"
        self.srv = Serve(up_store)
        with open(self.list, "w") as f:
            f.write(f'endpoint = "{self.srv.url}"\n\n'
                    f'[[model]]\nrepo = "{REL_REPO}"\nrevision = "{REL_BAD}"\nrefs = ["stable"]\n\n'
                    f'[[model]]\nrepo = "{REPO}"\nrevision = "main"\nrefs = ["stable"]\n')

    def prepare(self, up):
        s = Store("local")
        s.run("ingest", self.good, "--repo", REL_REPO, "--revision", REL_GOOD, "--ref", "stable",
              check=True)
        s.run("import", up.bundle_r1, check=True)
        return s

    def held(self, s, what):
        """The invariant: REL_REPO's stable unmoved; the series' stable unset or on a
        revision with a passing record."""
        ok = True
        rel = release_state(s, REL_REPO)
        if ref_target(rel, "stable") != REL_GOOD:
            ok = False
            fail(f"{what}: {REL_REPO} stable is {ref_target(rel, 'stable')}, want {REL_GOOD[:12]}")
        ser = release_state(s, REPO)
        t = ref_target(ser, "stable")
        if t is not None and ser[t][0] not in PASSING:
            ok = False
            fail(f"{what}: {REPO} stable on {t[:12]}, whose check is {ser[t][0]!r}")
        return ok

    def stop(self):
        self.srv.stop()


def release_sync_round(rs, up, i, rng, probe, count):
    s = rs.prepare(up)
    steps, secs = probe
    if i % 2 == 0:
        k = rng.randint(1, steps)
        how = f"killed at step {k}"
        st = s.run("sync", rs.list, extra={"MODELCAS_CRASH_AT_STEP": str(k)}).returncode
    else:
        t = rng.uniform(0, secs)
        how = f"killed after {t:.2f} s"
        p = subprocess.Popen([A.bin, "-q", "sync", rs.list], env=s.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(t)
        p.kill()
        st = p.wait()
    what = f"release sync {how} (exit {st})"
    note(f"sync {'killed' if st == -signal.SIGKILL else 'finished before the kill'}")
    if ref_target(release_state(s, REPO), "stable") is not None:
        note("sync killed after the series' stable moved")
    ok = rs.held(s, what)
    s.consistent(what)
    r = s.run("sync", rs.list)
    if r.returncode != 1:
        ok = False
        fail(f"{what}, rerun: exit {r.returncode}, want 1 (held back)")
    ok &= rs.held(s, f"{what}, rerun")
    rel = release_state(s, REL_REPO)
    if rel.get(REL_BAD, (None,))[0] != "failed":
        ok = False
        fail(f"{what}, rerun: {REL_REPO}@{REL_BAD[:12]} is {rel.get(REL_BAD, (None,))[0]!r}, want 'failed'")
    if ref_target(release_state(s, REPO), "stable") != REVS[-1]["commit"]:
        ok = False
        fail(f"{what}, rerun: {REPO} stable is not main's revision")
    # A forged passing record on the failing revision must not let the ref move.
    path = check_record(s, REL_REPO, REL_BAD)
    good_rec = open(check_record(s, REL_REPO, REL_GOOD), "rb").read()
    forged = good_rec if i % 2 else reseal(good_rec, with_commit(REL_BAD))
    open(path, "wb").write(forged)
    r = s.run("sync", rs.list)
    if r.returncode != 1:
        ok = False
        fail(f"{what}, forged record: exit {r.returncode}, want 1 (held back)")
    ok &= rs.held(s, f"{what}, forged record")
    if i % 4 == 0:
        r = s.run("sync", "--force", rs.list)
        if r.returncode != 0 or ref_target(release_state(s, REL_REPO), "stable") != REL_BAD:
            ok = False
            fail(f"{what}: sync --force exit {r.returncode} did not move stable")
    count("sync to a failing revision, killed", ok)
    shutil.rmtree(s.dir, ignore_errors=True)


def labels_of(s, commit):
    return release_state(s, REPO).get(commit, (None, {}))[1]


def release_label_round(s, i, rng, count):
    c = rng.choice(REVS)["commit"]
    rev = f"{REPO}@{c}"
    start = lambda *a: subprocess.Popen([A.bin, "-q", "label", rev, *a], env=s.env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Two writers, distinct keys: both kept.
    ka, kb = f"round{i}-a", f"round{i}-b"
    t = time.time()
    pa, pb = start(f"{ka}=va{i}"), start(f"{kb}=vb{i}")
    ea, eb = pa.wait(60), pb.wait(60)
    took = time.time() - t
    got = labels_of(s, c)
    ok = ea == 0 and eb == 0 and got.get(ka) == f"va{i}" and got.get(kb) == f"vb{i}"
    if not ok:
        fail(f"release labels {ka} and {kb} at once on {c[:12]}: exit {ea} {eb}, labels {got}")
    count("two label writers, distinct keys", ok)
    # Two writers, one key: one of the two values, whole.
    kx = f"round{i}-x"
    pa, pb = start(f"{kx}=one-{i}"), start(f"{kx}=two-{i}")
    ea, eb = pa.wait(60), pb.wait(60)
    got = labels_of(s, c)
    ok = ea == 0 and eb == 0 and got.get(kx) in (f"one-{i}", f"two-{i}")
    if not ok:
        fail(f"release label {kx} by two writers on {c[:12]}: exit {ea} {eb}, value {got.get(kx)!r}")
    count("two label writers, one key", ok)
    # A writer killed at a random time: its label absent or whole; the store consistent.
    kk = f"round{i}-k"
    p = start(f"{kk}=killed-{i}")
    time.sleep(rng.uniform(0, took))  # within what a label command takes
    p.kill()
    killed = p.wait() == -signal.SIGKILL
    got = labels_of(s, c)
    ok = got.get(kk) in (None, f"killed-{i}")
    note(f"label {'killed' if killed else 'finished before the kill'}: "
         f"{'absent' if got.get(kk) is None else 'kept'}")
    if not ok:
        fail(f"release label {kk} killed: value {got.get(kk)!r}")
    f = s.run("fsck")
    if f.returncode != 0:
        ok = False
        fail(f"release label {kk} killed: fsck: {f.stdout.decode()[-300:]}")
    count("label writer killed", ok)
    # At most 64 labels a revision: this round's go.
    r = s.run("label", rev, *[a for k in (ka, kb, kx, kk) if k in labels_of(s, c)
                               for a in ("--remove", k)])
    if r.returncode != 0:
        fail(f"release label --remove on {c[:12]}: {r.stderr.decode()[:300]}")


def release_matrix(up, n):
    """The release matrix (issue 39), n rounds of each kind; its counts."""
    rng = random.Random(A.seed + 39)
    st = {"by_kind": {}}

    def count(kind, ok):
        k = st["by_kind"].setdefault(kind, {"rounds": 0, "ok": 0, "failed": 0})
        k["rounds"] += 1
        k["ok" if ok else "failed"] += 1

    s = Store("local")
    s.run("import", up.bundle, check=True)
    for r in REVS:  # every revision has its record (import makes them; `check` if not)
        if release_state(s, REPO).get(r["commit"], (None,))[0] not in PASSING:
            s.run("check", f"{REPO}@{r['commit']}", check=True)
    kinds = ["flip", "truncate", "another commit's record", "other files (re-sealed)",
             "another files digest (re-sealed)"]
    # The control: a record re-sealed unchanged still counts, so the forged ones below are
    # envelopes the store decodes, refused only for what they say.
    before = release_state(s, REPO)
    for r in REVS:
        path = check_record(s, REPO, r["commit"])
        pristine = open(path, "rb").read()
        open(path, "wb").write(reseal(pristine, lambda p: p))
        after = release_state(s, REPO)
        ok = after.get(r["commit"]) == before.get(r["commit"]) and s.run("fsck").returncode == 0
        if not ok:
            fail(f"release: {r['commit'][:12]}'s record re-sealed unchanged is {after.get(r['commit'])}")
        count("re-sealed unchanged (control)", ok)
        open(path, "wb").write(pristine)
    for i in range(n):
        for kind in kinds:
            release_record_round(s, kind, rng, count)
        release_label_round(s, i, rng, count)
    # The sync guard: an upstream with the good and the failing revision beside the series.
    good, bad = release_dirs()
    ups = Store("local")
    ups.run("ingest", CACHE_REPO, check=True)
    ups.run("ingest", good, "--repo", REL_REPO, "--revision", REL_GOOD, "--ref", "main", check=True)
    ups.run("ingest", bad, "--repo", REL_REPO, "--revision", REL_BAD, check=True)
    rs = RelSync(ups, good)
    try:
        probe = rs.prepare(up)
        t = time.time()
        e = probe.run("sync", rs.list, extra={"MODELCAS_STEP_COUNT": f"{probe.dir}/steps"}).returncode
        secs = time.time() - t
        if e != 1:
            fail(f"release sync probe: exit {e}, want 1 (held back)")
        steps = int(open(f"{probe.dir}/steps").read())
        rs.held(probe, "release sync probe")
        shutil.rmtree(probe.dir, ignore_errors=True)
        st["sync_steps"], st["sync_seconds"] = steps, round(secs, 2)
        for i in range(n):
            release_sync_round(rs, up, i, rng, (steps, secs), count)
    finally:
        rs.stop()
    for k in st["by_kind"].values():
        for name, v in k.items():
            st[name] = st.get(name, 0) + v
    st["kills"] = dict(rel_notes)
    return st


def main():
    # A run stopped with SIGTERM unwinds, so that each loop device's file system is unmounted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.makedirs(A.work, exist_ok=True)
    t = time.time()
    up = Upstream()
    try:
        if A.only == "hub":
            report = {"hub": hub_matrix(up, A.hub or 4)}
        elif A.only == "release":
            report = {"release": release_matrix(up, RELEASE_ROUNDS or 4)}
        elif A.only == "corruptions":
            report = {"corruptions": corruptions(A.corruptions or 20, up)}
        elif A.only == "issue36":
            report = {"kills": {"local": kills("local", "local", up, [PullPartial])}}
        elif A.only == "upload":
            report = {"kills": {"local": kills("local", "local", up, [ServeUpload, ServeUploadXet])},
                      "upload_corruptions": upload_corruptions(up, A.corruptions or 4)}
        else:
            report = {"kills": {"local": kills("local", "local", up)}}
            if A.s3_env:
                report["kills"]["s3"] = kills(s3_settings(A.s3_env), "s3", up)
        report["kills_total"] = sum(sum(v.values()) for v in report.get("kills", {}).values())
        if A.power_loss and not A.only:
            report["power_loss"] = power_losses(up)
        if not A.only:
            report["corruptions"] = corruptions(A.corruptions, up)
        if A.issue36 and A.only not in ("hub", "release", "upload"):
            report["issue36"] = issue36(up, A.issue36)
        if A.hub and A.only not in ("hub", "release", "upload"):
            report["hub"] = hub_matrix(up, A.hub)
        if RELEASE_ROUNDS and not A.only:
            report["release"] = release_matrix(up, RELEASE_ROUNDS)
    finally:
        up.serve.stop()
    report["failures"] = len(failures)
    report["failure_examples"] = failures[:30]
    report["seconds"] = round(time.time() - t)
    print(json.dumps(report, indent=1))
    sys.exit(1 if failures else 0)


main()
