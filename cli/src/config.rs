//! The config file (TOML): `--config FILE`, `MODELCAS_CONFIG`, else
//! `/etc/modelcas/config.toml` when it exists. Unknown keys are errors that name the key.
//! Every setting is also a flag and an environment variable; flags win over the
//! environment, which wins over the file.
//!
//! ```toml
//! store = "s3://models/modelcas"
//! endpoint_url = "https://s3.internal:9000"
//! cache_dir = "/var/cache/modelcas"
//! cache_size = "200G"
//! log_format = "json"
//! metrics_listen = "0.0.0.0:9464"
//!
//! [mount]
//! allow_other = true
//! cache_mib = 256
//! file_cache = "/var/cache/modelcas/files"   # whole files for later opens
//! file_cache_size = "200G"
//!
//! [serve]
//! listen = "0.0.0.0:8080"
//! upstream = "https://huggingface.co"   # a pull-through mirror
//! allow = ["my-org/*"]
//! upstream_repos = []                   # stored repositories the mirror may look up too
//!
//! [serve.locks]          # every ref of the repository resolves to this commit
//! "my-org/model" = "0123456789abcdef0123456789abcdef01234567"
//!
//! [gc]
//! keep_last = 5          # per repository, besides refs and pins
//! keep_within = "30d"
//! grace = "24h"
//! rewrite_below = 0.8
//!
//! [gc.repos."org/name"]  # overrides for one repository
//! keep_last = 10
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use format::{CommitId, RepoId};
use serde::{Deserialize, Serialize};
use store::gc::retention::{parse_duration, Policy};
use store::gc::GcSettings;

/// Where the config is looked for when neither `--config` nor `MODELCAS_CONFIG` is set.
pub const DEFAULT_PATH: &str = "/etc/modelcas/config.toml";

/// The whole file. Also what `modelcas config show` prints (as TOML), so it round-trips.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub store: Option<String>,
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    pub path_style: Option<bool>,
    pub index_dir: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    pub cache_size: Option<String>,
    /// See `--hub-token-file`.
    pub hub_token_file: Option<PathBuf>,
    /// See `--hub-retry-for`.
    pub hub_retry_for: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<String>,
    pub metrics_listen: Option<String>,
    pub metrics_file: Option<PathBuf>,
    /// `[mount]`.
    #[serde(default)]
    pub mount: MountConfig,
    /// `[serve]`.
    #[serde(default)]
    pub serve: ServeConfig,
    /// Retention and reclaiming.
    #[serde(default)]
    pub gc: GcConfig,
}

/// `[mount]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    pub allow_other: Option<bool>,
    pub cache_mib: Option<usize>,
    pub fetch_threads: Option<usize>,
    pub threads: Option<usize>,
    /// See `--spin-us`.
    pub spin_us: Option<u64>,
    /// `name`, `file` or `off`: see `--safetensors-order`.
    pub safetensors_order: Option<String>,
    /// See `--file-cache`.
    pub file_cache: Option<PathBuf>,
    /// See `--file-cache-size` (`"0"` turns the file cache off).
    pub file_cache_size: Option<String>,
    /// `false`: see `--no-passthrough`.
    pub passthrough: Option<bool>,
}

