//! gc, rm, pin and fsck end to end: exact reclaiming, retention policies and pins, gc
//! killed at random points, reading through forwarding records, and bad input. The
//! interleavings with ingest, pin and ref at chosen pause points are in tests/gc_races.rs.
//! Runs on the local store and, in `.ci/run`, on Garage.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use common::gc::{
    cats_exactly, gc, listed_files, manifest_of, paused, release, rev, verifies, GC_REWRITING_ALL,
    REPO,
};
use common::{fsck_clean, ingest_rev, ingest_series, series, Env};
use format::{ChunkId, CommitId, RepoId};
use repo::pack::read_footer;
use repo::Store;

/// Chunk id → frame length of every chunk a revision references.
fn chunks_of(env: &Env, commit: &str) -> HashMap<ChunkId, u32> {
    manifest_of(env, commit)
        .files
        .iter()
        .flat_map(|f| f.chunks.iter().map(|c| (c.id, c.frame_len)))
        .collect()
}

/// Chunk id → how many packs hold it, over every pack's footer.
fn stored_chunks(env: &Env) -> BTreeMap<ChunkId, (usize, u32)> {
    let b = env.backend();
    let mut out: BTreeMap<ChunkId, (usize, u32)> = BTreeMap::new();
    for (key, _) in env.packs() {
        for e in read_footer(b.as_ref(), &key).unwrap().entries {
            let v = out.entry(e.id).or_insert((0, e.frame_len));
            v.0 += 1;
        }
    }
    out
}

fn pack_bytes(env: &Env) -> u64 {
    env.packs().iter().map(|p| p.1).sum()
}

#[test]
fn gc_reclaims_exactly_what_only_expired_revisions_used() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let r4 = chunks_of(&env, &s.commit("r4"));
    let before = pack_bytes(&env);
    let frames = |env: &Env| -> u64 { stored_chunks(env).values().map(|v| v.0 as u64).sum() };
    let frames_before = frames(&env);

    // r1 and r3 lose their refs and expire by policy; r2 is removed explicitly.
    env.ok(&["rm", &rev("r1")]);
    env.ok(&["rm", &rev("r3")]);
    let err = env.fails(&["rm", &rev(&s.commit("r2"))]);
    assert!(err.contains("refs r2 point to it"), "{err}");
    env.ok(&["rm", "--force", &rev(&s.commit("r2"))]);

    let dry = gc(
        &env,
        &["--keep-last", "0", "--rewrite-below", "1", "--dry-run"],
    );
    assert_eq!(pack_bytes(&env), before, "dry run changed the store");
    let mut dry_expired: Vec<&str> = dry["expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["commit"].as_str().unwrap())
        .collect();
    dry_expired.sort();
    let mut want = vec![s.commit("r1"), s.commit("r3")];
    want.sort();
    assert_eq!(dry_expired, want);

    let mut reclaimed = 0u64;
    let mut written = 0u64;
    let first = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert_eq!(first["expired"].as_array().unwrap().len(), 2, "{first:#}");
    assert_eq!(
        first["packs_deleted"], 0,
        "nothing is deleted before a second run"
    );
    assert!(first["packs_condemned"].as_u64().unwrap() > 0, "{first:#}");
    assert!(first["packs_rewritten"].as_u64().unwrap() > 0, "{first:#}");
    written += first["rewrite_bytes_written"].as_u64().unwrap();
    verifies(&env, "r4");
    let second = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    reclaimed += second["bytes_reclaimed"].as_u64().unwrap();
    assert!(second["packs_deleted"].as_u64().unwrap() > 0, "{second:#}");
    let third = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    for k in [
        "packs_deleted",
        "packs_condemned",
        "packs_rewritten",
        "packs_waiting",
    ] {
        assert_eq!(third[k], 0, "a third run had work left ({k}): {third:#}");
    }

    // Exactly r4's chunks remain, each once, and the report's figure is what is stored.
    let stored = stored_chunks(&env);
    assert_eq!(stored.len(), r4.len(), "chunks stored vs chunks r4 uses");
    for (id, (copies, frame_len)) in &stored {
        assert_eq!(*copies, 1, "chunk stored {copies} times");
        assert_eq!(
            r4.get(id),
            Some(frame_len),
            "a chunk r4 does not use survived"
        );
    }
    let after = pack_bytes(&env);
    assert_eq!(third["bytes_stored"].as_u64().unwrap(), after);
    // The dead chunks the reports count are the frames that went: every frame of the
    // deleted packs but those copied into new packs first (rewritten packs' live ones).
    let deleted: u64 = [&first, &second, &third]
        .iter()
        .map(|r| r["chunks_deleted"].as_u64().unwrap())
        .sum();
    assert_eq!(
        deleted,
        frames_before - frames(&env),
        "dead chunks reported: {first:#} {second:#}"
    );
    assert_eq!(
        third["live_bytes"].as_u64().unwrap(),
        r4.values().map(|l| *l as u64).sum::<u64>()
    );
    assert_eq!(before + written - reclaimed, after, "bytes accounted for");
    verifies(&env, "r4");
    fsck_clean(&env, true);
    let listed = env.json(&["ls", REPO, "--json"]);
    assert_eq!(listed["commits"].as_array().unwrap().len(), 1, "{listed}");

    // The index learned about the deletions: ingesting r1 again stores its data again.
    let again = env.ingest_json(&s.plain("r1"), &["--repo", REPO, "--ref", "r1"]);
    assert!(
        again["pack_bytes_written"].as_u64().unwrap() > 0,
        "{again:#}"
    );
    verifies(&env, "r1");
    fsck_clean(&env, true);
}

