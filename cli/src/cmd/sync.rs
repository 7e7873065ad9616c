//! `modelcas sync LIST.toml`: every entry of a prefetch list pulled into the store
//! (`mirror::sync`); this module reads the list, prints the report and sets the exit
//! status (1 when any entry failed).

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use hubclient::{HubClient, HubOptions};
use mirror::{SyncList, SyncReport};
use repo::{CreateOptions, Store};

use crate::args::SyncArgs;
use crate::ctx::Ctx;
use crate::output::bytes;
use crate::progress::Bar;

pub fn run(ctx: &Ctx, a: &SyncArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.list)
        .with_context(|| format!("reading {}", a.list.display()))?;
    let list = SyncList::parse(&text).with_context(|| format!("{}", a.list.display()))?;
    if a.check {
        println!("{}: {} entries, ok", a.list.display(), list.entries.len());
        return Ok(ExitCode::SUCCESS);
    }
    let jobs = a.jobs.unwrap_or(4);
    if jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    let endpoint = a.endpoint.as_deref().or(list.endpoint.as_deref());
    let client = HubClient::new(HubOptions::from_env(endpoint, a.token.as_deref()))
        .with_context(|| format!("endpoint {}", hubclient::endpoint(endpoint)))?;
    let report = if a.dry_run {
        mirror::sync::plan(&ctx.open_plain()?, &client, &list)
    } else {
        let store = Store::open_or_create(ctx.backend()?, CreateOptions::default())?;
        let index = ctx.index(&store)?;
        let bar = Bar::new(ctx.quiet || a.json);
        let started = repo::clock::now_secs();
        let report = mirror::sync(&store, &index, &client, &list, jobs, a.force, &bar);
        let ok = report.failed == 0 && report.held_back == 0;
        crate::ctx::record_run(&store, "sync", started, ok, &summary(&report));
        report
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.failed > 0 || report.held_back > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_report(r: &SyncReport) {
    for e in &r.entries {
        let commit = e.commit.as_deref().unwrap_or("-");
        let refs = if e.refs_moved.is_empty() {
            String::new()
        } else {
            format!(" [{}]", e.refs_moved.join(", "))
        };
        match &e.error {
            Some(err) => println!("{:<10} {}@{}: {err}", e.status.as_str(), e.repo, e.revision),
            None => println!(
                "{:<10} {}@{} {commit}{refs}: {} files, {}, downloaded {}",
                e.status.as_str(),
                e.repo,
                e.revision,
                e.files,
                bytes(e.bytes),
                bytes(e.bytes_downloaded)
            ),
        }
    }
    println!("{}", summary(r));
}

/// The report's last line (also the store's run record, `runs/sync`).
fn summary(r: &SyncReport) -> String {
    let would = if r.dry_run { " (dry run)" } else { "" };
    let held = if r.held_back > 0 {
        format!(", {} held back", r.held_back)
    } else {
        String::new()
    };
    format!(
        "{} entries from {}{would}: {} pulled, {} refs moved, {} unchanged, {} failed{held}; downloaded {}",
        r.entries.len(),
        r.endpoint,
        r.pulled,
        r.refs_moved,
        r.unchanged,
        r.failed,
        bytes(r.bytes_downloaded)
    )
}
