//! `modelcas serve`: the Hub-compatible HTTP endpoint.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::Ctx;

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

pub fn run(ctx: &Ctx, listen: &str, token_file: Option<&Path>, threads: usize) -> Result<ExitCode> {
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let tokens = token_file.map(tokens).transpose()?;
    let store = ctx.open()?;
    let opts = hubserve::ServeOptions {
        listen: listen.to_string(),
        tokens,
        threads,
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
    server.run();
    Ok(ExitCode::SUCCESS)
}
