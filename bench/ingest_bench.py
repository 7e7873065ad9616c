#!/usr/bin/env python3
"""The store benchmark: modelcas beside borg 1.2 and restic on the same generated series, in
one invocation, every target figure a ratio against a baseline measured alongside it.

usage: ingest_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR [ROUNDS]

Each round runs, in turn: `cp -r` of r1 (and `cp -r && sync`), then for each tool a fresh
repository with r1, then r2, r3, r4, then a checkout/extract of r4 with the page cache
dropped, and a `cp -r` of the plain r4 with the page cache dropped (the baseline of issue 15's
checkout row: both read cold and neither syncs). Figures are medians over the rounds (the machine is shared and noisy). Peak memory
is the largest resident set seen. `sync` runs before every timed step so that one step's
writeback does not land on the next.
"""
import json, os, shutil, statistics, subprocess, sys, time

BIN, SERIES, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
EXP = json.load(open(f"{SERIES}/expected.json"))
REVS = ["r1", "r2", "r3", "r4"]
COMMIT = {r["name"]: r["commit"] for r in EXP["revisions"]}
R4_BYTES = [r for r in EXP["revisions"] if r["name"] == "r4"][0]["bytes"]
FLOOR = EXP["unique_bytes_floor"]


def env(extra=None):
    e = dict(os.environ)
    e.update(MODELCAS_STORE=f"{WORK}/mc", MODELCAS_INDEX=f"{WORK}/mc-index", BORG_REPO=f"{WORK}/borg",
             BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes", RESTIC_REPOSITORY=f"{WORK}/restic",
             RESTIC_PASSWORD="bench")
    e.update(extra or {})
    return e


def timed(cmd, cwd=None):
    """Seconds and peak RSS (KiB) of cmd, after a sync."""
    os.sync()
    out = f"{WORK}/time.txt"
    t = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out] + cmd, cwd=cwd, env=env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    secs = time.perf_counter() - t
    return secs, int(open(out).read().split()[-1])


def drop_caches():
    os.sync()
    open("/proc/sys/vm/drop_caches", "w").write("3\n")


def du(path):
    return int(subprocess.run(["du", "-sb", path], check=True, stdout=subprocess.PIPE).stdout.split()[0])


def warm():
    for r in REVS:
        d = f"{SERIES}/plain/{r}"
        for f in os.listdir(d):
            with open(f"{d}/{f}", "rb") as h:
                while h.read(1 << 24):
                    pass


def clean(*paths):
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def one_round():
    res, rss = {}, {}
    warm()
    clean(f"{WORK}/cp")
    res["cp"], _ = timed(["cp", "-r", f"{SERIES}/plain/r1", f"{WORK}/cp"])
    clean(f"{WORK}/cp")
    res["cpsync"], _ = timed(["sh", "-c", f"cp -r '{SERIES}/plain/r1' '{WORK}/cp' && sync"])
    clean(f"{WORK}/cp", f"{WORK}/mc", f"{WORK}/mc-index", f"{WORK}/borg", f"{WORK}/restic", f"{WORK}/co-mc", f"{WORK}/co-borg")
    warm()
    for r in REVS:
        res[f"mc-{r}"], rss[f"mc-{r}"] = timed([BIN, "-q", "ingest", f"{SERIES}/plain/{r}", "--repo", "demo-org/demo-llm",
                                                "--revision", COMMIT[r], "--ref", r])
    subprocess.run(["borg", "init", "--encryption=none", f"{WORK}/borg"], env=env(), check=True)
    for r in REVS:
        res[f"borg-{r}"], _ = timed(["borg", "create", "--compression", "zstd,3", f"::{r}", "."], cwd=f"{SERIES}/plain/{r}")
    subprocess.run(["restic", "init", "-q"], env=env(), check=True, stdout=subprocess.DEVNULL)
    for r in REVS:
        res[f"restic-{r}"], _ = timed(["restic", "backup", "-q", "."], cwd=f"{SERIES}/plain/{r}")
    drop_caches()
    res["mc-checkout"], rss["mc-checkout"] = timed([BIN, "-q", "checkout", "demo-org/demo-llm@r4", f"{WORK}/co-mc"])
    clean(f"{WORK}/cp")
    drop_caches()
    res["cp-r4-cold"], _ = timed(["cp", "-r", f"{SERIES}/plain/r4", f"{WORK}/cp"])
    clean(f"{WORK}/cp")
    os.makedirs(f"{WORK}/co-borg")
    drop_caches()
    res["borg-extract"], _ = timed(["borg", "extract", "::r4"], cwd=f"{WORK}/co-borg")
    stats = json.loads(subprocess.run([BIN, "stats", "--json"], env=env(), check=True, stdout=subprocess.PIPE).stdout)
    res["mc-bytes"] = stats["stored_bytes"]
    res["borg-bytes"] = du(f"{WORK}/borg")
    res["restic-bytes"] = du(f"{WORK}/restic")
    # what was checked out is what went in
    for f in ["model-00001-of-00003.safetensors", "config.json"]:
        assert open(f"{WORK}/co-mc/{f}", "rb").read() == open(f"{SERIES}/plain/r4/{f}", "rb").read()
    return res, rss


