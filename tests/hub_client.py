"""The official huggingface_hub client against `modelcas serve` (run by tests/serve.rs).

usage: hub_client.py ENDPOINT REPO EXPECTED_JSON WORK_DIR

Checks snapshot_download by ref and by sha, hf_hub_download of one file, the client's
not-found errors, and a resumed download (the client's own http_get with resume_size).
Prints one JSON line of facts on success; raises on any mismatch.
"""
import json, os, sys

endpoint, repo, expected_path, work = sys.argv[1:5]
os.environ["HF_ENDPOINT"] = endpoint
os.environ["HF_HUB_CACHE"] = os.path.join(work, "hub-cache")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)

import snapshot_files  # noqa: E402
from snapshot_files import sha256  # noqa: E402
from huggingface_hub import hf_hub_download, hf_hub_url, snapshot_download  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)
from huggingface_hub.file_download import http_get  # noqa: E402
from huggingface_hub.utils import build_hf_headers  # noqa: E402

exp = json.load(open(expected_path))
revs = {r["name"]: r for r in exp["revisions"]}


def check(root, rev):
    return snapshot_files.check(root, rev, revs[rev])


facts = {}
p = snapshot_download(repo, revision="r4")
facts["by_ref_files"] = check(p, "r4")
assert os.path.basename(p) == revs["r4"]["commit"], p
p = snapshot_download(repo, revision=revs["r4"]["commit"], local_dir=os.path.join(work, "local"))
facts["by_sha_files"] = check(p, "r4")
p = hf_hub_download(repo, "config.json", revision="r1")
want = [f for f in revs["r1"]["files"] if f["path"] == "config.json"][0]["sha256"]
assert sha256(p) == want
facts["single_file"] = True

for what, call, err in [
    ("file", lambda: hf_hub_download(repo, "no-such-file.json", revision="r4"), EntryNotFoundError),
    ("revision", lambda: hf_hub_download(repo, "config.json", revision="no-such-branch"), RevisionNotFoundError),
    ("repo", lambda: hf_hub_download("nobody/nothing", "config.json"), RepositoryNotFoundError),
]:
    try:
        call()
    except err as e:
        facts[f"not_found_{what}"] = type(e).__name__
    else:
        raise AssertionError(f"unknown {what} did not raise {err.__name__}")

# A download interrupted after `half` bytes, resumed by the client with a Range request.
shard = max(revs["r4"]["files"], key=lambda f: f["size"])
url = hf_hub_url(repo, shard["path"], revision="r4")
src = os.path.join(work, "local", shard["path"])
half = shard["size"] // 2
out = os.path.join(work, "resumed.bin")
with open(src, "rb") as f, open(out, "wb") as tmp:
    tmp.write(f.read(half))
    http_get(url, tmp, resume_size=half, expected_size=shard["size"], headers=build_hf_headers())
assert os.path.getsize(out) == shard["size"]
assert sha256(out) == shard["sha256"], "resumed download differs"
facts["resumed_from"] = half
print(json.dumps(facts))
