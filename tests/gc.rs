//! gc, rm, pin and fsck end to end: exact reclaiming, gc interleaved with ingests at
//! chosen points, gc killed at random points, and bad input. Runs on the local store and,
//! in `.ci/run`, on Garage.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{fsck_clean, ingest_rev, ingest_series, series, Env};
use store::pack::read_footer;
use store::{CommitId, RepoId, Store};

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

/// Chunk id → frame length of every chunk a revision references.
fn chunks_of(env: &Env, commit: &str) -> HashMap<[u8; 32], u32> {
    let store = Store::open(env.backend()).unwrap();
    let m = store
        .manifest(
            &RepoId::parse(REPO).unwrap(),
            &CommitId::parse(commit).unwrap(),
        )
        .unwrap();
    m.files
        .iter()
        .flat_map(|f| f.chunks.iter().map(|c| (c.id, c.frame_len)))
        .collect()
}

/// Chunk id → how many packs hold it, over every pack's footer.
fn stored_chunks(env: &Env) -> BTreeMap<[u8; 32], (usize, u32)> {
    let b = env.backend();
    let mut out: BTreeMap<[u8; 32], (usize, u32)> = BTreeMap::new();
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

/// A new store and a directory for pause points.
fn env_with_pause() -> (Env, std::path::PathBuf) {
    let env = Env::new();
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    (env, pause)
}

fn verifies(env: &Env, r: &str) {
    env.verifies(&rev(r));
}

#[test]
fn gc_reclaims_exactly_what_only_expired_revisions_used() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let r4 = chunks_of(&env, &s.commit("r4"));
    let before = pack_bytes(&env);

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

/// Starts modelcas with `args`, pausing at `point`; returns once it is there.
fn paused(env: &Env, args: &[&str], point: &str, dir: &Path) -> Child {
    let _ = std::fs::remove_file(dir.join(format!("{point}.go")));
    let _ = std::fs::remove_file(dir.join(format!("{point}.reached")));
    let mut child = env
        .cmd()
        .args(args)
        .env("MODELCAS_PAUSE_AT", point)
        .env("MODELCAS_PAUSE_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.join(format!("{point}.reached")).exists() {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("{args:?} exited ({st}) before {point}: {err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{point} never reached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Lets a paused process go on and asserts it succeeds.
fn release(child: Child, point: &str, dir: &Path) {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "paused process failed after {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn gc_interleaved_with_ingest_loses_nothing() {
    let s = series();
    // Ingest of r3 (the re-shard of r2: its chunks are r2's) paused at each point while
    // gc condemns r2's packs and tries to delete them.
    for point in [
        "ingest-after-lease",
        "ingest-after-sync",
        "ingest-before-manifests",
        "ingest-before-refs",
    ] {
        let (env, pause) = env_with_pause();
        ingest_rev(&env, "r1", &["main"]);
        ingest_rev(&env, "r2", &[]);
        env.ok(&["rm", &rev(&s.commit("r2"))]);
        let ingest = paused(
            &env,
            &[
                "ingest",
                s.plain("r3").to_str().unwrap(),
                "--repo",
                REPO,
                "--revision",
                &s.commit("r3"),
                "--ref",
                "r3",
            ],
            point,
            &pause,
        );
        let g1 = gc(&env, &["--keep-last", "0"]);
        assert!(
            g1["packs_condemned"].as_u64().unwrap() > 0,
            "{point}: {g1:#}"
        );
        let g2 = gc(&env, &["--keep-last", "0"]);
        assert_eq!(
            g2["packs_deleted"], 0,
            "{point}: deleted under a live ingest lease: {g2:#}"
        );
        assert!(
            g2["packs_waiting_on_ingest"].as_u64().unwrap() > 0,
            "{point}: {g2:#}"
        );
        release(ingest, point, &pause);
        for _ in 0..3 {
            gc(&env, &["--keep-last", "0"]);
        }
        verifies(&env, "r3");
        verifies(&env, "main");
        fsck_clean(&env, true);
    }

    // A gc that expires the new, still detached revision after the ingest put its manifest
    // back and before it sets its refs: the ingest puts it back again and sets them. (The
    // ingest failed with "no such commit" when its refs became one batch checked after
    // every manifest had been put back.)
    let (env, pause) = env_with_pause();
    ingest_rev(&env, "r1", &["main"]);
    let point = "ingest-refs-after-restore";
    let ingest = paused(
        &env,
        &[
            "ingest",
            s.plain("r2").to_str().unwrap(),
            "--repo",
            REPO,
            "--revision",
            &s.commit("r2"),
            "--ref",
            "r2",
        ],
        point,
        &pause,
    );
    let g = gc(&env, &["--keep-last", "0"]);
    assert!(
        !listed_commits(&env).contains(&s.commit("r2")),
        "gc did not expire the detached revision: {g:#}"
    );
    release(ingest, point, &pause);
    assert!(listed_commits(&env).contains(&s.commit("r2")));
    verifies(&env, "r2");
    verifies(&env, "main");
    fsck_clean(&env, true);

    // A gc paused after listing while a whole ingest runs: the new revision's packs look
    // unreferenced to that gc; the next run rescues them.
    let (env, pause) = env_with_pause();
    ingest_rev(&env, "r1", &["main"]);
    let g = paused(
        &env,
        &["gc", "--keep-last", "0", "--grace", "0s"],
        "gc-after-listing",
        &pause,
    );
    ingest_rev(&env, "r2", &["r2"]);
    release(g, "gc-after-listing", &pause);
    let next = gc(&env, &["--keep-last", "0"]);
    assert!(next["packs_rescued"].as_u64().unwrap() > 0, "{next:#}");
    gc(&env, &["--keep-last", "0"]);
    verifies(&env, "r2");
    verifies(&env, "main");
    fsck_clean(&env, true);

    // An ingest that starts after the mark must not dedup against condemned packs: its
    // index knew them, the sync makes it forget them.
    let env = Env::new();
    ingest_rev(&env, "r2", &[]);
    ingest_rev(&env, "r1", &["main"]);
    env.ok(&["rm", &rev(&s.commit("r2"))]);
    gc(&env, &["--keep-last", "0"]);
    let again = env.ingest_json(
        &s.plain("r3"),
        &["--repo", REPO, "--revision", &s.commit("r3"), "--ref", "r3"],
    );
    assert!(
        again["sync"]["condemned"].as_u64().unwrap() > 0,
        "{again:#}"
    );
    let g = gc(&env, &["--keep-last", "0"]);
    assert!(g["packs_deleted"].as_u64().unwrap() > 0, "{g:#}");
    verifies(&env, "r3");
    fsck_clean(&env, true);
}

#[test]
fn killed_gc_leaves_a_consistent_store_and_the_next_gc_finishes() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let gc_args = [
        "gc",
        "--keep-last",
        "0",
        "--grace",
        "0s",
        "--rewrite-below",
        "1",
    ];
    // Fresh garbage each round: a revision ingested under a temporary ref, then dropped.
    let garbage = |i: usize| {
        let r = ["r1", "r2", "r3"][i % 3];
        env.ingest(
            &s.plain(r),
            &["--repo", REPO, "--revision", &s.commit(r), "--ref", "tmp"],
        );
        env.ok(&["rm", &rev("tmp")]);
        if i % 3 == 0 {
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

/// Path → sha256 of the files a manifest lists.
fn listed_files(env: &Env, commit: &str) -> Vec<(String, String)> {
    let store = Store::open(env.backend()).unwrap();
    let m = store
        .manifest(
            &RepoId::parse(REPO).unwrap(),
            &CommitId::parse(commit).unwrap(),
        )
        .unwrap();
    let mut v: Vec<_> = m
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256_hex()))
        .collect();
    v.sort();
    v
}

/// Every file of `commit` read back with `cat` hashes to `want`.
fn cats_exactly(env: &Env, commit: &str, want: &[(String, String)]) {
    for (path, sha) in want {
        let out = env
            .cmd()
            .args(["cat", &rev(commit), path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cat {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&out.stdout));
        assert_eq!(&got, sha, "cat {path}");
    }
}

/// Issue 11, point 2: gc lists commit X, and while it copies packs X is removed and
/// ingested again with other files (how a partial snapshot is replaced). gc must not put
/// back the manifest it listed, and no later gc may delete what the new X needs.
#[test]
fn regression_gc_rewrite_never_resurrects_a_removed_commit() {
    let s = series();
    let (env, pause) = env_with_pause();
    ingest_series(&env);
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &rev(r)]);
    }
    // X is r4's commit; its chunks share packs with r1..r3, which expire: rewrites.
    let x = s.commit("r4");
    let g = paused(
        &env,
        &[
            "gc",
            "--keep-last",
            "0",
            "--grace",
            "0s",
            "--rewrite-below",
            "1",
        ],
        "gc-after-listing",
        &pause,
    );
    env.ok(&["rm", "--force", &rev(&x)]);
    env.ingest(
        &s.plain("r1"),
        &["--repo", REPO, "--revision", &x, "--ref", "r4"],
    );
    release(g, "gc-after-listing", &pause);
    let want = s.files("r1");
    assert_eq!(
        listed_files(&env, &x),
        want,
        "gc put back the manifest of X it had listed"
    );
    verifies(&env, &x);
    cats_exactly(&env, &x, &want);
    // The next runs (no grace) delete nothing the new X needs.
    for _ in 0..2 {
        gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
        assert_eq!(listed_files(&env, &x), want);
        verifies(&env, &x);
    }
    cats_exactly(&env, &x, &want);
    fsck_clean(&env, true);
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
            .any(|p| !present.contains(&store::layout::pack_key(p))),
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

/// Lets a paused process go on and returns its output, whatever its exit status.
fn resume(child: Child, point: &str, dir: &Path) -> std::process::Output {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
    child.wait_with_output().unwrap()
}

/// The commits `ls` shows for the test repository.
fn listed_commits(env: &Env) -> Vec<String> {
    let listed = env.json(&["ls", REPO, "--json"]);
    listed["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Issue 11, point 3: a pin or a ref set while gc is paused between listing and deleting
/// expired revisions is honoured.
#[test]
fn regression_pin_and_ref_during_gc_are_honoured() {
    let s = series();
    for how in ["pin", "ref"] {
        let (env, pause) = env_with_pause();
        ingest_rev(&env, "r1", &[]);
        ingest_rev(&env, "r4", &["main"]);
        let c = s.commit("r1");
        let g = paused(
            &env,
            &["gc", "--keep-last", "0", "--grace", "0s"],
            "gc-after-listing",
            &pause,
        );
        match how {
            "pin" => env.ok(&["pin", &rev(&c)]),
            _ => env.ok(&["ref", REPO, "keep", &c]),
        };
        release(g, "gc-after-listing", &pause);
        assert!(
            listed_commits(&env).contains(&c),
            "{how}: the commit expired though the {how} succeeded"
        );
        verifies(&env, &c);
        fsck_clean(&env, true);
        // And later runs keep it and its data.
        for _ in 0..2 {
            gc(&env, &["--keep-last", "0"]);
        }
        verifies(&env, &c);
        fsck_clean(&env, true);
    }
}

/// Issue 11, point 3: a pin of a commit gc has already deleted fails, and so does one that
/// checked the commit just before gc deleted it; neither leaves a pin behind.
#[test]
fn regression_pin_of_an_expiring_commit_fails_and_leaves_nothing() {
    let s = series();
    let (env, pause) = env_with_pause();
    ingest_rev(&env, "r1", &[]);
    ingest_rev(&env, "r4", &["main"]);
    let c = s.commit("r1");
    let pins = format!("repos/{REPO}/pins/");

    // The pin checks the commit, then gc deletes the manifest and waits for the pin.
    let pin = paused(&env, &["pin", &rev(&c)], "pin-after-check", &pause);
    let g = paused(
        &env,
        &["gc", "--keep-last", "0", "--grace", "0s"],
        "gc-after-expire",
        &pause,
    );
    std::fs::write(pause.join("gc-after-expire.go"), b"").unwrap();
    let out = resume(pin, "pin-after-check", &pause);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the pin reported success: {err}");
    assert!(err.contains("was removed"), "{err}");
    let out = g.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        env.backend().list(&pins).unwrap().is_empty(),
        "a pin is left"
    );
    assert!(!listed_commits(&env).contains(&c));

    // A pin after gc deleted the manifest: refused at once.
    ingest_rev(&env, "r1", &[]);
    let g = paused(
        &env,
        &["gc", "--keep-last", "0", "--grace", "0s"],
        "gc-after-expire",
        &pause,
    );
    let err = env.fails(&["pin", &rev(&c)]);
    assert!(err.contains("unknown revision"), "{err}");
    release(g, "gc-after-expire", &pause);
    assert!(
        env.backend().list(&pins).unwrap().is_empty(),
        "a pin is left"
    );
    assert!(!listed_commits(&env).contains(&c));
    fsck_clean(&env, true);
    verifies(&env, "main");
}
