#!/usr/bin/env python3
"""Two builds of modelcas on a re-ingest of unchanged files, in one invocation (issue 26):
what binding the stamps to the boot and the mount costs the ingest that takes files unread.

usage: reingest_ab.py BIN_A BIN_B WORK_DIR [ROUNDS] [FILES]

Makes FILES files (default 5,000) of 1-16 KiB in 50 directories under WORK_DIR (on the
disk: stamps are taken on ext4, xfs and btrfs only), waits until they have been still for
the 2 s a stamp needs, ingests them once with each binary into its own store and index,
then times ROUNDS (default 7) re-ingests of each, alternated (A, B, B, A, ...) so that the
load's drift falls on both; the page cache stays warm (what is timed is the per-file work:
discovery, the stamp, the index lookups, the manifest). Prints the median wall time and
CPU time (user + system, less moved by other load) of each, B / A for both, and
files_unchanged of the last run of each (every file must be taken unread).
"""
import json, os, random, resource, shutil, statistics, subprocess, sys, time

BIN_A, BIN_B, WORK = sys.argv[1:4]
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 7
FILES = int(sys.argv[5]) if len(sys.argv) > 5 else 5000


def make_files(src):
    rng = random.Random(26)
    for i in range(FILES):
        d = f"{src}/d{i % 50:02d}"
        os.makedirs(d, exist_ok=True)
        with open(f"{d}/f{i:05d}.bin", "wb") as f:
            f.write(rng.randbytes(rng.randint(1024, 16384)))


def ingest(binary, tag, ref):
    env = dict(os.environ, MODELCAS_STORE=f"{WORK}/{tag}/store", MODELCAS_INDEX=f"{WORK}/{tag}/index")
    t, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([binary, "-q", "ingest", f"{WORK}/src", "--repo", "bench/re", "--ref", ref,
                          "--json"], env=env, check=True, capture_output=True, text=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return time.monotonic() - t, cpu, json.loads(out)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    make_files(f"{WORK}/src")
    time.sleep(2.5)  # still for longer than SETTLE before the first read
    bins = {"A": BIN_A, "B": BIN_B}
    for tag, b in bins.items():
        ingest(b, tag, "first")
    times = {"A": [], "B": []}
    cpus = {"A": [], "B": []}
    last = {}
    for r in range(ROUNDS):
        order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
        for tag in order:
            dt, cpu, report = ingest(bins[tag], tag, f"r{r}")
            times[tag].append(dt)
            cpus[tag].append(cpu)
            last[tag] = report["files_unchanged"]
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpus.items()}
    print(json.dumps({"files": FILES, "rounds": ROUNDS,
                      "A_s": [round(x, 3) for x in times["A"]], "B_s": [round(x, 3) for x in times["B"]],
                      "A_median_s": round(med["A"], 3), "B_median_s": round(med["B"], 3),
                      "B_over_A": round(med["B"] / med["A"], 3),
                      "A_cpu_median_s": round(cmed["A"], 3), "B_cpu_median_s": round(cmed["B"], 3),
                      "B_over_A_cpu": round(cmed["B"] / cmed["A"], 3),
                      "files_unchanged": last}, indent=1))
    shutil.rmtree(WORK, ignore_errors=True)


main()
