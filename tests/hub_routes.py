"""The real huggingface_hub client's browsing calls against `modelcas serve` (run by
tests/hub_routes.rs, issue 42), the same matrix in local and in mirror mode.

usage: hub_routes.py ENDPOINT EXPECTED_JSON SMALL_JSON WORK_DIR TOKEN TOKEN_NAME

The store (or the mirror's upstream) holds demo-org/demo-llm (r1..r4, `main` = r4),
team/m0..team/m4 (SMALL_JSON's files, published in that order after demo-llm) and
hidden/secret, which the server's allow-list leaves out. The mirror's first calls pull
what the later ones read, in the order the local store published it, so that every
assertion holds in both modes. Prints one JSON line of facts; raises on any mismatch.
"""
import hashlib, json, os, subprocess, sys

endpoint, expected_path, small_path, work, token, token_name = sys.argv[1:7]
os.environ["HF_ENDPOINT"] = endpoint
os.environ["HF_HUB_CACHE"] = os.path.join(work, "hub-cache")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_TOKEN"] = token
os.environ.pop("HF_HUB_OFFLINE", None)

from huggingface_hub import HfApi, HfFileSystem  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError  # noqa: E402
from huggingface_hub.utils import build_hf_headers  # noqa: E402
from huggingface_hub.utils._pagination import _paginate_pages  # noqa: E402

DEMO = "demo-org/demo-llm"
TEAM = [f"team/m{i}" for i in range(5)]
exp = json.load(open(expected_path))
revs = {r["name"]: r for r in exp["revisions"]}
r4 = {f["path"]: f for f in revs["r4"]["files"]}
small = json.load(open(small_path))  # path -> sha256
api = HfApi(endpoint=endpoint, token=token)
facts = {}


def eq(got, want, what):
    assert got == want, f"{what}: got {got!r}, want {want!r}"


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def raises(call, status, what):
    try:
        call()
    except HfHubHTTPError as e:
        eq(e.response.status_code, status, what)
        return type(e).__name__
    raise AssertionError(f"{what}: did not raise")


# Pulls in mirror mode (a no-op locally): demo-llm's revisions, then the team's repos.
for r in ["r1", "r2", "r3", "r4"]:
    eq(api.model_info(DEMO, revision=r).sha, revs[r]["commit"], f"model_info {r}")
for m in TEAM:
    eq(sorted(s.rfilename for s in api.model_info(m).siblings), sorted(small), m)

# model_info without a revision: main.
info = api.model_info(DEMO)
eq(info.sha, revs["r4"]["commit"], "model_info sha")
eq(sorted(s.rfilename for s in info.siblings), sorted(r4), "model_info siblings")
eq((info.private, info.gated, info.downloads), (False, False, 0), "model_info flags")
meta = api.model_info(DEMO, files_metadata=True)
shard = "model-00001-of-00003.safetensors"
got = {s.rfilename: s for s in meta.siblings}
eq(got[shard].lfs.sha256, r4[shard]["sha256"], "files_metadata lfs")
eq(got["config.json"].size, r4["config.json"]["size"], "files_metadata size")

# Existence: the repository, others, other repository types, files.
eq(api.repo_exists(DEMO), True, "repo_exists")
eq(api.repo_exists("team/nothing"), False, "repo_exists missing")
eq(api.repo_exists(DEMO, repo_type="dataset"), False, "repo_exists dataset")
eq(api.repo_exists(TEAM[0], repo_type="space"), False, "repo_exists space")
eq(api.file_exists(DEMO, "config.json"), True, "file_exists")
eq(api.file_exists(DEMO, "nope.json"), False, "file_exists missing")

# list_models: newest first, filters, pages, the allow-list.
newest_first = list(reversed(TEAM)) + [DEMO]
ids = [m.id for m in api.list_models(sort="lastModified")]
eq(ids, newest_first, "list_models lastModified")
eq([m.id for m in api.list_models(sort="createdAt")], newest_first, "createdAt")
eq([m.id for m in api.list_models(author="TEAM", sort="lastModified", limit=3)],
   newest_first[:3], "list_models author limit")
eq([m.id for m in api.list_models(search="M3")], ["team/m3"], "list_models search")
eq([m.id for m in api.list_models(search="demo")], [DEMO], "search demo")
eq([m.id for m in api.list_models()], sorted(newest_first), "list_models by id")
listed = {m.id: m for m in api.list_models(full=True)}
eq(listed[DEMO].sha, revs["r4"]["commit"], "list_models sha")
eq(sorted(s.rfilename for s in listed[DEMO].siblings), sorted(r4), "full siblings")
pages = [[m["id"] for m in page] for page, _ in _paginate_pages(
    f"{endpoint}/api/models", {"sort": "lastModified", "limit": 2}, build_hf_headers(token=token))]
