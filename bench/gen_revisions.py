#!/usr/bin/env python3
"""Generate a realistic series of Hugging Face model revisions for benchmarks and tests.

The data imitates what a model repository on the Hub looks like over time:

  r1  base release: sharded bf16 safetensors + index json + config/tokenizer files
  r2  fine-tune: the tensors of the last quarter of the layers change, everything else is identical
  r3  re-shard: the same tensors as r2, written into a different number of shards
      (every byte offset moves, so whole-file and fixed-size dedup find nothing; CDC should)
  r4  metadata-only commit: generation_config.json changes, the weights are untouched

Weights are bf16 drawn from N(0, 0.02), like trained transformer weights, so the
exponent bytes compress a little and the mantissa bytes do not.

Two layouts are written side by side under OUT:
  OUT/plain/<rev>/...                          one plain directory per revision (like `hf download --local-dir`)
  OUT/hub/models--<org>--<name>/{blobs,refs,snapshots}/  the Hugging Face cache layout, with
      relative symlinks from snapshots/<commit>/<path> to blobs/<sha256 or git-sha1>

OUT/expected.json lists every revision: commit sha, files with size and sha256, and the
number of unique bytes across all revisions (the floor for a deduplicating store).

This is the project's own copy of the team's reference generator (shared/bench/gen_revisions.py),
so that a fresh clone can run its tests and benchmarks without anything outside the repository.
It must write exactly the same series: the integration test `generator_matches_reference`
compares the two outputs whenever the reference is present beside the checkout.

Usage: gen_revisions.py OUT [--size-mib 512] [--layers 16] [--seed 0] [--repo demo-org/demo-llm]
"""
import argparse, hashlib, json, os, struct, sys
import numpy as np


