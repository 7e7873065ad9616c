//! gc interleaved with other commands at chosen pause points (`repo/src/failpoint.rs`):
//! ingests paused at each step while gc condemns and deletes, a gc paused between listing
//! and deleting while revisions are ingested, removed, pinned or given refs. Nothing a
//! command reported done is lost, nothing removed comes back. Runs on the local store and,
//! in `.ci/run`, on Garage.

use crate::common;

use common::gc::{
    cats_exactly, env_with_pause, gc, listed_commits, listed_files, paused, paused_ingest, release,
    resume, rev, verifies, GC_REWRITING_ALL, REPO,
};
use common::{fsck_clean, ingest_rev, ingest_series, series, Env};

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
        let ingest = paused_ingest(&env, "r3", point, &pause);
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
    let ingest = paused_ingest(&env, "r2", point, &pause);
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
    let g = paused(&env, &GC_REWRITING_ALL, "gc-after-listing", &pause);
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
