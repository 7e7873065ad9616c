#!/usr/bin/env python3
"""A reader of modelcas stores written from the format specification alone (docs/FORMAT.md,
the index, and its pages docs/format/bytes.md, bucket.md, protocols.md).

It is the proof that the document is enough to implement the format: it uses the Python
standard library and the `zstandard` package only (no Rust, no bincode library), reads a
store kept in a local directory (the default backend, bucket.md "The local directory
store"), and follows the specification's sections by name.

    format_reader.py STORE_DIR repos                     one ORG/NAME a line
    format_reader.py STORE_DIR commits ORG/NAME          one commit (40 hex) a line
    format_reader.py STORE_DIR refs ORG/NAME             "REF COMMIT" a line
    format_reader.py STORE_DIR files ORG/NAME REV        "SHA256 SIZE PATH" a line
    format_reader.py STORE_DIR cat ORG/NAME REV PATH     the file's bytes on stdout
    format_reader.py STORE_DIR packs                     "PACK SIZE ENTRIES" a line
    format_reader.py STORE_DIR footer PACK               "CHUNK OFFSET FRAME_LEN RAW_LEN" a line
    format_reader.py STORE_DIR pins ORG/NAME             "COMMIT PINNED_AT" a line
    format_reader.py STORE_DIR used ORG/NAME             "COMMIT USED_AT MTIME_MS BY" a line
    format_reader.py STORE_DIR locks                     "KEY KIND PID STARTED_MS REFRESHED_MS
                                                           TTL_MS MTIME_MS STATE HOST" a line
    format_reader.py STORE_DIR condemned                 "written_ms MS", then
                                                           "PACK MARKED_MS SIZE CHUNKS LIVE_CHUNKS" a line
    format_reader.py STORE_DIR labels ORG/NAME           "COMMIT KEY VALUE" a line
    format_reader.py STORE_DIR checks ORG/NAME           "COMMIT VERDICT RULES ERRORS WARNINGS" a line

`packs` checks every pack's header, trailer and footer (bytes.md "Packs"); `footer` also
decodes every frame the footer lists and checks its length (and its chunk id, as `cat`
does). MTIME_MS is the object's modification time (the file's mtime, ms since the epoch):
what counts for last-use records and lock ages (protocols.md). STATE is `held` or `stale`
(protocols.md "Locks and leases"); HOST, last, may hold spaces.

`labels` and `checks` read the release records (bytes.md "Release records"): VALUE, last,
may hold spaces. VERDICT (passed, warnings, failed or not-checked) is derived as bytes.md
"Verdict" says: from the record and the files digest of the stored manifest, which this
reader computes; a record of a commit with no manifest is not-checked. ERRORS and WARNINGS
count the problems the record keeps, RULES is its rule set's version. A record or label
that breaks a rule of "Checked at decode" is refused (an error naming its key), where
modelcas leaves it out (a label) or reads it as not checked (a check record).

REV is a ref name or a full commit (40 hex digits). Everything is checked as FORMAT.md
says a reader must: envelope magic, version, flags and BLAKE3 checksum, exact decoding,
the manifest checks (bytes.md "Checked at decode"), every frame ("Frames", "Decoding"), and each
file's sha256. Chunk ids (BLAKE3 of each chunk) are checked with the `blake3` package
when it is installed; without it they are checked only with `--blake3-chunks` (this
file's own BLAKE3, in pure Python, about 1 MB/s), and otherwise the file's sha256 from
the manifest stands in for them (the whole file is then held in memory and written only
once it matches). Envelope checksums, small objects, always use the pure-Python BLAKE3
when the package is missing. A missing pack is read through the forwarding records
(`moved/`, bytes.md "Forwarding records", "Resolution").

Exit status: 0 success, 1 an error (one line on stderr), 2 bad usage.
"""

import hashlib
import io
import os
import re
import struct
import sys
import time
import unicodedata

import zstandard

try:
    import blake3 as _blake3_package  # optional; not required
except ImportError:  # pragma: no cover - depends on the environment
    _blake3_package = None


class FormatError(Exception):
    """Something in the store is not as the specification says it must be."""


# --- BLAKE3-256 (the default, unkeyed hash), pure Python --------------------------------

_IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
       0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_PERM = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
_CHUNK_START, _CHUNK_END, _PARENT, _ROOT = 1, 2, 4, 8
_M32 = 0xFFFFFFFF
# The message word order of each of the 7 rounds.
_SCHEDULE = []
_order = list(range(16))
for _ in range(7):
    _SCHEDULE.append(tuple(_order))
    _order = [_order[i] for i in _PERM]
_COLUMNS = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
            (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))


def _compress(cv, block, counter, block_len, flags):
    """The BLAKE3 compression function: returns the 16 output words."""
    m = struct.unpack("<16I", block)
    v = list(cv) + list(_IV[:4]) + [counter & _M32, (counter >> 32) & _M32, block_len, flags]
    for s in _SCHEDULE:
        for g, (a, b, c, d) in enumerate(_COLUMNS):
            x, y = m[s[2 * g]], m[s[2 * g + 1]]
            va = (v[a] + v[b] + x) & _M32
            vd = v[d] ^ va
            vd = ((vd >> 16) | (vd << 16)) & _M32
            vc = (v[c] + vd) & _M32
            vb = v[b] ^ vc
            vb = ((vb >> 12) | (vb << 20)) & _M32
            va = (va + vb + y) & _M32
            vd = vd ^ va
            vd = ((vd >> 8) | (vd << 24)) & _M32
            vc = (vc + vd) & _M32
            vb = vb ^ vc
            vb = ((vb >> 7) | (vb << 25)) & _M32
            v[a], v[b], v[c], v[d] = va, vb, vc, vd
    return [v[i] ^ v[i + 8] for i in range(8)] + [v[i + 8] ^ cv[i] for i in range(8)]


