//! Bad input: each case gets a clear one-line error naming what is wrong, a non-zero exit,
//! and leaves the store as it was (what was there still verifies).

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::{series, tree_hashes, Env};

/// A store holding r1 (ref `r1`), and the `ls` listing to compare with afterwards.
fn with_r1() -> (Env, String) {
    let s = series();
    let env = Env::new();
    env.ingest(
        &s.plain("r1"),
        &[
            "--repo",
            "demo-org/demo-llm",
            "--revision",
            &s.commit("r1"),
            "--ref",
            "r1",
        ],
    );
    let listing = env.ok(&["ls", "demo-org/demo-llm", "--json"]);
    (env, listing)
}

/// The store still holds exactly r1, and it verifies.
fn unchanged(env: &Env, listing: &str) {
    assert_eq!(env.ok(&["ls", "demo-org/demo-llm", "--json"]), listing);
    assert_eq!(
        env.json(&["ls", "--json"])["repos"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let v = env.json(&["verify", "demo-org/demo-llm@r1", "--json"]);
    assert_eq!(v["ok"], true, "{v}");
}

fn one_line(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want a one-line error, got:\n{err}");
    lines[0]
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            symlink(std::fs::read_link(e.path()).unwrap(), &dest).unwrap();
        } else if ft.is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

#[test]
fn missing_path_and_non_snapshots() {
    let (env, listing) = with_r1();
    let missing = env.path("nope");
    let err = env.fails(&[
        "ingest".as_ref(),
        missing.as_os_str(),
        "--repo".as_ref(),
        "a/b".as_ref(),
    ]);
    assert!(
        one_line(&err).contains("nope: no such file or directory"),
        "{err}"
    );
    let empty = env.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = env.fails(&[
        "ingest".as_ref(),
        empty.as_os_str(),
        "--repo".as_ref(),
        "a/b".as_ref(),
    ]);
    assert!(one_line(&err).contains("empty: not a snapshot"), "{err}");
    let file = env.path("file.bin");
    std::fs::write(&file, b"x").unwrap();
    let err = env.fails(&[
        "ingest".as_ref(),
        file.as_os_str(),
        "--repo".as_ref(),
        "a/b".as_ref(),
    ]);
    assert!(
        one_line(&err).contains("file.bin: not a directory"),
        "{err}"
    );
    // a plain directory without --repo
    let err = env.fails(&["ingest".as_ref(), series().plain("r2").as_os_str()]);
    assert!(one_line(&err).contains("needs --repo"), "{err}");
    unchanged(&env, &listing);
}

#[test]
fn invalid_repo_ids_and_revisions() {
    let (env, listing) = with_r1();
    for bad in ["noslash", "a/b/c", "../etc", "a/b--c", "a /b"] {
        let err = env.fails(&[
            "ingest".as_ref(),
            series().plain("r2").as_os_str(),
            "--repo".as_ref(),
            bad.as_ref(),
        ]);
        assert!(one_line(&err).contains("invalid repo id"), "{bad}: {err}");
    }
    let err = env.fails(&[
        "ingest".as_ref(),
        series().plain("r2").as_os_str(),
        "--repo".as_ref(),
        "a/b".as_ref(),
        "--revision".as_ref(),
        "1234".as_ref(),
    ]);
    assert!(
        one_line(&err).contains("invalid commit sha \"1234\""),
        "{err}"
    );
    let err = env.fails(&[
        "ingest".as_ref(),
        series().plain("r2").as_os_str(),
        "--repo".as_ref(),
        "a/b".as_ref(),
        "--ref".as_ref(),
        "../x".as_ref(),
    ]);
    assert!(one_line(&err).contains("invalid ref name"), "{err}");
    let err = env.fails(&["ls", "demo-org/demo-llm@nosuchref"]);
    assert!(
        one_line(&err).contains("unknown revision nosuchref of demo-org/demo-llm"),
        "{err}"
    );
    let err = env.fails(&["ls", "demo-org/nope@main"]);
    assert!(
        one_line(&err).contains("unknown repository demo-org/nope"),
        "{err}"
    );
    let err = env.fails(&["cat", "demo-org/demo-llm@r1", "no/such/file"]);
    assert!(one_line(&err).contains("has no file no/such/file"), "{err}");
    let err = env.fails(&["checkout", "demo-org/demo-llm", "/tmp/x"]);
    assert!(one_line(&err).contains("expected ORG/NAME@REV"), "{err}");
    // a prefix shorter than 7 digits is not accepted
    let short = &series().commit("r1")[..6];
    let err = env.fails(&["ls", &format!("demo-org/demo-llm@{short}")]);
    assert!(one_line(&err).contains("unknown revision"), "{err}");
    unchanged(&env, &listing);
}

#[test]
fn ambiguous_prefix() {
    let (env, listing) = with_r1();
    let s = series();
    for (rev, sha) in [
        ("r2", "abcdef1000000000000000000000000000000000"),
        ("r3", "abcdef1999999999999999999999999999999999"),
    ] {
        env.ingest(&s.plain(rev), &["--repo", "amb/x", "--revision", sha]);
    }
    let err = env.fails(&["ls", "amb/x@abcdef1"]);
    let line = one_line(&err);
    assert!(
        line.contains("ambiguous revision abcdef1 of amb/x"),
        "{err}"
    );
    assert!(
        line.contains("abcdef1000000000000000000000000000000000")
            && line.contains("abcdef1999999999999999999999999999999999")
    );
    env.ok(&["ls", "amb/x@abcdef19"]);
    assert_eq!(env.ok(&["ls", "demo-org/demo-llm", "--json"]), listing);
}

#[test]
fn dangling_symlink_in_plain_snapshot() {
    let (env, listing) = with_r1();
    let snap = env.path("snap");
    copy_dir(&series().plain("r2"), &snap);
    symlink("does-not-exist.bin", snap.join("extra.safetensors")).unwrap();
    let err = env.fails(&[
        "ingest".as_ref(),
        snap.as_os_str(),
        "--repo".as_ref(),
        "demo-org/demo-llm".as_ref(),
    ]);
    assert!(
        one_line(&err).contains("extra.safetensors: dangling symlink to does-not-exist.bin"),
        "{err}"
    );
    unchanged(&env, &listing);
}

#[test]
fn incomplete_downloads_in_hf_cache() {
    let (env, listing) = with_r1();
    let s = series();
    let cache = env.path("hub/models--demo-org--demo-llm");
    copy_dir(&s.cache_repo(), &cache);
    // A stray partial download beside complete blobs is skipped with a warning.
    std::fs::write(cache.join("blobs/0123abcd.incomplete"), b"partial").unwrap();
    let out = env.cmd().arg("ingest").arg(&cache).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: skipping partial download")
            && stderr.contains("0123abcd.incomplete"),
        "{stderr}"
    );
    let files = env.json(&[
        "ls",
        &format!("demo-org/demo-llm@{}", s.commit("r2")),
        "--json",
    ]);
    assert!(files["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| !f["path"].as_str().unwrap().contains("incomplete")));
    let listing2 = env.ok(&["ls", "demo-org/demo-llm", "--json"]);

    // A snapshot whose blob is still downloading: the link dangles, the .incomplete exists.
    let cache2 = env.path("hub2/models--demo-org--demo-llm");
    copy_dir(&s.cache_repo(), &cache2);
    let snap = cache2.join("snapshots").join(s.commit("r2"));
    let link = snap.join("model-00004-of-00004.safetensors");
    let target = cache2
        .join("snapshots")
        .join(s.commit("r2"))
        .join(std::fs::read_link(&link).unwrap());
    let blob_name = target.file_name().unwrap().to_str().unwrap().to_string();
    let blob = cache2.join("blobs").join(&blob_name);
    std::fs::rename(
        &blob,
        cache2
            .join("blobs")
            .join(format!("{blob_name}.1a2b3c4d.incomplete")),
    )
    .unwrap();
    let err = env.fails(&["ingest".as_ref(), cache2.as_os_str()]);
    let line = one_line(&err);
    assert!(
        line.contains("model-00004-of-00004.safetensors: dangling symlink"),
        "{err}"
    );
    assert!(line.contains("download incomplete"), "{err}");
    assert_eq!(env.ok(&["ls", "demo-org/demo-llm", "--json"]), listing2);
    let _ = listing;
}

#[test]
fn blob_content_not_matching_its_sha256_name() {
    let (env, listing) = with_r1();
    let cache = env.path("hub/models--demo-org--demo-llm");
    copy_dir(&series().cache_repo(), &cache);
    // corrupt one safetensors blob (named by its sha256)
    let blob = std::fs::read_dir(cache.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name().unwrap().len() == 64 && std::fs::metadata(p).unwrap().len() > 1_000_000
        })
        .unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[500_000] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let err = env.fails(&["ingest".as_ref(), cache.as_os_str()]);
    let line = one_line(&err);
    assert!(
        line.contains(blob.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
    assert!(line.contains("does not match its blob name"), "{err}");
    unchanged(&env, &listing);
}

#[test]
fn checkout_target_not_empty() {
    let (env, listing) = with_r1();
    let target = env.path("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep.txt"), b"mine").unwrap();
    let err = env.fails(&[
        "checkout".as_ref(),
        "demo-org/demo-llm@r1".as_ref(),
        target.as_os_str(),
    ]);
    assert!(
        one_line(&err).contains("target: checkout target exists and is not empty"),
        "{err}"
    );
    assert_eq!(std::fs::read(target.join("keep.txt")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 1);
    unchanged(&env, &listing);
}

/// A `--spin-us` past a millisecond is refused before anything is mounted (issue 40), by
/// every spelling; so is one that is not a number.
#[test]
fn a_spin_window_past_a_second_is_refused() {
    let (env, _) = with_r1();
    let mnt = env.path("mnt-spin");
    std::fs::create_dir_all(&mnt).unwrap();
    let err = env.fails(&["mount", mnt.to_str().unwrap(), "--spin-us", "1001"]);
    let want =
        "--spin-us (MODELCAS_MOUNT_SPIN_US, [mount] spin_us) 1001: at most 1000 microseconds";
    assert!(one_line(&err).contains(want), "{err}");
    let out = env
        .cmd()
        .env("MODELCAS_MOUNT_SPIN_US", "2000000")
        .arg("mount")
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(one_line(&err).contains("MODELCAS_MOUNT_SPIN_US"), "{err}");
    // clap's own message, with its usage lines.
    let err = env.fails(&["mount", mnt.to_str().unwrap(), "--spin-us", "fast"]);
    assert!(
        err.contains("invalid value 'fast' for '--spin-us <US>'"),
        "{err}"
    );
    assert!(!common::mount::is_mounted(&mnt));
    assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
}

#[test]
fn store_that_does_not_exist() {
    let env = Env::empty();
    let err = env.fails(&["ls"]);
    assert!(one_line(&err).contains("no modelcas store at"), "{err}");
    assert!(!env.store_exists(), "a read must not create a store");
}

#[test]
fn corrupted_and_truncated_packs_are_refused() {
    let s = series();
    let (env, _) = with_r1();
    let packs = env.packs();
    assert!(packs.len() > 3, "want several packs, got {}", packs.len());
    // Flip one byte in the middle of a pack (inside some frame).
    let victim = &packs[packs.len() / 2].0;
    let original_pack = env.backend().get(victim).unwrap();
    let at = original_pack.len() / 2;
    env.rewrite(victim, |b| b[at] ^= 0x55);
    let out = env.run(&["verify", "demo-org/demo-llm@r1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let bad: Vec<&str> = stderr.lines().filter(|l| l.starts_with("BAD ")).collect();
    assert!(!bad.is_empty(), "{stderr}");
    let pack_name = victim.rsplit('/').next().unwrap();
    let bad_file = bad[0]
        .trim_start_matches("BAD ")
        .split(':')
        .next()
        .unwrap()
        .to_string();
    assert!(
        bad[0].contains("corrupt chunk") && bad[0].contains(pack_name),
        "{stderr}"
    );
    assert!(
        s.files("r1").iter().any(|(p, _)| *p == bad_file),
        "verify names a file of the revision: {bad_file}"
    );
    // cat of that file refuses instead of returning wrong bytes
    let cat = env.run(&["cat", "demo-org/demo-llm@r1", &bad_file]);
    assert!(!cat.status.success());
    let err = String::from_utf8_lossy(&cat.stderr);
    assert!(err.contains("corrupt chunk"), "{err}");
    let original = std::fs::read(s.plain("r1").join(&bad_file)).unwrap();
    assert_ne!(
        cat.stdout, original,
        "cat must not print the whole file as if it were fine"
    );
    // checkout refuses too and leaves no partial file behind
    let target = env.path("co");
    let err = env.fails(&[
        "checkout".as_ref(),
        "demo-org/demo-llm@r1".as_ref(),
        target.as_os_str(),
    ]);
    assert!(
        err.contains(&bad_file) && err.contains("corrupt chunk"),
        "{err}"
    );
    assert!(!target.join(&bad_file).exists());
    // (partial files are written beside their place, in every directory)
    for (p, _) in tree_hashes(&target) {
        assert!(
            !p.split('/').any(|c| c.starts_with(".modelcas-checkout-")),
            "partial file left: {p}"
        );
    }

    // Truncate another pack: reads past its end fail with a clear error.
    env.backend().put(victim, &original_pack).unwrap();
    assert_eq!(
        env.json(&["verify", "demo-org/demo-llm@r1", "--json"])["ok"],
        true
    );
    // (a node-local chunk cache, on S3, holds verified copies of what was read so far: a
    // fresh node has none)
    let _ = std::fs::remove_dir_all(env.path("chunk-cache"));
    let victim2 = &packs[0].0;
    env.rewrite(victim2, |b| b.truncate(b.len() / 3));
    let v = env.json_fail(&["verify", "demo-org/demo-llm@r1", "--json"]);
    assert_eq!(v["ok"], false);
    let problems = v["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(
        problems[0]["error"].as_str().unwrap().contains("truncated"),
        "{v}"
    );
    // checkout reads adjacent frames with one ranged read: one that runs past the cut
    // still fails, naming the cut; what it leaves visible is only whole, verified files
    // (no partial file, no staging directory)
    let target = env.path("co-truncated");
    let err = env.fails(&[
        "checkout".as_ref(),
        "demo-org/demo-llm@r1".as_ref(),
        target.as_os_str(),
    ]);
    assert!(err.contains("truncated"), "{err}");
    let expected = s.files("r1");
    for (p, h) in tree_hashes(&target) {
        assert!(
            expected.iter().any(|(ep, eh)| *ep == p && *eh == h),
            "checkout left a file that is not one of the revision's: {p}"
        );
    }
}

trait JsonFail {
    fn json_fail(&self, args: &[&str]) -> serde_json::Value;
}
impl JsonFail for Env {
    fn json_fail(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert!(!out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Issue 36 point 4: a snapshot link in a Hugging Face cache is followed only into its own
/// repository's `blobs/`. A user who can write into a shared cache plants links to a file
/// of someone else's (absolute, relative through `..`, into another repository's blobs, or
/// a blob that is itself a link out): each ingest is refused naming the link, and nothing
/// is stored (before, the target was stored and served to any client).
#[test]
fn regression_hf_cache_links_lead_only_into_the_repositorys_blobs() {
    let (env, listing) = with_r1();
    let s = series();
    let secret = env.path("secret");
    std::fs::write(&secret, b"root's secret: do not store\n").unwrap();
    let other_blob = env.path("hub-other/models--x--y/blobs/abc");
    std::fs::create_dir_all(other_blob.parent().unwrap()).unwrap();
    std::fs::write(&other_blob, b"another repository's blob\n").unwrap();
    type Plant = fn(&Path, &Path, &Path, &Path);
    let plants: [(&str, Plant); 4] = [
        ("absolute", |_, link, secret, _| {
            symlink(secret, link).unwrap()
        }),
        ("relative", |_, link, secret, _| {
            let up = "../".repeat(link.parent().unwrap().components().count() - 1);
            let rel = format!("{up}{}", secret.strip_prefix("/").unwrap().display());
            symlink(rel, link).unwrap();
        }),
        ("another repository's blob", |_, link, _, other| {
            symlink(other, link).unwrap()
        }),
        ("a blob that links out", |cache, link, secret, _| {
            let blob = cache.join("blobs/planted");
            symlink(secret, &blob).unwrap();
            symlink("../../blobs/planted", link).unwrap();
        }),
    ];
    for (i, (what, plant)) in plants.iter().enumerate() {
        let cache = env.path(&format!("hub{i}/models--demo-org--demo-llm"));
        copy_dir(&s.cache_repo(), &cache);
        let link = cache
            .join("snapshots")
            .join(s.commit("r2"))
            .join("config.json");
        std::fs::remove_file(&link).unwrap();
        plant(&cache, &link, &secret, &other_blob);
        assert_eq!(
            std::fs::read(&link).unwrap(),
            std::fs::read(if *what == "another repository's blob" {
                &other_blob
            } else {
                &secret
            })
            .unwrap(),
            "{what}: the plant works"
        );
        let err = env.fails(&["ingest".as_ref(), cache.as_os_str()]);
        let line = one_line(&err);
        assert!(
            line.contains("config.json") && line.contains("blobs"),
            "{what}: {err}"
        );
        unchanged(&env, &listing);
    }
}

/// Issue 36 point 4, after review: a snapshot directory that is itself a link out of the
/// repository (its regular files would be read from wherever it points), and a `blobs/`
/// or `snapshots/` directory (above a regular snapshot file) swapped for a link between
/// discovery and the read (an ingest
/// paused after discovery, with the pause point `ingest-after-lease`): each is refused
/// and nothing is stored. Before, the first ingested the victim directory's files (exit 0),
/// and the swap was followed (the open refused only a link in the last component).
#[test]
fn regression_hf_cache_directories_that_lead_out_are_refused() {
    let (env, listing) = with_r1();
    let s = series();
    let victim = env.path("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("secret.txt"), b"root's secret\n").unwrap();
    // A snapshot directory that is a link to the victim's directory.
    let cache = env.path("hub-a/models--demo-org--demo-llm");
    copy_dir(&s.cache_repo(), &cache);
    let snap = cache.join("snapshots").join(s.commit("r2"));
    std::fs::remove_dir_all(&snap).unwrap();
    symlink(&victim, &snap).unwrap();
    let err = env.fails(&["ingest".as_ref(), cache.as_os_str()]);
    assert!(
        one_line(&err).contains("secret.txt") && err.contains("outside"),
        "{err}"
    );
    unchanged(&env, &listing);
    // blobs/ swapped, after discovery, for a link to a directory holding a file named as
    // the blob that config.json's link names.
    for swapped in ["blobs", "snapshots"] {
        let cache = env.path(&format!("hub-{swapped}/models--demo-org--demo-llm"));
        copy_dir(&s.cache_repo(), &cache);
        let link = cache
            .join("snapshots")
            .join(s.commit("r2"))
            .join("config.json");
        let blob = std::fs::read_link(&link).unwrap();
        let blob_name = blob.file_name().unwrap().to_owned();
        if swapped == "snapshots" {
            // A snapshot file that is a regular file (its path runs through snapshots/).
            let content = std::fs::read(&link).unwrap();
            std::fs::remove_file(&link).unwrap();
            std::fs::write(&link, content).unwrap();
        }
        let decoy = env.path(&format!("decoy-{swapped}"));
        let decoy_dir = if swapped == "blobs" {
            decoy.clone()
        } else {
            decoy.join(s.commit("r2"))
        };
        std::fs::create_dir_all(&decoy_dir).unwrap();
        if swapped == "blobs" {
            std::fs::write(decoy_dir.join(&blob_name), b"root's secret\n").unwrap();
        } else {
            std::fs::write(decoy_dir.join("config.json"), b"root's secret\n").unwrap();
        }
        let pause = env.path(&format!("pause-{swapped}"));
        let mut cmd = env.cmd();
        cmd.arg("ingest").arg(&cache);
        let child = common::spawn_paused(&mut cmd, "ingest-after-lease", &pause);
        let dir = cache.join(swapped);
        std::fs::rename(&dir, cache.join(format!("{swapped}.old"))).unwrap();
        symlink(&decoy, &dir).unwrap();
        common::go_on(&pause, "ingest-after-lease");
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{swapped} swapped: the ingest succeeded"
        );
        assert!(err.contains("symbolic link"), "{swapped}: {err}");
        unchanged(&env, &listing);
    }
}