eq(pages, [newest_first[0:2], newest_first[2:4], newest_first[4:6]], "list_models pages")
facts["list_models_pages"] = len(pages)
raises(lambda: list(api.list_models(sort="nonsense")), 400, "unknown sort")

# list_repo_commits: the store's revisions, newest first, from the one named.
commits = [revs[r]["commit"] for r in ["r4", "r3", "r2", "r1"]]
eq([c.commit_id for c in api.list_repo_commits(DEMO)], commits, "list_repo_commits")
eq([c.commit_id for c in api.list_repo_commits(DEMO, revision="r2")], commits[2:], "from r2")
c0 = api.list_repo_commits(DEMO)[0]
assert c0.authors == ["modelcas"] and "main" in c0.message and c0.created_at, c0
pages = [[c["id"] for c in page] for page, _ in _paginate_pages(
    f"{endpoint}/api/models/{DEMO}/commits/main", {"limit": 3}, build_hf_headers(token=token))]
eq(pages, [commits[:3], commits[3:]], "commits pages")

# get_paths_info: files (plain and LFS) and folders; missing paths left out.
infos = api.get_paths_info(DEMO, ["config.json", shard, "missing.bin"], revision="r4")
eq([i.path for i in infos], ["config.json", shard], "paths_info paths")
eq(infos[0].size, r4["config.json"]["size"], "paths_info size")
eq(infos[1].lfs.sha256, r4[shard]["sha256"], "paths_info lfs")
infos = api.get_paths_info(TEAM[0], ["sub", "sub/notes.txt", "sub/nope"])
eq([(type(i).__name__, i.path) for i in infos],
   [("RepoFolder", "sub"), ("RepoFile", "sub/notes.txt")], "paths_info folder")

# HfFileSystem: ls, info, glob, open (every file of main, byte-exact).
fs = HfFileSystem(endpoint=endpoint, token=token)
eq(sorted(fs.ls(DEMO, detail=False)), sorted(f"{DEMO}/{p}" for p in r4), "fs.ls")
eq(fs.info(f"{DEMO}/{shard}")["size"], r4[shard]["size"], "fs.info")
eq(fs.info(f"{TEAM[1]}/sub")["type"], "directory", "fs.info folder")
eq(sorted(fs.glob(f"{DEMO}/*.safetensors")),
   sorted(f"{DEMO}/{p}" for p in r4 if p.endswith(".safetensors")), "fs.glob")
for p, f in r4.items():
    with fs.open(f"{DEMO}/{p}", "rb") as fh:
        eq(sha256(fh.read()), f["sha256"], f"fs.open {p}")
with fs.open(f"{TEAM[2]}/sub/notes.txt", "rb") as fh:
    eq(sha256(fh.read()), small["sub/notes.txt"], "fs.open team")
facts["fs_files"] = len(r4)

# hf download (the CLI), byte-exact; hf auth whoami.
hf = os.path.join(os.path.dirname(sys.executable), "hf")
dest = os.path.join(work, "download")
subprocess.run([hf, "download", DEMO, "--local-dir", dest], check=True, capture_output=True)
for p, f in r4.items():
    eq(sha256(open(os.path.join(dest, p), "rb").read()), f["sha256"], f"hf download {p}")
out = subprocess.run([hf, "auth", "whoami"], check=True, capture_output=True, text=True)
assert token_name in out.stdout, out.stdout
bad = subprocess.run([hf, "auth", "whoami"], capture_output=True, text=True,
                     env={**os.environ, "HF_TOKEN": "wrong-token"})
assert bad.returncode != 0, bad.stdout

# whoami through the API: the token's name; a wrong token is refused.
me = api.whoami()
eq(me["name"], token_name, "whoami name")
eq(me["auth"]["accessToken"]["displayName"], token_name, "whoami displayName")
facts["whoami_wrong"] = raises(lambda: HfApi(endpoint=endpoint, token="wrong").whoami(),
                               401, "whoami wrong token")

# The allow-list: hidden/secret is neither described nor listed.
facts["hidden"] = raises(lambda: api.model_info("hidden/secret"), 403, "hidden model_info")
assert "hidden/secret" not in [m.id for m in api.list_models()]
print(json.dumps(facts))
