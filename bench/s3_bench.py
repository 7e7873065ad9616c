#!/usr/bin/env python3
"""The S3 benchmark: modelcas on a Garage server on loopback beside `rclone copy` of the
plain snapshots (every revision stored in full), in one invocation.

usage: s3_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR GARAGE_ENV_FILE
"""
import json, os, shutil, subprocess, sys, time

BIN, SERIES, WORK, GENV = sys.argv[1:5]
EXP = json.load(open(f"{SERIES}/expected.json"))
COMMIT = {r["name"]: r["commit"] for r in EXP["revisions"]}
R4_BYTES = [r for r in EXP["revisions"] if r["name"] == "r4"][0]["bytes"]
FLOOR = EXP["unique_bytes_floor"]
REPO = "demo-org/demo-llm"

g = {}
for line in open(GENV):
    k, v = line.replace("export ", "").strip().split("=", 1)
    g[k] = v


def env(cache=f"{WORK}/cache"):
    e = dict(os.environ)
    # rclone refuses AWS_CA_BUNDLE with its own HTTP transport; the endpoint is plain http
    e.pop("AWS_CA_BUNDLE", None)
    e.update(MODELCAS_STORE=f"s3://{g['MODELCAS_TEST_S3_BUCKET']}/bench", MODELCAS_INDEX=f"{WORK}/index",
             MODELCAS_CACHE_DIR=cache, MODELCAS_ENDPOINT_URL=g["MODELCAS_TEST_S3_ENDPOINT"], MODELCAS_REGION="garage",
             AWS_ACCESS_KEY_ID=g["MODELCAS_TEST_S3_KEY_ID"], AWS_SECRET_ACCESS_KEY=g["MODELCAS_TEST_S3_SECRET"],
             RCLONE_CONFIG_GARAGE_TYPE="s3", RCLONE_CONFIG_GARAGE_PROVIDER="Other",
             RCLONE_CONFIG_GARAGE_ENDPOINT=g["MODELCAS_TEST_S3_ENDPOINT"], RCLONE_CONFIG_GARAGE_REGION="garage",
             RCLONE_CONFIG_GARAGE_ACCESS_KEY_ID=g["MODELCAS_TEST_S3_KEY_ID"],
             RCLONE_CONFIG_GARAGE_SECRET_ACCESS_KEY=g["MODELCAS_TEST_S3_SECRET"], RCLONE_CONFIG_GARAGE_FORCE_PATH_STYLE="true")
    return e


def run(*args, **kw):
    return subprocess.run(args, check=True, env=kw.pop("env", env()), stdout=subprocess.PIPE, **kw).stdout


def timed(*args, **kw):
    os.sync()
    t = time.perf_counter()
    run(*args, **kw)
    return time.perf_counter() - t


def drop_caches():
    os.sync()
    open("/proc/sys/vm/drop_caches", "w").write("3\n")


def read_tree(root):
    n = 0
    for dp, _, fs in os.walk(root):
        for f in fs:
            with open(os.path.join(dp, f), "rb", buffering=0) as h:
                while True:
                    b = h.read(1 << 20)
                    if not b:
                        break
                    n += len(b)
    return n


def rclone_size(path):
    out = json.loads(run("rclone", "size", "--json", path))
    return out["bytes"]


def mounted(p):
    return any(l.split(" ")[4] == os.path.realpath(p) for l in open("/proc/self/mountinfo"))


def mount_read(cache):
    mnt = f"{WORK}/mnt"
    os.makedirs(mnt, exist_ok=True)
    # An empty node file cache of its own: the default one (~/.cache/modelcas/files) keeps
    # whole files by sha256 across runs, and r4's files left there by an earlier run made
    # a "cold" read a read of local files.
    files = f"{WORK}/files-{time.time_ns()}"
    e = dict(env(cache), MODELCAS_FILE_CACHE=files)
    proc = subprocess.Popen([BIN, "mount", mnt], env=e, stderr=subprocess.DEVNULL)
    while not mounted(mnt):
        time.sleep(0.02)
    drop_caches()
    t = time.perf_counter()
    n = read_tree(f"{mnt}/{REPO}/r4")
    secs = time.perf_counter() - t
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(files, ignore_errors=True)
    assert n == R4_BYTES, (n, R4_BYTES)
    return secs


