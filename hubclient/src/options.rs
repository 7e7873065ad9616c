//! What a [`crate::HubClient`] is built from: the endpoint, the token, the retry policy,
//! the timeouts and deadlines, the origins redirects may lead to and the caps on a file
//! listing, with the defaults and the environment rules the CLI shares with
//! `huggingface_hub` (`HF_ENDPOINT`, `HF_TOKEN`).

use std::time::Duration;

use crate::error::Error;
use crate::url::{parse_http, OriginRule, HUB_REDIRECT_HOSTS};

/// The public Hub, used when neither an explicit endpoint nor `HF_ENDPOINT` is given.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How long each phase of a request may take, and the deadlines of whole transfers.
///
/// A per-read timeout alone never fires on an upstream that sends a byte now and then,
/// so every transfer also has a total deadline: a metadata request (a revision, a tree
/// page) must be over, redirects and body included, within `total`; a download must
/// keep an average rate: its `k`-th byte must be in within `total + k / min_rate` of
/// its start (so a large file gets the time its size needs, and a trickle is cut at
/// `total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Resolving the host and opening the connection (TCP and TLS).
    pub connect: Duration,
    /// From the request sent to the end of the response's headers.
    pub response: Duration,
    /// The longest wait for any one read of a body.
    pub read: Duration,
    /// The deadline of one metadata request, and a download's grace before `min_rate`.
    pub total: Duration,
    /// The lowest average rate (bytes per second) a download may fall to after `total`;
    /// 0: none.
    pub min_rate: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            // The Hub may take a while to answer a `tree` of a large repository.
            response: Duration::from_secs(60),
            read: Duration::from_secs(60),
            total: Duration::from_secs(300),
            // 64 KiB/s: 4.5 hours a GB; a working link is hundreds of times faster.
            min_rate: 64 << 10,
        }
    }
}

/// Caps on one revision's file listing (all tree pages together): it is held in memory,
/// and a hostile upstream may declare anything. Each error names the cap it hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingLimits {
    /// Files (directories are not counted).
    pub max_files: usize,
    /// Bytes of file paths, summed.
    pub max_path_bytes: u64,
    /// Bytes of tree JSON read, summed over the pages.
    pub max_json_bytes: u64,
}

impl Default for ListingLimits {
    fn default() -> ListingLimits {
        // The largest model repositories hold tens of thousands of files; the JSON of a
        // file entry is a few hundred bytes. At these caps a listing holds < 200 MiB.
        ListingLimits {
            max_files: 250_000,
            max_path_bytes: 32 << 20,
            max_json_bytes: 256 << 20,
        }
    }
}

/// The settings of a [`crate::HubClient`].
#[derive(Clone, Debug)]
pub struct HubOptions {
    /// `http(s)://host[:port][/prefix]`, without a trailing slash (one is removed).
    pub endpoint: String,
    /// Sent as `Authorization: Bearer <token>`, to the endpoint's origin only.
    pub token: Option<String>,
    pub user_agent: String,
    /// How many times a failed request is sent again (429, 5xx, a connection error), and
    /// how many consecutive failures without progress a download tolerates.
    pub max_retries: u32,
    /// The first backoff; each further attempt doubles it (with jitter).
    pub base_backoff: Duration,
    /// No wait is longer, whatever the backoff or `Retry-After` says.
    pub max_backoff: Duration,
    pub timeouts: Timeouts,
    /// Origins besides the endpoint's that a redirect or a tree page's `Link` may lead
    /// to ([`crate::url::OriginRule`]: `[scheme://]host[:port]`, `*.domain`): a CDN.
    /// Others are refused. The public Hub's own CDNs
    /// ([`crate::url::HUB_REDIRECT_HOSTS`]) are added when the endpoint is the Hub.
    /// The token never goes to any of them.
    pub redirect_hosts: Vec<String>,
    pub limits: ListingLimits,
}

impl Default for HubOptions {
    fn default() -> HubOptions {
        HubOptions {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            token: None,
            user_agent: format!("modelcas/{}", env!("CARGO_PKG_VERSION")),
            max_retries: 5,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeouts: Timeouts::default(),
            redirect_hosts: Vec::new(),
            limits: ListingLimits::default(),
        }
    }
}

impl HubOptions {
    /// The defaults, with the endpoint and token chosen by [`endpoint`] and [`token`],
    /// and the redirect hosts of `MODELCAS_REDIRECT_HOSTS` (comma-separated origins).
    pub fn from_env(endpoint_arg: Option<&str>, token_arg: Option<&str>) -> HubOptions {
        let hosts = std::env::var("MODELCAS_REDIRECT_HOSTS").unwrap_or_default();
        HubOptions {
            endpoint: endpoint(endpoint_arg),
            token: token(token_arg),
            redirect_hosts: split_list(&hosts),
            ..HubOptions::default()
        }
    }