def main():
    rounds = [one_round() for _ in range(ROUNDS)]
    med = {k: statistics.median(r[0][k] for r in rounds) for k in rounds[0][0]}
    peak = {k: max(r[1][k] for r in rounds) for k in rounds[0][1]}
    rest = lambda t: med[f"{t}-r2"] + med[f"{t}-r3"] + med[f"{t}-r4"]
    allr = lambda t: med[f"{t}-r1"] + rest(t)
    ing_rss = max(peak[f"mc-{r}"] for r in REVS) / 1024
    print(f"series: {EXP['params']['size_mib']} MiB, unique floor {FLOOR / 2**20:.1f} MiB, r4 {R4_BYTES / 2**20:.1f} MiB; "
          f"medians of {ROUNDS} rounds")
    print("| tool | ingest r1 (s) | ingest r2..r4 (s) | stored bytes / floor |")
    print("|---|---|---|---|")
    for t, name in [("mc", "modelcas"), ("borg", "borg 1.2 zstd,3"), ("restic", "restic")]:
        print(f"| {name} | {med[f'{t}-r1']:.2f} | {rest(t):.2f} | {med[f'{t}-bytes'] / FLOOR:.3f} |")
    print(f"| cp -r r1 | {med['cp']:.2f} | | |")
    print(f"| cp -r r1 && sync | {med['cpsync']:.2f} | | |")
    print()
    print("| target | measured |")
    print("|---|---|")
    print(f"| ingest at least 3x faster than borg | r1..r4 {allr('borg') / allr('mc'):.2f}x (r1 {med['borg-r1'] / med['mc-r1']:.2f}x, "
          f"r2..r4 {rest('borg') / rest('mc'):.2f}x); restic {allr('restic') / allr('mc'):.2f}x |")
    print(f"| stored bytes at most 0.72x the floor | {med['mc-bytes'] / FLOOR:.3f}x (borg {med['borg-bytes'] / FLOOR:.3f}x, "
          f"restic {med['restic-bytes'] / FLOOR:.3f}x) |")
    print(f"| ingest of r1 within 2x the time of cp -r | {med['mc-r1'] / med['cp']:.2f}x cp -r; "
          f"{med['mc-r1'] / med['cpsync']:.2f}x cp -r && sync (ingest makes its packs durable) |")
    print(f"| checkout at least 10x faster than borg extract | {med['borg-extract'] / med['mc-checkout']:.2f}x "
          f"({R4_BYTES / med['mc-checkout'] / 1e6:.0f} MB/s vs {R4_BYTES / med['borg-extract'] / 1e6:.0f} MB/s, page cache dropped) |")
    print(f"| checkout of r4 at least 0.8 of a cold `cp -r` of the plain r4 (issue 15) | "
          f"{med['cp-r4-cold'] / med['mc-checkout']:.2f} ({R4_BYTES / med['mc-checkout'] / 1e6:.0f} MB/s vs "
          f"{R4_BYTES / med['cp-r4-cold'] / 1e6:.0f} MB/s, page cache dropped before each) |")
    print(f"| peak memory under 1 GiB | ingest {ing_rss:.0f} MiB, checkout {peak['mc-checkout'] / 1024:.0f} MiB |")
    json.dump({"medians": med, "peak_rss_kib": peak}, open(f"{WORK}/ingest_bench.json", "w"), indent=2)


if __name__ == "__main__":
    main()
