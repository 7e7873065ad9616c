//! `modelcas serve`: the Hub-compatible HTTP endpoint.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use hubserve::{Limits, Policy, UpstreamOptions};
use repo::{CreateOptions, Store};
use store::gc::retention::parse_duration;

use crate::args::{ServeArgs, ServeLimitArgs, UpstreamArgs, XetArgs};
use crate::config::ServeConfig;
use crate::ctx::Ctx;

/// Tokens accepted, the names some of them have (token → name), and the write scopes some
/// of them have (token → repository patterns).
type Tokens = (
    HashSet<String>,
    HashMap<String, String>,
    hubserve::uploads::WriteScopes,
);

/// Tokens from a file: one per line, `TOKEN [write=PATTERN[,PATTERN...]] [# NAME]` (see
/// [`token_and_name`] and [`token_and_scope`]); blank lines and `#` comments ignored.
fn tokens(path: &Path, flag: &str) -> Result<Tokens> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("{flag} {}", path.display()))?;
    let (mut set, mut names, mut scopes) = (HashSet::new(), HashMap::new(), HashMap::new());
    // A byte-order mark (an editor's) is not part of the first token.
    for (n, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (token, name) = token_and_name(line);
        let (token, scope) = token_and_scope(token)
            .with_context(|| format!("{flag} {} line {}", path.display(), n + 1))?;
        if let Some(name) = name {
            names.insert(token.to_string(), name.to_string());
        }
        if let Some(patterns) = scope {
            scopes.insert(token.to_string(), patterns);
        }
        set.insert(token.to_string());
    }
    if set.is_empty() {
        bail!("{flag} {}: no token in it", path.display());
    }
    Ok((set, names, scopes))
}

/// A token and its write scope: a last whitespace-separated field `write=PATTERN[,...]`
/// (`org/*`, `org/name`, `*`) lets the token write to the repositories it matches; without
/// one the token reads only. A token therefore cannot end with a field starting `write=`.
fn token_and_scope(token: &str) -> Result<(&str, Option<Vec<String>>)> {
    let Some((head, last)) = token.rsplit_once(char::is_whitespace) else {
        return Ok((token, None));
    };
    let Some(list) = last.strip_prefix("write=") else {
        return Ok((token, None));
    };
    let patterns: Vec<String> = list.split(',').map(str::to_string).collect();
    for p in &patterns {
        let ok = !p.is_empty()
            && (p == "*"
                || p.split_once('/')
                    .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty()));
        if !ok {
            bail!("write scope {p:?}: give repository patterns, `org/name`, `org/*` or `*`");
        }
    }
    Ok((head.trim_end(), Some(patterns)))
}

/// A token file line (trimmed, not a comment): the token, and its name when a `#` after
/// whitespace follows it (`hf_abc123  # CI runners`). Everything before that is the token,
/// spaces included, as in files written before names: a line without ` #` means what it
/// always meant.
fn token_and_name(line: &str) -> (&str, Option<&str>) {
    let cut = line
        .char_indices()
        .find(|&(i, c)| c == '#' && line[..i].ends_with(char::is_whitespace))
        .map(|(i, _)| i);
    match cut {
        Some(i) => {
            let name = line[i + 1..].trim();
            (line[..i].trim_end(), (!name.is_empty()).then_some(name))
        }
        None => (line, None),
    }
}

