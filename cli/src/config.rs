//! The config file (TOML): `--config FILE`, `MODELCAS_CONFIG`, else
//! `/etc/modelcas/config.toml` when it exists. Unknown keys are errors that name the key.
//! Flags and environment variables win over the file.
//!
//! ```toml
//! [gc]
//! keep_last = 5          # per repository, besides refs and pins
//! keep_within = "30d"
//! grace = "24h"
//! rewrite_below = 0.8
//!
//! [gc.repos."org/name"]  # overrides for one repository
//! keep_last = 10
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

/// Where the config is looked for when neither `--config` nor `MODELCAS_CONFIG` is set.
pub const DEFAULT_PATH: &str = "/etc/modelcas/config.toml";

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Retention and reclaiming.
    #[serde(default)]
    pub gc: GcConfig,
}

/// `[gc]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GcConfig {
    pub keep_last: Option<usize>,
    pub keep_within: Option<String>,
    pub grace: Option<String>,
    pub rewrite_below: Option<f64>,
    /// `[gc.repos."org/name"]`.
    #[serde(default)]
    pub repos: BTreeMap<String, RepoPolicy>,
}

/// `[gc.repos."org/name"]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RepoPolicy {
    pub keep_last: Option<usize>,
    pub keep_within: Option<String>,
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
        let e = parse("[gc]\nkeep_last = \"three\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keep_last"), "{e}");
    }
}