def _chunk_output(data, counter):
    """(cv, last block, its length, its flags) of one chunk of at most 1024 bytes."""
    cv = _IV
    blocks = [data[i:i + 64] for i in range(0, len(data), 64)] or [b""]
    for i, blk in enumerate(blocks):
        flags = (_CHUNK_START if i == 0 else 0) | (_CHUNK_END if i == len(blocks) - 1 else 0)
        if i < len(blocks) - 1:
            cv = _compress(cv, blk, counter, 64, flags)[:8]
        else:
            return cv, blk.ljust(64, b"\0"), len(blk), flags, counter
    raise AssertionError("unreachable")


def _subtree_cv(data, first_chunk):
    """Chaining value of a (non-root) subtree of whole chunks starting at `first_chunk`."""
    n = (len(data) + 1023) // 1024
    if n <= 1:
        cv, blk, ln, fl, ctr = _chunk_output(data, first_chunk)
        return _compress(cv, blk, ctr, ln, fl)[:8]
    left = 1 << ((n - 1).bit_length() - 1)  # largest power of two below n
    lcv = _subtree_cv(data[:left * 1024], first_chunk)
    rcv = _subtree_cv(data[left * 1024:], first_chunk + left)
    return _compress(_IV, struct.pack("<16I", *lcv, *rcv), 0, 64, _PARENT)[:8]


def blake3_pure(data):
    """BLAKE3-256 of `data` (bytes), in pure Python."""
    data = bytes(data)
    n = (len(data) + 1023) // 1024
    if n <= 1:
        cv, blk, ln, fl, ctr = _chunk_output(data, 0)
        out = _compress(cv, blk, ctr, ln, fl | _ROOT)
    else:
        left = 1 << ((n - 1).bit_length() - 1)
        lcv = _subtree_cv(data[:left * 1024], 0)
        rcv = _subtree_cv(data[left * 1024:], left)
        out = _compress(_IV, struct.pack("<16I", *lcv, *rcv), 0, 64, _PARENT | _ROOT)
    return struct.pack("<8I", *out[:8])


def blake3(data):
    """BLAKE3-256 of `data`: the package when installed, else the pure-Python one."""
    if _blake3_package is not None:
        return _blake3_package.blake3(bytes(data)).digest()
    return blake3_pure(data)


# --- bincode 2 standard() (bytes.md "Payload encoding") ---------------------------------

# Widest varint tag each unsigned type accepts: 0xfb u16, 0xfc u32, 0xfd u64, 0xfe u128.
_TAG_WIDTH = {0xFB: 2, 0xFC: 4, 0xFD: 8, 0xFE: 16}
_MAX_TAG = {16: 0xFB, 32: 0xFC, 64: 0xFD, 128: 0xFE}


class Payload:
    """A cursor over a decoded envelope payload."""

    def __init__(self, data, what):
        self.b = bytes(data)
        self.i = 0
        self.what = what

    def fail(self, why):
        raise FormatError(f"{self.what}: {why} at payload byte {self.i}")

    def take(self, n):
        if n > len(self.b) - self.i:
            self.fail(f"needs {n} more bytes, {len(self.b) - self.i} left")
        out = self.b[self.i:self.i + n]
        self.i += n
        return out

    def u8(self):
        return self.take(1)[0]

    def varint(self, bits):
        """An unsigned integer of `bits` (16, 32, 64, 128) bits."""
        tag = self.u8()
        if tag <= 250:
            return tag
        if tag == 0xFF or tag > _MAX_TAG[bits]:
            self.fail(f"varint tag {tag:#04x} invalid for a u{bits}")
        return int.from_bytes(self.take(_TAG_WIDTH[tag]), "little")

    def u32(self):
        return self.varint(32)

    def u64(self):
        return self.varint(64)

    def boolean(self):
        b = self.u8()
        if b > 1:
            self.fail(f"bool byte {b}")
        return b == 1

    def array(self, n):
        return self.take(n)

    def length(self, min_elem):
        n = self.u64()
        if n * min_elem > len(self.b) - self.i:
            self.fail(f"length {n} larger than what is left")
        return n

    def string(self):
        raw = self.take(self.length(1))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.fail("string is not UTF-8")

    def vec(self, elem, min_elem):
        return [elem() for _ in range(self.length(min_elem))]

    def end(self):
        if self.i != len(self.b):
            self.fail(f"{len(self.b) - self.i} trailing bytes")


# --- Object envelope ---------------------------------------------------------------------

MAX_PAYLOAD = 1 << 30


def zstd_bounded(data, limit, what):
    """Decompresses one zstd stream, refusing more than `limit` bytes of output."""
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as r:
            out = r.read(limit + 1)
    except zstandard.ZstdError as e:
        raise FormatError(f"{what}: zstd: {e}") from None
    if len(out) > limit:
        raise FormatError(f"{what}: decompresses to more than {limit} bytes")
    return out


