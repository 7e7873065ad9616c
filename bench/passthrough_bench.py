#!/usr/bin/env python3
"""The node's whole-file cache and FUSE passthrough (issue 15), in one invocation beside the
plain directory: the first cold start on a node (file cache empty: chunks decoded, files
then made whole in the background), and the second (file cache full, fresh mount, page
cache dropped) with passthrough, with whole files read through the mount, and with the file
cache off. A fresh mount checks each entry at its first open (its chunks' BLAKE3, against
the manifest: read::file_cache::verify); the column "passthrough, checked" is the same
read on a mount that has already opened (and so checked) every entry before the page cache
was dropped, as on a node whose mount runs on: the ratio of the two is what the check costs
a second start. Every cold figure is a median over ROUNDS fresh mounts with the page cache
dropped; warm figures are the best of ROUNDS re-reads.

usage: passthrough_bench.py MODELCAS_BIN SERIES_DIR WORK_DIR [ROUNDS]
(WORK_DIR holds a store with r3 ingested as demo-org/demo-llm@r3: see bench/passthrough.sh)"""
import json, os, statistics, sys, time
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
sys.argv = ["mount_bench.py", sys.argv[1], sys.argv[2], sys.argv[3], str(rounds)]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mount_bench as mb

FILES = f"{mb.WORK}/files"
MIN_FILE_BYTES = 1 << 20
MODES = {
    "passthrough": {"MODELCAS_FILE_CACHE": FILES},
    "whole": {"MODELCAS_FILE_CACHE": FILES, "MODELCAS_NO_PASSTHROUGH": "true"},
    "stream": {"MODELCAS_FILE_CACHE_SIZE": "0"},
}


def cache_bytes():
    n = 0
    for dp, _, fs in os.walk(FILES):
        n += sum(os.path.getsize(os.path.join(dp, f)) for f in fs if not f.startswith("."))
    return n


def main():
    exp = json.load(open(f"{mb.SERIES}/expected.json"))
    r3 = [r for r in exp["revisions"] if r["name"] == "r3"][0]
    shard = max((f for f in r3["files"] if f["path"].endswith(".safetensors")), key=lambda f: f["size"])["path"]
    plain_dir = f"{mb.SERIES}/plain/r3"
    p, q = f"{plain_dir}/{shard}", f"{mb.REPO}/r3/{shard}"
    mb.PLAIN_SHARD = p
    # The file cache keeps files of at least 1 MiB (read::file_cache::MIN_FILE_BYTES)
    want = sum(f["size"] for f in r3["files"] if f["size"] >= MIN_FILE_BYTES)
    res, rss = {"shard": shard, "rounds": rounds}, []

    # First start on the node: the file cache is empty.
    m = mb.Mount("modelcas", f"{mb.WORK}/mnt", MODES["passthrough"])
    try:
        mb.drop_caches()
        res["first_cold_rev"] = mb.whole_rev(f"{mb.WORK}/mnt/{mb.REPO}/r3")
        t = time.perf_counter()
        while cache_bytes() < want:
            assert time.perf_counter() - t < 600, "the file cache did not fill"
            time.sleep(0.1)
        res["fill_seconds"] = time.perf_counter() - t
    finally:
        rss.append(m.rss_peak_mib())
        m.close()
    res["plain_cold_rev_first"] = mb.cold_plain(mb.whole_rev, plain_dir)

    reads = [("seq", mb.seq_read, p, q), ("rev", mb.whole_rev, plain_dir, f"{mb.REPO}/r3"),
             ("mmap", mb.mmap_walk, p, q), ("st_name", mb.st_walk("name"), p, q),
             ("rand4k", mb.random_4k, p, q),
             ("first_byte_ms", mb.first_byte_ms, f"{plain_dir}/config.json", f"{mb.REPO}/r3/config.json")]
    # The mount's own start (resolving the ref, reading the manifest) is left out of the
    # first-byte figure, as in mount_bench.py.
    listing = lambda: os.listdir(f"{mb.WORK}/mnt/{mb.REPO}/r3")
    root = f"{mb.WORK}/mnt/{mb.REPO}/r3"

    def check_all():
        """Opens every file the cache keeps once (each entry is checked at its first open)."""
        listing()
        for f in r3["files"]:
            if f["size"] >= MIN_FILE_BYTES:
                open(f"{root}/{f['path']}", "rb").close()
    for name, fn, pp, qq in reads:
        res[f"plain_{name}"] = mb.med(lambda: mb.cold_plain(fn, pp), rounds)
        for mode, extra in MODES.items():
            res[f"{mode}_{name}"] = mb.med(lambda: mb.cold_mount(fn, qq, rss, prepare=listing, extra_env=extra), rounds)
        for mode in ("passthrough", "whole") if name != "first_byte_ms" else ():
            res[f"{mode}_checked_{name}"] = mb.med(
                lambda: mb.cold_mount(fn, qq, rss, prepare=check_all, extra_env=MODES[mode]), rounds)
    # Warm: the file was just read whole.
    mb.seq_read(p)
    res["plain_warm"] = max(mb.seq_read(p) for _ in range(rounds))
    m = mb.Mount("modelcas", f"{mb.WORK}/mnt", MODES["passthrough"])
    mb.seq_read(f"{mb.WORK}/mnt/{q}")
    res["passthrough_warm"] = max(mb.seq_read(f"{mb.WORK}/mnt/{q}") for _ in range(rounds))
    rss.append(m.rss_peak_mib())
    m.close()
    res["rss_peak_mib"] = max(rss)
    json.dump(res, open(f"{mb.WORK}/passthrough_bench.json", "w"), indent=2)
    report(res, r3)