#[test]
fn pins_and_policies_decide_what_expires() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &rev(r)]);
    }
    env.ok(&["pin", &rev(&s.commit("r2")[..12])]);
    let out = env.ok(&["pin", &rev(&s.commit("r2"))]);
    assert!(out.contains("already pinned"), "{out}");
    // Policy from the config file, per repository.
    let cfg = env.path("config.toml");
    std::fs::write(
        &cfg,
        format!("[gc]\nkeep_last = 5\n\n[gc.repos.\"{REPO}\"]\nkeep_last = 0\n"),
    )
    .unwrap();
    let r = env.json(&[
        "--config",
        cfg.to_str().unwrap(),
        "gc",
        "--json",
        "--grace",
        "0s",
    ]);
    let mut expired: Vec<String> = r["expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["commit"].as_str().unwrap().to_string())
        .collect();
    expired.sort();
    let mut want = vec![s.commit("r1"), s.commit("r3")];
    want.sort();
    assert_eq!(expired, want, "pinned r2 and ref'd r4 stay");
    verifies(&env, &s.commit("r2"));
    let err = env.fails(&["rm", &rev(&s.commit("r2"))]);
    assert!(err.contains("pinned"), "{err}");
    env.ok(&["unpin", &rev(&s.commit("r2"))]);
    let err = env.fails(&["unpin", &rev(&s.commit("r2"))]);
    assert!(err.contains("not pinned"), "{err}");
    let r = gc(&env, &["--keep-last", "0"]);
    assert_eq!(r["expired"][0]["commit"], s.commit("r2"));
    // keep-within keeps what was just ingested.
    ingest_rev(&env, "r1", &[]);
    let r = gc(&env, &["--keep-last", "0", "--keep-within", "1h"]);
    assert_eq!(r["expired"].as_array().unwrap().len(), 0, "{r:#}");
    let r = gc(&env, &["--keep-last", "0"]);
    assert_eq!(r["expired"][0]["commit"], s.commit("r1"));
    gc(&env, &[]);
    verifies(&env, "r4");
    fsck_clean(&env, true);
}