def open_envelope(data, magic, what, newest=1):
    """Checks an envelope (a version from 1 to `newest`) and returns its payload as a
    Payload cursor, with the version in its `version` attribute."""
    if len(data) < 44:
        raise FormatError(f"{what}: {len(data)} bytes is too short for an object")
    if data[:8] != magic:
        raise FormatError(f"{what}: magic {data[:8]!r}, expected {magic!r}")
    version, flags = struct.unpack_from("<HH", data, 8)
    if version == 0 or version > newest:
        raise FormatError(f"{what}: format version {version}; this reader knows up to {newest}")
    if flags & ~1:
        raise FormatError(f"{what}: unknown flags {flags:#06x}")
    if blake3(data[:-32]) != data[-32:]:
        raise FormatError(f"{what}: checksum mismatch")
    payload = data[12:-32]
    if flags & 1:
        payload = zstd_bounded(payload, MAX_PAYLOAD, what)
    elif len(payload) > MAX_PAYLOAD:
        raise FormatError(f"{what}: payload larger than 1 GiB")
    p = Payload(payload, what)
    p.version = version
    return p


# --- Names (bucket.md "Bucket layout") ---------------------------------------------------

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def valid_repo_part(s):
    return (0 < len(s) <= 96 and re.fullmatch(r"[A-Za-z0-9_.-]+", s) is not None
            and "--" not in s and ".." not in s
            and s[0] not in "-." and s[-1] not in "-.")


def valid_ref_name(s):
    return (0 < len(s) <= 200 and re.fullmatch(r"[A-Za-z0-9._/-]+", s) is not None
            and all(seg not in ("", ".", "..") for seg in s.split("/"))
            and ".." not in s
            and not re.fullmatch(r"[0-9A-Fa-f]{40}", s))


def parse_repo(s):
    parts = s.split("/")
    if len(parts) != 2 or not all(valid_repo_part(p) for p in parts):
        raise FormatError(f"invalid repository id {s!r}")
    return parts[0], parts[1]


def pack_key(pack_id):
    h = pack_id.hex()
    return f"packs/{h[:2]}/{h}"


def moved_key(pack_id):
    h = pack_id.hex()
    return f"moved/{h[:2]}/{h}"


# --- Payload types -----------------------------------------------------------------------

def decode_repo_id(p):
    org, name = p.string(), p.string()
    if not (valid_repo_part(org) and valid_repo_part(name)):
        p.fail(f"invalid repository id {org!r}/{name!r}")
    return org, name


def decode_config(data):
    p = open_envelope(data, b"MCASCONF", "config")
    cfg = {"store_id": p.array(16), "created_at": p.u64(), "chunk_min": p.u32(),
           "chunk_avg": p.u32(), "chunk_max": p.u32(), "pack_target": p.u32()}
    p.end()
    lo_hi = {"chunk_min": (64, 1048576), "chunk_avg": (256, 4194304),
             "chunk_max": (1024, 16777216)}
    for k, (lo, hi) in lo_hi.items():
        if not lo <= cfg[k] <= hi or cfg[k] % 2:
            raise FormatError(f"config: {k} = {cfg[k]} outside FastCDC's range")
    if not cfg["chunk_min"] < cfg["chunk_avg"] < cfg["chunk_max"]:
        raise FormatError("config: chunk sizes are not min < avg < max")
    return cfg


MAX_CHUNK_LEN = 16 * 1024 * 1024


def decode_features(data):
    """The feature list: (to_read, to_write), names checked as bytes.md says."""
    p = open_envelope(data, b"MCASFEAT", "features")
    to_read = p.vec(lambda: p.string(), 1)
    to_write = p.vec(lambda: p.string(), 1)
    p.end()
    names = to_read + to_write
    if len(names) > 256:
        raise FormatError("features: more than 256 names")
    for n in names:
        if not (1 <= len(n) <= 128 and all(0x21 <= ord(c) <= 0x7E for c in n)):
            raise FormatError(f"features: {n!r} is not a feature name")
    return to_read, to_write


def check_path(path):
    return (path != "" and "\0" not in path
            and all(seg not in ("", ".", "..") for seg in path.split("/")))


def decode_manifest(data, key, org, name, commit_hex):
    """The manifest at `key`, decoded and checked (bytes.md "Checked at decode")."""
    p = open_envelope(data, b"MCASMANI", key, newest=3)

    def chunk_ref():
        return {"id": p.array(32), "pack": p.u32(), "offset": p.u32(),
                "frame_len": p.u32(), "raw_len": p.u32()}

    def file_entry():
        return {"path": p.string(), "size": p.u64(), "sha256": p.array(32),
                "executable": p.boolean(), "chunks": p.vec(chunk_ref, 36)}

    m = {"repo": decode_repo_id(p), "commit": p.array(20), "ingested_at": p.u64(),
         "source": p.string()}
    m["packs"] = p.vec(lambda: p.array(32), 32)
    m["files"] = p.vec(file_entry, 36)
    if p.version >= 2:  # Option<Published>: tag 0 (None) or 1 then store_ms, seq
        tag = p.u8()
        if tag == 1:
            m["published"] = (p.u64(), p.u64())
        elif tag != 0:
            raise FormatError(f"{key}: Option tag {tag}")
    if p.version >= 3:  # Vec<[u8; 32]>: empty, or one Xet file hash per file (docs/format/xet.md)
        m["xet_hashes"] = p.vec(lambda: p.array(32), 32)
        if len(m["xet_hashes"]) not in (0, len(m["files"])):
            raise FormatError(f"{key}: {len(m['xet_hashes'])} Xet hashes for {len(m['files'])} files")
    p.end()

    def bad(why):
        raise FormatError(f"{key}: {why}")

    if m["repo"] != (org, name) or m["commit"].hex() != commit_hex:
        bad(f"describes {m['repo'][0]}/{m['repo'][1]}@{m['commit'].hex()}")
    paths = set()
    prev = None
    for f in m["files"]:
        path = f["path"]
        if not check_path(path):
            bad(f"unsafe path {path!r}")
        if prev is not None and prev.encode() >= path.encode():
            bad(f"path {path!r} out of order or repeated")
        prev = path
        paths.add(path)
        total = 0
        for c in f["chunks"]:
            if c["pack"] >= len(m["packs"]):
                bad(f"{path}: chunk points past the pack table")
            if c["offset"] < 16 or c["frame_len"] < 16 or c["offset"] + c["frame_len"] > 0xFFFFFFFF:
                bad(f"{path}: impossible frame offset or length")
            if c["raw_len"] > MAX_CHUNK_LEN:
                bad(f"{path}: chunk longer than 16 MiB")
            total += c["raw_len"]
        if total != f["size"]:
            bad(f"{path}: size {f['size']} but chunks hold {total} bytes")
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in paths:
                bad(f"{'/'.join(parts[:i])!r} is both a file and a directory")
    return m


