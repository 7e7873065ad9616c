//! Round trips of the generated revisions through the store: plain and HF-cache layouts,
//! refs, revision resolution, dedup figures, and re-ingest.

use crate::common;

use common::{ingest_series, series, tree_hashes, Env};

const REVS: [&str; 4] = ["r1", "r2", "r3", "r4"];

#[test]
fn plain_layout_round_trip() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    for r in REVS {
        // by ref name, by full sha and by a 7-digit prefix
        for rev in [r.to_string(), s.commit(r), s.commit(r)[..7].to_string()] {
            let out = env.path(&format!("co-{r}-{}", rev.len()));
            env.ok(&[
                "checkout".as_ref(),
                format!("demo-org/demo-llm@{rev}").as_ref(),
                out.as_os_str(),
            ]);
            assert_eq!(tree_hashes(&out), s.files(r), "checkout of {r} via {rev}");
        }
        let v = env.json(&["verify", &format!("demo-org/demo-llm@{r}"), "--json"]);
        assert_eq!(v["ok"], true);
        assert_eq!(v["files"].as_u64().unwrap() as usize, s.files(r).len());
    }
    // cat gives the exact bytes
    let cat = env
        .cmd()
        .args(["cat", "demo-org/demo-llm@r2", "config.json"])
        .output()
        .unwrap();
    assert!(cat.status.success());
    assert_eq!(
        cat.stdout,
        std::fs::read(s.plain("r2").join("config.json")).unwrap()
    );
    // ls lists exactly the files, with sizes
    let ls = env.json(&["ls", "demo-org/demo-llm@r3", "--json"]);
    let listed: Vec<(String, u64)> = ls["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = s.revision("r3")["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, want);
    let repo = env.json(&["ls", "demo-org/demo-llm", "--json"]);
    assert_eq!(repo["commits"].as_array().unwrap().len(), 4);
    for r in REVS {
        assert_eq!(repo["refs"][r], s.commit(r));
    }
    let repos = env.json(&["ls", "--json"]);
    assert_eq!(repos["repos"][0]["repo"], "demo-org/demo-llm");
}

#[test]
fn hf_cache_round_trip_keeps_refs() {
    let s = series();
    let env = Env::new();
    let out = env.ingest(&s.cache_repo(), &[]);
    assert!(out.contains("stored demo-org/demo-llm@"), "{out}");
    let repo = env.json(&["ls", "demo-org/demo-llm", "--json"]);
    assert_eq!(
        repo["refs"]["main"],
        s.commit("r4"),
        "refs/main comes through"
    );
    assert_eq!(repo["commits"].as_array().unwrap().len(), 4);
    for r in REVS {
        let out = env.path(&format!("co-{r}"));
        env.ok(&[
            "checkout".as_ref(),
            format!("demo-org/demo-llm@{}", s.commit(r)).as_ref(),
            out.as_os_str(),
        ]);
        assert_eq!(tree_hashes(&out), s.files(r), "checkout of {r}");
    }
    let out = env.path("co-main");
    env.ok(&[
        "checkout".as_ref(),
        "demo-org/demo-llm@main".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(tree_hashes(&out), s.files("r4"));
}

#[test]
fn whole_hub_cache_and_plain_dedup_against_each_other() {
    let s = series();
    let env = Env::new();
    let first = env.ingest_json(&s.hub(), &[]);
    assert_eq!(first["snapshots"].as_array().unwrap().len(), 4);
    // each blob is read once: the cache holds fewer distinct files than the 4 snapshots
    let distinct_blobs = std::fs::read_dir(s.cache_repo().join("blobs"))
        .unwrap()
        .count();
    assert_eq!(
        first["files_read"].as_u64().unwrap() as usize,
        distinct_blobs
    );
    // the same data from the plain layout under another repo adds no pack bytes
    let again = env.ingest_json(&s.plain("r2"), &["--repo", "other/copy"]);
    assert_eq!(again["pack_bytes_written"], 0, "{again}");
    assert_eq!(again["snapshots"][0]["new"], true);
    let out = env.path("co");
    env.ok(&[
        "checkout".as_ref(),
        format!(
            "other/copy@{}",
            &again["snapshots"][0]["commit"].as_str().unwrap()[..10]
        )
        .as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(tree_hashes(&out), s.files("r2"));
}

#[test]
fn dedup_below_floor_and_reingest_writes_nothing() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let st = env.json(&["stats", "--json"]);
    let stored = st["stored_bytes"].as_u64().unwrap();
    let logical = st["logical_bytes"].as_u64().unwrap();
    assert_eq!(logical, s.expected["total_bytes"].as_u64().unwrap());
    assert!(
        stored < s.floor(),
        "stored {stored} is not below the unique floor {}",
        s.floor()
    );
    // stats agree with the packs on disk
    let on_disk: u64 = env.packs().iter().map(|p| p.1).sum();
    assert_eq!(stored, on_disk);
    // re-ingest of r4 writes no pack bytes and says so
    let packs_before = env.packs();
    let out = env.ingest(
        &s.plain("r4"),
        &["--repo", "demo-org/demo-llm", "--revision", &s.commit("r4")],
    );
    assert!(out.contains("nothing new, 0 pack bytes written"), "{out}");
    assert!(out.contains("unchanged"), "{out}");
    assert_eq!(env.packs(), packs_before);
}

#[test]
fn commit_id_is_derived_from_content_when_absent() {
    let s = series();
    let env = Env::new();
    let a = env.ingest_json(&s.plain("r1"), &["--repo", "x/y"]);
    let b = env.ingest_json(&s.plain("r1"), &["--repo", "x/y"]);
    let c = env.ingest_json(&s.plain("r2"), &["--repo", "x/y"]);
    assert_eq!(a["snapshots"][0]["commit"], b["snapshots"][0]["commit"]);
    assert_ne!(a["snapshots"][0]["commit"], c["snapshots"][0]["commit"]);
    assert_eq!(b["snapshots"][0]["new"], false);
    assert_eq!(a["snapshots"][0]["commit"].as_str().unwrap().len(), 40);
}

#[test]
fn index_rebuild_from_store_alone() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    std::fs::remove_dir_all(env.path("index")).unwrap();
    let out = env.ok(&["index", "rebuild"]);
    assert!(out.contains("rebuilt index"), "{out}");
    // the rebuilt index knows every chunk: re-ingesting everything writes nothing
    let v = env.ingest_json(&s.plain("r3"), &["--repo", "demo-org/demo-llm"]);
    assert_eq!(v["pack_bytes_written"], 0);
    assert!(v["chunks"].as_u64().unwrap() > 100);
}

#[test]
#[ignore = "needs ../shared/bench/gen_revisions.py beside the clone (.ci/run runs it)"]
fn generator_matches_reference() {
    // The project's generator must write the same series as the team's reference.
    let reference = common::repo_root().join("../shared/bench/gen_revisions.py");
    assert!(
        reference.exists(),
        "{} is missing: this test compares against it",
        reference.display()
    );
    let out = tempfile::tempdir().unwrap();
    let st = common::python()
        .arg(&reference)
        .arg(out.path())
        .args(["--size-mib", "16"])
        .output()
        .unwrap();
    assert!(st.status.success());
    let theirs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("expected.json")).unwrap()).unwrap();
    assert_eq!(theirs, series().expected);
}

