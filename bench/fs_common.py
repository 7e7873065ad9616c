"""Helpers the read benchmarks share (bench/mount_bench.py, bench/mount_ab.py): dropping the
page cache, waiting for a mount, and a cold `dd`."""
import os, re, subprocess

MB = 1e6


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(l.split(" ")[4] == os.path.realpath(path) for l in f)


def dd_read(path):
    """`dd if=PATH of=/dev/null bs=1M`, MB/s from the bytes and seconds dd reports."""
    out = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], check=True,
                         stderr=subprocess.PIPE, text=True).stderr
    m = re.search(r"^(\d+) bytes .* copied, ([\d.,]+) s", out, re.M)
    assert m, f"dd said: {out}"
    return int(m[1]) / float(m[2].replace(",", ".")) / MB
