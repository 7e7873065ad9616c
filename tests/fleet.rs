//! Nodes read a store through hubs (issue 43): every reading command with `--store
//! http://HUB`, nodes without bucket credentials, N mounts starting one revision at once
//! through a cold hub (the bucket sends each frame once), a hub killed under readers, a hub
//! that answers wrong bytes, last use recorded by the hub, writers refused. Runs on both
//! backends (the hub reads the suite's store; nodes only the hub).

use std::sync::{Arc, Barrier};

use crate::common::hub::{node, start_hub, url, NODE_TOKEN};
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
    let dir = n.path("checkout");
    n.ok(&["checkout", &r2, dir.to_str().unwrap()]);
    assert_eq!(tree_hashes(&dir), s.files("r2"));
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
    let err = n
        .cmd()
        .env_remove("HF_TOKEN")
        .args(["ls"])
        .output()
        .unwrap();
    assert!(!err.status.success());
    // The token file is read again after a 401: a rotated secret is picked up.
    std::fs::write(n.path("hub-token"), format!("{NODE_TOKEN}\n")).unwrap();
    assert!(n.ok(&["ls"]).contains(REPO));
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
    let dir = n.path("checkout");
    n.ok(&["checkout", &r2, dir.to_str().unwrap()]);
    assert_eq!(tree_hashes(&dir), s.files("r2"));
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