def report(res, r3):
    print(f"r3 ({r3['bytes'] / 2**20:.0f} MiB), largest shard {res['shard']}; medians of {res['rounds']} fresh mounts, page cache dropped")
    print(f"first start (file cache empty): whole revision {res['first_cold_rev']:.0f} MB/s "
          f"(plain {res['plain_cold_rev_first']:.0f} MB/s, {res['first_cold_rev'] / res['plain_cold_rev_first']:.2f}); "
          f"the cache was full {res['fill_seconds']:.1f} s after the read ended; "
          f"first start / a start with the file cache off: {res['first_cold_rev'] / res['stream_rev']:.2f}")
    print("| second start, cold | plain | passthrough | whole file, no passthrough | file cache off | passthrough / plain | whole / plain | off / plain |")
    print("|---|---|---|---|---|---|---|---|")
    for name, label in [("seq", "sequential 1 MiB, largest shard"), ("rev", "whole revision"), ("mmap", "mmap walk"),
                        ("st_name", "safe_open + get_tensor, name order"), ("rand4k", "4 KiB random reads")]:
        unit = "/s" if name == "rand4k" else " MB/s"
        v = [res[f"{k}_{name}"] for k in ("plain", "passthrough", "whole", "stream")]
        print(f"| {label} | " + " | ".join(f"{x:.0f}{unit}" for x in v) + " | " + " | ".join(f"{x / v[0]:.2f}" for x in v[1:]) + " |")
    v = [res[f"{k}_first_byte_ms"] for k in ("plain", "passthrough", "whole", "stream")]
    print("| first byte of config.json | " + " | ".join(f"{x:.2f} ms" for x in v) + " | | | |")
    print(f"| warm re-read, largest shard | {res['plain_warm']:.0f} MB/s | {res['passthrough_warm']:.0f} MB/s | | | {res['passthrough_warm'] / res['plain_warm']:.2f} | | |")
    print(f"peak RSS of the mount: {res['rss_peak_mib']:.0f} MiB")
    print()
    print("| second start, cold | passthrough, first open checks | passthrough, checked already | ratio | whole file, first open checks | whole file, checked already | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, label in [("seq", "sequential 1 MiB, largest shard"), ("rev", "whole revision"), ("mmap", "mmap walk"),
                        ("st_name", "safe_open + get_tensor, name order"), ("rand4k", "4 KiB random reads")]:
        unit = "/s" if name == "rand4k" else " MB/s"
        cells = []
        for mode in ("passthrough", "whole"):
            a, b = res[f"{mode}_{name}"], res[f"{mode}_checked_{name}"]
            cells += [f"{a:.0f}{unit}", f"{b:.0f}{unit}", f"{a / b:.2f}"]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