/// The connection limit and timeouts: flags (or environment) over `[serve]` over defaults.
pub fn limits(c: &ServeConfig, args: &ServeLimitArgs) -> Result<Limits> {
    let mut l = Limits::default();
    let dur =
        |flag: &Option<String>, file: &Option<String>, what: &str, default| -> Result<Duration> {
            match flag.as_ref().or(file.as_ref()) {
                None => Ok(default),
                Some(s) => {
                    let d = parse_duration(s).with_context(|| what.to_string())?;
                    if d.is_zero() {
                        bail!("{what} must be more than 0s");
                    }
                    Ok(d)
                }
            }
        };
    l.header_timeout = dur(
        &args.header_timeout,
        &c.header_timeout,
        "--header-timeout",
        l.header_timeout,
    )?;
    l.request_timeout = dur(
        &args.request_timeout,
        &c.request_timeout,
        "--request-timeout",
        l.request_timeout,
    )?;
    l.write_timeout = dur(
        &args.write_timeout,
        &c.write_timeout,
        "--write-timeout",
        l.write_timeout,
    )?;
    l.max_connections = args
        .max_connections
        .or(c.max_connections)
        .unwrap_or(l.max_connections);
    if l.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    Ok(l)
}

/// Xet downloads: flags (or environment) over `[serve]`; `None`: off.
pub fn xet(c: &ServeConfig, a: &XetArgs) -> Result<Option<hubserve::xet::XetOptions>> {
    if a.no_xet || c.xet == Some(false) {
        return Ok(None);
    }
    let ttl = |flag: &Option<String>, file: &Option<String>, what: &str| -> Result<Duration> {
        match flag.as_ref().or(file.as_ref()) {
            None => Ok(Duration::from_secs(3600)),
            Some(s) => {
                let d = parse_duration(s).with_context(|| what.to_string())?;
                if d < Duration::from_secs(1) {
                    bail!("{what} must be at least 1s");
                }
                Ok(d)
            }
        }
    };
    let secret_file = a.xet_secret_file.as_ref().or(c.xet_secret_file.as_ref());
    Ok(Some(hubserve::xet::XetOptions {
        secret: hubserve::xet::load_secret(secret_file.map(PathBuf::as_path))
            .map_err(|e| anyhow::anyhow!("--xet-secret-file {e}"))?,
        token_ttl: ttl(&a.xet_token_ttl, &c.xet_token_ttl, "--xet-token-ttl")?,
        url_ttl: ttl(&a.xet_url_ttl, &c.xet_url_ttl, "--xet-url-ttl")?,
        cas_url: a.xet_cas_url.clone().or(c.xet_cas_url.clone()),
    }))
}

/// Options of `modelcas serve`, resolved from flags, environment and `[serve]`.
pub struct Options {
    pub listen: String,
    pub token_file: Option<PathBuf>,
    pub node_token_file: Option<PathBuf>,
    pub node_api_open: bool,
    pub threads: usize,
    pub cache_mib: usize,
    pub fetch_threads: Option<usize>,
    pub limits: Limits,
    pub policy: Policy,
    pub upstream: Option<Mirror>,
    /// `--no-ui`: no pages.
    pub no_ui: bool,
    pub xet: Option<hubserve::xet::XetOptions>,
    /// Whether `--xet-secret-file` (or `[serve] xet_secret_file`) named the Xet key; else
    /// it is the one kept beside the index ([`super::xet_key::kept_secret`]).
    pub xet_secret_given: bool,
    pub uploads: UploadSettings,
}

/// Where and how uploads are taken (`--upload-dir`, `--upload-over-mirror`,
/// `--upload-hold-failing`).
pub struct UploadSettings {
    pub dir: Option<PathBuf>,
    pub over_mirror: bool,
    pub hold_failing: bool,
}

/// How long an uploaded object no commit took is kept in the spool.
const SPOOL_TTL: Duration = Duration::from_secs(24 * 3600);
/// Largest file an upload may declare.
const MAX_UPLOAD_FILE: u64 = 1 << 40;
/// Lifetime of an upload URL an LFS batch hands out.
const UPLOAD_URL_TTL: Duration = Duration::from_secs(3600);

