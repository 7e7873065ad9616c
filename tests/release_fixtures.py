#!/usr/bin/env python3
"""Fixtures for the release check (docs/design/release-check.md §8.2): a tiny Llama-shaped
model made by the real libraries, and copies of it damaged one way each.

    release_fixtures.py OUT      writes OUT/<variant>/ for every variant and OUT/expected.json
    release_fixtures.py --list   prints the variants and their expected problems (no files)

OUT must be missing or empty. Everything is seeded: two runs write byte-identical trees.

The model: 2 layers, hidden 64, vocab 512, BF16 in two shards written by
`safetensors.numpy.save_file` (through ml_dtypes) with their index; `config.json` and
`generation_config.json` as transformers writes them; a byte-level BPE `tokenizer.json`
trained by `tokenizers` (or, for the -spm variants, a `tokenizer.model` trained by
`sentencepiece`); `tokenizer_config.json` with a chat template; `special_tokens_map.json`.

Each variant's claim is PROVEN here with the library that owns the file, and the script
raises if one is not: the good variants load (`safe_open` + `get_tensor` of every tensor,
every index entry resolves, `Tokenizer.from_file(...).encode`,
`SentencePieceProcessor(model_file=...).encode`, `json.load` of every JSON file); the
damaged ones are refused by that library where there is one (`safe_open`/`get_tensor`,
`Tokenizer.from_file`, `SentencePieceProcessor`, `json.load`), or shown absent otherwise.

`expected.json` is the single source of truth for tests/release.rs:
    {"<variant>": {"verdict": "passed" | "warnings" | "failed",
                   "problems": [["<code>", "<path>"], ...]}}
with exactly the (code, path) pairs `modelcas check` must report (codes of §3.2).
"""
import io
import json
import os
import re
import struct
import sys
import time

import ml_dtypes
import numpy as np
import sentencepiece as spm
from safetensors import safe_open
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 39  # issue 39
LAYERS, HIDDEN, INTERMEDIATE, VOCAB = 2, 64, 128, 512
HEADS, KV_HEADS = 4, 2
HEAD_DIM = HIDDEN // HEADS
TRANSFORMERS_VERSION = "4.51.3"  # what config files say wrote them
SHARD = "model-{:05d}-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
CHAT_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PLAIN_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
TOKENIZER_FILES = ["tokenizer.json", "tokenizer.model", "tekken.json", "vocab.json", "vocab.txt"]

# Severity of each code used here (§3.2; tokenizer.structure is the lead's decision: a BPE
# tokenizer.json without "merges" is a warning).
WARNING_CODES = {"tokenizer.structure", "chat_template.missing", "config.unnamed"}

# The single table of variants: name -> (base variant or None, expected (code, path) pairs).
VARIANTS = {
    "good": (None, []),
    "good-spm": (None, []),
    "good-code": (None, []),
    "truncated-shard": ("good", [("safetensors.truncated", SHARD.format(2))]),
    "header-lie": ("good", [("safetensors.size", SHARD.format(1))]),
    "header-length-lie": ("good", [("safetensors.header-length", SHARD.format(1))]),
    "missing-shard": ("good", [("index.missing-file", INDEX)]),
    "index-extra-tensor": ("good", [("index.missing-tensor", INDEX)]),
    "broken-config": ("good", [("config.invalid", "config.json")]),
    "no-config": ("good", [("config.missing", "config.json")]),
    "broken-generation-config": ("good", [("json.invalid", "generation_config.json")]),
    "no-tokenizer": ("good", [("tokenizer.missing", "tokenizer.json")]),
    "broken-tokenizer": ("good", [("tokenizer.invalid", "tokenizer.json")]),
    "bpe-no-merges": ("good", [("tokenizer.structure", "tokenizer.json")]),
    "truncated-spm": ("good-spm", [("tokenizer.invalid", "tokenizer.model")]),
    "missing-code": ("good-code", [("auto_map.import", "attention.py")]),
    "no-chat-template": ("good", [("chat_template.missing", "tokenizer_config.json")]),
}


