//! Names and URLs: which repository ids, revisions and file paths are acceptable, how
//! each is percent-encoded into a request path, how a `Location` or `Link` target is
//! resolved against the URL that sent it, which URLs share the endpoint's origin (the
//! only one that ever sees the token), and which other origins a redirect may lead to
//! ([`OriginRule`]). Parsing, joining and origins are the `url` crate's (WHATWG URL).
//!
//! File paths come from the upstream's tree, so they are checked as hostile input: a
//! path must stay inside the snapshot whatever the caller later does with it.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
pub use url::Url;

/// Longest file path accepted (bytes): far above any real repository, small enough that
/// a million of them stay reasonable in memory.
pub const MAX_PATH_LEN: usize = 4096;

/// Characters left as they are in a path segment (RFC 3986 unreserved); everything else
/// is percent-encoded. For a revision `/` is encoded too (`refs/pr/1` → `refs%2Fpr%2F1`).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Checks a repository id: `NAME` or `ORG/NAME`, each part as
/// [`format::names::is_valid_repo_part`] says (the Hub's rules).
pub fn check_repo(repo: &str) -> Result<(), String> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() <= 2 && parts.iter().all(|p| format::names::is_valid_repo_part(p)) {
        Ok(())
    } else {
        Err(format!(
            "invalid repository id {repo:?}: expected NAME or ORG/NAME of letters, digits, '-', '_', '.'"
        ))
    }
}

/// Checks a revision as given by a user: a branch, tag, `refs/pr/N` or commit sha.
pub fn check_revision(rev: &str) -> Result<(), String> {
    if rev.is_empty() || rev.len() > 256 || rev.chars().any(char::is_control) {
        return Err(format!("invalid revision {rev:?}"));
    }
    Ok(())
}

/// Checks a file path from the upstream: a safe relative path as every manifest's is
/// ([`format::manifest::check_path`]: relative, `/`-separated, no empty, `.` or `..`
/// segment, no NUL), and beyond that, for what an upstream may send: no backslash, no
/// control character, at most [`MAX_PATH_LEN`].
pub fn check_path(path: &str) -> Result<(), String> {
    format::manifest::check_path(path)?;
    let why = if path.len() > MAX_PATH_LEN {
        "longer than 4096 bytes"
    } else if path.contains('\\') {
        "contains a backslash"
    } else if path.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(format!("unsafe file path {path:?}: {why}"))
}

/// Whether `s` is a full commit id as the Hub writes it: 40 lowercase hex digits.
pub fn is_commit(s: &str) -> bool {
    is_lower_hex(s, 40)
}

/// Whether `s` is exactly `len` lowercase hex digits.
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One path segment (or a revision, `/` included) percent-encoded.
pub fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A file path with each segment encoded and the `/` between them kept.
pub fn encode_path(path: &str) -> String {
    path.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

/// An absolute `http`/`https` URL without user info: the endpoint, and every URL a
/// request is sent to. User info is refused rather than dropped: `https://hub@evil/`
/// names the host `evil`, and a redirect that carries credentials is not one to follow.
pub fn parse_http(s: &str) -> Result<Url, String> {
    let u = Url::parse(s.trim()).map_err(|e| format!("URL {:?}: {e}", clip(s)))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return Err(format!("URL {:?}: expected http(s)://host", clip(s)));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(format!("URL {:?}: user info (`user@`) is refused", clip(s)));
    }
    Ok(u)
}

/// `target` (a `Location` or `Link` value: absolute, scheme-relative, absolute-path or
/// relative) resolved against `base`, the URL it came from, by RFC 3986 as the `url`
/// crate implements it; the result must be an `http(s)` URL without user info.
pub fn join(base: &Url, target: &str) -> Result<Url, String> {
    let target = target.trim();
    if target.is_empty() || target.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!("bad target {:?}", clip(target)));
    }
    let mut u = base
        .join(target)
        .map_err(|e| format!("bad target {:?}: {e}", clip(target)))?;
    u.set_fragment(None);
    parse_http(u.as_str())
}