def decode_ref(data, key):
    p = open_envelope(data, b"MCASREF\0", key)
    r = {"commit": p.array(20), "updated_at": p.u64()}
    p.end()
    return r


def decode_moved(data, key, pack_id):
    p = open_envelope(data, b"MCASMOVE", key)

    def frame():
        return {"offset": p.u32(), "id": p.array(32), "target": p.u32(),
                "new_offset": p.u32(), "frame_len": p.u32()}

    rec = {"pack": p.array(32), "written_ms": p.u64(),
           "targets": p.vec(lambda: p.array(32), 32), "frames": p.vec(frame, 36)}
    p.end()
    if rec["pack"] != pack_id:
        raise FormatError(f"{key}: describes pack {rec['pack'].hex()}")
    for f in rec["frames"]:
        if f["target"] >= len(rec["targets"]):
            raise FormatError(f"{key}: frame at {f['offset']} points past the target table")
    return rec


def decode_pin(data, key):
    """A pin (bytes.md "Pins"): {commit, pinned_at}."""
    p = open_envelope(data, b"MCASPIN\0", key)
    r = {"commit": p.array(20), "pinned_at": p.u64()}
    p.end()
    return r


def decode_used(data, key):
    """A last-use record (bytes.md "Last-use records"): {commit, used_at, by}."""
    p = open_envelope(data, b"MCASUSED", key)
    r = {"commit": p.array(20), "used_at": p.u64(), "by": p.string()}
    p.end()
    return r


def decode_lock(data, key):
    """A lock or lease (bytes.md "Locks and leases")."""
    p = open_envelope(data, b"MCASLOCK", key)
    r = {"kind": p.string(), "host": p.string(), "pid": p.u32(), "started_ms": p.u64(),
         "refreshed_ms": p.u64(), "ttl_ms": p.u64()}
    p.end()
    return r


def decode_condemned(data, key):
    """The condemned list (bytes.md "Condemned list"): (entries, written_ms)."""
    p = open_envelope(data, b"MCASGCST", key)

    def entry():
        return {"pack": p.array(32), "marked_ms": p.u64(), "size": p.u64(),
                "chunks": p.u32(), "live_chunks": p.u32()}

    entries = p.vec(entry, 36)
    written_ms = p.u64()
    p.end()
    return entries, written_ms


# --- Release records (bytes.md "Release records") -------------------------------------

MAX_CHECK_OBJECT = 4 * 1024 * 1024   # a check object, by its stored size
MAX_LABEL_OBJECT = 8 * 1024          # a label object, by its stored size
MAX_PROBLEMS = 1000
MAX_LABELS = 64                      # labels of one commit
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
FILES_DIGEST_CONTEXT = b"modelcas-release-files-v1\0"
assert len(FILES_DIGEST_CONTEXT) == 26


def valid_label_key(k):
    return _LABEL_KEY.fullmatch(k) is not None


def capped_string(p, cap, field):
    """A String of at most `cap` bytes of UTF-8."""
    s = p.string()
    if len(s.encode()) > cap:
        p.fail(f"{field} of {len(s.encode())} bytes, more than {cap}")
    return s


def decode_check(data, key, commit_hex):
    """A check object (CheckObject) at `key`, whose commit must be `commit_hex`."""
    if len(data) > MAX_CHECK_OBJECT:
        raise FormatError(f"{key}: {len(data)} bytes, over the {MAX_CHECK_OBJECT}-byte cap")
    p = open_envelope(data, b"MCASCHCK", key)  # written compressed; the flag says

    def problem():
        return {"severity": p.u8(), "code": capped_string(p, 64, "code"),
                "path": capped_string(p, 1024, "path"),
                "message": capped_string(p, 500, "message")}

    r = {"commit": p.array(20), "files": p.array(32), "rules": p.u32(),
         "checked_at": p.u64(), "by": capped_string(p, 64, "by")}
    n = p.length(4)  # a problem takes at least 4 bytes (severity and three lengths)
    if n > MAX_PROBLEMS:
        p.fail(f"{n} problems, more than {MAX_PROBLEMS}")
    r["problems"] = [problem() for _ in range(n)]
    r["omitted"] = p.u32()
    p.end()
    if r["commit"].hex() != commit_hex:
        raise FormatError(f"{key}: record of commit {r['commit'].hex()}")
    return r


