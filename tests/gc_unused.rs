//! `gc --unused-for` end to end (issue 14): last-use records written by readers (cat,
//! serve, the mount in tests/mount.rs), revisions nobody read expired, refs, pins and
//! serve's version locks honoured. Runs on a local store in every phase: it ages objects by
//! setting file modification times, which S3 cannot.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{fsck_clean, ingest_rev, series, Env};

const REPO: &str = "demo-org/demo-llm";

fn rev(r: &str) -> String {
    format!("{REPO}@{r}")
}

/// gc with a short grace period, as JSON.
fn gc(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["gc", "--json", "--grace", "0s"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// An environment whose store is a local directory even in the Garage phase of CI: the
/// test below ages objects by setting file modification times, which S3 cannot.
fn local_env() -> Env {
    let mut env = Env::empty();
    env.s3 = None;
    env.location = env.tmp.path().join("store").to_str().unwrap().to_string();
    env.ok(&["init", "--chunk-avg", "16384", "--pack-size", "1048576"]);
    env
}

/// Sets an object of a local store to look `days` old.
fn age(env: &Env, key: &str, days: u64) {
    let f = std::fs::File::options()
        .write(true)
        .open(Path::new(&env.location).join(key))
        .unwrap();
    let t = std::time::SystemTime::now() - Duration::from_secs(days * 86_400);
    f.set_modified(t).unwrap();
}

fn used_key(commit: &str) -> String {
    format!("repos/{REPO}/used/{commit}")
}

/// The reader named in a last-use record, once it is there (the mount and serve write it
/// from a background thread).
fn used_by(env: &Env, commit: &str) -> String {
    let t = Instant::now();
    loop {
        if let Ok(b) = env.backend().get(&used_key(commit)) {
            let u: store::manifest::UsedObject =
                format::codec::decode(format::codec::Kind::Used, &b).unwrap();
            assert_eq!(u.commit.to_hex(), commit);
            return u.by;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no last-use record for {commit}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn gc_unused_for_expires_what_nobody_read_and_keeps_reads_refs_and_pins() {
    let s = series();
    let env = local_env();
    ingest_rev(&env, "r1", &[]);
    ingest_rev(&env, "r2", &[]);
    ingest_rev(&env, "r3", &["main"]);
    ingest_rev(&env, "r4", &[]);
    let [c1, c2, c3, c4] = ["r1", "r2", "r3", "r4"].map(|r| s.commit(r));
    env.ok(&["pin", &rev(&c4)]);
    for c in [&c1, &c2, &c3, &c4] {
        age(&env, &format!("repos/{REPO}/manifests/{c}"), 40);
    }
    // A read of r2 (cat) and one through serve (r1 is only listed, never downloaded).
    env.ok(&["cat", &rev(&c2), "config.json"]);
    assert_eq!(used_by(&env, &c2), "cat");
    let listed = env.json(&["ls", REPO, "--json"]);
    let last_used = |c: &str| {
        listed["commits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["commit"] == c)
            .unwrap()["last_used"]
            .clone()
    };
    assert!(last_used(&c2).as_u64().is_some(), "{listed}");
    assert!(last_used(&c1).is_null(), "{listed}");
    assert!(env.ok(&["ls", REPO]).contains("last used never"));

    // Dry run, then the real thing: only r1 goes (r2 read, r3 a ref, r4 pinned).
    let dry = gc(&env, &["--unused-for", "30d", "--dry-run"]);
    let expired = |v: &serde_json::Value| -> Vec<String> {
        let mut e: Vec<String> = v["expired"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["commit"].as_str().unwrap().to_string())
            .collect();
        e.sort();
        e
    };
    assert_eq!(expired(&dry), vec![c1.clone()]);
    // A version lock of serve's config protects r1 like a pin.
    let cfg = env.path("locks.toml");
    std::fs::write(&cfg, format!("[serve.locks]\n\"{REPO}\" = \"{c1}\"\n")).unwrap();
    let cfg = cfg.to_str().unwrap();
    let locked = gc(&env, &["--unused-for", "30d", "--dry-run", "--config", cfg]);
    assert!(expired(&locked).is_empty(), "{locked}");
    let r = gc(&env, &["--unused-for", "30d"]);
    assert_eq!(expired(&r), vec![c1.clone()]);
    let left: Vec<String> = env.json(&["ls", REPO, "--json"])["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["commit"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left.len(), 3);
    assert!(!left.contains(&c1));
    for c in [&c2, &c3, &c4] {
        env.verifies(&rev(c));
    }

    // r2's read ages too: now it goes, with its last-use record.
    age(&env, &used_key(&c2), 40);
    let r = gc(&env, &["--unused-for", "30d"]);
    assert_eq!(expired(&r), vec![c2.clone()]);
    assert!(env.backend().get(&used_key(&c2)).is_err());
    fsck_clean(&env, true);

    // A download through serve records its use.
    let srv = common::Served::start(&env, &[]);
    let mut conn = std::net::TcpStream::connect(&srv.addr).unwrap();
    let req = format!("GET /{REPO}/resolve/{c4}/config.json HTTP/1.0\r\n\r\n");
    std::io::Write::write_all(&mut conn, req.as_bytes()).unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut conn, &mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"),
        "{reply}"
    );
    assert_eq!(used_by(&env, &c4), "serve");
}
