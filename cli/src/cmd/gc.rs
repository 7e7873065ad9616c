//! `modelcas gc`, `rm`, `pin`, `unpin` and `fsck`: retention and store maintenance.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use format::RepoId;
use store::gc::{GcOptions, GcReport};

use crate::args::GcArgs;
use crate::config::Config;
use crate::ctx::Ctx;
use crate::output::{bytes, utc};

/// Exit status when another gc holds the lock.
pub const EXIT_LOCKED: u8 = 3;

/// `modelcas gc`.
pub fn gc(ctx: &Ctx, config: &Config, args: &GcArgs) -> Result<ExitCode> {
    let opts = crate::config::gc_settings(config)?.options(&args.flags())?;
    let store = ctx.open_plain()?;
    let cache = ctx.try_index(&store);
    let warn = |w: String| tracing::warn!("{w}");
    let started = repo::clock::now_secs();
    let report = match store::gc::run(&store, cache, &opts, &warn) {
        Ok(r) => r,
        Err(e @ repo::StoreError::LockHeld { .. }) => {
            eprintln!("modelcas: error: {e}");
            return Ok(ExitCode::from(EXIT_LOCKED));
        }
        Err(e) => return Err(e.into()),
    };
    tracing::info!(
        expired = report.expired.len(),
        packs_deleted = report.packs_deleted,
        bytes_reclaimed = report.bytes_reclaimed,
        bytes_stored = report.bytes_stored,
        duration_ms = report.duration_ms,
        dry_run = report.dry_run,
        "gc finished"
    );
    if !report.dry_run {
        let summary = format!(
            "{} revisions expired, {} kept; {} packs deleted ({} reclaimed), {} condemned; {} stored in {} packs",
            report.expired.len(),
            report.revisions_kept,
            report.packs_deleted,
            bytes(report.bytes_reclaimed),
            report.packs_condemned,
            bytes(report.bytes_stored),
            report.packs_stored
        );
        crate::ctx::record_run(&store, "gc", started, true, &summary);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &opts);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &GcReport, opts: &GcOptions) {
    let would = if r.dry_run { "would be " } else { "" };
    if r.dry_run {
        println!("dry run: nothing changed");
    }
    println!(
        "revisions: {} kept in {} repositories, {} {would}expired",
        r.revisions_kept,
        r.repos,
        r.expired.len()
    );
    for e in &r.expired {
        println!(
            "  {}@{} (ingested {}, {})",
            e.repo,
            e.commit,
            utc(e.ingested_at),
            bytes(e.bytes)
        );
    }
    for e in &r.restored {
        println!(
            "  kept {}@{}: a ref or pin appeared while it expired",
            e.repo, e.commit
        );
    }
    println!(
        "packs: {} {would}deleted ({} reclaimed, {} chunks), {} {would}condemned ({}), {} {would}rewritten ({} -> {} written, {} chunks copied), {} rescued",
        r.packs_deleted,
        bytes(r.bytes_reclaimed),
        r.chunks_deleted,
        r.packs_condemned,
        bytes(r.bytes_condemned),
        r.packs_rewritten,
        bytes(r.bytes_rewritten),
        bytes(r.rewrite_bytes_written),
        r.chunks_copied,
        r.packs_rescued
    );
    if r.forwards + r.forwards_written + r.forwards_deleted > 0 {
        println!(
            "forwarding records: {} found, {} written, {} deleted",
            r.forwards, r.forwards_written, r.forwards_deleted
        );
    }
    if r.packs_waiting > 0 {
        println!(
            "waiting: {} packs ({}) condemned less than {}s ago or held by {} running ingests",
            r.packs_waiting,
            bytes(r.bytes_waiting),
            opts.grace.as_secs(),
            r.packs_waiting_on_ingest
        );
    }
    if r.temporaries_removed + r.stale_locks_removed > 0 {
        println!(
            "removed {} leftover temporaries and {} stale locks",
            r.temporaries_removed, r.stale_locks_removed
        );
    }
    println!(
        "stored: {} packs, {} (live chunk data {})",
        r.packs_stored,
        bytes(r.bytes_stored),
        bytes(r.live_bytes)
    );
    let q = &r.requests;
    println!(
        "requests: {} list, {} get, {} ranged get, {} put, {} delete; {} read, {} written; {} manifests fetched, {} from cache; {:.1}s",
        q.list,
        q.get,
        q.get_range,
        q.put,
        q.delete,
        bytes(q.bytes_read),
        bytes(q.bytes_written),
        r.manifests_fetched,
        r.manifests_cached,
        r.duration_ms as f64 / 1000.0
    );
}

