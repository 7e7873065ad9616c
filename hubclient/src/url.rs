//! Names and URLs: which repository ids, revisions and file paths are acceptable, how
//! each is percent-encoded into a request path, how a `Location` or `Link` target is
//! resolved against the URL that sent it, and which URLs share the endpoint's origin
//! (the only one that ever sees the token).
//!
//! File paths come from the upstream's tree, so they are checked as hostile input: a
//! path must stay inside the snapshot whatever the caller later does with it.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

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

/// Checks a repository id: `NAME` or `ORG/NAME`, each part of letters, digits, `-`, `_`,
/// `.`, without `--` or `..` (the Hub's rules, which keep cache folder names unambiguous).
pub fn check_repo(repo: &str) -> Result<(), String> {
    let parts: Vec<&str> = repo.split('/').collect();
    let part_ok = |s: &&str| {
        !s.is_empty()
            && s.len() <= 96
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !s.contains("--")
            && !s.contains("..")
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    if parts.len() <= 2 && parts.iter().all(part_ok) {
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

/// Checks a file path from the upstream: relative, `/`-separated, no empty, `.` or `..`
/// segment, no backslash, no NUL or other control character, at most [`MAX_PATH_LEN`].
pub fn check_path(path: &str) -> Result<(), String> {
    let why = if path.is_empty() {
        "empty"
    } else if path.len() > MAX_PATH_LEN {
        "longer than 4096 bytes"
    } else if path.starts_with('/') {
        "absolute"
    } else if path.contains('\\') {
        "contains a backslash"
    } else if path.chars().any(char::is_control) {
        "contains a control character"
    } else if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        "has an empty, '.' or '..' segment"
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

/// `scheme://host[:port]` of an absolute URL, lowercased, without a trailing slash.
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let mut authority = authority.to_ascii_lowercase();
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    if let Some(bare) = authority.strip_suffix(default_port) {
        authority = bare.to_string();
    }
    Some(format!("{scheme}://{authority}"))
}

/// `target` (a `Location` or `Link` value) resolved against `base`, the URL it came from.
pub fn join(base: &str, target: &str) -> Option<String> {
    let target = target.trim();
    if target.is_empty() || target.chars().any(|c| c.is_control() || c == ' ') {
        return None;
    }
    if target.starts_with("http://") || target.starts_with("https://") {
        return origin(target).map(|_| target.to_string());
    }
    if has_scheme(target) {
        return None;
    }
    let base_origin = origin(base)?;
    if let Some(rest) = target.strip_prefix("//") {
        let scheme = base_origin.split("://").next()?;
        return Some(format!("{scheme}://{rest}"));
    }
    if target.starts_with('/') {
        return Some(format!("{base_origin}{target}"));
    }
    // A relative reference: beside the last segment of the base's path.
    let no_query = base.split(['?', '#']).next()?;
    let dir = no_query.rsplit_once('/').map(|(d, _)| d)?;
    if dir.len() < base_origin.len() {
        return Some(format!("{base_origin}/{target}"));
    }
    Some(format!("{dir}/{target}"))
}

/// Whether a reference starts with a scheme (`ftp:`, `file:`...), RFC 3986's
/// `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"` before any `/`, `?` or `#`.
fn has_scheme(target: &str) -> bool {
    let head = target.split(['/', '?', '#']).next().unwrap_or("");
    head.split_once(':').is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
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
        assert_eq!(
            origin("HTTPS://Hf.co:443/x").as_deref(),
            Some("https://hf.co")
        );
        assert_eq!(origin("http://h:8080").as_deref(), Some("http://h:8080"));
        assert_eq!(origin("http://u@h/"), None);
        let b = "http://h:1/api/models/a/b/tree/c?x=1";
        assert_eq!(join(b, "/p?q").as_deref(), Some("http://h:1/p?q"));
        assert_eq!(
            join(b, "d").as_deref(),
            Some("http://h:1/api/models/a/b/tree/d")
        );
        assert_eq!(join(b, "//o:2/z").as_deref(), Some("http://o:2/z"));
        assert_eq!(join(b, "https://o/z").as_deref(), Some("https://o/z"));
        assert_eq!(join("http://h", "z").as_deref(), Some("http://h/z"));
        assert_eq!(join(b, "a b"), None);
        assert_eq!(join(b, "file:///etc/passwd"), None);
        assert_eq!(join(b, "ftp://h/x"), None);
        assert_eq!(join(b, "a:b/c"), None);
        assert_eq!(
            join(b, "./a:b").as_deref(),
            Some("http://h:1/api/models/a/b/tree/./a:b")
        );
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
