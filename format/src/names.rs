//! Validated names: repository ids (`org/name`), commit ids (40 hex digits) and ref names.
//!
//! Everything a user types that ends up in an object key passes through here first, so a
//! key can never escape its prefix (`..`, `/`, empty segments).

use std::fmt;

use bincode::{Decode, Encode};

use crate::error::{FormatError, Result};

/// A Hugging Face style repository id: `org/name`.
///
/// Encoded as its two parts (bincode: two strings). Decoding applies [`RepoId::parse`]'s
/// rules, so a repository id read from any object or bundle can never make a key escape
/// its prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Encode)]
pub struct RepoId {
    org: String,
    name: String,
}

impl<Context> Decode<Context> for RepoId {
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> std::result::Result<Self, bincode::error::DecodeError> {
        let org = String::decode(decoder)?;
        let name = String::decode(decoder)?;
        if is_valid_repo_part(&org) && is_valid_repo_part(&name) {
            Ok(RepoId { org, name })
        } else {
            Err(bincode::error::DecodeError::OtherString(format!(
                "invalid repo id {org:?}/{name:?}"
            )))
        }
    }
}
bincode::impl_borrow_decode!(RepoId);

/// Whether `s` is a valid part (organisation or name) of a Hub repository id: letters,
/// digits, `-`, `_`, `.`; not empty, at most 96 bytes, no `--` or `..`, not starting or
/// ending with `-` or `.` (the Hub's rules, which keep cache folder names unambiguous).
/// The one definition: [`RepoId::parse`] and the Hub client's checks use it.
pub fn is_valid_repo_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !s.contains("--")
        && !s.contains("..")
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

impl RepoId {
    /// Parses `org/name` (Hugging Face rules: letters, digits, `-`, `_`, `.`; no `--` or
    /// `..`; at most 96 characters a part).
    pub fn parse(s: &str) -> Result<RepoId> {
        let mut parts = s.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(org), Some(name), None)
                if is_valid_repo_part(org) && is_valid_repo_part(name) =>
            {
                Ok(RepoId {
                    org: org.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(FormatError::Invalid(format!(
                "invalid repo id {s:?}: expected ORG/NAME with letters, digits, '-', '_' or '.'"
            ))),
        }
    }

    /// The organisation part.
    pub fn org(&self) -> &str {
        &self.org
    }

    /// The name part.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id as the Hub compares ids: `org/name` in ASCII lowercase. Two ids that differ
    /// only in case name one repository on the Hub (`My-Org/LLM` is `my-org/llm`), so
    /// policies (allow-list, locks) and the store's lookups compare this form.
    pub fn folded(&self) -> String {
        format!("{}/{}", self.org, self.name).to_ascii_lowercase()
    }

    /// Whether `other` names the same repository as the Hub compares ids (ASCII case
    /// ignored).
    pub fn same_repo(&self, other: &RepoId) -> bool {
        self.org.eq_ignore_ascii_case(&other.org) && self.name.eq_ignore_ascii_case(&other.name)
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.org, self.name)
    }
}

/// A commit id: 20 bytes, written as 40 lower-case hex digits (a git sha1 from the Hub, or
/// one derived from the content when the source has none).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct CommitId(pub [u8; 20]);

impl CommitId {
    /// Parses exactly 40 hex digits (either case).
    pub fn parse(s: &str) -> Result<CommitId> {
        if s.len() != 40 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(FormatError::Invalid(format!(
                "invalid commit sha {s:?}: expected 40 hex digits"
            )));
        }
        let mut out = [0u8; 20];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let txt = std::str::from_utf8(pair).map_err(|_| FormatError::Invalid(s.into()))?;
            out[i] = u8::from_str_radix(txt, 16).map_err(|_| FormatError::Invalid(s.into()))?;
        }
        Ok(CommitId(out))
    }

    /// 40 lower-case hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CommitId({})", self.to_hex())
    }
}

