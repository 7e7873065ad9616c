//! What a [`crate::HubClient`] is built from: the endpoint, the token, the retry policy
//! and the timeouts, with the defaults and the environment rules the CLI shares with
//! `huggingface_hub` (`HF_ENDPOINT`, `HF_TOKEN`).

use std::time::Duration;

use crate::error::Error;

/// The public Hub, used when neither an explicit endpoint nor `HF_ENDPOINT` is given.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How long each phase of a request may take. A download may run for hours, so there is
/// no overall limit: `read` bounds the silence between two reads instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Resolving the host and opening the connection (TCP and TLS).
    pub connect: Duration,
    /// From the request sent to the end of the response's headers.
    pub response: Duration,
    /// The longest wait for any one read of a body.
    pub read: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            // The Hub may take a while to answer a `tree` of a large repository.
            response: Duration::from_secs(60),
            read: Duration::from_secs(60),
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
        }
    }
}

impl HubOptions {
    /// The defaults, with the endpoint and token chosen by [`endpoint`] and [`token`].
    pub fn from_env(endpoint_arg: Option<&str>, token_arg: Option<&str>) -> HubOptions {
        HubOptions {
            endpoint: endpoint(endpoint_arg),
            token: token(token_arg),
            ..HubOptions::default()
        }
    }

    /// Refuses settings that cannot work, and trims the endpoint's trailing slashes.
    pub(crate) fn checked(mut self) -> Result<HubOptions, Error> {
        self.endpoint = self.endpoint.trim().trim_end_matches('/').to_string();
        let rest = self
            .endpoint
            .strip_prefix("https://")
            .or_else(|| self.endpoint.strip_prefix("http://"));
        let host = rest.map(|r| r.split('/').next().unwrap_or(""));
        if host.is_none_or(str::is_empty) || self.endpoint.contains(['?', '#', ' ']) {
            let e = &self.endpoint;
            return Err(Error::Invalid(format!(
                "endpoint {e:?}: expected http(s)://host[:port][/path]"
            )));
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
        Ok(self)
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
        let bad_token = HubOptions {
            token: Some("a\nb".into()),
            ..HubOptions::default()
        };
        assert!(bad_token.checked().is_err());
    }
}