/// Whether two URLs share their origin: scheme, host and port (the scheme's default
/// port when none is written), as the `url` crate defines it.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// An origin a redirect or a `Link` may lead to besides the endpoint's own:
/// `[scheme://]host[:port]`, where `host` may start with `*.` (any subdomain, not the
/// domain itself). Without a scheme, `https`; without a port, the scheme's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginRule {
    scheme: String,
    /// Lowercase, as the `url` crate writes hosts (IDNA to punycode).
    host: String,
    /// `*.host`: subdomains of `host` only.
    subdomains: bool,
    port: u16,
}

impl OriginRule {
    /// Parses one rule; an error names what is wrong with it.
    pub fn parse(rule: &str) -> Result<OriginRule, String> {
        let r = rule.trim();
        let (scheme, rest) = r.split_once("://").unwrap_or(("https", r));
        let (subdomains, rest) = match rest.strip_prefix("*.") {
            Some(h) => (true, h),
            None => (false, rest),
        };
        let bad = |why: &str| format!("redirect host {:?}: {why}", clip(rule));
        let u = parse_http(&format!("{scheme}://{rest}")).map_err(|e| bad(&e))?;
        if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
            return Err(bad("expected [scheme://]host[:port], no path"));
        }
        let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
            return Err(bad("no host"));
        };
        if subdomains && !matches!(u.host(), Some(url::Host::Domain(_))) {
            return Err(bad("`*.` needs a domain name"));
        }
        Ok(OriginRule {
            scheme: u.scheme().to_string(),
            host: host.to_string(),
            subdomains,
            port,
        })
    }

    /// Whether `u` is on an origin this rule admits.
    pub fn admits(&self, u: &Url) -> bool {
        let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else {
            return false;
        };
        let host_ok = if self.subdomains {
            matches!(u.host(), Some(url::Host::Domain(_)))
                && host
                    .strip_suffix(self.host.as_str())
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
        } else {
            host == self.host
        };
        u.scheme() == self.scheme && port == self.port && host_ok
    }
}

impl std::fmt::Display for OriginRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let star = if self.subdomains { "*." } else { "" };
        write!(f, "{}://{star}{}:{}", self.scheme, self.host, self.port)
    }
}

/// The origins the public Hub (`huggingface.co`, `hf.co`) sends downloads to: its CDNs
/// and storage bridges, all under its two domains, over https.
pub const HUB_REDIRECT_HOSTS: &[&str] = &[
    "https://huggingface.co",
    "https://*.huggingface.co",
    "https://hf.co",
    "https://*.hf.co",
];