/// The hub's uploads: on when some token of the token file has a write scope.
fn uploads(
    store: &Store,
    s: &UploadSettings,
    scopes: &hubserve::uploads::WriteScopes,
    index: &Arc<super::shared_index::SharedIndex>,
) -> Result<Option<hubserve::uploads::UploadOptions>> {
    if scopes.is_empty() {
        return Ok(None);
    }
    let dir = match &s.dir {
        Some(d) => d.clone(),
        None => publish::default_spool_dir(
            &dirs::cache_dir()
                .context("no cache directory for the upload spool; pass --upload-dir")?,
            &store.config().store_id,
        ),
    };
    let spool = publish::spool::Spool::open(&dir, SPOOL_TTL, MAX_UPLOAD_FILE)
        .with_context(|| format!("--upload-dir {}", dir.display()))?;
    let pruned = spool.prune();
    if pruned > 0 {
        tracing::info!(
            "upload spool {}: {pruned} stale files deleted",
            dir.display()
        );
    }
    let secret = hubserve::xet::load_secret(None).map_err(anyhow::Error::msg)?;
    let dedup_key = blake3::derive_key("modelcas serve xet dedup key v1", &secret);
    let publisher = publish::Publisher::new(store.clone(), spool)
        .hold_failing_refs(s.hold_failing)
        .with_global_dedup(dedup_key)
        .context("the upload spool's Xet chunk lists")?;
    Ok(Some(hubserve::uploads::UploadOptions {
        uploads: Arc::new(super::uploads::HubUploads::new(publisher, index.clone())),
        secret,
        url_ttl: UPLOAD_URL_TTL,
        regular_max: hubserve::uploads::REGULAR_MAX,
        over_mirror: s.over_mirror,
    }))
}

/// `--upstream` and its settings.
pub struct Mirror {
    pub url: String,
    pub token_file: Option<PathBuf>,
    pub ttl: Duration,
    pub jobs: usize,
    pub transport: super::upstream::Transport,
}

/// Default of `--upstream-ttl`: a moved branch is seen within a minute.
const UPSTREAM_TTL: Duration = Duration::from_secs(60);
/// Default of `--upstream-timeout`: a request waits on metadata, so not for long.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// The mirror's settings: flags (or environment) over `[serve]`.
fn mirror(c: &ServeConfig, a: &UpstreamArgs) -> Result<Option<Mirror>> {
    let Some(url) = a.upstream.clone().or(c.upstream.clone()) else {
        return Ok(None);
    };
    let ttl = match a.upstream_ttl.as_ref().or(c.upstream_ttl.as_ref()) {
        None => UPSTREAM_TTL,
        Some(s) => parse_duration(s).context("--upstream-ttl")?,
    };
    let jobs = a.upstream_jobs.or(c.upstream_jobs).unwrap_or(4);
    if jobs == 0 {
        bail!("--upstream-jobs must be at least 1");
    }
    Ok(Some(Mirror {
        url,
        token_file: a
            .upstream_token_file
            .clone()
            .or(c.upstream_token_file.clone()),
        ttl,
        jobs,
        transport: transport(c, a)?,
    }))
}

/// How the mirror talks to its upstream: redirect hosts, deadlines, listing caps.
fn transport(c: &ServeConfig, a: &UpstreamArgs) -> Result<super::upstream::Transport> {
    let mut t = super::upstream::Transport {
        redirect_hosts: if a.upstream_redirect_hosts.is_empty() {
            c.upstream_redirect_hosts.clone()
        } else {
            a.upstream_redirect_hosts.clone()
        },
        ..Default::default()
    };
    for h in &t.redirect_hosts {
        hubclient::url::OriginRule::parse(h)
            .map_err(anyhow::Error::msg)
            .context("--upstream-redirect-host")?;
    }
    t.timeout = match a.upstream_timeout.as_ref().or(c.upstream_timeout.as_ref()) {
        None => UPSTREAM_TIMEOUT,
        Some(s) => match parse_duration(s).context("--upstream-timeout")? {
            d if d.is_zero() => bail!("--upstream-timeout must be more than 0s"),
            d => d,
        },
    };
    if let Some(r) = a
        .upstream_min_rate
        .as_ref()
        .or(c.upstream_min_rate.as_ref())
    {
        t.min_rate =
            crate::ctx::parse_size(r).with_context(|| format!("--upstream-min-rate {r:?}"))?;
    }
    if let Some(n) = a.upstream_max_files.or(c.upstream_max_files) {
        if n == 0 {
            bail!("--upstream-max-files must be at least 1");
        }
        t.max_files = n;
    }
    Ok(t)
}