#[test]
fn bad_input_is_refused_and_deletes_nothing() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    env.ok(&["rm", &rev("r1")]);
    let before = env.objects();
    let cases: &[(&[&str], &str)] = &[
        (&["rm", "nope/nope@main"], "unknown repository nope/nope"),
        (
            &["rm", "demo-org/demo-llm@nosuchref"],
            "unknown revision nosuchref",
        ),
        (&["rm", "demo-org/demo-llm"], "ORG/NAME@REV"),
        (&["pin", "demo-org/demo-llm@0000000"], "unknown revision"),
        (&["gc", "--keep-within", "3x"], "invalid duration \"3x\""),
        (&["gc", "--keep-within", "30"], "time unit needed"),
        (&["gc", "--grace", "soon"], "invalid duration \"soon\""),
        (
            &["gc", "--keep-last", "many"],
            "invalid value 'many' for '--keep-last",
        ),
        (&["gc", "--rewrite-below", "2"], "between 0 and 1"),
        (&["fsck", "--grace", "1q"], "unknown time unit"),
    ];
    for (args, want) in cases {
        let err = env.fails(args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let cfg = env.path("bad.toml");
    std::fs::write(&cfg, "[gc]\nkeep_lats = 1\n").unwrap();
    let err = env.fails(&["--config", cfg.to_str().unwrap(), "gc"]);
    assert!(
        err.contains("keep_lats") && err.contains("bad.toml"),
        "{err}"
    );
    std::fs::write(&cfg, "[gc]\nkeep_within = \"forever\"\n").unwrap();
    let err = env.fails(&["--config", cfg.to_str().unwrap(), "gc"]);
    assert!(
        err.contains("gc.keep_within") && err.contains("forever"),
        "{err}"
    );
    assert_eq!(env.objects(), before, "a refused command changed the store");

    // A second gc while one holds the lock: exit status 3, nothing deleted.
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let first = paused(
        &env,
        &["gc", "--keep-last", "0", "--grace", "0s"],
        "gc-after-listing",
        &pause,
    );
    let out = env.run(&["gc", "--keep-last", "0", "--grace", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("another gc is running"), "{err}");
    assert_eq!(
        env.objects()
            .iter()
            .filter(|k| !k.starts_with("locks/"))
            .count(),
        before.len()
    );
    release(first, "gc-after-listing", &pause);
    verifies(&env, "r4");
    let _ = s;
}

#[test]
fn killed_gc_leaves_a_consistent_store_and_the_next_gc_finishes() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let gc_args = GC_REWRITING_ALL;
    // Fresh garbage each round: a revision ingested under a temporary ref, then dropped.
    let garbage = |i: usize| {
        let r = ["r1", "r2", "r3"][i % 3];
        env.ingest(
            &s.plain(r),
            &["--repo", REPO, "--revision", &s.commit(r), "--ref", "tmp"],
        );
        env.ok(&["rm", &rev("tmp")]);
        if i.is_multiple_of(3) {
            for r in ["r1", "r2", "r3"] {
                let _ = env.run(&["rm", &rev(r)]);
            }
        }
    };
    // Killed at each pause point...
    let points = [
        "gc-after-listing",
        "gc-before-delete",
        "gc-before-forwards",
        "gc-before-state",
    ];
    for (i, point) in points.iter().enumerate() {
        garbage(i);
        let mut child = paused(&env, &gc_args, point, &pause);
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        fsck_clean(&env, false);
        verifies(&env, "r4");
    }
    // ...and at crash steps (repo/src/failpoint.rs): each round kills the run just before
    // its k-th object-store mutation (the lock is the first), counted, not timed; a run
    // with fewer mutations completes, which is fine too.
    let mut killed = 0;
    for (i, k) in [2u64, 3, 4, 5, 3, 2].into_iter().enumerate() {
        garbage(i);
        if i % 2 == 1 {
            env.ok(&gc_args); // condemn now so that the killed run deletes
        }
        let st = env
            .cmd()
            .args(gc_args)
            .env("MODELCAS_CRASH_AT_STEP", k.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success() || st.signal() == Some(libc::SIGKILL), "{st}");
        killed += usize::from(st.signal() == Some(libc::SIGKILL));
        fsck_clean(&env, false);
    }
    assert!(killed >= 4, "only {killed} of 6 runs were killed mid-way");
    // The next runs finish the job: nothing waits, nothing is left but r4's chunks.
    for _ in 0..3 {
        env.ok(&gc_args);
    }
    let last = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert_eq!(last["packs_waiting"], 0, "{last:#}");
    assert_eq!(last["packs_condemned"], 0, "{last:#}");
    let r4 = chunks_of(&env, &s.commit("r4"));
    let stored = stored_chunks(&env);
    assert_eq!(stored.len(), r4.len());
    assert!(stored.values().all(|(n, _)| *n == 1));
    assert!(
        env.backend().list("locks/").unwrap().is_empty(),
        "locks left behind"
    );
    fsck_clean(&env, true);
    verifies(&env, "r4");
}

/// A kept revision whose packs were rewritten and then deleted reads back byte-exact
/// through the forwarding records: its manifest still names the old packs.
#[test]
fn a_revision_reads_through_forwarding_records_after_its_packs_are_deleted() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let x = s.commit("r4");
    let before = listed_files(&env, &x);
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &rev(r)]);
    }
    let first = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert!(first["packs_rewritten"].as_u64().unwrap() > 0, "{first:#}");
    assert_eq!(
        first["forwards_written"], first["packs_rewritten"],
        "{first:#}"
    );
    let second = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert!(second["packs_deleted"].as_u64().unwrap() > 0, "{second:#}");
    assert_eq!(second["forwards_deleted"], 0, "{second:#}");
    // The manifest is the one ingested, naming packs that are gone.
    assert_eq!(listed_files(&env, &x), before);
    let store = Store::open(env.backend()).unwrap();
    let m = store
        .manifest(&RepoId::parse(REPO).unwrap(), &CommitId::parse(&x).unwrap())
        .unwrap();
    let present: std::collections::HashSet<String> = env.packs().into_iter().map(|p| p.0).collect();
    assert!(
        m.packs
            .iter()
            .any(|p| !present.contains(&format::layout::pack_key(p))),
        "no pack of r4's manifest was deleted: the test proves nothing"
    );
    verifies(&env, "r4");
    cats_exactly(&env, "r4", &s.files("r4"));
    let out = env.path("checkout");
    env.ok(&["checkout", &rev("r4"), out.to_str().unwrap()]);
    assert_eq!(common::tree_hashes(&out), s.files("r4"));
    // Still needed: a third run keeps the records.
    let third = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert_eq!(third["forwards_deleted"], 0, "{third:#}");
    verifies(&env, "r4");
    fsck_clean(&env, true);
    // Once r4 is gone too, the records go with the packs.
    env.ok(&["rm", "--force", &rev(&x)]);
    for _ in 0..3 {
        gc(&env, &["--keep-last", "0"]);
    }
    assert!(
        env.backend().list("moved/").unwrap().is_empty(),
        "forwarding records left behind"
    );
    assert!(env.packs().is_empty(), "packs left behind");
    fsck_clean(&env, false);
}