def decode_label(data, key, commit_hex, label_key):
    """A label object (LabelObject) at `key` = .../labels/`commit_hex`/`label_key`."""
    if len(data) > MAX_LABEL_OBJECT:
        raise FormatError(f"{key}: {len(data)} bytes, over the {MAX_LABEL_OBJECT}-byte cap")
    p = open_envelope(data, b"MCASLABL", key)
    r = {"commit": p.array(20), "key": p.string(), "value": capped_string(p, 1024, "value"),
         "set_at": p.u64(), "by": p.string()}
    p.end()
    if r["commit"].hex() != commit_hex:
        raise FormatError(f"{key}: label of commit {r['commit'].hex()}")
    if r["key"] != label_key:
        raise FormatError(f"{key}: label {r['key']!r} stored under another key")
    if not valid_label_key(r["key"]):
        raise FormatError(f"{key}: {r['key']!r} is not a label key")
    if any(unicodedata.category(c) == "Cc" for c in r["value"]):
        raise FormatError(f"{key}: value holds a control character")
    return r


def files_digest(manifest):
    """BLAKE3-256 of the context and, per file in manifest order, path || 0 || size (u64
    LE) || sha256 || executable (bytes.md "Files digest")."""
    parts = [FILES_DIGEST_CONTEXT]
    for f in manifest["files"]:
        parts += [f["path"].encode(), b"\0", struct.pack("<Q", f["size"]), f["sha256"],
                  b"\1" if f["executable"] else b"\0"]
    return blake3(b"".join(parts))


def verdict(check, digest):
    """bytes.md "Verdict": of a decoded record, against the stored manifest's files
    digest (None: no manifest)."""
    if digest is None or check["files"] != digest:
        return "not-checked"
    if any(pr["severity"] != 1 for pr in check["problems"]):
        return "failed"  # an unknown severity counts as an error
    if check["problems"]:
        return "warnings"
    return "failed" if check["omitted"] else "passed"


PACK_HEADER = 16
PACK_TRAILER = 12


def decode_pack_footer(read_at, size, what):
    """The footer entries of a pack of `size` bytes (bytes.md "Packs"); `read_at(offset,
    length)` reads the pack. Checks the header, the trailer, the footer envelope and that
    the entries' frames lie back to back from the header to the footer."""
    if size < PACK_HEADER + PACK_TRAILER:
        raise FormatError(f"{what}: {size} bytes is too short for a pack")
    header = read_at(0, PACK_HEADER)
    if header[:8] != b"MCASPACK":
        raise FormatError(f"{what}: pack magic {header[:8]!r}")
    version, r16, r32 = struct.unpack_from("<HHI", header, 8)
    if version != 1 or r16 or r32:
        raise FormatError(f"{what}: pack version {version} (reserved {r16}, {r32})")
    footer_len, end = struct.unpack("<I8s", read_at(size - PACK_TRAILER, PACK_TRAILER))
    if end != b"MCASPEND":
        raise FormatError(f"{what}: no end magic")
    if footer_len > size - PACK_HEADER - PACK_TRAILER:
        raise FormatError(f"{what}: footer_len {footer_len} larger than the pack")
    footer_at = size - PACK_TRAILER - footer_len
    p = open_envelope(read_at(footer_at, footer_len), b"MCASPFTR", f"{what} footer")

    def entry():
        return {"id": p.array(32), "offset": p.u32(), "frame_len": p.u32(),
                "raw_len": p.u32()}

    entries = p.vec(entry, 35)
    p.end()
    at = PACK_HEADER
    for e in entries:
        if e["offset"] < PACK_HEADER or e["offset"] + e["frame_len"] > footer_at:
            raise FormatError(f"{what}: entry at {e['offset']} outside the frames")
        if e["frame_len"] < 16 or e["raw_len"] > MAX_CHUNK_LEN:
            raise FormatError(f"{what}: entry at {e['offset']}: impossible lengths")
        if e["offset"] != at:
            raise FormatError(f"{what}: entry at {e['offset']}, the previous frame ends at {at}")
        at = e["offset"] + e["frame_len"]
    if at != footer_at:
        raise FormatError(f"{what}: the frames end at {at}, the footer starts at {footer_at}")
    return entries


# --- Frames ------------------------------------------------------------------------------

