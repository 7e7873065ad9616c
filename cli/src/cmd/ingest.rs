//! `modelcas ingest`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use format::{CommitId, RepoId};
use read::progress::Progress;
use repo::{CreateOptions, Store};
use serde_json::json;
use store::ingest::{IngestOptions, IngestReport};
use store::source::{discover, DiscoverOptions};

use crate::ctx::Ctx;
use crate::output::bytes;
use crate::progress::Bar;

/// How to ingest and report: `--threads`, `--reread`, `--json`.
pub struct Flags {
    pub threads: Option<usize>,
    pub reread: bool,
    /// `--label KEY=VALUE`.
    pub labels: Vec<String>,
    pub json: bool,
}

pub fn run(
    ctx: &Ctx,
    path: &Path,
    repo: Option<String>,
    revision: Option<String>,
    refs: Vec<String>,
    Flags {
        threads,
        reread,
        labels,
        json,
    }: Flags,
) -> Result<ExitCode> {
    let labels = super::release::parse_labels(&labels)?;
    let opts = DiscoverOptions {
        repo: repo.as_deref().map(RepoId::parse).transpose()?,
        revision: revision.as_deref().map(CommitId::parse).transpose()?,
        refs,
    };
    if let Some(0) = threads {
        anyhow::bail!("--threads must be at least 1");
    }
    let mut found = discover(path, &opts)?;
    for s in &mut found.snapshots {
        s.labels = labels.clone();
    }
    let bar = Bar::new(ctx.quiet || json);
    for w in &found.warnings {
        bar.warn(w);
    }
    if found.snapshots.is_empty() {
        anyhow::bail!("{}: no snapshot to ingest", path.display());
    }
    let store = Store::open_or_create(ctx.backend()?, CreateOptions::default())?;
    let index = ctx.index(&store)?;
    let mut iopts = IngestOptions {
        reread,
        ..Default::default()
    };
    if let Some(settle) = repo::failpoint::settle_override() {
        iopts.settle = settle;
    }
    if let Some(t) = threads {
        iopts.threads = t;
        iopts.readers = t;
    }
    let started = std::time::Instant::now();
    let report = store::ingest::ingest(&store, &index, &found.snapshots, iopts, &bar)?;
    record(&report, started);
    if json {
        println!("{}", serde_json::to_string_pretty(&report_json(&report))?);
    } else {
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Records the ingest in the log (its metrics are recorded by `store::ingest`).
fn record(report: &IngestReport, started: std::time::Instant) {
    tracing::info!(
        snapshots = report.snapshots.len(),
        bytes_read = report.bytes_read,
        bytes_unchanged = report.bytes_unchanged,
        xet_bytes_reused = report.xet_bytes_reused,
        xet_bytes_reread = report.xet_bytes_reread,
        new_chunk_bytes = report.new_chunk_bytes,
        pack_bytes_written = report.pack_bytes_written,
        duration_ms = started.elapsed().as_millis() as u64,
        "ingest finished"
    );
}

/// The `--json` report.
fn report_json(report: &IngestReport) -> serde_json::Value {
    let snaps: Vec<_> = report
        .snapshots
        .iter()
        .map(|s| {
            json!({"repo": s.repo.to_string(), "commit": s.commit.to_hex(), "files": s.files,
                   "bytes": s.bytes, "new": s.new_manifest, "refs": s.refs,
                   "refs_held": s.refs_held,
                   "check": super::release::check_json(s.check.as_ref())})
        })
        .collect();
    json!({
        "snapshots": snaps, "files_read": report.files_read, "bytes_read": report.bytes_read,
        "files_unchanged": report.files_unchanged, "bytes_unchanged": report.bytes_unchanged,
        "xet_bytes_reused": report.xet_bytes_reused, "xet_bytes_reread": report.xet_bytes_reread,
        "chunks": report.chunks, "new_chunks": report.new_chunks, "new_chunk_bytes": report.new_chunk_bytes,
        "packs_written": report.packs_written, "pack_bytes_written": report.pack_bytes_written,
        "sync": {"packs": report.sync.packs, "learned": report.sync.learned,
                 "forgotten": report.sync.forgotten, "condemned": report.sync.condemned},
    })
}

/// The human report: one line per snapshot, one for the data.
fn print_report(report: &IngestReport) {
    for s in &report.snapshots {
        let refs = if s.refs.is_empty() {
            String::new()
        } else {
            format!(" [{}]", s.refs.join(", "))
        };
        let state = if s.new_manifest {
            "stored"
        } else {
            "unchanged"
        };
        println!(
            "{state} {}@{}{refs}: {} files, {}",
            s.repo,
            s.commit,
            s.files,
            bytes(s.bytes)
        );
        super::release::print_outcome(&s.repo, &s.commit, s.check.as_ref(), &s.refs_held);
    }
    let files = if report.files_unchanged == 0 {
        format!("{} files", report.files_read)
    } else {
        format!(
            "{} files ({} of them, {}, unchanged since an earlier read: taken from the index unread)",
            report.files_read,
            report.files_unchanged,
            bytes(report.bytes_unchanged)
        )
    };
    if report.pack_bytes_written == 0 {
        println!(
            "read {} in {files}: nothing new, 0 pack bytes written",
            bytes(report.bytes_read),
        );
    } else {
        println!(
            "read {} in {files}: {} of {} chunks new ({}), wrote {} in {} packs",
            bytes(report.bytes_read),
            report.new_chunks,
            report.chunks,
            bytes(report.new_chunk_bytes),
            bytes(report.pack_bytes_written),
            report.packs_written
        );
    }
}
