//! The client against a fake upstream (`fake/`): listing, downloading, verifying, and
//! each way an upstream can misbehave. Every test asserts outcomes: bytes, hashes,
//! counts, the headers the upstream received.

mod fake;

use std::io::Read;
use std::time::{Duration, Instant};

use fake::{Canned, Fake, COMMIT, REPO};
use hubclient::{Error, HubClient, HubOptions, ListingLimits, Timeouts, Verifier, Verifying};
use sha2::{Digest, Sha256};

fn options(endpoint: &str) -> HubOptions {
    HubOptions {
        endpoint: endpoint.to_string(),
        max_retries: 3,
        // Short, so that a test that waits long shows the wait came from Retry-After.
        base_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_secs(2),
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(5),
            read: Duration::from_secs(5),
            ..Timeouts::default()
        },
        ..HubOptions::default()
    }
}

fn client(fake: &Fake) -> HubClient {
    HubClient::new(options(&fake.url)).unwrap()
}

/// The whole file through `open` from `offset`.
fn fetch(c: &HubClient, path: &str, offset: u64, size: Option<u64>) -> Result<Vec<u8>, Error> {
    let mut d = c.open(REPO, COMMIT, path, offset, size)?;
    let mut out = Vec::new();
    d.copy_to(&mut out)?;
    Ok(out)
}

fn sha256(b: &[u8]) -> Vec<u8> {
    Sha256::digest(b).to_vec()
}

#[test]
fn revision_lists_every_file_with_its_hashes() {
    let fake = Fake::start();
    let c = client(&fake);
    let rev = c.revision(REPO, "main").unwrap();
    assert_eq!(rev.commit, COMMIT);
    let paths: Vec<&str> = rev.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["model.safetensors", "config.json", "sub/dir/tokenizer.json"]
    );
    for (f, want) in rev.files.iter().zip(fake::files()) {
        assert_eq!(f.size, want.data.len() as u64);
        assert_eq!(f.git_oid, want.oid());
        assert_eq!(
            f.sha256.map(|s| s.to_hex()),
            want.lfs.then(|| want.sha256_hex())
        );
    }
    // A PR ref is sent as one encoded segment.
    assert_eq!(c.revision(REPO, "refs/pr/1").unwrap().commit, COMMIT);
    let seen = fake.seen();
    assert!(seen
        .iter()
        .any(|s| s.target == format!("/api/models/{REPO}/revision/refs%2Fpr%2F1")));
    assert!(seen
        .iter()
        .any(|s| s.target.ends_with("?recursive=true&expand=false")));
}

#[test]
fn every_file_downloads_and_verifies() {
    let fake = Fake::start();
    let c = client(&fake);
    let rev = c.revision(REPO, "main").unwrap();
    let mut total = 0;
    for f in &rev.files {
        let d = c.open_file(REPO, &rev.commit, f, 0).unwrap();
        assert_eq!(d.size(), f.size);
        let mut r = Verifying::new(d, Verifier::for_file(f));
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).unwrap();
        let (digests, d) = r.finish();
        assert_eq!(bytes, fake.file(&f.path).data);
        assert_eq!(d.position(), f.size);
        f.check(&digests).unwrap();
        total += f.size;
    }
    let st = c.stats();
    assert_eq!((st.bytes_downloaded, st.retries, st.resumes), (total, 0, 0));
    assert_eq!(st.requests, 2 + 3);
    let downloads: Vec<_> = fake
        .seen()
        .into_iter()
        .filter(|s| s.target.contains("/resolve/"))
        .collect();
    assert_eq!(
        downloads[2].target,
        format!("/{REPO}/resolve/{COMMIT}/sub/dir/tokenizer.json")
    );
    assert!(downloads
        .iter()
        .all(|s| s.header("accept-encoding") == Some("identity") && s.header("range").is_none()));
}

/// Brief item 1: Cut connections are resumed with `Range` from where they stopped.
#[test]
fn cut_connections_resume_to_the_exact_bytes() {
    let fake = Fake::start();
    let want = fake.file("model.safetensors");
    fake.state().cuts = [100_000, 0, 50_000, 7].into();
    let c = client(&fake);
    let got = fetch(&c, "model.safetensors", 0, Some(300_000)).unwrap();
    assert_eq!(sha256(&got), sha256(&want.data));
    let st = c.stats();
    assert_eq!(
        (st.resumes, st.retries, st.bytes_downloaded),
        (4, 4, 300_000)
    );
    let ranges: Vec<_> = fake
        .seen()
        .iter()
        .map(|s| s.header("range").map(str::to_string))
        .collect();
    let expect = [
        None,
        Some("bytes=100000-"),
        Some("bytes=100000-"),
        Some("bytes=150000-"),
        Some("bytes=150007-"),
    ];
    assert_eq!(ranges, expect.map(|r| r.map(str::to_string)));
}