def bf16(rng, shape, std=0.02):
    x = rng.standard_normal(size=shape, dtype=np.float32) * std
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def model_tensors(rng, layers, hidden, vocab):
    """Ordered (name, shape) list of a small Llama-like model."""
    t = [("model.embed_tokens.weight", (vocab, hidden))]
    inter = hidden * 8 // 3 // 64 * 64
    for i in range(layers):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", (hidden,)),
              (p + "self_attn.q_proj.weight", (hidden, hidden)),
              (p + "self_attn.k_proj.weight", (hidden // 4, hidden)),
              (p + "self_attn.v_proj.weight", (hidden // 4, hidden)),
              (p + "self_attn.o_proj.weight", (hidden, hidden)),
              (p + "post_attention_layernorm.weight", (hidden,)),
              (p + "mlp.gate_proj.weight", (inter, hidden)),
              (p + "mlp.up_proj.weight", (inter, hidden)),
              (p + "mlp.down_proj.weight", (hidden, inter))]
    t += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return t


def safetensors_bytes(items):
    """items: list of (name, np.uint16 array) -> bytes of a bf16 safetensors file."""
    header, off = {}, 0
    for name, arr in items:
        n = arr.nbytes
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(a.tobytes() for _, a in items)


def shard(tensors, n_shards):
    """Split an ordered dict of tensors into n_shards files of similar size."""
    total = sum(a.nbytes for a in tensors.values())
    files, cur, cur_bytes, limit = [], [], 0, total / n_shards
    for name, arr in tensors.items():
        if cur and cur_bytes + arr.nbytes / 2 > limit and len(files) < n_shards - 1:
            files.append(cur); cur, cur_bytes = [], 0
        cur.append((name, arr)); cur_bytes += arr.nbytes
    files.append(cur)
    out, weight_map = {}, {}
    for i, items in enumerate(files):
        fname = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        out[fname] = safetensors_bytes(items)
        for name, _ in items:
            weight_map[name] = fname
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    out["model.safetensors.index.json"] = (json.dumps(index, indent=2) + "\n").encode()
    return out


def text_files(rng, layers, hidden, vocab, gen_temp):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
           "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": hidden // 64,
           "num_key_value_heads": hidden // 256, "vocab_size": vocab}
    words = ["".join(chr(97 + c) for c in rng.integers(0, 26, size=rng.integers(2, 9))) for _ in range(vocab)]
    tok = {"version": "1.0", "model": {"type": "BPE", "vocab": {w + str(i): i for i, w in enumerate(words)}}}
    return {
        "config.json": (json.dumps(cfg, indent=2) + "\n").encode(),
        "generation_config.json": (json.dumps({"temperature": gen_temp, "top_p": 0.9}, indent=2) + "\n").encode(),
        "tokenizer.json": json.dumps(tok).encode(),
        "tokenizer_config.json": b'{"model_max_length": 4096, "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}\n',
        "README.md": b"# demo-llm\nA generated model for storage benchmarks.\n",
    }


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_revision(out, repo, rev_name, commit, files, lfs_min=10 * 1024 * 1024):
    plain = os.path.join(out, "plain", rev_name)
    org, name = repo.split("/")
    hub = os.path.join(out, "hub", f"models--{org}--{name}")
    snap = os.path.join(hub, "snapshots", commit)
    os.makedirs(os.path.join(hub, "blobs"), exist_ok=True)
    listing = []
    for path, data in sorted(files.items()):
        sha256 = hashlib.sha256(data).hexdigest()
        etag = sha256 if len(data) >= lfs_min or path.endswith(".safetensors") else git_blob_sha1(data)
        p = os.path.join(plain, path); os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f: f.write(data)
        blob = os.path.join(hub, "blobs", etag)
        if not os.path.exists(blob):
            with open(blob, "wb") as f: f.write(data)
        link = os.path.join(snap, path); os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
        listing.append({"path": path, "size": len(data), "sha256": sha256, "hub_etag": etag})
    return listing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out"); ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--layers", type=int, default=16); ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repo", default="demo-org/demo-llm")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    vocab = 32000 if a.size_mib >= 128 else 4096
    # pick hidden so that the model is about size-mib (bf16 = 2 bytes/param)
    target = a.size_mib * 1024 * 1024 / 2
    hidden = 64
    while True:
        params = sum(int(np.prod(s)) for _, s in model_tensors(rng, a.layers, hidden + 64, vocab))
        if params > target: break
        hidden += 64
    spec = model_tensors(rng, a.layers, hidden, vocab)
    base = {n: bf16(rng, s) for n, s in spec}
    tuned = dict(base)
    first_tuned = a.layers - a.layers // 4
    for n, s in spec:
        if any(n.startswith(f"model.layers.{i}.") for i in range(first_tuned, a.layers)) or n == "lm_head.weight":
            tuned[n] = bf16(rng, s)
    commits = {r: hashlib.sha1(f"{a.repo}@{a.seed}@{r}".encode()).hexdigest() for r in ("r1", "r2", "r3", "r4")}
    revs = {
        "r1": {**shard(base, 4), **text_files(np.random.default_rng(a.seed + 1), a.layers, hidden, vocab, 0.7)},
        "r2": {**shard(tuned, 4), **text_files(np.random.default_rng(a.seed + 1), a.layers, hidden, vocab, 0.7)},
        "r3": {**shard(tuned, 3), **text_files(np.random.default_rng(a.seed + 1), a.layers, hidden, vocab, 0.7)},
        "r4": {**shard(tuned, 3), **text_files(np.random.default_rng(a.seed + 1), a.layers, hidden, vocab, 0.6)},
    }
    expected = {"repo": a.repo, "revisions": []}
    for r, files in revs.items():
        listing = write_revision(a.out, a.repo, r, commits[r], files)
        expected["revisions"].append({"name": r, "commit": commits[r], "files": listing,
                                      "bytes": sum(f["size"] for f in listing)})
    org, name = a.repo.split("/")
    refs = os.path.join(a.out, "hub", f"models--{org}--{name}", "refs")
    os.makedirs(refs, exist_ok=True)
    with open(os.path.join(refs, "main"), "w") as f: f.write(commits["r4"])
    # the floor for any deduplicating store: every distinct tensor and small file once
    uniq = {hashlib.sha256(arr.tobytes()).hexdigest(): arr.nbytes for d in (base, tuned) for arr in d.values()}
    small = {hashlib.sha256(v).hexdigest(): len(v) for files in revs.values() for k, v in files.items()
             if not k.endswith(".safetensors")}
    expected["unique_tensor_bytes"] = sum(uniq.values())
    expected["unique_bytes_floor"] = sum(uniq.values()) + sum(small.values())
    expected["total_bytes"] = sum(r["bytes"] for r in expected["revisions"])
    expected["params"] = {"size_mib": a.size_mib, "layers": a.layers, "hidden": hidden, "seed": a.seed}
    with open(os.path.join(a.out, "expected.json"), "w") as f: json.dump(expected, f, indent=2)
    print(f"wrote {a.out}: 4 revisions, {expected['total_bytes'] / 2**20:.0f} MiB in all, "
          f"unique floor {expected['unique_bytes_floor'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