/// Ingests revision `r` of the series (no ref) from a host whose clock is off by
/// `offset_secs` (the test clock hook).
fn ingest_skewed(env: &Env, r: &str, offset_secs: i64) {
    let s = series();
    let out = env
        .cmd()
        .env("MODELCAS_TEST_CLOCK_OFFSET_SECS", offset_secs.to_string())
        .args(["ingest", s.plain(r).to_str().unwrap()])
        .args(["--repo", REPO, "--revision", &s.commit(r)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The commits a gc report expired, sorted.
fn expired(r: &serde_json::Value) -> Vec<String> {
    let mut e: Vec<String> = r["expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["commit"].as_str().unwrap().to_string())
        .collect();
    e.sort();
    e
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A store in a local directory whatever the suite's backend: the tests below need a
/// store clock finer than S3's whole seconds (three ingests fit in one second).
fn local_env() -> Env {
    let mut env = Env::empty();
    env.s3 = None;
    env.location = env.tmp.path().join("store").to_str().unwrap().to_string();
    env.ok(&["init", "--chunk-avg", "16384", "--pack-size", "1048576"]);
    env
}

#[test]
fn keep_last_ranks_by_the_stores_clock_not_the_ingesting_hosts() {
    // Issue 26: revisions were ranked by the ingesting host's `ingested_at`: a later
    // ingest from a host whose clock is behind ranked older, and `--keep-last 1` kept the
    // wrong one. Three ingests in this order, from hosts 0, 1 and 2 hours behind.
    let s = series();
    let env = local_env();
    ingest_skewed(&env, "r1", 0);
    ingest_skewed(&env, "r2", -3600);
    ingest_skewed(&env, "r3", -7200);
    let [c1, c2, c3] = ["r1", "r2", "r3"].map(|r| s.commit(r));
    let r = gc(&env, &["--keep-last", "1", "--dry-run"]);
    assert_eq!(expired(&r), sorted(vec![c1.clone(), c2.clone()]), "{r:#}");
    let r = gc(&env, &["--keep-last", "2"]);
    assert_eq!(expired(&r), vec![c1], "{r:#}");
    for c in [&c2, &c3] {
        verifies(&env, c);
    }
}

#[test]
fn keep_last_keeps_exactly_n_of_revisions_ingested_within_one_second() {
    // Issue 26: ranked by whole seconds, revisions ingested within one second tied and
    // all were kept. Now the order is total (the store's clock in ms, then a sequence,
    // then the commit id), and exactly N are kept: the last ingested.
    let s = series();
    let env = Env::new();
    for r in ["r1", "r2", "r3"] {
        ingest_rev(&env, r, &[]);
    }
    let [c1, c2, c3] = ["r1", "r2", "r3"].map(|r| s.commit(r));
    let r = gc(&env, &["--keep-last", "1", "--dry-run"]);
    assert_eq!(expired(&r), sorted(vec![c1.clone(), c2.clone()]), "{r:#}");
    let r = gc(&env, &["--keep-last", "2"]);
    assert_eq!(expired(&r), vec![c1], "{r:#}");
    verifies(&env, &c3);
}

#[test]
fn keep_within_compares_by_the_stores_clock() {
    // Issue 26: keep-within compared the ingesting host's clock: a revision ingested just
    // now from a host 100 days behind was expired at once by `--keep-within 30d`.
    let s = series();
    let env = Env::new();
    ingest_skewed(&env, "r1", -100 * 86_400);
    ingest_skewed(&env, "r2", 0);
    let r = gc(&env, &["--keep-last", "0", "--keep-within", "30d"]);
    assert!(expired(&r).is_empty(), "{r:#}");
    verifies(&env, &s.commit("r1"));
    // Without the rule they go, so the rule is what kept them.
    let r = gc(&env, &["--keep-last", "0"]);
    assert_eq!(
        expired(&r),
        sorted(vec![s.commit("r1"), s.commit("r2")]),
        "{r:#}"
    );
}
