//! Bearer tokens: the token a request carries, and the name `whoami` gives a token the
//! token file names none for.

use http::header::{self, HeaderMap};

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The name `whoami` gives a token that has none in the token file: `token-` and the first
/// 8 hex digits of its BLAKE3 hash (which says nothing of the token itself).
pub fn default_token_name(token: &str) -> String {
    format!("token-{}", &blake3::hash(token.as_bytes()).to_hex()[..8])
}
