//! The metrics the binary exposes, pinned: dashboards and alerts depend on the names, so
//! they change only on purpose. For each output — the mount's `--metrics-listen` page,
//! serve's `/metrics` (of a pull-through mirror, so that the upstream families have
//! samples), and the `--metrics-file` of ingest, of gc and of a command whose store fails
//! (Prometheus text 0.0.4) — every
//! family's name, type, unit, help text and label names, and each page's content type, are
//! compared with `tests/metrics_exposition.txt`. A deliberate change edits that file
//! (`MODELCAS_BLESS=1` rewrites it from the outputs) and docs/OPERATIONS.md.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::mount::Mount;
use common::{ingest_rev, series, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// The golden list, beside this file.
fn golden_path() -> std::path::PathBuf {
    common::repo_root().join("tests/metrics_exposition.txt")
}

/// One family as an output shows it.
#[derive(Default)]
struct Family {
    kind: Option<String>,
    unit: Option<String>,
    help: Option<String>,
    /// Label names of its samples; `None`: the output has no sample of it.
    labels: Option<BTreeSet<String>>,
    /// A histogram's bucket bounds (`le`), in the order shown.
    buckets: Vec<String>,
}

/// Sample-name suffixes that belong to a family of the name without them.
const SUFFIXES: [&str; 6] = ["", "_total", "_bucket", "_sum", "_count", "_created"];

/// The families of an exposition (OpenMetrics or Prometheus text), by name.
fn families(page: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in page.lines().filter(|l| !l.is_empty()) {
        if let Some(meta) = line.strip_prefix("# ") {
            if meta == "EOF" {
                continue;
            }
            let mut parts = meta.splitn(3, ' ');
            let (what, name, rest) = (
                parts.next().unwrap(),
                parts.next().unwrap_or_else(|| panic!("bad line {line:?}")),
                parts.next().unwrap_or("").to_string(),
            );
            let f = out.entry(name.to_string()).or_default();
            let slot = match what {
                "HELP" => &mut f.help,
                "TYPE" => &mut f.kind,
                "UNIT" => &mut f.unit,
                _ => panic!("unknown comment {line:?}"),
            };
            assert!(slot.is_none(), "{what} twice for {name}");
            *slot = Some(rest);
            continue;
        }
        let (name, labels) = sample(line);
        let family = SUFFIXES
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| out.contains_key(*f))
            .unwrap_or_else(|| panic!("sample of no declared family: {line:?}"))
            .to_string();
        let f = out.get_mut(&family).unwrap();
        for (k, v) in labels {
            if k == "le" && !f.buckets.contains(&v) {
                f.buckets.push(v);
            }
            f.labels.get_or_insert_with(BTreeSet::new).insert(k);
        }
        f.labels.get_or_insert_with(BTreeSet::new);
    }
    for (name, f) in &out {
        assert!(
            f.kind.is_some() && f.help.is_some(),
            "{name} lacks TYPE or HELP"
        );
    }
    out
}

/// A sample line's metric name and labels (name, value as written).
fn sample(line: &str) -> (&str, Vec<(String, String)>) {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..end];
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut rest = &line[end + 1..];
        while !rest.starts_with('}') {
            let eq = rest
                .find("=\"")
                .unwrap_or_else(|| panic!("bad labels {line:?}"));
            let key = rest[..eq].to_string();
            // The quoted value (backslash escapes its quote and itself).
            let value = &rest[eq + 2..];
            let mut close = None;
            let mut escaped = false;
            for (i, c) in value.char_indices() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        close = Some(i);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            let close = close.unwrap_or_else(|| panic!("unterminated label {line:?}"));
            labels.push((key, value[..close].to_string()));
            rest = value[close + 1..].trim_start_matches(',');
        }
    }
    (name, labels)
}

/// The golden section of one output: its content type (HTTP outputs) and one line per family.
fn section(title: &str, content_type: Option<&str>, page: &str) -> String {
    let mut s = format!("[{title}]\n");
    if let Some(ct) = content_type {
        s.push_str(&format!("content-type: {ct}\n"));
    }
    for (name, f) in families(page) {
        let labels = match &f.labels {
            None => "(no samples)".to_string(),
            Some(l) => format!("{{{}}}", l.iter().cloned().collect::<Vec<_>>().join(",")),
        };
        s.push_str(&format!(
            "{name} | {} | {} | {labels} | {}\n",
            f.kind.unwrap(),
            f.unit.as_deref().unwrap_or("-"),
            f.help.unwrap(),
        ));
        if !f.buckets.is_empty() {
            s.push_str(&format!("  buckets: {}\n", f.buckets.join(" ")));
        }
    }
    s.push('\n');
    s
}

/// A plain HTTP/1.0 GET: (status, content type, body).
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response head");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ct = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ct, body.to_string())
}

