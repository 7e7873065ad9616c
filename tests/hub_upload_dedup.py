"""One upload with the real huggingface_hub and hf_xet, for tests/upload.rs's global dedup
test: each phase runs in a process of its own with its own HF_HOME (so hf_xet's own
cache of what it sent is empty: another machine).

usage: hub_upload_dedup.py ENDPOINT REPO WORK_DIR WRITE_TOKEN PHASE[-lfs]

Phase 1 uploads a model of two 3 MiB shards of random bytes and a config; phase 2 uploads
it with its second shard changed. Each downloads the commit it made and compares every
byte. Prints the commit id.
"""
import hashlib, os, random, sys

endpoint, repo, work, token, phase = sys.argv[1:6]
os.environ.update(HF_ENDPOINT=endpoint, HF_HOME=os.path.join(work, f"home-{phase}"),
                  HF_HUB_CACHE=os.path.join(work, f"cache-{phase}"),
                  HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
for v in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_DISABLE_XET"):
    os.environ.pop(v, None)
if phase.endswith("-lfs"):  # this phase uploads with plain LFS
    phase = phase[:-4]
    os.environ["HF_HUB_DISABLE_XET"] = "1"

from huggingface_hub import HfApi, snapshot_download  # noqa: E402


def shard(seed):
    return random.Random(seed).randbytes(3 << 20)


folder = os.path.join(work, f"v{phase}")
os.makedirs(folder, exist_ok=True)
files = {"config.json": b'{"hidden_size": 64}\n', "model-1.safetensors": shard(1),
         "model-2.safetensors": shard(2 if phase == "1" else 3)}
for name, data in files.items():
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)
info = HfApi(endpoint=endpoint, token=token).upload_folder(repo_id=repo, folder_path=folder,
                                                           commit_message=f"phase {phase}")
got = snapshot_download(repo, revision=info.oid, token=token, local_dir=os.path.join(work, f"dl-{phase}"))
for name, data in files.items():
    with open(os.path.join(got, name), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest(), name
print(info.oid)
