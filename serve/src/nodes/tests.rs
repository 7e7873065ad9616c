//! The store API through [`crate::Hub::route`] and [`Blocks`] over a store in memory: every
//! block is the pack's bytes, single-flight, checks on fetch and from disk, tokens, cache
//! headers, tags, the allow list.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use format::layout;
use format::pack::PackBuilder;
use format::{frame, ChunkId};
use http::{HeaderMap, Method, StatusCode};
use objects::hub_wire::{self, BLOCK_LEN};
use objects::{CountingStore, MemoryStore, ObjectStore};
use read::cache::ChunkCache;
use repo::{CreateOptions, Store};

use super::blocks::{BlockError, Blocks};
use super::NodeAccess;
use crate::reply::Head;
use crate::{Hub, Policy};
use read::test_pack::noise;

/// A store in memory with one pack of `n` chunks of about 150 KB (frames cross block
/// edges), its key and bytes.
fn pack_store(n: usize) -> (Arc<MemoryStore>, Store, String, Vec<u8>) {
    let backend = Arc::new(MemoryStore::new());
    let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
    let mut b = PackBuilder::new();
    for i in 0..n {
        let c = noise(150_000 + i * 977, i as u64 + 1);
        let mut f = Vec::new();
        frame::encode(&c, &mut f);
        b.add_frame(ChunkId::of(&c), &f, c.len());
    }
    let (id, bytes, _) = b.finish();
    let key = layout::pack_key(&id);
    backend.put(&key, &bytes).unwrap();
    (backend, store, key, bytes)
}

fn counted(store: &Store) -> (Store, Arc<CountingStore>) {
    let c = Arc::new(CountingStore::new(store.backend().clone()));
    (store.with_backend(c.clone()), c)
}

fn all_blocks(blocks: &Blocks, key: &str) -> Vec<u8> {
    let id = layout::parse_pack_key(key).unwrap();
    let mut out = Vec::new();
    for n in 0.. {
        match blocks.block(&id, n, false) {
            Ok(b) => {
                assert!(b.len() as u64 <= BLOCK_LEN);
                out.extend_from_slice(&b);
            }
            Err(BlockError::PastEnd(size)) => {
                assert_eq!(size, out.len() as u64);
                break;
            }
            Err(e) => panic!("block {n}: {e:?}"),
        }
    }
    out
}

#[test]
fn every_block_is_the_packs_bytes_with_or_without_a_disk_cache() {
    let (_, store, key, bytes) = pack_store(20);
    assert!(
        bytes.len() as u64 > 2 * BLOCK_LEN,
        "frames must cross blocks"
    );
    assert_eq!(all_blocks(&Blocks::new(store.clone()), &key), bytes);
    let dir = tempfile::tempdir().unwrap();
    let disk = repo::disk_cache::DiskCache::open(dir.path(), 1 << 30).unwrap();
    let cached = store.clone().with_disk_cache(disk);
    assert_eq!(all_blocks(&Blocks::new(cached.clone()), &key), bytes);
    // A restart on the same directory serves from disk, checking each entry once: the
    // bucket is asked only for the footer.
    let (counted, c) = counted(&cached);
    let again = Blocks::new(counted);
    assert_eq!(all_blocks(&again, &key), bytes);
    assert_eq!(
        c.requests().get_range,
        3,
        "header, trailer, footer; no frame"
    );
    let checks = again
        .counts
        .frame_checks
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(all_blocks(&again, &key), bytes);
    let after = again
        .counts
        .frame_checks
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(checks, after, "verdicts kept under the entries' stamps");
}

