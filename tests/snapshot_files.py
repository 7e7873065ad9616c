"""What the Hub-client scripts (hub_client.py, xet_client.py) check a download against: a
file's sha256, and a downloaded snapshot's files against a revision of expected.json."""
import hashlib, os


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check(root, rev, revision):
    """The number of files under `root` (huggingface_hub's `.cache` aside), which must be
    exactly `revision`'s (an entry of expected.json's revisions), each with its sha256."""
    want = {f["path"]: f["sha256"] for f in revision["files"]}
    got = {}
    for d, _, files in os.walk(root):
        if ".cache" in os.path.relpath(d, root).split(os.sep):
            continue
        for name in files:
            p = os.path.join(d, name)
            got[os.path.relpath(p, root)] = sha256(p)
    assert got == want, f"{rev}: {sorted(set(got) ^ set(want))} differ or mismatched hashes"
    return len(got)