/// A connection that goes silent mid-body is given up after the read timeout and
/// resumed.
#[test]
fn a_stalled_connection_is_resumed() {
    let fake = Fake::start();
    fake.state().cuts = [70_000].into();
    fake.state().stall = Some(Duration::from_secs(3));
    let mut o = options(&fake.url);
    o.timeouts.read = Duration::from_millis(300);
    let c = HubClient::new(o).unwrap();
    let t = Instant::now();
    let got = fetch(&c, "model.safetensors", 0, None).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(sha256(&got), sha256(&fake.file("model.safetensors").data));
    assert_eq!(c.stats().resumes, 1);
    assert_eq!(fake.seen()[1].header("range"), Some("bytes=70000-"));
}

/// Brief item 1b: A connection that keeps failing without progress ends in a clear error.
#[test]
fn cuts_without_progress_are_bounded() {
    let fake = Fake::start();
    fake.state().cuts = [1000, 0, 0, 0, 0, 0].into();
    let c = client(&fake);
    let e = fetch(&c, "model.safetensors", 0, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Interrupted {
                position: 1000,
                attempts: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("model.safetensors"), "{e}");
    assert_eq!(c.stats().resumes, 3);
}

/// Brief item 2: `Retry-After` is waited for; then the call succeeds.
#[test]
fn status_429_waits_for_retry_after() {
    let fake = Fake::start();
    let after = [("retry-after".to_string(), "1".to_string())].to_vec();
    fake.state().canned.push_back(Canned {
        on: "/revision/",
        status: 429,
        headers: after,
        body: b"slow down".to_vec(),
    });
    let c = client(&fake);
    let t = Instant::now();
    assert_eq!(c.commit(REPO, "main").unwrap(), COMMIT);
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((c.stats().retries, c.stats().requests), (1, 2));
}

/// Brief item 2b: 5xx are retried; when they persist the error says how often it tried.
#[test]
fn server_errors_are_retried_then_reported() {
    let fake = Fake::start();
    for _ in 0..2 {
        fake.state().canned.push_back(Canned {
            on: "/resolve/",
            status: 503,
            headers: vec![],
            body: vec![],
        });
    }
    let c = client(&fake);
    assert_eq!(
        fetch(&c, "config.json", 0, None).unwrap(),
        fake.file("config.json").data
    );
    assert_eq!(c.stats().retries, 2);
    for _ in 0..10 {
        fake.state().canned.push_back(Canned {
            on: "/tree/",
            status: 500,
            headers: vec![],
            body: b"{\"error\":\"boom\"}".to_vec(),
        });
    }
    let e = c.tree(REPO, COMMIT).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Status {
                status: 500,
                attempts: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("boom"), "{e}");
}

/// Brief item 3: A token: refused without, accepted with, sent as a bearer token.
#[test]
fn token_is_required_and_sent() {
    let fake = Fake::start();
    fake.state().token = Some("s3cret".into());
    let e = client(&fake).revision(REPO, "main").unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("HF_TOKEN") && msg.contains("--token") && msg.contains("Invalid credentials"),
        "{msg}"
    );
    let with = HubClient::new(HubOptions {
        token: Some("s3cret".into()),
        ..options(&fake.url)
    })
    .unwrap();
    assert_eq!(with.revision(REPO, "main").unwrap().files.len(), 3);
    let wrong = HubClient::new(HubOptions {
        token: Some("nope".into()),
        ..options(&fake.url)
    })
    .unwrap();
    let e = wrong.commit(REPO, "main").unwrap_err().to_string();
    assert!(e.contains("token sent was refused"), "{e}");
    assert!(fake
        .seen()
        .iter()
        .any(|s| s.header("authorization") == Some("Bearer s3cret")));
}