#[test]
fn many_asking_one_cold_block_fetch_each_frame_once() {
    let (_, store, key, bytes) = pack_store(20);
    let dir = tempfile::tempdir().unwrap();
    let disk = repo::disk_cache::DiskCache::open(dir.path(), 1 << 30).unwrap();
    let (counted, c) = counted(&store.with_disk_cache(disk));
    let blocks = Arc::new(Blocks::new(counted));
    let id = layout::parse_pack_key(&key).unwrap();
    let barrier = Arc::new(Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (blocks, barrier) = (blocks.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                blocks.block(&id, 1, false).unwrap()
            })
        })
        .collect();
    let want = &bytes[BLOCK_LEN as usize..2 * BLOCK_LEN as usize];
    for t in threads {
        assert_eq!(&t.join().unwrap()[..], want);
    }
    let r = c.requests();
    let fetched = blocks
        .counts
        .frames_fetched
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "16 requests of one block: {} ranged GETs, {fetched} frames fetched",
        r.get_range
    );
    // Block 1 overlaps 8 frames of ~150 KB; each fetched once, whoever claimed it.
    assert!(fetched <= 8, "{fetched} frames fetched");
    // The footer's three reads, and at most one read per claimant's run (16 at most, in
    // practice a few), never one per request and frame.
    assert!(r.get_range <= 3 + 16, "{r:?}");
    assert!(r.bytes_read < 2 * BLOCK_LEN + (1 << 20), "{r:?}");
}

