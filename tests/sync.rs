//! `modelcas sync LIST.toml` (issue 14): a prefetch list pulled from an upstream
//! `modelcas serve` (no internet here): statuses, refs, byte-exact files, reruns that
//! download nothing, an entry that fails without stopping the others, and lists refused
//! before anything is downloaded.

use crate::common;

use std::collections::BTreeMap;

use common::{ingest_rev, series, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// path → sha256 of a stored revision of the demo repository.
fn stored_files(env: &Env, rev: &str) -> BTreeMap<String, String> {
    env.stored_files(&format!("{REPO}@{rev}"))
}

/// path → sha256 of revision `r` of the series, the files `keep` selects.
fn expected(r: &str, keep: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
    series()
        .files(r)
        .into_iter()
        .filter(|(p, _)| keep(p))
        .collect()
}

fn local_refs(env: &Env) -> serde_json::Value {
    env.json(&["ls", REPO, "--json"])["refs"].clone()
}

/// Writes `text` as a list file in `env`'s scratch directory.
fn list(env: &Env, name: &str, text: &str) -> String {
    let p = env.path(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// `modelcas sync LIST --endpoint URL --json`: exit code and report.
fn sync(env: &Env, list: &str, url: &str) -> (i32, serde_json::Value) {
    let out = env.run(&["sync", list, "--endpoint", url, "--json"]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "sync printed no report ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn statuses(r: &serde_json::Value) -> Vec<&str> {
    r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect()
}

/// Files the include patterns of the first entry below select.
fn weights_and_json(p: &str) -> bool {
    p.ends_with(".json") || p.starts_with("model-00001")
}

#[test]
fn a_list_is_pulled_then_unchanged_then_follows_the_upstream_branch() {
    let up = Env::new();
    ingest_rev(&up, "r1", &["main"]);
    ingest_rev(&up, "r2", &[]);
    ingest_rev(&up, "r3", &["v3"]);
    let srv = Served::start(&up, &[]);
    let url = format!("http://{}", srv.addr);
    let (c1, c2, c3) = (
        series().commit("r1"),
        series().commit("r2"),
        series().commit("r3"),
    );
    let local = Env::new();
    let l = list(
        &local,
        "list.toml",
        &format!(
            "[[model]]\nrepo = \"{REPO}\"\nrevision = \"main\"\ninclude = [\"*.json\", \"model-00001*\"]\n\n\
             [[model]]\nrepo = \"{REPO}\"\nrevision = \"{c3}\"\nrefs = [\"stable\"]\n"
        ),
    );

    // First run: both pulled, refs set, files byte-exact.
    let (code, r) = sync(&local, &l, &url);
    assert_eq!(code, 0, "{r}");
    assert_eq!(statuses(&r), ["pulled", "pulled"], "{r}");
    assert_eq!(r["pulled"], 2);
    assert_eq!(r["entries"][0]["commit"], c1.as_str());
    assert_eq!(r["entries"][1]["commit"], c3.as_str());
    assert_eq!(r["entries"][0]["refs_moved"], serde_json::json!(["main"]));
    assert_eq!(r["entries"][1]["refs_moved"], serde_json::json!(["stable"]));
    assert!(r["bytes_downloaded"].as_u64().unwrap() > 0, "{r}");
    let refs = local_refs(&local);
    assert_eq!(refs["main"], c1.as_str());
    assert_eq!(refs["stable"], c3.as_str());
    assert_eq!(refs.as_object().unwrap().len(), 2, "{refs}");
    let want1 = expected("r1", weights_and_json);
    assert!(want1.len() >= 5 && want1.len() < series().files("r1").len());
    assert_eq!(stored_files(&local, "main"), want1);
    assert_eq!(stored_files(&local, "stable"), expected("r3", |_| true));
    local.verifies(&format!("{REPO}@{c1}"));
    local.verifies(&format!("{REPO}@{c3}"));

    // Second run: nothing to do, nothing downloaded.
    let (code, r) = sync(&local, &l, &url);
    assert_eq!(code, 0, "{r}");
    assert_eq!(statuses(&r), ["unchanged", "unchanged"], "{r}");
    assert_eq!(r["bytes_downloaded"], 0, "{r}");
    for e in r["entries"].as_array().unwrap() {
        assert_eq!(e["bytes_downloaded"], 0, "{r}");
    }

    // A ref moved away locally is moved back, without a download.
    local.ok(&["ref", REPO, "stable", &c1]);
    let (code, r) = sync(&local, &l, &url);
    assert_eq!(code, 0, "{r}");
    assert_eq!(statuses(&r), ["unchanged", "refs_moved"], "{r}");
    assert_eq!(r["entries"][1]["refs_moved"], serde_json::json!(["stable"]));
    assert_eq!(r["bytes_downloaded"], 0, "{r}");
    assert_eq!(local_refs(&local)["stable"], c3.as_str());

    // The upstream moves main to r2: --dry-run says what a run would do, and does nothing.
    up.ok(&["ref", REPO, "main", &c2]);
    let out = local.run(&["sync", &l, "--endpoint", &url, "--json", "--dry-run"]);
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["dry_run"].as_bool(), statuses(&r)),
        (Some(true), vec!["pulled", "unchanged"])
    );
    assert_eq!(r["entries"][0]["commit"], c2.as_str());
    assert_eq!(local_refs(&local)["main"], c1.as_str());
    // The next run pulls r2 and moves the local main.
    let (code, r) = sync(&local, &l, &url);
    assert_eq!(code, 0, "{r}");
    assert_eq!(statuses(&r), ["pulled", "unchanged"], "{r}");
    assert_eq!(r["entries"][0]["commit"], c2.as_str());
    assert!(r["bytes_downloaded"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(local_refs(&local)["main"], c2.as_str());
    assert_eq!(
        stored_files(&local, "main"),
        expected("r2", weights_and_json)
    );
    local.verifies(&format!("{REPO}@{c2}"));

    // Human output: a line per entry and a summary.
    let text = local.ok(&["sync", &l, "--endpoint", &url]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("unchanged") && lines[0].contains(&c2),
        "{text}"
    );
    assert!(
        lines[1].starts_with("unchanged") && lines[1].contains(&c3),
        "{text}"
    );
    assert!(
        lines[2].contains("2 entries") && lines[2].contains("0 failed"),
        "{text}"
    );
}

#[test]
fn a_failing_entry_does_not_stop_the_others_and_fails_the_run() {
    let up = Env::new();
    ingest_rev(&up, "r1", &["main"]);
    let srv = Served::start(&up, &[]);
    let url = format!("http://{}", srv.addr);
    let local = Env::new();
    let l = list(
        &local,
        "list.toml",
        &format!(
            "[[model]]\nrepo = \"demo-org/no-such-model\"\n\n[[model]]\nrepo = \"{REPO}\"\ninclude = [\"*.json\"]\n"
        ),
    );
    let (code, r) = sync(&local, &l, &url);
    assert_eq!(code, 1, "{r}");
    assert_eq!(statuses(&r), ["failed", "pulled"], "{r}");
    assert_eq!(
        (r["failed"].as_u64(), r["pulled"].as_u64()),
        (Some(1), Some(1))
    );
    let err = r["entries"][0]["error"].as_str().unwrap();
    assert!(
        err.contains("demo-org/no-such-model") && err.contains("not found"),
        "{err}"
    );
    assert!(r["entries"][1]["error"].is_null(), "{r}");
    assert_eq!(
        stored_files(&local, "main"),
        expected("r1", |p| p.ends_with(".json"))
    );
    let repos = local.json(&["ls", "--json"])["repos"].clone();
    assert_eq!(repos.as_array().unwrap().len(), 1, "{repos}");

    // The human output says which entry failed and why.
    let out = local.run(&["sync", &l, "--endpoint", &url]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("failed")
            && l.contains("no-such-model")
            && l.contains("not found")),
        "{text}"
    );
    assert!(text.contains("1 unchanged, 1 failed"), "{text}");
}

#[test]
fn invalid_lists_are_refused_before_anything_is_downloaded() {
    let up = Env::new();
    ingest_rev(&up, "r1", &["main"]);
    let srv = Served::start(&up, &[]);
    let url = format!("http://{}", srv.addr);
    let local = Env::new();
    let good = format!("[[model]]\nrepo = \"{REPO}\"\ninclude = [\"config.json\"]\n\n");
    let c1 = series().commit("r1");
    let cases = [
        (
            format!("{good}[[model]]\nrepo = \"{REPO}\"\nrevison = \"main\"\n"),
            vec!["revison"],
        ),
        (
            format!("{good}[[model]]\nrepo = \"demo org/x\"\n"),
            vec!["entry 2 (demo org/x)", "invalid repo id"],
        ),
        (
            format!(
                "{good}[[model]]\nrepo = \"{REPO}\"\nrevision = \"{}\"\n",
                &c1[..39]
            ),
            vec!["entry 2 (demo-org/demo-llm)", "not 40 hex digits"],
        ),
        (
            format!("{good}[[model]]\nrepo = \"{REPO}\"\nrevision = \"{c1}\"\nrefs = [\"main\"]\n"),
            vec![
                "entry 2 (demo-org/demo-llm)",
                "\"main\" is also set by entry 1",
            ],
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let l = list(&local, &format!("bad{i}.toml"), text);
        let err = local.fails(&["sync", &l, "--endpoint", &url]);
        for w in want {
            assert!(err.contains(w), "case {i}: missing {w:?} in {err}");
        }
        let err = local.fails(&["sync", &l, "--check"]);
        assert!(err.contains(want[0]), "case {i} --check: {err}");
    }
    let access = |log: &str| log.lines().filter(|l| l.contains("access repo=")).count();
    assert_eq!(access(&srv.log()), 0, "{}", srv.log());
    assert!(local.json(&["ls", "--json"])["repos"]
        .as_array()
        .unwrap()
        .is_empty());

    // The good entry alone passes --check offline, and a real run does reach the upstream
    // (so the empty access log above means something).
    let l = list(&local, "good.toml", &good);
    assert!(local.ok(&["sync", &l, "--check"]).contains("1 entries, ok"));
    let (code, r) = sync(&local, &l, &url);
    assert_eq!((code, statuses(&r)), (0, vec!["pulled"]), "{r}");
    assert!(access(&srv.log()) > 0, "{}", srv.log());
}
