//! `modelcas check` (the release check of a revision or a directory) and `modelcas label`
//! (release labels); the words and JSON other commands use to show a check record.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use format::release::Labels;
use format::release::{CheckObject, Verdict};
use repo::Store;
use serde_json::json;

use crate::ctx::{resolve, Ctx};

/// `modelcas check TARGET`: exit 0 passed (or warnings only), 1 failed, 2 could not check.
pub fn check(ctx: &Ctx, target: &str, json: bool, no_record: bool) -> Result<ExitCode> {
    let outcome = if is_dir_target(target) {
        if Path::new(target).is_dir() {
            check_dir(Path::new(target), json)
        } else {
            Err(anyhow::anyhow!("{target}: no such directory"))
        }
    } else {
        check_revision(ctx, target, json, no_record)
    };
    match outcome {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `modelcas check --all [ORG/NAME] [--recheck]`: records what is missing or stale; exit 1
/// when a revision fails, 2 when one could not be checked.
pub fn check_all(ctx: &Ctx, repo: Option<&str>, recheck: bool, json: bool) -> Result<ExitCode> {
    match check_all_in(ctx, repo, recheck, json) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

fn check_all_in(ctx: &Ctx, repo: Option<&str>, recheck: bool, json: bool) -> Result<ExitCode> {
    let store = ctx.open()?;
    let repos = match repo {
        Some(r) => {
            let asked = format::RepoId::parse(r)?;
            let found = store.find_repo(&asked)?;
            vec![found.ok_or_else(|| repo::StoreError::UnknownRepo(asked.to_string()))?]
        }
        None => store.repos()?,
    };
    let (mut failed, mut not_made, mut rows) = (0usize, 0usize, Vec::new());
    for repo in repos {
        for commit in store.commits(&repo)? {
            let warn = |w: String| eprintln!("warning: {w}");
            let m = match store.manifest(&repo, &commit) {
                Ok(m) => m,
                Err(e) => {
                    // One unreadable revision is not checked; the others still are.
                    warn(format!("{repo}@{commit} not checked: {e}"));
                    not_made += 1;
                    continue;
                }
            };
            let check = if recheck {
                match store::release::check_revision(&store, &m, "check") {
                    Ok(c) => store.put_check(&repo, &c).map(|()| Some(c))?,
                    Err(e) => {
                        warn(store::release::not_made(&m, &e));
                        None
                    }
                }
            } else {
                store::release::ensure_checked(&store, &m, "check", &warn)?
            };
            match check.as_ref().map(CheckObject::verdict) {
                None => not_made += 1,
                Some(Verdict::Failed) => failed += 1,
                Some(_) => {}
            }
            if json {
                let mut v = check_json(check.as_ref());
                v["repo"] = json!(repo.to_string());
                v["commit"] = json!(commit.to_hex());
                rows.push(v);
            } else {
                let word = check
                    .as_ref()
                    .map_or("not checked".to_string(), CheckObject::summary);
                println!("{repo}@{commit}  {word}");
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"revisions": rows, "failed": failed, "not_checked": not_made})
            )?
        );
    }
    Ok(match (failed, not_made) {
        (_, n) if n > 0 => ExitCode::from(2),
        (f, _) if f > 0 => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// Whether `target` names a directory: a path (`/…`, `./…`, `../…`, `~…`, `.`), or an
/// existing directory whose name is no revision (no `@`). `ORG/NAME@REV` is a revision even
/// where a directory of that name exists.
fn is_dir_target(target: &str) -> bool {
    let path_like = target == "."
        || target == ".."
        || ["/", "./", "../", "~"]
            .iter()
            .any(|p| target.starts_with(p));
    path_like || (!target.contains('@') && Path::new(target).is_dir())
}

fn check_dir(dir: &Path, json: bool) -> Result<ExitCode> {
    let files =
        release::DirFiles::open(dir).with_context(|| format!("reading {}", dir.display()))?;
    let report = release::check(&files, &release::Options::default())?;
    let problems = report
        .problems
        .iter()
        .map(store::release::stored_problem)
        .collect();
    let obj = CheckObject {
        commit: format::CommitId([0; 20]),
        files: [0; 32],
        rules: store::release::RULES,
        checked_at: 0,
        by: "check".into(),
        problems,
        omitted: report.omitted,
    };
    let name = dir.display().to_string();
    if json {
        let mut v = check_json(Some(&obj));
        v["path"] = json!(name);
        v["recorded"] = json!(false);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_check(&name, &obj, "not recorded: a directory");
    }
    Ok(exit_of(&obj))
}

fn check_revision(ctx: &Ctx, spec: &str, json: bool, no_record: bool) -> Result<ExitCode> {
    let store = ctx.open()?;
    let (asked, rev) = format::names::parse_repo_rev(spec)?;
    // Any spelling of the repository's id, as pull and the locks take it.
    let repo = store.find_repo(&asked)?.unwrap_or(asked);
    let commit = store.resolve(&repo, &rev)?;
    let manifest = store.manifest(&repo, &commit)?;
    let obj = store::release::check_revision(&store, &manifest, "check")
        .with_context(|| format!("checking {repo}@{commit}"))?;
    let recorded = if no_record {
        "not recorded: --no-record".to_string()
    } else if ctx.store_is_hub() {
        "not recorded: read through a hub".to_string()
    } else {
        match store.put_check(&repo, &obj) {
            Ok(()) => "recorded".to_string(),
            Err(e) => format!("not recorded: {e}"),
        }
    };
    let labels = store.labels(&repo, &commit).unwrap_or_default();
    if json {
        let mut v = check_json(Some(&obj));
        v["repo"] = json!(repo.to_string());
        v["commit"] = json!(commit.to_hex());
        v["recorded"] = json!(recorded == "recorded");
        v["labels"] = json!(labels);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_check(&format!("{repo}@{commit}"), &obj, &recorded);
        if !labels.is_empty() {
            println!("labels: {}", labels_line(&labels));
        }
    }
    Ok(exit_of(&obj))
}

fn exit_of(obj: &CheckObject) -> ExitCode {
    if obj.verdict() == Verdict::Failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_check(name: &str, obj: &CheckObject, recorded: &str) {
    let head = match obj.verdict() {
        Verdict::Failed => "FAILED",
        Verdict::Warnings => "OK (warnings)",
        _ => "OK",
    };
    println!(
        "{head} {name}: {} error{}, {} warning{} (rules {}, {recorded})",
        obj.errors(),
        if obj.errors() == 1 { "" } else { "s" },
        obj.warnings(),
        if obj.warnings() == 1 { "" } else { "s" },
        obj.rules
    );
    for p in &obj.problems {
        let sev = if p.is_error() { "error" } else { "warning" };
        println!("{sev:<8} {}", p.message);
    }
    if obj.omitted > 0 {
        println!("… and {} more problems not kept", obj.omitted);
    }
}

/// The JSON of a check record (`null` verdict fields when there is none):
/// `{"verdict", "errors", "warnings", "rules", "checked_at", "by", "problems", "omitted"}`.
pub fn check_json(obj: Option<&CheckObject>) -> serde_json::Value {
    let Some(c) = obj else {
        return json!({"verdict": Verdict::NotChecked.as_str(), "errors": null, "warnings": null,
                      "rules": null, "problems": []});
    };
    let problems: Vec<_> = c
        .problems
        .iter()
        .map(|p| {
            json!({"severity": if p.is_error() { "error" } else { "warning" }, "code": p.code,
                   "path": p.path, "message": p.message})
        })
        .collect();
    json!({"verdict": c.verdict().as_str(), "errors": c.errors(), "warnings": c.warnings(),
           "rules": c.rules, "checked_at": c.checked_at, "by": c.by, "problems": problems,
           "omitted": c.omitted})
}

/// `k=v k=v`.
pub fn labels_line(labels: &Labels) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses `KEY=VALUE` arguments (the rules are checked by the store).
pub fn parse_labels(args: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for a in args {
        let (k, v) = a
            .split_once('=')
            .with_context(|| format!("label {a:?}: expected KEY=VALUE"))?;
        format::release::check_label_key(k).map_err(anyhow::Error::msg)?;
        format::release::check_label_value(k, v).map_err(anyhow::Error::msg)?;
        out.retain(|(key, _)| key != k);
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// `modelcas label REV [KEY=VALUE…] [--remove KEY…]`: sets, removes, then lists.
pub fn label(
    ctx: &Ctx,
    spec: &str,
    set: &[String],
    remove: &[String],
    json: bool,
) -> Result<ExitCode> {
    let labels = parse_labels(set)?;
    for k in remove {
        format::release::check_label_key(k).map_err(anyhow::Error::msg)?;
    }
    let store = ctx.open()?;
    let (repo, commit) = resolve(&store, spec)?;
    store.update_labels(&repo, &commit, &labels, remove, "label")?;
    let now = store.labels(&repo, &commit)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"repo": repo.to_string(), "commit": commit.to_hex(), "labels": now})
            )?
        );
    } else if now.is_empty() {
        println!("{repo}@{commit}: no labels");
    } else {
        for (k, v) in &now {
            println!("{k}={v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The current check record of a stored revision, for display (a read failure shows as
/// none).
pub fn current(store: &Store, manifest: &format::manifest::Manifest) -> Option<CheckObject> {
    store.current_check(manifest).ok().flatten()
}

/// The line after a stored revision (ingest, pull, import, sync): its check, the refs held.
pub fn print_outcome(
    repo: &format::RepoId,
    commit: &format::CommitId,
    check: Option<&CheckObject>,
    refs_held: &[String],
) {
    match check {
        Some(c) if c.verdict() == Verdict::Passed => {}
        Some(c) => {
            println!("  release check: {}", c.summary());
            for p in c.problems.iter().take(5) {
                let sev = if p.is_error() { "error" } else { "warning" };
                println!("    {sev:<8} {}", p.message);
            }
            if c.problems.len() > 5 {
                println!(
                    "    … {} more: modelcas check {repo}@{commit}",
                    c.problems.len() - 5
                );
            }
        }
        None => println!("  release check: not made (modelcas check {repo}@{commit})"),
    }
    if !refs_held.is_empty() {
        println!(
            "  refs held back (the release check did not pass; --force moves them): {}",
            refs_held.join(", ")
        );
    }
}

/// `release check: …` and one line per problem (ls, verify).
pub fn print_record(repo: &format::RepoId, commit: &format::CommitId, check: Option<&CheckObject>) {
    let Some(c) = check else {
        println!("release check: not checked (run modelcas check {repo}@{commit})");
        return;
    };
    println!(
        "release check: {} (rules {}, {} by {})",
        c.summary(),
        c.rules,
        crate::output::utc(c.checked_at),
        c.by
    );
    for p in &c.problems {
        let sev = if p.is_error() { "error" } else { "warning" };
        println!("  {sev:<8} {}", p.message);
    }
}