#[test]
fn a_frame_damaged_in_the_bucket_is_refused_and_one_damaged_on_disk_fetched_again() {
    let (backend, store, key, mut bytes) = pack_store(12);
    let dir = tempfile::tempdir().unwrap();
    let disk = repo::disk_cache::DiskCache::open(dir.path(), 1 << 30).unwrap();
    let cached = store.clone().with_disk_cache(disk);
    let good = bytes.clone();
    assert_eq!(all_blocks(&Blocks::new(cached.clone()), &key), good);
    // Damage every entry on disk: a new process checks each, removes it, fetches again.
    for entry in walk(dir.path()) {
        let mut b = std::fs::read(&entry).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        std::fs::write(&entry, b).unwrap();
    }
    assert_eq!(all_blocks(&Blocks::new(cached.clone()), &key), good);
    // The bucket's own bytes damaged: a 502-kind error naming the pack, never the bytes.
    bytes[200_000] ^= 1;
    backend.put(&key, &bytes).unwrap();
    let fresh = Blocks::new(store.clone());
    let id = layout::parse_pack_key(&key).unwrap();
    match fresh.block(&id, 0, false) {
        Err(BlockError::Bad(why)) => assert!(why.contains(&key), "{why}"),
        other => panic!("{:?}", other.map(|b| b.len())),
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if !p.file_name().unwrap().to_string_lossy().starts_with('.') {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_pack_that_does_not_tile_is_refused() {
    let (backend, store, key, bytes) = pack_store(3);
    // The same footer, one byte more between the header and the first frame.
    let mut odd = bytes[..16].to_vec();
    odd.push(0);
    odd.extend_from_slice(&bytes[16..]);
    backend.put(&key, &odd).unwrap();
    let id = layout::parse_pack_key(&key).unwrap();
    assert!(matches!(
        Blocks::new(store).block(&id, 0, false),
        Err(BlockError::Bad(_))
    ));
}

/// A hub over `store` with Hub-API tokens `hub` and node tokens `node`.
fn hub(store: Store, access: NodeAccess, policy: Policy) -> Hub {
    let cache = Arc::new(ChunkCache::new(store.clone(), 16 << 20, 2).unwrap());
    let tokens: HashSet<String> = ["hub-token".to_string()].into();
    Hub::new(store, cache, Some(tokens))
        .with_policy(policy, None)
        .with_nodes(access)
}

fn nodes_only() -> NodeAccess {
    NodeAccess {
        tokens: Some(["node-token".to_string()].into()),
        open: false,
    }
}

fn get(hub: &Hub, path_query: &str, token: Option<&str>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let mut headers = HeaderMap::new();
    if let Some(t) = token {
        headers.insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let head = Head {
        method: &Method::GET,
        path,
        query,
        headers: &headers,
        client: "test",
    };
    let r = hub.route(&head);
    let (status, headers) = (r.status, r.headers.clone());
    (status, headers, whole_body(r))
}

/// The status of a `POST` of `path` with the node token.
fn post(hub: &Hub, path: &str) -> StatusCode {
    let mut headers = HeaderMap::new();
    headers.insert("authorization", "Bearer node-token".parse().unwrap());
    let head = Head {
        method: &Method::POST,
        path,
        query: "",
        headers: &headers,
        client: "test",
    };
    hub.route(&head).status
}

fn whole_body(r: crate::reply::Reply) -> Vec<u8> {
    match &r.body {
        crate::body::Body::Full(Some(b)) => b.to_vec(),
        crate::body::Body::Full(None) => Vec::new(),
        _ => panic!("the store API answers whole bodies"),
    }
}

fn api(p: &str) -> String {
    format!("{}/{p}", hub_wire::API)
}

#[test]
fn only_node_tokens_read_the_store_api_and_node_tokens_read_the_hub_api() {
    let (_, store, key, _) = pack_store(2);
    let block = api(&format!("{key}/0"));
    let off = hub(store.clone(), NodeAccess::default(), Policy::default());
    let (s, h, _) = get(&off, &block, Some("hub-token"));
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(h["x-error-code"], "StoreApiOff");
    let on = hub(store, nodes_only(), Policy::default());
    assert_eq!(get(&on, &block, None).0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&on, &block, Some("hub-token")).0, StatusCode::FORBIDDEN);
    assert_eq!(get(&on, &block, Some("other")).0, StatusCode::FORBIDDEN);
    let (s, h, _) = get(&on, &block, Some("node-token"));
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert!(h.contains_key(hub_wire::HEADER_STORE));
    // A node token reads the Hub API too; the Hub API's token is unchanged.
    assert_ne!(
        get(&on, "/api/models", Some("node-token")).0,
        StatusCode::UNAUTHORIZED
    );
    assert_ne!(
        get(&on, "/api/models", Some("hub-token")).0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(&on, "/api/models", Some("x")).0,
        StatusCode::UNAUTHORIZED
    );
}

#[test]
fn blocks_have_one_spelling_and_objects_one_tag() {
    let (backend, store, key, bytes) = pack_store(2);
    let on = hub(store, nodes_only(), Policy::default());
    let t = Some("node-token");
    let (s, _, body) = get(&on, &api(&format!("{key}/0")), t);
    assert_eq!(
        (s, &body[..]),
        (
            StatusCode::OK,
            &bytes[..BLOCK_LEN.min(bytes.len() as u64) as usize]
        )
    );
    for bad in [
        format!("{key}/00"),
        format!("{key}/x"),
        key.to_uppercase() + "/0",
    ] {
        let (s, _, _) = get(&on, &api(&bad), t);
        assert!(
            s == StatusCode::BAD_REQUEST || s == StatusCode::NOT_FOUND,
            "{bad}: {s}"
        );
    }
    let (s, h, _) = get(&on, &api(&format!("{key}/9")), t);
    assert_eq!(s, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        h[hub_wire::HEADER_PACK_SIZE],
        bytes.len().to_string().as_str()
    );
    // A pack is read by block, never as an object.
    let stat = get(&on, &api(&format!("stat/{key}")), t);
    assert_eq!(stat.0, StatusCode::OK);
    let tag = serde_json::from_slice::<hub_wire::WireMeta>(&stat.2)
        .unwrap()
        .tag;
    let (s, _, _) = get(&on, &api(&format!("objects/{key}?tag={tag}")), t);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // An object by (key, tag): the tag of now, else 412; without a tag 400.
    backend.put("repos/a/b/refs/main", b"one").unwrap();
    let meta = |on: &Hub| {
        let (_, _, b) = get(on, &api("stat/repos/a/b/refs/main"), t);
        serde_json::from_slice::<hub_wire::WireMeta>(&b).unwrap()
    };
    let m = meta(&on);
    let (s, h, body) = get(
        &on,
        &api(&format!("objects/repos/a/b/refs/main?tag={}", m.tag)),
        t,
    );
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"one"[..]));
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(
        get(&on, &api("objects/repos/a/b/refs/main"), t).0,
        StatusCode::BAD_REQUEST
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    backend.put("repos/a/b/refs/main", b"two!").unwrap();
    std::thread::sleep(super::FRESH_FOR);
    let (s, h, _) = get(
        &on,
        &api(&format!("objects/repos/a/b/refs/main?tag={}", m.tag)),
        t,
    );
    assert_eq!(s, StatusCode::PRECONDITION_FAILED);
    assert_eq!(h["cache-control"], "no-store");
    let m2 = meta(&on);
    assert_ne!(m2.tag, m.tag);
    let (_, _, body) = get(
        &on,
        &api(&format!("objects/repos/a/b/refs/main?tag={}", m2.tag)),
        t,
    );
    assert_eq!(body, b"two!");
    // Only what readers read: no locks, no gc records.
    backend.put("locks/gc-0000000000000001", b"x").unwrap();
    assert_eq!(
        get(&on, &api("stat/locks/gc-0000000000000001"), t).0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        get(&on, &api("stat/repos/a/b/..%2Fx"), t).0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&on, &api("stat/repos%2Fa/b/refs/main"), t).0,
        StatusCode::BAD_REQUEST
    );
}

#[test]
fn the_allow_list_hides_names_not_bytes() {
    let (backend, store, key, _) = pack_store(2);
    backend.put("repos/a/b/refs/main", b"one").unwrap();
    backend.put("repos/other/m/refs/main", b"two").unwrap();
    let policy = Policy {
        allow: vec!["other/*".into()],
        ..Default::default()
    };
    let on = hub(store, nodes_only(), policy);
    let t = Some("node-token");
    let (s, _, body) = get(&on, &api("list?prefix=repos/"), t);
    assert_eq!(s, StatusCode::OK);
    let page: hub_wire::ListPage = serde_json::from_slice(&body).unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["repos/other/m/refs/main"]);
    let (s, h, _) = get(&on, &api("stat/repos/a/b/refs/main"), t);
    assert_eq!(
        (s, &h["x-error-code"]),
        (
            StatusCode::FORBIDDEN,
            &"RepoNotAllowed".parse::<http::HeaderValue>().unwrap()
        )
    );
    assert_eq!(
        get(&on, &api("list?prefix=repos/a/b/refs/"), t).0,
        StatusCode::FORBIDDEN
    );
    // Packs belong to no repository: their blocks are served to every node token.
    assert_eq!(get(&on, &api(&format!("{key}/0")), t).0, StatusCode::OK);
}