/// Issue 26 point 8: a redirect to another origin (here another port) is refused, with an
/// error naming it, and that origin never sees a request; bytes come only from the
/// endpoint's origin or a configured redirect host.
#[test]
fn a_redirect_to_another_origin_is_refused() {
    let (hub, cdn) = (Fake::start(), Fake::start());
    hub.state().token = Some("s3cret".into());
    hub.state().redirect = Some(cdn.url.clone());
    let c = HubClient::new(HubOptions {
        token: Some("s3cret".into()),
        ..options(&hub.url)
    })
    .unwrap();
    let r = fetch(&c, "sub/dir/tokenizer.json", 0, None);
    let taken = r.as_ref().map(Vec::len).ok();
    assert!(r.is_err(), "{taken:?} bytes taken from another origin");
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("refused to follow the redirect") && e.contains(&cdn.url),
        "{e}"
    );
    assert!(e.contains("not the endpoint's origin"), "{e}");
    assert_eq!(cdn.seen().len(), 0, "the other origin was asked");
}

/// A redirect to a configured host (a CDN) is followed, without the token; the size and
/// etag of the hub hop are kept for a resumed download.
#[test]
fn a_redirect_to_a_configured_host_drops_the_token() {
    let (hub, cdn) = (Fake::start(), Fake::start());
    hub.state().token = Some("s3cret".into());
    hub.state().redirect = Some(cdn.url.clone());
    let c = HubClient::new(HubOptions {
        token: Some("s3cret".into()),
        redirect_hosts: vec![cdn.url.clone()],
        ..options(&hub.url)
    })
    .unwrap();
    let got = fetch(&c, "sub/dir/tokenizer.json", 0, None).unwrap();
    assert_eq!(got, hub.file("sub/dir/tokenizer.json").data);
    let (h, d) = (hub.seen(), cdn.seen());
    assert_eq!((h.len(), d.len()), (1, 1));
    assert_eq!(h[0].header("authorization"), Some("Bearer s3cret"));
    assert_eq!(d[0].target, "/cdn/sub%2Fdir%2Ftokenizer%2Ejson");
    assert_eq!(d[0].header("authorization"), None);
    // The size and etag of the hub hop are kept: a resumed LFS download checks them.
    cdn.state().cuts = [1234].into();
    let got = fetch(&c, "model.safetensors", 0, None).unwrap();
    assert_eq!(sha256(&got), sha256(&hub.file("model.safetensors").data));
    let resumed = cdn.seen().last().cloned().unwrap();
    assert_eq!(
        (resumed.header("range"), resumed.header("authorization")),
        (Some("bytes=1234-"), None)
    );
    // The rule is for that origin only: the same host on another port is refused.
    let other = Fake::start();
    hub.state().redirect = Some(other.url.clone());
    assert!(fetch(&c, "config.json", 0, None).is_err());
    assert_eq!(other.seen().len(), 0);
}

/// Issue 26 points 8 and 11: `Location` values in every form, resolved by the `url`
/// crate: relative ones (dot segments included) stay on the endpoint's origin and keep
/// the token; user info, scheme-relative and other schemes are refused before any
/// request; a loop ends with an error naming the hop count.
#[test]
fn redirect_locations_are_resolved_and_checked() {
    let (hub, cdn) = (Fake::start(), Fake::start());
    hub.state().token = Some("s3cret".into());
    let c = HubClient::new(HubOptions {
        token: Some("s3cret".into()),
        ..options(&hub.url)
    })
    .unwrap();
    let want = hub.file("config.json").data;
    // Relative with dot segments: /org/model/resolve/{commit}/config.json → /cdn/config.json.
    hub.state().location = Some("../../../../cdn/config.json".into());
    assert_eq!(fetch(&c, "config.json", 0, None).unwrap(), want);
    let last = hub.seen().last().cloned().unwrap();
    assert_eq!(last.target, "/cdn/config.json");
    assert_eq!(last.header("authorization"), Some("Bearer s3cret"));
    // Absolute-path.
    hub.state().location = Some("/cdn/config.json".into());
    assert_eq!(fetch(&c, "config.json", 0, None).unwrap(), want);

    let cdn_host = cdn.url.trim_start_matches("http://").to_string();
    let hub_host = hub.url.trim_start_matches("http://").to_string();
    for loc in [
        format!("//{cdn_host}/cdn/config.json"),
        format!("http://hub@{cdn_host}/cdn/config.json"),
        format!("http://{hub_host}@{cdn_host}/cdn/config.json"),
        format!("http://user:pw@{hub_host}/cdn/config.json"),
        "file:///etc/passwd".to_string(),
        "ftp://example.com/x".to_string(),
    ] {
        hub.state().location = Some(loc.clone());
        let before = hub.seen().len();
        let e = fetch(&c, "config.json", 0, None)
            .expect_err(&loc)
            .to_string();
        assert!(e.contains("refused to follow the redirect"), "{loc}: {e}");
        assert_eq!(hub.seen().len(), before + 1, "{loc}: one request, no hop");
    }
    assert_eq!(cdn.seen().len(), 0);
    // A loop: the same URL again and again.
    hub.state().location = Some(format!("/{REPO}/resolve/{COMMIT}/config.json"));
    let e = fetch(&c, "config.json", 0, None).unwrap_err().to_string();
    assert!(e.contains("more than 10 redirects"), "{e}");
}

