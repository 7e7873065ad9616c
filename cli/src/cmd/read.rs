//! `modelcas checkout`, `cat` and `verify`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use read::file_reader::{self, FileReader};
use read::progress::NoProgress;
use serde_json::json;

use crate::ctx::{resolve, Ctx};
use crate::output::bytes;
use crate::progress::Bar;

pub fn checkout(ctx: &Ctx, spec: &str, dir: &Path) -> Result<ExitCode> {
    let store = ctx.open()?;
    let (repo, commit) = resolve(&store, spec)?;
    let m = store.manifest(&repo, &commit)?;
    let start = std::time::Instant::now();
    let r = read::checkout::checkout(&store, &m, dir, &Bar::new(ctx.quiet))?;
    record_use(&store, &repo, &commit, "checkout");
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    println!(
        "checked out {repo}@{commit} into {}: {} files, {} ({}/s)",
        dir.display(),
        r.files,
        bytes(r.bytes),
        bytes((r.bytes as f64 / secs) as u64)
    );
    Ok(ExitCode::SUCCESS)
}

pub fn cat(ctx: &Ctx, spec: &str, path: &str) -> Result<ExitCode> {
    let store = ctx.open()?;
    let (repo, commit) = resolve(&store, spec)?;
    let m = store.manifest(&repo, &commit)?;
    let f = m.file(path).ok_or_else(|| repo::StoreError::NoSuchFile {
        repo: repo.to_string(),
        commit: commit.to_hex(),
        path: path.to_string(),
    })?;
    // Stream through a buffer that is only flushed as the reader hands over verified
    // windows; the sha256 of the whole file is checked at the end (a mismatch after output
    // began is reported and the exit code is non-zero).
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    FileReader::new(&store, &m, f)?.copy_to(&mut out, &NoProgress)?;
    out.flush()?;
    record_use(&store, &repo, &commit, "cat");
    Ok(ExitCode::SUCCESS)
}

/// Records the revision's last use (for `gc --unused-for`); a failure is only a warning.
fn record_use(store: &repo::Store, repo: &format::RepoId, commit: &format::CommitId, by: &str) {
    if let Err(e) = repo::usage::record(store, repo, commit, by) {
        tracing::warn!("{repo}@{commit}: cannot record last use: {e}");
    }
}

pub fn verify(ctx: &Ctx, spec: &str, json: bool) -> Result<ExitCode> {
    let store = ctx.open()?;
    let (repo, commit) = resolve(&store, spec)?;
    let m = store.manifest(&repo, &commit)?;
    let r = file_reader::verify(&store, &m, &Bar::new(ctx.quiet || json));
    // The release check as recorded (the exit status stays about the bytes).
    let check = super::release::current(&store, &m);
    if json {
        let problems: Vec<_> = r
            .problems
            .iter()
            .map(|p| json!({"path": p.path, "error": p.error}))
            .collect();
        let v = json!({"repo": repo.to_string(), "commit": commit.to_hex(), "files": r.files, "bytes": r.bytes,
                       "chunks": r.chunks, "ok": r.problems.is_empty(), "problems": problems,
                       "release": super::release::check_json(check.as_ref())});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for p in &r.problems {
            eprintln!("BAD {}", p.error);
        }
        let verdict = if r.problems.is_empty() {
            "OK".to_string()
        } else {
            format!("FAILED ({} bad files)", r.problems.len())
        };
        println!(
            "{verdict} {repo}@{commit}: {} files, {} chunks, {} verified",
            r.files,
            r.chunks,
            bytes(r.bytes)
        );
        super::release::print_record(&repo, &commit, check.as_ref());
    }
    Ok(if r.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