#[test]
fn listings_come_in_pages_that_check() {
    let backend = Arc::new(MemoryStore::new());
    let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
    for i in 0..(hub_wire::LIST_PAGE + 5) {
        backend.put(&format!("repos/a/b/used/{i:08}"), b"").unwrap();
    }
    let on = hub(store, nodes_only(), Policy::default());
    let prefix = "repos/a/b/used/";
    let mut after: Option<String> = None;
    let mut seen = 0;
    loop {
        let q = match &after {
            Some(a) => format!("list?prefix={prefix}&after={a}"),
            None => format!("list?prefix={prefix}"),
        };
        let (s, _, body) = get(&on, &api(&q), Some("node-token"));
        assert_eq!(s, StatusCode::OK);
        let page: hub_wire::ListPage = serde_json::from_slice(&body).unwrap();
        page.check(prefix, after.as_deref()).unwrap();
        seen += page.objects.len();
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, hub_wire::LIST_PAGE + 5);
}

#[test]
fn listings_stay_inside_the_store_and_used_needs_a_stored_revision() {
    // Hostile review of issue 43: `list?prefix=packs/../../` listed the hub's disk, and
    // `POST /used` wrote records of revisions that do not exist.
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(objects::LocalStore::new(dir.path().join("store")));
    std::fs::write(dir.path().join("secret"), b"x").unwrap();
    let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
    let on = hub(store, nodes_only(), Policy::default());
    let t = Some("node-token");
    for q in [
        "packs/../../",
        "repos/a/b/../../x/",
        "..",
        "repos//",
        "repos/a/./",
    ] {
        let (s, _, body) = get(&on, &api(&format!("list?prefix={q}")), t);
        assert_eq!(
            s,
            StatusCode::BAD_REQUEST,
            "{q}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let (s, _, _) = get(&on, &api("list?prefix=repos/&after=../x"), t);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let commit = "ab".repeat(20);
    assert_eq!(
        post(&on, &api(&format!("used/org/model/{commit}"))),
        StatusCode::NOT_FOUND
    );
    let keys: Vec<String> = backend
        .list("repos/")
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert!(keys.is_empty(), "{keys:?}");
}

#[test]
fn a_locked_repository_shows_nodes_its_locked_commit_only() {
    // `[serve.locks]` holds through the store API as through the Hub API: every ref names
    // the locked commit, and no other commit's manifest is there.
    use format::codec::{self, Kind};
    use format::manifest::RefObject;
    use format::{CommitId, RepoId};
    let (backend, store, _, _) = pack_store(1);
    let repo = RepoId::parse("org/model").unwrap();
    let (locked, other) = (CommitId([0xaa; 20]), CommitId([0xbb; 20]));
    for c in [locked, other] {
        backend
            .put(&layout::manifest_key(&repo, &c), b"manifest")
            .unwrap();
    }
    let main = RefObject {
        commit: other,
        updated_at: 7,
    };
    let ref_key = layout::ref_key(&repo, "main");
    backend
        .put(&ref_key, &codec::encode(Kind::Ref, &main, false))
        .unwrap();
    let policy = Policy {
        locks: [(repo.clone(), locked)].into(),
        ..Default::default()
    };
    let on = hub(store, nodes_only(), policy);
    let t = Some("node-token");
    let (s, _, body) = get(&on, &api("list?prefix=repos/org/model/"), t);
    assert_eq!(s, StatusCode::OK);
    let page: hub_wire::ListPage = serde_json::from_slice(&body).unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            layout::manifest_key(&repo, &locked).as_str(),
            ref_key.as_str()
        ]
    );
    let r = &page.objects[1];
    let (s, _, body) = get(&on, &api(&format!("objects/{}?tag={}", r.key, r.tag)), t);
    assert_eq!(s, StatusCode::OK);
    let got: RefObject = codec::decode(Kind::Ref, &body).unwrap();
    assert_eq!(got.commit, locked);
    assert_eq!(body.len() as u64, r.size);
    let hidden = layout::manifest_key(&repo, &other);
    assert_eq!(
        get(&on, &api(&format!("stat/{hidden}")), t).0,
        StatusCode::NOT_FOUND
    );
    // Nor can a node record a use of it (helper-26, 04).
    assert_eq!(
        post(&on, &api(&format!("used/org/model/{}", other.to_hex()))),
        StatusCode::NOT_FOUND
    );
}

