//! `modelcas ls`: repositories; commits and refs of a repository; files of a revision.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use store::{RepoId, Store};

use super::Ctx;
use crate::output::{bytes, utc};

pub fn run(ctx: &Ctx, target: Option<&str>, json: bool) -> Result<ExitCode> {
    let store = ctx.open()?;
    match target {
        None => repos(&store, json)?,
        Some(t) if t.contains('@') => files(&store, t, json)?,
        Some(t) => commits(&store, t, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Every repository with its commit count and refs.
fn repos(store: &Store, json: bool) -> Result<()> {
    let mut out = Vec::new();
    for repo in store.repos()? {
        let commits = store.commits(&repo)?;
        let refs = store.refs(&repo)?;
        out.push(json!({"repo": repo.to_string(), "commits": commits.len(),
                        "commit_ids": commits.iter().map(|c| c.to_hex()).collect::<Vec<_>>(),
                        "refs": refs.iter().map(|(k, v)| (k.clone(), json!(v.to_hex()))).collect::<serde_json::Map<_, _>>()}));
        if !json {
            let names: Vec<&str> = refs.keys().map(|s| s.as_str()).collect();
            println!(
                "{repo}\t{} commits\trefs: {}",
                commits.len(),
                if names.is_empty() {
                    "-".into()
                } else {
                    names.join(", ")
                }
            );
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&json!({"repos": out}))?);
    }
    Ok(())
}

/// The files of one revision (`ORG/NAME@REV`).
fn files(store: &Store, t: &str, json: bool) -> Result<()> {
    let (repo, commit) = super::resolve(store, t)?;
    let m = store.manifest(&repo, &commit)?;
    if json {
        let files: Vec<_> = m
            .files
            .iter()
            .map(|f| json!({"path": f.path, "size": f.size, "sha256": f.sha256_hex(), "executable": f.executable}))
            .collect();
        let v = json!({"repo": repo.to_string(), "commit": commit.to_hex(), "ingested_at": m.ingested_at,
                       "bytes": m.total_size(), "files": files});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for f in &m.files {
            println!(
                "{:>12}  {}{}",
                f.size,
                f.path,
                if f.executable { " *" } else { "" }
            );
        }
        println!(
            "{} files, {} ({repo}@{commit})",
            m.files.len(),
            bytes(m.total_size())
        );
    }
    Ok(())
}

/// The commits of one repository, oldest first, with the refs naming each.
fn commits(store: &Store, t: &str, json: bool) -> Result<()> {
    let repo = RepoId::parse(t)?;
    let commits = store.commits(&repo)?;
    let refs = store.refs(&repo)?;
    if commits.is_empty() && refs.is_empty() {
        return Err(store::StoreError::UnknownRepo(repo.to_string()).into());
    }
    let mut rows = Vec::new();
    for c in &commits {
        let m = store.manifest(&repo, c)?;
        let names: Vec<String> = refs
            .iter()
            .filter(|(_, v)| *v == c)
            .map(|(k, _)| k.clone())
            .collect();
        rows.push((
            m.ingested_at,
            c.to_hex(),
            m.files.len(),
            m.total_size(),
            names,
        ));
    }
    rows.sort();
    if json {
        let commits: Vec<_> = rows
            .iter()
            .map(|(t, c, n, b, r)| json!({"commit": c, "ingested_at": t, "files": n, "bytes": b, "refs": r}))
            .collect();
        let refs: serde_json::Map<_, _> = refs
            .iter()
            .map(|(k, v)| (k.clone(), json!(v.to_hex())))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"repo": repo.to_string(), "refs": refs, "commits": commits})
            )?
        );
    } else {
        for (t, c, n, b, r) in rows {
            let r = if r.is_empty() {
                String::new()
            } else {
                format!("  [{}]", r.join(", "))
            };
            println!("{c}  {}  {n:>4} files  {:>10}{r}", utc(t), bytes(b));
        }
    }
    Ok(())
}