/// A redirect within the endpoint's origin (a renamed repository) keeps the token.
#[test]
fn redirect_within_the_origin_keeps_the_token() {
    let hub = Fake::start();
    hub.state().token = Some("s3cret".into());
    hub.state().redirect = Some(hub.url.clone());
    let c = HubClient::new(HubOptions {
        token: Some("s3cret".into()),
        ..options(&hub.url)
    })
    .unwrap();
    assert_eq!(
        fetch(&c, "config.json", 0, None).unwrap(),
        hub.file("config.json").data
    );
    let seen = hub.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen
        .iter()
        .all(|s| s.header("authorization") == Some("Bearer s3cret")));
}

/// An answer for another commit than the one asked for is refused.
#[test]
fn another_commit_is_refused() {
    let fake = Fake::start();
    let other = [("x-repo-commit".to_string(), "f".repeat(40))].to_vec();
    fake.state().canned.push_back(Canned {
        on: "/resolve/",
        status: 200,
        headers: other,
        body: b"{}".to_vec(),
    });
    let e = client(&fake)
        .open(REPO, COMMIT, "config.json", 0, None)
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Protocol { .. }) && e.to_string().contains("X-Repo-Commit"),
        "{e}"
    );
    let body = format!(r#"{{"id":"{REPO}","sha":"{}"}}"#, "e".repeat(40)).into_bytes();
    fake.state().canned.push_back(Canned {
        on: "/revision/",
        status: 200,
        headers: vec![],
        body,
    });
    let e = client(&fake).commit(REPO, COMMIT).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("asked for commit {COMMIT}")),
        "{e}"
    );
}

/// Brief item 4: A flipped byte: the download succeeds, the check names the file and the hash.
#[test]
fn a_flipped_byte_is_reported() {
    let fake = Fake::start();
    let c = client(&fake);
    let rev = c.revision(REPO, "main").unwrap();
    for (f, what) in rev
        .files
        .iter()
        .zip(["sha256", "git blob sha1", "git blob sha1"])
    {
        fake.state().flip = Some((f.path.clone(), f.size as usize / 2));
        let mut r = Verifying::new(
            c.open_file(REPO, COMMIT, f, 0).unwrap(),
            Verifier::for_file(f),
        );
        std::io::copy(&mut r, &mut std::io::sink()).unwrap();
        let e = f.check(&r.finish().0).unwrap_err();
        match &e {
            Error::Mismatch { path, what: w, .. } => {
                assert_eq!((path.as_str(), *w), (f.path.as_str(), what))
            }
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains(&f.path));
    }
}

/// Brief item 5: A paginated tree (absolute and relative `Link` targets) is followed to the end.
#[test]
fn paginated_tree_is_followed() {
    let fake = Fake::start();
    fake.state().page_size = Some(1);
    let c = client(&fake);
    let rev = c.revision(REPO, "main").unwrap();
    assert_eq!(rev.files.len(), 3);
    assert_eq!(rev.files[2].path, "sub/dir/tokenizer.json");
    let pages = fake
        .seen()
        .iter()
        .filter(|s| s.target.contains("/tree/"))
        .count();
    assert_eq!(pages, 5, "3 files and 2 directories, one a page");
}

fn tree_error(body: &[u8], link: Option<&str>) -> String {
    let fake = Fake::start();
    fake.state().tree_body = Some(body.to_vec());
    fake.state().tree_link = link.map(str::to_string);
    let e = client(&fake).revision(REPO, "main").unwrap_err();
    assert!(matches!(e, Error::Protocol { .. }), "{e}");
    e.to_string()
}