/// `[serve]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    pub listen: Option<String>,
    pub token_file: Option<PathBuf>,
    /// See `--node-token-file`.
    pub node_token_file: Option<PathBuf>,
    /// See `--node-api-open`.
    pub node_api_open: Option<bool>,
    pub threads: Option<usize>,
    pub cache_mib: Option<usize>,
    pub fetch_threads: Option<usize>,
    pub max_connections: Option<usize>,
    pub header_timeout: Option<String>,
    pub request_timeout: Option<String>,
    pub write_timeout: Option<String>,
    /// `false`: see `--no-ui`.
    pub ui: Option<bool>,
    /// A pull-through mirror of this Hub.
    pub upstream: Option<String>,
    pub upstream_token_file: Option<PathBuf>,
    pub upstream_ttl: Option<String>,
    pub upstream_jobs: Option<usize>,
    /// Origins besides the upstream's own that its redirects may lead to (a CDN).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_redirect_hosts: Vec<String>,
    /// See `--upstream-timeout`.
    pub upstream_timeout: Option<String>,
    /// See `--upstream-min-rate` (a size per second: `64K`; `0`: no minimum).
    pub upstream_min_rate: Option<String>,
    /// See `--upstream-max-files`.
    pub upstream_max_files: Option<usize>,
    /// Repository patterns served; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Repository patterns the mirror looks up upstream even when they exist only in the
    /// store (ingested, pulled); empty: none (no dependency confusion by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_repos: Vec<String>,
    /// `false`: see `--no-xet`.
    pub xet: Option<bool>,
    /// See `--upload-dir`.
    pub upload_dir: Option<PathBuf>,
    /// See `--upload-over-mirror`.
    pub upload_over_mirror: Option<bool>,
    /// See `--upload-hold-failing`.
    pub upload_hold_failing: Option<bool>,
    /// See `--xet-secret-file`.
    pub xet_secret_file: Option<PathBuf>,
    /// See `--xet-token-ttl`.
    pub xet_token_ttl: Option<String>,
    /// See `--xet-url-ttl`.
    pub xet_url_ttl: Option<String>,
    /// See `--xet-cas-url`.
    pub xet_cas_url: Option<String>,
    /// `[serve.locks]`: repository → the commit every ref of it resolves to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub locks: BTreeMap<String, String>,
}

/// `[gc]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GcConfig {
    pub keep_last: Option<usize>,
    pub keep_within: Option<String>,
    /// Expire revisions nobody has read for this long.
    pub unused_for: Option<String>,
    pub grace: Option<String>,
    pub rewrite_below: Option<f64>,
    /// `[gc.repos."org/name"]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub repos: BTreeMap<String, RepoPolicy>,
}

/// `[gc.repos."org/name"]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RepoPolicy {
    pub keep_last: Option<usize>,
    pub keep_within: Option<String>,
    pub unused_for: Option<String>,
}

/// Loads the config named by `path`, or the default file if it exists, or nothing.
pub fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>)> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
        None => return Ok((Config::default(), None)),
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("config file {}", path.display()))?;
    let config = parse(&text).with_context(|| format!("config file {}", path.display()))?;
    Ok((config, Some(path)))
}

/// Parses the text of a config file.
pub fn parse(text: &str) -> Result<Config> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
}

/// The file's settings with the global flags and environment variables on top (clap has
/// already put flags over environment variables).
pub fn merge_globals(cli: &crate::args::Cli, file: Config) -> Config {
    Config {
        store: cli.store.clone().filter(|s| !s.is_empty()).or(file.store),
        endpoint_url: cli.endpoint_url.clone().or(file.endpoint_url),
        region: cli.region.clone().or(file.region),
        path_style: cli.path_style.or(file.path_style),
        index_dir: cli.index_dir.clone().or(file.index_dir),
        cache_dir: cli.cache_dir.clone().or(file.cache_dir),
        cache_size: cli.cache_size.clone().or(file.cache_size),
        hub_token_file: cli.hub_token_file.clone().or(file.hub_token_file),
        hub_retry_for: cli.hub_retry_for.clone().or(file.hub_retry_for),
        log_level: cli.log_level.clone().or(file.log_level),
        log_format: cli.log_format.clone().or(file.log_format),
        metrics_listen: cli.metrics_listen.clone().or(file.metrics_listen),
        metrics_file: cli.metrics_file.clone().or(file.metrics_file),
        mount: file.mount,
        serve: file.serve,
        gc: file.gc,
    }
}

/// `[serve.locks]`, checked: each entry a repository id and a 40-hex commit sha, and no
/// repository twice (ids compare without case, as on the Hub: `Org/M` and `org/m` are one).
pub fn locks(file: &BTreeMap<String, String>) -> Result<HashMap<RepoId, CommitId>> {
    let mut out: HashMap<RepoId, CommitId> = HashMap::new();
    for (repo, sha) in file {
        let entry = || format!("[serve.locks] {repo:?} = {sha:?}");
        let id = RepoId::parse(repo).with_context(entry)?;
        let is_sha = sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_sha {
            bail!("{}: expected a 40-hex commit sha", entry());
        }
        if let Some(other) = out.keys().find(|r| r.same_repo(&id)) {
            bail!(
                "{}: {other} is locked too, and names the same repository (ids compare without case)",
                entry()
            );
        }
        out.insert(
            id,
            CommitId::parse(&sha.to_ascii_lowercase()).with_context(entry)?,
        );
    }
    Ok(out)
}

