//! `modelcas ls`: repositories; commits and refs of a repository; files of a revision.

use std::process::ExitCode;

use anyhow::Result;
use format::RepoId;
use repo::Store;
use serde_json::json;

use crate::ctx::Ctx;
use crate::output::{bytes, utc};

pub fn run(ctx: &Ctx, target: Option<&str>, json: bool, sha256sum: bool) -> Result<ExitCode> {
    if sha256sum && !target.is_some_and(|t| t.contains('@')) {
        anyhow::bail!("--sha256sum lists the files of one revision: give ORG/NAME@REV");
    }
    let store = ctx.open()?;
    match target {
        None => repos(&store, json)?,
        Some(t) if sha256sum => sums(&store, t)?,
        Some(t) if t.contains('@') => files(&store, t, json)?,
        Some(t) => commits(&store, t, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The files of one revision as `sha256sum` writes them: `HASH  PATH`, one a line, so that
/// `sha256sum -c` checks a checkout of the revision.
fn sums(store: &Store, t: &str) -> Result<()> {
    let (repo, commit) = crate::ctx::resolve(store, t)?;
    let m = store.manifest(&repo, &commit)?;
    let mut out = std::io::stdout().lock();
    for f in &m.files {
        use std::io::Write;
        writeln!(out, "{}", sha256sum_line(&f.sha256_hex(), &f.path))?;
    }
    Ok(())
}

/// One line as GNU `sha256sum` writes it: a name with a backslash or a newline is escaped
/// (`\\`, `\n`) and the line then starts with a backslash.
fn sha256sum_line(hex: &str, path: &str) -> String {
    if path.contains(['\\', '\n']) {
        let escaped = path.replace('\\', "\\\\").replace('\n', "\\n");
        format!("\\{hex}  {escaped}")
    } else {
        format!("{hex}  {path}")
    }
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
    let (repo, commit) = crate::ctx::resolve(store, t)?;
    let m = store.manifest(&repo, &commit)?;
    let check = super::release::current(store, &m);
    let labels = store.labels(&repo, &commit)?;
    if json {
        let files: Vec<_> = m
            .files
            .iter()
            .map(|f| json!({"path": f.path, "size": f.size, "sha256": f.sha256_hex(), "executable": f.executable}))
            .collect();
        let v = json!({"repo": repo.to_string(), "commit": commit.to_hex(), "ingested_at": m.ingested_at,
                       "bytes": m.total_size(), "files": files,
                       "check": super::release::check_json(check.as_ref()), "labels": labels});
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
        super::release::print_record(&repo, &commit, check.as_ref());
        if !labels.is_empty() {
            println!("labels: {}", super::release::labels_line(&labels));
        }
    }
    Ok(())
}

/// The commits of one repository, oldest first, with the refs naming each.
fn commits(store: &Store, t: &str, json: bool) -> Result<()> {
    let repo = RepoId::parse(t)?;
    let Some((refs, rows)) = store::listing::rows(store, &repo)? else {
        return Err(repo::StoreError::UnknownRepo(repo.to_string()).into());
    };
    if json {
        let refs: serde_json::Map<_, _> = refs
            .iter()
            .map(|(k, v)| (k.clone(), json!(v.to_hex())))
            .collect();
        let v = json!({"repo": repo.to_string(), "refs": refs, "commits": rows});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for r in rows {
            let names = if r.refs.is_empty() {
                String::new()
            } else {
                format!("  [{}]", r.refs.join(", "))
            };
            let used = r.last_used.map_or("never".to_string(), utc);
            let labels = if r.labels.is_empty() {
                String::new()
            } else {
                format!("  {}", super::release::labels_line(&r.labels))
            };
            println!(
                "{}  {}  {:>4} files  {:>10}  last used {used}  {}{names}{labels}",
                r.commit,
                utc(r.ingested_at),
                r.files,
                bytes(r.bytes),
                row_word(&r.check),
            );
        }
    }
    Ok(())
}

/// A listing's word for a row's check: `ok`, `ok, 1 warning`, `FAILED (2)`, `not checked`.
fn row_word(c: &store::listing::RowCheck) -> String {
    match c.verdict {
        "passed" => "ok".into(),
        "warnings" => format!(
            "ok, {} warning{}",
            c.warnings,
            if c.warnings == 1 { "" } else { "s" }
        ),
        "failed" => format!("FAILED ({})", c.errors),
        _ => "not checked".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::sha256sum_line;

    #[test]
    fn names_with_a_backslash_or_a_newline_are_escaped_as_sha256sum_does() {
        assert_eq!(sha256sum_line("ab", "a/b.json"), "ab  a/b.json");
        assert_eq!(sha256sum_line("ab", "a\\b"), "\\ab  a\\\\b");
        assert_eq!(sha256sum_line("ab", "a\nb"), "\\ab  a\\nb");
    }
}
