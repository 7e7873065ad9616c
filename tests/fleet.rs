//! Nodes read a store through hubs (issue 43): every reading command with `--store
//! http://HUB`, nodes without bucket credentials, N mounts starting one revision at once
//! through a cold hub (the bucket sends each frame once), a hub killed under readers, a hub
//! that answers wrong bytes, last use recorded by the hub, writers refused. Runs on both
//! backends (the hub reads the suite's store; nodes only the hub).

use std::sync::{Arc, Barrier};

use crate::common::hub::{node, start_hub, start_hub_at, url, NODE_TOKEN};
use crate::common::mount::{metric, scrape, Mount};
use crate::common::{ingest_series, local_addr, series, tree_hashes, Env};

const REPO: &str = "demo-org/demo-llm";

#[test]
fn every_reading_command_works_through_a_hub() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let hub = start_hub(&env, &[], &[]);
    let n = node(&url(&hub));
    let r2 = format!("{REPO}@r2");
    // ls in its three forms.
    assert!(n.ok(&["ls"]).contains(REPO), "{}", hub.log());
    let listed = n.json(&["ls", REPO, "--json"]);
    assert!(listed.to_string().contains(&s.commit("r4")), "{listed}");
    let files: Vec<(String, String)> = n.stored_files(&r2).into_iter().collect();
    assert_eq!(files, s.files("r2"));
    // cat, checkout, verify: byte-exact.
    let (path, sha) = &s.files("r2")[0];
    let out = n.cmd().args(["cat", &r2, path]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(&crate::common::sha256_bytes(&out.stdout), sha);
    assert_eq!(checked_out(&n, &r2), s.files("r2"));
    n.verifies(&r2);
    // export through the hub; the bundle imports into another store, which verifies.
    let bundle = n.path("r2.bundle");
    n.ok(&["export", &r2, "--output", bundle.to_str().unwrap()]);
    let other = Env::new();
    other.ok(&["import", bundle.to_str().unwrap()]);
    other.verifies(&r2);
    // mount: every file byte-exact.
    let m = Mount::start(&n, &["--repo", &format!("{REPO}@r3")]);
    assert_eq!(tree_hashes(&m.path), s.files("r3"));
    drop(m);
    // Every command that writes is refused before it does anything, naming the hub.
    let before = env.objects();
    let src = s.plain("r1");
    let commit = s.commit("r1");
    let writers: Vec<Vec<&str>> = vec![
        vec![
            "ingest",
            src.to_str().unwrap(),
            "--repo",
            "x/y",
            "--revision",
            &commit,
        ],
        vec!["gc"],
        vec!["ref", REPO, "stable", "r1"],
        vec!["pin", &r2],
        vec!["rm", &r2],
        vec!["import", bundle.to_str().unwrap()],
        vec!["init"],
        vec!["index", "rebuild"],
    ];
    for args in writers {
        let err = n.fails(&args);
        assert!(
            err.contains("only reads") && err.contains(&url(&hub)),
            "{args:?}: {err}"
        );
    }
    assert_eq!(env.objects(), before, "nothing changed");
}