/// A duration of the config file, named `what` when it is not one.
fn duration(what: &str, s: &Option<String>) -> Result<Option<Duration>> {
    s.as_deref()
        .map(|v| parse_duration(v).with_context(|| what.to_string()))
        .transpose()
}

/// `[gc]`'s grace period, typed (`fsck` uses it too).
pub fn gc_grace(gc: &GcConfig) -> Result<Option<Duration>> {
    duration("config gc.grace", &gc.grace)
}

/// gc's settings from `[gc]` and `[serve.locks]`, typed; a run's flags go on top of them
/// ([`GcSettings::options`]).
pub fn gc_settings(config: &Config) -> Result<GcSettings> {
    let gc = &config.gc;
    let mut settings = GcSettings {
        default: Policy {
            keep_last: gc.keep_last,
            keep_within: duration("config gc.keep_within", &gc.keep_within)?,
            unused_for: duration("config gc.unused_for", &gc.unused_for)?,
        },
        grace: gc_grace(gc)?,
        rewrite_below: gc.rewrite_below,
        ..GcSettings::default()
    };
    for (name, p) in &gc.repos {
        let repo = RepoId::parse(name).with_context(|| format!("config gc.repos.{name:?}"))?;
        let what = |k: &str| format!("config gc.repos.\"{name}\".{k}");
        let policy = Policy {
            keep_last: p.keep_last,
            keep_within: duration(&what("keep_within"), &p.keep_within)?,
            unused_for: duration(&what("unused_for"), &p.unused_for)?,
        };
        settings.repos.insert(repo, policy);
    }
    // serve's version locks protect their commits like pins.
    settings.protected = locks(&config.serve.locks)
        .context("config [serve.locks]")?
        .into_iter()
        .collect();
    Ok(settings)
}

/// A URL with any `user:password@` replaced by `***@`.
fn mask_url(u: &str) -> String {
    match (u.find("://"), u.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
        _ => u.to_string(),
    }
}

/// The effective configuration as a config file, with where credentials come from as
/// comments (masked: secrets are never printed).
pub fn show(c: &Config, file: Option<&Path>) -> Result<String> {
    let mut shown = c.clone();
    shown.store = shown.store.as_deref().map(mask_url);
    shown.endpoint_url = shown.endpoint_url.as_deref().map(mask_url);
    let mut out = String::new();
    out.push_str(&format!(
        "# modelcas effective configuration (file: {}; flags and environment variables applied)
",
        file.map(|p| p.display().to_string())
            .unwrap_or_else(|| "none".into())
    ));
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CA_BUNDLE",
    ] {
        let v = match std::env::var(var) {
            Ok(v) if var == "AWS_ACCESS_KEY_ID" && v.len() > 4 => format!("{}… (masked)", &v[..4]),
            Ok(v) if var == "AWS_PROFILE" || var == "AWS_CA_BUNDLE" => v,
            Ok(_) => "set (masked)".into(),
            Err(_) => "unset".into(),
        };
        out.push_str(&format!("# {var}: {v}\n"));
    }
    out.push_str(&toml::to_string(&shown).context("rendering the configuration")?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_unknown_keys() {
        let c = parse(
            "[gc]\nkeep_last = 3\nkeep_within = \"30d\"\n[gc.repos.\"org/m\"]\nkeep_last = 9\n",
        )
        .unwrap();
        assert_eq!(c.gc.keep_last, Some(3));
        assert_eq!(c.gc.repos["org/m"].keep_last, Some(9));
        let e = parse("[gc]\nkeep_lats = 3\n").unwrap_err().to_string();
        assert!(e.contains("keep_lats"), "{e}");
        let c = parse("[serve]\nallow = [\"a/*\"]\nupstream_repos = [\"b/*\"]\n[serve.locks]\n\"a/b\" = \"00\"\n").unwrap();
        assert_eq!(c.serve.allow, ["a/*"]);
        assert_eq!(c.serve.upstream_repos, ["b/*"]);
        assert_eq!(c.serve.locks["a/b"], "00");
        let e = parse("[gc]\nkeep_last = \"three\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keep_last"), "{e}");
    }
}