def verdict(problems):
    if any(code not in WARNING_CODES for code, _ in problems):
        return "failed"
    return "warnings" if problems else "passed"


def expected():
    return {
        name: {"verdict": verdict(probs), "problems": [list(p) for p in probs]}
        for name, (_, probs) in VARIANTS.items()
    }


# ---------------------------------------------------------------- writing helpers


def hf_json(obj):
    """JSON as transformers writes its config files: indent 2, sorted keys, a newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


def corpus(rng, lines):
    """Pseudo-English from a seeded RNG: words from syllables, Zipf-ish frequencies."""
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "qu", "xi", "ban", "dor", "fel",
            "gim", "hap", "jor", "lin", "mor", "nak", "pel", "rit", "sol", "tun", "wex", "th",
            "ing", "er", "ed", "st", "ch"]
    words = ["".join(rng.choice(syll, size=rng.integers(1, 4))) for _ in range(600)]
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    punct = [".", ".", ".", "?", "!", ","]
    out = []
    for _ in range(lines):
        n = int(rng.integers(4, 14))
        ws = rng.choice(words, size=n, p=weights)
        out.append(" ".join(ws).capitalize() + punct[int(rng.integers(len(punct)))])
    return out


# ---------------------------------------------------------------- the model


def tensors(rng):
    """The Llama tensor set, by shard: embeddings and layer 0 in 1; layer 1, norm, head in 2."""
    def w(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)

    def ones(n):
        return np.ones((n,), dtype=ml_dtypes.bfloat16)

    def layer(i):
        p = f"model.layers.{i}."
        return {
            p + "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": w(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": w(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": w(HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": ones(HIDDEN),
            p + "post_attention_layernorm.weight": ones(HIDDEN),
        }

    one = {"model.embed_tokens.weight": w(VOCAB, HIDDEN), **layer(0)}
    two = {**layer(1), "model.norm.weight": ones(HIDDEN), "lm_head.weight": w(VOCAB, HIDDEN)}
    return [one, two]


def config(bos, eos):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 2048,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def generation_config(bos, eos):
    return {
        "_from_model_config": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "transformers_version": TRANSFORMERS_VERSION,
    }


def write_weights(d, shards):
    weight_map, total = {}, 0
    for i, ts in enumerate(shards, 1):
        name = SHARD.format(i)
        save_file(ts, os.path.join(d, name), metadata={"format": "pt"})
        for k, t in ts.items():
            weight_map[k] = name
            total += t.nbytes
    write(d, INDEX, hf_json({"metadata": {"total_size": total}, "weight_map": weight_map}))


def added_token(content):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}


def special_token(content):
    """A token of special_tokens_map.json, as transformers writes it."""
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False}


def bpe_tokenizer(lines):
    """A byte-level BPE trained by tokenizers (as GPT-2 and Qwen2 are): ids 0..2 are the
    special tokens, then the 256 byte symbols, then merges up to VOCAB."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, min_frequency=2, show_progress=False, special_tokens=CHAT_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return tok


