//! `modelcas gc`, `rm`, `pin`, `unpin` and `fsck`: retention and store maintenance.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use format::RepoId;
use store::gc::retention::{check_unused_for, parse_duration, Policy};
use store::gc::{GcOptions, GcReport};

use super::Ctx;
pub use crate::args::GcArgs;
use crate::config::Config;
use crate::output::{bytes, utc};

/// Exit status when another gc holds the lock.
pub const EXIT_LOCKED: u8 = 3;

fn duration(what: &str, s: &str) -> Result<std::time::Duration> {
    parse_duration(s).with_context(|| what.to_string())
}

/// The gc options from the config file with the flags on top.
pub fn options(config: &Config, args: &GcArgs) -> Result<GcOptions> {
    let gc = &config.gc;
    let mut opts = GcOptions::default();
    let within = |s: &Option<String>, what: &str| -> Result<Option<std::time::Duration>> {
        s.as_deref().map(|v| duration(what, v)).transpose()
    };
    let flag_within = within(&args.keep_within, "--keep-within")?;
    let flag_unused = within(&args.unused_for, "--unused-for")?;
    if let Some(d) = flag_unused {
        check_unused_for("--unused-for", d)?;
    }
    opts.retention.default = Policy {
        keep_last: args.keep_last.or(gc.keep_last),
        keep_within: flag_within.or(within(&gc.keep_within, "config gc.keep_within")?),
        unused_for: flag_unused.or(within(&gc.unused_for, "config gc.unused_for")?),
    };
    for (name, p) in &gc.repos {
        let repo = RepoId::parse(name).with_context(|| format!("config gc.repos.{name:?}"))?;
        let what = |k: &str| format!("config gc.repos.\"{name}\".{k}");
        let policy = Policy {
            keep_last: args.keep_last.or(p.keep_last).or(gc.keep_last),
            keep_within: flag_within
                .or(within(&p.keep_within, &what("keep_within"))?)
                .or(opts.retention.default.keep_within),
            unused_for: flag_unused
                .or(within(&p.unused_for, &what("unused_for"))?)
                .or(opts.retention.default.unused_for),
        };
        opts.retention.repos.insert(repo, policy);
    }
    if let Some(g) = args.grace.as_ref().or(gc.grace.as_ref()) {
        opts.grace = duration("--grace", g)?;
    }
    if let Some(r) = args.rewrite_below.or(gc.rewrite_below) {
        if !(0.0..=1.0).contains(&r) {
            bail!("--rewrite-below {r}: must be between 0 and 1");
        }
        opts.rewrite_below = r;
    }
    opts.retention.check().context("config [gc]")?;
    opts.dry_run = args.dry_run;
    // serve's version locks protect their commits like pins.
    opts.protected = super::serve::locks(&config.serve.locks)
        .context("config [serve.locks]")?
        .into_iter()
        .collect();
    Ok(opts)
}

/// `modelcas gc`.
pub fn gc(ctx: &Ctx, config: &Config, args: &GcArgs) -> Result<ExitCode> {
    let opts = options(config, args)?;
    let store = ctx.open_plain()?;
    let cache = ctx.try_index(&store);
    let warn = |w: String| tracing::warn!("{w}");
    let started = super::now_secs();
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
        super::record_run(&store, "gc", started, true, &summary);
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
    let (repo, commit) = super::resolve(&store, spec)?;
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
    grace: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let grace = match grace.or(config.gc.grace.as_deref()) {
        Some(g) => duration("--grace", g)?,
        None => store::gc::DEFAULT_GRACE,
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
