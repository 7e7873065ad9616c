#!/usr/bin/env python3
"""The release check's benchmark (issue 39, docs/design/release-check.md §9), in one
invocation: what the check costs an ingest, `modelcas check` alone, and its caps under a
large header and a large tokenizer.

usage: release_bench.py BIN_A BIN_B SERIES_DIR WORK_DIR [ROUNDS] [--parts ingest,check,stress]

  ingest  r1, then r2, r3 and r4 of the series (one `ingest` each, as the r1..r4 row of
          bench/ingest_ab.py: sources read into the page cache first, a fresh store every
          time), ROUNDS times each build, A and B alternating (the order swapped every
          round: the load drifts). A is the build before the check (it has none), B the
          build with it; B's `--metrics-file` gives the time its checks took
          (modelcas_release_check_time_seconds_total) and what they read.
  check   `modelcas check ORG/NAME@rN` with B on each of r1..r4 of a store B ingested:
          warm (a run before, then ROUNDS timed) and cold (page cache dropped before each
          of ROUNDS runs); wall time, modelcas_release_check_read_bytes_total and the store
          requests of each run (its --metrics-file).
  stress  one shard of 100,000 tensors (header JSON ~9 MB, zero data) and a 40 MB
          tokenizer.json (BPE, 262,144-entry vocabulary and its merges; loaded by the
          tokenizers library first, to prove it a real one): `modelcas check DIR` of each
          alone and of both, and `check ORG/NAME@REV` of both once ingested; wall time and
          peak RSS (/usr/bin/time -v). Targets: at most 0.5 s each, 128 MiB RSS.

Needs root (drop_caches); says so where it could not drop the cache. Prints markdown
tables; raw figures go to WORK_DIR/release_bench.json.
"""
import json, os, random, resource, shutil, statistics, struct, subprocess, sys, time

argv = [a for a in sys.argv[1:] if not a.startswith("--parts")]
PARTS = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--parts=")),
             "ingest,check,stress").split(",")
BIN_A, BIN_B, SERIES, WORK = argv[:4]
ROUNDS = int(argv[4]) if len(argv) > 4 else 5
REPO = "demo-org/demo-llm"
REVS = ["r1", "r2", "r3", "r4"]
COMMITS = {r["name"]: r["commit"] for r in json.load(open(f"{SERIES}/expected.json"))["revisions"]}
CAN_DROP = True
raw = {}


def drop_caches():
    global CAN_DROP
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        CAN_DROP = False


def env(st):
    return dict(os.environ, MODELCAS_STORE=f"{st}/store", MODELCAS_INDEX=f"{st}/index",
                MODELCAS_CACHE_DIR=f"{st}/cache", MODELCAS_FILE_CACHE=f"{st}/files")


def fresh(st):
    shutil.rmtree(st, ignore_errors=True)
    os.makedirs(st)


def warm(dirs):
    for d in dirs:
        for f in os.listdir(d):
            with open(f"{d}/{f}", "rb") as h:
                while h.read(1 << 24):
                    pass