def decode_frame(frame, what):
    """The chunk a frame holds (bytes.md "Frames", "Decoding")."""
    if len(frame) < 16:
        raise FormatError(f"{what}: frame of {len(frame)} bytes is shorter than its header")
    codec, flags, _reserved, raw_len, body_len, aux = struct.unpack_from("<BBHIII", frame, 0)
    if raw_len > MAX_CHUNK_LEN:
        raise FormatError(f"{what}: frame claims {raw_len} bytes, more than any chunk")
    body = frame[16:]
    if len(body) != body_len:
        raise FormatError(f"{what}: frame body is {len(body)} bytes, header says {body_len}")
    if codec == 0:
        if body_len != raw_len:
            raise FormatError(f"{what}: raw frame length mismatch")
        return bytes(body)
    if codec == 1:
        out = zstd_bounded(body, raw_len, what)
        if len(out) != raw_len:
            raise FormatError(f"{what}: zstd frame gives {len(out)} bytes, expected {raw_len}")
        return out
    if codec == 2:
        if aux > body_len:
            raise FormatError(f"{what}: bg2 plane 0 section beyond the body")
        planes = []
        for i, (sec, n) in enumerate(((body[:aux], (raw_len + 1) // 2), (body[aux:], raw_len // 2))):
            plane = zstd_bounded(sec, n, what) if flags >> i & 1 else bytes(sec)
            if len(plane) != n:
                raise FormatError(f"{what}: bg2 plane {i} is {len(plane)} bytes, expected {n}")
            planes.append(plane)
        out = bytearray(raw_len)
        out[0::2] = planes[0]
        out[1::2] = planes[1]
        return bytes(out)
    raise FormatError(f"{what}: unknown codec {codec}")


# --- The store ---------------------------------------------------------------------------

MAX_HOPS = 64


class Store:
    """A store in a local directory."""

    def __init__(self, root, check_chunks):
        self.root = root
        self.check_chunks = check_chunks
        self.moved = {}
        cfg = self.get("config")
        if cfg is None:
            raise FormatError(f"{root}: no store here (no config object)")
        self.config = decode_config(cfg)
        feats = self.get("features")
        if feats is not None:
            to_read, _to_write = decode_features(feats)
            if to_read:  # this reader implements no feature beyond version 1
                raise FormatError("this store needs a newer reader: it uses format features "
                                  + ", ".join(to_read))

    def path(self, key):
        return os.path.join(self.root, *key.split("/"))

    def get(self, key):
        """The object's bytes, or None when there is no such object."""
        try:
            with open(self.path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def get_range(self, key, offset, length):
        """`length` bytes at `offset`, or None when there is no such object."""
        try:
            with open(self.path(key), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list(self, prefix):
        """Every key under `prefix` (which ends with '/'): the regular files below it."""
        top = self.path(prefix.rstrip("/"))
        out = []
        for dirpath, dirs, files in os.walk(top):
            rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            if rel == "tmp" or rel.startswith("tmp/"):
                dirs[:] = []
                continue
            for f in files:
                if os.path.isfile(os.path.join(dirpath, f)):
                    out.append(f"{rel}/{f}")
        return sorted(out)

    # Listing (bucket.md "The local directory store", "Listing what a store holds").

    def repos(self):
        found = set()
        for key in self.list("repos/"):
            parts = key.split("/")
            if len(parts) >= 3 and valid_repo_part(parts[1]) and valid_repo_part(parts[2]):
                found.add(f"{parts[1]}/{parts[2]}")
        return sorted(found)

    def commits(self, org, name):
        prefix = f"repos/{org}/{name}/manifests/"
        return sorted(k[len(prefix):] for k in self.list(prefix)
                      if _HEX40.fullmatch(k[len(prefix):]))

    def refs(self, org, name):
        prefix = f"repos/{org}/{name}/refs/"
        out = {}
        for key in self.list(prefix):
            ref = key[len(prefix):].replace("%2F", "/")
            if not valid_ref_name(ref):
                continue
            out[ref] = decode_ref(self.get(key), key)["commit"].hex()
        return dict(sorted(out.items()))

    def resolve(self, org, name, rev):
        ref_key = f"repos/{org}/{name}/refs/{rev.replace('/', '%2F')}"
        if valid_ref_name(rev):
            data = self.get(ref_key)
            if data is not None:
                return decode_ref(data, ref_key)["commit"].hex()
        if _HEX40.fullmatch(rev.lower()):
            return rev.lower()
        raise FormatError(f"{org}/{name}: no ref {rev!r} (and not a 40-hex commit)")

    def manifest(self, org, name, commit):
        key = f"repos/{org}/{name}/manifests/{commit}"
        data = self.get(key)
        if data is None:
            raise FormatError(f"{org}/{name}: no commit {commit}")
        return decode_manifest(data, key, org, name, commit)

    # Reading chunks (bytes.md "Reading a file", "Forwarding records").

    def moved_entry(self, pack_id, offset):
        if pack_id not in self.moved:
            key = moved_key(pack_id)
            data = self.get(key)
            entries = None
            if data is not None:
                rec = decode_moved(data, key, pack_id)
                entries = {f["offset"]: (f["id"], rec["targets"][f["target"]],
                                         f["new_offset"], f["frame_len"])
                           for f in rec["frames"]}
            self.moved[pack_id] = entries
        entries = self.moved[pack_id]
        return None if entries is None else entries.get(offset)

    def resolve_location(self, pack_id, offset, chunk_id, frame_len):
        seen = set()
        for _ in range(MAX_HOPS):
            if pack_id in seen:
                break
            seen.add(pack_id)
            e = self.moved_entry(pack_id, offset)
            if e is None or e[0] != chunk_id or e[3] != frame_len:
                break
            pack_id, offset = e[1], e[2]
        return pack_id, offset

    def chunk(self, pack_id, c):
        frame = self.get_range(pack_key(pack_id), c["offset"], c["frame_len"])
        if frame is None:
            to, off = self.resolve_location(pack_id, c["offset"], c["id"], c["frame_len"])
            if to == pack_id:
                raise FormatError(f"pack {pack_key(pack_id)} is missing and no forwarding "
                                  f"record moves chunk {c['id'].hex()}")
            frame = self.get_range(pack_key(to), off, c["frame_len"])
            if frame is None:
                raise FormatError(f"pack {pack_key(to)} (forwarded from {pack_key(pack_id)}) "
                                  f"is missing")
            pack_id = to
        what = f"chunk {c['id'].hex()} in {pack_key(pack_id)} at {c['offset']}"
        if len(frame) != c["frame_len"]:
            raise FormatError(f"{what}: frame cut short by the end of the pack")
        data = decode_frame(frame, what)
        if len(data) != c["raw_len"]:
            raise FormatError(f"{what}: {len(data)} bytes, the manifest says {c['raw_len']}")
        if self.check_chunks and blake3(data) != c["id"]:
            raise FormatError(f"{what}: content does not match the chunk id")
        return data

    def cat(self, org, name, rev, path, out):
        commit = self.resolve(org, name, rev)
        m = self.manifest(org, name, commit)
        f = next((f for f in m["files"] if f["path"] == path), None)
        if f is None:
            raise FormatError(f"{org}/{name}@{commit}: no file {path!r}")
        sha = hashlib.sha256()
        held = []
        for c in f["chunks"]:
            data = self.chunk(m["packs"][c["pack"]], c)
            sha.update(data)
            if self.check_chunks:
                out.write(data)
            else:
                held.append(data)
        if sha.digest() != f["sha256"]:
            raise FormatError(f"{org}/{name}@{commit}: {path}: sha256 mismatch")
        for data in held:
            out.write(data)

    # Packs, pins, last-use records, locks and the condemned list (bytes.md; their keys,
    # bucket.md "Bucket layout").

    def mtime_ms(self, key):
        """The object's modification time by the store's clock: the file's mtime, in ms."""
        return os.stat(self.path(key)).st_mtime_ns // 1_000_000

    def packs(self):
        """(pack id, size, footer entries) of every pack; a key that is not a pack key
        (two-digit directory not the id's first digits) is ignored."""
        out = []
        for key in self.list("packs/"):
            parts = key.split("/")
            if len(parts) != 3 or not _HEX64.fullmatch(parts[2]) or parts[1] != parts[2][:2]:
                continue
            size = os.path.getsize(self.path(key))
            entries = decode_pack_footer(lambda o, n, k=key: self.get_range(k, o, n), size, key)
            out.append((parts[2], size, entries))
        return out

    def footer(self, pack_hex):
        """The footer entries of one pack, every frame decoded and checked against them."""
        if not _HEX64.fullmatch(pack_hex):
            raise FormatError(f"not a pack id: {pack_hex!r}")
        key = pack_key(bytes.fromhex(pack_hex))
        data = self.get(key)
        if data is None:
            raise FormatError(f"no pack {key}")
        entries = decode_pack_footer(lambda o, n: data[o:o + n], len(data), key)
        for e in entries:
            what = f"{key}: frame at {e['offset']}"
            chunk = decode_frame(data[e["offset"]:e["offset"] + e["frame_len"]], what)
            if len(chunk) != e["raw_len"]:
                raise FormatError(f"{what}: {len(chunk)} bytes, the footer says {e['raw_len']}")
            if self.check_chunks and blake3(chunk) != e["id"]:
                raise FormatError(f"{what}: content does not match the chunk id")
        return entries

    def commit_records(self, org, name, part, decode):
        """The records `repos/<org>/<name>/<part>/<40 hex>`: (commit, decoded, mtime_ms);
        each must describe the commit of its key."""
        prefix = f"repos/{org}/{name}/{part}/"
        out = []
        for key in self.list(prefix):
            commit = key[len(prefix):]
            if not _HEX40.fullmatch(commit):
                continue
            rec = decode(self.get(key), key)
            if rec["commit"].hex() != commit:
                raise FormatError(f"{key}: describes commit {rec['commit'].hex()}")
            out.append((commit, rec, self.mtime_ms(key)))
        return out

    def labels(self, org, name):
        """(commit, key, value) of every label, sorted: keys
        `repos/<org>/<name>/labels/<40 hex>/<key>` (other names under labels/ are not
        release records and are ignored, except a last segment that is no label key)."""
        prefix = f"repos/{org}/{name}/labels/"
        out = []
        per_commit = {}
        for key in self.list(prefix):
            parts = key[len(prefix):].split("/")
            if len(parts) != 2 or not _HEX40.fullmatch(parts[0]):
                continue
            commit, label_key = parts
            if not valid_label_key(label_key):
                raise FormatError(f"{key}: {label_key!r} is not a label key")
            data = self.get(key)
            if data is None:
                continue  # removed meanwhile
            rec = decode_label(data, key, commit, label_key)
            per_commit[commit] = per_commit.get(commit, 0) + 1
            if per_commit[commit] > MAX_LABELS:
                raise FormatError(f"{prefix}{commit}/: more than {MAX_LABELS} labels")
            out.append((commit, rec["key"], rec["value"]))
        return sorted(out)

    def checks(self, org, name):
        """(commit, record, verdict) of every check record `repos/<org>/<name>/checks/<40
        hex>`, sorted by commit; the verdict against the stored manifest."""
        prefix = f"repos/{org}/{name}/checks/"
        out = []
        for key in self.list(prefix):
            commit = key[len(prefix):]
            if not _HEX40.fullmatch(commit):
                continue
            try:  # the cap is checked by the size, before the object is read
                size = os.path.getsize(self.path(key))
            except FileNotFoundError:
                continue
            if size > MAX_CHECK_OBJECT:
                raise FormatError(f"{key}: {size} bytes, over the {MAX_CHECK_OBJECT}-byte cap")
            data = self.get(key)
            if data is None:
                continue
            rec = decode_check(data, key, commit)
            mkey = f"repos/{org}/{name}/manifests/{commit}"
            mdata = self.get(mkey)
            digest = None
            if mdata is not None:
                digest = files_digest(decode_manifest(mdata, mkey, org, name, commit))
            out.append((commit, rec, verdict(rec, digest)))
        return out

    def locks(self):
        """(key, lock, mtime_ms, stale) of every lock and lease, by the rules of
        protocols.md "Locks and leases": the store's clock (here the kernel's) is read
        before the listing; stale when at least ttl_ms old, or held by a process of this
        host and pid namespace that no longer exists."""
        now_ms = time.time_ns() // 1_000_000
        out = []
        for key in self.list("locks/"):
            kind = key[len("locks/"):].split("-", 1)[0]
            if kind not in ("gc", "ingest", "write") or "-" not in key:
                continue
            data = self.get(key)
            if data is None:
                continue  # released meanwhile
            lock = decode_lock(data, key)
            mtime = self.mtime_ms(key)
            stale = now_ms - mtime >= lock["ttl_ms"] or (
                lock["host"] == this_host() and not os.path.exists(f"/proc/{lock['pid']}"))
            out.append((key, lock, mtime, stale))
        return out

    def condemned(self):
        """The condemned list: (entries, written_ms); absent means empty."""
        data = self.get("gc/condemned")
        if data is None:
            return [], None
        return decode_condemned(data, "gc/condemned")


def this_host():
    """What a lock's `host` is for a process of this machine and pid namespace (bytes.md
    "Locks and leases")."""
    try:
        with open("/proc/sys/kernel/hostname") as f:
            host = f.read().strip()
    except OSError:
        host = "unknown"
    try:
        return f"{host} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return host


USAGE = """usage: format_reader.py [--blake3-chunks] STORE_DIR repos
       format_reader.py [--blake3-chunks] STORE_DIR commits ORG/NAME
       format_reader.py [--blake3-chunks] STORE_DIR refs ORG/NAME
       format_reader.py [--blake3-chunks] STORE_DIR files ORG/NAME REV
       format_reader.py [--blake3-chunks] STORE_DIR cat ORG/NAME REV PATH
       format_reader.py [--blake3-chunks] STORE_DIR packs
       format_reader.py [--blake3-chunks] STORE_DIR footer PACK
       format_reader.py [--blake3-chunks] STORE_DIR pins ORG/NAME
       format_reader.py [--blake3-chunks] STORE_DIR used ORG/NAME
       format_reader.py [--blake3-chunks] STORE_DIR locks
       format_reader.py [--blake3-chunks] STORE_DIR condemned
       format_reader.py [--blake3-chunks] STORE_DIR labels ORG/NAME
       format_reader.py [--blake3-chunks] STORE_DIR checks ORG/NAME"""


def store_lines(store, cmd, rest):
    """The output lines of the store-wide commands."""
    if cmd == "packs":
        return [f"{p} {size} {len(entries)}" for p, size, entries in store.packs()]
    if cmd == "footer":
        return [f"{e['id'].hex()} {e['offset']} {e['frame_len']} {e['raw_len']}"
                for e in store.footer(rest[0])]
    if cmd == "locks":
        return [f"{key} {lk['kind']} {lk['pid']} {lk['started_ms']} {lk['refreshed_ms']} "
                f"{lk['ttl_ms']} {mtime} {'stale' if stale else 'held'} {lk['host']}"
                for key, lk, mtime, stale in store.locks()]
    entries, written_ms = store.condemned()
    return ([] if written_ms is None else [f"written_ms {written_ms}"]) + [
        f"{e['pack'].hex()} {e['marked_ms']} {e['size']} {e['chunks']} {e['live_chunks']}"
        for e in entries]


def main(argv):
    args = list(argv)
    force_chunks = "--blake3-chunks" in args
    args = [a for a in args if a != "--blake3-chunks"]
    arity = {"repos": 0, "commits": 1, "refs": 1, "files": 2, "cat": 3, "packs": 0,
             "footer": 1, "pins": 1, "used": 1, "locks": 0, "condemned": 0,
             "labels": 1, "checks": 1}
    if len(args) < 2 or args[1] not in arity or len(args) != 2 + arity[args[1]]:
        print(USAGE, file=sys.stderr)
        return 2
    root, cmd, rest = args[0], args[1], args[2:]
    out = sys.stdout.buffer
    try:
        store = Store(root, check_chunks=force_chunks or _blake3_package is not None)
        if cmd == "repos":
            for r in store.repos():
                out.write(f"{r}\n".encode())
            return 0
        if cmd in ("packs", "footer", "locks", "condemned"):
            for line in store_lines(store, cmd, rest):
                out.write(f"{line}\n".encode())
            out.flush()
            return 0
        org, name = parse_repo(rest[0])
        if cmd == "commits":
            for c in store.commits(org, name):
                out.write(f"{c}\n".encode())
        elif cmd == "refs":
            for ref, c in store.refs(org, name).items():
                out.write(f"{ref} {c}\n".encode())
        elif cmd == "pins":
            for c, pin, _ in store.commit_records(org, name, "pins", decode_pin):
                out.write(f"{c} {pin['pinned_at']}\n".encode())
        elif cmd == "used":
            for c, u, mtime in store.commit_records(org, name, "used", decode_used):
                out.write(f"{c} {u['used_at']} {mtime} {u['by']}\n".encode())
        elif cmd == "labels":
            for c, k, v in store.labels(org, name):
                out.write(f"{c} {k} {v}\n".encode())
        elif cmd == "checks":
            for c, rec, v in store.checks(org, name):
                errors = sum(1 for pr in rec["problems"] if pr["severity"] != 1)
                warnings = len(rec["problems"]) - errors
                out.write(f"{c} {v} {rec['rules']} {errors} {warnings}\n".encode())
        elif cmd == "files":
            m = store.manifest(org, name, store.resolve(org, name, rest[1]))
            for f in m["files"]:
                out.write(f"{f['sha256'].hex()} {f['size']} {f['path']}\n".encode())
        else:
            store.cat(org, name, rest[1], rest[2], out)
        out.flush()
        return 0
    except FormatError as e:
        out.flush()
        print(f"format_reader: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
