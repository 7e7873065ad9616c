"""The real Xet client (huggingface_hub + hf_xet) against `modelcas serve` (run by tests/xet.rs).

usage: xet_client.py MODE ENDPOINT REPO EXPECTED_JSON WORK_DIR

Modes:
  download   snapshot_download by ref and by sha and hf_hub_download of one file, with Xet
             on: byte-exact, the listed xetHash equals hf_xet's own hash_files of the bytes,
             and serve's counters show reconstructions (v2, none refused) and xorb fetches,
             no plain download.
  plain      the same with HF_HUB_DISABLE_XET=1: byte-exact, no reconstruction asked.
  protocol   the routes by hand: token (headers and JSON), reconstruction with Range (416
             past the end, offset_into_first_range), chunk records, a tampered fetch URL
             (403), a token for another repository (403), an unknown hash (404), no or a
             changed token (401); v2 reconstructions the same as v1's, reshaped.
  expired    a fetch URL and a token past their short lifetimes (server started with
             --xet-url-ttl 1s --xet-token-ttl 1s): refused (403, 401).
  refresh    a download with a short-lived token: the client fetches new tokens as they
             expire and the download completes byte-exact.
  damaged    the largest file of r1 by hand, its packs damaged: every fetch either refused
             or the file's own bytes (never a damaged one); some refused.
  big        hf_hub_download of BIG_FILE (over 256 MiB: the client asks in windows) of
             BIG_REPO, byte-exact against BIG_SHA256; the reconstructions it took.
HF_TOKEN, when set, is the server's --token-file token. Prints one JSON line of facts.
"""
import json, os, re, sys, time, urllib.error, urllib.request
from http.client import IncompleteRead

mode, endpoint, repo, expected_path, work = sys.argv[1:6]
os.environ["HF_ENDPOINT"] = endpoint
os.environ["HF_HUB_CACHE"] = os.path.join(work, "hub-cache")
os.environ["HF_HOME"] = os.path.join(work, "hf-home")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)
if mode == "plain":
    os.environ["HF_HUB_DISABLE_XET"] = "1"
else:
    os.environ.pop("HF_HUB_DISABLE_XET", None)

import hf_xet  # noqa: E402
import snapshot_files  # noqa: E402
from snapshot_files import sha256  # noqa: E402
from huggingface_hub import hf_hub_download, snapshot_download  # noqa: E402

exp = json.load(open(expected_path))
revs = {r["name"]: r for r in exp["revisions"]}
HUB_TOKEN = os.environ.get("HF_TOKEN")


def check(root, rev):
    return snapshot_files.check(root, rev, revs[rev])