impl Options {
    /// The flags, with `[serve]` of the config file under them.
    pub fn new(ctx: &Ctx, a: ServeArgs) -> Result<Options> {
        let c = &ctx.config.serve;
        Ok(Options {
            listen: a
                .listen
                .or(c.listen.clone())
                .unwrap_or_else(|| "127.0.0.1:8080".into()),
            token_file: a.token_file.or(c.token_file.clone()),
            node_token_file: a.node_token_file.or(c.node_token_file.clone()),
            node_api_open: a.node_api_open || c.node_api_open == Some(true),
            threads: a.threads.or(c.threads).unwrap_or(16),
            cache_mib: a.cache_mib.or(c.cache_mib).unwrap_or(256),
            fetch_threads: a.fetch_threads.or(c.fetch_threads),
            limits: limits(c, &a.limits)?,
            policy: Policy {
                allow: if a.upstream.allow.is_empty() {
                    c.allow.clone()
                } else {
                    a.upstream.allow.clone()
                },
                locks: crate::config::locks(&c.locks)?,
                upstream_repos: c.upstream_repos.clone(),
                force_locks: a.force,
            },
            upstream: mirror(c, &a.upstream)?,
            no_ui: a.no_ui || c.ui == Some(false),
            xet: xet(c, &a.xet)?,
            xet_secret_given: a.xet.xet_secret_file.is_some() || c.xet_secret_file.is_some(),
            uploads: UploadSettings {
                dir: a.uploads.upload_dir.clone().or(c.upload_dir.clone()),
                over_mirror: a.uploads.upload_over_mirror || c.upload_over_mirror == Some(true),
                hold_failing: a.uploads.upload_hold_failing || c.upload_hold_failing == Some(true),
            },
        })
    }
}

/// The node tokens of `--node-token-file` (they read only: a `write=` scope is refused).
fn node_tokens(p: &Path) -> Result<HashSet<String>> {
    let (set, _, scopes) = tokens(p, "--node-token-file")?;
    if !scopes.is_empty() {
        bail!(
            "--node-token-file {}: node tokens read only (no write=)",
            p.display()
        );
    }
    Ok(set)
}

/// Who may read the store API (`--node-token-file`, `--node-api-open`).
fn node_access(o: &Options) -> Result<hubserve::nodes::NodeAccess> {
    let tokens = o.node_token_file.as_deref().map(node_tokens).transpose()?;
    if o.node_api_open {
        tracing::warn!(
            "--node-api-open: the store API (every byte of the store) answers without a token"
        );
    }
    Ok(hubserve::nodes::NodeAccess {
        tokens,
        open: o.node_api_open,
    })
}

/// The release check of each `[serve.locks]` commit the store holds (docs/design/
/// release-check.md §6): its record, computed and recorded first when absent or stale. A
/// failing one (or one whose check cannot be made) stops serve from starting, unless
/// `--force` (then one warning per lock). A commit not stored is judged when the mirror
/// fetches it (`serve/src/hub/release.rs`).
fn guard_locks(store: &Store, policy: &Policy) -> Result<()> {
    let mut locks: Vec<_> = policy.locks.iter().collect();
    locks.sort();
    for (repo, commit) in locks {
        let stored = store.find_repo(repo)?.unwrap_or_else(|| repo.clone());
        if !store.has_commit(&stored, commit)? {
            continue;
        }
        let manifest = store.manifest(&stored, commit)?;
        let why = match lock_check(store, &manifest)? {
            Some(c) if c.verdict().allows_protected_refs() => continue,
            Some(c) => c.errors_line(5),
            None => "the check could not be made: see the warning above".to_string(),
        };
        let entry = format!("[serve.locks] \"{repo}\" = \"{}\"", commit.to_hex());
        if policy.force_locks {
            tracing::warn!(
                "{entry}: this revision failed its release check ({why}); served (--force)"
            );
        } else {
            bail!(
                "{entry}: this revision failed its release check ({why}); fix the lock or \
                 start serve with --force"
            );
        }
    }
    Ok(())
}