def main():
    res = {}
    # uploads
    res["mc_r1"] = timed(BIN, "-q", "ingest", f"{SERIES}/plain/r1", "--repo", REPO, "--revision", COMMIT["r1"], "--ref", "r1")
    res["mc_rest"] = sum(timed(BIN, "-q", "ingest", f"{SERIES}/plain/{r}", "--repo", REPO, "--revision", COMMIT[r], "--ref", r)
                         for r in ["r2", "r3", "r4"])
    res["mc_bytes"] = rclone_size("garage:modelcas/bench")
    res["rc_r1"] = timed("rclone", "copy", f"{SERIES}/plain/r1", "garage:modelcas/rclone/r1")
    res["rc_rest"] = sum(timed("rclone", "copy", f"{SERIES}/plain/{r}", f"garage:modelcas/rclone/{r}") for r in ["r2", "r3", "r4"])
    res["rc_bytes"] = rclone_size("garage:modelcas/rclone")
    # reads of r4
    shutil.rmtree(f"{WORK}/cache", ignore_errors=True)
    res["mc_mount_cold"] = mount_read(f"{WORK}/cache")
    res["mc_mount_warm"] = mount_read(f"{WORK}/cache")
    shutil.rmtree(f"{WORK}/cache2", ignore_errors=True)
    drop_caches()
    t = time.perf_counter()
    run(BIN, "-q", "checkout", f"{REPO}@r4", f"{WORK}/co", env=env(f"{WORK}/cache2"))
    read_tree(f"{WORK}/co")
    res["mc_checkout_read"] = time.perf_counter() - t
    drop_caches()
    t = time.perf_counter()
    run("rclone", "copy", "garage:modelcas/rclone/r4", f"{WORK}/rc-r4")
    read_tree(f"{WORK}/rc-r4")
    res["rc_download_read"] = time.perf_counter() - t
    json.dump(res, open(f"{WORK}/s3_bench.json", "w"), indent=2)
    print(f"Garage on loopback; series {EXP['params']['size_mib']} MiB, unique floor {FLOOR / 2**20:.1f} MiB, r4 {R4_BYTES / 2**20:.1f} MiB")
    print("| | modelcas | rclone copy |")
    print("|---|---|---|")
    print(f"| upload r1 (s) | {res['mc_r1']:.2f} | {res['rc_r1']:.2f} |")
    print(f"| upload r2..r4 (s) | {res['mc_rest']:.2f} | {res['rc_rest']:.2f} |")
    print(f"| bytes in the bucket / floor | {res['mc_bytes'] / FLOOR:.3f} | {res['rc_bytes'] / FLOOR:.3f} |")
    print(f"| r4 read cold (s) | mount {res['mc_mount_cold']:.2f}; checkout + read {res['mc_checkout_read']:.2f} | download + read {res['rc_download_read']:.2f} |")
    print(f"| r4 read, node cache warm, page cache dropped (s) | mount {res['mc_mount_warm']:.2f} | |")
    print()
    print("| target | measured |")
    print("|---|---|")
    print(f"| bytes stored for r1..r4 below the unique floor | {res['mc_bytes'] / FLOOR:.3f}x the floor (rclone {res['rc_bytes'] / FLOOR:.3f}x) |")
    print(f"| cold mount read of r4 at least 1.5x faster than rclone download-then-read | {res['rc_download_read'] / res['mc_mount_cold']:.2f}x |")
    print(f"| warm node cache at least 3x faster than cold | {res['mc_mount_cold'] / res['mc_mount_warm']:.2f}x |")


if __name__ == "__main__":
    main()
