//! Everything that turns client bytes into values, or values into header bytes. Each
//! function here is total: any input gives an answer, never a panic, and every header
//! value built here is valid by construction (visible ASCII and spaces only, so CR, LF and
//! NUL cannot reach a response head whatever the request or a stored file name holds).
//!
//! These are the functions the property tests drive with arbitrary bytes
//! (`serve/tests/fuzz.rs`).

use http::HeaderValue;
use percent_encoding::{
    percent_decode, percent_decode_str, percent_encode, utf8_percent_encode, AsciiSet,
    NON_ALPHANUMERIC,
};

/// Why a request path cannot name anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// A segment's `%xx` escapes decode to bytes that are not UTF-8.
    #[error("path segment {0:?} is not UTF-8 once %-decoded")]
    NotUtf8(String),
}

/// The `/`-separated segments of a request path, each `%xx`-decoded (a `%` not followed by
/// two hex digits stays as it is, as browsers and `percent-encoding` treat it).
pub fn segments(path: &str) -> Result<Vec<String>, PathError> {
    path.trim_start_matches('/')
        .split('/')
        .map(|s| {
            percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| PathError::NotUtf8(s.to_string()))
        })
        .collect()
}

/// Whether the query string asks for a recursive listing.
pub fn recursive(query: &str) -> bool {
    query.split('&').any(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        k == "recursive" && matches!(v, "true" | "1" | "True")
    })
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` → `[start, end)` clamped to `size`; `None` when the
/// header is malformed or the range unsatisfiable. Only the first range of a list is served.
pub fn parse_range(h: &str, size: u64) -> Option<(u64, u64)> {
    let spec = h.trim().strip_prefix("bytes=")?;
    let spec = spec.split(',').next()?.trim();
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (size.saturating_sub(n), size)
    } else {
        let start: u64 = a.parse().ok()?;
        let end = if b.is_empty() {
            size
        } else {
            let last: u64 = b.parse().ok()?;
            if last < start {
                return None;
            }
            last.saturating_add(1).min(size)
        };
        (start, end)
    };
    (start < end && start < size).then_some((start, end))
}

/// Bytes escaped in header text: controls (and, always, every non-ASCII byte), and `%`
/// itself so the text stays decodable.
const HEADER_TEXT: &AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// Free text (an error message naming a path, say) as a header value: `%xx`-escapes every
/// byte that is not visible ASCII or space. Never fails, never carries CR or LF.
pub fn header_text(s: &str) -> HeaderValue {
    let escaped = percent_encode(s.as_bytes(), HEADER_TEXT).to_string();
    // Only visible ASCII and spaces remain: always a valid value. The fallback is never
    // taken; it keeps the function total without an `expect`.
    HeaderValue::from_str(&escaped).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// `%xx` decoding of [`header_text`]'s output (for tests and clients).
pub fn header_text_decode(v: &str) -> String {
    percent_decode_str(v).decode_utf8_lossy().into_owned()
}

/// RFC 8187 `attr-char`: ALPHA / DIGIT / `!#$&+-.^_`|~`; everything else is escaped.
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// `Content-Disposition` for a download of `path`: its last segment as a quoted ASCII
/// `filename` (other bytes, quotes and backslashes replaced by `_`) and, when that lost
/// anything, the exact name as RFC 5987/8187 `filename*=UTF-8''…`.
pub fn content_disposition(path: &str) -> HeaderValue {
    let name = path.rsplit('/').next().unwrap_or(path);
    let ascii: String = name
        .chars()
        .map(|c| {
            if (' '..='~').contains(&c) && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut v = format!("attachment; filename=\"{ascii}\"");
    if ascii != name {
        v.push_str("; filename*=UTF-8''");
        v.extend(utf8_percent_encode(name, ATTR_CHAR));
    }
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

/// An ASCII-only value (hex ids, numbers, `bytes a-b/n`) as a header value; anything else
/// goes through [`header_text`], so a value is never dropped and never unsafe.
pub fn header_ascii(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| header_text(s))
}

/// An HTTP date (`Last-Modified`) for seconds since the Unix epoch.
pub fn http_date(secs: u64) -> HeaderValue {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.min(1 << 40));
    header_ascii(&httpdate::fmt_http_date(t))
}

/// A form or query string that is not valid `application/x-www-form-urlencoded` UTF-8.
#[derive(Debug, thiserror::Error)]
#[error("malformed form encoding: {0}")]
pub struct FormError(String);

/// The `key=value` pairs of a form body or a query string, `+` and `%xx` decoded, in
/// order; a pair without `=` has an empty value. Non-UTF-8 (after decoding) is an error.
pub fn form_pairs(raw: &[u8]) -> Result<Vec<(String, String)>, FormError> {
    let decode = |s: &[u8]| -> Result<String, FormError> {
        let plus: Vec<u8> = s
            .iter()
            .map(|b| if *b == b'+' { b' ' } else { *b })
            .collect();
        let bytes: Vec<u8> = percent_decode(&plus).collect();
        String::from_utf8(bytes).map_err(|_| FormError("not UTF-8".into()))
    };
    raw.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = match p.iter().position(|b| *b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &p[p.len()..]),
            };
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Whether `key` is set to true (`true`, `True`, `1`) in the query string.
pub fn query_flag(query: &str, key: &str) -> bool {
    form_pairs(query.as_bytes())
        .unwrap_or_default()
        .iter()
        .any(|(k, v)| k == key && matches!(v.as_str(), "true" | "True" | "1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 10)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=95-200", 100), Some((95, 100)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=x-", 100), None);
        assert_eq!(parse_range("bytes=9-3", 100), None);
        assert_eq!(
            parse_range("bytes=0-18446744073709551615", 100),
            Some((0, 100))
        );
        assert_eq!(
            parse_range("bytes=-18446744073709551615", 100),
            Some((0, 100))
        );
        assert_eq!(parse_range("bytes=99999999999999999999-", 100), None);
    }

    #[test]
    fn decoding() {
        assert_eq!(segments("/a/refs%2Fpr%2F1").unwrap(), ["a", "refs/pr/1"]);
        assert_eq!(segments("a%20b").unwrap(), ["a b"]);
        assert_eq!(segments("100%").unwrap(), ["100%"]);
        assert_eq!(segments("%aé").unwrap(), ["%aé"]);
        assert_eq!(segments("%C3%A9").unwrap(), ["é"]);
        assert!(segments("%ff").is_err());
        assert!(recursive("a=b&recursive=True"));
        assert!(!recursive("recursive=false"));
    }

    #[test]
    fn header_values_are_safe() {
        let v = header_text("x\r\nInjected: yes é %");
        assert_eq!(v.to_str().unwrap(), "x%0D%0AInjected: yes %C3%A9 %25");
        assert_eq!(
            header_text_decode(v.to_str().unwrap()),
            "x\r\nInjected: yes é %"
        );
        assert_eq!(
            content_disposition("dir/modèle \"1\".bin")
                .to_str()
                .unwrap(),
            "attachment; filename=\"mod_le _1_.bin\"; \
             filename*=UTF-8''mod%C3%A8le%20%221%22.bin"
        );
        assert_eq!(
            content_disposition("config.json").to_str().unwrap(),
            "attachment; filename=\"config.json\""
        );
        assert_eq!(
            http_date(0).to_str().unwrap(),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }

    #[test]
    fn form_pairs_decode_plus_escapes_and_bare_keys() {
        let p = form_pairs(b"paths=a+b%2Fc.json&paths=x&expand=False&flag&&=v").unwrap();
        let want = [
            ("paths", "a b/c.json"),
            ("paths", "x"),
            ("expand", "False"),
            ("flag", ""),
            ("", "v"),
        ];
        let got: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
        assert!(form_pairs(b"paths=%ff").is_err());
        assert!(form_pairs(&[b'p', b'=', 0xc3]).is_err());
        assert_eq!(form_pairs(b"a=%zz%").unwrap()[0].1, "%zz%");
    }
}
