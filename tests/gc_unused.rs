//! `gc --unused-for` end to end (issue 14): last-use records written by readers (cat,
//! serve, the mount in tests/mount.rs), revisions nobody read expired, refs, pins and
//! serve's version locks honoured. Runs on a local store in every phase: it ages objects by
//! setting file modification times, which S3 cannot.

use crate::common;

use std::cell::Cell;
use std::path::Path;
use std::time::Duration;

use common::{fsck_clean, ingest_rev, series, wait_until, Env};

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
    let b = wait_until(
        format_args!("a last-use record for {commit}"),
        Duration::from_secs(20),
        || env.backend().get(&used_key(commit)).ok(),
    );
    let u: format::manifest::UsedObject =
        format::codec::decode(format::codec::Kind::Used, &b).unwrap();
    assert_eq!(u.commit.to_hex(), commit);
    u.by
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

/// One HTTP/1.0 request to serve; the reply's status line and headers.
fn request(srv: &common::Served, method: &str, path: &str) -> String {
    let mut conn = std::net::TcpStream::connect(&srv.addr).unwrap();
    let req = format!("{method} {path} HTTP/1.0\r\n\r\n");
    std::io::Write::write_all(&mut conn, req.as_bytes()).unwrap();
    let mut reply = Vec::new();
    std::io::Read::read_to_end(&mut conn, &mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply).to_string();
    assert!(
        reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
        "{method} {path}: {reply:.300}"
    );
    reply
}

/// A large file of a revision of the series (one the Hub stores with LFS).
fn large_file(r: &str) -> String {
    series()
        .files(r)
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.ends_with(".safetensors"))
        .expect("the series has a .safetensors file")
}

/// The age of a last-use record by the local store's clock, once it is younger than
/// `max` (the writes come from a background thread); panics after 20 s.
fn record_younger_than(env: &Env, commit: &str, max: Duration) -> Duration {
    let path = Path::new(&env.location).join(used_key(commit));
    let age = Cell::new(None);
    wait_until(
        std::fmt::from_fn(|f| {
            let age = age.get();
            write!(
                f,
                "the last-use record of {commit} to be rewritten (age {age:?})"
            )
        }),
        Duration::from_secs(20),
        || {
            age.set(
                std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| std::time::SystemTime::now().duration_since(m).ok()),
            );
            age.get().filter(|a| *a < max)
        },
    )
}

#[test]
fn a_head_of_a_large_file_is_a_use() {
    // Issue 26: a client with a warm cache sends HEADs only; a HEAD of an LFS file
    // recorded nothing, and the revision looked unused.
    let s = series();
    let env = local_env();
    ingest_rev(&env, "r1", &[]);
    let c1 = s.commit("r1");
    let srv = common::Served::start(&env, &[]);
    let reply = request(
        &srv,
        "HEAD",
        &format!("/{REPO}/resolve/{c1}/{}", large_file("r1")),
    );
    assert!(
        reply.to_ascii_lowercase().contains("x-linked-size"),
        "{reply}"
    );
    assert_eq!(used_by(&env, &c1), "serve");
}