def http(path, headers=None, method="GET", hub_auth=True):
    url = path if path.startswith("http") else endpoint + path
    h = dict(headers or {})
    if hub_auth and HUB_TOKEN and "Authorization" not in h:
        h["Authorization"] = f"Bearer {HUB_TOKEN}"
    req = urllib.request.Request(url, headers=h, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            try:
                return r.status, dict(r.headers), r.read()
            except IncompleteRead as e:
                # A streamed body cut short (a chunk failed its check mid-way): status -1,
                # the bytes that came before the cut.
                return -1, dict(r.headers), e.partial
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def counters():
    _, _, body = http("/metrics")
    out = {}
    for m in re.finditer(r'serve_requests_total\{endpoint="([^"]+)",status="(\d+)"\} (\d+)', body.decode()):
        out[(m.group(1), int(m.group(2)))] = out.get((m.group(1), int(m.group(2))), 0) + int(m.group(3))
    m = re.search(r"serve_bytes_sent_total (\d+)", body.decode())
    out[("plain-bytes", 0)] = int(m.group(1)) if m else 0
    return out


def count(c, endpoint_name, status=None):
    return sum(v for (e, s), v in c.items() if e == endpoint_name and (status is None or s == status))


def recons(c, status=200):
    """Reconstructions answered `status`, v1 and v2 together."""
    return count(c, "xet-reconstruction", status) + count(c, "xet-reconstruction-v2", status)


def tree(rev):
    s, _, body = http(f"/api/models/{repo}/tree/{rev}?recursive=true&expand=false")
    assert s == 200, (s, body)
    return [e for e in json.loads(body) if e["type"] == "file"]


def token(commit):
    s, h, body = http(f"/api/models/{repo}/xet-read-token/{commit}")
    assert s == 200, (s, body)
    j = json.loads(body)
    assert h["X-Xet-Access-Token"] == j["accessToken"] and h["X-Xet-Cas-Url"] == j["casUrl"]
    assert int(h["X-Xet-Token-Expiration"]) == j["exp"] > time.time()
    return j


def records(blob, cut=False):
    """Splits xorb bytes into chunk records, checking each header (`cut`: the bytes may end
    anywhere, the last record then a prefix)."""
    out, at = [], 0
    while at < len(blob) and not (cut and at + 8 > len(blob)):
        hdr = blob[at:at + 8]
        assert hdr[0] == 0 and hdr[4] == 0, hdr  # version 0, scheme none
        clen = int.from_bytes(hdr[1:4], "little")
        ulen = int.from_bytes(hdr[5:8], "little")
        assert clen == ulen and 0 < ulen <= 128 * 1024, (clen, ulen)
        out.append(blob[at + 8:at + 8 + ulen])
        at += 8 + ulen
    return out


def v1_fetches(r):
    """The fetch descriptors of a reconstruction, v1's shape whatever the API."""
    if "fetch_info" in r:
        return r["fetch_info"]
    # v2: per xorb, URLs each covering `ranges` (chunks, bytes); one v1 entry per range.
    return {h: [{"url": f["url"], "range": g["chunks"], "url_range": g["bytes"]}
                for f in fetches for g in f["ranges"]]
            for h, fetches in r["xorbs"].items()}


def reconstruct(cas, tok, xet_hash, start, end, api="v1"):
    """The bytes [start, end] of a file, by reconstruction and fetches, as the client does."""
    s, _, body = http(f"{cas}/{api}/reconstructions/{xet_hash}",
                      {"Authorization": f"Bearer {tok}", "Range": f"bytes={start}-{end}"}, hub_auth=False)
    assert s == 200, (s, body)
    r = json.loads(body)
    fetch_info = v1_fetches(r)
    data = b""
    for t in r["terms"]:
        info = [i for i in fetch_info[t["hash"]]
                if i["range"]["start"] <= t["range"]["start"] and t["range"]["end"] <= i["range"]["end"]][0]
        a, b = info["url_range"]["start"], info["url_range"]["end"]
        s, _, blob = http(info["url"], {"Range": f"bytes={a}-{b}"}, hub_auth=False)
        assert s == 206 and len(blob) == b - a + 1, (s, len(blob), a, b)
        recs = records(blob)
        k0 = t["range"]["start"] - info["range"]["start"]
        part = b"".join(recs[k0:k0 + t["range"]["end"] - t["range"]["start"]])
        assert len(part) == t["unpacked_length"], (len(part), t)
        data += part
    skip = r["offset_into_first_range"]
    return data[skip:skip + end - start + 1], r, info["url"]


facts = {}
if mode in ("download", "plain", "refresh"):
    before = counters()
    p = snapshot_download(repo, revision="r4")
    facts["by_ref_files"] = check(p, "r4")
    if mode != "refresh":
        p = snapshot_download(repo, revision=revs["r3"]["commit"], local_dir=os.path.join(work, "local"))
        facts["by_sha_files"] = check(p, "r3")
        big = max(revs["r1"]["files"], key=lambda f: f["size"])
        p = hf_hub_download(repo, big["path"], revision="r1")
        assert sha256(p) == big["sha256"]
    after = counters()
    facts["reconstructions"] = recons(after) - recons(before)
    facts["v2_reconstructions"] = count(after, "xet-reconstruction-v2", 200) - count(before, "xet-reconstruction-v2", 200)
    # Any reconstruction the client had to ask again (a 404 on v2 made it fall back to v1;
    # "xet-v2" is the label older servers answered that 404 under).
    facts["reconstructions_refused"] = sum(
        count(after, e) - count(before, e) for e in ("xet-v2",)) + sum(
        recons(after, s) - recons(before, s) for s in (400, 401, 403, 404))
    facts["xorb_fetches"] = count(after, "xet-xorb") - count(before, "xet-xorb")
    facts["tokens"] = count(after, "xet-token", 200) - count(before, "xet-token", 200)
    facts["resolve"] = count(after, "resolve") - count(before, "resolve")
    facts["plain_bytes"] = count(after, "plain-bytes") - count(before, "plain-bytes")
    if mode == "plain":
        assert facts["reconstructions"] == 0 and facts["xorb_fetches"] == 0, facts
    else:
        assert facts["reconstructions"] >= facts["by_ref_files"], facts
        assert facts["plain_bytes"] == 0, f"file bytes sent by plain downloads: {facts}"
        assert facts["xorb_fetches"] >= facts["reconstructions"], facts
        # The listed xetHash is the one hf_xet computes for the same bytes.
        entries = tree("r4")
        p = snapshot_download(repo, revision="r4")
        got = hf_xet.hash_files([os.path.join(p, e["path"]) for e in entries])
        assert [e["xetHash"] for e in entries] == [g.hash for g in got], "xetHash differs from hf_xet's"
        facts["xet_hashes_match_hf_xet"] = len(entries)
elif mode == "protocol":
    r4 = revs["r4"]["commit"]
    entries = tree(r4)
    big = max(entries, key=lambda e: e["size"])
    j = token(r4)
    cas, tok = j["casUrl"], j["accessToken"]
    want = open(os.path.join(os.path.dirname(expected_path), "plain", "r4", big["path"]), "rb").read()
    size = len(want)
    for a, b in [(0, size - 1), (1, 2), (131071, 131073 + 300000), (size - 5, size - 1), (size // 2, size - 1)]:
        got, r1, url = reconstruct(cas, tok, big["xetHash"], a, b)
        assert got == want[a:b + 1], (a, b, len(got))
        # v2, as hf_xet asks first: the same terms and offset, the same bytes.
        got2, r2, _ = reconstruct(cas, tok, big["xetHash"], a, b, api="v2")
        assert got2 == got and "fetch_info" not in r2, (a, b)
        assert (r2["terms"], r2["offset_into_first_range"]) == (r1["terms"], r1["offset_into_first_range"])
        assert {h: [(i["range"], i["url_range"]) for i in v] for h, v in v1_fetches(r2).items()} == \
            {h: [(i["range"], i["url_range"]) for i in v] for h, v in r1["fetch_info"].items()}
        facts["v2_ranges_checked"] = facts.get("v2_ranges_checked", 0) + 1
    facts["ranges"] = 5
    # A byte past the end: 416.
    s, _, _ = http(f"{cas}/v1/reconstructions/{big['xetHash']}",
                   {"Authorization": f"Bearer {tok}", "Range": f"bytes={size}-{size + 10}"}, hub_auth=False)
    assert s == 416, s
    # Hostile ranges never crash it: 416 or 200.
    for rng in ["bytes=5-1", "bytes=-0", "bytes=x-y", "bytes=0-99999999999999999999999", "items=0-1",
                "bytes=18446744073709551615-"]:
        s, _, _ = http(f"{cas}/v1/reconstructions/{big['xetHash']}",
                       {"Authorization": f"Bearer {tok}", "Range": rng}, hub_auth=False)
        assert s in (200, 416), (rng, s)
    # The fetch URL, tampered (another xorb index, another expiry, another signature): 403.
    good, _, _ = http(url, {"Range": "bytes=0-7"}, hub_auth=False)
    assert good == 206
    parts = url.split("/")
    for k in (-3, -2, -1):
        bad = list(parts)
        bad[k] = bad[k][:-1] + ("0" if bad[k][-1] != "0" else "1")
        s, _, _ = http("/".join(bad), {"Range": "bytes=0-7"}, hub_auth=False)
        assert s == 403, ("/".join(bad), s)
    facts["tampered_urls_refused"] = 3
    # No token, a changed token: 401. An unknown hash: 404. A malformed one: 400. v2 alike.
    for api in ("v1", "v2"):
        rec = f"{cas}/{api}/reconstructions/{big['xetHash']}"
        assert http(rec, {"Range": "bytes=0-1"}, hub_auth=False)[0] == 401
        assert http(rec, {"Authorization": f"Bearer {tok}x", "Range": "bytes=0-1"}, hub_auth=False)[0] == 401
        assert http(rec, {"Authorization": f"Bearer {tok}", "Range": f"bytes={size}-"}, hub_auth=False)[0] == 416
        assert http(f"{cas}/{api}/reconstructions/{'0' * 64}", {"Authorization": f"Bearer {tok}"},
                    hub_auth=False)[0] == 404
        assert http(f"{cas}/{api}/reconstructions/{'z' * 64}", {"Authorization": f"Bearer {tok}"},
                    hub_auth=False)[0] == 400
    rec = f"{cas}/v1/reconstructions/{big['xetHash']}"
    # A token for another repository (the second repository the test ingested): 403.
    other = os.environ["XET_OTHER_REPO"]
    s, _, body = http(f"/api/models/{other}/xet-read-token/main")
    assert s == 200, (s, body)
    other_tok = json.loads(body)["accessToken"]
    s, _, _ = http(rec, {"Authorization": f"Bearer {other_tok}", "Range": "bytes=0-1"}, hub_auth=False)
    assert s == 403, s
    facts["other_repo_refused"] = True
    if HUB_TOKEN:
        # The token route needs the server's token like every route; the CAS routes do not.
        assert http(f"/api/models/{repo}/xet-read-token/{r4}", hub_auth=False)[0] == 401
        facts["token_route_needs_auth"] = True
elif mode == "expired":
    r4 = revs["r4"]["commit"]
    big = max(tree(r4), key=lambda e: e["size"])
    j = token(r4)
    got, _, url = reconstruct(j["casUrl"], j["accessToken"], big["xetHash"], 0, 10)
    time.sleep(2.5)  # the lifetimes are 1 s: wall time must pass
    s, _, _ = http(url, {"Range": "bytes=0-7"}, hub_auth=False)
    assert s == 403, s
    s, _, _ = http(f"{j['casUrl']}/v1/reconstructions/{big['xetHash']}",
                   {"Authorization": f"Bearer {j['accessToken']}", "Range": "bytes=0-1"}, hub_auth=False)
    assert s == 401, s
    facts["expired_refused"] = True
elif mode == "damaged":
    r1 = revs["r1"]["commit"]
    path = max(revs["r1"]["files"], key=lambda f: f["size"])["path"]
    # The listing reads small files (their git ids): damaged too. HEAD reads nothing.
    s, h, _ = http(f"/{repo}/resolve/{r1}/{path}", method="HEAD")
    assert s == 200, s
    big = {"path": path, "xetHash": h["X-Xet-Hash"]}
    want = open(os.path.join(os.path.dirname(expected_path), "plain", "r1", path), "rb").read()
    j = token(r1)
    s, _, body = http(f"{j['casUrl']}/v1/reconstructions/{big['xetHash']}",
                      {"Authorization": f"Bearer {j['accessToken']}", "Range": f"bytes=0-{len(want) - 1}"},
                      hub_auth=False)
    assert s == 200, (s, body)
    r = json.loads(body)
    pos, refused, served = 0, 0, 0
    for t in r["terms"]:
        info = [i for i in r["fetch_info"][t["hash"]] if i["range"] == t["range"]][0]
        a, b = info["url_range"]["start"], info["url_range"]["end"]
        s, _, blob = http(info["url"], {"Range": f"bytes={a}-{b}"}, hub_auth=False)
        if s == 206:
            part = b"".join(records(blob))
            assert part == want[pos:pos + len(part)], f"wrong bytes served at {pos}"
            served += 1
        elif s == -1:
            # Cut where a chunk failed its check: what came before the cut is the file's.
            part = b"".join(records(blob, cut=True))
            assert part == want[pos:pos + len(part)], f"wrong bytes before the cut at {pos}"
            refused += 1
        else:
            assert s >= 500, s
            refused += 1
        pos += t["unpacked_length"]
    assert refused > 0, "no damaged range was refused"
    facts["refused"], facts["served_intact"] = refused, served
elif mode == "big":
    before = counters()
    p = hf_hub_download(os.environ["BIG_REPO"], os.environ["BIG_FILE"], revision="main")
    assert sha256(p) == os.environ["BIG_SHA256"], "big file differs"
    after = counters()
    facts["reconstructions"] = recons(after) - recons(before)
    facts["plain_bytes"] = count(after, "plain-bytes") - count(before, "plain-bytes")
print(json.dumps(facts))
