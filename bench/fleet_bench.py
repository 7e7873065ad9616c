#!/usr/bin/env python3
"""Fleet start (issue 43): N nodes start one revision at once, straight from the bucket and
through a cold hub, with the bucket's egress counted outside every modelcas process (a TCP
relay in front of Garage counts the bytes Garage sends).

Each round, every mode cold (page cache dropped, fresh node homes and caches, a fresh hub
cache, relay counters at zero):
  one     1 node straight from the bucket: one copy
  direct  N nodes straight from the bucket (the read-only key), started at once
  hub     N nodes through 1 cold hub (only the hub holds bucket credentials), at once
A node is `modelcas mount --repo REPO@REV --file-cache-size 0` with its own home; 4 reader
threads read every file in 1 MiB reads and check its sha256. A node's time runs from the
common start to its last file checked.

usage: fleet_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR GARAGE_ENV ROUNDS NODES REV
"""
import asyncio, hashlib, json, os, shutil, socket, statistics, subprocess, sys, threading, time

BIN, SERIES, WORK, GENV = sys.argv[1:5]
ROUNDS, NODES, REV = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
EXP = json.load(open(f"{SERIES}/expected.json"))
REVS = {r["name"]: r for r in EXP["revisions"]}
REPO = EXP["repo"]
READERS = 4
TOKEN = "fleet-bench-node-token"

g = {}
for line in open(GENV):
    k, v = line.replace("export ", "").strip().split("=", 1)
    g[k] = v
GARAGE = g["MODELCAS_TEST_S3_ENDPOINT"].removeprefix("http://")
STORE = f"s3://{g['MODELCAS_TEST_S3_BUCKET']}/bench-fleet-{os.getpid()}"


class Relay:
    """A TCP relay to Garage counting the bytes Garage sends (the bucket's egress)."""

    def __init__(self):
        self.egress = 0
        self.loop = asyncio.new_event_loop()
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        host, port = GARAGE.split(":")

        async def pipe(r, w, count):
            try:
                while data := await r.read(1 << 16):
                    if count:
                        self.egress += len(data)
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        async def client(cr, cw):
            try:
                ur, uw = await asyncio.open_connection(host, int(port))
            except OSError:
                cw.close()
                return
            await asyncio.gather(pipe(cr, uw, False), pipe(ur, cw, True))

        async def main():
            server = await asyncio.start_server(client, "127.0.0.1", self.port, backlog=1024)
            ready.set()
            async with server:
                await server.serve_forever()

        self.loop.run_until_complete(main())