#[test]
fn a_locked_repository_hides_other_commits_release_records() {
    // docs/design/release-check.md §12: the check record and labels of a commit the lock
    // hides are hidden alike (listings, stats, objects); the locked commit's are shown.
    use format::{CommitId, RepoId};
    let (backend, store, _, _) = pack_store(1);
    let repo = RepoId::parse("org/model").unwrap();
    let (locked, other) = (CommitId([0xaa; 20]), CommitId([0xbb; 20]));
    for c in [locked, other] {
        backend
            .put(&layout::check_key(&repo, &c), b"check")
            .unwrap();
        backend
            .put(&layout::label_key(&repo, &c, "vllm"), b"label")
            .unwrap();
    }
    // A label prefix that merely starts with the locked commit's hex is another's.
    let near = format!("{}{}0/vllm", layout::labels_prefix(&repo), locked.to_hex());
    backend.put(&near, b"label").unwrap();
    let policy = Policy {
        locks: [(RepoId::parse("Org/Model").unwrap(), locked)].into(),
        ..Default::default()
    };
    let on = hub(store, nodes_only(), policy);
    let t = Some("node-token");
    for prefix in [
        "repos/org/model/",
        "repos/org/model/checks/",
        "repos/org/model/labels/",
    ] {
        let (s, _, body) = get(&on, &api(&format!("list?prefix={prefix}")), t);
        assert_eq!(s, StatusCode::OK);
        let page: hub_wire::ListPage = serde_json::from_slice(&body).unwrap();
        for m in &page.objects {
            assert!(!m.key.contains(&other.to_hex()), "{prefix}: {}", m.key);
            assert_ne!(m.key, near, "{prefix}");
        }
    }
    let (_, _, body) = get(&on, &api("list?prefix=repos/org/model/"), t);
    let page: hub_wire::ListPage = serde_json::from_slice(&body).unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            layout::check_key(&repo, &locked).as_str(),
            layout::label_key(&repo, &locked, "vllm").as_str()
        ]
    );
    for hidden in [
        layout::check_key(&repo, &other),
        layout::label_key(&repo, &other, "vllm"),
        near,
    ] {
        assert_eq!(
            get(&on, &api(&format!("stat/{hidden}")), t).0,
            StatusCode::NOT_FOUND,
            "{hidden}"
        );
        let tag = "t-0123456789abcdef0123456789abcdef";
        let (s, _, _) = get(&on, &api(&format!("objects/{hidden}?tag={tag}")), t);
        assert_eq!(s, StatusCode::NOT_FOUND, "{hidden}");
    }
    let shown = layout::check_key(&repo, &locked);
    assert_eq!(
        get(&on, &api(&format!("stat/{shown}")), t).0,
        StatusCode::OK
    );
}