def write_good(d, lines, shards):
    tok = bpe_tokenizer(lines)
    tok.save(os.path.join(d, "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in CHAT_TOKENS}
    eos = ids["<|im_end|>"]
    write(d, "config.json", hf_json(config(None, eos)))
    write(d, "generation_config.json", hf_json(generation_config(None, eos)))
    write_weights(d, shards)
    write(d, "tokenizer_config.json", hf_json({
        "add_prefix_space": False,
        "added_tokens_decoder": {str(ids[t]): added_token(t) for t in CHAT_TOKENS},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHATML,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }))
    write(d, "special_tokens_map.json", hf_json({
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "eos_token": special_token("<|im_end|>"),
        "pad_token": special_token("<|endoftext|>"),
    }))


def write_good_spm(d, lines, shards):
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, vocab_size=300, model_type="bpe",
        character_coverage=1.0, normalization_rule_name="identity", num_threads=1,
        shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    write(d, "tokenizer.model", buf.getvalue())
    write(d, "config.json", hf_json(config(1, 2)))
    write(d, "generation_config.json", hf_json(generation_config(1, 2)))
    write_weights(d, shards)
    write(d, "tokenizer_config.json", hf_json({
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {"0": added_token("<unk>"), "1": added_token("<s>"),
                                 "2": added_token("</s>")},
        "bos_token": "<s>",
        "chat_template": PLAIN_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "extra_special_tokens": {},
        "legacy": False,
        "model_max_length": 2048,
        "pad_token": None,
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }))
    write(d, "special_tokens_map.json", hf_json({
        "bos_token": special_token("<s>"),
        "eos_token": special_token("</s>"),
        "unk_token": special_token("<unk>"),
    }))


CONFIGURATION_TINY = '''\
from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = "tiny"

    def __init__(self, vocab_size=512, hidden_size=64, num_hidden_layers=2, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        super().__init__(**kwargs)
'''

MODELING_TINY = '''\
import torch
from torch import nn
from transformers import PreTrainedModel

from .attention import TinyAttention
from .configuration_tiny import TinyConfig


class TinyForCausalLM(PreTrainedModel):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(TinyAttention(config) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids):
        h = self.embed(input_ids)
        for layer in self.layers:
            h = h + layer(h)
        return self.lm_head(h)
'''

ATTENTION = '''\
import torch
from torch import nn


class TinyAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)

    def forward(self, h):
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
'''

AUTO_MAP = {"AutoConfig": "configuration_tiny.TinyConfig",
            "AutoModelForCausalLM": "modeling_tiny.TinyForCausalLM"}


def write_good_code(d, lines, shards):
    write_good(d, lines, shards)
    cfg = json.loads(read(d, "config.json"))
    cfg["auto_map"] = AUTO_MAP
    write(d, "config.json", hf_json(cfg))
    write(d, "configuration_tiny.py", CONFIGURATION_TINY)
    write(d, "modeling_tiny.py", MODELING_TINY)
    write(d, "attention.py", ATTENTION)


# ---------------------------------------------------------------- damages


def cut(d, name, at):
    data = read(d, name)
    assert 0 < at < len(data)
    write(d, name, data[:at])


def header_lie(d):
    """Shard 1: the last digit of model.embed_tokens.weight's first dimension, 512 -> 513,
    in place (same header length): BF16 [513, 64] is 65,664 bytes, its range 65,536."""
    name = SHARD.format(1)
    data = bytearray(read(d, name))
    n = struct.unpack("<Q", data[:8])[0]
    i = data.index(b'"model.embed_tokens.weight"', 8, 8 + n)
    j = data.index(b'"shape":[512,', i, 8 + n) + len(b'"shape":[51')
    assert data[j:j + 1] == b"2"
    data[j:j + 1] = b"3"
    write(d, name, bytes(data))


def header_length_lie(d):
    """Shard 1: the first 8 bytes claim a header that ends 1,000 bytes past the end of the
    file. (N + 1,000 alone would stay inside this 140 KB file, and the check would see a
    header of JSON followed by tensor bytes: safetensors.header, not header-length.)"""
    name = SHARD.format(1)
    data = bytearray(read(d, name))
    data[:8] = struct.pack("<Q", len(data) - 8 + 1000)
    write(d, name, bytes(data))


def index_extra_tensor(d):
    index = json.loads(read(d, INDEX))
    index["weight_map"]["model.layers.2.mlp.up_proj.weight"] = SHARD.format(2)
    write(d, INDEX, hf_json(index))


def proto_fields(data):
    """Top-level protobuf fields of a serialized message: (field, start, end of value)."""
    def varint(i):
        v = shift = 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, i

    i, out = 0, []
    while i < len(data):
        tag, i = varint(i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, j = varint(i)
        elif wire == 1:
            j = i + 8
        elif wire == 2:
            n, i = varint(i)
            j = i + n
        elif wire == 5:
            j = i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, i, j))
        i = j
    return out


def truncate_spm(d):
    """tokenizer.model cut in the middle of the middle piece (field 1 of ModelProto)."""
    data = read(d, "tokenizer.model")
    pieces = [(s, e) for f, s, e in proto_fields(data) if f == 1]
    s, e = pieces[len(pieces) // 2]
    cut(d, "tokenizer.model", (s + e) // 2)


def damage(name, d):
    if name == "truncated-shard":
        cut(d, SHARD.format(2), os.path.getsize(os.path.join(d, SHARD.format(2))) // 2)
    elif name == "header-lie":
        header_lie(d)
    elif name == "header-length-lie":
        header_length_lie(d)
    elif name == "missing-shard":
        os.remove(os.path.join(d, SHARD.format(2)))
    elif name == "index-extra-tensor":
        index_extra_tensor(d)
    elif name == "broken-config":
        data = read(d, "config.json")
        cut(d, "config.json", data.index(b'"model_type"'))  # inside the object
    elif name == "no-config":
        os.remove(os.path.join(d, "config.json"))
    elif name == "broken-generation-config":
        data = read(d, "generation_config.json")
        cut(d, "generation_config.json", data.index(b'"eos_token_id"') + 5)
    elif name == "no-tokenizer":
        os.remove(os.path.join(d, "tokenizer.json"))
    elif name == "broken-tokenizer":
        cut(d, "tokenizer.json", os.path.getsize(os.path.join(d, "tokenizer.json")) // 2)
    elif name == "bpe-no-merges":
        tok = json.loads(read(d, "tokenizer.json"))
        del tok["model"]["merges"]
        write(d, "tokenizer.json", json.dumps(tok, indent=2, ensure_ascii=False))
    elif name == "truncated-spm":
        truncate_spm(d)
    elif name == "missing-code":
        os.remove(os.path.join(d, "attention.py"))
    elif name == "no-chat-template":
        cfg = json.loads(read(d, "tokenizer_config.json"))
        del cfg["chat_template"]
        write(d, "tokenizer_config.json", hf_json(cfg))
    else:
        raise ValueError(name)


# ---------------------------------------------------------------- proofs


def refused(what, fn):
    """Runs fn, which must raise; returns the exception's text."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  any refusal is the library's verdict
        return f"{type(e).__name__}: {e}"
    raise AssertionError(f"{what}: the library accepted it")


def load_shard(path):
    with safe_open(path, framework="numpy") as f:
        keys = list(f.keys())
        for k in keys:
            f.get_tensor(k)
    return keys


def json_files(d):
    return sorted(p for p in os.listdir(d) if p.endswith(".json"))


def relative_imports(source):
    """transformers.dynamic_module_utils.get_relative_imports, as it is written."""
    found = re.findall(r"^\s*import\s+\.(\S+)\s*$", source, flags=re.MULTILINE)
    found += re.findall(r"^\s*from\s+\.(\S+)\s+import", source, flags=re.MULTILINE)
    return sorted(set(found))


def prove_loads(d):
    """Every file of d that a loader reads loads; returns a short summary."""
    for p in json_files(d):
        with open(os.path.join(d, p)) as f:
            json.load(f)
    index = json.loads(read(d, INDEX))
    keys = {}
    for p in sorted(set(index["weight_map"].values())):
        keys[p] = set(load_shard(os.path.join(d, p)))
    for t, p in index["weight_map"].items():
        assert t in keys[p], f"{INDEX}: {t} not in {p}"
    assert sum(len(k) for k in keys.values()) == len(index["weight_map"])
    if os.path.exists(os.path.join(d, "tokenizer.json")):
        Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode("hello")
    if os.path.exists(os.path.join(d, "tokenizer.model")):
        spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model")).encode("hello")
    cfg = json.loads(read(d, "config.json"))
    for ref in cfg.get("auto_map", {}).values():
        module = ref.split(".")[0]
        assert os.path.exists(os.path.join(d, module + ".py")), module
    for p in sorted(os.listdir(d)):
        if p.endswith(".py"):
            src = read(d, p).decode()
            compile(src, p, "exec")
            for m in relative_imports(src):
                assert os.path.exists(os.path.join(d, m + ".py")), f"{p} imports .{m}"
    tcfg = json.loads(read(d, "tokenizer_config.json"))
    assert tcfg.get("chat_template"), "no chat template"
    return f"{len(index['weight_map'])} tensors"


def prove(name, d):
    """The variant's claim, proven; returns what to print."""
    if name.startswith("good"):
        return "loads: " + prove_loads(d)
    path = lambda p: os.path.join(d, p)  # noqa: E731
    if name in ("truncated-shard", "header-lie", "header-length-lie"):
        shard = SHARD.format(2 if name == "truncated-shard" else 1)
        return "safe_open refuses: " + refused(name, lambda: load_shard(path(shard)))
    if name == "missing-shard":
        names = set(json.loads(read(d, INDEX))["weight_map"].values())
        assert SHARD.format(2) in names and not os.path.exists(path(SHARD.format(2)))
        load_shard(path(SHARD.format(1)))
        return f"{INDEX} names {SHARD.format(2)}, absent"
    if name == "index-extra-tensor":
        wm = json.loads(read(d, INDEX))["weight_map"]
        missing = [t for t, p in wm.items() if t not in load_shard(path(p))]
        assert missing == ["model.layers.2.mlp.up_proj.weight"], missing
        return f"{missing[0]} not in {wm[missing[0]]} (safe_open keys)"
    if name in ("broken-config", "broken-generation-config"):
        p = "config.json" if name == "broken-config" else "generation_config.json"
        return "json.load refuses: " + refused(name, lambda: json.loads(read(d, p)))
    if name == "no-config":
        assert not os.path.exists(path("config.json"))
        return "config.json absent"
    if name == "no-tokenizer":
        assert not any(os.path.exists(path(p)) for p in TOKENIZER_FILES)
        assert os.path.exists(path("tokenizer_config.json"))
        return "no tokenizer file (tokenizer_config.json kept)"
    if name in ("broken-tokenizer", "bpe-no-merges"):
        return "Tokenizer.from_file refuses: " + refused(
            name, lambda: Tokenizer.from_file(path("tokenizer.json")))
    if name == "truncated-spm":
        return "SentencePieceProcessor refuses: " + refused(
            name, lambda: spm.SentencePieceProcessor(model_file=path("tokenizer.model")))
    if name == "missing-code":
        src = read(d, "modeling_tiny.py").decode()
        assert "attention" in relative_imports(src) and not os.path.exists(path("attention.py"))
        return "modeling_tiny.py imports .attention, absent"
    if name == "no-chat-template":
        tcfg = json.loads(read(d, "tokenizer_config.json"))
        assert "chat_template" not in tcfg
        tokens = [t["content"] for t in tcfg["added_tokens_decoder"].values()]
        assert "<|im_start|>" in tokens
        Tokenizer.from_file(path("tokenizer.json")).encode("hello")
        return "chat tokens, no chat_template; tokenizer loads"
    raise ValueError(name)


# ---------------------------------------------------------------- main


def build(out):
    rng = np.random.default_rng(SEED)
    lines = corpus(rng, 3000)
    shards = tensors(rng)
    makers = {"good": write_good, "good-spm": write_good_spm, "good-code": write_good_code}
    for name, (base, _) in VARIANTS.items():
        d = os.path.join(out, name)
        os.mkdir(d)
        if base is None:
            makers[name](d, lines, shards)
        else:
            for p in sorted(os.listdir(os.path.join(out, base))):
                write(d, p, read(os.path.join(out, base), p))
            damage(name, d)
        for p in os.listdir(d):
            os.chmod(os.path.join(d, p), 0o644)  # save_file writes 0600; copies get the umask
        print(f"{name}: {verdict(VARIANTS[name][1])}: {prove(name, d)}")
    rows = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in expected().items()]
    write(out, "expected.json", "{\n" + ",\n".join(rows) + "\n}\n")


def main(argv):
    if argv == ["--list"]:
        for name, e in expected().items():
            print(name, e["verdict"], " ".join(f"{c}@{p}" for c, p in e["problems"]))
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    if os.listdir(out):
        print(f"release_fixtures: {out} is not empty", file=sys.stderr)
        return 2
    start = time.monotonic()
    build(out)
    print(f"{len(VARIANTS)} variants in {out} ({time.monotonic() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