/// `modelcas rm`.
pub fn rm(ctx: &Ctx, spec: &str, force: bool) -> Result<ExitCode> {
    let store = ctx.open_plain()?;
    let (repo, rev) = format::names::parse_repo_rev(spec)?;
    if store.refs(&repo)?.contains_key(&rev) {
        let commit = store.delete_ref(&repo, &rev)?;
        println!("deleted ref {repo}@{rev} (was {commit})");
        return Ok(ExitCode::SUCCESS);
    }
    let commit = store.resolve(&repo, &rev)?;
    let refs = store.remove_commit(&repo, &commit, force)?;
    for r in refs {
        println!("deleted ref {repo}@{r}");
    }
    println!("removed {repo}@{commit}; gc reclaims its data");
    Ok(ExitCode::SUCCESS)
}

/// `modelcas ref ORG/NAME NAME REV`.
pub fn set_ref(ctx: &Ctx, repo: &str, name: &str, rev: &str) -> Result<ExitCode> {
    let store = ctx.open_plain()?;
    let repo = RepoId::parse(repo)?;
    let commit = store.resolve(&repo, rev)?;
    let old = store.refs(&repo)?.get(name).copied();
    store.set_ref(&repo, name, &commit)?;
    match old {
        Some(o) if o != commit => println!("{repo}@{name}: {o} -> {commit}"),
        Some(_) => println!("{repo}@{name} already at {commit}"),
        None => println!("{repo}@{name} -> {commit} (new)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `modelcas pin` / `unpin`.
pub fn pin(ctx: &Ctx, spec: &str, pin: bool) -> Result<ExitCode> {
    let store = ctx.open_plain()?;
    let (repo, commit) = crate::ctx::resolve(&store, spec)?;
    if pin {
        if store.pin(&repo, &commit)? {
            println!("pinned {repo}@{commit}");
        } else {
            println!("{repo}@{commit} was already pinned");
        }
    } else {
        store.unpin(&repo, &commit)?;
        println!("unpinned {repo}@{commit}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `modelcas fsck`.
pub fn fsck(
    ctx: &Ctx,
    config: &Config,
    read_data: bool,
    grace: Option<Duration>,
    json: bool,
) -> Result<ExitCode> {
    let grace = match grace {
        Some(g) => g,
        None => crate::config::gc_grace(&config.gc)?.unwrap_or(store::gc::DEFAULT_GRACE),
    };
    let store = ctx.open_plain()?;
    let report = store::fsck::run(&store, &store::fsck::FsckOptions { read_data, grace })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} repositories, {} revisions, {} refs, {} pins; {} packs ({}), {} chunk references checked",
            report.repos,
            report.revisions,
            report.refs,
            report.pins,
            report.packs,
            bytes(report.pack_bytes),
            report.chunk_refs
        );
        if read_data {
            println!(
                "read {} and hashed {} chunks",
                bytes(report.bytes_hashed),
                report.chunks_hashed
            );
        }
        for n in &report.notes {
            println!("note: {n}");
        }
        for p in &report.problems {
            println!("problem: {p}");
        }
        if report.problem_count > report.problems.len() {
            println!(
                "... {} more problems",
                report.problem_count - report.problems.len()
            );
        }
    }
    if report.is_clean() {
        if !json {
            println!("no problems found");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "modelcas: error: fsck found {} problems",
            report.problem_count
        );
        Ok(ExitCode::from(1))
    }
}
