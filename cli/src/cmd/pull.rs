//! `modelcas pull ORG/NAME[@REV]`: a revision from an upstream Hub into the store.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use format::RepoId;
use hubclient::{HubClient, HubOptions};
use mirror::{PullOptions, PullReport};
use repo::{CreateOptions, Store};

use crate::args::PullArgs;
use crate::ctx::Ctx;
use crate::output::bytes;
use crate::progress::Bar;

pub fn run(ctx: &Ctx, a: &PullArgs) -> Result<ExitCode> {
    let (repo, revision) = match a.target.split_once('@') {
        Some((r, rev)) if !rev.is_empty() => (r, rev.to_string()),
        Some(_) => bail!("{}: empty revision after @", a.target),
        None => (a.target.as_str(), "main".to_string()),
    };
    let jobs = a.jobs.unwrap_or(4);
    if jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let opts = PullOptions {
        repo: RepoId::parse(repo)?,
        revision,
        include: a.include.clone(),
        exclude: a.exclude.clone(),
        refs: a.refs.clone(),
        jobs,
        slots: None,
        hold_failing_refs: false,
    };
    let client = HubClient::new(HubOptions::from_env(
        a.endpoint.as_deref(),
        a.token.as_deref(),
    ))
    .context("--endpoint")?;
    let store = Store::open_or_create(ctx.backend()?, CreateOptions::default())?;
    let index = ctx.index(&store)?;
    let bar = Bar::new(ctx.quiet || a.json);
    let report = mirror::pull(&store, &index, &client, &opts, &bar)
        .with_context(|| format!("pull {} from {}", a.target, client.endpoint()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &PullReport) {
    let state = if r.new_revision {
        "stored"
    } else {
        "already stored"
    };
    let refs = if r.refs.is_empty() {
        String::new()
    } else {
        format!(" [{}]", r.refs.join(", "))
    };
    let part = if r.partial {
        " (partial: a later pull of the rest, or the mirror, completes it)"
    } else {
        ""
    };
    println!(
        "{state} {}@{}{refs}: {} files, {}{part}",
        r.repo,
        r.commit,
        r.files,
        bytes(r.bytes)
    );
    if r.check.verdict != "passed" {
        let counts = match r.check.verdict {
            "failed" => format!(
                "FAILED ({} errors, {} warnings)",
                r.check.errors, r.check.warnings
            ),
            "warnings" => format!("passed with {} warning(s)", r.check.warnings),
            other => other.to_string(),
        };
        println!(
            "  release check: {counts}: modelcas check {}@{}",
            r.repo, r.commit
        );
        if !r.refs_held.is_empty() {
            println!("  refs held back: {}", r.refs_held.join(", "));
        }
        for p in r.check.problems.iter().take(5) {
            println!("    {p}");
        }
    }
    println!(
        "downloaded {} in {} files ({} read from the store, {} retries); {} of new chunks, wrote {}",
        bytes(r.bytes_downloaded),
        r.files_downloaded,
        r.files_from_store,
        r.retries,
        bytes(r.bytes_stored_new),
        bytes(r.pack_bytes_written)
    );
}