/// At most 80 characters of an untrusted value, for an error message.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The target of `rel="next"` in a `Link` header (`<url>; rel="next", <url>; rel="prev"`).
pub fn next_link(header: &str) -> Option<&str> {
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let target = &after[..close];
        let params_end = after[close..].find('<').map_or(after.len(), |i| close + i);
        let params = &after[close + 1..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=").is_some_and(|v| {
                v.trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target);
        }
        rest = &after[params_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repos() {
        for ok in ["gpt2", "org/name", "a.b/c_d-e"] {
            assert!(check_repo(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a/b/c", "../x", "a/..", "a--b/c", "a/ b", "/a", "a/", "a%2fb",
        ] {
            assert!(check_repo(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        for ok in ["a", "dir/b.bin", ".gitattributes", "a/.b/c", "x..y"] {
            assert!(check_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "/abs", "../x", "a/../b", "a//b", "a/", "./a", "a\\b", "a\0b", "a\nb",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path(&"a".repeat(MAX_PATH_LEN + 1)).is_err());
    }

    #[test]
    fn encoding() {
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(encode_path("d ir/a+b?.bin"), "d%20ir/a%2Bb%3F.bin");
        assert_eq!(encode_path("é/x#y"), "%C3%A9/x%23y");
    }

    #[test]
    fn origins_and_joins() {
        let u = |s: &str| parse_http(s).unwrap();
        assert!(same_origin(
            &u("HTTPS://Hf.co:443/x"),
            &u("https://hf.co/y")
        ));
        assert!(same_origin(&u("http://h:80/"), &u("http://h")));
        assert!(!same_origin(&u("http://h/"), &u("https://h/")));
        assert!(!same_origin(&u("http://h:1/"), &u("http://h:2/")));
        assert!(!same_origin(&u("http://h/"), &u("http://h.evil/")));
        for bad in [
            "http://u@h/",
            "https://hub@evil/",
            "http://u:p@h/",
            "ftp://h/x",
            "h/x",
        ] {
            assert!(parse_http(bad).is_err(), "{bad}");
        }
        let b = u("http://h:1/api/models/a/b/tree/c?x=1");
        let j = |t: &str| join(&b, t).map(|u| u.to_string());
        assert_eq!(j("/p?q").as_deref(), Ok("http://h:1/p?q"));
        assert_eq!(j("d").as_deref(), Ok("http://h:1/api/models/a/b/tree/d"));
        assert_eq!(j("../d").as_deref(), Ok("http://h:1/api/models/a/b/d"));
        assert_eq!(j("//o:2/z").as_deref(), Ok("http://o:2/z"));
        assert_eq!(j("https://o/z#frag").as_deref(), Ok("https://o/z"));
        assert_eq!(
            join(&u("http://h"), "z").map(|u| u.to_string()).as_deref(),
            Ok("http://h/z")
        );
        for bad in [
            "a b",
            "file:///etc/passwd",
            "ftp://h/x",
            "//hub@evil/x",
            "",
            "\u{7f}",
        ] {
            assert!(j(bad).is_err(), "{bad:?}");
        }
        // Not a scheme: a relative path with a colon after a slash.
        assert_eq!(
            j("./a:b").as_deref(),
            Ok("http://h:1/api/models/a/b/tree/a:b")
        );
    }

    #[test]
    fn origin_rules() {
        let r = |s: &str| OriginRule::parse(s).unwrap();
        let u = |s: &str| parse_http(s).unwrap();
        let cdn = r("cdn.example.com");
        assert!(cdn.admits(&u("https://CDN.example.com/x")));
        assert!(cdn.admits(&u("https://cdn.example.com:443/x")));
        assert!(!cdn.admits(&u("http://cdn.example.com/x")), "no downgrade");
        assert!(!cdn.admits(&u("https://cdn.example.com:8443/x")));
        assert!(!cdn.admits(&u("https://cdn.example.com.evil/x")));
        let star = r("https://*.hf.co");
        assert!(star.admits(&u("https://cdn-lfs.hf.co/x")));
        assert!(star.admits(&u("https://cas-bridge.xethub.hf.co/x")));
        assert!(!star.admits(&u("https://hf.co/x")));
        assert!(!star.admits(&u("https://evilhf.co/x")));
        assert!(!star.admits(&u("https://hf.co.evil/x")));
        let local = r("http://127.0.0.1:8080");
        assert!(local.admits(&u("http://127.0.0.1:8080/cdn")));
        assert!(!local.admits(&u("http://127.0.0.1:8081/cdn")));
        assert_eq!(local.to_string(), "http://127.0.0.1:8080");
        for bad in [
            "",
            "https://",
            "h/path",
            "u@h",
            "*.1.2.3.4",
            "ftp://h",
            "h?x",
        ] {
            assert!(OriginRule::parse(bad).is_err(), "{bad:?}");
        }
        for ok in HUB_REDIRECT_HOSTS {
            OriginRule::parse(ok).unwrap();
        }
    }

    #[test]
    fn links() {
        let h = r#"<https://h/p?cursor=a,b>; rel="next", <https://h/prev>; rel="prev""#;
        assert_eq!(next_link(h), Some("https://h/p?cursor=a,b"));
        let h = r#"<https://h/prev>; rel="prev", </next>; rel=next"#;
        assert_eq!(next_link(h), Some("/next"));
        assert_eq!(next_link(r#"<https://h/prev>; rel="prev""#), None);
        assert_eq!(next_link("garbage <no close"), None);
    }
}