    /// Refuses settings that cannot work, and trims the endpoint's trailing slashes.
    pub(crate) fn checked(mut self) -> Result<HubOptions, Error> {
        self.endpoint = self.endpoint.trim().trim_end_matches('/').to_string();
        let e = &self.endpoint;
        let bad = || {
            Error::Invalid(format!(
                "endpoint {e:?}: expected http(s)://host[:port][/path]"
            ))
        };
        let url = parse_http(e).map_err(|_| bad())?;
        if url.query().is_some() || url.fragment().is_some() || e.contains(' ') {
            return Err(bad());
        }
        if let Some(t) = &self.token {
            if t.is_empty() || t.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
                return Err(Error::Invalid(
                    "token: expected visible ASCII characters, no spaces".into(),
                ));
            }
        }
        if self.user_agent.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
            return Err(Error::Invalid(
                "user agent: expected printable ASCII".into(),
            ));
        }
        self.redirect_rules()?;
        Ok(self)
    }

    /// The parsed [`HubOptions::redirect_hosts`], with the Hub's CDNs when the endpoint
    /// is the public Hub.
    pub(crate) fn redirect_rules(&self) -> Result<Vec<OriginRule>, Error> {
        let hub = parse_http(&self.endpoint)
            .ok()
            .filter(|u| u.scheme() == "https")
            .and_then(|u| u.host_str().map(str::to_string))
            .is_some_and(|h| h == "huggingface.co" || h == "hf.co");
        let builtin = HUB_REDIRECT_HOSTS.iter().filter(|_| hub).copied();
        self.redirect_hosts
            .iter()
            .map(String::as_str)
            .chain(builtin)
            .map(|r| OriginRule::parse(r).map_err(Error::Invalid))
            .collect()
    }
}

/// The endpoint to use: `explicit`, else `HF_ENDPOINT`, else the public Hub. Empty values
/// count as absent.
pub fn endpoint(explicit: Option<&str>) -> String {
    let env = std::env::var("HF_ENDPOINT").ok();
    pick(explicit, env.as_deref()).unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
}

/// The token to use: `explicit`, else `HF_TOKEN`, else none. Empty values count as
/// absent.
pub fn token(explicit: Option<&str>) -> Option<String> {
    let env = std::env::var("HF_TOKEN").ok();
    pick(explicit, env.as_deref())
}

/// The non-empty items of a comma-separated list, trimmed.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect()
}

fn pick(explicit: Option<&str>, env: Option<&str>) -> Option<String> {
    [explicit, env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_beats_env_beats_default() {
        assert_eq!(pick(Some("a"), Some("b")).as_deref(), Some("a"));
        assert_eq!(pick(Some(" "), Some("b")).as_deref(), Some("b"));
        assert_eq!(pick(None, Some("")), None);
        assert_eq!(split_list(" a.b, ,https://c:1 "), ["a.b", "https://c:1"]);
        assert!(split_list("").is_empty());
    }

    #[test]
    fn endpoints_checked() {
        let with = |e: &str| {
            HubOptions {
                endpoint: e.into(),
                ..HubOptions::default()
            }
            .checked()
        };
        assert_eq!(with("http://h:1/p/").unwrap().endpoint, "http://h:1/p");
        assert!(with("ftp://h").is_err());
        assert!(with("http://").is_err());
        assert!(with("http://h?x=1").is_err());
        assert!(with("http://u@h").is_err());
        assert!(with("https://hub@evil").is_err());
        let hosts = |e: &str, r: &[&str]| {
            HubOptions {
                endpoint: e.into(),
                redirect_hosts: r.iter().map(|s| s.to_string()).collect(),
                ..HubOptions::default()
            }
            .redirect_rules()
            .map(|v| v.len())
        };
        assert_eq!(hosts("https://huggingface.co", &[]).unwrap(), 4);
        assert_eq!(hosts("https://hf.co/", &["cdn.x"]).unwrap(), 5);
        assert_eq!(hosts("http://huggingface.co", &[]).unwrap(), 0);
        assert_eq!(hosts("https://mirror.example", &["cdn.x"]).unwrap(), 1);
        assert!(hosts("https://mirror.example", &["a/b"]).is_err());
        let bad_token = HubOptions {
            token: Some("a\nb".into()),
            ..HubOptions::default()
        };
        assert!(bad_token.checked().is_err());
    }
}
