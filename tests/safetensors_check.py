#!/usr/bin/env python3
"""Loads every tensor of every safetensors shard under MOUNTED with safetensors.safe_open
(framework="numpy": memory-mapped, as vLLM's default loader does) and compares it with the
same tensor read from SOURCE by parsing the file by hand. numpy learns bfloat16 from
ml_dtypes (installed by scripts/install-deps.sh), as it does in a vLLM image."""
import json, os, struct, sys

import ml_dtypes  # noqa: F401  registers numpy's bfloat16
from safetensors import safe_open


def raw_tensors(path):
    """Tensors by name as raw bytes, parsed by hand from the safetensors header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            out[name] = (meta["dtype"], meta["shape"], f.read(b - a))
    return out


def main(mounted, source):
    shards = sorted(p for p in os.listdir(source) if p.endswith(".safetensors"))
    assert shards, "no shards"
    count = 0
    for shard in shards:
        want = raw_tensors(os.path.join(source, shard))
        path = os.path.join(mounted, shard)
        with safe_open(path, framework="numpy") as f:
            keys = list(f.keys())
            assert sorted(keys) == sorted(want), f"{shard}: tensor names differ"
            for k in keys:
                t = f.get_tensor(k)
                dtype, shape, raw = want[k]
                assert list(t.shape) == shape, f"{shard}/{k}: shape"
                assert str(t.dtype) == {"BF16": "bfloat16"}.get(dtype, str(t.dtype)), f"{shard}/{k}: dtype {t.dtype}"
                assert t.tobytes() == raw, f"{shard}/{k}: bytes differ"
                count += 1
    print(f"{count} tensors equal in {len(shards)} shards")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