#[test]
fn a_serve_using_a_revision_all_day_keeps_its_record_fresh() {
    // Issue 26: records were written once per UTC day and process, so a serve that had
    // read C1 since 13 h left a record 13 h old, and `gc --unused-for 12h` expired C1.
    // The serve's clock is moved with the test clock file (test builds only).
    let s = series();
    let env = local_env();
    ingest_rev(&env, "r1", &[]);
    let c1 = s.commit("r1");
    age(&env, &format!("repos/{REPO}/manifests/{c1}"), 40);
    let clock = env.path("clock");
    std::fs::write(&clock, "0").unwrap();
    let vars = [("MODELCAS_TEST_CLOCK_FILE", clock.to_str().unwrap())];
    let srv = common::Served::start_with(&env, &[], &vars);
    request(&srv, "GET", &format!("/{REPO}/resolve/{c1}/config.json"));
    assert_eq!(used_by(&env, &c1), "serve");
    // 13 hours of use later (by the serve's clock), within the same UTC day of the
    // record's: the record as it would be after 13 hours, and the serve's clock moved on.
    let f = std::fs::File::options()
        .write(true)
        .open(Path::new(&env.location).join(used_key(&c1)))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(13 * 3600))
        .unwrap();
    std::fs::write(&clock, (13 * 3600).to_string()).unwrap();
    let big = large_file("r1");
    for _ in 0..3 {
        request(&srv, "HEAD", &format!("/{REPO}/resolve/{c1}/{big}"));
        request(&srv, "GET", &format!("/{REPO}/resolve/{c1}/config.json"));
    }
    record_younger_than(&env, &c1, Duration::from_secs(600));
    let r = gc(&env, &["--unused-for", "12h"]);
    assert!(r["expired"].as_array().unwrap().is_empty(), "{r}");
    env.verifies(&rev(&c1));
}

#[test]
fn an_unused_for_shorter_than_records_are_kept_fresh_is_refused() {
    // Issue 26: a process rewrites a record at most every 10 minutes while it uses the
    // revision, so gc refuses an `unused_for` under 1 hour, saying why, and changes
    // nothing.
    let env = local_env();
    ingest_rev(&env, "r1", &[]);
    age(
        &env,
        &format!("repos/{REPO}/manifests/{}", series().commit("r1")),
        40,
    );
    let before = env.objects();
    let err = env.fails(&["gc", "--unused-for", "5m", "--grace", "0s"]);
    assert!(
        err.contains("--unused-for") && err.contains("shorter than 1h") && err.contains("10m"),
        "{err}"
    );
    let cfg = env.path("gc.toml");
    std::fs::write(&cfg, "[gc]\nunused_for = \"30min\"\n").unwrap();
    let err = env.fails(&["gc", "--config", cfg.to_str().unwrap(), "--grace", "0s"]);
    assert!(err.contains("shorter than 1h"), "{err}");
    assert_eq!(env.objects(), before);
    gc(&env, &["--unused-for", "1h"]);
}

#[test]
fn a_file_held_open_through_the_mount_keeps_its_revision_in_use() {
    // Issue 26: the mount recorded a use when a file was opened, once a day; a file held
    // open and read for hours (or read by the kernel alone, through passthrough or a
    // memory map) left a record as old as the open. While a file is open the mount keeps
    // its revision's record fresh. The mount's clock is moved with the test clock file.
    let s = series();
    let env = local_env();
    ingest_rev(&env, "r1", &[]);
    let c1 = s.commit("r1");
    age(&env, &format!("repos/{REPO}/manifests/{c1}"), 40);
    let clock = env.path("clock");
    std::fs::write(&clock, "0").unwrap();
    let vars = [("MODELCAS_TEST_CLOCK_FILE", clock.to_str().unwrap())];
    let m = common::mount::Mount::start_with(&env, &[], &vars);
    let mut open = std::fs::File::open(m.p(&format!("{REPO}/{c1}/config.json"))).unwrap();
    let mut first = Vec::new();
    std::io::Read::read_to_end(&mut open, &mut first).unwrap();
    assert!(!first.is_empty());
    assert_eq!(used_by(&env, &c1), "mount");
    // 13 hours later, the file still open: the record is rewritten without another open.
    let f = std::fs::File::options()
        .write(true)
        .open(Path::new(&env.location).join(used_key(&c1)))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(13 * 3600))
        .unwrap();
    std::fs::write(&clock, (13 * 3600).to_string()).unwrap();
    record_younger_than(&env, &c1, Duration::from_secs(600));
    let r = gc(&env, &["--unused-for", "12h"]);
    assert!(r["expired"].as_array().unwrap().is_empty(), "{r}");
    drop(open);
}
