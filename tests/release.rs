//! The release check (issue 39) on real files: a tiny model made by the safetensors,
//! tokenizers and sentencepiece libraries (tests/release_fixtures.py, which proves each
//! variant loadable or refused by the library that owns the file), stored, checked and
//! shown; labels set, listed, removed and carried by bundles; `sync` holding the refs of a
//! failing revision unless `--force`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{repo_root, series, Env, Served};

/// The fixtures, made once per test in `dir`: variant → (verdict, {(code, path)}).
fn fixtures(dir: &Path) -> BTreeMap<String, (String, BTreeSet<(String, String)>)> {
    let out = common::python()
        .arg(repo_root().join("tests/release_fixtures.py"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "release_fixtures.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(name, e)| {
            let problems = e["problems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (s(&p[0]), s(&p[1])))
                .collect();
            (name.clone(), (s(&e["verdict"]), problems))
        })
        .collect()
}

fn s(v: &serde_json::Value) -> String {
    v.as_str().unwrap().to_string()
}

/// (code, path) of a `check --json` report.
fn codes(report: &serde_json::Value) -> BTreeSet<(String, String)> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (s(&p["code"]), s(&p["path"])))
        .collect()
}

/// `modelcas check TARGET --json`: exit code and report.
fn check(env: &Env, target: &str) -> (i32, serde_json::Value) {
    let out = env.run(&["check", target, "--json"]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check {target} printed no report ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn exit_for(verdict: &str) -> i32 {
    if verdict == "failed" {
        1
    } else {
        0
    }
}

#[test]
fn every_variant_is_stored_and_fails_or_passes_with_its_own_message() {
    let env = Env::new();
    let dir = env.path("fixtures");
    let want = fixtures(&dir);
    assert!(want.len() >= 15, "{want:?}");
    assert_eq!(want["good"].0, "passed");
    let mut error_messages: BTreeMap<String, String> = BTreeMap::new();
    for (name, (verdict, problems)) in &want {
        let repo = format!("fixtures/{name}");
        // Stored whatever the check says: exit 0, every byte verifies.
        let ingested = env.ingest_json(&dir.join(name), &["--repo", &repo, "--ref", "main"]);
        let snap = &ingested["snapshots"][0];
        assert_eq!(snap["check"]["verdict"], verdict.as_str(), "{name}: {snap}");
        env.verifies(&format!("{repo}@main"));
        // The check, on demand: exact (code, path) set, exit status, messages naming the file.
        let (code, report) = check(&env, &format!("{repo}@main"));
        assert_eq!(code, exit_for(verdict), "{name}: {report}");
        assert_eq!(report["verdict"], verdict.as_str(), "{name}: {report}");
        assert_eq!(&codes(&report), problems, "{name}: {report}");
        assert_eq!(report["recorded"], true, "{name}");
        for p in report["problems"].as_array().unwrap() {
            let msg = s(&p["message"]);
            assert!(
                msg.starts_with(&format!("{}: ", s(&p["path"]))),
                "{name}: {msg}"
            );
            if p["severity"] == "error" {
                if let Some(other) = error_messages.insert(msg.clone(), name.clone()) {
                    panic!("{name} and {other} give the same message: {msg}");
                }
            }
        }
        // The same verdict for the directory, before any ingest (nothing recorded).
        let (dcode, dreport) = check(&env, dir.join(name).to_str().unwrap());
        assert_eq!(
            (dcode, codes(&dreport)),
            (code, problems.clone()),
            "{name} as a directory"
        );
        // Shown by ls (revision and repository) and verify.
        let ls = env.json(&["ls", &format!("{repo}@main"), "--json"]);
        assert_eq!(ls["check"]["verdict"], verdict.as_str(), "{name}: {ls}");
        let rows = env.json(&["ls", &repo, "--json"]);
        assert_eq!(
            rows["commits"][0]["check"]["verdict"],
            verdict.as_str(),
            "{rows}"
        );
        let v = env.json(&["verify", &format!("{repo}@main"), "--json"]);
        assert_eq!(
            (v["ok"].clone(), v["release"]["verdict"].clone()),
            (true.into(), verdict.as_str().into())
        );
        let out = env.run(&["check", &format!("{repo}@main")]);
        assert_eq!(out.status.code(), Some(code), "{name}");
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap();
        let head = if verdict == "failed" { "FAILED" } else { "OK" };
        assert!(first.starts_with(head), "{name}: {text}");
        assert_eq!(
            text.lines().count() - 1,
            problems.len(),
            "{name}: one line per problem:\n{text}"
        );
    }
}

#[test]
fn a_check_that_cannot_be_made_exits_2_and_a_damaged_chunk_is_no_verdict() {
    let env = Env::new();
    let dir = env.path("fixtures");
    fixtures(&dir);
    let out = env.run(&["check", "fixtures/none@main", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fixtures/none"));
    let out = env.run(&["check", "/nonexistent/dir/nor/revision"]);
    assert_eq!(out.status.code(), Some(2));
    env.ingest(
        &dir.join("good"),
        &["--repo", "fixtures/good", "--ref", "main"],
    );
    // Every pack damaged: the check cannot read the files, so it gives no verdict (exit 2)
    // and records nothing, rather than blaming the release.
    let before = check(&env, "fixtures/good@main").1;
    assert_eq!(before["verdict"], "passed");
    for (key, _) in env.packs() {
        env.rewrite(&key, |b| {
            for x in b.iter_mut().skip(64).step_by(97) {
                *x ^= 0x5a;
            }
        });
    }
    // A chunk cache of its own (on S3 the default one, under HOME, holds the good chunks
    // the first check read, and would rightly answer from them).
    let out = env
        .cmd()
        .env("MODELCAS_CACHE_DIR", env.path("fresh-chunk-cache"))
        .args(["check", "fixtures/good@main", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fixtures/good"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn labels_are_set_listed_removed_refused_and_carried_by_bundles() {
    let env = Env::new();
    let dir = env.path("fixtures");
    fixtures(&dir);
    let good = dir.join("good");
    env.ingest(
        &good,
        &[
            "--repo",
            "o/m",
            "--ref",
            "main",
            "--label",
            "vllm=0.11.0",
            "--label",
            "validated-by=ci",
        ],
    );
    let labels = |e: &Env| e.json(&["label", "o/m@main", "--json"])["labels"].clone();
    assert_eq!(
        labels(&env),
        serde_json::json!({"validated-by": "ci", "vllm": "0.11.0"})
    );
    env.ok(&["label", "o/m@main", "torch=2.9.0", "vllm=0.11.1"]);
    env.ok(&["label", "o/m@main", "--remove", "validated-by"]);
    assert_eq!(
        labels(&env),
        serde_json::json!({"torch": "2.9.0", "vllm": "0.11.1"})
    );
    // Shown by ls.
    let rows = env.json(&["ls", "o/m", "--json"]);
    assert_eq!(rows["commits"][0]["labels"]["torch"], "2.9.0", "{rows}");
    assert!(env.ok(&["ls", "o/m"]).contains("torch=2.9.0 vllm=0.11.1"));
    // Bad labels: a clear error, nothing changed.
    let objects = env.objects();
    for bad in ["no-equals", "a/b=x", "=x", "k=line\nbreak", "-k=v"] {
        let err = env.fails(&["label", "o/m@main", bad]);
        assert!(err.contains("label"), "{bad:?}: {err}");
    }
    let err = env.fails(&[
        "ingest",
        good.to_str().unwrap(),
        "--repo",
        "o/m2",
        "--label",
        "x y=1",
    ]);
    assert!(err.contains("label key"), "{err}");
    assert_eq!(env.objects(), objects, "a refused label changed the store");
    assert!(env.fails(&["label", "o/m@0123456", "k=v"]).contains("o/m"));

    // A bundle carries them; the importer records its own check.
    let bundle = env.path("b.mcas");
    env.ok(&["export", "o/m@main", "-o", bundle.to_str().unwrap()]);
    let other = Env::new();
    let out = other.ok(&["import", bundle.to_str().unwrap()]);
    assert!(out.contains("2 release labels set"), "{out}");
    assert_eq!(
        labels(&other),
        serde_json::json!({"torch": "2.9.0", "vllm": "0.11.1"})
    );
    let ls = other.json(&["ls", "o/m@main", "--json"]);
    assert_eq!(
        (ls["check"]["verdict"].clone(), ls["check"]["by"].clone()),
        ("passed".into(), "import".into()),
        "{ls}"
    );
    // --no-labels: a bundle without them.
    let plain = env.path("plain.mcas");
    env.ok(&[
        "export",
        "o/m@main",
        "--no-labels",
        "-o",
        plain.to_str().unwrap(),
    ]);
    let third = Env::new();
    third.ok(&["import", plain.to_str().unwrap()]);
    assert_eq!(labels(&third), serde_json::json!({}));
    // rm takes the records with the commit.
    let commit = s(&env.json(&["ls", "o/m", "--json"])["refs"]["main"]);
    env.ok(&["rm", &format!("o/m@{commit}"), "--force"]);
    assert!(
        !env.objects()
            .iter()
            .any(|o| o.contains("/labels/") || o.contains("/checks/")),
        "{:?}",
        env.objects()
    );
}

#[test]
fn sync_holds_the_refs_of_a_failing_revision_unless_forced() {
    let up = Env::new();
    let dir = up.path("fixtures");
    fixtures(&dir);
    up.ingest(&dir.join("good"), &["--repo", "o/m", "--ref", "main"]);
    up.ingest(
        &dir.join("truncated-shard"),
        &["--repo", "o/m", "--ref", "broken"],
    );
    let srv = Served::start(&up, &[]);
    let url = format!("http://{}", srv.addr);
    let local = Env::new();
    let list = local.path("list.toml");
    std::fs::write(&list, "[[model]]\nrepo = \"o/m\"\nrevision = \"main\"\n\n[[model]]\nrepo = \"o/m\"\nrevision = \"broken\"\n").unwrap();
    let run = |force: bool| {
        let mut args = vec!["sync", list.to_str().unwrap(), "--endpoint", &url, "--json"];
        if force {
            args.push("--force");
        }
        let out = local.run(&args);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), r)
    };
    let (code, r) = run(false);
    assert_eq!(code, Some(1), "{r}");
    assert_eq!(r["entries"][0]["status"], "pulled", "{r}");
    assert_eq!(r["entries"][1]["status"], "held_back", "{r}");
    assert_eq!(r["held_back"], 1, "{r}");
    let err = r["entries"][1]["error"].as_str().unwrap();
    assert!(err.contains("model-00002-of-00002.safetensors"), "{err}");
    let refs = local.json(&["ls", "o/m", "--json"]);
    assert!(refs["refs"].get("broken").is_none(), "{refs}");
    assert_eq!(
        refs["refs"]["main"],
        up.json(&["ls", "o/m", "--json"])["refs"]["main"]
    );
    // The failing revision is stored (nothing is lost), only its ref held.
    assert_eq!(refs["commits"].as_array().unwrap().len(), 2, "{refs}");
    // Again: still held, nothing downloaded.
    let (code, r) = run(false);
    assert_eq!(
        (code, r["entries"][1]["status"].clone()),
        (Some(1), "held_back".into()),
        "{r}"
    );
    assert_eq!(r["bytes_downloaded"], 0, "{r}");
    // --force moves it.
    let (code, r) = run(true);
    assert_eq!(code, Some(0), "{r}");
    let refs = local.json(&["ls", "o/m", "--json"]);
    assert_eq!(
        refs["refs"]["broken"],
        up.json(&["ls", "o/m", "--json"])["refs"]["broken"]
    );
}

#[test]
fn the_generated_series_passes_with_its_tokenizer_warning() {
    // The reference series' tokenizer.json is a BPE without merges: a warning (the
    // tokenizers library refuses it), never a failure that would hold refs back.
    let env = Env::new();
    common::ingest_rev(&env, "r1", &["main"]);
    let repo = "demo-org/demo-llm";
    let (code, r) = check(&env, &format!("{repo}@main"));
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["verdict"], "warnings", "{r}");
    assert_eq!(
        codes(&r),
        BTreeSet::from([(
            "tokenizer.structure".to_string(),
            "tokenizer.json".to_string()
        )])
    );
    assert_eq!(r["commit"], series().commit("r1").as_str());
}

#[test]
fn check_all_records_revisions_stored_without_a_current_record() {
    let env = Env::new();
    let dir = env.path("fixtures");
    fixtures(&dir);
    env.ingest(&dir.join("good"), &["--repo", "o/good", "--ref", "main"]);
    env.ingest(
        &dir.join("no-config"),
        &["--repo", "o/bad", "--ref", "main"],
    );
    // As if stored before the check existed: no records at all.
    let backend = env.backend();
    for o in backend.list("repos/").unwrap() {
        if o.key.contains("/checks/") {
            backend.delete(&o.key).unwrap();
        }
    }
    let verdict =
        |repo: &str| env.json(&["ls", repo, "--json"])["commits"][0]["check"]["verdict"].clone();
    assert_eq!(verdict("o/good"), "not checked");
    // A damaged record reads as not checked too, and is replaced.
    env.ok(&["check", "o/good@main"]);
    let key = backend
        .list("repos/o/good/checks/")
        .unwrap()
        .pop()
        .unwrap()
        .key;
    env.rewrite(&key, |b| {
        let n = b.len();
        b[n / 2] ^= 1;
    });
    assert_eq!(verdict("o/good"), "not checked");
    let out = env.run(&["check", "--all", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["failed"].clone(), r["not_checked"].clone()),
        (1.into(), 0.into()),
        "{r}"
    );
    assert_eq!(verdict("o/good"), "passed");
    assert_eq!(verdict("o/bad"), "failed");
    // One repository, and --recheck writes again even a current record.
    let out = env.run(&["check", "--all", "o/good", "--recheck"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("o/good@"),
        "{out:?}"
    );
    // Neither a target nor --all: a usage error.
    assert!(env.fails(&["check"]).contains("required"));
}

#[test]
fn a_label_update_or_an_import_over_the_cap_changes_nothing() {
    // Both failed first: `label` removed before it found the count too high, and an import
    // wrote the manifest, check and some labels before refusing.
    let env = Env::new();
    let dir = env.path("fixtures");
    fixtures(&dir);
    env.ingest(
        &dir.join("good"),
        &["--repo", "o/m", "--ref", "main", "--label", "vllm=1"],
    );
    let bundle = env.path("b.mcas");
    env.ok(&["export", "o/m@main", "-o", bundle.to_str().unwrap()]);
    let labels: Vec<String> = (0..63).map(|i| format!("l{i}=x")).collect();
    let mut args = vec!["label".to_string(), "o/m@main".to_string()];
    args.extend(labels);
    env.ok(&args);
    let before = env.objects();
    let err = env.fails(&["label", "o/m@main", "new1=x", "new2=x", "--remove", "l3"]);
    assert!(err.contains("65 labels"), "{err}");
    assert_eq!(
        env.objects(),
        before,
        "a refused label update changed the store"
    );
    // Another store holding 64 labels refuses a bundle bringing one more, before anything.
    let other = Env::new();
    other.ingest(&dir.join("good"), &["--repo", "o/m"]);
    let commit = s(&env.json(&["ls", "o/m", "--json"])["refs"]["main"]);
    let mut args = vec!["label".to_string(), format!("o/m@{commit}")];
    args.extend((0..64).map(|i| format!("k{i}=x")));
    other.ok(&args);
    let before = other.objects();
    let err = other.fails(&["import", bundle.to_str().unwrap()]);
    assert!(err.contains("65 labels"), "{err}");
    let after: Vec<String> = other
        .objects()
        .into_iter()
        .filter(|o| !o.starts_with("packs/"))
        .collect();
    let before: Vec<String> = before
        .into_iter()
        .filter(|o| !o.starts_with("packs/"))
        .collect();
    assert_eq!(after, before, "a refused import published something");
}

#[test]
fn a_ref_forced_onto_a_failing_revision_is_not_reported_held_again() {
    // Failed first: every later sync said "held back" for a ref already there.
    let up = Env::new();
    let dir = up.path("fixtures");
    fixtures(&dir);
    up.ingest(
        &dir.join("no-tokenizer"),
        &["--repo", "o/m", "--ref", "main"],
    );
    let srv = Served::start(&up, &[]);
    let url = format!("http://{}", srv.addr);
    let local = Env::new();
    let list = local.path("list.toml");
    std::fs::write(
        &list,
        "[[model]]\nrepo = \"o/m\"\nrevision = \"main\"\nrefs = [\"prod\"]\n",
    )
    .unwrap();
    let sync = |force: bool| {
        let mut args = vec!["sync", list.to_str().unwrap(), "--endpoint", &url, "--json"];
        if force {
            args.push("--force");
        }
        let out = local.run(&args);
        (
            out.status.code(),
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        )
    };
    assert_eq!(sync(false).0, Some(1));
    let (code, r) = sync(true);
    assert_eq!(code, Some(0), "{r}");
    let (code, r) = sync(false);
    assert_eq!(
        (code, r["entries"][0]["status"].clone()),
        (Some(0), "unchanged".into()),
        "{r}"
    );
    assert_eq!(r["held_back"], 0, "{r}");
}

#[test]
fn check_targets_are_told_apart_and_check_all_reports_what_it_could_not_check() {
    let env = Env::new();
    let dir = env.path("fixtures");
    fixtures(&dir);
    env.ingest(&dir.join("good"), &["--repo", "Org/Good", "--ref", "main"]);
    // A path that is not there is named as a directory, not read as a revision.
    let out = env.run(&["check", "./no-such-dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such directory"),
        "{out:?}"
    );
    // Any spelling of the repository, as pull and the locks take it.
    assert_eq!(check(&env, "org/good@main").0, 0);
    for (args, code) in [
        (vec!["check", "--all", "no/such"], 2),
        (vec!["check", "--all", "bad id!"], 2),
        (vec!["check", "--all", "ORG/GOOD"], 0),
    ] {
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    }
    // A damaged manifest: that revision is not checked (exit 2), the others still are.
    env.ingest(
        &dir.join("no-config"),
        &["--repo", "o/bad", "--ref", "main"],
    );
    let key = env
        .backend()
        .list("repos/Org/Good/manifests/")
        .unwrap()
        .pop()
        .unwrap()
        .key;
    env.rewrite(&key, |b| b.truncate(b.len() / 2));
    let out = env.run(&["check", "--all", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["failed"].clone(), r["not_checked"].clone()),
        (1.into(), 1.into()),
        "{r}"
    );
}