RELAY = Relay()


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def env_of(home, store, key="rw"):
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("MODELCAS_")}
    e.update(HOME=home, XDG_CACHE_HOME=f"{home}/.cache", MODELCAS_STORE=store, MODELCAS_INDEX=f"{home}/index",
             MODELCAS_CACHE_DIR=f"{home}/chunks", MODELCAS_FILE_CACHE=f"{home}/files")
    if store.startswith("s3://"):
        kid, sec = (g["MODELCAS_TEST_S3_KEY_ID"], g["MODELCAS_TEST_S3_SECRET"]) if key == "rw" else \
            (g["MODELCAS_TEST_S3_RO_KEY_ID"], g["MODELCAS_TEST_S3_RO_SECRET"])
        e.update(MODELCAS_ENDPOINT_URL=f"http://127.0.0.1:{RELAY.port}", MODELCAS_REGION="garage",
                 AWS_ACCESS_KEY_ID=kid, AWS_SECRET_ACCESS_KEY=sec)
    else:
        e.update(HF_TOKEN=TOKEN, AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    return e


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_port(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("the hub exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the hub did not start")


def cpu_seconds(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def garage_pid():
    out = subprocess.run(["pgrep", "-f", "garage -c"], stdout=subprocess.PIPE, text=True).stdout.split()
    return int(out[0]) if out else None


def mount(home, store, key):
    mnt = f"{home}/mnt"
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.Popen([BIN, "-q", "mount", mnt, "--repo", f"{REPO}@{REV}", "--file-cache-size", "0"],
                         env=env_of(home, store, key), stderr=open(f"{home}/mount.log", "w"))
    for _ in range(600):
        if os.path.ismount(mnt) and os.path.exists(f"{mnt}/{REVS[REV]['files'][0]['path']}"):
            return p, mnt
        if p.poll() is not None:
            raise RuntimeError(open(f"{home}/mount.log").read())
        time.sleep(0.05)
    raise RuntimeError("the mount did not come up")


def umount(p, mnt):
    subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL)
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()


READ = r"""
import hashlib, sys, threading, time, json
mnt, start_at, files = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
while time.time() < start_at: time.sleep(0.001)
bad = []
def work(mine):
    for path, sha in mine:
        h = hashlib.sha256()
        with open(f"{mnt}/{path}", "rb", buffering=0) as f:
            while b := f.read(1 << 20): h.update(b)
        if h.hexdigest() != sha: bad.append(path)
ts = [threading.Thread(target=work, args=(files[i::4],)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"secs": time.time() - start_at, "bad": bad}))
"""


def fleet(n, store, key):
    """Mounts `n` nodes on `store`, starts their reads at once; node seconds."""
    files = sorted(((f["path"], f["sha256"]) for f in REVS[REV]["files"]), key=lambda f: f[0])
    nodes = []
    for i in range(n):
        home = f"{WORK}/node-{i}"
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(home)
        nodes.append(mount(home, store, key))
    drop_caches()
    start_at = time.time() + 1.0
    readers = [subprocess.Popen([sys.executable, "-c", READ, mnt, str(start_at), json.dumps(files)],
                                stdout=subprocess.PIPE, text=True) for _, mnt in nodes]
    out = [json.loads(r.communicate()[0]) for r in readers]
    for p, mnt in nodes:
        umount(p, mnt)
    for o in out:
        if o["bad"]:
            raise RuntimeError(f"wrong bytes: {o['bad']}")
    return [o["secs"] for o in out]


def hub_store():
    home = f"{WORK}/hub"
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(home)
    open(f"{home}/tokens", "w").write(f"{TOKEN}\n")
    port = free_port()
    p = subprocess.Popen([BIN, "-q", "serve", "--listen", f"127.0.0.1:{port}", "--node-token-file",
                          f"{home}/tokens", "--threads", "64", "--cache-dir", f"{home}/chunks"],
                         env=env_of(home, STORE), stderr=open(f"{home}/serve.log", "w"))
    wait_port(port, p)
    return p, f"http://127.0.0.1:{port}"


def measure(mode):
    RELAY.egress = 0
    garage = garage_pid()
    g0 = cpu_seconds(garage) if garage else 0.0
    hub_cpu = 0.0
    if mode == "one":
        secs = fleet(1, STORE, "ro")
    elif mode == "direct":
        secs = fleet(NODES, STORE, "ro")
    else:
        hub, url = hub_store()
        try:
            secs = fleet(NODES, url, None)
            hub_cpu = cpu_seconds(hub.pid)
        finally:
            hub.terminate(); hub.wait()
    return {"egress": RELAY.egress, "slowest": max(secs), "median": statistics.median(secs),
            "hub_cpu": hub_cpu, "garage_cpu": (cpu_seconds(garage) - g0) if garage else 0.0}


def main():
    setup = f"{WORK}/setup"
    os.makedirs(setup, exist_ok=True)
    e = env_of(setup, STORE)
    subprocess.run([BIN, "-q", "init"], env=e, check=True)
    for r in ["r1", "r2", "r3", "r4"]:
        if r > REV:
            break
        subprocess.run([BIN, "-q", "ingest", f"{SERIES}/plain/{r}", "--repo", REPO, "--revision",
                        REVS[r]["commit"], "--ref", r], env=e, check=True, stdout=subprocess.DEVNULL)
    size = sum(f["size"] for f in REVS[REV]["files"])
    modes = ["one", "direct", "hub"]
    rows = {m: [] for m in modes}
    for rnd in range(ROUNDS):
        for m in modes:
            rows[m].append(measure(m))
            print(f"round {rnd + 1} {m}: {rows[m][-1]}", file=sys.stderr)
    one = statistics.median(r["egress"] for r in rows["one"])
    print(f"\n{NODES} nodes start {REPO}@{REV} ({size / 2**20:.0f} MiB of files) at once; "
          f"medians of {ROUNDS} rounds; {os.cpu_count()} cores shared by nodes, hub and Garage\n")
    print("| mode | bucket egress | x one copy | slowest node | median node | hub CPU | Garage CPU |")
    print("|---|---|---|---|---|---|---|")
    for m in modes:
        med = lambda k: statistics.median(r[k] for r in rows[m])
        n = 1 if m == "one" else NODES
        print(f"| {m} ({n} node{'s' if n > 1 else ''}) | {med('egress') / 2**20:.0f} MiB | "
              f"{med('egress') / one:.2f} | {med('slowest'):.2f} s | {med('median'):.2f} s | "
              f"{med('hub_cpu'):.1f} s | {med('garage_cpu'):.1f} s |")


main()
