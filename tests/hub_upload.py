"""The official huggingface_hub client uploading to `modelcas serve` (run by tests/upload.rs).

usage: hub_upload.py ENDPOINT REPO WORK_DIR WRITE_TOKEN READ_TOKEN

With plain LFS (the caller sets HF_HUB_DISABLE_XET=1) or with hf_xet (it does not): create_repo, upload_folder of a
small model (inline config files, LFS tokenizer and shards, a nested folder), a download
of the commit compared byte for byte, a second upload that changes one shard (only that
shard is sent: the others are unchanged by their oid), a deletion, a branch and a tag, and
the refusals a client meets: a read token (403), a repository outside the token's scope
(403), a stale parent commit (412). (Unsafe paths and lying bytes, which the client never
sends, are sent raw by tests/upload.rs.) Prints one JSON line of facts;
raises on any mismatch.
"""
import hashlib, json, os, shutil, sys

endpoint, repo, work, write_token, read_token = sys.argv[1:6]
os.environ["HF_ENDPOINT"] = endpoint
os.environ["HF_HUB_CACHE"] = os.path.join(work, "hub-cache")
os.environ["HF_HOME"] = os.path.join(work, "hf-home")  # hf_xet's own cache too
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.pop("HF_TOKEN", None)

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, snapshot_download  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError  # noqa: E402


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def tree(root):
    """sha256 by path, without a local_dir's `.cache/` (the client's own records)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            if rel.split(os.sep)[0] != ".cache":
                out[rel] = sha(p)
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def model(dir):
    write(os.path.join(dir, "config.json"), b'{"architectures": ["Tiny"], "hidden_size": 64}\n')
    write(os.path.join(dir, "tokenizer.json"), json.dumps({"vocab": {f"t{i}": i for i in range(30000)}}).encode())
    for i in (1, 2):
        write(os.path.join(dir, f"model-0000{i}-of-00002.safetensors"), os.urandom(3 << 20))
    write(os.path.join(dir, "docs/nested/README.md"), b"# tiny\n")
    write(os.path.join(dir, "README.md"), b"---\nlicense: apache-2.0\n---\n# tiny\n")


def refused(call, status):
    try:
        call()
    except HfHubHTTPError as e:
        got = e.response.status_code
        assert got == status, f"expected {status}, got {got}: {e}"
        return e.response.headers.get("X-Error-Message") or str(e)
    raise AssertionError(f"expected HTTP {status}, the call succeeded")


facts = {}
api = HfApi(endpoint=endpoint, token=write_token)
reader = HfApi(endpoint=endpoint, token=read_token)

v1 = os.path.join(work, "v1")
model(v1)
url = api.create_repo(repo, exist_ok=True)
assert str(url).endswith(repo), url
first = api.upload_folder(repo_id=repo, folder_path=v1, commit_message="first")
facts["first"] = first.oid
got = snapshot_download(repo, revision=first.oid, token=read_token)
assert tree(got) == tree(v1), (tree(got), tree(v1))
got = snapshot_download(repo, token=read_token, local_dir=os.path.join(work, "main-v1"))
assert tree(got) == tree(v1)
facts["files"] = len(tree(v1))
assert reader.model_info(repo).sha == first.oid

# A fine-tune of it: one shard changes.
v2 = os.path.join(work, "v2")
shutil.copytree(v1, v2)
write(os.path.join(v2, "model-00002-of-00002.safetensors"), os.urandom(3 << 20))
second = api.upload_folder(repo_id=repo, folder_path=v2, commit_message="second")
facts["second"] = second.oid
assert second.oid != first.oid
got = snapshot_download(repo, revision=second.oid, token=read_token)
assert tree(got) == tree(v2)
# The first commit is still there, by its id.
got = snapshot_download(repo, revision=first.oid, token=read_token, local_dir=os.path.join(work, "again-v1"))
assert tree(got) == tree(v1)

# Nothing changed: the client sends no commit and answers the head.
same = api.upload_folder(repo_id=repo, folder_path=v2, commit_message="same")
assert same.oid == second.oid, (same.oid, second.oid)

# A deletion and an addition in one commit.
third = api.create_commit(repo, operations=[
    CommitOperationDelete("docs/"),
    CommitOperationAdd("notes.txt", b"fine-tuned on our data\n"),
], commit_message="third")
files = sorted(api.list_repo_files(repo, revision=third.oid))
assert "docs/nested/README.md" not in files and "notes.txt" in files and "README.md" in files, files
facts["third_files"] = len(files)

# Branches and tags.
api.create_branch(repo, branch="dev", revision=first.oid)
assert api.model_info(repo, revision="dev").sha == first.oid
api.create_tag(repo, tag="v1.0", revision=second.oid)
assert api.model_info(repo, revision="v1.0").sha == second.oid
refused(lambda: api.create_branch(repo, branch="dev"), 409)
dev = api.upload_file(path_or_fileobj=b"dev only\n", path_in_repo="dev.txt", repo_id=repo, revision="dev")
assert api.model_info(repo, revision="dev").sha == dev.oid
assert api.model_info(repo).sha == third.oid, "main did not move"
# Every later push_to_hub or upload script starts with this on a repository with commits.
again = api.create_repo(repo, exist_ok=True)
assert str(again).rstrip("/").endswith(repo), again
# A tag is listed as a tag, takes no commit, and each route deletes only its own kind.
refs = api.list_repo_refs(repo)
assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0", second.oid)], refs
assert {b.name for b in refs.branches} == {"main", "dev"}, refs
facts["commit_to_tag"] = refused(lambda: api.upload_file(
    path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo, revision="v1.0"), 400)
assert api.model_info(repo, revision="v1.0").sha == second.oid, "the tag did not move"
refused(lambda: api.delete_branch(repo, branch="v1.0"), 404)
refused(lambda: api.delete_tag(repo, tag="dev"), 404)
api.delete_tag(repo, tag="v1.0")
assert api.list_repo_refs(repo).tags == [] and api.model_info(repo, revision="dev").sha == dev.oid
api.create_tag(repo, tag="v1.0", revision=second.oid)
assert [t.name for t in api.list_repo_refs(repo).tags] == ["v1.0"]

# What a client is refused.
facts["read_token"] = refused(lambda: reader.upload_file(
    path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=repo), 403)
facts["stale_parent"] = refused(lambda: api.create_commit(repo, operations=[
    CommitOperationAdd("late.txt", b"late")], commit_message="late", parent_commit=first.oid), 412)
assert api.model_info(repo).sha == third.oid
facts["other_repo"] = refused(lambda: api.upload_file(
    path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="elsewhere/model"), 403)
print(json.dumps(facts))
