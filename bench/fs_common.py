"""Helpers the read benchmarks share (bench/mount_bench.py, bench/mount_ab.py): dropping the
page cache, waiting for a mount, a cold `dd`, and the memory-mapped loads (a page walk, and
safetensors' `safe_open` + `get_tensor` as vLLM's default loader does it)."""
import json, mmap, os, re, struct, subprocess, time

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


def mmap_walk(path):
    """Touches one byte of every page of PATH through a private read-only mapping: MB/s."""
    size = os.path.getsize(path)
    t = time.perf_counter()
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE)
        s = 0
        for off in range(0, size, 4096):
            s += m[off]
        m.close()
    return size / (time.perf_counter() - t) / MB


def tensor_names(path, order):
    """The tensor names of a safetensors file, in file (offset) order or in name order."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    if order == "file":
        return sorted(h, key=lambda k: h[k]["data_offsets"][0])
    return sorted(h)


def st_walk(order, names_from):
    """safe_open + get_tensor of every tensor (numpy: memory-mapped, as vLLM's default
    loader), visiting tensors in `order`; the names are read from the plain copy
    `names_from` (outside the timed part). Returns fn(path) -> MB/s."""
    def walk(path):
        from safetensors import safe_open
        import ml_dtypes  # noqa: F401  numpy learns bfloat16
        names = tensor_names(names_from, order)
        size = os.path.getsize(path)
        t = time.perf_counter()
        with safe_open(path, framework="numpy") as f:
            for k in names:
                f.get_tensor(k)
        return size / (time.perf_counter() - t) / MB
    return walk


def on_fresh_ext4(d, run):
    """run(mountpoint) on a new ext4 file system (a 2 GiB loop device file under d: no
    history of deletions), unmounted and removed after; its result."""
    img, mnt = f"{d}/fs.img", f"{d}/fs"
    with open(img, "wb") as f:
        f.truncate(2 << 30)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    try:
        return run(mnt)
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.remove(img)


def children(pid):
    """The child processes of every thread of pid (the FUSE server of a `modelcas mount`
    is a child of its supervisor thread)."""
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(x) for x in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            pass
    return out
