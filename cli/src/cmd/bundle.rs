//! `modelcas export` and `modelcas import`: transfer bundles.

use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use format::{CommitId, RepoId};
use store::bundle::ExportSpec;

use crate::ctx::Ctx;
use crate::output::bytes;
use crate::progress::Bar;

/// Revisions listed in `--have-from`: `modelcas ls --json` output (`repos[].repo` and
/// `repos[].commit_ids`) or `modelcas ls ORG/NAME --json` output (`repo`, `commits[].commit`).
fn have_from(path: &Path) -> Result<Vec<(RepoId, CommitId)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--have-from {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--have-from {}: not JSON", path.display()))?;
    let mut out = Vec::new();
    let mut add = |repo: &str, commit: &str| -> Result<()> {
        out.push((RepoId::parse(repo)?, CommitId::parse(commit)?));
        Ok(())
    };
    if let Some(repos) = v["repos"].as_array() {
        for r in repos {
            let repo = r["repo"]
                .as_str()
                .context("--have-from: a repo without \"repo\"")?;
            let ids = r["commit_ids"].as_array().with_context(|| {
                format!("--have-from: {repo} has no \"commit_ids\" (write it with this version's `modelcas ls --json`)")
            })?;
            for c in ids {
                add(
                    repo,
                    c.as_str().context("--have-from: commit id not a string")?,
                )?;
            }
        }
    } else if let (Some(repo), Some(commits)) = (v["repo"].as_str(), v["commits"].as_array()) {
        for c in commits {
            add(
                repo,
                c["commit"]
                    .as_str()
                    .context("--have-from: commit without \"commit\"")?,
            )?;
        }
    } else {
        bail!(
            "--have-from {}: expected the output of `modelcas ls --json` or `modelcas ls ORG/NAME --json`",
            path.display()
        );
    }
    Ok(out)
}

pub fn export(
    ctx: &Ctx,
    revisions: &[String],
    output: &Path,
    (have, have_file, no_labels): (&[String], Option<&Path>, bool),
    json: bool,
) -> Result<ExitCode> {
    let store = ctx.open_plain()?;
    let mut spec = ExportSpec {
        no_labels,
        ..ExportSpec::default()
    };
    for r in revisions {
        let (repo, rev) = format::names::parse_repo_rev(r)?;
        let commit = store.resolve(&repo, &rev)?;
        let refs = if store.refs(&repo)?.contains_key(&rev) {
            vec![rev]
        } else {
            vec![]
        };
        spec.revisions.push((repo, commit, refs));
    }
    for h in have {
        spec.have.push(crate::ctx::resolve(&store, h)?);
    }
    if let Some(f) = have_file {
        spec.have.extend(have_from(f)?);
    }
    let to_stdout = output.as_os_str() == "-";
    let bar = Bar::new(ctx.quiet);
    let report = if to_stdout {
        let stdout = std::io::stdout();
        let mut w = BufWriter::with_capacity(1 << 20, stdout.lock());
        store::bundle::export(&store, &spec, &mut w, &bar)?
    } else {
        if output.exists() {
            bail!("{}: exists; not overwriting a bundle", output.display());
        }
        let tmp = output.with_extension("partial");
        let file = std::fs::File::create(&tmp).with_context(|| format!("{}", tmp.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let r = store::bundle::export(&store, &spec, &mut w, &bar);
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e.into());
            }
        };
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
            .with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, output).with_context(|| format!("{}", output.display()))?;
        r
    };
    for h in &report.have_unknown {
        tracing::warn!("--have {h}: not in this store; its chunks are sent anyway");
    }
    let mut err = std::io::stderr();
    if json {
        let text = serde_json::to_string_pretty(&report)?;
        if to_stdout {
            writeln!(err, "{text}")?;
        } else {
            println!("{text}");
        }
    } else {
        writeln!(
            err,
            "exported {} revisions and {} refs: {} chunks ({} uncompressed), {} left out, bundle {}",
            report.revisions,
            report.refs,
            report.chunks,
            bytes(report.chunk_raw_bytes),
            report.chunks_skipped,
            bytes(report.bytes)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn import(ctx: &Ctx, file: &Path, json: bool) -> Result<ExitCode> {
    let backend = ctx.backend()?;
    if backend.location().starts_with("s3://") {
        // The sha256 re-read waits on the network: read with more threads than cores.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(crate::ctx::REMOTE_READ_THREADS)
            .build_global();
    }
    let store = repo::Store::open_or_create(backend, repo::CreateOptions::default())?;
    let index = ctx.index(&store)?;
    let bar = Bar::new(ctx.quiet || json);
    let report = if file.as_os_str() == "-" {
        let stdin = std::io::stdin();
        let mut r = BufReader::with_capacity(1 << 20, stdin.lock());
        store::bundle::import(&store, &index, &mut r, &bar)?
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        store::bundle::import(&store, &index, &mut r, &bar)?
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for r in &report.revisions {
            println!("imported {r}");
        }
        for r in &report.refs {
            println!("ref {r}");
        }
        for f in &report.failing {
            println!("release check FAILED: {f}");
        }
        if report.labels > 0 {
            println!("{} release labels set", report.labels);
        }
        println!(
            "{} chunks in the bundle, {} new; wrote {} in {} packs; re-read and checked {}",
            report.chunks,
            report.new_chunks,
            bytes(report.pack_bytes_written),
            report.packs_written,
            bytes(report.bytes_verified)
        );
    }
    Ok(ExitCode::SUCCESS)
}