#[test]
fn a_query_a_cache_could_key_another_way_is_refused() {
    // Hostile review of issue 43 (helper-26, 02): nginx keys objects by `$arg_tag`, which
    // matches `Tag` too; the hub answered `?Tag=X&tag=<now>` with the bytes of now, which
    // nginx kept under X for a year.
    let (backend, store, key, _) = pack_store(1);
    backend.put("repos/a/b/refs/main", b"one").unwrap();
    let on = hub(store, nodes_only(), Policy::default());
    let t = Some("node-token");
    let (_, _, b) = get(&on, &api("stat/repos/a/b/refs/main"), t);
    let tag = serde_json::from_slice::<hub_wire::WireMeta>(&b)
        .unwrap()
        .tag;
    let other = "t-0123456789abcdef0123456789abcdef";
    let obj = "objects/repos/a/b/refs/main";
    for q in [
        format!("{obj}?Tag={other}&tag={tag}"),
        format!("{obj}?tag={other}&tag={tag}"),
        format!("{obj}?tag={tag}&x=1"),
        format!("{obj}?tag={}", tag.replace('-', "%2D")),
        format!("{key}/0?tag={tag}"),
        "list?prefix=repos/&prefix=packs/".to_string(),
        "store?x".to_string(),
    ] {
        let (s, h, _) = get(&on, &api(&q), t);
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}");
        assert_eq!(h["cache-control"], "no-store", "{q}");
    }
    let (s, _, body) = get(&on, &api(&format!("{obj}?tag={tag}&fresh=1")), t);
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"one"[..]));
}

#[test]
fn a_damaged_or_foreign_cache_entry_is_replaced_so_the_bucket_sends_it_once() {
    // Hostile review of issue 43 (helper-26, 03): a wrong-length entry was passed over and
    // never replaced, so every request fetched its frame from the bucket again.
    let (_, store, key, bytes) = pack_store(6);
    let dir = tempfile::tempdir().unwrap();
    let disk = || repo::disk_cache::DiskCache::open(dir.path(), 1 << 30).unwrap();
    let cached = store.clone().with_disk_cache(disk());
    assert_eq!(all_blocks(&Blocks::new(cached), &key), bytes);
    let entries = walk(dir.path());
    std::fs::write(&entries[0], b"short").unwrap();
    std::fs::remove_file(&entries[1]).unwrap();
    std::fs::create_dir_all(entries[1].join("d")).unwrap();
    let restarted = Blocks::new(store.clone().with_disk_cache(disk()));
    let fetched = || {
        restarted
            .counts
            .frames_fetched
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(all_blocks(&restarted, &key), bytes);
    assert_eq!(fetched(), 2, "the two damaged entries, once");
    assert_eq!(all_blocks(&restarted, &key), bytes);
    assert_eq!(fetched(), 2, "kept in their place: not fetched again");
}