def metrics(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        out[k] = out.get(k, 0.0) + float(v)
    return out


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


CPU = [0.0]  # CPU seconds (user + system) of the last run()


def run(cmd, st, ok=(0,), timed_v=False):
    """Seconds, and with timed_v the peak RSS (MiB) from /usr/bin/time -v; the process.
    CPU[0] is left at its CPU seconds (user + system)."""
    tf = f"{WORK}/time.txt"
    pre = ["/usr/bin/time", "-v", "-o", tf] if timed_v else []
    c0 = cpu_children()
    t = time.perf_counter()
    p = subprocess.run(pre + cmd, env=env(st), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    secs = time.perf_counter() - t
    CPU[0] = cpu_children() - c0
    if p.returncode not in ok:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.decode()[-3000:]}")
    rss = None
    if timed_v:
        for line in open(tf):
            if "Maximum resident set size" in line:
                rss = int(line.split()[-1]) / 1024
    return secs, rss, p


def ingest_series(tool, st, metrics_dir=None):
    """r1..r4 into a fresh store: total seconds, and B's summed metrics (with the CPU
    seconds of the four ingests under "cpu")."""
    fresh(st)
    total, m = 0.0, {"cpu": 0.0}
    for r in REVS:
        extra = ["--metrics-file", f"{metrics_dir}/{r}.prom"] if metrics_dir else []
        secs, _, _ = run([tool, "-q", *extra, "ingest", f"{SERIES}/plain/{r}", "--repo", REPO,
                          "--revision", COMMITS[r], "--ref", r], st)
        total += secs
        m["cpu"] += CPU[0]
        if metrics_dir:
            for k, v in metrics(f"{metrics_dir}/{r}.prom").items():
                m[k] = m.get(k, 0.0) + v
    return total, m


def part_ingest():
    dirs = [f"{SERIES}/plain/{r}" for r in REVS]
    st, md = f"{WORK}/st", f"{WORK}/metrics"
    os.makedirs(md, exist_ok=True)
    times, cpu = {"A": [], "B": []}, {"A": [], "B": []}
    check_s, check_read, check_runs = [], [], []
    for i in range(ROUNDS):
        order = (("A", BIN_A), ("B", BIN_B)) if i % 2 == 0 else (("B", BIN_B), ("A", BIN_A))
        for tag, tool in order:
            warm(dirs)
            secs, m = ingest_series(tool, st, md if tag == "B" else None)
            times[tag].append(secs)
            cpu[tag].append(m["cpu"])
            if tag == "B":
                check_s.append(m.get("modelcas_release_check_time_seconds_total", 0.0))
                check_read.append(m.get("modelcas_release_check_read_bytes_total", 0.0))
                check_runs.append(sum(v for k, v in m.items()
                                      if k.startswith("modelcas_release_check_runs_total")))
    shutil.rmtree(st, ignore_errors=True)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    ca, cb = statistics.median(cpu["A"]), statistics.median(cpu["B"])
    paired = statistics.median(y / x for x, y in zip(times["A"], times["B"]))
    raw["ingest"] = {"A": times["A"], "B": times["B"], "cpu": cpu, "check_seconds": check_s,
                     "check_read_bytes": check_read, "check_runs": check_runs}
    print(f"\n### ingest of r1..r4, {ROUNDS} rounds each build, alternating (medians)\n")
    print("| | A (no check) | B (check) | B / A |\n|---|---|---|---|")
    print(f"| r1..r4, wall (s) | {a:.2f} | {b:.2f} | {b / a:.3f} (paired by round: {paired:.3f}) |")
    print(f"| r1..r4, CPU user + system (s) | {ca:.2f} | {cb:.2f} | {cb / ca:.3f} |")
    print(f"\nB's checks per r1..r4 (metrics file, summed over the 4 ingests; median): "
          f"{statistics.median(check_s) * 1000:.1f} ms in {statistics.median(check_runs):.0f} checks, "
          f"{statistics.median(check_read) / 1e6:.2f} MB read")
    print("rounds (s): A " + " ".join(f"{x:.2f}" for x in times["A"]) +
          "; B " + " ".join(f"{x:.2f}" for x in times["B"]) +
          "; CPU A " + " ".join(f"{x:.2f}" for x in cpu["A"]) +
          "; CPU B " + " ".join(f"{x:.2f}" for x in cpu["B"]) +
          "; B's check ms " + " ".join(f"{x * 1000:.1f}" for x in check_s))


def part_check():
    st, md = f"{WORK}/st-check", f"{WORK}/metrics-check"
    os.makedirs(md, exist_ok=True)
    warm([f"{SERIES}/plain/{r}" for r in REVS])
    ingest_series(BIN_B, st)
    rows, floor = {}, {}
    for r in REVS:
        for mode in ("warm", "cold"):
            secs, reads, reqs, ls = [], [], [], []
            if mode == "warm":
                run([BIN_B, "-q", "check", f"{REPO}@{r}"], st)
            for i in range(ROUNDS):
                # The floor: a command that opens the store and reads the manifest.
                if mode == "cold":
                    drop_caches()
                ls.append(run([BIN_B, "-q", "ls", f"{REPO}@{r}"], st)[0])
                if mode == "cold":
                    drop_caches()
                f = f"{md}/{r}-{mode}-{i}.prom"
                s, _, _ = run([BIN_B, "-q", "--metrics-file", f, "check", f"{REPO}@{r}"], st)
                m = metrics(f)
                secs.append(s)
                reads.append(m.get("modelcas_release_check_read_bytes_total", 0.0))
                reqs.append(sum(v for k, v in m.items() if k.startswith("modelcas_backend_requests_total")))
            rows[(r, mode)] = (secs, reads, reqs)
            floor[(r, mode)] = ls
    shutil.rmtree(st, ignore_errors=True)
    raw["check"] = {f"{r} {mode}": v + (floor[(r, mode)],) for (r, mode), v in rows.items()}
    print(f"\n### `modelcas check {REPO}@rN` (B), {ROUNDS} runs each (medians)"
          + ("" if CAN_DROP else " — drop_caches refused: the cold rows are warm") + "\n")
    print("| revision | warm (ms) | cold (ms) | `ls ORG/NAME@rN` warm / cold (ms), the floor | "
          "read by the check | store requests |\n|---|---|---|---|---|---|")
    med = lambda xs: statistics.median(xs) * 1000
    for r in REVS:
        w, c = rows[(r, "warm")], rows[(r, "cold")]
        print(f"| {r} | {med(w[0]):.0f} | {med(c[0]):.0f} | {med(floor[(r, 'warm')]):.0f} / "
              f"{med(floor[(r, 'cold')]):.0f} | {statistics.median(c[1]) / 1e3:.0f} kB | "
              f"{statistics.median(c[2]):.0f} |")


# ---- stress inputs ----

def write_shard(path, n):
    """A safetensors file of n tensors of one F32 each (zero data)."""
    header = {"__metadata__": {"format": "pt"}}
    for i in range(n):
        header[f"model.layers.{i // 10}.block.{i % 10}.weight"] = {
            "dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(bytes(4 * n))
    return len(h)


def byte_alphabet():
    """GPT-2's byte-level alphabet: 256 printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tokenizer(path, vocab_size=262_144, max_len=49, seed=39):
    """A BPE tokenizer.json: the 256 byte-level characters, then merges of two earlier
    tokens up to vocab_size (each merge's parts and result in the vocabulary)."""
    rng = random.Random(seed)
    toks = byte_alphabet()
    seen = set(toks)
    merges = []
    while len(toks) < vocab_size:
        a, b = toks[rng.randrange(len(toks))], toks[rng.randrange(len(toks))]
        t = a + b
        if len(t) > max_len or t in seen:
            continue
        seen.add(t)
        toks.append(t)
        merges.append([a, b])
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {t: i for i, t in enumerate(toks)}, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    return len(toks), len(merges)


CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 262144,
          "torch_dtype": "float32"}


def part_stress():
    d = f"{WORK}/stress"
    shutil.rmtree(d, ignore_errors=True)
    dirs = {k: f"{d}/{k}" for k in ("shard", "tokenizer", "both")}
    for p in dirs.values():
        os.makedirs(p)
        json.dump(CONFIG, open(f"{p}/config.json", "w"))
    hlen = write_shard(f"{dirs['shard']}/model.safetensors", 100_000)
    vocab, merges = write_tokenizer(f"{dirs['tokenizer']}/tokenizer.json")
    shutil.copy(f"{dirs['shard']}/model.safetensors", f"{dirs['both']}/model.safetensors")
    shutil.copy(f"{dirs['tokenizer']}/tokenizer.json", f"{dirs['both']}/tokenizer.json")
    tok_bytes = os.path.getsize(f"{dirs['tokenizer']}/tokenizer.json")
    try:  # the tokenizers library loads it: a real tokenizer, not a file we think is one
        import tokenizers
        t0 = time.perf_counter()
        tokenizers.Tokenizer.from_file(f"{dirs['tokenizer']}/tokenizer.json")
        lib = f"tokenizers {tokenizers.__version__} loads it in {time.perf_counter() - t0:.2f} s"
    except ImportError:
        lib = "tokenizers not installed: not loaded by the library"
    try:
        import safetensors
        from safetensors import safe_open
        with safe_open(f"{dirs['shard']}/model.safetensors", "np") as f:
            n = len(list(f.keys()))
        lib += f"; safetensors {safetensors.__version__} opens the shard ({n} tensors)"
    except ImportError:
        pass
    st = f"{d}/st"
    fresh(st)
    run([BIN_B, "-q", "ingest", dirs["both"], "--repo", "bench/stress", "--revision", "3" * 40,
         "--ref", "main"], st, ok=(0, 1))
    rows = []
    for what, cmd in ((f"check DIR: the shard (header {hlen / 1e6:.1f} MB)", ["check", dirs["shard"]]),
                      (f"check DIR: tokenizer.json ({tok_bytes / 1e6:.1f} MB)", ["check", dirs["tokenizer"]]),
                      ("check DIR: both", ["check", dirs["both"]]),
                      ("check bench/stress@main: both, through the store", ["check", "bench/stress@main"])):
        secs, rss, outs = [], [], ""
        for _ in range(ROUNDS):
            s, m, p = run([BIN_B, "-q", *cmd], st, ok=(0, 1, 2), timed_v=True)
            secs.append(s)
            rss.append(m)
            outs = [x for x in p.stdout.decode().splitlines() if not x.startswith("warning")][:2]
        rows.append((what, statistics.median(secs), max(rss), "; ".join(outs).replace(d + "/", "")))
    raw["stress"] = {"rows": rows, "header_bytes": hlen, "tokenizer_bytes": tok_bytes,
                     "vocab": vocab, "merges": merges, "library": lib}
    print(f"\n### stress: 100,000 tensors; a {tok_bytes / 1e6:.1f} MB tokenizer.json "
          f"({vocab:,} tokens, {merges:,} merges), {ROUNDS} runs each (median time, max RSS)\n")
    print(f"({lib})\n")
    print("| `modelcas` | time (s) | peak RSS (MiB) | first line |\n|---|---|---|---|")
    for what, s, m, first in rows:
        print(f"| {what} | {s:.3f} | {m:.0f} | {first[:200]} |")
    shutil.rmtree(d, ignore_errors=True)


def main():
    os.makedirs(WORK, exist_ok=True)
    print(f"A = {BIN_A}\nB = {BIN_B}\nload average at start {open('/proc/loadavg').read().split()[:3]}, "
          f"{os.cpu_count()} CPUs")
    if "ingest" in PARTS:
        part_ingest()
    if "check" in PARTS:
        part_check()
    if "stress" in PARTS:
        part_stress()
    print(f"\nload average at end {open('/proc/loadavg').read().split()[:3]}")
    json.dump(raw, open(f"{WORK}/release_bench.json", "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
