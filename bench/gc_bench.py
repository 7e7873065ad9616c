#!/usr/bin/env python3
"""gc cost as the store grows.

usage: gc_bench.py MODELCAS_BIN WORK_DIR SIZE_MIB ROUNDS
       (BENCH_S3_PREFIX=s3://bucket/prefix puts the stores on S3, with the usual
       MODELCAS_ENDPOINT_URL / AWS_* settings)

Two stores on the local backend (16 KiB chunks, 1 MiB packs, so that packs are many):
  small: 3 repositories, large: 12 repositories; each repository holds the generator's four
  revisions (seeded differently per repository) plus one metadata-only commit, with `main`
  on the newest: 15 and 60 revisions.
On each store, in order, per round:
  rebuild   `modelcas index rebuild`: reads every pack footer (the baseline: what a gc
            that re-reads every pack would pay at least)
  cold      first gc with no policy and an empty manifest cache (nothing to expire)
  nightly   the same again: nothing changed (manifests come from the local cache)
  expire    `rm` of the oldest revision of one repository, then gc: its packs are condemned
            (footers of those packs read) and partly dead ones rewritten
  delete    after the grace period (0 here), the next gc deletes what `expire` condemned
Figures: medians of wall time; request counts from gc's own report (LIST, GET, ranged GET,
PUT, DELETE) and bytes read. Ratios: large/small for each step, and step/rebuild.
"""
import json, os, shutil, statistics, subprocess, sys, time

BIN, WORK, SIZE, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
GEN = os.path.join(os.path.dirname(__file__), "gen_revisions.py")


def series(seed):
    d = f"{WORK}/series-{seed}"
    if not os.path.exists(f"{d}/expected.json"):
        subprocess.run([sys.executable, GEN, d, "--size-mib", str(SIZE), "--seed", str(seed),
                        "--repo", f"org{seed}/model"], check=True, stdout=subprocess.DEVNULL)
    return d, json.load(open(f"{d}/expected.json"))


S3 = os.environ.get("BENCH_S3_PREFIX")  # e.g. s3://bucket/bench: stores go there instead
RUN = str(int(time.time()))


def mc(store, *args, check=True):
    loc = f"{S3}-{RUN}-{os.path.basename(store)}" if S3 else f"{store}/store"
    env = dict(os.environ, MODELCAS_STORE=loc, MODELCAS_INDEX=f"{store}/index")
    return subprocess.run([BIN, "-q", *args], env=env, check=check, capture_output=True, text=True)


def build(name, repos):
    store = f"{WORK}/{name}"
    shutil.rmtree(store, ignore_errors=True)
    mc(store, "init", "--chunk-avg", "16384", "--pack-size", "1048576")
    for seed in range(repos):
        d, exp = series(seed)
        repo = f"org{seed}/model"
        for r in exp["revisions"]:
            mc(store, "ingest", f"{d}/plain/{r['name']}", "--repo", repo, "--revision", r["commit"])
        meta = f"{WORK}/meta-{seed}"
        shutil.rmtree(meta, ignore_errors=True)
        shutil.copytree(f"{d}/plain/r4", meta)
        with open(f"{meta}/README.md", "a") as f:
            f.write("\nmetadata-only commit\n")
        mc(store, "ingest", meta, "--repo", repo, "--ref", "main")
    return store


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def gc(store, *args):
    return json.loads(mc(store, "gc", "--json", "--grace", "0s", *args).stdout)


def measure(store):
    rows = {}
    def add(step, secs, rep):
        rows.setdefault(step, []).append((secs, rep))
    for rnd in range(ROUNDS):
        secs, _ = timed(lambda: mc(store, "index", "rebuild"))
        add("rebuild", secs, None)
        shutil.rmtree(f"{store}/index", ignore_errors=True)  # empty manifest cache
        secs, rep = timed(lambda: gc(store)); add("cold", secs, rep)
        secs, rep = timed(lambda: gc(store)); add("nightly", secs, rep)
        # One repository gets a new ref then loses an old one: one revision expires.
        repo = "org0/model"
        d, exp = series(0)
        victim = exp["revisions"][0]["commit"]  # r1, detached
        mc(store, "rm", f"{repo}@{victim}")
        secs, rep = timed(lambda: gc(store, "--keep-last", "5")); add("expire", secs, rep)
        secs, rep = timed(lambda: gc(store, "--keep-last", "5")); add("delete", secs, rep)
        # Put the revision back for the next round.
        mc(store, "ingest", f"{d}/plain/r1", "--repo", repo, "--revision", victim)
        gc(store); gc(store)
    out = {}
    for step, vals in rows.items():
        med = statistics.median(v[0] for v in vals)
        rep = vals[len(vals) // 2][1]
        out[step] = {"secs": med, "report": rep}
    return out


def main():
    small = build("small", 3)
    large = build("large", 12)
    res = {"small": measure(small), "large": measure(large)}
    for name in ("small", "large"):
        st = json.loads(mc(f"{WORK}/{name}", "stats", "--json").stdout)
        res[name]["stats"] = st
    print(json.dumps({k: {s: (v if s == "stats" else {"secs": v["secs"], "requests": (v["report"] or {}).get("requests"),
                                                         "manifests_fetched": (v["report"] or {}).get("manifests_fetched")})
                          for s, v in d.items()} for k, d in res.items()}, indent=1), file=sys.stderr)
    print(f"| step | small: s | small: LIST/GET/ranged/PUT/DEL, bytes read | large: s | large: LIST/GET/ranged/PUT/DEL, bytes read | large/small time | step / rebuild (large) |")
    print("|---|---|---|---|---|---|---|")
    for step in ("rebuild", "cold", "nightly", "expire", "delete"):
        cells = []
        for name in ("small", "large"):
            v = res[name][step]
            rq = (v["report"] or {}).get("requests")
            packs = res[name]["stats"]["packs"]
            reqs = (f"{rq['list']}/{rq['get']}/{rq['get_range']}/{rq['put']}/{rq['delete']}, {rq['bytes_read'] / 1024:.0f} KiB"
                    if rq else f"1/0/{2 * packs}/0/0 + {packs} HEAD (every footer)")
            cells += [f"{v['secs']:.3f}", reqs]
        ratio = res["large"][step]["secs"] / res["small"][step]["secs"]
        vs = res["large"][step]["secs"] / res["large"]["rebuild"]["secs"]
        print(f"| {step} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {ratio:.2f} | {vs:.2f} |")
    for name in ("small", "large"):
        st = res[name]["stats"]
        print(f"\n{name}: {st.get('commits')} revisions, {st.get('packs')} packs, {st.get('stored_bytes', 0) / 2**20:.1f} MiB stored")


main()