#[test]
fn concurrent_ingests_on_one_machine_both_complete() {
    // Two ingests share the store and the local index: the second waits for the index
    // instead of failing, and both revisions end up stored and verified.
    let s = series();
    let env = Env::new();
    let spawn = |r: &str| {
        env.cmd()
            .arg("ingest")
            .arg(s.plain(r))
            .args([
                "--repo",
                "demo-org/demo-llm",
                "--revision",
                &s.commit(r),
                "--ref",
                r,
            ])
            .output()
    };
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| spawn("r1").unwrap());
        let b = sc.spawn(|| spawn("r2").unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    for r in ["r1", "r2"] {
        let v = env.json(&["verify", &format!("demo-org/demo-llm@{r}"), "--json"]);
        assert_eq!(v["ok"], true);
    }
}

/// A revision may hold any file name, including the ones checkout used for its temporary
/// files (`<name>.modelcas-partial`). Two pairs, so that the collision shows whatever the
/// number of worker threads: `a.bin` is written for long while its namesake finishes, and
/// `b.bin`'s namesake is finished before `b.bin` starts.
#[test]
fn checkout_of_files_named_like_its_temporaries_is_byte_exact() {
    use rand::{RngCore, SeedableRng};
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let mut bytes = |n: usize| {
        let mut v = vec![0u8; n];
        rng.fill_bytes(&mut v);
        v
    };
    let files = [
        ("a.bin", 24 << 20),
        ("a.bin.modelcas-partial", 20 << 10),
        ("b.bin", 20 << 10),
        ("b.bin.modelcas-partial", 2 << 20),
        ("sub/c", 1 << 20),
        ("sub/c.modelcas-partial", 30 << 10),
    ];
    for (name, size) in files {
        std::fs::write(src.join(name), bytes(size)).unwrap();
    }
    env.ingest(&src, &["--repo", "odd/names", "--ref", "main"]);
    for round in 0..3 {
        let out = env.path(&format!("co-{round}"));
        env.ok(&[
            "checkout".as_ref(),
            "odd/names@main".as_ref(),
            out.as_os_str(),
        ]);
        assert_eq!(tree_hashes(&out), tree_hashes(&src), "checkout {round}");
    }
}

/// Checkout gives files the modes the manifest says (0755 for executables, 0644 for the
/// others) whatever the umask: with 022 they are created so, with 077 set after writing.
#[test]
fn checkout_modes_do_not_depend_on_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::write(src.join("config.json"), b"{}").unwrap();
    std::fs::write(src.join("bin/run.sh"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        src.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    env.ok(&[
        "ingest",
        src.to_str().unwrap(),
        "--repo",
        "org/modes",
        "--ref",
        "main",
    ]);
    for mask in [0o022, 0o077] {
        let out = env.path(&format!("out-{mask:o}"));
        let mut cmd = env.cmd();
        cmd.args(["checkout", "org/modes@main", out.to_str().unwrap()]);
        // SAFETY: umask is async-signal-safe and touches nothing of the parent.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask);
                Ok(())
            });
        }
        assert!(cmd.status().unwrap().success());
        let mode = |p: &str| std::fs::metadata(out.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("config.json"), 0o644, "umask {mask:o}");
        assert_eq!(mode("bin/run.sh"), 0o755, "umask {mask:o}");
    }
}