#[test]
fn a_node_needs_a_node_token() {
    let env = Env::new();
    ingest_series(&env);
    let hub_tokens = env.path("hub-api-tokens");
    std::fs::write(&hub_tokens, "a-hub-api-token\n").unwrap();
    let hub = start_hub(&env, &["--token-file", hub_tokens.to_str().unwrap()], &[]);
    let n = node(&url(&hub));
    std::fs::write(n.path("hub-token"), "a-hub-api-token\n").unwrap();
    let err = n.fails(&["ls"]);
    assert!(
        err.contains("refused") && err.contains("node token"),
        "{err}"
    );
    std::fs::remove_file(n.path("hub-token")).unwrap();
    let out = n
        .cmd()
        .env_remove("HF_TOKEN")
        .args(["ls"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--hub-token-file or HF_TOKEN"),
        "{err}"
    );
    // A token file naming nothing, and one with characters no header can carry: named.
    let bad = n.path("bad-token");
    for text in ["# only a comment\n", "tok\u{e9}n\n"] {
        std::fs::write(&bad, text).unwrap();
        let out = n
            .cmd()
            .env("MODELCAS_HUB_TOKEN_FILE", &bad)
            .args(["ls"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("--hub-token-file"),
            "{err}"
        );
    }
    // A byte-order mark before the token is not part of it.
    std::fs::write(&bad, format!("\u{feff}{NODE_TOKEN}\n")).unwrap();
    let out = n
        .cmd()
        .env("MODELCAS_HUB_TOKEN_FILE", &bad)
        .args(["ls"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The token file is read again after a 401: a rotated secret is picked up.
    std::fs::write(n.path("hub-token"), format!("{NODE_TOKEN}\n")).unwrap();
    assert!(n.ok(&["ls"]).contains(REPO));
}

/// Checks out `rev` on node `n` and returns (path, sha256) of every file, sorted.
fn checked_out(n: &Env, rev: &str) -> Vec<(String, String)> {
    let dir = n.path(&format!("checkout-{}", rand::random::<u32>()));
    n.ok(&["checkout", rev, dir.to_str().unwrap()]);
    tree_hashes(&dir)
}

/// Reads every file of the mount of `rev` and returns (path, sha256), sorted.
fn read_all(m: &Mount) -> Vec<(String, String)> {
    tree_hashes(&m.path)
}

#[test]
fn n_mounts_start_one_revision_at_once_through_a_cold_hub() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let want = s.files("r2");
    // One node through a cold hub: what the bucket sends for one copy.
    let one = start_hub(&env, &[], &[]);
    let solo = node(&url(&one));
    let m = Mount::start(&solo, &["--repo", &format!("{REPO}@r2")]);
    assert_eq!(read_all(&m), want);
    drop(m);
    let frames = |h: &crate::common::Served| {
        let page = scrape(&h.addr);
        let fetched = page
            .lines()
            .filter(|l| l.starts_with("modelcas_serve_store_frames_total{result=\"fetched\"}"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum::<f64>();
        (fetched, metric(&page, "modelcas_backend_requests_total"))
    };
    let (one_copy, _) = frames(&one);
    assert!(one_copy > 0.0, "{}", one.log());
    // Four nodes at once through another cold hub: each frame leaves the bucket once.
    let hub = start_hub(&env, &[], &[]);
    let nodes: Vec<Env> = (0..4).map(|_| node(&url(&hub))).collect();
    let mounts: Vec<Mount> = nodes
        .iter()
        .map(|n| Mount::start(n, &["--repo", &format!("{REPO}@r2")]))
        .collect();
    let barrier = Arc::new(Barrier::new(mounts.len()));
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = mounts
            .iter()
            .map(|m| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    read_all(m)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for got in results {
        assert_eq!(got, want);
    }
    let (fleet, requests) = frames(&hub);
    println!("frames from the bucket: one node {one_copy}, four nodes at once {fleet}; {requests} bucket requests");
    assert_eq!(
        fleet,
        one_copy,
        "the bucket sent each frame once: {}",
        hub.log()
    );
}

#[test]
fn a_hub_killed_during_a_load_readers_go_on_through_the_other() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let mut h1 = start_hub(&env, &[], &[]);
    let h2 = start_hub(&env, &[], &[]);
    let n = node(&format!("{},{}", url(&h1), url(&h2)));
    let metrics = local_addr();
    let m = Mount::start(
        &n,
        &[
            "--repo",
            &format!("{REPO}@r4"),
            "--metrics-listen",
            &metrics,
            "--file-cache-size",
            "0",
        ],
    );
    let want = s.files("r4");
    // The first file through h1, then h1 dies; the rest through h2, every byte checked.
    let (first, sha) = &want[0];
    assert_eq!(&crate::common::sha256_file(&m.p(first)), sha);
    assert!(metric(&scrape(&h1.addr), "modelcas_serve_store_bytes_sent_total") > 0.0);
    h1.child.kill().unwrap();
    h1.child.wait().unwrap();
    assert_eq!(read_all(&m), want);
    let page = scrape(&metrics);
    assert!(
        metric(&page, "modelcas_hub_failovers_total") >= 1.0,
        "{page}"
    );
    assert!(metric(&scrape(&h2.addr), "modelcas_serve_store_bytes_sent_total") > 0.0);
}

#[test]
fn wrong_bytes_from_a_hub_are_fetched_again_elsewhere_and_never_reach_a_reader() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let bad = start_hub(&env, &[], &[("MODELCAS_TEST_HUB_FLIP_BLOCKS", "1")]);
    let good = start_hub(&env, &[], &[]);
    let r2 = format!("{REPO}@r2");
    // The bad hub first: every chunk is caught and read from the good one.
    let n = node(&format!("{},{}", url(&bad), url(&good)));
    assert_eq!(checked_out(&n, &r2), s.files("r2"));
    let m = Mount::start(&n, &["--repo", &format!("{REPO}@r3")]);
    assert_eq!(read_all(&m), s.files("r3"));
    drop(m);
    // The bad hub alone: the read fails naming a chunk, and no wrong byte is written.
    let alone = node(&url(&bad));
    let dir = alone.path("checkout");
    let err = alone.fails(&["checkout", &r2, dir.to_str().unwrap()]);
    assert!(err.contains("chunk") || err.contains("corrupt"), "{err}");
    let out = alone.cmd().args(["verify", &r2]).output().unwrap();
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn last_use_is_recorded_by_the_hub() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let hub = start_hub(&env, &[], &[]);
    let n = node(&url(&hub));
    let (path, _) = &s.files("r3")[0];
    let out = n
        .cmd()
        .args(["cat", &format!("{REPO}@r3"), path])
        .output()
        .unwrap();
    assert!(out.status.success());
    let used = format!("repos/{REPO}/used/{}", s.commit("r3"));
    crate::common::wait_until(
        "the hub to record the use",
        std::time::Duration::from_secs(20),
        || {
            env.objects()
                .iter()
                .any(|o| o.starts_with(&used))
                .then_some(())
        },
    );
}

#[test]
fn a_dead_first_address_is_passed_over() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let hub = start_hub(&env, &[], &[]);
    let dead = format!("http://{}", local_addr());
    let n = node(&format!("{dead},{}", url(&hub)));
    assert_eq!(
        n.stored_files(&format!("{REPO}@r1"))
            .into_iter()
            .collect::<Vec<_>>(),
        s.files("r1")
    );
    // Every address dead: the read fails within --hub-retry-for, naming them.
    let n = node(&dead);
    let out = n
        .cmd()
        .args(["--hub-retry-for", "1s", "ls"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&dead), "{err}");
}

/// nginx (Debian's) started by the test with deploy/nginx/modelcas-hub-cache.conf.
struct Nginx {
    child: std::process::Child,
    addr: String,
    cache: std::path::PathBuf,
}

impl Nginx {
    fn start(env: &Env, hubs: &[&crate::common::Served]) -> Nginx {
        let prefix = env.path(&format!("nginx-{}", rand::random::<u32>()));
        let cache = prefix.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        let addr = local_addr();
        let conf = include_str!("../deploy/nginx/modelcas-hub-cache.conf");
        let servers: Vec<String> = hubs
            .iter()
            .map(|h| format!("server {} max_fails=1 fail_timeout=5s;", h.addr))
            .collect();
        let root = nix_is_root();
        let conf = conf
            .replace("@USER@", if root { "user root;" } else { "" })
            .replace("@PREFIX@", prefix.to_str().unwrap())
            .replace("@CACHE@", cache.to_str().unwrap())
            .replace("@LISTEN@", &addr)
            .replace("@HUBS@", &servers.join("\n    "));
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let nginx = ["/usr/sbin/nginx", "nginx"]
            .into_iter()
            .find(|p| std::process::Command::new(p).arg("-v").output().is_ok())
            .expect("nginx is not installed (scripts/install-deps.sh installs it)");
        let v = std::process::Command::new(nginx)
            .arg("-V")
            .output()
            .unwrap();
        let built = String::from_utf8_lossy(&v.stderr).to_string();
        assert!(
            built.contains("http_auth_request_module"),
            "this nginx lacks the auth_request module: {built}"
        );
        let child = std::process::Command::new(nginx)
            .args(["-p", prefix.to_str().unwrap(), "-c", path.to_str().unwrap()])
            .args(["-g", "daemon off;"])
            .spawn()
            .unwrap();
        crate::common::wait_until(
            "nginx to listen",
            std::time::Duration::from_secs(20),
            || std::net::TcpStream::connect(&addr).ok(),
        );
        Nginx { child, addr, cache }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: the master stops its workers and cache processes too (a SIGKILL would
        // leave them behind).
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Requests of one endpoint a hub answered (its `/metrics`).
fn served(h: &crate::common::Served, endpoint: &str) -> f64 {
    let page = scrape(&h.addr);
    page.lines()
        .filter(|l| {
            l.starts_with("modelcas_serve_requests_total{")
                && l.contains(&format!("endpoint=\"{endpoint}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn nginx_in_front_of_a_hub_serves_the_second_wave_and_repairs_a_bad_entry() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let hub = start_hub(&env, &[], &[]);
    let nginx = Nginx::start(&env, &[&hub]);
    let r2 = format!("{REPO}@r2");
    let through = format!("http://{}", nginx.addr);
    // A first wave fills the cache.
    let first = node(&through);
    assert_eq!(checked_out(&first, &r2), s.files("r2"));
    let blocks = served(&hub, "store-block");
    assert!(blocks > 0.0);
    // A second wave is served by the cache: the hub sends no block again.
    let second = node(&through);
    assert_eq!(checked_out(&second, &r2), s.files("r2"));
    assert_eq!(
        served(&hub, "store-block"),
        blocks,
        "the second wave came from nginx"
    );
    // Without a token nginx refuses, cached or not.
    let tokenless = node(&through);
    std::fs::remove_file(tokenless.path("hub-token")).unwrap();
    let out = tokenless
        .cmd()
        .env_remove("HF_TOKEN")
        .args(["ls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // A byte flipped in every cached block: caught on the node, fetched fresh past the
    // cache, and the entries are good afterwards (a later wave reads from the cache again).
    let mut flipped = 0;
    for f in walk_files(&nginx.cache.join("blocks")) {
        let mut b = std::fs::read(&f).unwrap();
        if b.len() > 4096 {
            let at = b.len() - 100;
            b[at] ^= 0x10;
            std::fs::write(&f, b).unwrap();
            flipped += 1;
        }
    }
    assert!(flipped > 0);
    let third = node(&through);
    assert_eq!(checked_out(&third, &r2), s.files("r2"));
    let repaired = served(&hub, "store-block");
    assert!(
        repaired > blocks,
        "the bad entries were fetched fresh from the hub"
    );
    let fourth = node(&through);
    assert_eq!(checked_out(&fourth, &r2), s.files("r2"));
    assert_eq!(
        served(&hub, "store-block"),
        repaired,
        "repaired entries served by nginx"
    );
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_running_mount_reads_a_rotated_token_again() {
    // Hostile review of issue 43: the node read its token file again only after a 401,
    // and the hub answers a token it does not know with 403; reads failed until restart.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let addr = local_addr();
    let hub = start_hub_at(&env, &addr, "old-node-token", &[], &[]);
    let n = node(&format!("http://{addr}"));
    std::fs::write(n.path("hub-token"), "old-node-token\n").unwrap();
    let m = Mount::start(
        &n,
        &["--repo", &format!("{REPO}@r3"), "--file-cache-size", "0"],
    );
    let want = s.files("r3");
    assert_eq!(&crate::common::sha256_file(&m.p(&want[0].0)), &want[0].1);
    // The secret is rotated: the hub restarts with the new token, the node's file changes.
    drop(hub);
    let _hub = start_hub_at(&env, &addr, "new-node-token", &[], &[]);
    std::fs::write(n.path("hub-token"), "new-node-token\n").unwrap();
    assert_eq!(read_all(&m), want);
}

#[test]
fn addresses_of_two_stores_are_refused() {
    let a = Env::new();
    ingest_series(&a);
    let b = Env::new();
    ingest_series(&b);
    let (ha, hb) = (start_hub(&a, &[], &[]), start_hub(&b, &[], &[]));
    let n = node(&format!("{},{}", url(&ha), url(&hb)));
    let err = n.fails(&["ls"]);
    assert!(
        err.contains("serves store") && err.contains(&url(&hb)),
        "{err}"
    );
}

#[test]
fn a_hub_that_takes_connections_and_never_answers_holds_a_reader_only_its_share() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let frozen = start_hub(&env, &[], &[]);
    let good = start_hub(&env, &[], &[]);
    let n = node(&format!("{},{}", url(&frozen), url(&good)));
    let pid = frozen.child.id().to_string();
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status();
    assert!(stop.unwrap().success());
    let started = std::time::Instant::now();
    let r1 = format!("{REPO}@r1");
    let out = n
        .cmd()
        .args(["--hub-retry-for", "6s", "ls", &r1, "--json"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&s.files("r1")[0].1));
    // A bound, not a speed: the frozen hub got at most half of the 6 s, then the good one
    // answered (before, it held the request 30 s).
    assert!(took < std::time::Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_hub_reading_through_hubs_asks_again_for_wrong_bytes() {
    // Hostile review of issue 43: a hub whose store is hubs answered 502 for a frame one
    // upstream flipped, instead of asking the next upstream.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let bad = start_hub(&env, &[], &[("MODELCAS_TEST_HUB_FLIP_BLOCKS", "1")]);
    let good = start_hub(&env, &[], &[]);
    let upstream = node(&format!("{},{}", url(&bad), url(&good)));
    let chained = start_hub(&upstream, &[], &[]);
    let n = node(&url(&chained));
    assert_eq!(checked_out(&n, &format!("{REPO}@r2")), s.files("r2"));
}
