//! `modelcas serve`: the Hub-compatible HTTP endpoint.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use hubserve::Limits;
use store::gc::retention::parse_duration;

use super::Ctx;
use crate::args::{ServeArgs, ServeLimitArgs};
use crate::config::ServeConfig;

/// Tokens from a file: one per line; blank lines and `#` comments ignored.
fn tokens(path: &Path) -> Result<HashSet<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--token-file {}", path.display()))?;
    let set: HashSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if set.is_empty() {
        bail!("--token-file {}: no token in it", path.display());
    }
    Ok(set)
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

/// Options of `modelcas serve`, resolved from flags, environment and `[serve]`.
pub struct Options {
    pub listen: String,
    pub token_file: Option<PathBuf>,
    pub threads: usize,
    pub cache_mib: usize,
    pub fetch_threads: Option<usize>,
    pub limits: Limits,
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
            threads: a.threads.or(c.threads).unwrap_or(16),
            cache_mib: a.cache_mib.or(c.cache_mib).unwrap_or(256),
            fetch_threads: a.fetch_threads.or(c.fetch_threads),
            limits: limits(c, &a.limits)?,
        })
    }
}

pub fn run(ctx: &Ctx, o: Options) -> Result<ExitCode> {
    if o.threads == 0 || o.fetch_threads == Some(0) {
        bail!("--threads and --fetch-threads must be at least 1");
    }
    if o.cache_mib < 16 {
        bail!("--cache-mib {}: at least 16 MiB is needed", o.cache_mib);
    }
    let tokens = o.token_file.as_deref().map(tokens).transpose()?;
    let store = ctx.open()?;
    let remote = store.backend().location().starts_with("s3://");
    let opts = hubserve::ServeOptions {
        listen: o.listen,
        tokens,
        threads: o.threads,
        limits: o.limits,
        cache_bytes: o.cache_mib << 20,
        fetch_threads: o.fetch_threads.unwrap_or(if remote {
            super::REMOTE_READ_THREADS
        } else {
            4
        }),
    };
    let server = hubserve::Server::bind(store, &opts)?;
    tracing::info!(
        "serving {} on http://{} (read-only{}); set HF_ENDPOINT=http://{}",
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