/// Checks a ref name: `main`, `v1.0`, `refs/pr/1`. Letters, digits, `.`, `_`, `-`, `/`;
/// no empty segment, no `..`, at most 200 characters; not 40 hex digits (that would read
/// as a commit).
pub fn check_ref_name(name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/');
    let bad_segment = |s: &str| s.is_empty() || s == "." || s == "..";
    let reads_as_commit = |n: &str| n.len() == 40 && n.bytes().all(|b| b.is_ascii_hexdigit());
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.chars().all(allowed)
        && !name.split('/').any(bad_segment)
        && !name.contains("..")
        && !reads_as_commit(name);
    if ok {
        Ok(())
    } else {
        Err(FormatError::Invalid(format!(
            "invalid ref name {name:?}: use letters, digits, '.', '_', '-' and '/' (not a 40-hex sha)"
        )))
    }
}

/// Splits `ORG/NAME@REV` into the repo id and the revision.
pub fn parse_repo_rev(s: &str) -> Result<(RepoId, String)> {
    match s.split_once('@') {
        Some((repo, rev)) if !rev.is_empty() => Ok((RepoId::parse(repo)?, rev.to_string())),
        _ => Err(FormatError::Invalid(format!(
            "expected ORG/NAME@REV, got {s:?}"
        ))),
    }
}

/// Longest release label key.
pub const MAX_LABEL_KEY: usize = 64;

/// Why a release label key is refused (docs/format/bytes.md, "Release records").
pub fn check_label_key(key: &str) -> Result<(), String> {
    let ok_first = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let ok_rest = key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if key.is_empty() || key.len() > MAX_LABEL_KEY || !ok_first || !ok_rest {
        return Err(format!(
            "label key {key:?}: 1 to {MAX_LABEL_KEY} characters of A-Z a-z 0-9 . _ -, \
             starting with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert_eq!(
            RepoId::parse("meta-llama/Llama-3.1-8B")
                .unwrap()
                .to_string(),
            "meta-llama/Llama-3.1-8B"
        );
        for bad in [
            "", "a", "a/b/c", "../x", "a/..", "a--b/c", "a/b-", "a /b", "a/.b",
        ] {
            assert!(RepoId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn ids_compare_without_case_as_on_the_hub() {
        let a = RepoId::parse("My-Org/LLM").unwrap();
        let b = RepoId::parse("my-org/llm").unwrap();
        assert!(a.same_repo(&b) && b.same_repo(&a));
        assert_eq!(a.folded(), "my-org/llm");
        assert_ne!(a, b, "the spelling is kept");
        assert!(!a.same_repo(&RepoId::parse("my-org/llm2").unwrap()));
        assert!(!a.same_repo(&RepoId::parse("my-orgl/lm").unwrap()));
    }

    #[test]
    fn commits_and_refs() {
        let c = CommitId::parse("0123456789ABCDEF0123456789abcdef01234567").unwrap();
        assert_eq!(c.to_hex(), "0123456789abcdef0123456789abcdef01234567");
        assert!(CommitId::parse("0123").is_err());
        check_ref_name("main").unwrap();
        check_ref_name("refs/pr/1").unwrap();
        check_ref_name("v1.0").unwrap();
        for bad in [
            "",
            "a//b",
            "../x",
            "a/../b",
            "x y",
            "0123456789abcdef0123456789abcdef01234567",
            "/a",
        ] {
            assert!(check_ref_name(bad).is_err(), "{bad:?} accepted");
        }
        let (r, rev) = parse_repo_rev("a/b@main").unwrap();
        let cfg = bincode::config::standard();
        let good = bincode::encode_to_vec(&r, cfg).unwrap();
        let (back, _): (RepoId, usize) = bincode::decode_from_slice(&good, cfg).unwrap();
        assert_eq!(back, r);
        for (org, name) in [
            ("victim", "model/refs"),
            ("..", "x"),
            ("a", ""),
            ("a/b", "c"),
        ] {
            let bytes = bincode::encode_to_vec((org, name), cfg).unwrap();
            let got: std::result::Result<(RepoId, usize), _> =
                bincode::decode_from_slice(&bytes, cfg);
            assert!(got.is_err(), "{org}/{name} decoded");
        }
        assert_eq!((r.to_string(), rev.as_str()), ("a/b".to_string(), "main"));
        assert!(parse_repo_rev("a/b").is_err());
    }
}