/// The mount's page after a read, and the metrics files of an ingest and a gc.
fn mount_and_batch_jobs() -> String {
    let env = Env::new();
    let ingest_file = env.path("ingest.prom");
    let commit = series().commit("r1");
    env.ingest(
        &series().plain("r1"),
        &[
            "--repo",
            REPO,
            "--revision",
            &commit,
            "--ref",
            "main",
            "--metrics-file",
            ingest_file.to_str().unwrap(),
        ],
    );
    let addr = common::local_addr();
    let m = Mount::start(&env, &["--metrics-listen", &addr]);
    let (name, sha) = series().files("r1").swap_remove(0);
    assert_eq!(
        common::sha256_file(&m.p(&format!("{REPO}/main/{name}"))),
        sha
    );
    let (status, ct, page) = get(&addr, "/metrics");
    assert_eq!(status, 200, "{page}");
    drop(m);
    let gc_file = env.path("gc.prom");
    env.ok(&["--metrics-file", gc_file.to_str().unwrap(), "gc"]);
    let mut out = section("mount --metrics-listen", Some(&ct), &page);
    let ingest = std::fs::read_to_string(&ingest_file).unwrap();
    out.push_str(&section("ingest --metrics-file", None, &ingest));
    let gc = std::fs::read_to_string(&gc_file).unwrap();
    out.push_str(&section("gc --metrics-file", None, &gc));
    out.push_str(&failing_store(&env));
    out
}

/// The metrics file of a command whose object store fails (its directory is a file), so
/// that the error families have samples.
fn failing_store(env: &Env) -> String {
    let not_a_dir = env.path("not-a-directory");
    std::fs::write(&not_a_dir, b"").unwrap();
    let file = env.path("failed.prom");
    let out = env
        .cmd()
        .env("MODELCAS_STORE", &not_a_dir)
        .args(["--metrics-file", file.to_str().unwrap(), "ls"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "ls of a store that is a file succeeded"
    );
    let page = std::fs::read_to_string(&file).unwrap();
    assert!(page.contains("modelcas_backend_errors_total{"), "{page}");
    section("ls of a failing store --metrics-file", None, &page)
}

/// The `/metrics` page of a mirror that pulled a revision, served it again, and then
/// failed to reach its upstream.
fn serve_mirror() -> String {
    let a_env = Env::new();
    ingest_rev(&a_env, "r1", &["main"]);
    let a = Served::start(&a_env, &[]);
    let m_env = Env::new();
    let m = Served::start(&m_env, &["--upstream", &format!("http://{}", a.addr)]);
    let (name, _) = series().files("r1").swap_remove(0);
    for _ in 0..2 {
        let (status, _, body) = get(&m.addr, &format!("/{REPO}/resolve/main/{name}"));
        assert_eq!(status, 200, "{body}");
    }
    drop(a);
    let (status, _, body) = get(&m.addr, &format!("/api/models/{REPO}/revision/r2"));
    assert_eq!(status, 502, "{body}");
    let (status, ct, page) = get(&m.addr, "/metrics");
    assert_eq!(status, 200, "{page}");
    section("serve --upstream /metrics", Some(&ct), &page)
}

#[test]
fn every_output_exposes_the_pinned_families() {
    let got = mount_and_batch_jobs() + &serve_mirror();
    if std::env::var_os("MODELCAS_BLESS").is_some() {
        std::fs::write(golden_path(), &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(golden_path()).unwrap();
    if got != want {
        let (g, w): (BTreeSet<&str>, BTreeSet<&str>) =
            (got.lines().collect(), want.lines().collect());
        panic!(
            "the metrics exposition changed (dashboards depend on it).\nmissing or changed:\n{}\nnew or changed:\n{}\nwhole output:\n{got}",
            w.difference(&g).copied().collect::<Vec<_>>().join("\n"),
            g.difference(&w).copied().collect::<Vec<_>>().join("\n"),
        );
    }
}

/// The parser itself: families by suffix, label names, escaped values, no samples.
#[test]
fn the_parser_reads_families_labels_and_units() {
    let page = "# HELP x_seconds Latency.\n# TYPE x_seconds histogram\n# UNIT x_seconds seconds\n\
        x_seconds_bucket{le=\"0.1\"} 1\nx_seconds_sum 0.1\nx_seconds_count 1\n\
        # HELP c Count.\n# TYPE c counter\nc_total{op=\"a\\\",b\",kind=\"z\"} 2\n\
        # HELP g Gauge.\n# TYPE g gauge\n# EOF\n";
    let f = families(page);
    assert_eq!(f.len(), 3);
    let labels = |n: &str| {
        f[n].labels
            .clone()
            .map(|l| l.into_iter().collect::<Vec<_>>())
    };
    assert_eq!(labels("x_seconds"), Some(vec!["le".to_string()]));
    assert_eq!(f["x_seconds"].buckets, ["0.1"]);
    assert_eq!(f["x_seconds"].unit.as_deref(), Some("seconds"));
    assert_eq!(
        labels("c"),
        Some(vec!["kind".to_string(), "op".to_string()])
    );
    assert_eq!(labels("g"), None);
}
