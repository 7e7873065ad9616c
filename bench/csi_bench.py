#!/usr/bin/env python3
"""A second pod's read speed on a node (issue 38), in one invocation beside the plain
directory: `modelcas mountd` and `modelcas csi` run as on a node, the `kubelet` example
publishes r3 as inline volumes. Pod 1's volume is read cold (the store; the node's file
cache then fills in the background); then, each round, the plain directory is read cold,
and a new pod's new volume (a new mount of the same revision, served by the same server)
is read cold: page cache dropped, node file cache full. Each read is every file of r3 in
1 MiB reads; figures are MB/s, median over ROUNDS.

usage: csi_bench.py MODELCAS_BIN KUBELET_BIN SERIES_DIR WORK_DIR [ROUNDS]"""
import json, os, statistics, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fs_common import drop_caches, mounted, MB

BIN, KUBELET, SERIES, WORK = sys.argv[1:5]
ROUNDS = int(sys.argv[5]) if len(sys.argv) > 5 else 5
REPO = "demo-org/demo-llm"
MIN_FILE_BYTES = 1 << 20  # read::file_cache::MIN_FILE_BYTES


def whole(root):
    """Reads every file under root: (MB/s, bytes)."""
    t, n = time.perf_counter(), 0
    for dp, _, fs in os.walk(root):
        for name in sorted(fs):
            with open(os.path.join(dp, name), "rb", buffering=0) as f:
                while b := f.read(1 << 20):
                    n += len(b)
    return n / (time.perf_counter() - t) / MB, n


def wait_for(what, f, limit=120):
    t = time.time()
    while not f():
        assert time.time() - t < limit, f"{what}: not within {limit} s"
        time.sleep(0.05)


def kubelet(*args):
    subprocess.run([KUBELET, f"{WORK}/csi.sock", *args], check=True, stdout=subprocess.DEVNULL)


def cache_bytes():
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(f"{WORK}/files")
               for f in fs if not f.startswith("."))


def main():
    exp = json.load(open(f"{SERIES}/expected.json"))
    r3 = [r for r in exp["revisions"] if r["name"] == "r3"][0]
    want_cache = sum(f["size"] for f in r3["files"] if f["size"] >= MIN_FILE_BYTES)
    total = sum(f["size"] for f in r3["files"])
    log = open(f"{WORK}/node.log", "w")
    mountd = subprocess.Popen([BIN, "mountd", "--socket", f"{WORK}/mountd.sock"],
                              stdout=log, stderr=subprocess.STDOUT)
    plugin = subprocess.Popen([BIN, "csi", "--endpoint", f"unix://{WORK}/csi.sock", "--node-id",
                               "bench", "--mountd-socket", f"{WORK}/mountd.sock"],
                              stdout=log, stderr=subprocess.STDOUT)
    targets = []
    try:
        wait_for("the plugin's socket", lambda: os.path.exists(f"{WORK}/csi.sock"))

        def pod(i):
            t = f"{WORK}/pods/{i}/volumes/kubernetes.io~csi/model/mount"
            os.makedirs(os.path.dirname(t), exist_ok=True)
            kubelet("publish", f"csi-{i}", t, REPO, "r3")
            assert mounted(t)
            targets.append((f"csi-{i}", t))
            return t

        drop_caches()
        first, n = whole(pod(0))
        assert n == total, (n, total)
        t = time.perf_counter()
        wait_for("the node's file cache", lambda: cache_bytes() >= want_cache, 600)
        fill = time.perf_counter() - t
        plain, second = [], []
        for i in range(1, ROUNDS + 1):
            drop_caches()
            plain.append(whole(f"{SERIES}/plain/r3")[0])
            target = pod(i)
            drop_caches()
            mbs, n = whole(target)
            assert n == total, (n, total)
            second.append(mbs)
        res = {"rounds": ROUNDS, "bytes": total, "first_pod_cold_mbs": first,
               "file_cache_filled_after_s": fill,
               "plain_cold_mbs": statistics.median(plain),
               "next_pod_cold_mbs": statistics.median(second),
               "plain_all": plain, "next_pod_all": second}
        res["next_pod_vs_plain"] = res["next_pod_cold_mbs"] / res["plain_cold_mbs"]
        print(json.dumps(res, indent=1))
        print(f"\n| read of r3 ({total / MB:.0f} MB), page cache dropped | MB/s (median of {ROUNDS}) | vs plain |")
        print("|---|---|---|")
        print(f"| plain directory | {res['plain_cold_mbs']:.0f} | 1.00 |")
        print(f"| first pod's volume (store, node caches empty) | {first:.0f} | {first / res['plain_cold_mbs']:.2f} |")
        print(f"| a later pod's new volume (node file cache full) | {res['next_pod_cold_mbs']:.0f} | {res['next_pod_vs_plain']:.2f} |")
    finally:
        for vid, t in targets:
            subprocess.run([KUBELET, f"{WORK}/csi.sock", "unpublish", vid, t],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        plugin.terminate()
        plugin.wait()
        mountd.terminate()
        mountd.wait()


main()
