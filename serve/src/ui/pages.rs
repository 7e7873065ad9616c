//! The pages themselves: each a function from the facts to one HTML document, written
//! only through [`Html`] (data escaped, links built from encoded segments).

use std::time::Duration;

use super::ctx::Ctx;
use super::facts::{
    CheckFacts, Figures, LastRun, ReleaseVerdict, RepoDetail, RepoSummary, Result, StoreFacts,
    Verdict,
};
use super::html::{repo_href, Html};
use crate::upstream::recent::{self, Recent};
use crate::upstream::Policy;

const STYLE: &str = "<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#23303f;color:#fff;padding:.6em 1.2em}header a{color:#fff;margin-right:1.2em;text-decoration:none}
header b{margin-right:2em}main{padding:1em 1.2em}table{border-collapse:collapse;background:#fff;margin:.5em 0 1.5em}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#eef1f4}
.num{font-variant-numeric:tabular-nums;white-space:nowrap}time{white-space:nowrap}td.r{text-align:right}code,pre{font:13px ui-monospace,monospace}
pre{background:#fff;border:1px solid #ddd;padding:.6em;overflow:auto}.keep{color:#1a7f37}.expire{color:#b3261e;font-weight:600}
.muted,.never{color:#777}.tag{display:inline-block;background:#e7eefc;border-radius:3px;padding:0 .35em;margin:0 .2em .1em 0}
details ul{margin:.3em 0;padding-left:1.2em;max-width:48em}summary{cursor:pointer}
footer{color:#777;padding:1em 1.2em;font-size:13px}</style>";

/// The document around `body`.
fn document(title: &str, body: Html, now: u64) -> String {
    let mut h = Html::default();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>")
        .text(title)
        .raw(" · modelcas</title>")
        .raw(STYLE)
        .raw("</head><body><header><b>modelcas</b><a href=\"/\">Repositories</a>")
        .raw("<a href=\"/ui/mirror\">Mirror</a><a href=\"/ui/store\">Store</a></header><main>");
    let mut out = h.into_string();
    out.push_str(&body.into_string());
    let mut f = Html::default();
    f.raw("</main><footer>Read-only. Page made ");
    f.time(Some(now), now);
    f.raw(" (UTC on hover).</footer></body></html>");
    out.push_str(&f.into_string());
    out
}

/// A page that only says something.
pub fn message(title: &str, text: &str) -> String {
    let mut b = Html::default();
    b.elem("h1", &[], title);
    b.elem("p", &[], text);
    document(title, b, repo::clock::now_secs())
}

fn error_para(b: &mut Html, what: &str, e: &str) {
    b.raw("<p class=\"expire\">");
    b.text(&format!("{what}: {e}"));
    b.raw("</p>");
}

fn cell_bytes(b: &mut Html, n: u64) {
    b.raw("<td class=\"r\">");
    b.bytes(n);
    b.raw("</td>");
}

fn ratio(b: &mut Html, r: f64) {
    b.raw("<td class=\"r num\">");
    b.text(&format!("{r:.2}×"));
    b.raw("</td>");
}

fn tags(b: &mut Html, names: &[String]) {
    if names.is_empty() {
        b.raw("<span class=\"muted\">–</span>");
    }
    for n in names {
        b.elem("span", &[("class", "tag")], n);
    }
}

fn figure_cells(b: &mut Html, f: &Figures) {
    cell_bytes(b, f.logical_bytes);
    cell_bytes(b, f.unique_bytes);
    cell_bytes(b, f.compressed_bytes);
    ratio(b, f.dedup_ratio);
}

/// The repositories.
pub fn repos(list: Result<Vec<RepoSummary>>, policy: &Policy, now: u64) -> String {
    let mut b = Html::default();
    b.raw("<h1>Repositories</h1>");
    match list {
        Err(e) => error_para(&mut b, "Cannot list the repositories", &e),
        Ok(list) if list.is_empty() => {
            b.raw("<p>The store holds no repository yet: <code>modelcas ingest</code> or <code>modelcas pull</code> one.</p>");
        }
        Ok(list) => {
            b.raw("<table id=\"repos\"><thead><tr><th>Repository</th><th>Revisions</th><th>Refs</th>")
                .raw("<th title=\"every file of every revision\">Logical</th><th title=\"distinct chunks, uncompressed\">After dedup</th>")
                .raw("<th title=\"distinct chunks, compressed: what this repository alone costs in the bucket\">Stored</th>")
                .raw("<th>Dedup</th><th>Last used</th><th>Served</th>")
                .raw("<th title=\"refs naming a revision that failed its release check\">Failing refs</th></tr></thead><tbody>");
            for r in &list {
                b.raw("<tr data-repo=\"").text(&r.repo).raw("\"><td>");
                b.link(&repo_href(&r.repo), &r.repo);
                b.raw("</td><td class=\"r\">");
                b.num(r.revisions as u64);
                b.raw("</td><td>");
                tags(&mut b, &r.refs);
                b.raw("</td>");
                figure_cells(&mut b, &r.figures);
                b.raw("<td>");
                b.time(r.last_used, now);
                b.raw("</td><td>");
                b.text(if policy.allows(&r.repo) {
                    "yes"
                } else {
                    "no (not in the allow list)"
                });
                b.raw("</td>");
                failing_refs(&mut b, r.failing_refs);
                b.raw("</tr>");
            }
            b.raw("</tbody></table>");
        }
    }
    document("Repositories", b, now)
}

fn failing_refs(b: &mut Html, n: usize) {
    if n == 0 {
        b.raw("<td class=\"r muted\" data-failing-refs=\"0\">0</td>");
    } else {
        b.raw("<td class=\"r expire\" data-failing-refs=\"")
            .text(&n.to_string())
            .raw("\">");
        b.num(n as u64);
        b.raw("</td>");
    }
}

/// The release check cell: `ok`, `ok, N warnings`, `FAILED (N)` or `not checked`, the
/// problems in a `<details>` (no script).
fn release_check(b: &mut Html, c: &CheckFacts) {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let (class, summary) = match c.verdict {
        ReleaseVerdict::Passed => ("keep", "ok".to_string()),
        ReleaseVerdict::Warnings => (
            "keep",
            format!("ok, {} warning{}", c.warnings, plural(c.warnings)),
        ),
        ReleaseVerdict::Failed => ("expire", format!("FAILED ({})", c.errors)),
        ReleaseVerdict::NotChecked => ("muted", "not checked".to_string()),
    };
    b.raw("<td class=\"")
        .raw(class)
        .raw("\" data-check=\"")
        .text(c.verdict.as_str())
        .raw("\">");
    if c.problems.is_empty() {
        b.text(&summary);
    } else {
        b.raw("<details><summary>")
            .text(&summary)
            .raw("</summary><ul>");
        for p in &c.problems {
            b.elem("li", &[], p);
        }
        b.raw("</ul></details>");
    }
    b.raw("</td>");
}

/// The labels cell: `key=value` tags.
fn labels(b: &mut Html, labels: &std::collections::BTreeMap<String, String>) {
    let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    b.raw("<td class=\"labels\">");
    tags(b, &shown);
    b.raw("</td>");
}

fn verdict(b: &mut Html, v: &Verdict) {
    match v {
        Verdict::Keep(why) => {
            b.raw("<td class=\"keep\" data-verdict=\"keep\">kept: ");
            b.text(why);
        }
        Verdict::Expire => {
            b.raw("<td class=\"expire\" data-verdict=\"expire\">would expire");
        }
        Verdict::Unknown(why) => {
            b.raw("<td class=\"muted\" data-verdict=\"unknown\">");
            b.text(why);
        }
    }
    b.raw("</td>");
}

/// One repository.
pub fn repo(d: &RepoDetail, ctx: &Ctx<'_>, unused_for: Duration, host: &str, now: u64) -> String {
    let mut b = Html::default();
    b.elem("h1", &[], &d.repo);
    let repo_id = format::RepoId::parse(&d.repo).ok();
    let lock = repo_id.as_ref().and_then(|r| ctx.policy.lock_of(r));
    b.raw("<p>");
    b.text(&format!(
        "{} revisions. Retention policy: {}.",
        d.revisions.len(),
        d.policy
    ));
    if let Some(c) = lock {
        b.raw(" Locked to ").elem("code", &[], &c.to_hex());
        b.raw(" by <code>[serve.locks]</code>: every ref name serves it.");
    }
    if !ctx.policy.allows(&d.repo) {
        b.raw(" <b>Not served</b>: not in the allow list.");
    }
    b.raw("</p>");
    let shown = humantime::format_duration(unused_for).to_string();
    b.raw("<form method=\"get\"><label>What <code>modelcas gc --unused-for</code> ");
    b.void(
        "input",
        &[("name", "unused-for"), ("value", &shown), ("size", "8")],
    );
    b.raw(" would do:</label> <button>Show</button></form>");
    b.raw("<table id=\"revisions\"><thead><tr><th>Commit</th><th>Refs</th><th>Pinned</th><th>Locked</th>")
        .raw("<th>Ingested</th><th>Last used</th><th>Files</th><th>Size</th><th>gc (configured policy)</th><th>gc --unused-for ");
    b.text(&shown);
    b.raw("</th><th>Release check</th><th>Labels</th></tr></thead><tbody>");
    for r in &d.revisions {
        let hex = r.commit.to_hex();
        b.raw("<tr data-commit=\"").text(&hex).raw("\"><td>");
        b.elem("code", &[("title", &hex)], &hex[..12]);
        b.raw("</td><td>");
        tags(&mut b, &r.refs);
        b.raw("</td><td>");
        b.text(if r.pinned { "pinned" } else { "" });
        b.raw("</td><td>");
        b.text(if lock == Some(r.commit) { "locked" } else { "" });
        b.raw("</td><td>");
        b.time(Some(r.ingested_at), now);
        b.raw("</td><td>");
        b.time(r.last_used, now);
        b.raw("</td><td class=\"r\">");
        b.num(r.files as u64);
        b.raw("</td>");
        cell_bytes(&mut b, r.bytes);
        verdict(&mut b, &r.policy);
        verdict(&mut b, &r.unused_for);
        release_check(&mut b, &r.check);
        labels(&mut b, &r.labels);
        b.raw("</tr>");
    }
    b.raw("</tbody></table>");
    download(&mut b, d, host);
    document(&d.repo, b, now)
}

/// How to download a revision: the `HF_ENDPOINT` line and the mount path.
fn download(b: &mut Html, d: &RepoDetail, host: &str) {
    let rev = d
        .revisions
        .iter()
        .find(|r| r.refs.iter().any(|n| n == "main"))
        .map(|_| "main".to_string())
        .or_else(|| d.revisions.last().map(|r| r.commit.to_hex()))
        .unwrap_or_else(|| "main".into());
    b.raw("<h2>Download</h2><pre>");
    b.text(&format!(
        "HF_ENDPOINT=http://{host} hf download {} --revision {rev}\n",
        d.repo
    ));
    b.raw("</pre><p>From a mount (<code>modelcas mount /models</code>): ");
    let (org, name) = d.repo.split_once('/').unwrap_or((&d.repo, ""));
    b.elem("code", &[], &format!("/models/{org}/{name}/{rev}/"));
    b.raw(" (a ref name or a commit sha).</p>");
}

/// The mirror.
pub fn mirror(ctx: &Ctx<'_>, now: u64) -> String {
    let mut b = Html::default();
    b.raw("<h1>Mirror</h1>");
    match ctx.mirror {
        None => {
            b.raw("<p>Not a mirror: this <code>serve</code> has no <code>--upstream</code>; it answers from the store only.</p>");
        }
        Some((endpoint, ttl, _)) => {
            b.raw("<p>Upstream ");
            b.elem("code", &[("id", "upstream")], endpoint);
            b.text(&format!(
                "; a branch or tag name's commit is asked again after {}.",
                humantime::format_duration(ttl)
            ));
            b.raw("</p>");
        }
    }
    let p = ctx.policy;
    b.raw("<h2>Allow list</h2><p>");
    if p.allow.is_empty() {
        b.raw("Every repository is served (no <code>--allow</code>).");
    } else {
        tags(&mut b, &p.allow);
    }
    b.raw("</p>");
    if !p.upstream_repos.is_empty() {
        b.raw("<p>Looked up upstream though they exist inside (<code>upstream_repos</code>): ");
        tags(&mut b, &p.upstream_repos);
        b.raw("</p>");
    }
    b.raw("<h2>Locks</h2>");
    if p.locks.is_empty() {
        b.raw("<p>No repository is locked (<code>[serve.locks]</code>).</p>");
    } else {
        let mut locks: Vec<(String, String)> = p
            .locks
            .iter()
            .map(|(r, c)| (r.to_string(), c.to_hex()))
            .collect();
        locks.sort();
        b.raw("<table id=\"locks\"><tr><th>Repository</th><th>Every ref serves</th></tr>");
        for (r, c) in &locks {
            b.raw("<tr><td>");
            b.link(&repo_href(r), r);
            b.raw("</td><td>");
            b.elem("code", &[], c);
            b.raw("</td></tr>");
        }
        b.raw("</table>");
    }
    if let Some((_, _, recent)) = ctx.mirror {
        activity(&mut b, recent, now);
    }
    document("Mirror", b, now)
}

/// Recent pulls and upstream failures (this process, in memory).
fn activity(b: &mut Html, recent: &Recent, now: u64) {
    let (pulls, failures) = recent.snapshot();
    b.raw("<h2>Recent pulls</h2><p class=\"muted\">Since this serve started (the last ")
        .text(&recent::KEPT.to_string())
        .raw(").</p>");
    if pulls.is_empty() {
        b.raw("<p>None.</p>");
    } else {
        b.raw("<table id=\"pulls\"><tr><th>When</th><th>Revision</th><th>Result</th><th>Took</th></tr>");
        for p in &pulls {
            b.raw("<tr><td>");
            b.time(Some(p.at), now);
            b.raw("</td><td>");
            b.link(&repo_href(&p.repo), &format!("{}@{}", p.repo, p.commit));
            b.raw("</td>");
            match &p.result {
                Ok(n) => {
                    b.raw("<td class=\"keep\">pulled ");
                    b.bytes(*n);
                }
                Err(e) => {
                    b.raw("<td class=\"expire\">failed: ");
                    b.text(e);
                }
            }
            b.raw("</td><td class=\"r\">");
            b.text(&format!("{:.1} s", p.millis as f64 / 1000.0));
            b.raw("</td></tr>");
        }
        b.raw("</table>");
    }
    b.raw("<h2>Upstream errors</h2>");
    if failures.is_empty() {
        b.raw("<p>None since this serve started.</p>");
    } else {
        b.raw("<table id=\"failures\"><tr><th>When</th><th>Operation</th><th>Asked</th><th>Error</th></tr>");
        for f in &failures {
            b.raw("<tr><td>");
            b.time(Some(f.at), now);
            b.raw("</td><td>");
            b.text(f.op);
            b.raw("</td><td>");
            b.text(&f.what);
            b.raw("</td><td>");
            b.text(&f.error);
            b.raw("</td></tr>");
        }
        b.raw("</table>");
    }
}

fn row(b: &mut Html, label: &str, id: &'static str, f: impl FnOnce(&mut Html)) {
    b.raw("<tr><th>");
    b.text(label);
    b.raw("</th><td class=\"r\" id=\"").raw(id).raw("\">");
    f(b);
    b.raw("</td></tr>");
}

/// A recorded run: when it ended, how it went, what it did.
fn last_run(b: &mut Html, run: &std::result::Result<Option<LastRun>, String>, now: u64) {
    match run {
        Ok(None) => {
            b.raw("<span class=\"never\">never recorded</span>");
        }
        Err(e) => {
            b.raw("<span class=\"expire\">unreadable record: ");
            b.text(e);
            b.raw("</span>");
        }
        Ok(Some(r)) => {
            b.time(Some(r.finished_at), now);
            if r.ok {
                b.raw(" <span class=\"keep\" data-ok=\"true\">succeeded</span>");
            } else {
                b.raw(" <span class=\"expire\" data-ok=\"false\">had failures</span>");
            }
            b.text(&format!(
                " in {}: ",
                humantime::format_duration(Duration::from_secs(
                    r.finished_at.saturating_sub(r.started_at)
                ))
            ));
            b.elem("span", &[("class", "summary")], &r.summary);
        }
    }
}

/// The store.
pub fn store(facts: Result<StoreFacts>, now: u64) -> String {
    let mut b = Html::default();
    b.raw("<h1>Store</h1>");
    let s = match facts {
        Ok(s) => s,
        Err(e) => {
            error_para(&mut b, "Cannot read the store's figures", &e);
            return document("Store", b, now);
        }
    };
    b.raw("<p>");
    b.elem("code", &[("id", "location")], &s.location);
    b.raw("</p><table id=\"stats\">");
    let f = s.figures;
    row(&mut b, "Repositories", "repos", |b| b.num(s.repos as u64));
    row(&mut b, "Revisions", "commits", |b| {
        b.num(s.revisions as u64)
    });
    row(&mut b, "Files", "files", |b| b.num(f.files));
    row(
        &mut b,
        "Logical (every file of every revision)",
        "logical",
        |b| b.bytes(f.logical_bytes),
    );
    row(&mut b, "After dedup (distinct chunks)", "unique", |b| {
        b.bytes(f.unique_bytes)
    });
    row(&mut b, "Distinct chunks", "chunks", |b| {
        b.num(f.unique_chunks)
    });
    row(&mut b, "Stored (packs)", "stored", |b| {
        b.bytes(s.stored_bytes)
    });
    row(&mut b, "Packs", "packs", |b| b.num(s.packs));
    for (label, id, r) in [
        ("Dedup", "dedup", f.dedup_ratio),
        ("Compression", "compression", f.compression_ratio),
        ("Overall", "overall", s.total_ratio),
    ] {
        row(&mut b, label, id, |b| {
            b.text(&format!("{r:.2}×"));
        });
    }
    b.raw("</table><h2>Garbage collection</h2><table id=\"gc\">");
    row(
        &mut b,
        "Condemned packs (deleted after the grace period)",
        "condemned",
        |b| {
            b.num(s.condemned_packs);
            b.raw(", ");
            b.bytes(s.condemned_bytes);
        },
    );
    row(
        &mut b,
        "gc last wrote its condemned list",
        "gc-written",
        |b| b.time(s.gc_state_written_ms.map(|ms| ms / 1000), now),
    );
    row(
        &mut b,
        "modelcas gc --dry-run (configured policy) would expire",
        "would-expire",
        |b| match &s.would_expire {
            Ok((n, bytes)) => {
                b.num(*n as u64);
                b.raw(" revisions, ");
                b.bytes(*bytes);
            }
            Err(e) => {
                b.text(e);
            }
        },
    );
    for (command, run) in &s.runs {
        b.raw("<tr data-run=\"").text(command).raw("\"><th>Last ");
        b.elem("code", &[], &format!("modelcas {command}"));
        b.raw(" run</th><td>");
        last_run(&mut b, run, now);
        b.raw("</td></tr>");
    }
    b.raw("</table><p class=\"muted\">Runs are recorded by the machine that ran them, when they complete (a dry run or a refused run leaves no record).</p>");
    document("Store", b, now)
}