/// The current release check record of a locked revision, as
/// [`store::release::ensure_checked`] gives it, except that a record that cannot be
/// written (a read-only store) is only warned about: the check made here still judges the
/// lock. `None` (warned): the check could not be made.
fn lock_check(
    store: &Store,
    manifest: &repo::manifest::Manifest,
) -> Result<Option<format::release::CheckObject>> {
    if let Some(c) = store.current_check(manifest)? {
        if c.rules >= store::release::RULES {
            return Ok(Some(c));
        }
    }
    match store::release::check_revision(store, manifest, "serve") {
        Ok(c) => {
            if let Err(e) = store.put_check(&manifest.repo, &c) {
                tracing::warn!(
                    "cannot record the release check of {}@{}: {e}",
                    manifest.repo,
                    manifest.commit.to_hex()
                );
            }
            Ok(Some(c))
        }
        Err(e) => {
            tracing::warn!("{}", store::release::not_made(manifest, &e));
            Ok(None)
        }
    }
}

pub fn run(ctx: &Ctx, o: Options) -> Result<ExitCode> {
    if o.threads == 0 || o.fetch_threads == Some(0) {
        bail!("--threads and --fetch-threads must be at least 1");
    }
    if o.cache_mib < 16 {
        bail!("--cache-mib {}: at least 16 MiB is needed", o.cache_mib);
    }
    let read = |p: &Path| tokens(p, "--token-file");
    let (tokens, token_names, write_scopes) = match o.token_file.as_deref().map(read).transpose()? {
        Some((set, names, scopes)) => (Some(set), names, scopes),
        None => (None, HashMap::new(), HashMap::new()),
    };
    if o.upstream.is_some() || !write_scopes.is_empty() {
        // A mirror's (or an upload hub's) first start on an empty directory or bucket
        // creates the store, as `ingest` and `pull` do (a plain serve of an empty store
        // still says to ingest).
        Store::open_or_create(ctx.backend()?, CreateOptions::default())?;
    }
    let nodes = node_access(&o)?;
    let store = ctx.open()?;
    guard_locks(&store, &o.policy)?;
    let index = super::shared_index::SharedIndex::new(store.clone(), ctx.index_dir(&store)?);
    let uploads = uploads(&store, &o.uploads, &write_scopes, &index)?;
    let mut xet = o.xet;
    if let (Some(x), false) = (xet.as_mut(), o.xet_secret_given) {
        x.secret = super::xet_key::kept_secret(&ctx.index_dir(&store)?)?;
    }
    let upstream = match &o.upstream {
        None => None,
        Some(m) => {
            let token = super::upstream::token(m.token_file.as_deref())?;
            let up = super::upstream::HubUpstream::new(
                &m.url,
                token,
                store.clone(),
                index.clone(),
                m.jobs,
                &m.transport,
            )?;
            Some(UpstreamOptions {
                upstream: Arc::new(up),
                ttl: m.ttl,
            })
        }
    };
    let remote = crate::ctx::is_remote(&store.backend().location());
    let opts = hubserve::ServeOptions {
        listen: o.listen,
        tokens,
        token_names,
        threads: o.threads,
        limits: o.limits,
        cache_bytes: o.cache_mib << 20,
        fetch_threads: o.fetch_threads.unwrap_or(if remote {
            crate::ctx::REMOTE_READ_THREADS
        } else {
            4
        }),
        policy: o.policy,
        upstream,
        readahead: Default::default(),
        metrics: ctx.metrics.clone(),
        ui: (!o.no_ui).then(|| {
            let store = hubserve::ui::manifest_cache::cached(&store);
            let gc = crate::config::gc_settings(&ctx.config).map_err(|e| format!("{e:#}"));
            let inventory = super::ui::StoreInventory::new(store, gc);
            hubserve::ui::Pages(Arc::new(inventory))
        }),
        xet,
        nodes,
        uploads,
        write_scopes,
    };
    let server = hubserve::Server::bind(store, &opts)?;
    crate::resident::keep_code_resident();
    let mode = match (&opts.upstream, &opts.uploads) {
        (Some(u), None) => format!("a mirror of {}", u.upstream.endpoint()),
        (Some(u), Some(_)) => format!("a mirror of {}, taking uploads", u.upstream.endpoint()),
        (None, Some(_)) => "taking uploads".to_string(),
        (None, None) => "read-only".to_string(),
    };
    tracing::info!(
        "serving {} on http://{} ({mode}{}); set HF_ENDPOINT=http://{}",
        ctx.backend()?.location(),
        server.local_addr(),
        if opts.tokens.is_some() {
            ", bearer tokens required"
        } else {
            ""
        },
        server.local_addr()
    );
    server.run()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::token_and_name;

    #[test]
    fn a_token_file_with_a_byte_order_mark_and_crlf_keeps_every_token() {
        // Hostile review of issue 43 (helper-26, 01): the first token kept the BOM.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "\u{feff}first-token\r\nsecond  # b\r\n").unwrap();
        let (set, names, _) = super::tokens(&f, "--node-token-file").unwrap();
        let mut got: Vec<&str> = set.iter().map(String::as_str).collect();
        got.sort();
        assert_eq!(got, ["first-token", "second"]);
        assert_eq!(names["second"], "b");
    }

    #[test]
    fn a_token_line_names_its_token_only_after_a_hash() {
        assert_eq!(token_and_name("hf_abc"), ("hf_abc", None));
        assert_eq!(
            token_and_name("hf_abc  # CI runners"),
            ("hf_abc", Some("CI runners"))
        );
        assert_eq!(token_and_name("hf_abc\t#alice"), ("hf_abc", Some("alice")));
        // Files written before names: the whole line is the token, spaces included.
        assert_eq!(
            token_and_name("Open Sesame 2024"),
            ("Open Sesame 2024", None)
        );
        assert_eq!(token_and_name("a#b"), ("a#b", None));
        assert_eq!(token_and_name("tok #"), ("tok", None));
    }

    #[test]
    fn a_write_scope_is_the_last_field_of_a_token() {
        use super::token_and_scope;
        assert_eq!(token_and_scope("hf_abc").unwrap(), ("hf_abc", None));
        let (t, s) = token_and_scope("hf_abc  write=team/*,solo/model").unwrap();
        assert_eq!(
            (t, s.unwrap()),
            (
                "hf_abc",
                vec!["team/*".to_string(), "solo/model".to_string()]
            )
        );
        assert_eq!(token_and_scope("hf_abc write=*").unwrap().1.unwrap(), ["*"]);
        // A field that is not a scope stays part of the token, as before scopes.
        assert_eq!(
            token_and_scope("Open Sesame").unwrap(),
            ("Open Sesame", None)
        );
        for bad in ["t write=", "t write=team", "t write=team/*,", "t write=/x"] {
            assert!(token_and_scope(bad).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "ci-token  write=team/*  # CI\nreader\n").unwrap();
        let (set, names, scopes) = super::tokens(&f, "--token-file").unwrap();
        assert!(set.contains("ci-token") && set.contains("reader"));
        assert_eq!(names["ci-token"], "CI");
        assert_eq!(scopes["ci-token"], ["team/*"]);
        assert!(!scopes.contains_key("reader"));
        std::fs::write(&f, "ok\nbad  write=nope\n").unwrap();
        let e = super::tokens(&f, "--token-file").unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        std::fs::write(&f, "node  write=team/*\n").unwrap();
        assert!(super::node_tokens(&f).is_err());
    }
}