fn file_entry(path: &str, oid: &str) -> String {
    format!(r#"{{"type":"file","path":"{path}","size":1,"oid":"{oid}"}}"#)
}

/// Brief item 6: Hostile trees: each refused with an error naming the problem.
#[test]
fn hostile_trees_are_refused() {
    let oid = "a".repeat(40);
    let one = |p: &str| format!("[{}]", file_entry(p, &oid)).into_bytes();
    assert!(tree_error(&one("../x"), None).contains("\"../x\""));
    assert!(tree_error(&one("/abs"), None).contains("absolute"));
    assert!(tree_error(&one("a\\\\b"), None).contains("backslash"));
    assert!(tree_error(&one("a//b"), None).contains("segment"));
    let dup = format!("[{},{}]", file_entry("a", &oid), file_entry("a", &oid));
    assert!(tree_error(dup.as_bytes(), None).contains("listed twice"));
    let clash = format!("[{},{}]", file_entry("a", &oid), file_entry("a/b", &oid));
    assert!(tree_error(clash.as_bytes(), None).contains("both a file and the directory"));
    let bad_oid = format!("[{}]", file_entry("a", &"G".repeat(40)));
    assert!(tree_error(bad_oid.as_bytes(), None).contains("oid"));
    let bad_lfs = r#"[{"type":"file","path":"a","size":1,"oid":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","lfs":{"oid":"zz","size":1}}]"#;
    assert!(tree_error(bad_lfs.as_bytes(), None).contains("lfs.oid"));
    let lfs_size = bad_lfs.replace(
        "\"zz\",\"size\":1",
        &format!("\"{}\",\"size\":2", "b".repeat(64)),
    );
    assert!(tree_error(lfs_size.as_bytes(), None).contains("lfs.size"));
    assert!(tree_error(br#"[{"type":"submodule","path":"a"}]"#, None).contains("unknown type"));
    assert!(tree_error(b"{\"not\": \"a list\"}", None).contains("tree JSON"));
    assert!(tree_error(b"[", None).contains("tree JSON"));
    // A `Link` back to the same page.
    let me =
        format!("</api/models/{REPO}/tree/{COMMIT}?recursive=true&expand=false>; rel=\"next\"");
    assert!(tree_error(&one("a"), Some(&me)).contains("loop"));
    // A `Link` to another origin is not followed (issue 26 point 8).
    let elsewhere = Fake::start();
    let away = format!(
        "<{}/api/models/{REPO}/tree/{COMMIT}?cursor=1>; rel=\"next\"",
        elsewhere.url
    );
    assert!(tree_error(&one("a"), Some(&away)).contains("not the endpoint's origin"));
    assert_eq!(elsewhere.seen().len(), 0);
}

/// Issue 26 point 8: a listing is capped by default, however the upstream spreads it
/// over pages: 8 thousand paths of 4 KiB (32 MiB of paths held in memory)...
#[test]
fn a_listing_of_huge_paths_is_refused_by_default() {
    let fake = Fake::start();
    fake.state().synthetic = Some((10_000, 4096));
    let r = client(&fake).revision(REPO, "main");
    let e = r
        .map(|r| r.files.len())
        .expect_err("40 MiB of paths held in memory");
    let e = e.to_string();
    assert!(
        e.contains("over the cap of 33554432 bytes of file paths"),
        "{e}"
    );
}

/// ... and a quarter of a million files.
#[test]
fn a_listing_of_too_many_files_is_refused_by_default() {
    let fake = Fake::start();
    fake.state().synthetic = Some((250_001, 12));
    let r = client(&fake).revision(REPO, "main");
    let e = r
        .map(|r| r.files.len())
        .expect_err("250001 files held in memory");
    let e = e.to_string();
    assert!(e.contains("over the cap of 250000 files"), "{e}");
}

/// The caps are settings; each error names its cap; a listing within them is whole.
#[test]
fn listing_caps_are_configurable() {
    let fake = Fake::start();
    fake.state().synthetic = Some((50, 20));
    fake.state().page_size = Some(10);
    let with = |limits: ListingLimits| {
        HubClient::new(HubOptions {
            limits,
            ..options(&fake.url)
        })
        .unwrap()
        .revision(REPO, "main")
    };
    let d = ListingLimits::default();
    let cap = |l: ListingLimits| match with(l) {
        Err(Error::ListingCap { what, cap, .. }) => (what, cap),
        other => panic!("{other:?}"),
    };
    assert_eq!(cap(ListingLimits { max_files: 49, ..d }), ("files", 49));
    assert_eq!(
        cap(ListingLimits {
            max_path_bytes: 999,
            ..d
        }),
        ("bytes of file paths", 999)
    );
    assert_eq!(
        cap(ListingLimits {
            max_json_bytes: 3000,
            ..d
        }),
        ("bytes of listing JSON", 3000)
    );
    let all = with(ListingLimits {
        max_files: 50,
        max_path_bytes: 1000,
        ..d
    })
    .unwrap();
    assert_eq!(all.files.len(), 50);
}

/// Issue 26 point 7: a download that dribbles a byte now and then (no per-read timeout
/// fires) ends at its deadline, `total + received / min_rate`, with an error saying so.
#[test]
fn a_dribbling_download_ends_at_its_deadline() {
    let fake = Fake::start();
    fake.state().dribble = Some(Duration::from_millis(20));
    let mut o = options(&fake.url);
    o.timeouts.total = Duration::from_secs(1);
    o.timeouts.min_rate = 1000;
    let c = HubClient::new(o).unwrap();
    let t = Instant::now();
    let e = fetch(&c, "model.safetensors", 0, Some(300_000)).unwrap_err();
    assert!(matches!(e, Error::TooSlow { .. }), "{e}");
    assert!(e.to_string().contains("download too slow"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The same file at full speed is not held to more than its pace.
    fake.state().dribble = None;
    let got = fetch(&c, "model.safetensors", 0, Some(300_000)).unwrap();
    assert_eq!(sha256(&got), sha256(&fake.file("model.safetensors").data));
}

/// A metadata request has a total deadline too, body included.
#[test]
fn a_dribbling_metadata_answer_ends_at_its_deadline() {
    let fake = Fake::start();
    fake.state().dribble = Some(Duration::from_millis(100));
    let mut o = options(&fake.url);
    o.timeouts.total = Duration::from_millis(500);
    o.max_retries = 1;
    let c = HubClient::new(o).unwrap();
    let t = Instant::now();
    let e = c.commit(REPO, "main").unwrap_err();
    assert!(matches!(e, Error::Transport { attempts: 2, .. }), "{e}");
    assert!(e.to_string().contains("imeout"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// Brief item 6b: A body over the JSON cap is refused, whether announced or streamed.
#[test]
fn huge_tree_bodies_are_refused() {
    let over = (hubclient::MAX_JSON_BODY + 1) as usize;
    let mut body = vec![b' '; over];
    body[0] = b'[';
    assert!(tree_error(&body, None).contains("larger than 64 MiB"));
    // The same body without Content-Length (close-delimited): refused while read.
    let fake = Fake::start();
    fake.state().tree_body = Some(body);
    fake.state().no_length = true;
    let e = client(&fake).revision(REPO, "main").unwrap_err();
    assert!(e.to_string().contains("larger than 64 MiB"), "{e}");
}

/// Brief item 7: `open` at an offset gives exactly the bytes from there; a server ignoring
/// `Range` (200) is read from the start and its first bytes thrown away.
#[test]
fn open_at_an_offset() {
    let fake = Fake::start();
    let data = fake.file("model.safetensors").data;
    let c = client(&fake);
    for n in [1usize, 123_457, 299_999] {
        assert_eq!(
            fetch(&c, "model.safetensors", n as u64, Some(300_000)).unwrap(),
            data[n..]
        );
    }
    assert_eq!(
        fake.seen().last().unwrap().header("range"),
        Some("bytes=299999-")
    );
    assert!(fetch(&c, "model.safetensors", 300_000, Some(300_000))
        .unwrap()
        .is_empty());
    assert!(
        fetch(&c, "model.safetensors", 300_000, None)
            .unwrap()
            .is_empty(),
        "416 at the end"
    );
    assert!(matches!(
        fetch(&c, "model.safetensors", 300_001, Some(300_000)),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fetch(&c, "model.safetensors", 300_001, None),
        Err(Error::Size { .. })
    ));
    fake.state().ignore_range = true;
    fake.state().cuts = [200_000].into();
    let before = c.stats();
    assert_eq!(
        fetch(&c, "model.safetensors", 150_000, None).unwrap(),
        data[150_000..]
    );
    let st = c.stats();
    assert_eq!(
        st.bytes_discarded - before.bytes_discarded,
        150_000 + 200_000
    );
    assert_eq!(st.resumes - before.resumes, 1);
}

/// A 206 that stops before the end is continued from where it stopped.
#[test]
fn short_206_answers_are_continued() {
    let fake = Fake::start();
    fake.state().range_cap = Some(40_000);
    let data = fake.file("model.safetensors").data;
    let c = client(&fake);
    assert_eq!(fetch(&c, "model.safetensors", 1, None).unwrap(), data[1..]);
    let ranges: Vec<_> = fake
        .seen()
        .iter()
        .filter_map(|s| s.header("range").map(str::to_string))
        .collect();
    let want: Vec<_> = (0..8)
        .map(|i| format!("bytes={}-", 1 + i * 40_000))
        .collect();
    assert_eq!(ranges, want);
}

/// The same bytes whatever the size of the caller's reads, across cuts and skips.
#[test]
fn small_reads_across_cuts_and_skips() {
    let fake = Fake::start();
    let data = fake.file("model.safetensors").data;
    let c = client(&fake);
    for (chunk, ignore_range) in [(1usize, false), (37, true), (4096, true)] {
        fake.state().cuts = [10_001, 20_000].into();
        fake.state().ignore_range = ignore_range;
        let mut d = c.open(REPO, COMMIT, "model.safetensors", 3, None).unwrap();
        let (mut got, mut buf) = (Vec::new(), vec![0u8; chunk]);
        loop {
            let n = d.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert!(n <= chunk);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(d.read(&mut buf).unwrap(), 0, "stays at the end");
        assert_eq!(sha256(&got), sha256(&data[3..]), "chunk {chunk}");
        assert_eq!(d.resumes(), 2);
    }
}

/// Brief item 7b: A body longer or shorter than the size is an error, never a wrong file.
#[test]
fn wrong_sizes_are_errors() {
    let fake = Fake::start();
    let c = client(&fake);
    let e = fetch(&c, "config.json", 0, Some(5)).unwrap_err();
    assert!(
        matches!(e, Error::Size { .. }) && e.to_string().contains("config.json"),
        "{e}"
    );
    fake.state().no_length = true;
    fake.state().extra = b"trailing".to_vec();
    let size = fake.file("config.json").data.len() as u64;
    let e = fetch(&c, "config.json", 0, Some(size)).unwrap_err();
    assert!(e.to_string().contains("past the announced size"), "{e}");
    let e = fetch(&c, "config.json", 0, None).unwrap_err();
    assert!(e.to_string().contains("no size announced"), "{e}");
}

/// Brief item 8: The Hub's 404 codes become typed errors naming what is missing.
#[test]
fn not_found_errors_are_typed() {
    let fake = Fake::start();
    let c = client(&fake);
    match c.revision(REPO, "v9").unwrap_err() {
        Error::RevisionNotFound { repo, revision, .. } => {
            assert_eq!((repo.as_str(), revision.as_str()), (REPO, "v9"))
        }
        e => panic!("{e}"),
    }
    match c.revision("org/other", "main").unwrap_err() {
        Error::RepoNotFound { repo, hint, .. } => {
            assert!(repo == "org/other" && hint.contains("HF_TOKEN"))
        }
        e => panic!("{e}"),
    }
    match c
        .open(REPO, COMMIT, "missing/file.bin", 0, None)
        .err()
        .unwrap()
    {
        Error::EntryNotFound { path, .. } => assert_eq!(path, "missing/file.bin"),
        e => panic!("{e}"),
    }
    assert!(matches!(
        c.revision("../etc", "main"),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.open(REPO, "main", "a", 0, None),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        c.open(REPO, COMMIT, "../a", 0, None),
        Err(Error::Invalid(_))
    ));
}

/// An unreachable endpoint: retried, then a transport error naming the URL.
#[test]
fn unreachable_endpoint_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = HubClient::new(options(&format!("http://127.0.0.1:{port}"))).unwrap();
    let e = c.commit(REPO, "main").unwrap_err();
    assert!(
        matches!(e, Error::Transport { attempts: 4, .. }) && e.is_transient(),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}
